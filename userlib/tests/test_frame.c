// SPDX-License-Identifier: LGPL-2.1-or-later
/* CRC32C and the frame format: known vectors, round trips, rejections. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "p3.h"
#include "tap.h"
#include "util.h"

/* Bit-at-a-time reference, independent of the library's tables. */
static uint32_t crc_ref(const uint8_t *p, size_t len)
{
	uint32_t c = ~0u;
	int k;

	while (len--) {
		c ^= *p++;
		for (k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

static void test_crc_vectors(void)
{
	uint8_t buf[32];
	int i;

	ok(p3_crc32c(0, "123456789", 9) == 0xe3069283u, "crc32c(\"123456789\") = 0xe3069283");
	ok(p3_crc32c(0, "", 0) == 0, "crc32c of nothing is 0");
	/* RFC 3720 (iSCSI), appendix B.4 */
	memset(buf, 0, sizeof(buf));
	ok(p3_crc32c(0, buf, 32) == 0x8a9136aau, "crc32c(32 x 0x00) = 0x8a9136aa (RFC 3720)");
	memset(buf, 0xff, sizeof(buf));
	ok(p3_crc32c(0, buf, 32) == 0x62a8ab43u, "crc32c(32 x 0xff) = 0x62a8ab43 (RFC 3720)");
	for (i = 0; i < 32; i++)
		buf[i] = i;
	ok(p3_crc32c(0, buf, 32) == 0x46dd794eu, "crc32c(00..1f) = 0x46dd794e (RFC 3720)");
	for (i = 0; i < 32; i++)
		buf[i] = 31 - i;
	ok(p3_crc32c(0, buf, 32) == 0x113fdb5cu, "crc32c(1f..00) = 0x113fdb5c (RFC 3720)");
}

static void test_crc_random(void)
{
	static uint8_t buf[4099];
	uint64_t s = 42;
	int i, same = 1, chain = 1;
	size_t len, cut;
	uint32_t c;

	for (i = 0; i < 300; i++) {
		len = rnd_range(&s, 0, sizeof(buf));
		cut = rnd_range(&s, 0, len);
		fill_pattern(buf, len, i, 1);
		/* Start at odd offsets too: the 8-byte loop must not assume alignment. */
		c = p3_crc32c(0, buf + (i & 3), len - (len ? (i & 3) % (len + 1) : 0));
		same &= c == crc_ref(buf + (i & 3), len - (len ? (i & 3) % (len + 1) : 0));
		c = p3_crc32c(p3_crc32c(0, buf, cut), buf + cut, len - cut);
		chain &= c == crc_ref(buf, len);
	}
	ok(same, "crc32c matches bitwise reference on 300 random buffers");
	ok(chain, "chained crc32c equals one-shot crc32c");
}

/* Long buffers take the three-stripe path (768 bytes and up, 24 KiB and
 * up): every length around the stripe edges, and random ones to 100 KB,
 * against the table path. */
static void test_crc_stripes(void)
{
	static const size_t edges[] = { 767, 768, 769, 775, 776, 1535, 1536, 24575, 24576,
					24577, 24583, 25343, 25344, 49152, 49159 };
	static uint8_t buf[100008];
	uint64_t s = 11;
	size_t i, len, off;
	int same = 1;

	fill_pattern(buf, sizeof(buf), 5, 1);
	for (i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
		for (off = 0; off < 8; off += 3)
			same &= p3_crc32c(7, buf + off, edges[i]) ==
				p3_crc32c_portable(7, buf + off, edges[i]);
	for (i = 0; i < 200; i++) {
		len = rnd_range(&s, 0, sizeof(buf) - 8);
		off = i & 7;
		same &= p3_crc32c((uint32_t)i, buf + off, len) ==
			p3_crc32c_portable((uint32_t)i, buf + off, len);
	}
	ok(same, "stripes: the dispatched path equals the table path at every stripe edge "
		 "and 200 random lengths up to 100 KB");
}

/* p3_crc32c() takes the CPU's instruction where it can: the table path
 * must still be right for CPUs without it, and the two must agree.
 */
static void test_crc_both_paths(void)
{
	static uint8_t buf[4099];
	uint64_t s = 7;
	int i, same = 1, agree = 1;
	size_t off, len;

	tap_diag("p3_crc32c uses %s", p3_crc32c_uses_cpu() ? "the CPU's crc32 instruction" :
		"slicing-by-8 tables");
	for (i = 0; i < 300; i++) {
		len = rnd_range(&s, 0, sizeof(buf) - 8);
		off = i & 7;
		fill_pattern(buf, sizeof(buf), i, 1);
		same &= p3_crc32c_portable(0, buf + off, len) == crc_ref(buf + off, len);
		agree &= p3_crc32c_portable(i, buf + off, len) == p3_crc32c(i, buf + off, len);
	}
	ok(same, "slicing-by-8 matches bitwise reference on 300 random buffers");
	ok(agree, "the table path and the dispatched path agree, any seed and offset");
}

static uint8_t frame[P3_FRAME_HDR_LEN + 256];

static int size_cb(void *ctx, uint32_t tensor, uint64_t iter, uint64_t *size)
{
	(void)ctx;
	if (tensor == 99)
		return -ENOENT;
	if (iter == 5)
		return -P3_ESTALE;
	*size = 1000;
	return 0;
}

static const struct p3_frame_limits lim = {
	.bands = 8, .max_payload = 512, .tensor_size = size_cb,
};

static int mk(uint8_t level, uint32_t tensor, uint64_t off, uint32_t len, uint64_t iter)
{
	struct p3_frame f = { .type = P3_FRAME_DATA, .level = level, .tensor = tensor,
			      .offset = off, .length = len, .iter = iter };

	fill_pattern(frame + P3_FRAME_HDR_LEN, len, tensor, iter);
	return p3_frame_header(frame, &f, frame + P3_FRAME_HDR_LEN);
}

/* Rewrite the checksum after a deliberate change, to reach later checks. */
static void reseal(uint32_t len)
{
	uint32_t c;

	memset(frame + 36, 0, 4);
	c = p3_crc32c(0, frame, P3_FRAME_HDR_LEN + len);
	c = htonl(c);
	memcpy(frame + 36, &c, 4);
}

static void test_roundtrip(void)
{
	struct p3_frame f;
	int n;

	ok(mk(3, 7, 100, 200, 12) == 0, "build a data frame");
	ok(!memcmp(frame, "P3FR\x01\x00\x03\x00\x00\x00\x00\x07\x00\x00\x00\xc8", 16),
	   "header bytes: magic, version, type, level, flags, tensor, length (big endian)");
	n = p3_frame_parse(frame, sizeof(frame), &lim, &f);
	ok(n == P3_FRAME_HDR_LEN + 200, "parse returns header + payload size");
	ok(f.type == P3_FRAME_DATA && f.level == 3 && f.tensor == 7 && f.offset == 100 &&
	   f.length == 200 && f.iter == 12, "parsed fields equal the built ones");
	ok(f.payload == frame + P3_FRAME_HDR_LEN && check_pattern(f.payload, 200, 7, 12),
	   "payload points into the buffer, intact");
	ok(mk(3, 7, 800, 200, 12) == 0 && p3_frame_parse(frame, sizeof(frame), &lim, &f) > 0,
	   "slice ending exactly at the tensor's end is accepted");
	ok(p3_frame_parse_header(frame, P3_FRAME_HDR_LEN, &lim, &f) == 0,
	   "header alone parses without payload");
	ok(mk(0, 0, 0, 0, 0) == -EINVAL, "building an empty frame is refused");
	ok(mk(64, 0, 0, 1, 0) == -EINVAL, "building level 64 is refused");
}

static void test_rejects(void)
{
	struct p3_frame f;

	mk(1, 7, 0, 100, 1);
	ok_err(p3_frame_parse(frame, 39, &lim, &f), -P3_ETRUNC, "short header: ETRUNC");
	ok_err(p3_frame_parse(frame, 139, &lim, &f), -P3_ETRUNC, "short payload: ETRUNC");
	frame[0] ^= 1;
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_EBADMAGIC, "bad magic");
	mk(1, 7, 0, 100, 1);
	frame[4] = 2;
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_EVERSION, "bad version");
	mk(1, 7, 0, 100, 1);
	frame[5] = 7;
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_EBADFRAME, "unknown type");
	mk(1, 7, 0, 100, 1);
	frame[7] = 1;
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_EBADFRAME, "non-zero flags");
	mk(1, 7, 0, 100, 1);
	frame[33] = 1;
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_EBADFRAME, "non-zero reserved word");
	mk(1, 7, 0, 100, 1);
	memset(frame + 12, 0, 4);
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_EBADFRAME, "zero length");
	mk(1, 7, 0, 100, 1);
	memcpy(frame + 12, "\x00\x00\x02\x01", 4);
	ok_err(p3_frame_parse(frame, sizeof(frame), &lim, &f), -P3_ETOOBIG,
	       "length 513 above max_payload 512");
	memcpy(frame + 12, "\xff\xff\xff\xff", 4);
	ok_err(p3_frame_parse(frame, sizeof(frame), NULL, &f), -P3_ETOOBIG,
	       "length 4 GiB - 1 with default limits");
	mk(8, 7, 0, 100, 1);
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_ELEVEL, "level 8 with 8 bands");
	mk(1, 7, 901, 100, 1);
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_ERANGE, "offset + length past tensor end");
	mk(1, 7, 5000, 100, 1);
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_ERANGE, "offset past tensor end");
	mk(1, 7, 0, 100, 1);
	memcpy(frame + 16, "\xff\xff\xff\xff\xff\xff\xff\xf0", 8);
	reseal(100);
	ok_err(p3_frame_parse(frame, 140, NULL, &f), -P3_ERANGE,
	       "offset + length wrapping 2^64 (no size known)");
	mk(1, 99, 0, 100, 1);
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -ENOENT, "size callback error passes through");
	mk(1, 7, 0, 100, 5);
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_ESTALE, "stale iteration from callback");
	mk(1, 7, 0, 100, 1);
	frame[P3_FRAME_HDR_LEN + 50] ^= 0x10;
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_ECSUM, "flipped payload bit: ECSUM");
	mk(1, 7, 0, 100, 1);
	frame[31] ^= 1;	/* iteration: passes every other check */
	ok_err(p3_frame_parse(frame, 140, &lim, &f), -P3_ECSUM, "header is covered by the CRC");
}

