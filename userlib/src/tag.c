// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Socket tagging.  The qdisc reads a socket's level from one of three
 * places: as tag = level + 1 from SO_PRIORITY or SO_MARK (tag 0 stays free
 * to mean "untagged"), or as a DSCP code point that has no standard
 * meaning (p3_level_dscp()).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/socket.h>

#include "internal.h"

#define DSCP_POOL2	16	/* code points xxxx11 */
#define DSCP_MAX_LEVEL	30	/* then the 15 of xxxx01 without Lower-Effort */
#define ECN_MASK	0x03

static int p3_global_method;	/* 0 until first resolved */
static int p3_global_lowat = P3_DEFAULT_NOTSENT_LOWAT;

P3_EXPORT int p3_tag_method_parse(const char *name)
{
	if (!name)
		return -EINVAL;
	if (!strcasecmp(name, "dscp") || !strcasecmp(name, "tos"))
		return P3_METHOD_DSCP;
	if (!strcasecmp(name, "priority") || !strcasecmp(name, "prio"))
		return P3_METHOD_PRIORITY;
	if (!strcasecmp(name, "mark"))
		return P3_METHOD_MARK;
	if (!strcasecmp(name, "default"))
		return P3_METHOD_DEFAULT;
	return -EINVAL;
}

P3_EXPORT const char *p3_tag_method_name(int method)
{
	switch (p3_tag_resolve(method)) {
	case P3_METHOD_DSCP:
		return "dscp";
	case P3_METHOD_PRIORITY:
		return "priority";
	case P3_METHOD_MARK:
		return "mark";
	}
	return "invalid";
}

int p3_tag_resolve(int method)
{
	int m;

	if (method != P3_METHOD_DEFAULT)
		return method;
	m = __atomic_load_n(&p3_global_method, __ATOMIC_RELAXED);
	if (m)
		return m;
	/* An operator may switch every unmodified program at once. */
	m = p3_tag_method_parse(getenv("P3_TAG_METHOD"));
	if (m <= P3_METHOD_DEFAULT)
		m = P3_METHOD_DSCP;
	__atomic_store_n(&p3_global_method, m, __ATOMIC_RELAXED);
	return m;
}

P3_EXPORT int p3_tag_config(int method, int notsent_lowat)
{
	if (method < P3_METHOD_DSCP || method > P3_METHOD_MARK || notsent_lowat < 0)
		return -EINVAL;
	__atomic_store_n(&p3_global_method, method, __ATOMIC_RELAXED);
	__atomic_store_n(&p3_global_lowat, notsent_lowat, __ATOMIC_RELAXED);
	return 0;
}

static int sock_getint(int fd, int lvl, int name, int *val)
{
	socklen_t len = sizeof(*val);

	*val = 0;
	if (getsockopt(fd, lvl, name, val, &len) < 0)
		return -errno;
	return 0;
}

static int sock_setint(int fd, int lvl, int name, int val)
{
	if (setsockopt(fd, lvl, name, &val, sizeof(val)) < 0)
		return -errno;
	return 0;
}

static int sock_family(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int family, err;

	err = sock_getint(fd, SOL_SOCKET, SO_DOMAIN, &family);
	if (!err)
		return family;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	return ss.ss_family;
}

/* Dual-stack IPv6 sockets may carry IPv4 (v4-mapped) traffic. */
static int sock_dual_stack(int fd)
{
	int v6only;

	if (sock_getint(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only))
		return 0;
	return !v6only;
}

/* Rewrite the DSCP bits of IP_TOS or IPV6_TCLASS, keeping ECN. */
static int set_dscp(int fd, int lvl, int name, unsigned int tag)
{
	int old, val, err;

	err = sock_getint(fd, lvl, name, &old);
	if (err)
		return err;
	if (old < 0)	/* IPV6_TCLASS reads -1 for "kernel default" on old kernels */
		old = 0;
	err = sock_setint(fd, lvl, name, (int)(tag << 2) | (old & ECN_MASK));
	if (err)
		return err;
	err = sock_getint(fd, lvl, name, &val);
	if (err)
		return err;
	return ((unsigned int)val >> 2 & 0x3f) == tag ? 0 : -P3_ETAGVERIFY;
}

/*
 * Level L is the L-th code point of RFC 2474's pool xxxx11 (experimental
 * or local use), then of pool xxxx01 without RFC 8622's Lower-Effort
 * (000001): no level takes a code point RFC 4594 gives a meaning, and the
 * qdisc's built-in DSCP map reads each back as its level.
 */
P3_EXPORT int p3_level_dscp(unsigned int level)
{
	if (level > DSCP_MAX_LEVEL)
		return -P3_EDSCPRANGE;
	if (level < DSCP_POOL2)
		return (int)(level << 2 | 3);
	return (int)((level - DSCP_POOL2 + 1) << 2 | 1);
}

