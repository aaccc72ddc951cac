// SPDX-License-Identifier: LGPL-2.1-or-later
/* Formatting shared by p3ctl's commands. */
#include <stdio.h>

#include "p3.h"
#include "cli.h"

const char *fmt_handle(uint32_t h, char *buf, size_t len)
{
	if (h == P3_ROOT)
		snprintf(buf, len, "root");
	else if (h & 0xffff)
		snprintf(buf, len, "%x:%x", h >> 16, h & 0xffff);
	else
		snprintf(buf, len, "%x:", h >> 16);
	return buf;
}

const char *fmt_rate(double bytes_per_s, char *buf, size_t len)
{
	double bits = bytes_per_s * 8;

	if (bits >= 1e9)
		snprintf(buf, len, "%.4gGbit", bits / 1e9);
	else if (bits >= 1e6)
		snprintf(buf, len, "%.4gMbit", bits / 1e6);
	else if (bits >= 1e3)
		snprintf(buf, len, "%.4gKbit", bits / 1e3);
	else
		snprintf(buf, len, "%.4gbit", bits);
	return buf;
}
