// SPDX-License-Identifier: LGPL-2.1-or-later
/* The planner: hand-worked plans, then invariants over random models. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "p3.h"
#include "tap.h"
#include "util.h"

#define S(t, o, l, lv, m) { .tensor = t, .offset = o, .length = l, .level = lv, .msg = m }
#define SP(t, o, l, lv, m, p) { .tensor = t, .offset = o, .length = l, .level = lv, .msg = m, \
				.prio = p }

/* prios: compare prio as well (the wants written with SP). */
static int same_plan(const struct p3_slice *got, size_t n, const struct p3_slice *want,
		     size_t m, int prios)
{
	size_t i;

	if (n != m)
		return 0;
	for (i = 0; i < n; i++)
		if (got[i].tensor != want[i].tensor || got[i].offset != want[i].offset ||
		    got[i].length != want[i].length || got[i].level != want[i].level ||
		    got[i].msg != want[i].msg || (prios && got[i].prio != want[i].prio))
			return 0;
	return 1;
}

static int plan_is_prio(const struct p3_tensor *t, size_t n, const struct p3_plan_opts *o,
			const struct p3_slice *want, size_t m, int prios)
{
	struct p3_slice *s;
	size_t ns;
	int good;

	if (p3_plan(t, n, o, &s, &ns))
		return 0;
	good = same_plan(s, ns, want, m, prios);
	p3_plan_free(s);
	return good;
}

static int plan_is(const struct p3_tensor *t, size_t n, const struct p3_plan_opts *o,
		   const struct p3_slice *want, size_t m)
{
	return plan_is_prio(t, n, o, want, m, 0);
}

static void test_hand(void)
{
	/* Cutting, and a merge that would cross a band boundary. */
	static const struct p3_tensor t1[] = {
		{ "conv1", 500000, 0 }, { "bn1", 1000, 1 }, { "conv2", 2000, 2 },
		{ "fc", 300000, 3 },
	};
	static const struct p3_slice w1[] = {
		S(0, 0, 200000, 0, 0), S(0, 200000, 200000, 0, 1), S(0, 400000, 100000, 0, 2),
		S(1, 0, 1000, 1, 3), S(2, 0, 2000, 2, 4),
		S(3, 0, 200000, 3, 5), S(3, 200000, 100000, 3, 6),
	};
	struct p3_plan_opts o = { .bands = 4, .alpha_s = 1e-5, .beta_s_per_byte = 1e-9 };

	ok(plan_is(t1, 4, &o, w1, 7), "500 KB cut into 200+200+100 KB; no merge across bands");

	/* Six small layers into two bands: three per band, one message each. */
	static const struct p3_tensor t2[] = {
		{ "a", 100, 0 }, { "b", 100, 1 }, { "c", 100, 2 },
		{ "d", 100, 3 }, { "e", 100, 4 }, { "f", 100, 5 },
	};
	static const struct p3_slice w2[] = {
		S(0, 0, 100, 0, 0), S(1, 0, 100, 0, 0), S(2, 0, 100, 0, 0),
		S(3, 0, 100, 1, 1), S(4, 0, 100, 1, 1), S(5, 0, 100, 1, 1),
	};
	o.bands = 2;
	ok(plan_is(t2, 6, &o, w2, 6), "6 small layers, 2 bands: 2 merged messages");

	/* Merging stops at the slice size. */
	static const struct p3_tensor t3[] = {
		{ "a", 150000, 0 }, { "b", 60000, 0 }, { "c", 10000, 0 }, { "d", 130000, 0 },
	};
	static const struct p3_slice w3[] = {
		S(0, 0, 150000, 0, 0), S(1, 0, 60000, 0, 1), S(2, 0, 10000, 0, 1),
		S(3, 0, 130000, 0, 1),
	};
	ok(plan_is(t3, 4, &o, w3, 4), "merge runs until the next tensor would pass 200 KB");

	/* No start-up cost: merging buys nothing, so nothing is merged. */
	static const struct p3_slice w4[] = {
		S(0, 0, 100, 0, 0), S(1, 0, 100, 0, 1), S(2, 0, 100, 0, 2),
		S(3, 0, 100, 1, 3), S(4, 0, 100, 1, 4), S(5, 0, 100, 1, 5),
	};
	o.alpha_s = 0;
	ok(plan_is(t2, 6, &o, w4, 6), "alpha = 0 disables merging");

	/* Input out of forward order; equal forward indices share a level. */
	static const struct p3_tensor t5[] = {
		{ "fc.w", 300, 2 }, { "conv.w", 100, 0 }, { "conv.b", 10, 0 }, { "bn", 20, 1 },
		{ "empty", 0, 1 },
	};
	static const struct p3_slice w5[] = {
		S(1, 0, 100, 0, 0), S(2, 0, 10, 0, 1), S(3, 0, 20, 1, 2), S(0, 0, 300, 2, 3),
	};
	o = (struct p3_plan_opts){ .bands = 8 };
	ok(plan_is(t5, 5, &o, w5, 4),
	   "forward order from fwd, ties in input order, zero-byte tensor skipped");

	static const struct p3_slice w6[] = {
		S(0, 0, 64, 0, 0), S(0, 64, 64, 0, 1), S(0, 128, 1, 0, 2),
	};
	static const struct p3_tensor t6[] = { { "x", 129, 9 } };
	o = (struct p3_plan_opts){ .bands = 1, .slice_bytes = 64 };
	ok(plan_is(t6, 1, &o, w6, 3), "slice_bytes override: 129 B at 64 B is 64+64+1");
}

