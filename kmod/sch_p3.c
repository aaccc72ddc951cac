// SPDX-License-Identifier: GPL-2.0
/*
 * sch_p3.c	Priority-based Parameter Propagation (P3) scheduler.
 *
 * N bands in strict priority (band 0 first), so that the parameter slices
 * a training job's next forward pass needs first preempt the rest on the
 * wire, for every process on the host.  Packets queue per flow (a local
 * socket, else the flow hash); a flow is never reordered, and is served at
 * its most urgent packet's band (priority inheritance).  Flows of a band
 * share by DRR.  See docs/design.md (invariants) and docs/tc-p3.8.
 */

#include <linux/bitops.h>
#include <linux/hash.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <net/dsfield.h>
#include <net/netlink.h>
#include <net/pkt_cls.h>
#include <net/pkt_sched.h>
#include <net/sch_generic.h>
#include <net/sock.h>
#include <linux/pkt_sched_p3.h>

#include "compat.h"

/* An empty flow's entry, and so its DRR deficit, is not taken over by a
 * new flow for this long, unless the table is at its "flows" cap.
 */
#define P3_FLOW_IDLE	HZ
/* Freed later than recycled: new flows reuse entries, not the allocator. */
#define P3_FLOW_EXPIRE	(2 * P3_FLOW_IDLE)
/* A GC pass runs inline under the root lock, as fq_gc() does: this bounds
 * its cost to one packet.  No timer, so it never runs beside reset/destroy.
 */
#define P3_GC_BATCH	8
#define P3_SPILL_LOG	10	/* buckets of the spill index */
#define P3_SIZE_CLASSES	32	/* fls(backlog) - 1, see p3_size_refile() */
#define P3_MIN_QUANTUM	256
#define P3_MAX_QUANTUM	BIT(20)
/* Pacer bucket depth beyond the largest packet paced: makes up for a late
 * watchdog, and bounds bursts at rate x P3_PACE_HORIZON plus that packet.
 */
#define P3_PACE_HORIZON	(10 * NSEC_PER_MSEC)
/* A byte cap below a full GSO packet's truesize would drop every one. */
#define P3_MIN_BANDS	2
#define P3_MAX_BANDS	64
#define P3_DEFAULT_BANDS	8
#define P3_DEFAULT_LIMIT	10000
/* DSCP needs no privilege and, unlike priority and mark, survives a
 * packet's crossing from a container's namespace.
 */
#define P3_DEFAULT_TAG	TC_P3_TAG_DSCP
/* Flow entries: above the default limit, so that at the defaults a packet
 * spills (tc_p3_xstats.spilled) only when memory runs out.
 */
#define P3_DEFAULT_FLOWS	16384
#define P3_MIN_FLOWS	1
#define P3_MAX_FLOWS	BIT(20)
/* The flow hash table: a power of two */
#define P3_DEFAULT_BUCKETS	4096
#define P3_MIN_BUCKETS	16
#define P3_MAX_BUCKETS	BIT(20)
/* The longest deadline: 10 s, far beyond any useful one, and within the
 * 17 s that the per-packet time stamp spans.
 */
#define P3_MAX_DEADLINE_US	10000000
#define P3_MIN_MEMORY	(64U << 10)
/* fq_codel's bound; the most keeps the u32 truesize counters from wrapping */
#define P3_DEFAULT_MEMORY	(32U << 20)
#define P3_MAX_MEMORY	BIT(30)
#define P3_MAX_LIMIT	BIT(20)
/* Loss-tolerant packets' enqueue time, in 2^10 ns modulo 2^24 (17 s, past
 * P3_MAX_DEADLINE_US) to fit skb->cb; older ones may go late.
 */
#define P3_STAMP_SHIFT	10
#define P3_STAMP_BITS	24
#define P3_STAMP_MASK	((1U << P3_STAMP_BITS) - 1)
/* Expired packets one dequeue drops, or one peek steps over (the root lock
 * is held); a peek past it returns the last one, sent late (p3_scan()).
 */
#define P3_EXPIRE_BATCH	256

/* Packed so that two links, band and stamp fit the 20 bytes of skb->cb
 * left to a qdisc; the links stay 8-byte aligned.
 */
struct p3_skb_cb {
	struct sk_buff	*min_prev;	/* the flow's minimum deque */
	struct sk_buff	*min_next;
	u32		band:6;		/* as classified, before inheritance */
	u32		tolerant:1;	/* its band had a deadline at enqueue */
	u32		spill_last:1;	/* newest spilled packet of its key */
	u32		stamp:P3_STAMP_BITS;	/* enqueue time, if tolerant */
} __packed;

/* Found by key in the flow table; each band also has a shared flow of
 * key 0 outside it, for packets that can have no entry (p3_spill()).
 */
struct p3_flow {
	struct sk_buff		*head;		/* FIFO, linked by skb->next */
	struct sk_buff		*tail;
	/* Packets more urgent than all behind them (p3_flow_push()) */
	struct sk_buff		*min_head;
	struct sk_buff		*min_tail;
	/* On bands[band].flows if qlen, else idle (shared flow: no list) */
	struct list_head	band_node;
	struct hlist_node	hash_node;
	/* On by_size[size_slot] if qlen; may stay there when it empties */
	struct hlist_node	size_node;
	unsigned long		key;
	unsigned long		idle_since;	/* jiffies, valid if !qlen */
	u32			qlen;
	u32			backlog;	/* bytes */
	u32			memory;		/* truesize of its packets */
	int			deficit;
	u16			size_slot;	/* band * P3_SIZE_CLASSES + class */
	u8			band;		/* served from, valid if qlen */
};

struct p3_band {
	struct list_head		flows;	/* active flows, DRR order */
	u32				sizes;	/* bit c: a flow of class c */
	u32				deadline;	/* stamp units, 0: reliable */
	u32				deadline_us;	/* as configured */
	u32				memory;	/* truesize of its packets */
	struct p3_flow			spill;	/* shared flow, see p3_spill() */
	struct gnet_stats_basic_sync	bstats;	/* sent from this band */
	struct gnet_stats_queue		qstats;	/* qlen, backlog, drops */
};

struct p3_config {
	u64	rate;		/* bytes per second, 0 = unpaced */
	u32	limit;		/* packets */
	u32	memory;		/* bytes of skb truesize */
	u32	quantum;
	u32	buckets;	/* flow hash table, a power of two */
	u32	flows;		/* most flow entries */
	u8	dscpmap[TC_P3_DSCP_CODES];	/* as given: a band or BUILTIN */
	u8	bands;
	u8	default_band;
	bool	default_set;	/* else default follows bands - 1 */
	u8	tag;
};

struct p3_sched_data {
	/* enqueue and dequeue */
	u64			active;		/* bit b: band b holds packets */
	u64			paid_until;	/* pacer: link time spent, ns */
	u64			pace_depth;	/* pacer: bucket depth, ns */
	u32			paced_max_len;	/* pacer: largest packet seen */
	u32			memory_usage;	/* truesize of queued skbs */
	u32			flows_active;
	/* Last peek's packet and flow (NULL: lone): the parent charged it, so
	 * the next dequeue sends it, expired or not, dropping the expired
	 * packets peek passed over before it in its flow; overflow never
	 * takes it.
	 */
	struct sk_buff		*peeked;
	struct p3_flow		*peeked_flow;
	/* p3_hold_lone(); while set, no flow holds packets */
	struct sk_buff		*lone;
	u64			tolerant;	/* bit b: band b has a deadline */
	u8			last_band;	/* served by the last dequeue */
	/* All P3_MAX_BANDS, whatever "bands" is, so that a change never
	 * allocates; apart, as they would make the qdisc an order-2 kzalloc.
	 */
	struct p3_band		*bands;
	struct p3_config	cfg;

	/* enqueue: classification and flow lookup */
	u8			dscp_band[TC_P3_DSCP_CODES];	/* P3_UNTAGGED */
	struct tcf_proto __rcu	*filter_list;
	struct tcf_block	*block;
	struct hlist_head	*flow_table;
	u32			flows;
	u32			buckets_log;
	/* by band and size class, see p3_size_refile() */
	struct hlist_head	*by_size;
	/* Empty flows, oldest first: the GC never walks the table. */
	struct list_head	idle;
	/* see p3_spill_bucket() */
	struct sk_buff		**spill_index;
	u32			spill_keys;

	struct tc_p3_xstats	stats;		/* under the qdisc lock */
	struct qdisc_watchdog	watchdog;	/* pacing */
};

static struct kmem_cache *p3_flow_cache __read_mostly;

static struct p3_skb_cb *p3_cb(const struct sk_buff *skb)
{
	qdisc_cb_private_validate(skb, sizeof(struct p3_skb_cb));
	return (struct p3_skb_cb *)qdisc_skb_cb(skb)->data;
}

static u32 p3_stamp_now(void)
{
	return (ktime_get_ns() >> P3_STAMP_SHIFT) & P3_STAMP_MASK;
}

/* A band made reliable again keeps every packet it holds. */
static bool p3_tolerant(const struct p3_sched_data *q,
			const struct sk_buff *skb)
{
	const struct p3_skb_cb *cb = p3_cb(skb);

	return cb->tolerant && q->bands[cb->band].deadline;
}

