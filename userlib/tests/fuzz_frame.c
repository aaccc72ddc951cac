// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libFuzzer target: p3_frame_parse / p3_frame_parse_header.
 * Input: [flags][limits][frame bytes...].  flags bit 0 repairs the CRC.
 */
#include <errno.h>
#include <stdint.h>

#include "fuzz_common.h"

#define TENSOR_SIZE	3000

static int size_cb(void *ctx, uint32_t tensor, uint64_t iter, uint64_t *size)
{
	(void)ctx;
	if (tensor == 99)
		return -EAGAIN;
	if (iter == 1)
		return -P3_ESTALE;
	*size = TENSOR_SIZE + tensor % 7;
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	uint8_t b[2 + P3_FRAME_HDR_LEN + 200];
	struct p3_frame f = { .type = P3_FRAME_DATA, .level = 2, .tensor = 3, .offset = 100,
			      .length = 200, .iter = 4 };

	(void)argc;
	(void)argv;
	b[0] = 1;
	b[1] = 8;
	memset(b + 2 + P3_FRAME_HDR_LEN, 0x33, 200);
	p3_frame_header(b + 2, &f, b + 2 + P3_FRAME_HDR_LEN);
	seed_write(0, b, sizeof(b));
	b[0] = 0;
	seed_write(1, b, sizeof(b));
	p3_hello_build(b + 2, &(struct p3_hello){ .chan_id = 42, .cookie = 1, .band = 1,
						   .bands = 4, .proto = P3_PROTO_MAX,
						   .max_payload = 1024 });
	seed_write(2, b, 2 + P3_FRAME_HDR_LEN + P3_HELLO_LEN);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct p3_frame_limits lim = { .tensor_size = size_cb };
	struct p3_frame f;
	uint8_t *buf;
	size_t len;
	int n;

	if (size < 2)
		return 0;
	lim.bands = data[1] % 70;
	lim.max_payload = (data[1] & 0x80) ? 0 : 4096;
	if (data[0] & 2)
		lim.tensor_size = NULL;
	len = size - 2;
	/* An exact-size copy, so that any over-read hits ASan's redzone. */
	buf = malloc(len ? len : 1);
	memcpy(buf, data + 2, len);
	if (data[0] & 1)
		reseal(buf, len);
	n = p3_frame_parse_header(buf, len, &lim, &f);
	CHECK(n <= 0);
	n = p3_frame_parse(buf, len, &lim, &f);
	if (n > 0) {
		CHECK((size_t)n <= len && (size_t)n == P3_FRAME_HDR_LEN + f.length);
		CHECK(f.payload == buf + P3_FRAME_HDR_LEN && f.length > 0);
		CHECK(f.level < (lim.bands ? lim.bands : P3_MAX_BANDS));
		CHECK(f.length <= (lim.max_payload ? lim.max_payload : P3_DEFAULT_MAX_PAYLOAD));
		if (f.type == P3_FRAME_DATA && lim.tensor_size)
			CHECK(f.offset + f.length <= TENSOR_SIZE + f.tensor % 7);
		CHECK(f.offset + f.length >= f.offset);
	}
	free(buf);
	return 0;
}
