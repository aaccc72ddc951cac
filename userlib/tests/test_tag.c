// SPDX-License-Identifier: LGPL-2.1-or-later
/* Socket tagging on loopback sockets: every method, family and error. */
#include <errno.h>
#include <linux/capability.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "p3.h"
#include "tap.h"
#include "util.h"

/*
 * Linked with --wrap=getsockopt: libp3's read-back of a tag comes through
 * here, and while skew is set the value read is off by that much, as if
 * something (a BPF program, an LSM, another thread) had rewritten it.
 */
static int skew, skew_lvl, skew_name;
int __real_getsockopt(int fd, int lvl, int name, void *val, socklen_t *len);

int __wrap_getsockopt(int fd, int lvl, int name, void *val, socklen_t *len)
{
	int r = __real_getsockopt(fd, lvl, name, val, len);

	if (!r && skew && lvl == skew_lvl && name == skew_name && *len == sizeof(int))
		*(int *)val += skew;
	return r;
}

static void skew_option(int lvl, int name, int by)
{
	skew_lvl = lvl;
	skew_name = name;
	skew = by;
}

static int getint(int fd, int lvl, int name)
{
	socklen_t len = sizeof(int);
	int v = -12345;

	getsockopt(fd, lvl, name, &v, &len);
	return v;
}

/* Every code point RFC 4594 and RFC 8622 give a meaning: CS0-CS7, AF11-AF43,
 * EF, VOICE-ADMIT, Lower-Effort.
 */
static int dscp_standard(int dscp)
{
	static const int cps[] = { 0, 8, 16, 24, 32, 40, 48, 56, 10, 12, 14, 18, 20, 22,
				   26, 28, 30, 34, 36, 38, 46, 44, 1 };
	unsigned int i;

	for (i = 0; i < sizeof(cps) / sizeof(cps[0]); i++)
		if (cps[i] == dscp)
			return 1;
	return 0;
}

static void test_dscp_codes(void)
{
	int lv, cp, seen[64] = { 0 }, good = 1, inverse = 1;

	ok(p3_level_dscp(0) == 3 && p3_level_dscp(1) == 7 && p3_level_dscp(15) == 63 &&
	   p3_level_dscp(16) == 5 && p3_level_dscp(17) == 9 && p3_level_dscp(30) == 61,
	   "levels take pool xxxx11 (3, 7, .., 63), then xxxx01 from 5 (.., 61)");
	for (lv = 0; lv <= 30; lv++) {
		cp = p3_level_dscp(lv);
		good &= cp >= 0 && cp < 64 && !seen[cp] && !dscp_standard(cp);
		if (cp >= 0 && cp < 64)
			seen[cp] = 1;
		inverse &= p3_dscp_level(cp) == lv;
	}
	ok(good, "levels 0..30 take 31 distinct code points, none with a standard meaning");
	for (cp = 0; cp < 64; cp++)
		inverse &= seen[cp] || p3_dscp_level(cp) == -ENOENT;
	ok(inverse && p3_dscp_level(64) == -ENOENT,
	   "p3_dscp_level inverts p3_level_dscp; every other code point is untagged");
	ok_err(p3_level_dscp(31), -P3_EDSCPRANGE, "level 31 has no code point");
}

