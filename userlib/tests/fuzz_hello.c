// SPDX-License-Identifier: LGPL-2.1-or-later
/* libFuzzer target: the handshake's parsers, p3_hello_parse and
 * p3_accept_parse.  Input: [flags][frame bytes...]. */
#include <stdint.h>

#include "fuzz_common.h"
#include "internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	uint8_t b[1 + P3_FRAME_HDR_LEN + P3_HELLO_LEN];

	(void)argc;
	(void)argv;
	b[0] = 1;
	p3_hello_build(b + 1, &(struct p3_hello){ .chan_id = 0x1234, .cookie = 7, .band = 3,
						   .bands = 8, .proto = P3_PROTO_MAX,
						   .max_payload = 1 << 20 });
	seed_write(0, b, sizeof(b));
	p3_hello_build(b + 1, &(struct p3_hello){ .chan_id = ~0ull, .cookie = ~0ull, .band = 63,
						   .bands = 64, .proto = P3_PROTO_MAX,
						   .max_payload = ~0u });
	seed_write(1, b, sizeof(b));
	p3_refusal_build(b + 1, 7, 3, P3_ETOOBIG, 1);
	seed_write(2, b, 1 + P3_FRAME_HDR_LEN + P3_REFUSE_LEN);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct p3_hello h = { .band = 99, .bands = 99 };
	unsigned int reason = 0, proto;
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
	n = p3_hello_parse(buf, len, &h);
	if (n > 0) {
		CHECK(n == P3_FRAME_HDR_LEN + P3_HELLO_LEN && (size_t)n <= len);
		CHECK(h.bands >= 1 && h.bands <= P3_MAX_BANDS && h.band < h.bands);
		CHECK(h.cookie && h.proto && h.max_payload);
	}
	n = p3_refusal_parse(buf, len, 7, 3, &reason, &proto);
	if (n > 0)
		CHECK(n == P3_FRAME_HDR_LEN + P3_REFUSE_LEN && (size_t)n <= len && reason);
	free(buf);
	return 0;
}
