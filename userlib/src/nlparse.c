// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Parsers for the kernel's netlink replies: acks with their extended-ack
 * text, and qdisc / class dumps.  They take a buffer and nothing else, so
 * that they can be fuzzed; every length is checked before it is read,
 * since a reply is input like any other.
 */
#include <errno.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <linux/gen_stats.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>

#include "linux/pkt_sched_p3.h"
#include "internal.h"

/* p3.h's P3_MAX_BANDS (libp3's API) sizes the per-band arrays that a class
 * dump fills, one per band the kernel may have (64). */
_Static_assert(P3_MAX_BANDS == 64, "libp3's band count is the kernel's");

/* First message of buf that is complete, or NULL. */
static struct nlmsghdr *nl_first(const void *buf, size_t len, int *rem)
{
	if (len > INT32_MAX)
		len = INT32_MAX;
	*rem = (int)len;
	if (!nlmsg_ok(buf, *rem))
		return NULL;
	return (struct nlmsghdr *)buf;
}

static int nl_error_code(const struct nlmsghdr *nlh, const struct nlmsgerr **e)
{
	if (nlmsg_datalen(nlh) < (int)sizeof(struct nlmsgerr))
		return -P3_ENLPARSE;
	*e = nlmsg_data(nlh);
	/* Kernel errors are small negative errnos; anything else is noise. */
	if ((*e)->error > 0 || (*e)->error < -4095)
		return -P3_ENLPARSE;
	return 0;
}

/* Copy NLMSGERR_ATTR_MSG, if the kernel sent one, for p3_last_extack(). */
static void nl_extack(const struct nlmsghdr *nlh, const struct nlmsgerr *e)
{
	struct nlattr *tb[NLMSGERR_ATTR_MAX + 1];
	size_t off = sizeof(*e), len = (size_t)nlmsg_datalen(nlh);
	const char *s;

	p3_set_extack("", 0);
	if (!(nlh->nlmsg_flags & NLM_F_ACK_TLVS))
		return;
	/* Without NLM_F_CAPPED the request's payload is echoed first. */
	if (!(nlh->nlmsg_flags & NLM_F_CAPPED)) {
		if (e->msg.nlmsg_len < NLMSG_HDRLEN)
			return;
		off += NLMSG_ALIGN(e->msg.nlmsg_len - NLMSG_HDRLEN);
	}
	if (off >= len)
		return;
	if (nla_parse(tb, NLMSGERR_ATTR_MAX, (struct nlattr *)((char *)e + off),
		      (int)(len - off), NULL) < 0 || !tb[NLMSGERR_ATTR_MSG])
		return;
	s = nla_data(tb[NLMSGERR_ATTR_MSG]);
	p3_set_extack(s, strnlen(s, (size_t)nla_len(tb[NLMSGERR_ATTR_MSG])));
}

int p3_nl_parse_ack(const void *buf, size_t len, uint32_t seq, int *err)
{
	const struct nlmsgerr *e;
	struct nlmsghdr *nlh;
	int rem, r;

	for (nlh = nl_first(buf, len, &rem); nlh && nlmsg_ok(nlh, rem);
	     nlh = nlmsg_next(nlh, &rem)) {
		if (nlh->nlmsg_type != NLMSG_ERROR || nlh->nlmsg_seq != seq)
			continue;
		r = nl_error_code(nlh, &e);
		if (r)
			return r;
		*err = e->error;
		if (e->error)
			nl_extack(nlh, e);
		return 1;
	}
	return 0;
}

static void parse_basic(const struct nlattr *a, struct p3_band_stats *s)
{
	const uint8_t *p = nla_data(a);
	uint32_t pkts;

	/* struct gnet_stats_basic: u64 bytes, u32 packets (padded to 16). */
	if (nla_len(a) < 12)
		return;
	memcpy(&s->bytes, p, 8);
	memcpy(&pkts, p + 8, 4);
	if (pkts > s->packets)
		s->packets = pkts;
}

static void parse_queue(const struct nlattr *a, struct p3_band_stats *s)
{
	struct gnet_stats_queue q;

	if (nla_len(a) < (int)sizeof(q))
		return;
	memcpy(&q, nla_data(a), sizeof(q));
	s->qlen = q.qlen;
	s->backlog = q.backlog;
	s->drops = q.drops;
	s->requeues = q.requeues;
	s->overlimits = q.overlimits;
}