/* *now is the stamp clock, read on first need (0: not yet). */
static bool p3_expired(const struct p3_sched_data *q,
		       const struct sk_buff *skb, u32 *now)
{
	const struct p3_skb_cb *cb = p3_cb(skb);

	if (!p3_tolerant(q, skb))
		return false;
	if (!*now)
		*now = p3_stamp_now() | 1;
	return ((*now - cb->stamp) & P3_STAMP_MASK) >
	       q->bands[cb->band].deadline;
}

/* Out of line: its buffer for the tags would put the stack protector's
 * canary on every enqueue.
 */
static noinline __be16 p3_vlan_protocol(struct sk_buff *skb)
{
	return vlan_get_protocol(skb);
}

static u32 p3_dscp(struct sk_buff *skb)
{
	int nhoff = skb_network_offset(skb);
	__be16 proto = skb->protocol;

	if (unlikely(eth_type_vlan(proto)))
		proto = p3_vlan_protocol(skb);
	switch (proto) {
	case htons(ETH_P_IP):
		if (!pskb_may_pull(skb, nhoff + sizeof(struct iphdr)))
			return 0;
		return ipv4_get_dsfield(ip_hdr(skb)) >> 2;
	case htons(ETH_P_IPV6):
		if (!pskb_may_pull(skb, nhoff + sizeof(struct ipv6hdr)))
			return 0;
		return ipv6_get_dsfield(ipv6_hdr(skb)) >> 2;
	}
	return 0;
}

/* Class H:1 is band 0; -1 if there is no such class. */
static int p3_minor_to_band(const struct p3_sched_data *q, u32 minor)
{
	return minor >= 1 && minor <= q->cfg.bands ? minor - 1 : -1;
}

#define P3_UNTAGGED	0xff
#define P3_DSCP_LE	1	/* RFC 8622 Lower-Effort */
#define P3_DSCP_CS1	8	/* RFC 4594 low-priority data */

/* A code point's band by TC_P3_DSCP_BUILTIN.  libp3 tags level L with the
 * L-th code point of RFC 2474's local-use pool xxxx11, then of pool xxxx01,
 * so that no level takes a code point with a standard meaning.
 */
static u8 p3_dscp_builtin(u32 dscp, u8 bands)
{
	u32 level;

	if (dscp == P3_DSCP_LE || dscp == P3_DSCP_CS1)
		return bands - 1;
	if ((dscp & 3) == 3)
		level = dscp >> 2;
	else if ((dscp & 3) == 1)
		level = 15 + (dscp >> 2);
	else
		return P3_UNTAGGED;
	return level < bands ? level : P3_UNTAGGED;
}

static int p3_tag_to_band(struct p3_sched_data *q, struct sk_buff *skb)
{
	u32 tag;

	if (q->cfg.tag == TC_P3_TAG_DSCP) {
		tag = q->dscp_band[p3_dscp(skb)];
		if (tag != P3_UNTAGGED)
			return tag;
	} else {
		tag = q->cfg.tag == TC_P3_TAG_MARK ? skb->mark : skb->priority;
		if (tag >= 1 && tag <= q->cfg.bands)
			return tag - 1;
	}
	q->stats.untagged++;
	return q->cfg.default_band;
}

/* The filters' band, -(enqueue's return) if an action consumed the packet,
 * or P3_BY_TAG.  Out of line: its tcf_result would put the stack
 * protector's canary on every enqueue.
 */
#define P3_BY_TAG	INT_MIN
static noinline int p3_filter_classify(struct sk_buff *skb,
				       struct p3_sched_data *q,
				       struct tcf_proto *fl)
{
	struct tcf_result res;
	int err;

	err = tcf_classify(skb, NULL, fl, &res, false);
#ifdef CONFIG_NET_CLS_ACT
	switch (err) {
	case TC_ACT_STOLEN:
	case TC_ACT_QUEUED:
	case TC_ACT_TRAP:
		return -(NET_XMIT_SUCCESS | __NET_XMIT_STOLEN);
	case TC_ACT_SHOT:
		return -(NET_XMIT_SUCCESS | __NET_XMIT_BYPASS);
	}
#endif
	if (err < 0)
		return P3_BY_TAG;
	err = p3_minor_to_band(q, TC_H_MIN(res.classid));
	return err < 0 ? P3_BY_TAG : err;
}

/* The band, or minus enqueue's return (negative, never a band) when a
 * filter action consumed the packet.
 */
static int p3_classify(struct sk_buff *skb, struct Qdisc *sch)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct tcf_proto *fl;
	int band;

	if (TC_H_MAJ(skb->priority) == sch->handle) {
		band = p3_minor_to_band(q, TC_H_MIN(skb->priority));
		if (band >= 0)
			return band;
	}

	fl = rcu_dereference_bh(q->filter_list);
	if (fl) {
		band = p3_filter_classify(skb, q, fl);
		if (band != P3_BY_TAG)
			return band;
	}
	return p3_tag_to_band(q, skb);
}

/* What every queued packet goes through is __always_inline, as gcc kept it
 * out of line; what only rare paths need is noinline, keeping its code and
 * stack canary off the common path (docs/benchmarks.md, "Inlining").
 */

/* A local stream socket names its flow exactly, and cannot be freed
 * while it has packets here (each holds sk_wmem_alloc).  Other packets
 * fall back to the flow hash, so that a datagram socket's packets to its
 * many peers are as many flows (a connected one's are one); bit 0 keeps
 * those keys apart from socket pointers.  A packet's key never changes
 * while it is queued: the type is the socket's for life, the hash the
 * packet's.
 */
static unsigned long p3_flow_key(struct sk_buff *skb)
{
	struct sock *sk = skb->sk;

	if (sk && sk_fullsock(sk) && sk->sk_type == SOCK_STREAM)
		return (unsigned long)sk;
	return ((unsigned long)skb_get_hash(skb) << 1) | 1;
}

static bool p3_flow_idle_for(const struct p3_flow *flow, unsigned long age)
{
	return !flow->qlen && time_after(jiffies, flow->idle_since + age);
}

static void p3_size_unfile(struct p3_sched_data *q, struct p3_flow *flow)
{
	u16 slot = flow->size_slot;

	if (hlist_unhashed(&flow->size_node))
		return;
	hlist_del_init(&flow->size_node);
	if (hlist_empty(&q->by_size[slot]))
		q->bands[slot / P3_SIZE_CLASSES].sizes &=
			~BIT(slot % P3_SIZE_CLASSES);
}

/* Files a flow holding packets by band and fls(backlog): a flow of the
 * band's highest class ("sizes" bit) holds at least half the bytes of its
 * fattest, so overflow finds a victim in O(1), not O(flows).  A flow that
 * empties stays filed, as it mostly comes back to the same class:
 * p3_fattest() unfiles the empty flows it meets, and a flow is unfiled
 * before reuse or free.
 */
static __always_inline void p3_size_refile(struct p3_sched_data *q,
					   struct p3_flow *flow)
{
	u16 slot;

	if (!flow->qlen)
		return;
	slot = flow->band * P3_SIZE_CLASSES + fls(flow->backlog | 1) - 1;
	if (slot == flow->size_slot && !hlist_unhashed(&flow->size_node))
		return;
	p3_size_unfile(q, flow);
	hlist_add_head(&flow->size_node, &q->by_size[slot]);
	q->bands[flow->band].sizes |= BIT(slot % P3_SIZE_CLASSES);
	flow->size_slot = slot;
}

/* A flow of active @band holding at least half the bytes of its fattest.
 * Every flow holding packets is filed, so the loop ends.
 */
static struct p3_flow *p3_fattest(struct p3_sched_data *q, u8 band)
{
	struct p3_flow *flow;
	u32 class;

	for (;;) {
		class = fls(q->bands[band].sizes) - 1;
		flow = hlist_entry(q->by_size[band * P3_SIZE_CLASSES +
					      class].first,
				   struct p3_flow, size_node);
		if (flow->qlen)
			return flow;
		p3_size_unfile(q, flow);
	}
}

static void p3_flow_free(struct p3_sched_data *q, struct p3_flow *flow)
{
	p3_size_unfile(q, flow);
	list_del(&flow->band_node);
	hlist_del(&flow->hash_node);
	kmem_cache_free(p3_flow_cache, flow);
	q->flows--;
}

/* Frees up to P3_GC_BATCH idle flows, oldest first: those empty for
 * P3_FLOW_EXPIRE, and any while over the "flows" cap (it was lowered).
 */
static u32 p3_gc(struct p3_sched_data *q)
{
	struct p3_flow *flow;
	u32 freed = 0;

	while (freed < P3_GC_BATCH) {
		flow = list_first_entry_or_null(&q->idle, struct p3_flow,
						band_node);
		if (!flow || (q->flows <= q->cfg.flows &&
			      !p3_flow_idle_for(flow, P3_FLOW_EXPIRE)))
			break;
		p3_flow_free(q, flow);
		q->stats.flows_gc++;
		freed++;
	}
	return freed;
}