P3_EXPORT int p3_dscp_level(unsigned int dscp)
{
	if (dscp > 63 || dscp == 1)
		return -ENOENT;
	if ((dscp & 3) == 3)
		return (int)(dscp >> 2);
	if ((dscp & 3) == 1)
		return (int)(DSCP_POOL2 - 1 + (dscp >> 2));
	return -ENOENT;
}

static int tag_dscp(int fd, unsigned int level)
{
	int family = sock_family(fd), dscp = p3_level_dscp(level), err;

	if (dscp < 0)
		return dscp;
	if (family == AF_INET)
		return set_dscp(fd, IPPROTO_IP, IP_TOS, (unsigned int)dscp);
	if (family != AF_INET6)
		return family < 0 ? family : -EAFNOSUPPORT;
	err = set_dscp(fd, IPPROTO_IPV6, IPV6_TCLASS, (unsigned int)dscp);
	if (!err && sock_dual_stack(fd))
		err = set_dscp(fd, IPPROTO_IP, IP_TOS, (unsigned int)dscp);
	return err;
}

/* Set and read back a SOL_SOCKET tag; EPERM means a missing capability. */
static int tag_sockopt(int fd, int name, unsigned int tag, int eperm)
{
	int val, err;

	err = sock_setint(fd, SOL_SOCKET, name, (int)tag);
	if (err == -EPERM || err == -EACCES)
		return -eperm;
	if (err)
		return err;
	err = sock_getint(fd, SOL_SOCKET, name, &val);
	if (err)
		return err;
	return (unsigned int)val == tag ? 0 : -P3_ETAGVERIFY;
}

static int sock_is_tcp(int fd)
{
	int type, proto;

	if (sock_getint(fd, SOL_SOCKET, SO_TYPE, &type) || type != SOCK_STREAM)
		return 0;
	if (sock_getint(fd, SOL_SOCKET, SO_PROTOCOL, &proto))
		return 0;
	return proto == IPPROTO_TCP;
}

/* Bytes not yet sent sit in the socket where the qdisc cannot reorder
 * them; a low watermark keeps them in libp3's priority queue instead. */
static int set_lowat(int fd, int lowat)
{
	if (lowat < 0)
		lowat = __atomic_load_n(&p3_global_lowat, __ATOMIC_RELAXED);
	if (!lowat || !sock_is_tcp(fd))
		return 0;
	return sock_setint(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, lowat);
}

P3_EXPORT int p3_tag_ex(int fd, unsigned int level, int method, int notsent_lowat)
{
	int err;

	if (fd < 0)
		return -EBADF;
	if (level >= P3_MAX_BANDS)
		return -P3_ELEVEL;
	switch (p3_tag_resolve(method)) {
	case P3_METHOD_DSCP:
		err = tag_dscp(fd, level);
		break;
	case P3_METHOD_PRIORITY:
		err = tag_sockopt(fd, SO_PRIORITY, level + 1, P3_ENEEDCAP_PRIO);
		break;
	case P3_METHOD_MARK:
		err = tag_sockopt(fd, SO_MARK, level + 1, P3_ENEEDCAP_MARK);
		break;
	default:
		return -EINVAL;
	}
	if (err)
		return err;
	return set_lowat(fd, notsent_lowat);
}

P3_EXPORT int p3_tag(int fd, unsigned int level)
{
	return p3_tag_ex(fd, level, P3_METHOD_DEFAULT, -1);
}

/* The tag as tag_sockopt() writes it: level + 1, 0 if untagged. */
static int tag_read(int fd, int method, unsigned int *tag)
{
	int family, val, err, level;

	switch (p3_tag_resolve(method)) {
	case P3_METHOD_DSCP:
		family = sock_family(fd);
		if (family == AF_INET)
			err = sock_getint(fd, IPPROTO_IP, IP_TOS, &val);
		else if (family == AF_INET6)
			err = sock_getint(fd, IPPROTO_IPV6, IPV6_TCLASS, &val);
		else
			return family < 0 ? family : -EAFNOSUPPORT;
		level = p3_dscp_level(val < 0 ? 0 : (unsigned int)val >> 2 & 0x3f);
		*tag = level < 0 ? 0 : (unsigned int)level + 1;
		return err;
	case P3_METHOD_PRIORITY:
		err = sock_getint(fd, SOL_SOCKET, SO_PRIORITY, &val);
		break;
	case P3_METHOD_MARK:
		err = sock_getint(fd, SOL_SOCKET, SO_MARK, &val);
		break;
	default:
		return -EINVAL;
	}
	*tag = (unsigned int)val;
	return err;
}

P3_EXPORT int p3_tag_get(int fd, int method)
{
	unsigned int tag;
	int err;

	if (fd < 0)
		return -EBADF;
	err = tag_read(fd, method, &tag);
	if (err)
		return err;
	if (!tag || tag > P3_MAX_BANDS)
		return -ENOENT;
	return (int)tag - 1;
}
