/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Helpers shared by the C test suites. */
#ifndef P3_TEST_UTIL_H
#define P3_TEST_UTIL_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* xorshift64*: fast, seedable, good enough to fill and to choose. */
static inline uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static inline uint64_t rnd_range(uint64_t *s, uint64_t lo, uint64_t hi)
{
	return lo + rnd_next(s) % (hi - lo + 1);
}

/* The content of tensor id at iteration iter: the receiver can check it
 * without sharing memory with the sender. */
static inline void fill_pattern(uint8_t *p, uint64_t len, uint32_t id, uint64_t iter)
{
	uint64_t s = (id + 1) * 0x9e3779b97f4a7c15ull ^ (iter + 7), v = 0, i;

	for (i = 0; i < len; i++) {
		if (!(i & 7))
			v = rnd_next(&s);
		p[i] = (uint8_t)(v >> ((i & 7) * 8));
	}
}

static inline int check_pattern(const uint8_t *p, uint64_t len, uint32_t id, uint64_t iter)
{
	uint64_t s = (id + 1) * 0x9e3779b97f4a7c15ull ^ (iter + 7), v = 0, i;

	for (i = 0; i < len; i++) {
		if (!(i & 7))
			v = rnd_next(&s);
		if (p[i] != (uint8_t)(v >> ((i & 7) * 8)))
			return 0;
	}
	return 1;
}

static inline int all_bytes(const uint8_t *p, size_t len, uint8_t v)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

/* A connected loopback pair of the given family and type; v4mapped makes
 * an IPv6 client talk to 127.0.0.1. */
static inline int loop_pair(int family, int type, int v4mapped, int fds[2])
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	socklen_t len;
	int l, c, a = -1, lfam = v4mapped ? AF_INET : family;

	l = socket(lfam, type, 0);
	if (l < 0)
		return -errno;
	if (lfam == AF_INET) {
		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		len = sizeof(*s4);
	} else {
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_loopback;
		len = sizeof(*s6);
	}
	if (bind(l, (struct sockaddr *)&ss, len) < 0 ||
	    getsockname(l, (struct sockaddr *)&ss, &len) < 0)
		goto fail;
	if (type == SOCK_STREAM && listen(l, 4) < 0)
		goto fail;
	c = socket(family, type, 0);
	if (c < 0)
		goto fail;
	if (v4mapped) {
		struct sockaddr_in6 m = { .sin6_family = AF_INET6, .sin6_port = s4->sin_port };

		inet_pton(AF_INET6, "::ffff:127.0.0.1", &m.sin6_addr);
		if (connect(c, (struct sockaddr *)&m, sizeof(m)) < 0)
			goto fail_c;
	} else if (connect(c, (struct sockaddr *)&ss, len) < 0) {
		goto fail_c;
	}
	if (type == SOCK_STREAM) {
		a = accept(l, NULL, NULL);
		if (a < 0)
			goto fail_c;
		close(l);
		l = a;
	}
	fds[0] = c;
	fds[1] = l;
	return 0;
fail_c:
	close(c);
fail:
	close(l);
	return -errno ? -errno : -EIO;
}

/* This process's threads named as libp3 names its engine. */
/* Threads named p3-engine in this process; the first one's id goes to
 * tid (if not NULL). */
static inline int engine_tasks(char *tid, size_t len)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	char path[300], comm[32];
	int n = 0;

	while (d && (e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f && fgets(comm, sizeof(comm), f) && !strcmp(comm, "p3-engine\n") &&
		    !n++ && tid)
			snprintf(tid, len, "%s", e->d_name);
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

static inline int engines_named(void)
{
	return engine_tasks(NULL, 0);
}

#endif /* P3_TEST_UTIL_H */
