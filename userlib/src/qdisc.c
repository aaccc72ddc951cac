// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Qdisc control through libnl-route.  libnl has no module for p3, so the
 * request is built by libnl up to TCA_KIND and the TCA_OPTIONS nest is
 * appended here; replies are read raw and parsed by nlparse.c, which also
 * collects the kernel's extended-ack text.
 */
#include <errno.h>
#include <net/if.h>
#include <stdlib.h>
#include <netlink/netlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <netlink/socket.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/tc.h>

#include "linux/pkt_sched_p3.h"
#include "internal.h"

#ifndef SOL_NETLINK
#define SOL_NETLINK	270
#endif

/*
 * flows went into the first layout's tail padding: struct p3_qdisc_stats
 * holds a struct p3_qdisc_opts, and a larger one would move every field
 * after it for the callers built before.  Where uint64_t is only 4-aligned
 * (i386) there was no padding, and this fails rather than break them.
 */
_Static_assert(sizeof(struct p3_qdisc_opts) ==
	       (offsetof(struct p3_qdisc_opts, buckets) + sizeof(uint32_t) +
		_Alignof(struct p3_qdisc_opts) - 1) / _Alignof(struct p3_qdisc_opts) *
	       _Alignof(struct p3_qdisc_opts), "p3_qdisc_opts keeps its size");

/* libnl reports its own NLE_* codes; callers get errnos. */
static int nle_errno(int nle)
{
	switch (-nle) {
	case NLE_NOMEM:
		return -ENOMEM;
	case NLE_PERM:
		return -EPERM;
	case NLE_NODEV:
		return -ENODEV;
	case NLE_MSGSIZE:
		return -EMSGSIZE;
	case NLE_INVAL:
		return -EINVAL;
	case NLE_AGAIN:
		return -EAGAIN;
	}
	return -EIO;
}