static void parse_xstats(const struct nlattr *a, struct p3_qdisc_stats *st)
{
	struct tc_p3_xstats x = { 0 };
	struct p3_xstats *o = &st->xstats;
	size_t n = (size_t)nla_len(a);

	/* A shorter struct (a module of another version) reads as 0 past
	 * its end; libp3's own struct keeps its first layout, drops_alloc
	 * (always 0) included.
	 */
	memcpy(&x, nla_data(a), n < sizeof(x) ? n : sizeof(x));
	*o = (struct p3_xstats){
		.flows = x.flows, .flows_active = x.flows_active,
		.flows_created = x.flows_created, .flows_gc = x.flows_gc,
		.preemptions = x.preemptions, .boosts = x.boosts,
		.untagged = x.untagged, .drops_limit = x.drops_limit,
		.drops_memory = x.drops_memory, .throttled = x.throttled,
	};
	st->drops_deadline = x.drops_deadline;
	st->drops_tolerant = x.drops_tolerant;
	st->spilled = x.spilled;
	st->have_xstats = 1;
}

static void parse_stats2(struct nlattr *nest, struct p3_band_stats *s,
			 struct p3_qdisc_stats *st)
{
	struct nlattr *tb[TCA_STATS_MAX + 1];

	if (nla_parse_nested(tb, TCA_STATS_MAX, nest, NULL) < 0)
		return;
	*s = (struct p3_band_stats){ 0 };
	/* TCA_STATS_PKT64 carries the true count once u32 wraps. */
	if (tb[TCA_STATS_PKT64] && nla_len(tb[TCA_STATS_PKT64]) >= 8)
		memcpy(&s->packets, nla_data(tb[TCA_STATS_PKT64]), 8);
	if (tb[TCA_STATS_BASIC])
		parse_basic(tb[TCA_STATS_BASIC], s);
	if (tb[TCA_STATS_QUEUE])
		parse_queue(tb[TCA_STATS_QUEUE], s);
	if (st && tb[TCA_STATS_APP] && nla_len(tb[TCA_STATS_APP]) > 0)
		parse_xstats(tb[TCA_STATS_APP], st);
}

static int opt_u8(struct nlattr **tb, int type, uint8_t *v)
{
	if (!tb[type] || nla_len(tb[type]) < 1)
		return 0;
	*v = nla_get_u8(tb[type]);
	return 1;
}

static int opt_u32(struct nlattr **tb, int type, uint32_t *v)
{
	if (!tb[type] || nla_len(tb[type]) < 4)
		return 0;
	*v = nla_get_u32(tb[type]);
	return 1;
}

static uint8_t tag_from_uapi(uint8_t src)
{
	switch (src) {
	case TC_P3_TAG_PRIORITY:
		return P3_METHOD_PRIORITY;
	case TC_P3_TAG_DSCP:
		return P3_METHOD_DSCP;
	case TC_P3_TAG_MARK:
		return P3_METHOD_MARK;
	}
	return P3_METHOD_DEFAULT;
}

static void parse_opts(struct nlattr *nest, struct p3_qdisc_opts *o)
{
	struct nlattr *tb[TCA_P3_MAX + 1];
	uint8_t tag;

	*o = (struct p3_qdisc_opts){ 0 };
	if (nla_parse_nested(tb, TCA_P3_MAX, nest, NULL) < 0)
		return;
	o->mask |= opt_u8(tb, TCA_P3_BANDS, &o->bands) ? P3_QOPT_BANDS : 0;
	o->mask |= opt_u8(tb, TCA_P3_DEFAULT, &o->defband) ? P3_QOPT_DEFAULT : 0;
	if (opt_u8(tb, TCA_P3_TAG, &tag) && tag_from_uapi(tag)) {
		o->tag = tag_from_uapi(tag);
		o->mask |= P3_QOPT_TAG;
	}
	o->mask |= opt_u32(tb, TCA_P3_LIMIT, &o->limit) ? P3_QOPT_LIMIT : 0;
	o->mask |= opt_u32(tb, TCA_P3_MEMORY, &o->memory) ? P3_QOPT_MEMORY : 0;
	o->mask |= opt_u32(tb, TCA_P3_QUANTUM, &o->quantum) ? P3_QOPT_QUANTUM : 0;
	o->mask |= opt_u32(tb, TCA_P3_BUCKETS, &o->buckets) ? P3_QOPT_BUCKETS : 0;
	/* A module before 0.3 sends none: the bit stays clear, flows 0. */
	o->mask |= opt_u32(tb, TCA_P3_FLOWS, &o->flows) ? P3_QOPT_FLOWS : 0;
	if (tb[TCA_P3_RATE] && nla_len(tb[TCA_P3_RATE]) >= 8) {
		memcpy(&o->rate, nla_data(tb[TCA_P3_RATE]), 8);
		o->mask |= P3_QOPT_RATE;
	}
}

