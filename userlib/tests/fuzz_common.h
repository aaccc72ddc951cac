/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Shared bits of the libFuzzer targets: seed files and checksum repair. */
#ifndef P3_FUZZ_COMMON_H
#define P3_FUZZ_COMMON_H

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p3.h"

/* A broken invariant is a bug: make libFuzzer record it as a crash. */
#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond))                                                               \
			__builtin_trap();                                                  \
	} while (0)

/* Write seed inputs into $P3_FUZZ_SEEDS (the corpus directory). */
static inline void seed_write(int n, const void *p, size_t len)
{
	const char *dir = getenv("P3_FUZZ_SEEDS");
	char path[4096];
	FILE *f;

	if (!dir)
		return;
	snprintf(path, sizeof(path), "%s/seed-%02d", dir, n);
	f = fopen(path, "wb");
	if (!f)
		return;
	fwrite(p, 1, len, f);
	fclose(f);
}

/*
 * Give the frame at p a correct checksum if its declared length fits in
 * len, so that mutations reach the checks that come after the CRC.
 */
static inline void reseal(uint8_t *p, size_t len)
{
	uint32_t plen, c;

	if (len < P3_FRAME_HDR_LEN)
		return;
	memcpy(&plen, p + 12, 4);
	plen = ntohl(plen);
	if (plen > len - P3_FRAME_HDR_LEN)
		return;
	memset(p + 36, 0, 4);
	c = htonl(p3_crc32c(0, p, P3_FRAME_HDR_LEN + plen));
	memcpy(p + 36, &c, 4);
}

#endif /* P3_FUZZ_COMMON_H */
