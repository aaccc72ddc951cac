// SPDX-License-Identifier: LGPL-2.1-or-later
/* Error messages, the netlink extended ack, and the library's clock. */
#include <string.h>
#include <time.h>

#include "internal.h"

static const char *const p3_errmsg[__P3_EMAX - P3_ERRBASE] = {
	[P3_EBADMAGIC - P3_ERRBASE] = "bad frame: wrong magic (not a p3 stream)",
	[P3_EVERSION - P3_ERRBASE] = "bad frame: unsupported protocol version",
	[P3_EBADFRAME - P3_ERRBASE] =
		"bad frame: unknown type, non-zero reserved field or empty slice",
	[P3_ETOOBIG - P3_ERRBASE] = "bad frame: payload longer than the receiver accepts",
	[P3_ELEVEL - P3_ERRBASE] =
		"bad frame: level not below the band count, or not its connection's band",
	[P3_ERANGE - P3_ERRBASE] =
		"bad frame: offset + length outside the registered tensor",
	[P3_ECSUM - P3_ERRBASE] = "bad frame: CRC32C checksum mismatch",
	[P3_ETRUNC - P3_ERRBASE] = "truncated frame: data ends inside a frame",
	[P3_EDUP - P3_ERRBASE] = "duplicate or overlapping slice for a tensor",
	[P3_ESTALE - P3_ERRBASE] = "slice for an older iteration than the one registered",
	[P3_EHELLO - P3_ERRBASE] = "bad hello: malformed, duplicate band or band count mismatch",
	[P3_EINCOMPLETE - P3_ERRBASE] =
		"peer closed the channel while registered tensors were incomplete",
	[P3_ENEEDCAP_PRIO - P3_ERRBASE] =
		"SO_PRIORITY above 6 needs CAP_NET_ADMIN; use tag method dscp "
		"(unprivileged) instead",
	[P3_ENEEDCAP_MARK - P3_ERRBASE] =
		"SO_MARK needs CAP_NET_ADMIN (or CAP_NET_RAW on newer kernels); "
		"use tag method dscp (unprivileged) instead",
	[P3_EDSCPRANGE - P3_ERRBASE] =
		"level above 30 has no DSCP code point (see p3_level_dscp); use tag method priority or mark",
	[P3_ETAGVERIFY - P3_ERRBASE] = "tag read back from the socket differs from the one set",
	[P3_ENOTP3 - P3_ERRBASE] = "the qdisc at that place is not a p3 qdisc",
	[P3_ENLPARSE - P3_ERRBASE] = "malformed netlink reply from the kernel",
	[P3_ECLOSED - P3_ERRBASE] = "channel shut down while the call ran",
};

P3_EXPORT const char *p3_strerror(int err)
{
	static __thread char buf[64];

	if (err < 0)
		err = -err;
	if (err >= P3_ERRBASE && err < __P3_EMAX)
		return p3_errmsg[err - P3_ERRBASE];
	if (err == 0)
		return "success";
	if (err < P3_ERRBASE)
		return strerror_r(err, buf, sizeof(buf));
	return "unknown libp3 error";
}

/* Per thread, so that concurrent qdisc calls don't mix their messages. */
static __thread char p3_extack[256];

void p3_set_extack(const char *msg, size_t len)
{
	if (len >= sizeof(p3_extack))
		len = sizeof(p3_extack) - 1;
	memcpy(p3_extack, msg, len);
	p3_extack[len] = '\0';
}

P3_EXPORT const char *p3_last_extack(void)
{
	return p3_extack;
}

P3_EXPORT uint64_t p3_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
