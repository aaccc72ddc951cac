// SPDX-License-Identifier: LGPL-2.1-or-later
/* libFuzzer target: p3_hello_parse.  Input: [flags][hello bytes...]. */
#include <stdint.h>

#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	uint8_t b[1 + P3_FRAME_HDR_LEN + P3_HELLO_LEN];

	(void)argc;
	(void)argv;
	b[0] = 1;
	p3_hello_build(b + 1, 0x1234, 3, 8);
	seed_write(0, b, sizeof(b));
	p3_hello_build(b + 1, ~0ull, 63, 64);
	seed_write(1, b, sizeof(b));
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned int band = 999, bands = 999;
	uint64_t id;
	uint8_t *buf;
	size_t len;
	int n;

	if (size < 1)
		return 0;
	len = size - 1;
	buf = malloc(len ? len : 1);
	memcpy(buf, data + 1, len);
	if (data[0] & 1)
		reseal(buf, len);
	n = p3_hello_parse(buf, len, &id, &band, &bands);
	if (n > 0) {
		CHECK(n == P3_FRAME_HDR_LEN + P3_HELLO_LEN && (size_t)n <= len);
		CHECK(bands >= 1 && bands <= P3_MAX_BANDS && band < bands);
	}
	free(buf);
	return 0;
}