static void test_dscp_v4(void)
{
	int fds[2], lv, good = 1;

	if (!ok(loop_pair(AF_INET, SOCK_STREAM, 0, fds) == 0, "IPv4 TCP loopback pair"))
		return;
	for (lv = 0; lv <= 30; lv++) {
		good &= p3_tag(fds[0], lv) == 0;
		good &= getint(fds[0], IPPROTO_IP, IP_TOS) >> 2 == p3_level_dscp(lv);
		good &= p3_tag_get(fds[0], P3_METHOD_DSCP) == lv;
	}
	ok(good, "dscp: levels 0..30 give their code points (IP_TOS = dscp << 2), read back");
	ok(getint(fds[0], IPPROTO_TCP, TCP_NOTSENT_LOWAT) == P3_DEFAULT_NOTSENT_LOWAT,
	   "TCP_NOTSENT_LOWAT set to the default 16 KiB");
	ok(p3_tag_ex(fds[0], 1, P3_METHOD_DSCP, 4096) == 0 &&
	   getint(fds[0], IPPROTO_TCP, TCP_NOTSENT_LOWAT) == 4096, "TCP_NOTSENT_LOWAT override");
	ok_err(p3_tag(fds[0], 31), -P3_EDSCPRANGE, "level 31 has no DSCP code point");
	ok(strstr(p3_strerror(-P3_EDSCPRANGE), "30") != NULL, "the DSCP error names the limit");
	ok_err(p3_tag(fds[0], 64), -P3_ELEVEL, "level 64 is out of range for every method");
	ok(p3_tag_get(fds[1], P3_METHOD_DSCP) == -ENOENT, "an untagged socket reads -ENOENT");
	close(fds[0]);
	close(fds[1]);
}

/* UDP keeps the ECN bits the application chose; the tag must too. */
static void test_ecn(void)
{
	int fds[2], tos = 0x02;

	if (loop_pair(AF_INET, SOCK_DGRAM, 0, fds))
		return;
	setsockopt(fds[0], IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
	ok(p3_tag(fds[0], 4) == 0 && getint(fds[0], IPPROTO_IP, IP_TOS) == (19 << 2 | 0x02),
	   "dscp keeps the ECN bits");
	close(fds[0]);
	close(fds[1]);
}

/* What the receiver sees on the wire, through IP_RECVTOS/IPV6_RECVTCLASS. */
static int wire_tos(int family, int fds[2])
{
	char buf[16], cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int one = 1, v = -1;

	if (family == AF_INET)
		setsockopt(fds[1], IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
	else
		setsockopt(fds[1], IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
	if (send(fds[0], "x", 1, 0) != 1 || recvmsg(fds[1], &mh, 0) != 1)
		return -1;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_type == IP_TOS)
			v = *(unsigned char *)CMSG_DATA(cm);
		else if (cm->cmsg_type == IPV6_TCLASS)
			memcpy(&v, CMSG_DATA(cm), sizeof(v));
	}
	return v;
}

static void test_wire(void)
{
	int fds[2];

	if (!loop_pair(AF_INET, SOCK_DGRAM, 0, fds)) {
		p3_tag(fds[0], 6);
		ok(wire_tos(AF_INET, fds) >> 2 == 27, "IPv4 packets carry DSCP 27 for level 6");
		close(fds[0]);
		close(fds[1]);
	}
	if (!loop_pair(AF_INET6, SOCK_DGRAM, 0, fds)) {
		p3_tag(fds[0], 9);
		ok(wire_tos(AF_INET6, fds) >> 2 == 39, "IPv6 packets carry DSCP 39 for level 9");
		close(fds[0]);
		close(fds[1]);
	}
	if (!loop_pair(AF_INET6, SOCK_DGRAM, 1, fds)) {
		p3_tag(fds[0], 2);
		ok(wire_tos(AF_INET, fds) >> 2 == 11,
		   "v4-mapped IPv6 socket: IPv4 packets carry DSCP 11 for level 2");
		close(fds[0]);
		close(fds[1]);
	}
}

static void test_v6(void)
{
	int fds[2], one = 1, s;

	if (!ok(loop_pair(AF_INET6, SOCK_STREAM, 0, fds) == 0, "IPv6 TCP loopback pair"))
		return;
	ok(p3_tag(fds[0], 11) == 0 && getint(fds[0], IPPROTO_IPV6, IPV6_TCLASS) >> 2 == 47 &&
	   p3_tag_get(fds[0], P3_METHOD_DSCP) == 11, "IPv6: IPV6_TCLASS carries the tag");
	ok(getint(fds[0], IPPROTO_IP, IP_TOS) >> 2 == 47,
	   "dual-stack IPv6 socket: IP_TOS is set as well");
	close(fds[0]);
	close(fds[1]);
	s = socket(AF_INET6, SOCK_STREAM, 0);
	setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	ok(p3_tag(s, 20) == 0 && getint(s, IPPROTO_IPV6, IPV6_TCLASS) >> 2 == 21 &&
	   getint(s, IPPROTO_IP, IP_TOS) >> 2 == 0, "V6ONLY socket: only IPV6_TCLASS");
	close(s);
	if (!ok(loop_pair(AF_INET6, SOCK_STREAM, 1, fds) == 0, "v4-mapped TCP pair"))
		return;
	ok(p3_tag(fds[0], 30) == 0 && getint(fds[0], IPPROTO_IP, IP_TOS) >> 2 == 61 &&
	   getint(fds[0], IPPROTO_IPV6, IPV6_TCLASS) >> 2 == 61,
	   "v4-mapped socket: both IP_TOS and IPV6_TCLASS");
	close(fds[0]);
	close(fds[1]);
}

static void test_sockopt_methods(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0), good = 1, lv;

	for (lv = 0; lv <= 5; lv++)
		good &= p3_tag_ex(s, lv, P3_METHOD_PRIORITY, -1) == 0 &&
			getint(s, SOL_SOCKET, SO_PRIORITY) == lv + 1 &&
			p3_tag_get(s, P3_METHOD_PRIORITY) == lv;
	ok(good, "priority: levels 0..5 as SO_PRIORITY 1..6 (no privilege needed)");
	/* This process may hold CAP_NET_ADMIN; the unprivileged case is below. */
	if (p3_tag_ex(s, 40, P3_METHOD_PRIORITY, -1) == 0)
		ok(getint(s, SOL_SOCKET, SO_PRIORITY) == 41,
		   "priority level 40 with CAP_NET_ADMIN");
	else
		ok(1, "priority level 40 # SKIP no CAP_NET_ADMIN");
	if (p3_tag_ex(s, 7, P3_METHOD_MARK, -1) == 0)
		ok(getint(s, SOL_SOCKET, SO_MARK) == 8 && p3_tag_get(s, P3_METHOD_MARK) == 7,
		   "mark level 7 as SO_MARK 8 with CAP_NET_ADMIN");
	else
		ok(1, "mark level 7 # SKIP no CAP_NET_ADMIN");
	close(s);
}