static void test_tail_first(void)
{
	/* VGG-19's shape: the tail (c, d: 300 of 1400 B) first, on level 0. */
	static const struct p3_tensor t1[] = {
		{ "a", 100, 0 }, { "big", 1000, 1 }, { "c", 200, 2 }, { "d", 100, 3 },
	};
	static const struct p3_slice w1[] = {
		SP(0, 0, 100, 0, 0, 2), SP(1, 0, 1000, 1, 1, 3),
		SP(2, 0, 200, 0, 2, 0), SP(3, 0, 100, 0, 3, 1),
	};
	static const struct p3_slice w1fwd[] = {
		SP(0, 0, 100, 0, 0, 0), SP(1, 0, 1000, 1, 1, 1),
		SP(2, 0, 200, 2, 2, 2), SP(3, 0, 100, 3, 3, 3),
	};
	struct p3_plan_opts o = { .size = sizeof(o), .bands = 4, .order = P3_ORDER_TAIL_FIRST };

	ok(plan_is_prio(t1, 4, &o, w1, 4, 1),
	   "tail first: the tensors after the largest on level 0 and ahead, the rest after them");
	o.order = P3_ORDER_FORWARD;
	ok(plan_is_prio(t1, 4, &o, w1fwd, 4, 1), "forward order: prio is the forward rank");

	/* Exactly a quarter qualifies; one byte more does not. */
	static const struct p3_tensor t2[] = { { "a", 100, 0 }, { "big", 200, 1 }, { "t", 100, 2 } };
	static const struct p3_slice w2[] = {
		SP(0, 0, 100, 0, 0, 1), SP(1, 0, 200, 1, 1, 2), SP(2, 0, 100, 0, 2, 0),
	};
	o = (struct p3_plan_opts){ .size = sizeof(o), .bands = 3, .order = P3_ORDER_TAIL_FIRST };
	ok(plan_is_prio(t2, 3, &o, w2, 3, 1), "a tail of exactly a quarter of the bytes goes first");
	static const struct p3_tensor t3[] = { { "a", 100, 0 }, { "big", 200, 1 }, { "t", 101, 2 } };
	static const struct p3_slice w3[] = {
		SP(0, 0, 100, 0, 0, 0), SP(1, 0, 200, 1, 1, 1), SP(2, 0, 101, 2, 2, 2),
	};
	ok(plan_is_prio(t3, 3, &o, w3, 3, 1), "a tail of more than a quarter keeps forward order");

	/* The largest last: no tail.  A tie: the first largest.  A tensor
	 * sharing the largest's forward index is needed with it, not after. */
	static const struct p3_tensor t4[] = { { "a", 10, 0 }, { "big", 500, 1 } };
	static const struct p3_slice w4[] = { SP(0, 0, 10, 0, 0, 0), SP(1, 0, 500, 1, 1, 1) };
	o.bands = 2;
	ok(plan_is_prio(t4, 2, &o, w4, 2, 1), "the largest tensor last: forward order");
	static const struct p3_tensor t4e[] = {
		{ "a", 10, 0 }, { "big", 500, 1 }, { "e", 0, 2 }, { "f", 0, 3 },
	};
	static const struct p3_slice w4e[] = { SP(0, 0, 10, 0, 0, 0), SP(1, 0, 500, 0, 1, 1) };
	ok(plan_is_prio(t4e, 4, &o, w4e, 2, 1), "only empty tensors after the largest: forward order");
	static const struct p3_tensor t5[] = {
		{ "big", 500, 0 }, { "bias", 10, 0 }, { "big2", 500, 1 }, { "t", 50, 2 },
	};
	static const struct p3_slice w5[] = {
		SP(0, 0, 500, 0, 0, 0), SP(1, 0, 10, 0, 1, 1), SP(2, 0, 500, 0, 2, 2),
		SP(3, 0, 50, 0, 3, 3),
	};
	o.bands = 1;
	ok(plan_is_prio(t5, 4, &o, w5, 4, 1),
	   "a tie for the largest: the first's tail (big2 and t, half the bytes) is too large");
	static const struct p3_tensor t6[] = {
		{ "a", 100, 0 }, { "big", 900, 1 }, { "bias", 20, 1 }, { "t", 30, 2 },
	};
	static const struct p3_slice w6[] = {
		SP(0, 0, 100, 0, 0, 1), SP(1, 0, 900, 0, 1, 2), SP(2, 0, 20, 0, 2, 3),
		SP(3, 0, 30, 0, 3, 0),
	};
	ok(plan_is_prio(t6, 4, &o, w6, 4, 1),
	   "the largest's bias (same forward index) stays with it; only t goes first");

	/* Merging never joins the tail to what it goes ahead of. */
	static const struct p3_tensor t7[] = { { "a", 10, 0 }, { "big", 30, 1 }, { "t", 5, 2 } };
	static const struct p3_slice w7[] = {
		SP(0, 0, 10, 0, 0, 1), SP(1, 0, 30, 0, 0, 2), SP(2, 0, 5, 0, 1, 0),
	};
	o = (struct p3_plan_opts){ .size = sizeof(o), .bands = 1, .alpha_s = 1e-5,
				   .order = P3_ORDER_TAIL_FIRST };
	ok(plan_is_prio(t7, 3, &o, w7, 3, 1), "the tail starts a message of its own");
}

