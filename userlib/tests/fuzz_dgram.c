// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libFuzzer target: the datagram receiver's reassembly (dgram_rx.c).
 * Three tensors share one arena, fenced by canary bytes; the input is a
 * script of steps: feed a datagram, register a tensor again for a newer
 * iteration, finish one, advance the clock.  Whatever the datagrams say,
 * no byte outside the tensors changes (a neighbour is never written), a
 * completion never claims more missing bytes than the tensor has, and the
 * missing ranges add up to what the completion said.
 *
 * Step: [op u8] then, for "feed", [flags u8][len u16 le][len bytes]
 * (flags bit 0 repairs the frames' CRCs so that mutations get past them;
 * bits 1-2 make the bytes one read the kernel coalesced, UDP GRO, of
 * frames of a full chunk or of flags >> 3 bytes each).
 */
#include <errno.h>
#include <stdint.h>

#include "dgram.h"
#include "fuzz_common.h"

#define CHUNK		64
#define FENCE		48
#define NT		3

static const uint64_t sizes[NT] = { 200, 64, 129 };

static size_t tensor_at(unsigned int i)
{
	size_t at = FENCE;
	unsigned int k;

	for (k = 0; k < i; k++)
		at += sizes[k] + FENCE;
	return at;
}

static void seed(int n, unsigned int tensor, uint64_t iter, uint64_t off, uint32_t len)
{
	uint8_t b[4 + P3_FRAME_HDR_LEN + CHUNK];
	struct p3_frame f = { .type = P3_FRAME_DATA, .level = 1, .tensor = tensor,
			      .offset = off, .length = len, .iter = iter };

	b[0] = 0;	/* feed */
	b[1] = 1;
	b[2] = (uint8_t)(P3_FRAME_HDR_LEN + len);
	b[3] = 0;
	memset(b + 4 + P3_FRAME_HDR_LEN, 0x5a, len);
	p3_frame_header(b + 4, &f, b + 4 + P3_FRAME_HDR_LEN);
	seed_write(n, b, 4 + P3_FRAME_HDR_LEN + len);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed(0, 0, 5, 0, CHUNK);
	seed(1, 0, 5, 192, 8);
	seed(2, 2, 5, 128, 1);
	seed(3, 1, 6, 0, CHUNK);	/* a newer iteration: waits */
	return 0;
}

static void check_fences(const uint8_t *arena, size_t total)
{
	size_t at = 0;
	unsigned int i;

	for (i = 0; i <= NT; i++) {
		size_t end = i < NT ? tensor_at(i) : total;
		size_t k;

		for (k = at; k < end; k++)
			CHECK(arena[k] == 0xee);
		if (i < NT)
			at = tensor_at(i) + sizes[i];
	}
}

static void check_completions(struct p3_dgram_rx *rx)
{
	struct p3_dgram_completion c;
	struct p3_range r[8];
	uint64_t sum;
	int n, k;

	while (p3_dgram_rx_next(rx, &c) == 1) {
		CHECK(c.tensor < NT && c.bytes == sizes[c.tensor] && c.missing <= c.bytes);
		n = p3_dgram_rx_missing(rx, c.tensor, r, 8);
		/* Popped after the step that made it: the tensor is as it left it. */
		CHECK(n >= 0);
		for (sum = 0, k = 0; k < n && k < 8; k++) {
			CHECK(r[k].length > 0 && r[k].offset + r[k].length <= c.bytes);
			sum += r[k].length;
		}
		if (n <= 8)
			CHECK(sum == c.missing);
	}
}

/* A read as the kernel may coalesce it (UDP GRO): none, whole frames of
 * a full chunk, or any size a hostile sender's UDP_SEGMENT chose. */
static size_t coalesced_segment(uint8_t b)
{
	switch ((b >> 1) & 3) {
	case 0:
		return 0;
	case 1:
		return P3_FRAME_HDR_LEN + CHUNK;
	default:
		return b >> 3;
	}
}

/* Repairs the CRC of each frame of a run of seg bytes each (0: one). */
static void reseal_run(uint8_t *p, size_t len, size_t seg)
{
	size_t off;

	if (!seg || seg >= len) {
		reseal(p, len);
		return;
	}
	for (off = 0; off < len; off += seg)
		reseal(p + off, len - off < seg ? len - off : seg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t total = tensor_at(NT - 1) + sizes[NT - 1] + FENCE;
	struct p3_dgram_stats st = { 0 };
	uint64_t iter[NT] = { 5, 5, 5 }, now = 1000;
	struct p3_dgram_rx *rx;
	uint8_t *arena, *buf;
	size_t i = 0, len, seg;
	unsigned int k;

	arena = malloc(total);
	memset(arena, 0xee, total);
	rx = p3_dgram_rx_new(4, CHUNK, 512, &st);
	CHECK(rx);
	for (k = 0; k < NT; k++)
		CHECK(p3_dgram_rx_expect(rx, k, arena + tensor_at(k), sizes[k], 5, 100, now) == 0);
	while (i < size) {
		uint8_t op = data[i++];

		switch (op % 4) {
		case 0:		/* feed a datagram */
			if (size - i < 3)
				goto out;
			len = data[i + 1] | (size_t)data[i + 2] << 8;
			if (len > size - i - 3)
				len = size - i - 3;
			/* An exact-size copy: an over-read hits ASan's redzone. */
			buf = malloc(len ? len : 1);
			memcpy(buf, data + i + 3, len);
			seg = coalesced_segment(data[i]);
			if (data[i] & 1)
				reseal_run(buf, len, seg);
			p3_dgram_rx_input_run(rx, buf, len, seg, now);
			free(buf);
			i += 3 + len;
			break;
		case 1:		/* register a tensor again, for a newer iteration */
			k = (op >> 2) % NT;
			if (p3_dgram_rx_expect(rx, k, arena + tensor_at(k), sizes[k],
					       iter[k] + 1, 100, now) == 0)
				iter[k]++;
			break;
		case 2:		/* finish one, now or later */
			p3_dgram_rx_finish(rx, (op >> 2) % (NT + 1), (op >> 4) * 10, now);
			break;
		case 3:		/* time passes */
			now += op >> 2;
			p3_dgram_rx_expire(rx, now);
			break;
		}
		check_completions(rx);
	}
out:
	check_fences(arena, total);
	p3_dgram_rx_free(rx);
	free(arena);
	return 0;
}
