// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libFuzzer target: the netlink reply parsers (qdisc dump, class dump,
 * ack with extended ack).  Input: [selector][netlink bytes...].
 */
#include <stdint.h>

#include "internal.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* An RTM_NEWQDISC "p3" with one option, then NLMSG_DONE. */
	static const uint8_t seed[] = {
		0,
		60, 0, 0, 0, 36, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0,	/* nlmsghdr */
		0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xff, 0xff,	/* tcmsg */
		0, 0, 0, 0,
		7, 0, 1, 0, 'p', '3', 0, 0,				/* TCA_KIND */
		12, 0, 2, 0x80, 5, 0, 1, 0, 8, 0, 0, 0,		/* TCA_OPTIONS */
		20, 0, 0, 0, 3, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	};

	(void)argc;
	(void)argv;
	seed_write(0, seed, sizeof(seed));
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct p3_qdisc_stats st;
	struct p3_nl_dump d = { .ifindex = 4, .st = &st };
	uint8_t *buf;
	size_t len;
	int r, err = 0;

	if (size < 1)
		return 0;
	len = size - 1;
	buf = malloc(len ? len : 1);
	memcpy(buf, data + 1, len);
	memset(&st, 0, sizeof(st));
	d.parent = (data[0] & 1) ? 0xffffffffu : 0;
	d.handle = (data[0] & 2) ? 0x00100000u : 0;
	st.handle = 0x00100000u;
	switch (data[0] >> 6) {
	case 0:
		r = p3_nl_parse_qdiscs(buf, len, &d);
		break;
	case 1:
		r = p3_nl_parse_classes(buf, len, &d);
		CHECK(st.nbands <= P3_MAX_BANDS);
		break;
	default:
		r = p3_nl_parse_ack(buf, len, 0, &err);
		CHECK(strlen(p3_last_extack()) < 256);
		CHECK(r <= 0 || err <= 0);
		break;
	}
	CHECK(r <= 1);
	free(buf);
	return 0;
}
