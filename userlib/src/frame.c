// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Wire format of a channel: a fixed 40-byte big-endian header, then the
 * payload.  The parsers trust nothing in the buffer: every field is
 * checked before it is used, and the checksum covers the header too, so a
 * corrupted length or offset cannot slip through as a valid frame.
 */
#include <errno.h>

#include "internal.h"

enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 4,
	OFF_TYPE = 5,
	OFF_LEVEL = 6,
	OFF_FLAGS = 7,
	OFF_TENSOR = 8,
	OFF_LENGTH = 12,
	OFF_OFFSET = 16,
	OFF_ITER = 24,
	OFF_RSVD = 32,
	OFF_CRC = 36,
};

/* Hello payload: chan_id u64, band u8, bands u8, then 6 zero bytes. */
enum {
	HELLO_CHAN = 0,
	HELLO_BAND = 8,
	HELLO_BANDS = 9,
	HELLO_RSVD = 10,
};

_Static_assert(OFF_CRC + 4 == P3_FRAME_HDR_LEN, "header layout");

static uint32_t frame_crc(const uint8_t *hdr, const void *payload, uint32_t len)
{
	static const uint8_t zero[4];
	uint32_t crc;

	crc = p3_crc32c(0, hdr, OFF_CRC);
	crc = p3_crc32c(crc, zero, sizeof(zero));
	return p3_crc32c(crc, payload, len);
}

P3_EXPORT int p3_frame_header(void *hdr, const struct p3_frame *f, const void *payload)
{
	uint8_t *h = hdr;

	if (!h || !f || (f->length && !payload) || f->type > P3_FRAME_HELLO ||
	    f->level >= P3_MAX_BANDS || !f->length || f->offset + f->length < f->offset)
		return -EINVAL;
	put_be32(h + OFF_MAGIC, P3_FRAME_MAGIC);
	h[OFF_VERSION] = P3_FRAME_VERSION;
	h[OFF_TYPE] = f->type;
	h[OFF_LEVEL] = f->level;
	h[OFF_FLAGS] = 0;
	put_be32(h + OFF_TENSOR, f->tensor);
	put_be32(h + OFF_LENGTH, f->length);
	put_be64(h + OFF_OFFSET, f->offset);
	put_be64(h + OFF_ITER, f->iter);
	put_be32(h + OFF_RSVD, 0);
	put_be32(h + OFF_CRC, frame_crc(h, payload, f->length));
	return 0;
}

static void frame_decode(const uint8_t *h, struct p3_frame *f)
{
	f->type = h[OFF_TYPE];
	f->level = h[OFF_LEVEL];
	f->tensor = get_be32(h + OFF_TENSOR);
	f->length = get_be32(h + OFF_LENGTH);
	f->offset = get_be64(h + OFF_OFFSET);
	f->iter = get_be64(h + OFF_ITER);
	f->payload = NULL;
}

/* The checks that need no knowledge of the receiver. */
static int frame_check_format(const uint8_t *h, const struct p3_frame *f)
{
	if (get_be32(h + OFF_MAGIC) != P3_FRAME_MAGIC)
		return -P3_EBADMAGIC;
	if (h[OFF_VERSION] != P3_FRAME_VERSION)
		return -P3_EVERSION;
	if (f->type > P3_FRAME_HELLO || h[OFF_FLAGS] || get_be32(h + OFF_RSVD) || !f->length)
		return -P3_EBADFRAME;
	if (f->type == P3_FRAME_HELLO &&
	    (f->length != P3_HELLO_LEN || f->tensor || f->offset || f->iter))
		return -P3_EBADFRAME;
	return 0;
}