/* A table entry joins the idle list's tail; a shared flow leaves its band. */
static void p3_flow_idle(struct p3_sched_data *q, struct p3_flow *flow)
{
	if (unlikely(!flow->key)) {
		list_del_init(&flow->band_node);
		return;
	}
	flow->idle_since = jiffies;
	list_move_tail(&flow->band_node, &q->idle);
}

/* The oldest idle flow, cleared, if idle for P3_FLOW_IDLE or the table is
 * at its cap: it grows only while no flow is that old, never past the cap.
 */
static struct p3_flow *p3_flow_recycle(struct p3_sched_data *q)
{
	struct p3_flow *flow;

	flow = list_first_entry_or_null(&q->idle, struct p3_flow, band_node);
	if (!flow || (q->flows < q->cfg.flows &&
		      !p3_flow_idle_for(flow, P3_FLOW_IDLE)))
		return NULL;
	p3_size_unfile(q, flow);
	list_del(&flow->band_node);
	hlist_del(&flow->hash_node);
	memset(flow, 0, sizeof(*flow));
	/* Counted as collected, and as created again: flows stays
	 * flows_created - flows_gc.
	 */
	q->flows--;
	q->stats.flows_gc++;
	return flow;
}

/* The spill index: each key's newest spilled packet, marked spill_last and
 * chained by skb->prev.  It takes no memory, so it cannot fail where a flow
 * entry could not be had.
 */
static struct sk_buff **p3_spill_bucket(struct p3_sched_data *q,
					unsigned long key)
{
	return &q->spill_index[hash_long(key, P3_SPILL_LOG)];
}

static struct sk_buff *p3_spill_find(struct p3_sched_data *q,
				     unsigned long key)
{
	struct sk_buff *skb;

	if (likely(!q->spill_keys))
		return NULL;
	for (skb = *p3_spill_bucket(q, key); skb; skb = skb->prev)
		if (p3_flow_key(skb) == key)
			return skb;
	return NULL;
}

static void p3_spill_index(struct p3_sched_data *q, struct sk_buff *skb,
			   unsigned long key)
{
	struct sk_buff **bucket = p3_spill_bucket(q, key);

	p3_cb(skb)->spill_last = 1;
	skb->prev = *bucket;
	*bucket = skb;
	q->spill_keys++;
}

static void p3_spill_unindex(struct p3_sched_data *q, struct sk_buff *skb,
			     unsigned long key)
{
	struct sk_buff **link = p3_spill_bucket(q, key);

	while (*link != skb)
		link = &(*link)->prev;
	*link = skb->prev;
	skb->prev = NULL;
	p3_cb(skb)->spill_last = 0;
	q->spill_keys--;
}

/* @skb just joined a shared flow, in place of @last as its key's newest. */
static void p3_spilled(struct p3_sched_data *q, struct sk_buff *skb,
		       unsigned long key, struct sk_buff *last)
{
	if (last)
		p3_spill_unindex(q, last, key);
	p3_spill_index(q, skb, key);
	q->stats.spilled++;
}

/* @skb, its key's newest, just left shared @flow.  Another of its key
 * stays only if overflow took @skb from behind the peeked head
 * (p3_flow_pop_next()): then that head is the newest.
 */
static noinline void p3_spill_left(struct p3_sched_data *q,
				   struct p3_flow *flow, struct sk_buff *skb)
{
	unsigned long key = p3_flow_key(skb);

	p3_spill_unindex(q, skb, key);
	if (flow->qlen && p3_flow_key(flow->head) == key)
		p3_spill_index(q, flow->head, key);
}

/* Recycled, else allocated below the cap, else NULL; NULL too while @key
 * has packets spilled, for its next ones to follow.  New flows fill the
 * table, so the GC runs here.
 */
static noinline struct p3_flow *p3_flow_new(struct p3_sched_data *q,
					    unsigned long key,
					    struct hlist_head *bucket)
{
	struct p3_flow *flow;

	if (unlikely(p3_spill_find(q, key)))
		return NULL;
	flow = p3_flow_recycle(q);
	p3_gc(q);
	if (!flow && q->flows < q->cfg.flows)
		flow = kmem_cache_zalloc(p3_flow_cache,
					 GFP_ATOMIC | __GFP_NOWARN);
	if (!flow)
		return NULL;
	flow->key = key;
	flow->deficit = q->cfg.quantum;
	INIT_LIST_HEAD(&flow->band_node);
	hlist_add_head(&flow->hash_node, bucket);
	q->flows++;
	q->stats.flows_created++;
	/* Its first packet may yet be dropped, leaving it idle. */
	p3_flow_idle(q, flow);
	return flow;
}

/* NULL: no entry can be had, and the packet spills.  An idle flow keeps
 * its deficit however long it was idle, until reused or freed.
 */
static __always_inline struct p3_flow *
p3_flow_lookup(struct p3_sched_data *q, unsigned long key)
{
	struct hlist_head *bucket;
	struct p3_flow *flow;

	bucket = &q->flow_table[hash_long(key, q->buckets_log)];
	hlist_for_each_entry(flow, bucket, hash_node)
		if (flow->key == key)
			return flow;
	return p3_flow_new(q, key, bucket);
}

static void p3_band_add(struct p3_sched_data *q, u8 band, u32 qlen,
			u32 bytes, u32 memory)
{
	struct gnet_stats_queue *qs = &q->bands[band].qstats;

	qs->qlen += qlen;
	qs->backlog += bytes;
	q->bands[band].memory += memory;
}

/* Unsigned: adding the negation subtracts. */
static void p3_band_sub(struct p3_sched_data *q, u8 band, u32 qlen,
			u32 bytes, u32 memory)
{
	p3_band_add(q, band, -qlen, -bytes, -memory);
	if (list_empty(&q->bands[band].flows))
		q->active &= ~BIT_ULL(band);
}

/* Moves a flow holding packets to the tail of another band's DRR list. */
static void p3_flow_move(struct p3_sched_data *q, struct p3_flow *flow,
			 u8 band)
{
	u8 old = flow->band;

	list_move_tail(&flow->band_node, &q->bands[band].flows);
	flow->band = band;
	q->active |= BIT_ULL(band);
	p3_band_sub(q, old, flow->qlen, flow->backlog, flow->memory);
	p3_band_add(q, band, flow->qlen, flow->backlog, flow->memory);
	p3_size_refile(q, flow);
}

/* To find a flow's most urgent band in O(1) as its head leaves, a monotone
 * deque holds the packets strictly more urgent than all behind them (at
 * most one per band): a new packet drops from its tail every packet not
 * more urgent than itself.  @tolerant: @band had a deadline as @skb came.
 */
static __always_inline void p3_flow_push(struct p3_sched_data *q,
					 struct p3_flow *flow,
					 struct sk_buff *skb, u8 band,
					 bool tolerant)
{
	struct p3_skb_cb *cb = p3_cb(skb);
	u32 len = qdisc_pkt_len(skb);

	while (flow->min_tail && p3_cb(flow->min_tail)->band >= band)
		flow->min_tail = p3_cb(flow->min_tail)->min_prev;
	/* Written whole: bit fields would each be a read-modify-write.
	 * Reliable packets skip the clock.
	 */
	*cb = (struct p3_skb_cb) {
		.min_prev = flow->min_tail,
		.band = band,
	};
	if (tolerant) {
		cb->tolerant = 1;
		cb->stamp = p3_stamp_now();
	}
	if (flow->min_tail)
		p3_cb(flow->min_tail)->min_next = skb;
	else
		flow->min_head = skb;
	flow->min_tail = skb;

	skb->next = NULL;
	if (flow->qlen)
		flow->tail->next = skb;
	else
		flow->head = skb;
	flow->tail = skb;

	if (!flow->qlen) {
		flow->band = band;
		list_move_tail(&flow->band_node, &q->bands[band].flows);
		q->active |= BIT_ULL(band);
		q->flows_active++;
	} else if (band < flow->band) {
		p3_flow_move(q, flow, band);
		q->stats.boosts++;
	}
	flow->qlen++;
	flow->backlog += len;
	flow->memory += skb->truesize;
	p3_size_refile(q, flow);
	p3_band_add(q, flow->band, 1, len, skb->truesize);
	q->memory_usage += skb->truesize;
}

/* Folded into the last band if "bands" shrank since classification. */
static u8 p3_flow_min_band(const struct p3_sched_data *q,
			   const struct p3_flow *flow)
{
	return min_t(u8, p3_cb(flow->min_head)->band, q->cfg.bands - 1);
}

/* Accounts for @skb, just unlinked from @flow (served from @band).  An
 * emptied flow leaves its band; one whose urgent packets are gone moves
 * to the band of its most urgent rest.
 */
static __always_inline void p3_flow_unlinked(struct Qdisc *sch,
					     struct p3_flow *flow,
					     struct sk_buff *skb, u8 band)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	u32 len = qdisc_pkt_len(skb);

	skb_mark_not_on_list(skb);
	if (skb == q->peeked)
		q->peeked = NULL;
	flow->qlen--;
	flow->backlog -= len;
	flow->memory -= skb->truesize;
	if (unlikely(p3_cb(skb)->spill_last))
		p3_spill_left(q, flow, skb);
	q->memory_usage -= skb->truesize;
	sch->q.qlen--;
	qdisc_qstats_backlog_dec(sch, skb);

	if (!flow->qlen) {
		p3_flow_idle(q, flow);
		q->flows_active--;
	}
	p3_band_sub(q, band, 1, len, skb->truesize);
	if (flow->qlen && p3_flow_min_band(q, flow) != band)
		p3_flow_move(q, flow, p3_flow_min_band(q, flow));
	p3_size_refile(q, flow);
}

