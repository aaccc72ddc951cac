// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Netlink reply parsing on hand-built messages (qdisc and class dumps,
 * acks with extended-ack text, malformed replies), then the qdisc calls
 * against the running kernel inside a private network namespace, where
 * sch_p3 is not loaded and nothing real can be disturbed.
 */
#include <errno.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <linux/gen_stats.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#include "linux/pkt_sched_p3.h"
#include "internal.h"
#include "tap.h"
#include "util.h"

static uint8_t buf[16384];
static size_t used;

static void put_msg(struct nl_msg *m)
{
	struct nlmsghdr *h = nlmsg_hdr(m);

	memcpy(buf + used, h, h->nlmsg_len);
	used += NLMSG_ALIGN(h->nlmsg_len);
	nlmsg_free(m);
}

static struct nl_msg *tc_msg(int type, int ifindex, uint32_t handle, uint32_t parent,
			     const char *kind)
{
	struct tcmsg t = { .tcm_family = AF_UNSPEC, .tcm_ifindex = ifindex,
			   .tcm_handle = handle, .tcm_parent = parent };
	struct nl_msg *m = nlmsg_alloc_simple(type, NLM_F_MULTI);

	nlmsg_append(m, &t, sizeof(t), NLMSG_ALIGNTO);
	if (kind)
		nla_put_string(m, TCA_KIND, kind);
	return m;
}

static void put_stats(struct nl_msg *m, uint64_t bytes, uint32_t pkts, uint32_t qlen,
		      const void *app, size_t applen)
{
	struct gnet_stats_basic b = { .bytes = bytes, .packets = pkts };
	struct gnet_stats_queue q = { .qlen = qlen, .backlog = qlen * 1000, .drops = 3,
				      .requeues = 4, .overlimits = 5 };
	struct nlattr *n = nla_nest_start(m, TCA_STATS2);

	nla_put(m, TCA_STATS_BASIC, sizeof(b), &b);
	nla_put(m, TCA_STATS_QUEUE, sizeof(q), &q);
	if (app)
		nla_put(m, TCA_STATS_APP, (int)applen, app);
	nla_nest_end(m, n);
}

static void put_done(void)
{
	struct nl_msg *m = nlmsg_alloc_simple(NLMSG_DONE, NLM_F_MULTI);
	int zero = 0;

	nlmsg_append(m, &zero, sizeof(zero), NLMSG_ALIGNTO);
	put_msg(m);
}

static void build_qdisc_dump(size_t xlen)
{
	struct tc_p3_xstats x = { .flows = 7, .flows_active = 2, .preemptions = 99,
				  .throttled = 5, .drops_deadline = 41, .drops_tolerant = 43,
				  .spilled = 47 };
	struct nl_msg *m;
	struct nlattr *o;

	used = 0;
	put_msg(tc_msg(RTM_NEWQDISC, 3, 0, TC_H_ROOT, "noqueue"));	/* other device */
	m = tc_msg(RTM_NEWQDISC, 4, 0x00100000, TC_H_ROOT, "p3");
	o = nla_nest_start(m, TCA_OPTIONS);
	nla_put_u8(m, TCA_P3_BANDS, 8);
	nla_put_u8(m, TCA_P3_DEFAULT, 7);
	nla_put_u8(m, TCA_P3_TAG, TC_P3_TAG_DSCP);
	nla_put_u32(m, TCA_P3_LIMIT, 10000);
	nla_put_u32(m, TCA_P3_QUANTUM, 1514);
	nla_put_u64(m, TCA_P3_RATE, 6250000);
	nla_put_u32(m, TCA_P3_FLOWS, 4096);
	nla_nest_end(m, o);
	put_stats(m, 123456789, 4242, 3, &x, xlen);
	put_msg(m);
	put_msg(tc_msg(RTM_NEWQDISC, 4, 0x00200000, 0x00100001, "pfifo"));
	put_done();
}

