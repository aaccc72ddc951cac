/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * Netlink ABI of the p3 qdisc (Priority-based Parameter Propagation).
 *
 * Shared by the kernel module (kmod/), the tc plugin (tc/) and libp3
 * (userlib/).  This header is the project's own: it never redefines
 * anything from <linux/pkt_sched.h>.
 */
#ifndef _UAPI_LINUX_PKT_SCHED_P3_H
#define _UAPI_LINUX_PKT_SCHED_P3_H

#include <linux/types.h>

/* Band 0 is the most urgent; classes H:1..H:N are bands 0..N-1.  Ranges
 * and defaults are the kernel's to state (in extacks and dumps), not ABI.
 */

/*
 * Where the tag is read from.  A priority or mark t in 1..bands selects
 * band t-1; 0 or any out-of-range value is "untagged" and goes to the
 * default band.  A DSCP code point selects the band TCA_P3_DSCPMAP gives it.
 */
enum tc_p3_tag_source {
	TC_P3_TAG_PRIORITY,	/* skb->priority (SO_PRIORITY) */
	TC_P3_TAG_DSCP,	/* IPv4 TOS / IPv6 traffic class, DSCP bits */
	TC_P3_TAG_MARK,	/* skb->mark (SO_MARK, iptables MARK) */
	__TC_P3_TAG_MAX
};
#define TC_P3_TAG_MAX (__TC_P3_TAG_MAX - 1)

/* Attributes nested in TCA_OPTIONS (which must carry NLA_F_NESTED). */
enum {
	TCA_P3_UNSPEC,
	TCA_P3_BANDS,		/* u8: number of bands, 2..64 */
	TCA_P3_DEFAULT,		/* u8: band of untagged packets, < bands */
	TCA_P3_TAG,		/* u8: enum tc_p3_tag_source */
	TCA_P3_LIMIT,		/* u32: packet limit */
	TCA_P3_MEMORY,		/* u32: skb truesize limit, 0: the most */
	TCA_P3_QUANTUM,		/* u32: DRR quantum in bytes */
	TCA_P3_RATE,		/* u64: pacing rate in bytes/s, 0 = unpaced */
	TCA_P3_PAD,
	TCA_P3_BUCKETS,		/* u32: flow hash buckets, a power of two */
	TCA_P3_FLOWS,		/* u32: most flow entries */
	TCA_P3_DSCPMAP,		/* u8[TC_P3_DSCP_CODES]: a band each */
	__TCA_P3_MAX
};
#define TCA_P3_MAX (__TCA_P3_MAX - 1)

/*
 * TCA_P3_DSCPMAP replaces the whole map.  A code point mapped to
 * TC_P3_DSCP_BUILTIN keeps its built-in meaning, which follows RFC 4594 and
 * RFC 8622: libp3's level L (the L-th code point of RFC 2474's local-use
 * pool xxxx11, then of pool xxxx01 without Lower-Effort) selects band L;
 * Lower-Effort (1) and CS1 (8) the least urgent band; every other code
 * point, EF, CS6 and CS7 among them, is untagged.
 */
#define TC_P3_DSCP_CODES	64
#define TC_P3_DSCP_BUILTIN	0xff

/*
 * Attributes nested in a class's TCA_OPTIONS (NLA_F_NESTED), as in
 * "tc class change dev D classid H:k p3 deadline 2ms".  Classes are the
 * bands themselves: they can be changed, never added or deleted.
 */
enum {
	TCA_P3_CLASS_UNSPEC,
	/* u32: microseconds a packet of this band may wait before it is
	 * dropped instead of sent (a loss-tolerant band); 0: reliable
	 */
	TCA_P3_CLASS_DEADLINE,
	__TCA_P3_CLASS_MAX
};
#define TCA_P3_CLASS_MAX (__TCA_P3_CLASS_MAX - 1)

/* Qdisc-wide statistics, sent as TCA_STATS_APP. */
struct tc_p3_xstats {
	__u32	flows;		/* flow entries allocated now */
	__u32	flows_active;	/* flows holding packets now */
	__u64	flows_created;
	__u64	flows_gc;	/* idle flows freed or taken over */
	/* switches to a more urgent band while a less urgent one held packets */
	__u64	preemptions;
	/* flows raised to a more urgent band by a newer packet (priority
	 * inheritance)
	 */
	__u64	boosts;
	__u64	untagged;	/* packets sent to the default band */
	__u64	drops_limit;	/* pushed out by the packet limit */
	__u64	drops_memory;	/* pushed out by the byte limit */
	__u64	throttled;	/* dequeues deferred by the rate pacer */
	/* loss-tolerant packets older than their band's deadline, dropped at
	 * dequeue
	 */
	__u64	drops_deadline;
	/* loss-tolerant packets pushed out by a limit (also counted in
	 * drops_limit or drops_memory)
	 */
	__u64	drops_tolerant;
	/* packets queued in their band's shared flow: no flow entry could be
	 * had (the "flows" cap, or no memory)
	 */
	__u64	spilled;
};

#endif /* _UAPI_LINUX_PKT_SCHED_P3_H */