/* Drop CAP_NET_ADMIN and CAP_NET_RAW in a child and report what failed. */
static int child_unprivileged(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	int s, bad = 0;

	if (syscall(SYS_capget, &h, d))
		return 100;
	d[0].effective &= ~(1u << CAP_NET_ADMIN | 1u << CAP_NET_RAW);
	d[0].permitted &= ~(1u << CAP_NET_ADMIN | 1u << CAP_NET_RAW);
	if (syscall(SYS_capset, &h, d))
		return 101;
	s = socket(AF_INET, SOCK_STREAM, 0);
	bad |= (p3_tag_ex(s, 6, P3_METHOD_PRIORITY, -1) != -P3_ENEEDCAP_PRIO) << 0;
	bad |= (p3_tag_ex(s, 5, P3_METHOD_PRIORITY, -1) != 0) << 1;
	bad |= (p3_tag_ex(s, 0, P3_METHOD_MARK, -1) != -P3_ENEEDCAP_MARK) << 2;
	bad |= (p3_tag_ex(s, 30, P3_METHOD_DSCP, -1) != 0) << 3;
	return bad;
}

static void test_unprivileged(void)
{
	int status = -1;
	pid_t pid = fork();

	if (!pid)
		_exit(child_unprivileged());
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) >= 100) {
		ok(0, "could not drop capabilities in a child (status %d)", status);
		return;
	}
	status = WEXITSTATUS(status);
	ok(!(status & 1), "without CAP_NET_ADMIN: priority level 6 (SO_PRIORITY 7): ENEEDCAP");
	ok(!(status & 2), "without CAP_NET_ADMIN: priority level 5 still works");
	ok(!(status & 4), "without CAP_NET_ADMIN: mark -> ENEEDCAP_MARK");
	ok(!(status & 8), "without CAP_NET_ADMIN: dscp level 30 works");
	ok(strstr(p3_strerror(-P3_ENEEDCAP_PRIO), "CAP_NET_ADMIN") &&
	   strstr(p3_strerror(-P3_ENEEDCAP_PRIO), "dscp") &&
	   strstr(p3_strerror(-P3_ENEEDCAP_MARK), "CAP_NET_ADMIN") &&
	   strstr(p3_strerror(-P3_ENEEDCAP_MARK), "dscp"),
	   "privilege errors name the capability and suggest tag dscp");
}

