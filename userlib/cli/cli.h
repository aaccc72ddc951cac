/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the files of p3ctl share.
 */
#ifndef P3CTL_CLI_H
#define P3CTL_CLI_H

#include <stddef.h>
#include <stdint.h>

/* "root", "MAJ:" or "MAJ:MIN" in hexadecimal, as tc writes handles. */
const char *fmt_handle(uint32_t h, char *buf, size_t len);

/* A rate in bytes per second as tc writes it: "50Mbit". */
const char *fmt_rate(double bytes_per_s, char *buf, size_t len);

#endif /* P3CTL_CLI_H */