static __always_inline struct sk_buff *
p3_flow_pop(struct Qdisc *sch, struct p3_flow *flow)
{
	struct sk_buff *skb = flow->head;

	flow->head = skb->next;
	if (flow->min_head == skb) {
		flow->min_head = p3_cb(skb)->min_next;
		if (flow->min_head)
			p3_cb(flow->min_head)->min_prev = NULL;
		else
			flow->min_tail = NULL;
	}
	p3_flow_unlinked(sch, flow, skb, flow->band);
	return skb;
}

/* Unlinks the packet after @flow's peeked head (two or more queued) for
 * overflow; the head joins the deque's front if now strictly most urgent.
 */
static noinline struct sk_buff *p3_flow_pop_next(struct Qdisc *sch,
						 struct p3_flow *flow)
{
	struct sk_buff *head = flow->head, *skb = head->next;
	struct p3_skb_cb *hcb = p3_cb(head), *cb = p3_cb(skb);
	struct sk_buff *after = skb == flow->min_tail ? NULL : cb->min_next;

	head->next = skb->next;
	if (flow->tail == skb)
		flow->tail = head;
	if (flow->min_head == skb) {
		flow->min_head = after;
		if (after)
			p3_cb(after)->min_prev = NULL;
		else
			flow->min_tail = NULL;
	} else if (flow->min_head == head && flow->min_tail != head &&
		   hcb->min_next == skb) {
		hcb->min_next = after;
		if (after)
			p3_cb(after)->min_prev = head;
		else
			flow->min_tail = head;
	}
	if (flow->min_head != head &&
	    (!flow->min_head || hcb->band < p3_cb(flow->min_head)->band)) {
		hcb->min_prev = NULL;
		hcb->min_next = flow->min_head;
		if (flow->min_head)
			p3_cb(flow->min_head)->min_prev = head;
		else
			flow->min_tail = head;
		flow->min_head = head;
	}
	p3_flow_unlinked(sch, flow, skb, flow->band);
	return skb;
}

/* A fattest flow of active @band, unless its only packet is the peeked
 * one, which stays: then another flow of the band, or NULL.
 */
static struct p3_flow *p3_pushable(struct p3_sched_data *q, u8 band)
{
	struct p3_flow *flow = p3_fattest(q, band), *other;

	if (flow->head != q->peeked || flow->qlen > 1)
		return flow;
	list_for_each_entry(other, &q->bands[band].flows, band_node)
		if (other != flow)
			return other;
	return NULL;
}

static struct sk_buff *p3_victim_skb(const struct p3_sched_data *q,
				     const struct p3_flow *flow)
{
	return flow->head == q->peeked ? flow->head->next : flow->head;
}

/* Pushes out p3_victim_skb() of p3_pushable(@band), which must exist, adds
 * its length to *@bytes and returns its flow.
 */
static struct p3_flow *p3_drop_from(struct Qdisc *sch, u8 band, u32 *bytes,
				    struct sk_buff **to_free)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct p3_flow *flow = p3_pushable(q, band);
	struct sk_buff *skb = p3_victim_skb(q, flow) == flow->head ?
			      p3_flow_pop(sch, flow) :
			      p3_flow_pop_next(sch, flow);

	*bytes += qdisc_pkt_len(skb);
	q->bands[band].qstats.drops++;
	if (p3_tolerant(q, skb))
		q->stats.drops_tolerant++;
	qdisc_drop(skb, sch, to_free);
	return flow;
}

/* Bands @serve or less urgent, holding packets. */
static u64 p3_bands_from(const struct p3_sched_data *q, u8 serve)
{
	return q->active & ~(BIT_ULL(serve) - 1);
}

/* The band to push out of for a packet served at @serve, or -1: never a
 * more urgent one.  A loss-tolerant victim first, least urgent band first,
 * else the least urgent band's.
 */
static int p3_victim_band(struct p3_sched_data *q, u8 serve)
{
	u64 bands = p3_bands_from(q, serve) & q->tolerant;
	struct p3_flow *flow;
	int band;

	for (; bands; bands &= ~BIT_ULL(band)) {
		band = fls64(bands) - 1;
		flow = p3_pushable(q, band);
		if (flow && p3_tolerant(q, p3_victim_skb(q, flow)))
			return band;
	}
	for (bands = p3_bands_from(q, serve); bands; bands &= ~BIT_ULL(band)) {
		band = fls64(bands) - 1;
		if (p3_pushable(q, band))
			return band;
	}
	return -1;
}

/* Counter of the limit @pkts more packets (@truesize in all) would break. */
static u64 *p3_overlimit(struct Qdisc *sch, u32 pkts, u32 truesize)
{
	struct p3_sched_data *q = qdisc_priv(sch);

	if (sch->q.qlen + pkts > sch->limit)
		return &q->stats.drops_limit;
	if (q->memory_usage + truesize > q->cfg.memory)
		return &q->stats.drops_memory;
	return NULL;
}

/* Could pushing out all of bands >= @serve but the peeked packet make room
 * for @skb?  Else pushing any out would lose them for nothing.
 */
static bool p3_room_possible(struct Qdisc *sch, struct sk_buff *skb, u8 serve)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct p3_flow *kept = q->peeked ? q->peeked_flow : NULL;
	u64 bands = p3_bands_from(q, serve);
	u64 pkts = 0, memory = 0;
	int band;

	for (; bands; bands &= ~BIT_ULL(band)) {
		band = __ffs64(bands);
		pkts += q->bands[band].qstats.qlen;
		memory += q->bands[band].memory;
	}
	if (kept && kept->band >= serve) {
		pkts--;
		memory -= q->peeked->truesize;
	}
	if (sch->q.qlen + 1 > (u64)sch->limit + pkts)
		return false;
	return q->memory_usage + skb->truesize <= (u64)q->cfg.memory + memory;
}

static void p3_admit(struct Qdisc *sch, struct p3_flow *flow,
		     struct sk_buff *skb, u8 band)
{
	struct p3_sched_data *q = qdisc_priv(sch);

	p3_flow_push(q, flow, skb, band, q->tolerant & BIT_ULL(band));
	sch->q.qlen++;
	qdisc_qstats_backlog_inc(sch, skb);
}

/* Pushes packets out until @skb fits, if that can make room, else drops it. */
static noinline int p3_enqueue_full(struct sk_buff *skb, struct Qdisc *sch,
				    struct p3_flow *flow, u8 band,
				    struct sk_buff **to_free)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	u32 len = qdisc_pkt_len(skb), pushed_len = 0, pushed = 0;
	/* Never a band more urgent than this packet is served at. */
	u8 serve = flow->qlen ? min_t(u8, band, flow->band) : band;
	bool own_loss = false;
	u64 *cause;

	if (!p3_room_possible(sch, skb, serve)) {
		(*p3_overlimit(sch, 1, skb->truesize))++;
		q->bands[serve].qstats.drops++;
		if (q->tolerant & BIT_ULL(band))
			q->stats.drops_tolerant++;
		return qdisc_drop(skb, sch, to_free);
	}
	/* It is possible, so p3_victim_band() finds a band until it fits. */
	while ((cause = p3_overlimit(sch, 1, skb->truesize))) {
		(*cause)++;
		if (p3_drop_from(sch, p3_victim_band(q, serve), &pushed_len,
				 to_free) == flow)
			own_loss = true;
		pushed++;
	}

	p3_admit(sch, flow, skb, band);

	/* Only the flow that paid gets NET_XMIT_CN (as in fq_codel; for a
	 * spilled packet, the shared flow it joined): TCP cuts its window on
	 * it, so other flows' losses would starve an urgent flow whenever
	 * less urgent traffic overflows.
	 */
	if (!own_loss) {
		qdisc_tree_reduce_backlog(sch, pushed, pushed_len);
		return NET_XMIT_SUCCESS;
	}
	/* NET_XMIT_CN: the parent does not add this packet, so net it out. */
	qdisc_tree_reduce_backlog(sch, pushed - 1, pushed_len - len);
	return NET_XMIT_CN;
}

/* @skb can have no flow entry (cap or no memory): it joins its band's
 * shared flow, or, while its key has packets spilled, theirs, behind them.
 */
static noinline int p3_spill(struct sk_buff *skb, struct Qdisc *sch,
			     unsigned long key, u8 band,
			     struct sk_buff **to_free)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct sk_buff *last = p3_spill_find(q, key);
	int ret = NET_XMIT_SUCCESS;
	struct p3_flow *flow;

	/* A shared flow's packets keep its band in their cb, even past a
	 * fold (p3_fold_bands()): the band names the flow.
	 */
	if (last)
		band = p3_cb(last)->band;
	flow = &q->bands[band].spill;
	if (unlikely(p3_overlimit(sch, 1, skb->truesize))) {
		ret = p3_enqueue_full(skb, sch, flow, band, to_free);
		if (ret == NET_XMIT_DROP)
			return ret;
		/* Overflow may have pushed out the one found. */
		last = p3_spill_find(q, key);
	} else {
		p3_admit(sch, flow, skb, band);
	}
	p3_spilled(q, skb, key, last);
	return ret;
}

