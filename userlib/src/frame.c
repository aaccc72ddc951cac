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

/* Hello and refusal payloads (p3.h, "The handshake"). */
enum {
	HELLO_CHAN = 0,
	HELLO_COOKIE = 8,
	HELLO_BAND = 16,
	HELLO_BANDS = 17,
	HELLO_PROTO = 18,
	HELLO_RSVD1 = 19,
	HELLO_MAX_PAYLOAD = 20,
	HELLO_RSVD = 24,
};

enum {
	REFUSE_COOKIE = 0,
	REFUSE_REASON = 8,
	REFUSE_PROTO = 12,
	REFUSE_RSVD = 13,
};

_Static_assert(OFF_CRC + 4 == P3_FRAME_HDR_LEN, "header layout");
_Static_assert(HELLO_RSVD + 8 == P3_HELLO_LEN, "hello layout");
_Static_assert(REFUSE_RSVD + 3 == P3_REFUSE_LEN, "refusal layout");

uint32_t p3_frame_crc_header(const void *hdr)
{
	static const uint8_t zero[4];

	return p3_crc32c(p3_crc32c(0, hdr, OFF_CRC), zero, sizeof(zero));
}

uint8_t p3_frame_flags(const void *hdr)
{
	return ((const uint8_t *)hdr)[OFF_FLAGS];
}

uint32_t p3_frame_crc_wire(const void *hdr)
{
	return get_be32((const uint8_t *)hdr + OFF_CRC);
}

static uint32_t frame_crc(const uint8_t *hdr, const void *payload, uint32_t len)
{
	return p3_crc32c(p3_frame_crc_header(hdr), payload, len);
}

int p3_frame_header_flags(void *hdr, const struct p3_frame *f, const void *payload,
			  uint8_t flags)
{
	uint8_t *h = hdr;

	if (!h || !f || (f->length && !payload) || f->type > P3_FRAME_REFUSE ||
	    f->level >= P3_MAX_BANDS || !f->length || f->offset + f->length < f->offset ||
	    (flags & ~P3_FRAME_F_HDRCRC) || (flags && f->type != P3_FRAME_DATA))
		return -EINVAL;
	put_be32(h + OFF_MAGIC, P3_FRAME_MAGIC);
	h[OFF_VERSION] = P3_FRAME_VERSION;
	h[OFF_TYPE] = f->type;
	h[OFF_LEVEL] = f->level;
	h[OFF_FLAGS] = flags;
	put_be32(h + OFF_TENSOR, f->tensor);
	put_be32(h + OFF_LENGTH, f->length);
	put_be64(h + OFF_OFFSET, f->offset);
	put_be64(h + OFF_ITER, f->iter);
	put_be32(h + OFF_RSVD, 0);
	put_be32(h + OFF_CRC, flags & P3_FRAME_F_HDRCRC ? p3_frame_crc_header(h)
						      : frame_crc(h, payload, f->length));
	return 0;
}

