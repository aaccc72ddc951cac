// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The rule of the structs that grow (p3.h): callers built against an
 * older, the same or a newer header, through the public calls that read
 * options and the helper that sizes what statistics calls write.
 */
#include <errno.h>

#include "chan.h"
#include "internal.h"
#include "tap.h"

/* A caller from a header one field newer than ours. */
struct plan_opts_next {
	struct p3_plan_opts	o;
	uint64_t		next_field;
};

struct chan_opts_next {
	struct p3_chan_opts	o;
	uint64_t		next_field;
};

struct qdisc_opts_next {
	struct p3_qdisc_opts	o;
	uint64_t		next_field;
};

static int plan_with(const struct p3_plan_opts *o)
{
	struct p3_tensor t = { .name = "w", .bytes = 1000, .fwd = 0 };
	struct p3_slice *s = NULL;
	size_t n = 0;
	int err = p3_plan(&t, 1, o, &s, &n);

	p3_plan_free(s);
	return err;
}

static void test_plan_opts(void)
{
	struct plan_opts_next x = { { .bands = 4 }, 0 };

	ok(plan_with(&x.o) == 0, "plan options with size 0 read as the first layout");
	x.o.size = sizeof(x.o);
	ok(plan_with(&x.o) == 0, "plan options with this header's size");
	x.o.size = sizeof(x);
	ok(plan_with(&x.o) == 0, "a newer caller's options, its new field left zero");
	x.next_field = 7;
	ok_err(plan_with(&x.o), -E2BIG, "a newer caller's field this library would ignore: -E2BIG");
	x.o.size = offsetof(struct p3_plan_opts, order);
	x.o.order = 7;
	x.next_field = 0;
	ok(plan_with(&x.o) == 0, "an older caller's options: the bytes past its layout unread");
	x.next_field = 7;
	x.o.size = sizeof(uint32_t) * 2;
	ok_err(plan_with(&x.o), -EINVAL, "a size below the first layout: -EINVAL");
	x.o.size = sizeof(x.o);
	x.o.bands = 65;
	ok_err(plan_with(&x.o), -EINVAL, "the fields are still checked");
}

static void test_chan_opts(void)
{
	struct chan_opts_next x = { .next_field = 0 };
	struct p3_listener *l = NULL;

	p3_chan_opts_init(&x.o);
	ok(x.o.size == sizeof(x.o), "p3_chan_opts_init() sets the size");
	x.o.size = sizeof(x);
	x.o.timeout_ms = 1234;
	ok(p3_listen("127.0.0.1", "0", &x.o, &l) == 0, "listen with a newer caller's options");
	p3_listener_close(l);
	x.next_field = 1;
	ok_err(p3_listen("127.0.0.1", "0", &x.o, &l), -E2BIG,
	       "listen refuses a field it does not know");
	x.o.size = 3;
	ok_err(p3_listen("127.0.0.1", "0", &x.o, &l), -EINVAL, "listen refuses a short size");
}

/* A program built against the first layout calls the function itself,
 * not the header's macro: it gets that layout and not a byte past it,
 * and the library reads it as that layout (level stride 1).  A newer
 * program's fields past this library's are zeroed. */
static void test_init_sizes(void)
{
	union {
		struct p3_chan_opts	o;
		uint8_t			b[sizeof(struct chan_opts_next)];
	} u;
	struct p3_chan_opts read;
	struct chan_opts_next x;
	size_t i, past = 0;

	memset(&u, 0xa5, sizeof(u));
	(p3_chan_opts_init)(&u.o);
	for (i = P3_CHAN_OPTS_SIZE_1; i < sizeof(u); i++)
		past += u.b[i] != 0xa5;
	ok(u.o.size == P3_CHAN_OPTS_SIZE_1 && u.o.bands == 8 && !past,
	   "the first layout's init fills %zu bytes, none past them (%zu written past)",
	   (size_t)P3_CHAN_OPTS_SIZE_1, past);
	ok(chan_opts_read(&read, &u.o) == 0 && read.level_stride == 1,
	   "and is read as that layout: level stride 1");
	memset(&x, 0xa5, sizeof(x));
	p3_chan_opts_init_sized(&x.o, sizeof(x));
	ok(x.o.size == sizeof(x) && x.o.level_stride == 1 && x.next_field == 0,
	   "a newer caller's init: its size, this layout's defaults, its new field zero");
}