/* @skb found p3 empty: while alone it needs no flow, only its band; a
 * second packet files it under its flow (p3_file_lone()).  Most packets on
 * a link that keeps up come this way.  It is in no band's counters
 * (p3_dump_class_stats() adds it).
 */
static int p3_hold_lone(struct sk_buff *skb, struct Qdisc *sch, u8 band)
{
	struct p3_sched_data *q = qdisc_priv(sch);

	*p3_cb(skb) = (struct p3_skb_cb) { .band = band };
	q->lone = skb;
	sch->q.qlen++;
	qdisc_qstats_backlog_inc(sch, skb);
	return NET_XMIT_SUCCESS;
}

static struct sk_buff *p3_take_lone(struct Qdisc *sch)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct sk_buff *skb = q->lone;

	q->lone = NULL;
	if (skb == q->peeked)
		q->peeked = NULL;
	sch->q.qlen--;
	qdisc_qstats_backlog_dec(sch, skb);
	return skb;
}

/* May @skb be held lone?  Not if its band has a deadline (it needs a stamp
 * and expiry checks), nor if its truesize alone breaks the memory cap (the
 * usual path then drops it and counts why).
 */
static bool p3_may_hold(struct Qdisc *sch, struct sk_buff *skb, u8 band)
{
	struct p3_sched_data *q = qdisc_priv(sch);

	return !(q->tolerant & BIT_ULL(band)) &&
	       !p3_overlimit(sch, 0, skb->truesize);
}

/* A second packet came: file the lone one as if enqueued the usual way. */
static noinline void p3_file_lone(struct p3_sched_data *q)
{
	struct sk_buff *skb = q->lone;
	unsigned long key = p3_flow_key(skb);
	struct p3_flow *flow = p3_flow_lookup(q, key);
	u8 band = p3_cb(skb)->band;

	q->lone = NULL;
	/* Nothing else is queued, so no packet of its key is spilled. */
	if (unlikely(!flow))
		flow = &q->bands[band].spill;
	if (q->peeked == skb)
		q->peeked_flow = flow;
	/* Its band had no deadline when it came, whatever it has now. */
	p3_flow_push(q, flow, skb, band, false);
	if (unlikely(!flow->key))
		p3_spilled(q, skb, key, NULL);
}

static int p3_enqueue(struct sk_buff *skb, struct Qdisc *sch,
		      struct sk_buff **to_free)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct p3_flow *flow;
	unsigned long key;
	int band;

	band = p3_classify(skb, sch);
	if (band < 0) {
		if (-band & __NET_XMIT_BYPASS)
			qdisc_qstats_drop(sch);
		__qdisc_drop(skb, to_free);
		return -band;
	}

	if (!sch->q.qlen && p3_may_hold(sch, skb, band))
		return p3_hold_lone(skb, sch, band);
	/* The lone packet first: a lookup may recycle an idle flow, and
	 * must not take the one just found for @skb.
	 */
	if (q->lone)
		p3_file_lone(q);

	key = p3_flow_key(skb);
	flow = p3_flow_lookup(q, key);
	if (unlikely(!flow))
		return p3_spill(skb, sch, key, band, to_free);
	if (unlikely(p3_overlimit(sch, 1, skb->truesize)))
		return p3_enqueue_full(skb, sch, flow, band, to_free);
	p3_admit(sch, flow, skb, band);
	return NET_XMIT_SUCCESS;
}

/* The pacer's bucket is the time the link is spent until (paid_until; 0:
 * full).  Packets are charged before they leave, as in tbf, so an urgent
 * packet never waits out a bulk one sent on credit.
 */
static u64 p3_pacer_cost(const struct p3_sched_data *q, u32 len)
{
	return div64_u64((u64)len * NSEC_PER_SEC, q->cfg.rate);
}

/* 0 if @len bytes may go now, else when (ns).  Bumps no counter, as peeks
 * ask too; records @len if it is the largest packet yet.
 */
static u64 p3_pacer_due(struct p3_sched_data *q, u32 len)
{
	u64 due;

	if (!q->cfg.rate)
		return 0;
	/* The bucket must hold a packet waiting at the head before the
	 * packets charged meanwhile trim it (p3_pacer_charge).
	 */
	if (unlikely(len > q->paced_max_len)) {
		q->paced_max_len = len;
		q->pace_depth = P3_PACE_HORIZON + p3_pacer_cost(q, len);
	}
	if (!q->paid_until)
		return 0;
	due = q->paid_until + p3_pacer_cost(q, len);
	return ktime_get_ns() >= due ? 0 : due;
}

static void p3_pacer_charge(struct p3_sched_data *q, u32 len)
{
	u64 now, cost;

	if (!q->cfg.rate)
		return;
	now = ktime_get_ns();
	cost = p3_pacer_cost(q, len);
	/* Depth: the largest packet plus P3_PACE_HORIZON (p3_pacer_due()
	 * saw every packet before this).  The horizon makes up for late
	 * watchdogs; sized to each packet, small urgent ones every few ms
	 * would trim away the credit a waiting GSO packet saved, for good.
	 */
	if (!q->paid_until || now - q->paid_until > q->pace_depth)
		q->paid_until = now - min(now, q->pace_depth);
	q->paid_until += cost;
}

/* The flow DRR serves next in the most urgent band; q->active != 0. */
static struct p3_flow *p3_drr_next(struct p3_sched_data *q)
{
	struct p3_band *b = &q->bands[__ffs64(q->active)];
	struct p3_flow *flow;

	/* Every pass adds a quantum, so this ends within (largest packet /
	 * quantum) + 1 rounds.
	 */
	for (;;) {
		flow = list_first_entry(&b->flows, struct p3_flow, band_node);
		if (flow->deficit > 0)
			return flow;
		flow->deficit += q->cfg.quantum;
		list_move_tail(&flow->band_node, &b->flows);
	}
}

/* Drops @flow's expired head, at no DRR cost: it never used the link. */
static void p3_expire(struct Qdisc *sch, struct p3_flow *flow, u32 *bytes)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	u8 band = flow->band;
	struct sk_buff *skb = p3_flow_pop(sch, flow);

	*bytes += qdisc_pkt_len(skb);
	q->bands[band].qstats.drops++;
	q->stats.drops_deadline++;
	qdisc_qstats_drop(sch);
	kfree_skb_reason(skb, SKB_DROP_REASON_QDISC_DROP);
}

/* Dequeue only.  Stops at a fresh or peeked head, and before the last
 * packet: a drop never empties p3, so parents hear of drops only while it
 * holds packets, and a dequeue finding only expired packets sends one.
 */
static void p3_drop_expired(struct Qdisc *sch, u32 *n, u32 *bytes)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct p3_flow *flow;
	u32 now = 0;

	while (*n < P3_EXPIRE_BATCH && sch->q.qlen > 1) {
		flow = p3_drr_next(q);
		if (flow->head == q->peeked || !p3_expired(q, flow->head, &now))
			return;
		p3_expire(sch, flow, bytes);
		(*n)++;
	}
}

/* The first unexpired packet of DRR's flow, else of the next flows and
 * bands; q->active != 0.  After P3_EXPIRE_BATCH expired ones, or if all
 * are, the last seen in DRR's flow: late rather than nothing.  Only DRR's
 * rotation changes, as a dequeue would change it.
 */
static struct sk_buff *p3_scan(struct p3_sched_data *q, struct p3_flow **flow)
{
	struct p3_flow *first = p3_drr_next(q), *f = first;
	unsigned int budget = P3_EXPIRE_BATCH;
	struct sk_buff *skb, *late = NULL;
	u64 bands = q->active;
	u32 now = 0;

	*flow = first;
	if (!q->tolerant)
		return first->head;
	for (;;) {
		for (skb = f->head; skb; skb = skb->next) {
			if (skb == q->peeked || !p3_expired(q, skb, &now)) {
				*flow = f;
				return skb;
			}
			if (f == first)
				late = skb;
			if (!--budget)
				return late;
		}
		if (!list_is_last(&f->band_node, &q->bands[f->band].flows)) {
			f = list_next_entry(f, band_node);
			continue;
		}
		bands &= ~BIT_ULL(f->band);
		if (!bands)
			return late;
		f = list_first_entry(&q->bands[__ffs64(bands)].flows,
				     struct p3_flow, band_node);
	}
}

/* NULL if p3 is empty; *@flow is NULL for the lone packet. */
static struct sk_buff *p3_next_skb(struct p3_sched_data *q,
				   struct p3_flow **flow)
{
	*flow = NULL;
	if (q->peeked) {
		*flow = q->peeked_flow;
		return q->peeked;
	}
	if (q->lone)
		return q->lone;
	return q->active ? p3_scan(q, flow) : NULL;
}