static void test_qdisc_dump(void)
{
	struct p3_qdisc_stats st;
	struct p3_nl_dump d = { .ifindex = 4, .st = &st };

	memset(&st, 0, sizeof(st));
	build_qdisc_dump(sizeof(struct tc_p3_xstats));
	ok(p3_nl_parse_qdiscs(buf, used, &d) == 1 && d.found, "qdisc dump: p3 found, DONE seen");
	ok(st.handle == 0x00100000 && st.parent == TC_H_ROOT, "handle 10: at root");
	ok(st.opts.mask == (P3_QOPT_BANDS | P3_QOPT_DEFAULT | P3_QOPT_TAG | P3_QOPT_LIMIT |
			    P3_QOPT_QUANTUM | P3_QOPT_RATE | P3_QOPT_FLOWS) &&
	   st.opts.bands == 8 && st.opts.defband == 7 && st.opts.tag == P3_METHOD_DSCP &&
	   st.opts.limit == 10000 && st.opts.quantum == 1514 && st.opts.rate == 6250000 &&
	   st.opts.flows == 4096,
	   "options parsed, absent memory and buckets left out of the mask");
	ok(st.total.bytes == 123456789 && st.total.packets == 4242 && st.total.qlen == 3 &&
	   st.total.backlog == 3000 && st.total.drops == 3 && st.total.requeues == 4 &&
	   st.total.overlimits == 5, "basic and queue statistics");
	ok(st.have_xstats && st.xstats.flows == 7 && st.xstats.preemptions == 99 &&
	   st.xstats.throttled == 5, "xstats");
	ok(st.drops_deadline == 41 && st.drops_tolerant == 43 && st.spilled == 47,
	   "the counters added since the first layout land after it");

	memset(&st, 0, sizeof(st));
	d = (struct p3_nl_dump){ .ifindex = 4, .st = &st };
	build_qdisc_dump(16);	/* an older module: only the first 16 bytes */
	ok(p3_nl_parse_qdiscs(buf, used, &d) == 1 && st.have_xstats && st.xstats.flows == 7 &&
	   st.xstats.flows_active == 2 && st.xstats.preemptions == 0 && st.xstats.throttled == 0 &&
	   st.drops_deadline == 0 && st.drops_tolerant == 0 && st.spilled == 0,
	   "a shorter xstats struct is zero-filled");
	memset(&st, 0, sizeof(st));
	d = (struct p3_nl_dump){ .ifindex = 4, .st = &st };
	build_qdisc_dump(offsetof(struct tc_p3_xstats, spilled));	/* a 0.2 module */
	ok(p3_nl_parse_qdiscs(buf, used, &d) == 1 && st.drops_tolerant == 43 && st.spilled == 0,
	   "xstats without spilled: it reads as 0");

	d = (struct p3_nl_dump){ .ifindex = 4, .parent = 0x00100001, .st = &st };
	ok(p3_nl_parse_qdiscs(buf, used, &d) == 1 && !d.found && d.other_kind,
	   "another kind at the requested parent is reported");
	d = (struct p3_nl_dump){ .ifindex = 9, .st = &st };
	ok(p3_nl_parse_qdiscs(buf, used, &d) == 1 && !d.found && !d.other_kind,
	   "nothing on another device");
	d = (struct p3_nl_dump){ .ifindex = 4, .st = &st };
	ok(p3_nl_parse_qdiscs(buf, used - 20, &d) == 0, "without DONE the dump is not over");
}