static void test_read_keeps_defaults(void)
{
	struct p3_chan_opts dst, src = { .size = offsetof(struct p3_chan_opts, timeout_ms) };

	/* As a later libp3 sees an older caller: the fields the caller's
	 * struct does not reach keep their defaults. */
	src.bands = 3;
	src.timeout_ms = 999;	/* beyond src.size: not the caller's */
	p3_chan_opts_init(&dst);
	ok(p3_struct_in(&dst, sizeof(dst), offsetof(struct p3_chan_opts, timeout_ms), &src) == 0 &&
	   dst.bands == 3 && dst.timeout_ms != 999 && dst.size == sizeof(dst),
	   "an older caller's fields are read, the rest keep their defaults");
}

/* The options are read and checked before the device is looked up: on
 * one that does not exist, options libp3 takes fail with -ENODEV. */
static int qdisc_with(const struct p3_qdisc_opts *o)
{
	return p3_qdisc_add("nosuchdev0", P3_ROOT, 0, o);
}

static void test_qdisc_opts(void)
{
	struct qdisc_opts_next x = { { .size = sizeof(x.o), .mask = P3_QOPT_FLOWS,
				       .flows = 4096 }, 0 };

	ok_err(qdisc_with(&x.o), -ENODEV, "qdisc options: flows with this header's size");
	x.o.size = 0;
	ok_err(qdisc_with(&x.o), -EINVAL,
	       "flows from a first-layout caller (size 0): -EINVAL, rather than a 0 sent");
	x.o.size = P3_QDISC_OPTS_SIZE_1;
	ok_err(qdisc_with(&x.o), -EINVAL, "... or a size that ends before flows");
	x.o.mask = P3_QOPT_LIMIT;
	x.o.limit = 5;
	ok_err(qdisc_with(&x.o), -ENODEV, "a first-layout caller's options without flows");
	x.o.size = 0;
	ok_err(qdisc_with(&x.o), -ENODEV, "... with size 0 too");
	x.o.size = sizeof(x);
	x.next_field = 7;
	ok_err(qdisc_with(&x.o), -E2BIG, "a newer caller's field this library would ignore");
	ok(sizeof(struct p3_qdisc_opts) == 40 || sizeof(void *) != 8,
	   "flows took the tail padding: the options are still 40 bytes (LP64)");
}

static void test_out_len(void)
{
	struct p3_qdisc_stats st = { 0 };
	const size_t first = offsetof(struct p3_qdisc_stats, band);

	ok(p3_struct_out_len(&st, sizeof(st), sizeof(st)) == (int)sizeof(st),
	   "statistics: size 0 gets the first layout whole");
	st.size = (uint32_t)first;
	ok(p3_struct_out_len(&st, sizeof(st), first) == (int)first,
	   "an older caller's statistics get only its own size");
	st.size = sizeof(st) + 64;
	ok(p3_struct_out_len(&st, sizeof(st), sizeof(st)) == (int)sizeof(st),
	   "a newer caller's get what this library has");
	st.size = 4;
	ok_err(p3_struct_out_len(&st, sizeof(st), sizeof(st)), -EINVAL,
	       "a size below the first layout: -EINVAL");
}

int main(void)
{
	test_plan_opts();
	test_chan_opts();
	test_init_sizes();
	test_read_keeps_defaults();
	test_qdisc_opts();
	test_out_len();
	return tap_done();
}