P3_EXPORT int p3_frame_header(void *hdr, const struct p3_frame *f, const void *payload)
{
	return p3_frame_header_flags(hdr, f, payload, 0);
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

/* The checks that need no knowledge of the receiver; flags beyond
 * allowed, or on anything but data, are refused. */
static int frame_check_format(const uint8_t *h, const struct p3_frame *f, uint8_t allowed)
{
	if (get_be32(h + OFF_MAGIC) != P3_FRAME_MAGIC)
		return -P3_EBADMAGIC;
	if (h[OFF_VERSION] != P3_FRAME_VERSION)
		return -P3_EVERSION;
	if (f->type > P3_FRAME_REFUSE || (h[OFF_FLAGS] & ~allowed) || get_be32(h + OFF_RSVD) ||
	    !f->length)
		return -P3_EBADFRAME;
	if (f->type == P3_FRAME_DATA)
		return 0;
	if (h[OFF_FLAGS])
		return -P3_EBADFRAME;
	if (f->length != (f->type == P3_FRAME_HELLO ? P3_HELLO_LEN : P3_REFUSE_LEN) ||
	    f->tensor || f->offset || f->iter)
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

int p3_frame_parse_header_flags(const void *buf, size_t len, const struct p3_frame_limits *lim,
				struct p3_frame *f, uint8_t allowed, uint8_t *flags)
{
	int err;

	if (!buf || !f)
		return -EINVAL;
	if (len < P3_FRAME_HDR_LEN)
		return -P3_ETRUNC;
	frame_decode(buf, f);
	err = frame_check_format(buf, f, allowed);
	if (err)
		return err;
	if (flags)
		*flags = ((const uint8_t *)buf)[OFF_FLAGS];
	return frame_check_limits(f, lim);
}

P3_EXPORT int p3_frame_parse_header(const void *buf, size_t len,
				    const struct p3_frame_limits *lim, struct p3_frame *f)
{
	return p3_frame_parse_header_flags(buf, len, lim, f, 0, NULL);
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

static int all_zero(const uint8_t *p, size_t n)
{
	while (n--)
		if (*p++)
			return 0;
	return 1;
}

P3_EXPORT int p3_hello_build(void *buf, const struct p3_hello *h)
{
	uint8_t *b = buf, *p;
	struct p3_frame f = { .type = P3_FRAME_HELLO, .length = P3_HELLO_LEN };

	if (!buf || !h || !h->bands || h->bands > P3_MAX_BANDS || h->band >= h->bands ||
	    !h->cookie || !h->proto || !h->max_payload)
		return -EINVAL;
	f.level = h->band;
	p = b + P3_FRAME_HDR_LEN;
	memset(p, 0, P3_HELLO_LEN);
	put_be64(p + HELLO_CHAN, h->chan_id);
	put_be64(p + HELLO_COOKIE, h->cookie);
	p[HELLO_BAND] = h->band;
	p[HELLO_BANDS] = h->bands;
	p[HELLO_PROTO] = h->proto;
	put_be32(p + HELLO_MAX_PAYLOAD, h->max_payload);
	return p3_frame_header(b, &f, p);
}

/* A whole hello or refusal frame: its wire size, or an error.  Its own
 * length is the payload bound, so a longer one is never read. */
static int control_parse(const void *buf, size_t len, uint8_t type, uint32_t plen,
			 struct p3_frame *f)
{
	struct p3_frame_limits lim = { .max_payload = plen };
	int n = p3_frame_parse(buf, len, &lim, f);

	if (n >= 0 && f->type != type)
		return -P3_EHELLO;
	return n;
}

P3_EXPORT int p3_hello_parse(const void *buf, size_t len, struct p3_hello *h)
{
	struct p3_frame f;
	const uint8_t *p;
	int n;

	n = control_parse(buf, len, P3_FRAME_HELLO, P3_HELLO_LEN, &f);
	if (n < 0)
		return n;
	p = f.payload;
	if (p[HELLO_RSVD1] ||
	    !all_zero(p + HELLO_RSVD, P3_HELLO_LEN - HELLO_RSVD))
		return -P3_EHELLO;
	/* The header's level must agree with the band inside. */
	if (!p[HELLO_BANDS] || p[HELLO_BANDS] > P3_MAX_BANDS ||
	    p[HELLO_BAND] >= p[HELLO_BANDS] || p[HELLO_BAND] != f.level ||
	    !get_be64(p + HELLO_COOKIE) || !p[HELLO_PROTO] || !get_be32(p + HELLO_MAX_PAYLOAD))
		return -P3_EHELLO;
	if (h)
		*h = (struct p3_hello){
			.chan_id = get_be64(p + HELLO_CHAN),
			.cookie = get_be64(p + HELLO_COOKIE),
			.band = p[HELLO_BAND],
			.bands = p[HELLO_BANDS],
			.proto = p[HELLO_PROTO],
			.max_payload = get_be32(p + HELLO_MAX_PAYLOAD),
		};
	return n;
}

int p3_refusal_build(void *buf, uint64_t cookie, unsigned int band, unsigned int reason,
		     unsigned int proto)
{
	struct p3_frame f = { .type = P3_FRAME_REFUSE, .level = band, .length = P3_REFUSE_LEN };
	uint8_t *p = (uint8_t *)buf + P3_FRAME_HDR_LEN;

	if (band >= P3_MAX_BANDS || !reason || proto > 255)
		return -EINVAL;
	memset(p, 0, P3_REFUSE_LEN);
	put_be64(p + REFUSE_COOKIE, cookie);
	put_be32(p + REFUSE_REASON, reason);
	p[REFUSE_PROTO] = proto;
	return p3_frame_header(buf, &f, p);
}

int p3_refusal_parse(const void *buf, size_t len, uint64_t cookie, unsigned int band,
		     unsigned int *reason, unsigned int *proto)
{
	struct p3_frame f;
	const uint8_t *p;
	int n;

	n = control_parse(buf, len, P3_FRAME_REFUSE, P3_REFUSE_LEN, &f);
	if (n < 0)
		return n;
	p = f.payload;
	if (f.level != band ||
	    get_be64(p + REFUSE_COOKIE) != cookie || !get_be32(p + REFUSE_REASON) ||
	    !all_zero(p + REFUSE_RSVD, P3_REFUSE_LEN - REFUSE_RSVD))
		return -P3_EHELLO;
	*reason = get_be32(p + REFUSE_REASON);
	*proto = p[REFUSE_PROTO];
	return n;
}