static struct sk_buff *p3_dequeue(struct Qdisc *sch)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	u32 dropped = 0, dropped_len = 0, now = 0;
	struct p3_flow *flow;
	struct sk_buff *skb;
	u64 due;
	u8 band;

	if (q->tolerant && !q->lone)
		p3_drop_expired(sch, &dropped, &dropped_len);
	skb = p3_next_skb(q, &flow);
	/* Packets before @skb in its flow had expired (p3_scan()).  One whose
	 * band was made reliable since goes first, in flow order, unless a
	 * parent peeked and charged @skb: then they go as they were judged,
	 * all loss-tolerant when they came, and the peeked packet is sent.
	 */
	while (skb && flow && flow->head != skb) {
		if (skb != q->peeked && !p3_expired(q, flow->head, &now)) {
			skb = flow->head;
			break;
		}
		p3_expire(sch, flow, &dropped_len);
		dropped++;
	}
	due = skb ? p3_pacer_due(q, qdisc_pkt_len(skb)) : 0;
	if (due) {
		qdisc_watchdog_schedule_ns(&q->watchdog, due);
		q->stats.throttled++;
		skb = NULL;
	}
	/* No drop takes the last packet: no parent sees p3 empty from
	 * inside its own dequeue.
	 */
	if (dropped)
		qdisc_tree_reduce_backlog(sch, dropped, dropped_len);
	if (!skb)
		return NULL;
	if (!flow) {
		p3_take_lone(sch);
		band = p3_cb(skb)->band;
	} else {
		band = flow->band;
		/* band < last_band <= 63, so the shift stays below 64. */
		if (band < q->last_band && (q->active >> (band + 1)))
			q->stats.preemptions++;
		p3_flow_pop(sch, flow);
		flow->deficit -= qdisc_pkt_len(skb);
	}
	q->last_band = band;
	bstats_update(&q->bands[band].bstats, skb);
	qdisc_bstats_update(sch, skb);
	p3_pacer_charge(q, qdisc_pkt_len(skb));
	/* An idle moment: the flows that expired meanwhile go. */
	if (!sch->q.qlen && !list_empty(&q->idle))
		p3_gc(q);
	return skb;
}

/* Not qdisc_peek_dequeued(): a shaping parent (tbf) peeks while waiting for
 * tokens, and a more urgent packet arriving meanwhile must not queue
 * behind one taken out.  Each peek looks afresh, changing nothing a parent
 * sees; the next dequeue sends what it returned.  NULL with packets queued
 * only while the pacer holds them: its watchdog brings the parent back.
 */
static struct sk_buff *p3_peek(struct Qdisc *sch)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct p3_flow *flow;
	struct sk_buff *skb;
	u64 due;

	q->peeked = NULL;
	skb = p3_next_skb(q, &flow);
	due = skb ? p3_pacer_due(q, qdisc_pkt_len(skb)) : 0;
	if (due) {
		qdisc_watchdog_schedule_ns(&q->watchdog, due);
		return NULL;
	}
	q->peeked = skb;
	q->peeked_flow = flow;
	return skb;
}

/* Freed once RTNL is released, as the qdisc layer does on reset. */
static void p3_free_skb(struct sk_buff *skb)
{
	rtnl_kfree_skbs(skb, skb);
}

static void p3_reset(struct Qdisc *sch)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct p3_flow *flow, *tmp;
	unsigned int i;

	if (!q->bands)		/* init failed before there were any */
		return;
	for (i = 0; i < P3_MAX_BANDS; i++) {
		list_for_each_entry_safe(flow, tmp, &q->bands[i].flows,
					 band_node)
			while (flow->qlen)
				p3_free_skb(p3_flow_pop(sch, flow));
	}
	if (q->lone)
		p3_free_skb(p3_take_lone(sch));
	list_for_each_entry_safe(flow, tmp, &q->idle, band_node)
		p3_flow_free(q, flow);
	q->paid_until = 0;
	q->paced_max_len = 0;
	q->peeked = NULL;
}

/* Not const: 6.1's nla_policy points at a mutable one. */
static struct netlink_range_validation p3_limit_range = {
	.min = 1, .max = P3_MAX_LIMIT,
};

static struct netlink_range_validation p3_quantum_range = {
	.min = P3_MIN_QUANTUM, .max = P3_MAX_QUANTUM,
};

static struct netlink_range_validation p3_buckets_range = {
	.min = P3_MIN_BUCKETS, .max = P3_MAX_BUCKETS,
};

static struct netlink_range_validation p3_flows_range = {
	.min = P3_MIN_FLOWS, .max = P3_MAX_FLOWS,
};

static struct netlink_range_validation p3_deadline_range = {
	.max = P3_MAX_DEADLINE_US,
};

/* What one attribute's policy can say, it says, with its range in the
 * extack; p3_config_parse() checks what depends on more than one.
 */
static const struct nla_policy p3_policy[TCA_P3_MAX + 1] = {
	[TCA_P3_BANDS]		= NLA_POLICY_RANGE(NLA_U8, P3_MIN_BANDS,
						   P3_MAX_BANDS),
	[TCA_P3_DEFAULT]	= NLA_POLICY_MAX(NLA_U8, P3_MAX_BANDS - 1),
	[TCA_P3_TAG]		= NLA_POLICY_MAX(NLA_U8, TC_P3_TAG_MAX),
	[TCA_P3_LIMIT]		= NLA_POLICY_FULL_RANGE(NLA_U32, &p3_limit_range),
	[TCA_P3_MEMORY]		= { .type = NLA_U32 },
	[TCA_P3_QUANTUM]	= NLA_POLICY_FULL_RANGE(NLA_U32, &p3_quantum_range),
	[TCA_P3_RATE]		= { .type = NLA_U64 },
	[TCA_P3_PAD]		= { .type = NLA_REJECT,
				    .reject_message = "Padding is not an option" },
	[TCA_P3_BUCKETS]	= NLA_POLICY_FULL_RANGE(NLA_U32, &p3_buckets_range),
	[TCA_P3_FLOWS]		= NLA_POLICY_FULL_RANGE(NLA_U32, &p3_flows_range),
	[TCA_P3_DSCPMAP]	= NLA_POLICY_EXACT_LEN(TC_P3_DSCP_CODES),
};

static void p3_config_default(struct p3_config *cfg, struct Qdisc *sch)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->bands = P3_DEFAULT_BANDS;
	cfg->tag = P3_DEFAULT_TAG;
	cfg->limit = P3_DEFAULT_LIMIT;
	cfg->memory = P3_DEFAULT_MEMORY;
	cfg->buckets = P3_DEFAULT_BUCKETS;
	cfg->flows = P3_DEFAULT_FLOWS;
	memset(cfg->dscpmap, TC_P3_DSCP_BUILTIN, sizeof(cfg->dscpmap));
	cfg->quantum = 2 * psched_mtu(qdisc_dev(sch));
}

/* Every band the map names must exist, also after "bands" shrinks. */
static int p3_dscpmap_parse(struct p3_config *cfg, struct nlattr **tb,
			    struct netlink_ext_ack *extack)
{
	unsigned int i;

	if (tb[TCA_P3_DSCPMAP])
		memcpy(cfg->dscpmap, nla_data(tb[TCA_P3_DSCPMAP]),
		       sizeof(cfg->dscpmap));
	for (i = 0; i < TC_P3_DSCP_CODES; i++) {
		if (cfg->dscpmap[i] != TC_P3_DSCP_BUILTIN &&
		    cfg->dscpmap[i] >= cfg->bands) {
			NL_SET_ERR_MSG_ATTR(extack,
					    tb[TCA_P3_DSCPMAP] ?: tb[TCA_P3_BANDS],
					    "DSCP map names a band beyond the number of bands");
			return -EINVAL;
		}
	}
	return 0;
}

static int p3_config_parse(struct p3_config *cfg, struct nlattr **tb,
			   struct netlink_ext_ack *extack)
{
	if (tb[TCA_P3_BANDS])
		cfg->bands = nla_get_u8(tb[TCA_P3_BANDS]);
	if (tb[TCA_P3_DEFAULT]) {
		cfg->default_band = nla_get_u8(tb[TCA_P3_DEFAULT]);
		cfg->default_set = true;
	}
	if (!cfg->default_set) {
		cfg->default_band = cfg->bands - 1;
	} else if (cfg->default_band >= cfg->bands) {
		NL_SET_ERR_MSG_ATTR(extack, tb[TCA_P3_DEFAULT] ?: tb[TCA_P3_BANDS],
				    "Default band must be below the number of bands");
		return -EINVAL;
	}
	if (tb[TCA_P3_TAG])
		cfg->tag = nla_get_u8(tb[TCA_P3_TAG]);
	if (tb[TCA_P3_LIMIT])
		cfg->limit = nla_get_u32(tb[TCA_P3_LIMIT]);
	if (tb[TCA_P3_MEMORY]) {
		/* 0, once "no cap", is the most there is. */
		cfg->memory = nla_get_u32(tb[TCA_P3_MEMORY]) ?: P3_MAX_MEMORY;
		if (cfg->memory < P3_MIN_MEMORY || cfg->memory > P3_MAX_MEMORY) {
			NL_SET_ERR_MSG_ATTR(extack, tb[TCA_P3_MEMORY],
					    "Memory limit must be between 65536 bytes and 1 GB (0: 1 GB)");
			return -EINVAL;
		}
	}
	if (tb[TCA_P3_QUANTUM])
		cfg->quantum = nla_get_u32(tb[TCA_P3_QUANTUM]);
	if (tb[TCA_P3_RATE])
		cfg->rate = nla_get_u64(tb[TCA_P3_RATE]);
	if (tb[TCA_P3_BUCKETS]) {
		cfg->buckets = nla_get_u32(tb[TCA_P3_BUCKETS]);
		if (!is_power_of_2(cfg->buckets)) {
			NL_SET_ERR_MSG_ATTR(extack, tb[TCA_P3_BUCKETS],
					    "Buckets must be a power of two");
			return -EINVAL;
		}
	}
	if (tb[TCA_P3_FLOWS])
		cfg->flows = nla_get_u32(tb[TCA_P3_FLOWS]);
	return p3_dscpmap_parse(cfg, tb, extack);
}

