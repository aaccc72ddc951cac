// SPDX-License-Identifier: GPL-2.0
/*
 * test-mkmsg: write to stdout one RTM_NEWQDISC message shaped like the p3
 * kernel's dump (every option, and tc_p3_xstats in TCA_STATS2/APP), for
 * "tc monitor file" to print through q_p3.so.  The argument picks the
 * xstats a kernel of another age would send:
 *
 *   full   sizeof(struct tc_p3_xstats)
 *   short  only the fields before "preemptions" (an older kernel)
 *   long   8 more bytes than we know (a newer kernel)
 *   newtag as full, with a tag source this plugin has no name for
 *   noflows as full, without TCA_P3_FLOWS (a kernel before it)
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/gen_stats.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/pkt_sched.h>
#include <linux/pkt_sched_p3.h>

struct msgbuf {
	struct nlmsghdr	n;
	struct tcmsg	t;
	char		buf[1024];
};

static struct rtattr *put(struct msgbuf *m, int type, const void *data,
			  size_t len)
{
	struct rtattr *rta = (void *)((char *)&m->n + NLMSG_ALIGN(m->n.nlmsg_len));

	rta->rta_type = type;
	rta->rta_len = RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(rta), data, len);
	m->n.nlmsg_len = NLMSG_ALIGN(m->n.nlmsg_len) + RTA_ALIGN(rta->rta_len);
	return rta;
}

static void end(struct msgbuf *m, struct rtattr *nest)
{
	nest->rta_len = (char *)&m->n + m->n.nlmsg_len - (char *)nest;
}

static void put_u8(struct msgbuf *m, int type, __u8 v)
{
	put(m, type, &v, sizeof(v));
}

static void put_u32(struct msgbuf *m, int type, __u32 v)
{
	put(m, type, &v, sizeof(v));
}

static void put_options(struct msgbuf *m, __u8 tag, int flows)
{
	struct rtattr *nest = put(m, TCA_OPTIONS | NLA_F_NESTED, NULL, 0);
	__u64 rate = 1250000;

	put_u8(m, TCA_P3_BANDS, 4);
	put_u8(m, TCA_P3_DEFAULT, 3);
	put_u8(m, TCA_P3_TAG, tag);
	put_u32(m, TCA_P3_LIMIT, 100);
	put_u32(m, TCA_P3_MEMORY, 4 << 20);
	put_u32(m, TCA_P3_QUANTUM, 3028);
	/* As nla_put_u64_64bit() does when the u64 would be misaligned. */
	put(m, TCA_P3_PAD, NULL, 0);
	put(m, TCA_P3_RATE, &rate, sizeof(rate));
	put_u32(m, TCA_P3_BUCKETS, 65536);
	if (flows)
		put_u32(m, TCA_P3_FLOWS, 4096);
	end(m, nest);
}

static void put_stats(struct msgbuf *m, size_t xlen)
{
	struct gnet_stats_basic bs = { .bytes = 123456, .packets = 789 };
	struct gnet_stats_queue qs = { .backlog = 3028, .drops = 17, .qlen = 2 };
	char x[sizeof(struct tc_p3_xstats) + 8];
	struct tc_p3_xstats st = {
		.flows		= 1,
		.flows_active	= 2,
		.flows_created	= 3,
		.flows_gc	= 4,
		.preemptions	= 5000000005ULL,	/* needs 64 bits */
		.boosts		= 6,
		.untagged	= 7,
		.drops_limit	= 8,
		.drops_memory	= 9,
		.throttled	= 11,
		.drops_deadline	= 12,
		.drops_tolerant	= 13,
		.spilled	= 14,
	};
	struct rtattr *nest = put(m, TCA_STATS2 | NLA_F_NESTED, NULL, 0);

	memset(x, 0xff, sizeof(x));
	memcpy(x, &st, sizeof(st));
	put(m, TCA_STATS_BASIC, &bs, sizeof(bs));
	put(m, TCA_STATS_QUEUE, &qs, sizeof(qs));
	put(m, TCA_STATS_APP, x, xlen);
	end(m, nest);
}

int main(int argc, char **argv)
{
	const char *v = argc > 1 ? argv[1] : "full";
	size_t xlen = sizeof(struct tc_p3_xstats);
	struct msgbuf m = {
		.n.nlmsg_len	= NLMSG_LENGTH(sizeof(struct tcmsg)),
		.n.nlmsg_type	= RTM_NEWQDISC,
		.t.tcm_family	= AF_UNSPEC,
		.t.tcm_ifindex	= 1,
		.t.tcm_handle	= 0x80010000,
		.t.tcm_parent	= TC_H_ROOT,
		.t.tcm_info	= 1,
	};

	if (!strcmp(v, "short"))
		xlen = offsetof(struct tc_p3_xstats, preemptions);
	else if (!strcmp(v, "long"))
		xlen += 8;
	else if (strcmp(v, "full") && strcmp(v, "newtag") && strcmp(v, "noflows"))
		return 2;

	put(&m, TCA_KIND, "p3", 3);
	put_options(&m, strcmp(v, "newtag") ? TC_P3_TAG_DSCP : __TC_P3_TAG_MAX,
		    strcmp(v, "noflows") != 0);
	put_stats(&m, xlen);
	return fwrite(&m, 1, m.n.nlmsg_len, stdout) == m.n.nlmsg_len ? 0 : 1;
}
