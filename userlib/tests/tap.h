/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Minimal TAP producer for the C test suites.  $TAP_PREFIX, if set, is put
 * in front of every description, so the sanitizer run of a suite can be
 * told apart from the plain run in a combined log.
 */
#ifndef P3_TAP_H
#define P3_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int tap_n, tap_failed;

#define TAP_UNUSED	__attribute__((unused))

__attribute__((format(printf, 2, 3)))
TAP_UNUSED static int tap_ok(int pass, const char *fmt, ...)
{
	const char *prefix = getenv("TAP_PREFIX");
	va_list ap;

	printf("%sok %d - %s", pass ? "" : "not ", ++tap_n, prefix ? prefix : "");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	if (!pass)
		tap_failed++;
	return pass;
}

__attribute__((format(printf, 1, 2)))
TAP_UNUSED static void tap_diag(const char *fmt, ...)
{
	va_list ap;

	fputs("# ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

TAP_UNUSED static int tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#define ok(cond, ...)	tap_ok(!!(cond), __VA_ARGS__)

/* Expect err == want, saying what came instead. */
#define ok_err(err, want, ...)                                                           \
	do {                                                                               \
		int _e = (err), _w = (want);                                               \
		if (!tap_ok(_e == _w, __VA_ARGS__))                                        \
			tap_diag("got %d (%s), want %d (%s)", _e, p3_strerror(_e), _w,     \
				 p3_strerror(_w));                                         \
	} while (0)

#endif /* P3_TAP_H */
