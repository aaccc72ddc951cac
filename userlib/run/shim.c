// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libp3run.so, which `p3ctl run` preloads into a job: every IP socket the
 * job and its children create is tagged with the level in P3_RUN_LEVEL,
 * by the method in P3_RUN_TAG, through libp3's own tagging (tag.c, linked
 * in).  The tag is set when the socket is made, before the program can
 * touch it, so a program that sets its own TOS or tags through libp3
 * afterwards keeps what it sets.  Accepted connections inherit their
 * listener's tag in the kernel.  Only socket() is exported (shim.map):
 * libp3's own symbols in the job are never shadowed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "p3.h"

/* Built with -fvisibility=hidden, as libp3 is. */
#define P3_SHIM_EXPORT	__attribute__((visibility("default")))

typedef int (*socket_fn)(int, int, int);

static socket_fn real_socket;
static int run_level = -1;	/* -1: leave sockets as they are */
static int run_method = P3_METHOD_DSCP;
static int warned;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
	const char *lvl = getenv("P3_RUN_LEVEL"), *tag = getenv("P3_RUN_TAG");
	char *end;
	long l;

	real_socket = (socket_fn)dlsym(RTLD_NEXT, "socket");
	if (!lvl)
		return;
	l = strtol(lvl, &end, 10);
	if (tag)
		run_method = p3_tag_method_parse(tag);
	if (*lvl && !*end && l >= 0 && l < P3_MAX_BANDS && run_method > P3_METHOD_DEFAULT) {
		run_level = (int)l;
		return;
	}
	/* Only p3ctl run sets these, and it checks them: someone else's
	 * environment is wrong, so say it once and tag nothing. */
	fprintf(stderr, "libp3run: P3_RUN_LEVEL=%s P3_RUN_TAG=%s is not a level and a tag "
		"method (see p3ctl(1)); sockets are left untagged\n", lvl, tag ? tag : "");
}

__attribute__((constructor)) static void shim_init(void)
{
	pthread_once(&once, load);
}

P3_SHIM_EXPORT int socket(int domain, int type, int protocol)
{
	int fd, err, saved;

	/* Another preloaded library's constructor may come before ours. */
	pthread_once(&once, load);
	if (!real_socket) {
		errno = ENOSYS;
		return -1;
	}
	fd = real_socket(domain, type, protocol);
	if (fd < 0 || run_level < 0 || (domain != AF_INET && domain != AF_INET6))
		return fd;
	saved = errno;
	/* No TCP_NOTSENT_LOWAT: an unmodified program's socket buffering
	 * stays its own. */
	err = p3_tag_ex(fd, (unsigned int)run_level, run_method, 0);
	if (err && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "libp3run: cannot tag this process's sockets with level %d: %s\n",
			run_level, p3_strerror(err));
	errno = saved;
	return fd;
}
