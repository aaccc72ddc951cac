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
	size_t n;

	fill_pattern(data, sizeof(data), 5, 0);
	p3_chan_expect(c, 5, x, sizeof(x), 0);
	p3_chan_expect(c, 6, y, sizeof(y), 0);
	n = frame(fr, 0, 5, 0, data, sizeof(x));
	rx_feed(c, 0, fr, n / 2);
	ok(p3_chan_cancel(c, 5) == 0 && p3_chan_pending(c) == 1, "cancel tensor 5 mid-frame");
	rx_feed(c, 0, fr + n / 2, n - n / 2);
	n = frame(fr, 0, 6, 0, data, sizeof(y));
	rx_feed(c, 0, fr, n);
	ok(p3_chan_band_status(c, 0) == 0 && p3_chan_next(c, &d) == 1 && d.tensor == 6 &&
	   all_bytes(x, sizeof(x), 0),
	   "its half-read frame is discarded, the band goes on, tensor 6 completes");
	p3_chan_close(c);
}

static void test_buffer_shrinks(void)
{
	uint32_t big = 4u << 20;
	struct p3_chan *c = chan_alloc(P3_ROLE_RX, 1, 1, big);
	uint8_t *t = malloc(big), *fr = malloc(P3_FRAME_HDR_LEN + big), *data = malloc(big);
	struct p3_completion d;
	size_t n;

	fill_pattern(data, big, 9, 0);
	p3_chan_expect(c, 9, t, big, 0);
	n = frame(fr, 0, 9, 0, data, big);
	rx_feed(c, 0, fr, n);
	ok(p3_chan_next(c, &d) == 1 && !memcmp(t, data, big) && c->rx[0].cap <= (256u << 10),
	   "a 4 MiB frame lands and its buffer goes back (capacity now %zu bytes)",
	   c->rx[0].cap);
	p3_chan_close(c);
	free(t);
	free(fr);
	free(data);
}

int main(void)
{
	test_probes();
	test_cancel();
	test_cancel_mid_frame();
	test_buffer_shrinks();
	return tap_done();
}