static void test_errors(void)
{
	struct p3_tensor t = { "x", 10, 0 };
	struct p3_plan_opts o = { .bands = 65 };
	struct p3_slice *s = (void *)1;
	size_t n = 7;

	ok(p3_plan(&t, 1, &o, &s, &n) == -EINVAL, "65 bands is invalid");
	o = (struct p3_plan_opts){ .alpha_s = NAN };
	ok(p3_plan(&t, 1, &o, &s, &n) == -EINVAL, "NaN alpha is invalid");
	o = (struct p3_plan_opts){ .size = sizeof(o), .order = P3_ORDER_TAIL_FIRST + 1 };
	ok(p3_plan(&t, 1, &o, &s, &n) == -EINVAL, "an unknown order is invalid");
	ok(p3_plan(NULL, 0, NULL, &s, &n) == 0 && !s && !n, "empty model: empty plan");
	t.bytes = UINT64_MAX;
	o = (struct p3_plan_opts){ .slice_bytes = 1 };
	ok(p3_plan(&t, 1, &o, &s, &n) == -E2BIG, "2^64 one-byte slices: E2BIG, no overflow");
}

static void test_suggest(void)
{
	uint64_t s = p3_plan_suggest_slice(1e-5, 1e-9, 0, 0.05);

	/* (1e-5 + 40e-9) * 0.95 / (0.05 * 1e-9) = 190760 */
	ok(s >= 190760 && s <= 190764 && s % 4 == 0, "alpha 10 us, 1 GB/s: %llu ~ 190760 B",
	   (unsigned long long)s);
	s = p3_plan_suggest_slice(1e-5, 0, 1e9, 0.05);
	ok(s >= 190760 && s <= 190764, "link rate stands in for beta");
	s = p3_plan_suggest_slice(1e-5, 1e-9, 1e8, 0.05);
	/* (1e-5 + 40e-8) * 0.95 / (0.05 * 1e-8) = 19760 */
	ok(s >= 19760 && s <= 19764, "a slower link dominates beta: %llu ~ 19760 B",
	   (unsigned long long)s);
	ok(p3_plan_suggest_slice(1e-5, 1e-9, 0, 0.01) > s, "a lower overhead target grows it");
	ok(p3_plan_suggest_slice(0, 8e-10, 0, 0.05) == 4096, "no alpha: clamped to 4 KiB");
	ok(p3_plan_suggest_slice(10, 1e-9, 0, 0.05) == 16u << 20, "huge alpha: 16 MiB cap");
	ok(p3_plan_suggest_slice(1e-5, 0, 0, 0.05) == P3_DEFAULT_SLICE,
	   "unknown beta and rate: P3's 200,000 B");
}