static int nl_open(struct nl_sock **out)
{
	struct nl_sock *sk = nl_socket_alloc();
	int one = 1, err;

	if (!sk)
		return -ENOMEM;
	err = nl_connect(sk, NETLINK_ROUTE);
	if (err) {
		nl_socket_free(sk);
		return nle_errno(err);
	}
	/* Best effort: kernels before 4.12 simply send no text. */
	setsockopt(nl_socket_get_fd(sk), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
	setsockopt(nl_socket_get_fd(sk), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
	*out = sk;
	return 0;
}

typedef int (*nl_parser)(const void *buf, size_t len, void *ctx, uint32_t seq);

/* Send msg, then feed replies to parse until it returns non-zero. */
static int nl_transact(struct nl_sock *sk, struct nl_msg *msg, nl_parser parse, void *ctx)
{
	struct sockaddr_nl peer;
	unsigned char *buf;
	uint32_t seq;
	int n, r;

	n = nl_send_auto(sk, msg);
	if (n < 0)
		return nle_errno(n);
	seq = nlmsg_hdr(msg)->nlmsg_seq;
	do {
		buf = NULL;
		n = nl_recv(sk, &peer, &buf, NULL);
		if (n <= 0) {
			free(buf);
			return n < 0 ? nle_errno(n) : -P3_ENLPARSE;
		}
		r = parse(buf, (size_t)n, ctx, seq);
		free(buf);
	} while (!r);
	return r < 0 ? r : 0;
}

static int parse_ack(const void *buf, size_t len, void *ctx, uint32_t seq)
{
	int err = 0, r;

	(void)ctx;
	r = p3_nl_parse_ack(buf, len, seq, &err);
	if (r <= 0)
		return r;
	return err ? err : 1;
}

static int parse_qdiscs(const void *buf, size_t len, void *ctx, uint32_t seq)
{
	(void)seq;
	return p3_nl_parse_qdiscs(buf, len, ctx);
}

static int parse_classes(const void *buf, size_t len, void *ctx, uint32_t seq)
{
	(void)seq;
	return p3_nl_parse_classes(buf, len, ctx);
}

static uint8_t tag_to_uapi(uint8_t method)
{
	switch (method) {
	case P3_METHOD_PRIORITY:
		return TC_P3_TAG_PRIORITY;
	case P3_METHOD_MARK:
		return TC_P3_TAG_MARK;
	}
	return TC_P3_TAG_DSCP;
}

static int put_opts(struct nl_msg *msg, const struct p3_qdisc_opts *o)
{
	struct nlattr *nest;
	int err = 0;

	if (!o || !o->mask)
		return 0;
	/* The kernel parses TCA_OPTIONS strictly: it must say it is nested. */
	nest = nla_nest_start(msg, TCA_OPTIONS | NLA_F_NESTED);
	if (!nest)
		return -ENOMEM;
	if (o->mask & P3_QOPT_BANDS)
		err |= nla_put_u8(msg, TCA_P3_BANDS, o->bands);
	if (o->mask & P3_QOPT_DEFAULT)
		err |= nla_put_u8(msg, TCA_P3_DEFAULT, o->defband);
	if (o->mask & P3_QOPT_TAG)
		err |= nla_put_u8(msg, TCA_P3_TAG, tag_to_uapi(o->tag));
	if (o->mask & P3_QOPT_LIMIT)
		err |= nla_put_u32(msg, TCA_P3_LIMIT, o->limit);
	if (o->mask & P3_QOPT_MEMORY)
		err |= nla_put_u32(msg, TCA_P3_MEMORY, o->memory);
	if (o->mask & P3_QOPT_QUANTUM)
		err |= nla_put_u32(msg, TCA_P3_QUANTUM, o->quantum);
	if (o->mask & P3_QOPT_RATE)
		err |= nla_put_u64(msg, TCA_P3_RATE, o->rate);
	if (o->mask & P3_QOPT_BUCKETS)
		err |= nla_put_u32(msg, TCA_P3_BUCKETS, o->buckets);
	if (o->mask & P3_QOPT_FLOWS)
		err |= nla_put_u32(msg, TCA_P3_FLOWS, o->flows);
	if (err)
		return -EMSGSIZE;
	return nla_nest_end(msg, nest) ? -EMSGSIZE : 0;
}

/* caller_size: what the caller's struct holds (its size, 0: the first layout). */
static int check_opts(const struct p3_qdisc_opts *o, size_t caller_size)
{
	if (!o)
		return 0;
	if (o->mask & ~(P3_QOPT_BANDS | P3_QOPT_DEFAULT | P3_QOPT_TAG | P3_QOPT_LIMIT |
			P3_QOPT_MEMORY | P3_QOPT_QUANTUM | P3_QOPT_RATE | P3_QOPT_BUCKETS |
			P3_QOPT_FLOWS))
		return -EINVAL;
	/* The bit without the field: sending the 0 we hold would only earn
	 * the kernel's range error, for a value the caller never gave. */
	if ((o->mask & P3_QOPT_FLOWS) &&
	    caller_size < offsetof(struct p3_qdisc_opts, flows) + sizeof(o->flows))
		return -EINVAL;
	if ((o->mask & P3_QOPT_TAG) && (o->tag < P3_METHOD_DSCP || o->tag > P3_METHOD_MARK))
		return -EINVAL;
	return 0;
}

/* Build an RTM_NEWQDISC / RTM_DELQDISC for a "p3" qdisc with libnl. */
static int build_msg(int ifindex, uint32_t parent, uint32_t handle, int del, int flags,
		     const struct p3_qdisc_opts *o, struct nl_msg **msg)
{
	struct rtnl_qdisc *q = rtnl_qdisc_alloc();
	int err;

	if (!q)
		return -ENOMEM;
	rtnl_tc_set_ifindex(TC_CAST(q), ifindex);
	rtnl_tc_set_parent(TC_CAST(q), parent);
	rtnl_tc_set_handle(TC_CAST(q), handle);
	err = rtnl_tc_set_kind(TC_CAST(q), "p3");
	if (!err)
		err = del ? rtnl_qdisc_build_delete_request(q, msg)
			  : rtnl_qdisc_build_add_request(q, flags, msg);
	rtnl_qdisc_put(q);
	if (err)
		return nle_errno(err);
	err = put_opts(*msg, o);
	if (err)
		nlmsg_free(*msg);
	return err;
}

static int qdisc_request(const char *ifname, uint32_t parent, uint32_t handle, int del,
			 int flags, const struct p3_qdisc_opts *opts)
{
	struct p3_qdisc_opts mine = { 0 }, *o = NULL;
	size_t caller_size = 0;
	struct nl_sock *sk;
	struct nl_msg *msg;
	int ifindex, err;

	p3_set_extack("", 0);
	if (opts) {
		err = p3_struct_in(&mine, sizeof(mine), P3_QDISC_OPTS_SIZE_1, opts);
		if (err)
			return err;
		o = &mine;
		caller_size = opts->size ? opts->size : P3_QDISC_OPTS_SIZE_1;
	}
	if (!ifname || check_opts(o, caller_size))
		return -EINVAL;
	ifindex = (int)if_nametoindex(ifname);
	if (!ifindex)
		return -ENODEV;
	err = build_msg(ifindex, parent ? parent : P3_ROOT, handle, del, flags, o, &msg);
	if (err)
		return err;
	err = nl_open(&sk);
	if (!err) {
		err = nl_transact(sk, msg, parse_ack, NULL);
		nl_socket_free(sk);
	}
	nlmsg_free(msg);
	return err;
}

P3_EXPORT int p3_qdisc_add(const char *ifname, uint32_t parent, uint32_t handle,
			   const struct p3_qdisc_opts *opts)
{
	return qdisc_request(ifname, parent, handle, 0, NLM_F_CREATE | NLM_F_EXCL, opts);
}

P3_EXPORT int p3_qdisc_change(const char *ifname, uint32_t parent, uint32_t handle,
			      const struct p3_qdisc_opts *opts)
{
	return qdisc_request(ifname, parent, handle, 0, 0, opts);
}

P3_EXPORT int p3_qdisc_replace(const char *ifname, uint32_t parent, uint32_t handle,
			       const struct p3_qdisc_opts *opts)
{
	return qdisc_request(ifname, parent, handle, 0, NLM_F_CREATE | NLM_F_REPLACE, opts);
}

static int dump(struct nl_sock *sk, int type, struct p3_nl_dump *d, uint32_t parent,
		nl_parser parse)
{
	struct tcmsg tcm = { .tcm_family = AF_UNSPEC, .tcm_ifindex = (int)d->ifindex,
			     .tcm_parent = parent };
	struct nl_msg *msg = nlmsg_alloc_simple(type, NLM_F_DUMP);
	int err;

	if (!msg)
		return -ENOMEM;
	err = nlmsg_append(msg, &tcm, sizeof(tcm), NLMSG_ALIGNTO);
	/* Without it the kernel hides built-in qdiscs (noqueue at root), and
	 * "not p3" could not be told from "nothing there". */
	if (!err && type == RTM_GETQDISC)
		err = nla_put_flag(msg, TCA_DUMP_INVISIBLE);
	err = err ? -ENOMEM : nl_transact(sk, msg, parse, d);
	nlmsg_free(msg);
	return err;
}

static int qdisc_query_into(const char *ifname, uint32_t parent, uint32_t handle,
			    struct p3_qdisc_stats *st, int classes)
{
	struct p3_nl_dump d = { .parent = parent, .handle = handle, .st = st };
	struct nl_sock *sk;
	int err;

	if (!ifname)
		return -EINVAL;
	d.ifindex = if_nametoindex(ifname);
	if (!d.ifindex)
		return -ENODEV;
	err = nl_open(&sk);
	if (err)
		return err;
	err = dump(sk, RTM_GETQDISC, &d, 0, parse_qdiscs);
	if (!err && !d.found)
		err = d.other_kind ? -P3_ENOTP3 : -ENOENT;
	/* The dump's parent filter keeps classes of other qdiscs out. */
	if (!err && classes)
		err = dump(sk, RTM_GETTCLASS, &d, st->handle, parse_classes);
	nl_socket_free(sk);
	return err;
}

/* The caller's struct gets as much as its size field says it holds. */
static int qdisc_query(const char *ifname, uint32_t parent, uint32_t handle,
		       struct p3_qdisc_stats *out, int classes)
{
	struct p3_qdisc_stats st = { 0 };
	int n, err;

	p3_set_extack("", 0);
	if (!out)
		return -EINVAL;
	n = p3_struct_out_len(out, sizeof(st), P3_QDISC_STATS_SIZE_1);
	if (n < 0)
		return n;
	err = qdisc_query_into(ifname, parent, handle, &st, classes);
	if (err)
		return err;
	st.size = (uint32_t)n;
	st.opts.size = sizeof(st.opts);
	memcpy(out, &st, (size_t)n);
	return 0;
}

P3_EXPORT int p3_qdisc_get(const char *ifname, uint32_t parent, uint32_t handle,
			   struct p3_qdisc_stats *out)
{
	return qdisc_query(ifname, parent, handle, out, 0);
}

P3_EXPORT int p3_qdisc_stats(const char *ifname, uint32_t parent, uint32_t handle,
			     struct p3_qdisc_stats *out)
{
	return qdisc_query(ifname, parent, handle, out, 1);
}

P3_EXPORT int p3_qdisc_del(const char *ifname, uint32_t parent, uint32_t handle)
{
	struct p3_qdisc_stats st = { .size = sizeof(st) };
	int err;

	/* Look first: deleting "whatever sits at root" must not hit another
	 * kind of qdisc. */
	err = p3_qdisc_get(ifname, parent ? parent : P3_ROOT, handle, &st);
	if (err)
		return err;
	return qdisc_request(ifname, st.parent, st.handle, 1, 0, NULL);
}
