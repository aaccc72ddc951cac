// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The slice planner: P3's slicing, MG-WFBP's merging, and the mapping of
 * forward order onto the qdisc's bands.
 *
 * Cost model (alpha-beta): a message of b bytes costs alpha + beta * b to
 * send.  Cutting a tensor into slices bounds how long an urgent slice
 * waits behind a less urgent one already on the wire (one slice time);
 * merging a run of small tensors saves alpha for every tensor after the
 * first.  The merged message is capped at the slice size, so merging never
 * makes preemption coarser than slicing already made it.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "internal.h"

#define SUGGEST_MIN	4096
#define SUGGEST_MAX	(16u << 20)
#define SUGGEST_ALIGN	4		/* one fp32 parameter */
#define DEFAULT_OVERHEAD 0.05

struct plan_ctx {
	const struct p3_tensor	*t;
	unsigned int		bands;
	uint64_t		slice;
	uint64_t		merge;
	int			merging;
	uint64_t		order;
};

static int cmp_key(const void *a, const void *b)
{
	uint64_t ka = *(const uint64_t *)a, kb = *(const uint64_t *)b;

	return ka < kb ? -1 : ka > kb;
}

/*
 * Forward order, input order among equal forward indices.  The key packs
 * both into one u64 so that plain qsort (no context argument, so no
 * global) gives a stable order.
 */
