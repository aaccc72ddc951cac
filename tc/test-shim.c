// SPDX-License-Identifier: GPL-2.0
/*
 * test-shim.so, LD_PRELOADed into tc by test-parse.sh, lets the host check
 * what q_p3.so sends and prints without a kernel that knows p3:
 *
 *   P3_CAPTURE=FILE  append each RTM_NEWQDISC and RTM_NEWTCLASS request tc
 *                    sends to FILE, a stream that "tc monitor file FILE"
 *                    prints back;
 *   P3_JSON=1        open tc's JSON writer, which "tc monitor" never does,
 *                    so that "tc monitor file" prints JSON like "tc -j".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

/* Exported by tc (lib/json_print.c); the plugin itself never needs them. */
void new_json_obj(int json);
void delete_json_obj(void);

static void shim_capture(const struct msghdr *msg)
{
	const struct nlmsghdr *n;
	const char *path;
	FILE *f;
	size_t i;

	path = getenv("P3_CAPTURE");
	if (!path || !msg->msg_iovlen)
		return;
	n = msg->msg_iov[0].iov_base;
	if (msg->msg_iov[0].iov_len < sizeof(*n) ||
	    (n->nlmsg_type != RTM_NEWQDISC && n->nlmsg_type != RTM_NEWTCLASS))
		return;

	f = fopen(path, "a");
	if (!f)
		return;
	for (i = 0; i < msg->msg_iovlen; i++)
		fwrite(msg->msg_iov[i].iov_base, 1, msg->msg_iov[i].iov_len, f);
	fclose(f);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	ssize_t (*real)(int fd, const struct msghdr *msg, int flags);

	shim_capture(msg);
	real = dlsym(RTLD_NEXT, "sendmsg");
	return real(fd, msg, flags);
}

static bool shim_json;

__attribute__((constructor)) static void shim_init(void)
{
	shim_json = !!getenv("P3_JSON");
	if (shim_json)
		new_json_obj(1);
}

__attribute__((destructor)) static void shim_fini(void)
{
	if (shim_json)
		delete_json_obj();
}