static int frame_check_limits(const struct p3_frame *f, const struct p3_frame_limits *lim)
{
	uint32_t max_payload = P3_DEFAULT_MAX_PAYLOAD;
	unsigned int bands = P3_MAX_BANDS;
	uint64_t size;
	int err;

	if (lim && lim->max_payload)
		max_payload = lim->max_payload;
	if (lim && lim->bands && lim->bands < P3_MAX_BANDS)
		bands = lim->bands;
	/* The frame's size must fit the int that p3_frame_parse() returns. */
	if (f->length > max_payload || f->length > INT32_MAX - P3_FRAME_HDR_LEN)
		return -P3_ETOOBIG;
	if (f->level >= bands)
		return -P3_ELEVEL;
	if (f->type != P3_FRAME_DATA)
		return 0;
	/* Written so that a huge offset cannot wrap the sum. */
	if (f->offset > UINT64_MAX - f->length)
		return -P3_ERANGE;
	if (!lim || !lim->tensor_size)
		return 0;
	err = lim->tensor_size(lim->ctx, f->tensor, f->iter, &size);
	if (err < 0)
		return err;
	if (f->offset > size || f->length > size - f->offset)
		return -P3_ERANGE;
	return 0;
}

P3_EXPORT int p3_frame_parse_header(const void *buf, size_t len,
				    const struct p3_frame_limits *lim, struct p3_frame *f)
{
	int err;

	if (!buf || !f)
		return -EINVAL;
	if (len < P3_FRAME_HDR_LEN)
		return -P3_ETRUNC;
	frame_decode(buf, f);
	err = frame_check_format(buf, f);
	if (err)
		return err;
	return frame_check_limits(f, lim);
}

P3_EXPORT int p3_frame_parse(const void *buf, size_t len, const struct p3_frame_limits *lim,
			     struct p3_frame *f)
{
	const uint8_t *h = buf;
	int err;

	err = p3_frame_parse_header(buf, len, lim, f);
	if (err)
		return err;
	if (len - P3_FRAME_HDR_LEN < f->length)
		return -P3_ETRUNC;
	if (frame_crc(h, h + P3_FRAME_HDR_LEN, f->length) != get_be32(h + OFF_CRC))
		return -P3_ECSUM;
	f->payload = h + P3_FRAME_HDR_LEN;
	return P3_FRAME_HDR_LEN + f->length;
}

P3_EXPORT int p3_hello_build(void *buf, uint64_t chan_id, unsigned int band, unsigned int bands)
{
	uint8_t *h = buf, *p;
	struct p3_frame f = {
		.type = P3_FRAME_HELLO,
		.level = band,
		.length = P3_HELLO_LEN,
	};

	if (!buf || !bands || bands > P3_MAX_BANDS || band >= bands)
		return -EINVAL;
	p = h + P3_FRAME_HDR_LEN;
	memset(p, 0, P3_HELLO_LEN);
	put_be64(p + HELLO_CHAN, chan_id);
	p[HELLO_BAND] = band;
	p[HELLO_BANDS] = bands;
	return p3_frame_header(h, &f, p);
}

P3_EXPORT int p3_hello_parse(const void *buf, size_t len, uint64_t *chan_id, unsigned int *band,
			     unsigned int *bands)
{
	static const uint8_t zero[P3_HELLO_LEN - HELLO_RSVD];
	struct p3_frame_limits lim = { .max_payload = P3_HELLO_LEN };
	struct p3_frame f;
	const uint8_t *p;
	int n;

	n = p3_frame_parse(buf, len, &lim, &f);
	if (n < 0)
		return n;
	p = f.payload;
	if (f.type != P3_FRAME_HELLO || memcmp(p + HELLO_RSVD, zero, sizeof(zero)))
		return -P3_EHELLO;
	/* The header's level must agree with the band inside. */
	if (!p[HELLO_BANDS] || p[HELLO_BANDS] > P3_MAX_BANDS ||
	    p[HELLO_BAND] >= p[HELLO_BANDS] || p[HELLO_BAND] != f.level)
		return -P3_EHELLO;
	if (chan_id)
		*chan_id = get_be64(p + HELLO_CHAN);
	if (band)
		*band = p[HELLO_BAND];
	if (bands)
		*bands = p[HELLO_BANDS];
	return n;
}