static void test_bitflips(void)
{
	struct p3_frame f;
	int bit, caught = 1;

	for (bit = 0; bit < (P3_FRAME_HDR_LEN + 64) * 8; bit++) {
		mk(2, 7, 64, 64, 3);
		frame[bit / 8] ^= 1 << (bit % 8);
		if (p3_frame_parse(frame, P3_FRAME_HDR_LEN + 64, &lim, &f) >= 0)
			caught = 0;
	}
	ok(caught, "every single-bit flip of a 104-byte frame is rejected");
}

static void test_hello(void)
{
	const struct p3_hello want = { .chan_id = 0x1122334455667788ull, .cookie = 0xc00c1e,
				       .band = 2, .bands = 4, .proto = 1, .max_payload = 1 << 20 };
	uint8_t h[P3_FRAME_HDR_LEN + P3_HELLO_LEN], p[P3_HELLO_LEN];
	uint8_t r[P3_FRAME_HDR_LEN + P3_REFUSE_LEN];
	struct p3_frame f = { .type = P3_FRAME_HELLO, .level = 2, .length = P3_HELLO_LEN };
	struct p3_hello got, bad;
	unsigned int reason, proto;

	ok(p3_hello_build(h, &want) == 0, "build hello");
	ok(p3_hello_parse(h, sizeof(h), &got) == (int)sizeof(h) &&
	   got.chan_id == want.chan_id && got.cookie == want.cookie && got.band == want.band &&
	   got.bands == want.bands && got.proto == want.proto &&
	   got.max_payload == want.max_payload, "hello round trip: every field");
	bad = want;
	bad.band = 4;
	ok(p3_hello_build(h, &bad) == -EINVAL, "hello with band >= bands is not built");
	bad = want;
	bad.cookie = 0;
	ok(p3_hello_build(h, &bad) == -EINVAL, "hello without a cookie is not built");
	bad = want;
	bad.proto = 0;
	ok(p3_hello_build(h, &bad) == -EINVAL, "hello without a protocol version is not built");
	p3_hello_build(h, &want);
	ok_err(p3_hello_parse(h, 30, &got), -P3_ETRUNC, "short hello: ETRUNC");
	memcpy(p, h + P3_FRAME_HDR_LEN, sizeof(p));
	p[16] = 3;	/* band 3 inside, level 2 outside */
	p3_frame_header(h, &f, p);
	memcpy(h + P3_FRAME_HDR_LEN, p, sizeof(p));
	ok_err(p3_hello_parse(h, sizeof(h), &got), -P3_EHELLO,
	       "hello whose band disagrees with its level");
	p[16] = 2;
	p[31] = 1;
	p3_frame_header(h, &f, p);
	memcpy(h + P3_FRAME_HDR_LEN, p, sizeof(p));
	ok_err(p3_hello_parse(h, sizeof(h), &got), -P3_EHELLO,
	       "hello with non-zero reserved bytes");
	p[31] = 0;
	memset(p + 8, 0, 8);	/* no cookie */
	p3_frame_header(h, &f, p);
	memcpy(h + P3_FRAME_HDR_LEN, p, sizeof(p));
	ok_err(p3_hello_parse(h, sizeof(h), &got), -P3_EHELLO, "hello without a cookie");
	mk(0, 1, 0, 16, 0);
	ok_err(p3_hello_parse(frame, P3_FRAME_HDR_LEN + 16, &got), -P3_EHELLO,
	       "a data frame is not a hello");

	ok(p3_refusal_build(r, 0xc00c1e, 2, P3_ETOOBIG, 1) == 0 &&
	   p3_refusal_parse(r, sizeof(r), 0xc00c1e, 2, &reason, &proto) == (int)sizeof(r) &&
	   reason == P3_ETOOBIG && proto == 1, "refusal round trip: reason and version");
	ok(p3_refusal_build(r, 0xc00c1e, 2, 0, 1) == -EINVAL, "a refusal needs a reason");
	p3_refusal_build(r, 0xc00c1e, 2, P3_ETOOBIG, 1);
	ok_err(p3_refusal_parse(r, sizeof(r), 0xc00c1f, 2, &reason, &proto), -P3_EHELLO,
	       "a refusal for another channel's cookie");
	ok_err(p3_refusal_parse(r, sizeof(r), 0xc00c1e, 1, &reason, &proto), -P3_EHELLO,
	       "a refusal for another band");
	ok(p3_refusal_parse(h, sizeof(h), 0xc00c1e, 2, &reason, &proto) < 0,
	   "a hello is not a refusal");
}

static void test_strerror(void)
{
	int e, good = 1;

	for (e = P3_ERRBASE; e < __P3_EMAX; e++)
		good &= p3_strerror(-e) && strlen(p3_strerror(-e)) > 10 &&
			strcmp(p3_strerror(-e), "unknown libp3 error");
	ok(good, "every library error code has a message");
	ok(!strcmp(p3_strerror(-EPIPE), strerror(EPIPE)), "errnos use strerror");
	ok(p3_strerror(-99999) != NULL, "unknown codes still give a string");
}

int main(void)
{
	test_crc_vectors();
	test_crc_random();
	test_crc_both_paths();
	test_crc_stripes();
	test_roundtrip();
	test_rejects();
	test_bitflips();
	test_hello();
	test_strerror();
	return tap_done();
}