static void test_class_dump(void)
{
	struct p3_qdisc_stats st = { .handle = 0x00100000 };
	struct p3_nl_dump d = { .ifindex = 4, .st = &st };
	struct nl_msg *m;
	struct nlattr *o;
	uint32_t b;

	used = 0;
	for (b = 1; b <= 3; b++) {
		m = tc_msg(RTM_NEWTCLASS, 4, 0x00100000 | b, 0x00100000, "p3");
		/* Band 1 is loss-tolerant; band 2's options are cut short. */
		o = nla_nest_start(m, TCA_OPTIONS);
		if (b == 2)
			nla_put_u32(m, TCA_P3_CLASS_DEADLINE, 2000);
		if (b == 3)
			nla_put_u16(m, TCA_P3_CLASS_DEADLINE, 7);
		nla_nest_end(m, o);
		put_stats(m, 1000 * b, 10 * b, b, NULL, 0);
		put_msg(m);
	}
	m = tc_msg(RTM_NEWTCLASS, 4, 0x00200001, 0x00200000, "htb");	/* another qdisc */
	put_stats(m, 5, 5, 5, NULL, 0);
	put_msg(m);
	m = tc_msg(RTM_NEWTCLASS, 4, 0x00100000 | 999, 0x00100000, "p3");	/* minor > 64 */
	put_stats(m, 5, 5, 5, NULL, 0);
	put_msg(m);
	put_done();
	ok(p3_nl_parse_classes(buf, used, &d) == 1 && st.nbands == 3,
	   "class dump: 3 bands, foreign and out-of-range classes ignored");
	ok(st.band[0].bytes == 1000 && st.band[2].packets == 30 && st.band[1].qlen == 2,
	   "per-band statistics land in their band");
	ok(st.deadline_us[0] == 0 && st.deadline_us[1] == 2000 && st.deadline_us[2] == 0,
	   "a band's deadline is read, a short one ignored");
}

static void build_ack(int error, const char *text, int capped)
{
	struct nlmsghdr *h = (struct nlmsghdr *)buf, orig = { .nlmsg_len = NLMSG_HDRLEN + 20,
							       .nlmsg_type = RTM_NEWQDISC,
							       .nlmsg_seq = 5 };
	struct nlmsgerr *e = (struct nlmsgerr *)(buf + NLMSG_HDRLEN);
	size_t off = NLMSG_HDRLEN + sizeof(*e), tl;
	struct nlattr *a;

	memset(buf, 0, 512);
	e->error = error;
	e->msg = orig;
	if (!capped)
		off += 20;	/* the echoed request payload */
	h->nlmsg_type = NLMSG_ERROR;
	h->nlmsg_seq = 5;
	h->nlmsg_flags = (capped ? NLM_F_CAPPED : 0) | (text ? NLM_F_ACK_TLVS : 0);
	if (text) {
		tl = strlen(text) + 1;
		a = (struct nlattr *)(buf + off);
		a->nla_type = NLMSGERR_ATTR_MSG;
		a->nla_len = (uint16_t)(NLA_HDRLEN + tl);
		memcpy(buf + off + NLA_HDRLEN, text, tl);
		off += NLA_ALIGN(a->nla_len);
	}
	h->nlmsg_len = (uint32_t)off;
	used = off;
}

static void test_ack(void)
{
	int err = 1;

	build_ack(-EINVAL, "Invalid number of bands", 1);
	ok(p3_nl_parse_ack(buf, used, 5, &err) == 1 && err == -EINVAL &&
	   !strcmp(p3_last_extack(), "Invalid number of bands"),
	   "capped ack: errno and extack text");
	build_ack(-ERANGE, "Default band out of range", 0);
	ok(p3_nl_parse_ack(buf, used, 5, &err) == 1 && err == -ERANGE &&
	   !strcmp(p3_last_extack(), "Default band out of range"),
	   "uncapped ack: the echoed request is skipped");
	build_ack(0, NULL, 1);
	ok(p3_nl_parse_ack(buf, used, 5, &err) == 1 && err == 0, "success ack");
	ok(p3_nl_parse_ack(buf, used, 6, &err) == 0, "an ack for another sequence is ignored");
	build_ack(-EINVAL, "x", 1);
	((struct nlmsghdr *)buf)->nlmsg_len = NLMSG_HDRLEN + 2;
	ok(p3_nl_parse_ack(buf, NLMSG_HDRLEN + 2, 5, &err) == -P3_ENLPARSE,
	   "a truncated error message is malformed");
	build_ack(12345, NULL, 1);
	ok(p3_nl_parse_ack(buf, used, 5, &err) == -P3_ENLPARSE, "a positive error is malformed");
	build_ack(-EINVAL, "no terminating NUL", 1);
	buf[used - 1] = 'X';	/* overwrite the NUL and padding */
	buf[used - 2] = 'X';
	buf[used - 3] = 'X';
	ok(p3_nl_parse_ack(buf, used, 5, &err) == 1 && strlen(p3_last_extack()) < 64,
	   "extack text without NUL is bounded");
}

