/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Private declarations shared by libp3's source files. */
#ifndef P3_INTERNAL_H
#define P3_INTERNAL_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "p3.h"

#define P3_EXPORT	__attribute__((visibility("default")))
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

static inline void put_be32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put_be64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint32_t get_be32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

static inline uint64_t get_be64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

/*
 * struct.c: the growable structs' rule (p3.h, "Structs that grow").  Each
 * first layout's size is the struct's sizeof today; when a field is
 * appended, it becomes offsetof() that field.
 */
#define P3_PLAN_OPTS_SIZE_1	offsetof(struct p3_plan_opts, order)
#define P3_CHAN_OPTS_SIZE_1	offsetof(struct p3_chan_opts, level_stride)
#define P3_QDISC_OPTS_SIZE_1	offsetof(struct p3_qdisc_opts, flows)
#define P3_QDISC_STATS_SIZE_1	offsetof(struct p3_qdisc_stats, drops_deadline)
#define P3_DGRAM_OPTS_SIZE_1	sizeof(struct p3_dgram_opts)

/* Read the caller's options src over dst (dst_size bytes, holding the
 * defaults); dst->size becomes dst_size.  0, -EINVAL or -E2BIG. */
int p3_struct_in(void *dst, size_t dst_size, size_t first_size, const void *src);
/* How many bytes of src (src_size) fit the caller's struct at dst, whose
 * size field says (0: first_size); -EINVAL if below first_size. */
int p3_struct_out_len(const void *dst, size_t src_size, size_t first_size);

/* frame.c: the receiver's refusal (P3_FRAME_HDR_LEN + P3_REFUSE_LEN bytes;
 * p3.h, "The handshake").  The parser returns the frame's size, the
 * reason (a P3_E* code) in *reason and the receiver's version in *proto. */
int p3_refusal_build(void *buf, uint64_t cookie, unsigned int band, unsigned int reason,
		     unsigned int proto);
int p3_refusal_parse(const void *buf, size_t len, uint64_t cookie, unsigned int band,
		     unsigned int *reason, unsigned int *proto);

/* tag.c: resolve P3_METHOD_DEFAULT to the process-wide method. */
int p3_tag_resolve(int method);

/* frame.c, for payloads checked as they arrive: the CRC of a header whose
 * crc field is taken as zero (chain the payload onto it with p3_crc32c()),
 * and the CRC the header carries. */
uint32_t p3_frame_crc_header(const void *hdr);
uint32_t p3_frame_crc_wire(const void *hdr);

/* frame.c, for channels of protocol 2: a data frame whose CRC covers its
 * header only (flag P3_FRAME_F_HDRCRC), its payload left to TCP's own
 * checksum.  The public parsers refuse the flag: datagrams and every
 * protocol-1 channel keep the payload's CRC. */
#define P3_FRAME_F_HDRCRC	0x01
int p3_frame_header_flags(void *hdr, const struct p3_frame *f, const void *payload,
			  uint8_t flags);
uint8_t p3_frame_flags(const void *hdr);
int p3_frame_parse_header_flags(const void *buf, size_t len, const struct p3_frame_limits *lim,
				struct p3_frame *f, uint8_t allowed, uint8_t *flags);

/* crc32c.c: CRC-32C without the CPU's instruction (p3_crc32c() picks the fastest
 * at run time); internal, for the tests to check both paths.
 */
uint32_t p3_crc32c_portable(uint32_t crc, const void *buf, size_t len);
int p3_crc32c_uses_cpu(void);

/* error.c: remember the kernel's extended ack for p3_last_extack(). */
void p3_set_extack(const char *msg, size_t len);

/* Netlink reply parsers (nlparse.c), kept free of sockets for fuzzing. */
struct p3_nl_dump {
	uint32_t		ifindex;
	uint32_t		parent;		/* 0 = any */
	uint32_t		handle;		/* 0 = any p3 */
	int			found;		/* a p3 qdisc matched */
	int			other_kind;	/* a non-p3 qdisc sat at parent */
	struct p3_qdisc_stats	*st;
};

/*
 * Walk a buffer of netlink messages from an RTM_GETQDISC or RTM_GETTCLASS
 * dump and fold what matches d into d->st.  Returns 1 when NLMSG_DONE was
 * seen, 0 when more is to come, or a negative error (an NLMSG_ERROR's
 * errno, or -P3_ENLPARSE).
 */
int p3_nl_parse_qdiscs(const void *buf, size_t len, struct p3_nl_dump *d);
int p3_nl_parse_classes(const void *buf, size_t len, struct p3_nl_dump *d);

/* Parse an ack: 1 and 0 stored in *err for success, the errno otherwise;
 * the extack text (if any) goes to p3_set_extack().  0 if buf holds no
 * ack, -P3_ENLPARSE if it is malformed. */
int p3_nl_parse_ack(const void *buf, size_t len, uint32_t seq, int *err);

#endif /* P3_INTERNAL_H */