static void test_misc(void)
{
	int s = socket(AF_UNIX, SOCK_STREAM, 0), u;

	ok_err(p3_tag(s, 1), -EAFNOSUPPORT, "dscp on an AF_UNIX socket: EAFNOSUPPORT");
	close(s);
	ok_err(p3_tag(-1, 1), -EBADF, "negative fd: EBADF");
	ok_err(p3_tag(s, 1), -EBADF, "closed fd: EBADF");
	ok(p3_tag_method_parse("DSCP") == P3_METHOD_DSCP &&
	   p3_tag_method_parse("prio") == P3_METHOD_PRIORITY &&
	   p3_tag_method_parse("mark") == P3_METHOD_MARK &&
	   p3_tag_method_parse("bogus") == -EINVAL, "method names parse");
	ok(!strcmp(p3_tag_method_name(P3_METHOD_DEFAULT), "dscp"), "the default method is dscp");
	u = socket(AF_INET, SOCK_DGRAM, 0);
	ok(p3_tag_config(P3_METHOD_PRIORITY, 0) == 0 && p3_tag(u, 2) == 0 &&
	   getint(u, SOL_SOCKET, SO_PRIORITY) == 3, "p3_tag_config switches the default method");
	ok(p3_tag_config(P3_METHOD_DEFAULT, 0) == -EINVAL, "the default cannot be 'default'");
	p3_tag_config(P3_METHOD_DSCP, P3_DEFAULT_NOTSENT_LOWAT);
	ok(p3_tag(u, 3) == 0, "UDP sockets are tagged without TCP_NOTSENT_LOWAT");
	close(u);
}

/* Each method reads its tag back; a tag that reads back otherwise is
 * reported, not assumed. */
static void test_verify(void)
{
	int u = socket(AF_INET, SOCK_DGRAM, 0);

	skew_option(IPPROTO_IP, IP_TOS, 4 << 2);	/* DSCP 4 more, ECN kept */
	ok_err(p3_tag_ex(u, 1, P3_METHOD_DSCP, 0), -P3_ETAGVERIFY,
	       "dscp read back as another value: P3_ETAGVERIFY");
	skew_option(SOL_SOCKET, SO_PRIORITY, 1);
	ok_err(p3_tag_ex(u, 1, P3_METHOD_PRIORITY, 0), -P3_ETAGVERIFY,
	       "priority read back as another value: P3_ETAGVERIFY");
	skew_option(0, 0, 0);
	ok(p3_tag_ex(u, 1, P3_METHOD_DSCP, 0) == 0 && p3_tag_ex(u, 1, P3_METHOD_PRIORITY, 0) == 0,
	   "read back as written: no error");
	close(u);
}

int main(void)
{
	test_dscp_codes();
	test_dscp_v4();
	test_ecn();
	test_wire();
	test_v6();
	test_sockopt_methods();
	test_unprivileged();
	test_misc();
	test_verify();
	return tap_done();
}