/* ---------------------------------------------------------- invariants */

struct inv {
	int covered, monotone, merge_ok, order_ok, bounded;
};

static int cmp_slice(const void *a, const void *b)
{
	const struct p3_slice *x = a, *y = b;

	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void check_coverage(const struct p3_tensor *t, size_t n, struct p3_slice *s, size_t ns,
			   uint64_t slice, struct inv *v)
{
	uint64_t next = 0;
	size_t i, j = 0;

	qsort(s, ns, sizeof(*s), cmp_slice);
	for (i = 0; i < n; i++) {
		for (next = 0; j < ns && s[j].tensor == i; j++) {
			if (s[j].offset != next || !s[j].length || s[j].length > slice)
				v->covered = 0;
			next += s[j].length;
		}
		if (next != t[i].bytes)
			v->covered = 0;
	}
	if (j != ns)
		v->covered = 0;
}

static void check_order(const struct p3_tensor *t, const struct p3_slice *s, size_t ns,
			const struct p3_plan_opts *o, struct inv *v)
{
	uint64_t msg_bytes = 0;
	size_t i;

	for (i = 0; i < ns; i++) {
		if (s[i].level >= o->bands)
			v->bounded = 0;
		if (!i)
			continue;
		/* Output is in forward order: fwd, levels, msg ids never go back. */
		if (t[s[i].tensor].fwd < t[s[i - 1].tensor].fwd || s[i].msg < s[i - 1].msg)
			v->order_ok = 0;
		if (s[i].level < s[i - 1].level ||
		    (t[s[i].tensor].fwd == t[s[i - 1].tensor].fwd && s[i].level != s[i - 1].level))
			v->monotone = 0;
		if (s[i].msg != s[i - 1].msg) {
			msg_bytes = 0;
			continue;
		}
		/* A merged message: one band, whole tensors, under the cap. */
		if (!msg_bytes)
			msg_bytes = s[i - 1].length;
		msg_bytes += s[i].length;
		if (s[i].level != s[i - 1].level || s[i].offset || s[i - 1].offset ||
		    s[i].length != t[s[i].tensor].bytes || msg_bytes > o->slice_bytes)
			v->merge_ok = 0;
	}
}

/*
 * Tail first against forward order, slice by slice (both plans are in
 * forward order): the moved tensors are a suffix of forward order, after a
 * change of forward index, with at most a quarter of the bytes, on level 0
 * and ahead of all others in the same order; every other slice keeps its
 * level and moves back by one amount; no message holds both.  Returns
 * the number of moved slices, -1 if wrong.
 */
static long check_tail(const struct p3_tensor *t, const struct p3_slice *f,
		       const struct p3_slice *s, size_t ns)
{
	uint64_t total = 0, moved = 0;
	uint32_t back = 0, ahead = 0;
	size_t i, big, first = ns;

	for (i = 0; i < ns; i++) {
		if (f[i].tensor != s[i].tensor || f[i].offset != s[i].offset)
			return -1;
		total += s[i].length;
		if (first == ns && s[i].prio < f[i].prio)
			first = i;
		if (i >= first)
			moved += s[i].length;
	}
	if (first == ns)
		return 0;
	if (!first || moved * 4 > total || s[first].msg == s[first - 1].msg ||
	    t[f[first].tensor].fwd == t[f[first - 1].tensor].fwd)
		return -1;
	/* ... right after the first largest tensor and those sharing its index */
	for (i = 0, big = 0; i < ns; i++)
		if (t[f[i].tensor].bytes > t[f[big].tensor].bytes)
			big = i;
	if (big >= first || t[f[big].tensor].fwd != t[f[first - 1].tensor].fwd)
		return -1;
	back = s[0].prio - f[0].prio;
	ahead = f[first].prio - s[first].prio;
	for (i = 0; i < ns; i++) {
		if (i < first ? s[i].prio != f[i].prio + back || s[i].level != f[i].level
			      : s[i].prio != f[i].prio - ahead || s[i].level ||
				s[i].prio >= back)
			return -1;
	}
	return (long)(ns - first);
}

static void test_random(void)
{
	struct inv v = { 1, 1, 1, 1, 1 };
	struct p3_slice *tf;
	size_t ntf;
	long moved;
	int tail_ok = 1, tails = 0;
	struct p3_tensor t[300];
	struct p3_plan_opts o;
	struct p3_slice *s;
	uint64_t rs = 7, merged = 0, total = 0;
	size_t n, ns, i;
	int round, fails = 0;

	for (round = 0; round < 400; round++) {
		n = rnd_range(&rs, 1, 300);
		for (i = 0; i < n; i++) {
			/* Mostly small layers, some huge ones, as real models have. */
			t[i].bytes = rnd_range(&rs, 0, 3) ? rnd_range(&rs, 0, 70000)
							  : rnd_range(&rs, 0, 3000000);
			t[i].fwd = (uint32_t)rnd_range(&rs, 0, n);
			t[i].name = NULL;
		}
		o = (struct p3_plan_opts){ .bands = (unsigned int)rnd_range(&rs, 1, 64),
					   .slice_bytes = rnd_range(&rs, 1000, 300000),
					   .alpha_s = rnd_range(&rs, 0, 1) * 1e-5 };
		if (p3_plan(t, n, &o, &s, &ns)) {
			fails++;
			continue;
		}
		check_order(t, s, ns, &o, &v);
		for (i = 1; i < ns; i++)
			merged += s[i].msg == s[i - 1].msg;
		total += ns;
		o.size = sizeof(o);
		o.order = P3_ORDER_TAIL_FIRST;
		if (p3_plan(t, n, &o, &tf, &ntf) || ntf != ns) {
			tail_ok = 0;
		} else {
			moved = check_tail(t, s, tf, ns);
			tail_ok &= moved >= 0;
			tails += moved > 0;
			p3_plan_free(tf);
		}
		check_coverage(t, n, s, ns, o.slice_bytes, &v);
		p3_plan_free(s);
	}
	ok(!fails, "400 random models planned");
	ok(v.covered, "every byte of every tensor covered exactly once, slices <= slice size");
	ok(v.monotone, "levels never decrease in forward order; equal fwd, equal level");
	ok(v.bounded, "levels below the band count");
	ok(v.order_ok, "slices come in forward order with non-decreasing message ids");
	ok(v.merge_ok && merged > 0,
	   "merges: whole tensors, one band, within slice size (%llu of %llu slices merged)",
	   (unsigned long long)merged, (unsigned long long)total);
	ok(tail_ok && tails > 0,
	   "tail first: a light suffix moved ahead on level 0, the rest as planned (%d of 400 models)",
	   tails);
}

int main(void)
{
	test_hand();
	test_tail_first();
	test_errors();
	test_suggest();
	test_random();
	return tap_done();
}