/* O(flows), once per change of "buckets". */
static void p3_rehash(struct p3_sched_data *q, struct hlist_head *table,
		      u32 log)
{
	struct hlist_node *tmp;
	struct p3_flow *flow;
	u32 i;

	for (i = 0; i < (1U << q->buckets_log); i++)
		hlist_for_each_entry_safe(flow, tmp, &q->flow_table[i],
					  hash_node) {
			hlist_del(&flow->hash_node);
			hlist_add_head(&flow->hash_node,
				       &table[hash_long(flow->key, log)]);
		}
}

static void p3_fold_bands(struct p3_sched_data *q, u8 bands)
{
	struct p3_flow *flow, *tmp;
	unsigned int i;

	if (q->lone && p3_cb(q->lone)->band >= bands)
		p3_cb(q->lone)->band = bands - 1;
	for (i = bands; i < P3_MAX_BANDS; i++) {
		list_for_each_entry_safe(flow, tmp, &q->bands[i].flows,
					 band_node)
			p3_flow_move(q, flow, bands - 1);
		/* A band that comes back starts afresh, and reliable. */
		gnet_stats_basic_sync_init(&q->bands[i].bstats);
		memset(&q->bands[i].qstats, 0, sizeof(q->bands[i].qstats));
		q->bands[i].deadline = 0;
		WRITE_ONCE(q->bands[i].deadline_us, 0);
		q->tolerant &= ~BIT_ULL(i);
	}
}

/* Dumps may come without the tree lock, as fq's and fq_codel's may since
 * 6.10: what they read is written once here, and read once there.
 */
static void p3_config_publish(struct p3_config *to,
			      const struct p3_config *cfg)
{
	unsigned int i;

	WRITE_ONCE(to->rate, cfg->rate);
	WRITE_ONCE(to->limit, cfg->limit);
	WRITE_ONCE(to->memory, cfg->memory);
	WRITE_ONCE(to->quantum, cfg->quantum);
	WRITE_ONCE(to->buckets, cfg->buckets);
	WRITE_ONCE(to->flows, cfg->flows);
	for (i = 0; i < TC_P3_DSCP_CODES; i++)
		WRITE_ONCE(to->dscpmap[i], cfg->dscpmap[i]);
	WRITE_ONCE(to->bands, cfg->bands);
	WRITE_ONCE(to->default_band, cfg->default_band);
	to->default_set = cfg->default_set;
	WRITE_ONCE(to->tag, cfg->tag);
}

/* The map enqueue reads: the given bands, the built-in rule elsewhere. */
static void p3_dscp_commit(struct p3_sched_data *q)
{
	unsigned int i;

	for (i = 0; i < TC_P3_DSCP_CODES; i++)
		q->dscp_band[i] = q->cfg.dscpmap[i] != TC_P3_DSCP_BUILTIN ?
				  q->cfg.dscpmap[i] :
				  p3_dscp_builtin(i, q->cfg.bands);
}

/* Under the tree lock: installs @cfg, and @table unless NULL, pushing out
 * packets over a lowered limit into @to_free.  Returns the table replaced.
 */
static struct hlist_head *p3_config_commit(struct Qdisc *sch,
					   const struct p3_config *cfg,
					   struct hlist_head *table,
					   struct sk_buff **to_free)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct hlist_head *old = q->flow_table;
	u32 pushed = 0, pushed_len = 0;
	int victim;
	u64 *cause;

	if (cfg->bands < q->cfg.bands)
		p3_fold_bands(q, cfg->bands);
	if (cfg->rate != q->cfg.rate) {
		/* Wake a dequeue the old rate put to sleep for longer. */
		q->paid_until = 0;
		q->paced_max_len = 0;
		if (sch->q.qlen)
			qdisc_watchdog_schedule_ns(&q->watchdog, ktime_get_ns());
	}
	p3_config_publish(&q->cfg, cfg);
	sch->limit = cfg->limit;
	p3_dscp_commit(q);

	/* As overflow does: loss-tolerant first, least urgent band first; the
	 * peeked packet stays.
	 */
	while ((cause = p3_overlimit(sch, 0, 0)) &&
	       (victim = p3_victim_band(q, 0)) >= 0) {
		(*cause)++;
		p3_drop_from(sch, victim, &pushed_len, to_free);
		pushed++;
	}
	if (pushed)
		qdisc_tree_reduce_backlog(sch, pushed, pushed_len);
	/* Idle flows over a lowered cap go now, others once they empty. */
	while (q->flows > cfg->flows && p3_gc(q))
		;

	if (!table)
		return NULL;
	if (old)
		p3_rehash(q, table, ilog2(cfg->buckets));
	q->flow_table = table;
	q->buckets_log = ilog2(cfg->buckets);
	return old;
}

/* Allocates what may fail, then commits what cannot under the tree lock. */
static int p3_apply(struct Qdisc *sch, const struct p3_config *cfg,
		    struct netlink_ext_ack *extack)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct hlist_head *table = NULL;
	struct sk_buff *to_free = NULL;

	if (!q->flow_table || cfg->buckets != q->cfg.buckets) {
		table = kvcalloc(cfg->buckets, sizeof(*table), GFP_KERNEL);
		if (!table) {
			NL_SET_ERR_MSG(extack, "No memory for the p3 flow table");
			return -ENOMEM;
		}
	}
	sch_tree_lock(sch);
	table = p3_config_commit(sch, cfg, table, &to_free);
	sch_tree_unlock(sch);
	kvfree(table);
	kfree_skb_list(to_free);
	return 0;
}

static int p3_change(struct Qdisc *sch, struct nlattr *opt,
		     struct netlink_ext_ack *extack)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct nlattr *tb[TCA_P3_MAX + 1];
	struct p3_config cfg;
	int err;

	err = nla_parse_nested(tb, TCA_P3_MAX, opt, p3_policy, extack);
	if (err < 0)
		return err;

	cfg = q->cfg;
	err = p3_config_parse(&cfg, tb, extack);
	if (err)
		return err;
	return p3_apply(sch, &cfg, extack);
}

static int p3_init(struct Qdisc *sch, struct nlattr *opt,
		   struct netlink_ext_ack *extack)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	unsigned int i;
	int err;

	/* Everything reset() and destroy() touch is valid before the first
	 * failure: both run after a failed init.
	 */
	qdisc_watchdog_init(&q->watchdog, sch);
	INIT_LIST_HEAD(&q->idle);
	q->bands = kvcalloc(P3_MAX_BANDS, sizeof(*q->bands), GFP_KERNEL);
	if (!q->bands) {
		NL_SET_ERR_MSG(extack, "No memory for the p3 bands");
		return -ENOMEM;
	}
	for (i = 0; i < P3_MAX_BANDS; i++) {
		INIT_LIST_HEAD(&q->bands[i].flows);
		INIT_LIST_HEAD(&q->bands[i].spill.band_node);
		gnet_stats_basic_sync_init(&q->bands[i].bstats);
	}
	p3_config_default(&q->cfg, sch);
	q->cfg.default_band = q->cfg.bands - 1;
	sch->limit = q->cfg.limit;

	err = tcf_block_get(&q->block, &q->filter_list, sch, extack);
	if (err)
		return err;

	q->by_size = kvcalloc(P3_MAX_BANDS * P3_SIZE_CLASSES,
			      sizeof(*q->by_size), GFP_KERNEL);
	if (!q->by_size) {
		NL_SET_ERR_MSG(extack, "No memory for the p3 size classes");
		return -ENOMEM;
	}
	q->spill_index = kvcalloc(1U << P3_SPILL_LOG, sizeof(*q->spill_index),
				  GFP_KERNEL);
	if (!q->spill_index) {
		NL_SET_ERR_MSG(extack, "No memory for the p3 spill index");
		return -ENOMEM;
	}
	/* Applying a configuration makes the flow table. */
	return opt ? p3_change(sch, opt, extack) : p3_apply(sch, &q->cfg, extack);
}

static void p3_destroy(struct Qdisc *sch)
{
	struct p3_sched_data *q = qdisc_priv(sch);

	tcf_block_put(q->block);
	qdisc_watchdog_cancel(&q->watchdog);
	p3_reset(sch);
	kvfree(q->flow_table);
	kvfree(q->by_size);
	kvfree(q->spill_index);
	kvfree(q->bands);
}

