// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libFuzzer target: a receiving channel's stream reassembly, without
 * sockets.  The input is a script of records:
 *   0 band len bytes...               raw bytes to a band
 *   1 band tensor off16 len16 iter    a well-formed frame (valid CRC)
 *   2 band tensor off16 len16 iter pos xor   the same, one byte corrupted
 *   3 tensor iter                     p3_chan_expect() on a spare buffer,
 *                                     or p3_chan_cancel() if iter >= 0x80
 * Tensors live in one arena, back to back between guards: any write
 * outside a registered tensor changes a guard and traps.
 */
#include <stdint.h>

#include "chan.h"
#include "fuzz_common.h"

#define BANDS	4
#define GUARD	64
#define NT	4

static const uint32_t sizes[NT] = { 100, 3000, 9000, 512 };

struct arena {
	uint8_t	guard0[GUARD];
	uint8_t	t[NT][9000];
	uint8_t	guard1[GUARD];
};

static uint8_t frame_byte(uint32_t tensor, uint64_t off)
{
	return (uint8_t)(tensor * 31 + off * 7);
}

static size_t make_frame(uint8_t *out, unsigned int band, uint32_t tensor, uint64_t off,
			 uint32_t len, uint64_t iter)
{
	struct p3_frame f = { .type = P3_FRAME_DATA, .level = band, .tensor = tensor,
			      .offset = off, .length = len, .iter = iter };
	uint32_t i;

	for (i = 0; i < len; i++)
		out[P3_FRAME_HDR_LEN + i] = frame_byte(tensor, off + i);
	if (p3_frame_header(out, &f, out + P3_FRAME_HDR_LEN))
		return 0;
	return P3_FRAME_HDR_LEN + len;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const uint8_t s0[] = {
		1, 0, 0, 0, 0, 0, 100, 5,	/* tensor 0 whole */
		1, 1, 1, 0, 0, 5, 0, 5,		/* tensor 1, first 1280 */
		1, 1, 1, 5, 0, 6, 0, 5,		/* overlaps: EDUP */
		3, 3, 6, 1, 2, 3, 0, 0, 2, 0, 6,	/* tensor 3 next iteration */
		2, 2, 2, 0, 0, 1, 0, 5, 7, 0x40,	/* corrupted */
	};
	static const uint8_t s1[] = {
		1, 3, 3, 0, 0, 1, 0, 6, 3, 3, 6, 1, 3, 3, 1, 0, 1, 0, 6,
	};

	/* Found by the fuzzer: tensor 0 completed, re-expected on the spare
	 * buffer, then completed again. */
	static const uint8_t s2[] = {
		0x01, 0x80, 0x00, 0x00, 0x00, 0x00, 0x64, 0x05, 0x01, 0x02, 0x02, 0x00,
		0x00, 0x02, 0x00, 0x05, 0xff, 0xff, 0xff, 0x65, 0x00, 0x00, 0x00, 0x00,
		0x02, 0x00, 0xff, 0xff, 0x01, 0x80, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02,
		0x00, 0x00, 0x02, 0x00, 0x05, 0xff, 0xff, 0x00, 0x05, 0x01, 0x01, 0x00,
		0x00, 0x05, 0x00, 0x05, 0x01, 0x03, 0x02, 0x00, 0xff, 0xff, 0x01, 0x05,
		0x00, 0x06, 0x06, 0x02, 0x07, 0x40,
	};

	(void)argc;
	(void)argv;
	seed_write(0, s0, sizeof(s0));
	seed_write(1, s1, sizeof(s1));
	seed_write(2, s2, sizeof(s2));
	return 0;
}

static const uint8_t *take(const uint8_t **p, const uint8_t *end, size_t n)
{
	const uint8_t *q = *p;

	if ((size_t)(end - q) < n)
		return NULL;
	*p += n;
	return q;
}

static void run(struct p3_chan *c, struct arena *a, uint8_t *spare, const uint8_t *p,
		const uint8_t *end)
{
	static uint8_t fr[P3_FRAME_HDR_LEN + 10000];
	const uint8_t *r;
	size_t n;

	while ((r = take(&p, end, 1))) {
		switch (r[0] & 3) {
		case 0:
			if (!(r = take(&p, end, 2)) || !take(&p, end, r[1]))
				return;
			rx_feed(c, r[0] % BANDS, r + 2, r[1]);
			break;
		case 1:
		case 2:
			if (!(r = take(&p, end, (r[0] & 3) == 1 ? 7 : 9)))
				return;
			/* Lengths reach past max_payload (8192), but not so far
			 * that checksumming them dominates the run time. */
			n = make_frame(fr, r[0] % BANDS, r[1] % (NT + 1), (r[2] << 8 | r[3]),
				       (uint32_t)(r[4] << 8 | r[5]) % 10000, r[6]);
			if (n && r[-1] == 2)
				fr[(r[7] * 131) % n] ^= r[8];
			rx_feed(c, r[0] % BANDS, fr, n);
			break;
		case 3:
			if (!(r = take(&p, end, 2)))
				return;
			if (r[1] >= 0x80) {
				p3_chan_cancel(c, r[0] % (NT + 1));
				break;
			}
			/* A tensor is always re-expected at its own size, so the
			 * final check can tell a completion's size from its id;
			 * id NT is the stranger, sized like tensor 0. */
			p3_chan_expect(c, r[0] % (NT + 1), r[0] % 2 ? spare : a->t[r[0] % (NT + 1) % NT],
				       sizes[r[0] % (NT + 1) % NT], r[1]);
			break;
		}
	}
	(void)a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct arena a;
	static uint8_t spare[9000], pristine[9000];
	struct p3_completion d;
	struct p3_chan *c = chan_alloc(P3_ROLE_RX, BANDS, 1, 8192);
	unsigned int i;

	memset(pristine, 0xee, sizeof(pristine));
	memset(&a, 0xee, sizeof(a));
	for (i = 0; i < NT; i++)
		p3_chan_expect(c, i, a.t[i], sizes[i], 5);
	run(c, &a, spare, data, data + size);
	CHECK(!memcmp(a.guard0, pristine, GUARD) && !memcmp(a.guard1, pristine, GUARD));
	/* Past each tensor's registered size, up to the next: untouched. */
	for (i = 0; i < NT; i++)
		CHECK(!memcmp(a.t[i] + sizes[i], pristine, sizeof(a.t[i]) - sizes[i]));
	while (p3_chan_next(c, &d) == 1)
		CHECK(d.bytes == sizes[d.tensor % NT]);
	p3_chan_close(c);
	return 0;
}