/* The tcmsg and attributes of a tc message, or -P3_ENLPARSE. */
static int parse_tc(struct nlmsghdr *nlh, struct tcmsg **tcm, struct nlattr **tb)
{
	if (nlmsg_parse(nlh, sizeof(struct tcmsg), tb, TCA_MAX, NULL) < 0)
		return -P3_ENLPARSE;
	*tcm = nlmsg_data(nlh);
	return 0;
}

static int is_kind(struct nlattr *kind, const char *name)
{
	size_t n = strlen(name) + 1;

	return kind && nla_len(kind) >= (int)n && !memcmp(nla_data(kind), name, n);
}

static void qdisc_match(struct p3_nl_dump *d, const struct tcmsg *tcm, struct nlattr **tb)
{
	if ((uint32_t)tcm->tcm_ifindex != d->ifindex || d->found)
		return;
	if ((d->handle && tcm->tcm_handle != d->handle) ||
	    (d->parent && tcm->tcm_parent != d->parent))
		return;
	if (!is_kind(tb[TCA_KIND], "p3")) {
		d->other_kind = d->parent || d->handle;
		return;
	}
	d->found = 1;
	d->st->handle = tcm->tcm_handle;
	d->st->parent = tcm->tcm_parent;
	if (tb[TCA_OPTIONS])
		parse_opts(tb[TCA_OPTIONS], &d->st->opts);
	if (tb[TCA_STATS2])
		parse_stats2(tb[TCA_STATS2], &d->st->total, d->st);
}

static void parse_class_opts(struct nlattr *nest, uint32_t *deadline_us)
{
	struct nlattr *tb[TCA_P3_CLASS_MAX + 1];

	if (nla_parse_nested(tb, TCA_P3_CLASS_MAX, nest, NULL) < 0)
		return;
	opt_u32(tb, TCA_P3_CLASS_DEADLINE, deadline_us);
}

static void class_match(struct p3_nl_dump *d, const struct tcmsg *tcm, struct nlattr **tb)
{
	uint32_t minor = TC_H_MIN(tcm->tcm_handle);

	if ((uint32_t)tcm->tcm_ifindex != d->ifindex ||
	    TC_H_MAJ(tcm->tcm_handle) != TC_H_MAJ(d->st->handle) ||
	    minor < 1 || minor > P3_MAX_BANDS || !tb[TCA_STATS2])
		return;
	parse_stats2(tb[TCA_STATS2], &d->st->band[minor - 1], NULL);
	if (tb[TCA_OPTIONS])
		parse_class_opts(tb[TCA_OPTIONS], &d->st->deadline_us[minor - 1]);
	if (minor > d->st->nbands)
		d->st->nbands = minor;
}

static int parse_dump(const void *buf, size_t len, struct p3_nl_dump *d, int type,
		      void (*match)(struct p3_nl_dump *, const struct tcmsg *, struct nlattr **))
{
	struct nlattr *tb[TCA_MAX + 1];
	const struct nlmsgerr *e;
	struct nlmsghdr *nlh;
	struct tcmsg *tcm;
	int rem, err;

	for (nlh = nl_first(buf, len, &rem); nlh && nlmsg_ok(nlh, rem);
	     nlh = nlmsg_next(nlh, &rem)) {
		if (nlh->nlmsg_type == NLMSG_DONE)
			return 1;
		if (nlh->nlmsg_type == NLMSG_ERROR) {
			err = nl_error_code(nlh, &e);
			if (!err && e->error)
				nl_extack(nlh, e);
			return err ? err : e->error ? e->error : 1;
		}
		if (nlh->nlmsg_type != type)
			continue;
		err = parse_tc(nlh, &tcm, tb);
		if (err)
			return err;
		match(d, tcm, tb);
	}
	return 0;
}

int p3_nl_parse_qdiscs(const void *buf, size_t len, struct p3_nl_dump *d)
{
	return parse_dump(buf, len, d, RTM_NEWQDISC, qdisc_match);
}

int p3_nl_parse_classes(const void *buf, size_t len, struct p3_nl_dump *d)
{
	return parse_dump(buf, len, d, RTM_NEWTCLASS, class_match);
}