static int p3_dump(struct Qdisc *sch, struct sk_buff *skb)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	const struct p3_config *cfg = &q->cfg;
	u8 map[TC_P3_DSCP_CODES];
	struct nlattr *opts;
	unsigned int i;

	for (i = 0; i < TC_P3_DSCP_CODES; i++)
		map[i] = READ_ONCE(cfg->dscpmap[i]);
	opts = nla_nest_start_noflag(skb, TCA_OPTIONS);
	if (!opts)
		return -EMSGSIZE;
	if (nla_put_u8(skb, TCA_P3_BANDS, READ_ONCE(cfg->bands)) ||
	    nla_put_u8(skb, TCA_P3_DEFAULT, READ_ONCE(cfg->default_band)) ||
	    nla_put_u8(skb, TCA_P3_TAG, READ_ONCE(cfg->tag)) ||
	    nla_put_u32(skb, TCA_P3_LIMIT, READ_ONCE(cfg->limit)) ||
	    nla_put_u32(skb, TCA_P3_MEMORY, READ_ONCE(cfg->memory)) ||
	    nla_put_u32(skb, TCA_P3_QUANTUM, READ_ONCE(cfg->quantum)) ||
	    nla_put_u32(skb, TCA_P3_BUCKETS, READ_ONCE(cfg->buckets)) ||
	    nla_put_u32(skb, TCA_P3_FLOWS, READ_ONCE(cfg->flows)) ||
	    nla_put(skb, TCA_P3_DSCPMAP, sizeof(map), map) ||
	    nla_put_u64_64bit(skb, TCA_P3_RATE, READ_ONCE(cfg->rate),
			      TCA_P3_PAD)) {
		nla_nest_cancel(skb, opts);
		return -EMSGSIZE;
	}
	return nla_nest_end(skb, opts);
}

static int p3_dump_stats(struct Qdisc *sch, struct gnet_dump *d)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct tc_p3_xstats st;

	sch_tree_lock(sch);
	st = q->stats;
	st.flows = q->flows;
	st.flows_active = q->flows_active;
	sch_tree_unlock(sch);
	return gnet_stats_copy_app(d, &st, sizeof(st));
}

/* Classes H:1..H:N are the bands: statistics, filter targets and each
 * band's deadline.
 */

static struct Qdisc *p3_leaf(struct Qdisc *sch, unsigned long cl)
{
	return NULL;
}

static unsigned long p3_find(struct Qdisc *sch, u32 classid)
{
	return p3_minor_to_band(qdisc_priv(sch), TC_H_MIN(classid)) + 1;
}

static unsigned long p3_bind(struct Qdisc *sch, unsigned long parent,
			     u32 classid)
{
	return p3_find(sch, classid);
}

static void p3_unbind(struct Qdisc *sch, unsigned long cl)
{
}

static struct tcf_block *p3_tcf_block(struct Qdisc *sch, unsigned long cl,
				      struct netlink_ext_ack *extack)
{
	struct p3_sched_data *q = qdisc_priv(sch);

	if (cl) {
		NL_SET_ERR_MSG(extack, "p3 takes filters on the qdisc only, not on a band");
		return NULL;
	}
	return q->block;
}

static const struct nla_policy p3_class_policy[TCA_P3_CLASS_MAX + 1] = {
	[TCA_P3_CLASS_DEADLINE]	= NLA_POLICY_FULL_RANGE(NLA_U32,
							&p3_deadline_range),
};

static int p3_change_class(struct Qdisc *sch, u32 classid, u32 parentid,
			   struct nlattr **tca, unsigned long *arg,
			   struct netlink_ext_ack *extack)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct nlattr *tb[TCA_P3_CLASS_MAX + 1];
	struct p3_band *b;
	u32 us;
	int err;

	if (!*arg) {
		NL_SET_ERR_MSG(extack,
			       "p3 classes are its bands, H:1..H:bands: change one, none can be added");
		return -EOPNOTSUPP;
	}
	if (tca[TCA_RATE]) {
		NL_SET_ERR_MSG_ATTR(extack, tca[TCA_RATE],
				    "p3 classes keep no rate estimator");
		return -EOPNOTSUPP;
	}
	if (!tca[TCA_OPTIONS]) {
		NL_SET_ERR_MSG(extack, "p3 class change needs its option: deadline");
		return -EINVAL;
	}
	err = nla_parse_nested(tb, TCA_P3_CLASS_MAX, tca[TCA_OPTIONS],
			       p3_class_policy, extack);
	if (err < 0)
		return err;
	if (!tb[TCA_P3_CLASS_DEADLINE]) {
		NL_SET_ERR_MSG_ATTR(extack, tca[TCA_OPTIONS],
				    "p3 class change needs its option: deadline");
		return -EINVAL;
	}
	us = nla_get_u32(tb[TCA_P3_CLASS_DEADLINE]);

	sch_tree_lock(sch);
	b = &q->bands[*arg - 1];
	WRITE_ONCE(b->deadline_us, us);
	/* Rounded up, so that 1 us is not 0 (reliable); a packet expires at
	 * most one stamp unit (1 us) early.
	 */
	b->deadline = DIV_ROUND_UP_ULL((u64)us * NSEC_PER_USEC,
				       1U << P3_STAMP_SHIFT);
	if (us)
		q->tolerant |= BIT_ULL(*arg - 1);
	else
		q->tolerant &= ~BIT_ULL(*arg - 1);
	sch_tree_unlock(sch);
	return 0;
}

static int p3_dump_class(struct Qdisc *sch, unsigned long cl,
			 struct sk_buff *skb, struct tcmsg *tcm)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct nlattr *opts;

	tcm->tcm_handle |= TC_H_MIN(cl);
	opts = nla_nest_start_noflag(skb, TCA_OPTIONS);
	if (!opts)
		return -EMSGSIZE;
	if (nla_put_u32(skb, TCA_P3_CLASS_DEADLINE,
			READ_ONCE(q->bands[cl - 1].deadline_us))) {
		nla_nest_cancel(skb, opts);
		return -EMSGSIZE;
	}
	return nla_nest_end(skb, opts);
}

static int p3_dump_class_stats(struct Qdisc *sch, unsigned long cl,
			       struct gnet_dump *d)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	struct p3_band *b = &q->bands[cl - 1];
	struct gnet_stats_queue qs;

	sch_tree_lock(sch);
	qs = b->qstats;
	/* The lone packet is in no band's counters (p3_hold_lone()). */
	if (q->lone && p3_cb(q->lone)->band == cl - 1) {
		qs.qlen++;
		qs.backlog += qdisc_pkt_len(q->lone);
	}
	sch_tree_unlock(sch);
	if (gnet_stats_copy_basic(d, NULL, &b->bstats, true) < 0 ||
	    gnet_stats_copy_queue(d, NULL, &qs, qs.qlen) < 0)
		return -1;
	return 0;
}

static void p3_walk(struct Qdisc *sch, struct qdisc_walker *arg)
{
	struct p3_sched_data *q = qdisc_priv(sch);
	unsigned int i;

	if (arg->stop)
		return;
	for (i = 0; i < q->cfg.bands; i++)
		if (!tc_qdisc_stats_dump(sch, i + 1, arg))
			break;
}

static const struct Qdisc_class_ops p3_class_ops = {
	.leaf		= p3_leaf,
	.find		= p3_find,
	.tcf_block	= p3_tcf_block,
	.change		= p3_change_class,
	.bind_tcf	= p3_bind,
	.unbind_tcf	= p3_unbind,
	.dump		= p3_dump_class,
	.dump_stats	= p3_dump_class_stats,
	.walk		= p3_walk,
};

static struct Qdisc_ops p3_qdisc_ops __read_mostly = {
	.cl_ops		= &p3_class_ops,
	.id		= "p3",
	.priv_size	= sizeof(struct p3_sched_data),
	.enqueue	= p3_enqueue,
	.dequeue	= p3_dequeue,
	.peek		= p3_peek,
	.init		= p3_init,
	.reset		= p3_reset,
	.destroy	= p3_destroy,
	.change		= p3_change,
	.dump		= p3_dump,
	.dump_stats	= p3_dump_stats,
	.owner		= THIS_MODULE,
};
MODULE_ALIAS_NET_SCH("p3");

static int __init p3_module_init(void)
{
	int err;

	p3_flow_cache = KMEM_CACHE(p3_flow, 0);
	if (!p3_flow_cache)
		return -ENOMEM;
	err = register_qdisc(&p3_qdisc_ops);
	if (err)
		kmem_cache_destroy(p3_flow_cache);
	return err;
}

static void __exit p3_module_exit(void)
{
	unregister_qdisc(&p3_qdisc_ops);
	kmem_cache_destroy(p3_flow_cache);
}

module_init(p3_module_init);
module_exit(p3_module_exit);
MODULE_AUTHOR("The sch_p3 authors");
MODULE_DESCRIPTION("Priority-based Parameter Propagation (P3) packet scheduler");
MODULE_LICENSE("GPL");