static int plan_order(const struct p3_tensor *t, size_t n, uint32_t **order)
{
	uint64_t *key = malloc(n * sizeof(*key));
	size_t i;

	*order = malloc(n * sizeof(**order));
	if (!key || !*order) {
		free(key);
		free(*order);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		key[i] = (uint64_t)t[i].fwd << 32 | i;
	qsort(key, n, sizeof(*key), cmp_key);
	for (i = 0; i < n; i++)
		(*order)[i] = (uint32_t)key[i];
	free(key);
	return 0;
}

static int plan_opts(const struct p3_plan_opts *opts, struct plan_ctx *pc)
{
	struct p3_plan_opts def = { 0 }, *o = &def;
	int err;

	if (opts) {
		err = p3_struct_in(o, sizeof(*o), P3_PLAN_OPTS_SIZE_1, opts);
		if (err)
			return err;
	}
	pc->bands = o->bands ? o->bands : 8;
	pc->slice = o->slice_bytes ? o->slice_bytes : P3_DEFAULT_SLICE;
	pc->merge = o->merge_bytes ? o->merge_bytes : pc->slice;
	pc->order = o->order;
	if (pc->bands > P3_MAX_BANDS || !(o->alpha_s >= 0) || !(o->beta_s_per_byte >= 0) ||
	    pc->order > P3_ORDER_TAIL_FIRST)
		return -EINVAL;
	/* Merging trades granularity for fewer start-ups: only with alpha > 0. */
	pc->merging = o->alpha_s > 0;
	return 0;
}

/*
 * Forward ranks onto levels, monotone.  With at most as many distinct
 * layers as bands each gets its own level; otherwise they share bands in
 * equal runs, layer 0 always alone at the front of band 0's run.
 */
static uint8_t rank_level(uint64_t rank, uint64_t ranks, unsigned int bands)
{
	if (ranks <= bands)
		return (uint8_t)rank;
	return (uint8_t)(rank * bands / ranks);
}

static size_t plan_count(const struct plan_ctx *pc, size_t n, int *overflow)
{
	size_t i, total = 0, k;

	for (i = 0; i < n; i++) {
		k = pc->t[i].bytes / pc->slice + !!(pc->t[i].bytes % pc->slice);
		if (total + k < total)
			*overflow = 1;
		total += k;
	}
	return total;
}

struct plan_state {
	struct p3_slice	*out;
	size_t		nout;
	uint32_t	msg;
	int		open;		/* a merged message can still grow */
	uint8_t		open_level;
	uint64_t	open_bytes;
};

static void plan_tensor(const struct plan_ctx *pc, struct plan_state *ps, uint32_t id,
			uint32_t prio, uint8_t level)
{
	uint64_t bytes = pc->t[id].bytes, off, len;
	struct p3_slice *s;

	if (!bytes)
		return;
	/* Join the open message: small, same band, still under the cap. */
	if (ps->open && ps->open_level == level && bytes <= pc->slice &&
	    bytes <= pc->merge - ps->open_bytes) {
		s = &ps->out[ps->nout++];
		*s = (struct p3_slice){ .tensor = id, .msg = ps->msg - 1, .offset = 0,
					.length = bytes, .prio = prio, .level = level };
		ps->open_bytes += bytes;
		return;
	}
	for (off = 0; off < bytes; off += len) {
		len = bytes - off < pc->slice ? bytes - off : pc->slice;
		s = &ps->out[ps->nout++];
		*s = (struct p3_slice){ .tensor = id, .msg = ps->msg++, .offset = off,
					.length = len, .prio = prio, .level = level };
	}
	ps->open = pc->merging && bytes <= pc->slice && bytes < pc->merge;
	ps->open_level = level;
	ps->open_bytes = bytes;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/*
 * P3_ORDER_TAIL_FIRST: the position in forward order of the first tensor
 * needed after the largest one (the first largest, on a tie), if from there
 * on the tensors hold some bytes but at most a quarter of all; n if there
 * is no such tail (moving empty tensors would only renumber prios).
 * tail <= rest / 3 is tail <= (tail + rest) / 4 without the overflow.  A
 * sum that saturates errs towards no tail: a saturated tail is refused,
 * and a saturated rest is compared as UINT64_MAX.
 */
static size_t plan_tail(const struct plan_ctx *pc, const uint32_t *order, size_t n)
{
	uint64_t tail = 0, rest = 0;
	size_t i, largest = 0, first;

	if (pc->order != P3_ORDER_TAIL_FIRST || !n)
		return n;
	for (i = 1; i < n; i++)
		if (pc->t[order[i]].bytes > pc->t[order[largest]].bytes)
			largest = i;
	/* Tensors the forward pass needs together with the largest are not after it. */
	for (first = largest + 1; first < n; first++)
		if (pc->t[order[first]].fwd != pc->t[order[largest]].fwd)
			break;
	for (i = 0; i < n; i++) {
		if (i < first)
			rest = add_sat(rest, pc->t[order[i]].bytes);
		else
			tail = add_sat(tail, pc->t[order[i]].bytes);
	}
	return first < n && tail && tail != UINT64_MAX && tail <= rest / 3 ? first : n;
}

static void plan_fill(const struct plan_ctx *pc, const uint32_t *order, size_t n,
		      struct plan_state *ps)
{
	uint64_t rank = 0, ranks = 0;
	size_t i, tail = plan_tail(pc, order, n), ahead = n - tail;

	for (i = 0; i < n; i++)
		if (!i || pc->t[order[i]].fwd != pc->t[order[i - 1]].fwd)
			ranks++;
	for (i = 0; i < n; i++) {
		if (i && pc->t[order[i]].fwd != pc->t[order[i - 1]].fwd)
			rank++;
		if (i < tail) {
			plan_tensor(pc, ps, order[i], (uint32_t)(i + ahead),
				    rank_level(rank, ranks, pc->bands));
			continue;
		}
		/* A message is sent at its most urgent slice's prio: none may
		 * hold both the tail and what it goes ahead of. */
		if (i == tail)
			ps->open = 0;
		plan_tensor(pc, ps, order[i], (uint32_t)(i - tail), 0);
	}
}

P3_EXPORT int p3_plan(const struct p3_tensor *t, size_t n, const struct p3_plan_opts *opts,
		      struct p3_slice **out, size_t *nout)
{
	struct plan_state ps = { 0 };
	struct plan_ctx pc = { .t = t };
	int overflow = 0, err;
	uint32_t *order;
	size_t total;

	if (!out || !nout || (n && !t) || n > UINT32_MAX)
		return -EINVAL;
	*out = NULL;
	*nout = 0;
	err = plan_opts(opts, &pc);
	if (err)
		return err;
	total = plan_count(&pc, n, &overflow);
	if (overflow || total > UINT32_MAX || total > SIZE_MAX / sizeof(*ps.out))
		return -E2BIG;	/* message ids are u32 */
	if (!total)
		return 0;
	ps.out = malloc(total * sizeof(*ps.out));
	if (!ps.out || plan_order(t, n, &order)) {
		free(ps.out);
		return -ENOMEM;
	}
	plan_fill(&pc, order, n, &ps);
	free(order);
	*out = ps.out;
	*nout = ps.nout;
	return 0;
}

P3_EXPORT void p3_plan_free(struct p3_slice *slices)
{
	free(slices);
}

/*
 * A slice of S bytes pays a fixed alpha + H * beta (H: frame header) on top
 * of S * beta, so its overhead fraction is (alpha + H beta) / (alpha +
 * H beta + S beta).  Keeping that at most e gives
 *	S >= (alpha + H beta) * (1 - e) / (e * beta).
 * Anything larger only lengthens the wait of an urgent slice behind one
 * that is already on the wire (S * beta), so the bound itself is returned.
 * beta is at least the wire's 1 / rate: a message cannot be sent faster.
 */
P3_EXPORT uint64_t p3_plan_suggest_slice(double alpha_s, double beta_s_per_byte,
					 double link_bytes_per_s, double max_overhead)
{
	double beta = beta_s_per_byte > 0 ? beta_s_per_byte : 0, e = max_overhead, s;
	uint64_t bytes;

	if (link_bytes_per_s > 0 && 1.0 / link_bytes_per_s > beta)
		beta = 1.0 / link_bytes_per_s;
	if (!(beta > 0) || !isfinite(beta))
		return P3_DEFAULT_SLICE;
	if (!(e > 0 && e < 1))
		e = DEFAULT_OVERHEAD;
	if (!(alpha_s > 0) || !isfinite(alpha_s))
		alpha_s = 0;
	s = (alpha_s + P3_FRAME_HDR_LEN * beta) * (1 - e) / (e * beta);
	if (!(s < SUGGEST_MAX))
		return SUGGEST_MAX;
	bytes = (uint64_t)ceil(s);
	bytes = (bytes + SUGGEST_ALIGN - 1) / SUGGEST_ALIGN * SUGGEST_ALIGN;
	return bytes < SUGGEST_MIN ? SUGGEST_MIN : bytes;
}
