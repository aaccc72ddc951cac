// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The receiver's bounded resources, without sockets (frames are fed as a
 * connection would deliver them): the tensor table's probe lengths for
 * ids sharing their low bits, p3_chan_cancel() against a reference set,
 * a cancel in the middle of a frame, and the frame buffer given back
 * after a large frame.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "chan.h"
#include "tap.h"
#include "util.h"

#define NIDS	20000

static size_t frame(uint8_t *out, unsigned int band, uint32_t tensor, uint64_t off,
		    const uint8_t *data, uint32_t len)
{
	struct p3_frame f = { .type = P3_FRAME_DATA, .level = band, .tensor = tensor,
			      .offset = off, .length = len, .iter = 0 };

	memcpy(out + P3_FRAME_HDR_LEN, data, len);
	p3_frame_header(out, &f, out + P3_FRAME_HDR_LEN);
	return P3_FRAME_HDR_LEN + len;
}

static void test_probes(void)
{
	struct p3_chan *c = chan_alloc(P3_ROLE_RX, 1, 1, 8192);
	static uint8_t buf[1];
	uint32_t i;
	int err = 0;

	/* Ids that differ only above bit 16: one chain under a low-bits hash. */
	for (i = 0; i < NIDS && !err; i++)
		err = p3_chan_expect(c, i << 16, buf, 1, 0);
	ok(!err && rx_table_longest_probe(c) < 64,
	   "%d ids sharing their low 16 bits: longest lookup %zu slots", NIDS,
	   rx_table_longest_probe(c));
	p3_chan_close(c);
}

static void test_cancel(void)
{
	struct p3_chan *c = chan_alloc(P3_ROLE_RX, 1, 1, 8192);
	static uint8_t buf[1], in[4096];
	uint64_t rs = 42;
	size_t registered = 0, i, wrong = 0;
	uint32_t id;
	int r;

	memset(in, 0, sizeof(in));
	/* Random registrations and cancels over a small id space, so that
	 * deletions punch holes into long probe runs. */
	for (i = 0; i < 200000; i++) {
		id = (uint32_t)rnd_range(&rs, 0, 4095) * 977u;
		if (rnd_next(&rs) & 1) {
			r = p3_chan_expect(c, id, buf, 1, 0);
			if (r == 0 && !in[id / 977])
				registered++, in[id / 977] = 1;
			else if (r != -EBUSY || !in[id / 977])
				wrong++;	/* a lookup missed a registered id */
		} else {
			r = p3_chan_cancel(c, id);
			if (r == 0 && in[id / 977])
				registered--, in[id / 977] = 0;
			else if (r != -ENOENT || in[id / 977])
				wrong++;
		}
	}
	ok(!wrong && p3_chan_pending(c) == registered,
	   "200000 random registrations and cancels agree with a reference set (%zu wrong; "
	   "%zu pending, %zu expected)", wrong, p3_chan_pending(c), registered);
	p3_chan_close(c);
}

static void test_cancel_mid_frame(void)
{
	struct p3_chan *c = chan_alloc(P3_ROLE_RX, 1, 1, 8192);
	static uint8_t x[4000], y[100], fr[P3_FRAME_HDR_LEN + 4000], data[4000];
	struct p3_completion d;
	size_t n, in_before;

	fill_pattern(data, sizeof(data), 5, 0);
	p3_chan_expect(c, 5, x, sizeof(x), 0);
	p3_chan_expect(c, 6, y, sizeof(y), 0);
	n = frame(fr, 0, 5, 0, data, sizeof(x));
	in_before = n / 2 - P3_FRAME_HDR_LEN;
	rx_feed(c, 0, fr, n / 2);
	ok(p3_chan_cancel(c, 5) == 0 && p3_chan_pending(c) == 1, "cancel tensor 5 mid-frame");
	rx_feed(c, 0, fr + n / 2, n - n / 2);
	n = frame(fr, 0, 6, 0, data, sizeof(y));
	rx_feed(c, 0, fr, n);
	/* What arrived before the cancel is in x (the payload lands in
	 * place); nothing after it may be: x is the caller's again. */
	ok(p3_chan_band_status(c, 0) == 0 && p3_chan_next(c, &d) == 1 && d.tensor == 6 &&
	   !memcmp(x, data, in_before) && all_bytes(x + in_before, sizeof(x) - in_before, 0),
	   "the rest of its frame is discarded, not written, the band goes on, tensor 6 completes");
	p3_chan_close(c);
}

/* The payload goes from the stream straight into the tensor: half a
 * frame in, half the bytes are already there (no staging buffer of the
 * frame's size); the tensor completes only when the rest is in. */
static void test_in_place(void)
{
	uint32_t big = 4u << 20;
	struct p3_chan *c = chan_alloc(P3_ROLE_RX, 1, 1, big);
	uint8_t *t = calloc(1, big), *fr = malloc(P3_FRAME_HDR_LEN + big), *data = malloc(big);
	struct p3_completion d;
	size_t n, half = P3_FRAME_HDR_LEN + big / 2;

	fill_pattern(data, big, 9, 0);
	p3_chan_expect(c, 9, t, big, 0);
	n = frame(fr, 0, 9, 0, data, big);
	rx_feed(c, 0, fr, half);
	ok(!memcmp(t, data, big / 2) && all_bytes(t + big / 2, big / 2, 0) &&
	   p3_chan_next(c, &d) == 0,
	   "half a 4 MiB frame in: its first half is already in the tensor, no completion");
	rx_feed(c, 0, fr + half, n - half);
	ok(p3_chan_next(c, &d) == 1 && d.tensor == 9 && !memcmp(t, data, big),
	   "the rest in: the tensor completes, byte-exact");
	p3_chan_close(c);
	free(t);
	free(fr);
	free(data);
}

/* A payload that arrives corrupt is never counted, even though it was
 * written in place: the tensor stays incomplete and the band fails. */
static void test_in_place_corrupt(void)
{
	uint8_t x[3000], data[3000], fr[P3_FRAME_HDR_LEN + 3000];
	struct p3_chan *c = chan_alloc(P3_ROLE_RX, 1, 1, 1 << 20);
	struct p3_completion d;
	size_t n;

	fill_pattern(data, sizeof(data), 4, 0);
	p3_chan_expect(c, 4, x, sizeof(x), 0);
	n = frame(fr, 0, 4, 0, data, sizeof(data));
	fr[n - 1] ^= 1;
	rx_feed(c, 0, fr, n);
	ok(p3_chan_band_status(c, 0) == -P3_ECSUM && p3_chan_next(c, &d) <= 0 &&
	   p3_chan_pending(c) == 1,
	   "a corrupt payload: band fails with ECSUM, tensor not completed");
	p3_chan_close(c);
}

int main(void)
{
	test_probes();
	test_cancel();
	test_cancel_mid_frame();
	test_in_place();
	test_in_place_corrupt();
	return tap_done();
}
