// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as iSCSI and
 * ext4 use it.  Slicing-by-8 tables: every slice is checksummed on both
 * ends, so the byte-at-a-time loop (about 8x slower) would show up in
 * channel throughput.
 */
#include <pthread.h>

#include "internal.h"

#define CRC32C_POLY	0x82f63b78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

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

P3_EXPORT uint32_t p3_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint32_t c = ~crc;
	uint64_t w;

	pthread_once(&crc_once, crc32c_init);
	for (; len >= 8; len -= 8, p += 8) {
		memcpy(&w, p, 8);
		w = le64toh(w) ^ c;	/* byte 0 in the low bits */
		c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
		    crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
		    crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
		    crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
	}
	return ~crc32c_bytes(c, p, len);
}