static void test_garbage(void)
{
	struct p3_qdisc_stats st;
	struct p3_nl_dump d = { .ifindex = 4, .st = &st };
	uint64_t rs = 5;
	int i, r, sane = 1, err;
	size_t len, k;

	build_qdisc_dump(sizeof(struct tc_p3_xstats));
	len = used;
	for (i = 0; i < 20000; i++) {
		build_qdisc_dump(sizeof(struct tc_p3_xstats));
		for (k = rnd_range(&rs, 1, 4); k; k--)
			buf[rnd_range(&rs, 0, len - 1)] = (uint8_t)rnd_next(&rs);
		memset(&st, 0, sizeof(st));
		d = (struct p3_nl_dump){ .ifindex = 4, .st = &st };
		r = p3_nl_parse_qdiscs(buf, rnd_range(&rs, 0, len), &d);
		sane &= r <= 1 && st.nbands == 0;
		p3_nl_parse_classes(buf, len, &d);
		p3_nl_parse_ack(buf, len, 0, &err);
	}
	ok(sane, "20000 corrupted dumps parse without harm");
}

static int link_up(const char *name)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM, 0), err;

	strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
	err = ioctl(fd, SIOCGIFFLAGS, &ifr);
	ifr.ifr_flags |= IFF_UP;
	err = err ? err : ioctl(fd, SIOCSIFFLAGS, &ifr);
	close(fd);
	return err;
}

/* Leave small non-zero words where the next call's locals will be: a
 * struct the library forgot to size would read one as its size field. */
static __attribute__((noinline)) void dirty_stack(void)
{
	volatile uint32_t junk[1024];
	size_t i;

	for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
		junk[i] = 4;
}

/* Live calls, in a network namespace of our own. */
static int child_live(void)
{
	struct p3_qdisc_opts o = { .mask = P3_QOPT_BANDS, .bands = 4 };
	struct p3_qdisc_stats st = { .size = sizeof(st) };
	int bad = 0, err;

	if (unshare(CLONE_NEWNET))
		return 100;
	/* A down lo holds the hidden noop qdisc; up, it shows noqueue. */
	if (link_up("lo"))
		return 100;
	err = p3_qdisc_add("lo", P3_ROOT, 0, &o);
	bad |= (err >= 0) << 0;
	bad |= (err == -ENOENT && !*p3_last_extack()) << 1;	/* text must come with ENOENT */
	bad |= (p3_qdisc_get("lo", P3_ROOT, 0, &st) != -P3_ENOTP3) << 2;
	bad |= (p3_qdisc_del("lo", P3_ROOT, 0) != -P3_ENOTP3) << 3;
	bad |= (p3_qdisc_stats("nosuchdev0", P3_ROOT, 0, &st) != -ENODEV) << 4;
	bad |= (p3_qdisc_get("lo", 0, 0, &st) != -ENOENT) << 5;
	o.mask = 1u << 20;
	bad |= (p3_qdisc_add("lo", P3_ROOT, 0, &o) != -EINVAL) << 6;
	dirty_stack();
	bad |= (p3_qdisc_del("nosuchdev0", P3_ROOT, 0) != -ENODEV) << 7;
	return bad;
}

static void test_live(void)
{
	int status = -1;
	pid_t pid = fork();

	if (!pid)
		_exit(child_live());
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) == 100) {
		ok(1, "live netlink calls # SKIP cannot create a network namespace");
		return;
	}
	status = WEXITSTATUS(status);
	ok(!(status & 3), "add where sch_p3 is not loaded fails, with the kernel's reason");
	ok(!(status & 4), "get on lo (another qdisc at root): ENOTP3");
	ok(!(status & 8), "del refuses to delete a qdisc that is not p3");
	ok(!(status & 16), "unknown device: ENODEV");
	ok(!(status & 32), "no p3 anywhere on the device: ENOENT");
	ok(!(status & 64), "unknown option bits: EINVAL");
	ok(!(status & 128), "del whatever the stack held before: ENODEV, not EINVAL");
}

int main(void)
{
	test_qdisc_dump();
	test_class_dump();
	test_ack();
	test_garbage();
	test_live();
	return tap_done();
}
