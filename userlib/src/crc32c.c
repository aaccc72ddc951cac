// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as iSCSI and
 * ext4 use it.  Every slice is checksummed on both ends, so its speed
 * shows in channel throughput: the SSE4.2 crc32 instruction where the
 * CPU has it (checked at run time), else slicing-by-8 tables (the
 * byte-at-a-time loop is about 8x slower still).
 */
#include <pthread.h>
#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "internal.h"

#define CRC32C_POLY	0x82f63b78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
/* Takes and returns the inverted CRC. */
static uint32_t (*crc_update)(uint32_t c, const uint8_t *p, size_t len);

static void crc32c_init(void)
{
	uint32_t c;
	int i, j;

	for (i = 0; i < 256; i++) {
		c = i;
		for (j = 0; j < 8; j++)
			c = (c >> 1) ^ (CRC32C_POLY & -(c & 1));
		crc_table[0][i] = c;
	}
	/* Table k advances a byte that sits k positions ahead. */
	for (i = 0; i < 256; i++)
		for (j = 1; j < 8; j++)
			crc_table[j][i] = (crc_table[j - 1][i] >> 8) ^
					  crc_table[0][crc_table[j - 1][i] & 0xff];
}

static uint32_t crc32c_bytes(uint32_t c, const uint8_t *p, size_t len)
{
	while (len--)
		c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
	return c;
}

static uint32_t crc32c_slicing8(uint32_t c, const uint8_t *p, size_t len)
{
	uint64_t w;

	for (; len >= 8; len -= 8, p += 8) {
		memcpy(&w, p, 8);
		w = le64toh(w) ^ c;	/* byte 0 in the low bits */
		c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
		    crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
		    crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
		    crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
	}
	return crc32c_bytes(c, p, len);
}

#if defined(__x86_64__)
/*
 * One crc32 instruction takes 3 cycles to give its result but can start
 * every cycle: a single chain uses a third of the unit.  So three
 * adjacent stripes run as three independent chains (the second and third
 * from 0), and are joined after: the CRC is linear, so the state of
 * "stripe A then stripe B" is the state of A moved past len(B) zero bytes
 * (a fixed linear map, four table lookups) XOR B's own.
 */
#define STRIPE_LONG	8192
#define STRIPE_SHORT	256

/* shift_x[k][b]: where byte k of a state holding b lands after a stripe
 * of zeros. */
static uint32_t shift_long[4][256], shift_short[4][256];

static void shift_init(uint32_t t[4][256], size_t stripe)
{
	uint32_t basis[32], c;
	size_t n;
	int i, k, b;

	/* The map's columns: each one-bit state run through the zeros. */
	for (i = 0; i < 32; i++) {
		c = 1u << i;
		for (n = 0; n < stripe; n++)
			c = (c >> 8) ^ crc_table[0][c & 0xff];
		basis[i] = c;
	}
	for (k = 0; k < 4; k++)
		for (b = 0; b < 256; b++)
			for (t[k][b] = 0, i = 0; i < 8; i++)
				if (b & (1 << i))
					t[k][b] ^= basis[8 * k + i];
}

static uint32_t shift(const uint32_t t[4][256], uint32_t c)
{
	return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^
	       t[3][c >> 24];
}

/* Whole triples of stripes from *p; advances *p and *len past them. */
__attribute__((target("sse4.2")))
static uint32_t crc32c_triples(uint32_t c, const uint8_t **p, size_t *len, size_t stripe,
			       const uint32_t t[4][256])
{
	const uint8_t *q = *p;
	uint64_t a, b, d, w;
	size_t i;

	for (; *len >= 3 * stripe; *len -= 3 * stripe, q += 3 * stripe) {
		a = c;
		b = d = 0;
		for (i = 0; i < stripe; i += 8) {
			memcpy(&w, q + i, 8);
			a = _mm_crc32_u64(a, w);
			memcpy(&w, q + stripe + i, 8);
			b = _mm_crc32_u64(b, w);
			memcpy(&w, q + 2 * stripe + i, 8);
			d = _mm_crc32_u64(d, w);
		}
		c = shift(t, shift(t, (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
	}
	*p = q;
	return c;
}

/* The crc32 instruction: the same polynomial, in hardware. */
__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t c, const uint8_t *p, size_t len)
{
	uint64_t w, c64;

	c = crc32c_triples(c, &p, &len, STRIPE_LONG, shift_long);
	c = crc32c_triples(c, &p, &len, STRIPE_SHORT, shift_short);
	for (c64 = c; len >= 8; len -= 8, p += 8) {
		memcpy(&w, p, 8);
		c64 = _mm_crc32_u64(c64, w);
	}
	c = (uint32_t)c64;
	while (len--)
		c = _mm_crc32_u8(c, *p++);
	return c;
}
#endif

static void crc32c_pick(void)
{
	crc32c_init();
	crc_update = crc32c_slicing8;
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2")) {
		shift_init(shift_long, STRIPE_LONG);
		shift_init(shift_short, STRIPE_SHORT);
		crc_update = crc32c_sse42;
	}
#endif
}

P3_EXPORT uint32_t p3_crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc32c_pick);
	return ~crc_update(~crc, buf, len);
}

uint32_t p3_crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc32c_pick);
	return ~crc32c_slicing8(~crc, buf, len);
}

int p3_crc32c_uses_cpu(void)
{
	pthread_once(&crc_once, crc32c_pick);
	return crc_update != crc32c_slicing8;
}
