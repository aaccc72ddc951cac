// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Which processes send untagged TCP through a device: for p3ctl doctor,
 * which names them and the p3ctl run command that would tag them.
 *
 * A sample is the TCP connections of this network namespace whose source
 * address is one of the device's and whose DSCP is no band's level, each
 * with the bytes it has had acknowledged (sock_diag: tcp_info and the
 * TOS or traffic class).  Two samples a few seconds apart give each
 * connection's bytes in between; /proc/PID/fd gives the connections'
 * processes.  Only DSCP tags are judged: sock_diag shows a socket's TOS
 * to anyone, its priority and mark not in every kernel.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>

#include "cli.h"
#include "p3.h"

#define MAX_ADDRS	256
#define NL_BUF		32768
#define DIAG_TIMEOUT_S	5
#define DSCP_LE		1	/* RFC 8622 Lower-Effort */
#define DSCP_CS1	8	/* RFC 4594 low-priority data */

struct conn {
	uint64_t	inode;
	uint64_t	acked;		/* tcpi_bytes_acked */
	int		claimed;	/* counted for a process already */
};

struct sender_sample {
	int		n, cap;
	struct conn	*c;
};

/* Every address of this namespace's interfaces, and whether it is dev's. */
struct local_addrs {
	int		n;
	int		family[MAX_ADDRS];
	int		on_dev[MAX_ADDRS];
	uint8_t		addr[MAX_ADDRS][16];
};

static int local_addrs_read(const char *dev, struct local_addrs *a)
{
	struct ifaddrs *ifa, *i;

	a->n = 0;
	if (getifaddrs(&ifa))
		return -errno;
	for (i = ifa; i && a->n < MAX_ADDRS; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET)
			memcpy(a->addr[a->n], &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
		else if (i->ifa_addr->sa_family == AF_INET6)
			memcpy(a->addr[a->n], &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
		else
			continue;
		a->on_dev[a->n] = !strcmp(i->ifa_name, dev);
		a->family[a->n++] = i->ifa_addr->sa_family;
	}
	freeifaddrs(ifa);
	return 0;
}

/* An address as its family and bytes; a v4-mapped IPv6 one is IPv4. */
static const uint8_t *unmap(const __be32 *addr, int *fam)
{
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };
	const uint8_t *b = (const uint8_t *)addr;

	if (*fam == AF_INET6 && !memcmp(b, mapped, sizeof(mapped))) {
		*fam = AF_INET;
		b += 12;
	}
	return b;
}

/* -1: not local; else whether the local address is dev's. */
static int local(const struct local_addrs *a, int fam, const uint8_t *b)
{
	static const uint8_t lo6[16] = { [15] = 1 };
	int i;

	if ((fam == AF_INET && b[0] == 127) || (fam == AF_INET6 && !memcmp(b, lo6, 16)))
		return 0;
	for (i = 0; i < a->n; i++)
		if (a->family[i] == fam && !memcmp(a->addr[i], b, fam == AF_INET ? 4 : 16))
			return a->on_dev[i];
	return -1;
}

/* From one of dev's addresses to a host that is not this one: a
 * connection to a local address goes over lo, whatever its source. */
static int through_dev(const struct local_addrs *a, const struct inet_diag_msg *m, int *v4)
{
	int sfam = m->idiag_family, dfam = m->idiag_family;
	const uint8_t *src = unmap(m->id.idiag_src, &sfam), *dst = unmap(m->id.idiag_dst, &dfam);

	*v4 = sfam == AF_INET;
	return local(a, sfam, src) == 1 && local(a, dfam, dst) < 0;
}

static int sample_add(struct sender_sample *s, uint64_t inode, uint64_t acked)
{
	struct conn *c;

	if (s->n == s->cap) {
		c = realloc(s->c, (size_t)(s->cap ? 2 * s->cap : 64) * sizeof(*c));
		if (!c)
			return -ENOMEM;
		s->c = c;
		s->cap = s->cap ? 2 * s->cap : 64;
	}
	s->c[s->n++] = (struct conn){ .inode = inode, .acked = acked };
	return 0;
}

/* One reply message: keep the connection if it is untagged and on dev. */
static int take(struct sender_sample *s, const struct local_addrs *a, unsigned int bands,
		const struct nlmsghdr *h)
{
	const struct inet_diag_msg *m = NLMSG_DATA(h);
	int len = (int)h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)), v4, tos = -1, tclass = -1;
	const struct rtattr *rta;
	uint64_t acked = 0;
	unsigned int dscp;
	int have_info = 0, ds, level;

	if (len < 0 || !m->idiag_inode || !through_dev(a, m, &v4))
		return 0;
	for (rta = (const struct rtattr *)(m + 1); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
		/* The attribute is 4-byte aligned: copy the u64 out. */
		if (rta->rta_type == INET_DIAG_INFO &&
		    RTA_PAYLOAD(rta) >= (int)offsetof(struct tcp_info, tcpi_bytes_received)) {
			memcpy(&acked, (const char *)RTA_DATA(rta) +
			       offsetof(struct tcp_info, tcpi_bytes_acked), sizeof(acked));
			have_info = 1;
		} else if (rta->rta_type == INET_DIAG_TOS && RTA_PAYLOAD(rta) >= 1) {
			tos = *(const uint8_t *)RTA_DATA(rta);
		} else if (rta->rta_type == INET_DIAG_TCLASS && RTA_PAYLOAD(rta) >= 1) {
			tclass = *(const uint8_t *)RTA_DATA(rta);
		}
	}
	/* The DS field the connection's packets leave with; none is 0. */
	ds = v4 ? tos : tclass;
	dscp = ds < 0 ? 0 : (unsigned int)ds >> 2;
	level = p3_dscp_level(dscp);
	/* A level's band, or below untagged traffic by the built-in map */
	if (!have_info || (level >= 0 && (unsigned int)level < bands) ||
	    dscp == DSCP_LE || dscp == DSCP_CS1)
		return 0;
	return sample_add(s, m->idiag_inode, acked);
}

static int dump_family(int fd, int family, struct sender_sample *s, const struct local_addrs *a,
		       unsigned int bands)
{
	struct {
		struct nlmsghdr		h;
		struct inet_diag_req_v2	r;
	} req = {
		.h = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
		.r = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP,
		       .idiag_states = 1u << 1 /* TCP_ESTABLISHED */ | 1u << 8 /* TCP_CLOSE_WAIT */,
		       .idiag_ext = 1u << (INET_DIAG_INFO - 1) | 1u << (INET_DIAG_TOS - 1) |
				    1u << (INET_DIAG_TCLASS - 1) },
	};
	static char buf[NL_BUF] __attribute__((aligned(NLMSG_ALIGNTO)));
	struct nlmsghdr *h;
	ssize_t n;
	int err;

	if (send(fd, &req, sizeof(req), 0) < 0)
		return -errno;
	for (;;) {
		n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0)
			return -errno;
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (int)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR)
				return h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct nlmsgerr)) ?
				       ((struct nlmsgerr *)NLMSG_DATA(h))->error : -EPROTO;
			err = take(s, a, bands, h);
			if (err)
				return err;
		}
	}
}

int senders_sample(const char *dev, unsigned int bands, struct sender_sample **out)
{
	struct timeval tv = { .tv_sec = DIAG_TIMEOUT_S };
	struct sender_sample *s = calloc(1, sizeof(*s));
	struct local_addrs a;
	int fd, err;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	err = local_addrs_read(dev, &a);
	fd = err ? -1 : socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (!err && fd < 0)
		err = -errno;
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		err = dump_family(fd, AF_INET, s, &a, bands);
		if (!err)
			err = dump_family(fd, AF_INET6, s, &a, bands);
		close(fd);
	}
	if (err) {
		senders_free(s);
		return err;
	}
	*out = s;
	return 0;
}

void senders_free(struct sender_sample *s)
{
	if (s)
		free(s->c);
	free(s);
}

static struct conn *find_conn(const struct sender_sample *s, uint64_t inode)
{
	int i;

	for (i = 0; i < s->n; i++)
		if (s->c[i].inode == inode)
			return &s->c[i];
	return NULL;
}

/* Append c to buf (len bytes, used so far); 0 when it did not fit. */
static int put(char *buf, size_t len, size_t *used, const char *c)
{
	size_t n = strlen(c);

	if (*used + n >= len)
		return 0;
	memcpy(buf + *used, c, n + 1);
	*used += n;
	return 1;
}

/* argv as a shell needs it typed: an argument with anything but safe
 * characters in single quotes, each ' in it as '\''.  Empty when the
 * process is gone or its command line does not fit whole: a command cut
 * short is no command to paste. */
static void read_cmdline(int pid, char *buf, size_t len)
{
	static const char safe[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				   "0123456789_./:=,@%+-";
	char path[64], raw[1024], *arg, one[2] = "";
	size_t used = 0;
	ssize_t n;
	int fd, ok = 1, quote;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd < 0 ? -1 : read(fd, raw, sizeof(raw));
	if (fd >= 0)
		close(fd);
	buf[0] = '\0';
	if (n <= 0 || n == (ssize_t)sizeof(raw) || raw[n - 1])
		return;
	for (arg = raw; ok && arg < raw + n; arg += strlen(arg) + 1) {
		quote = !*arg || arg[strspn(arg, safe)];
		ok = (!used || put(buf, len, &used, " ")) && (!quote || put(buf, len, &used, "'"));
		for (const char *c = arg; ok && *c; c++) {
			one[0] = *c;
			ok = put(buf, len, &used, *c == '\'' ? "'\\''" : one);
		}
		ok = ok && (!quote || put(buf, len, &used, "'"));
	}
	if (!ok)
		buf[0] = '\0';
}

static uid_t owner(int pid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", pid);
	return stat(path, &st) ? (uid_t)-1 : st.st_uid;
}

static struct untagged_job *job_of(struct untagged_job *jobs, int *njobs, int max, int pid)
{
	int i;

	for (i = 0; i < *njobs; i++)
		if (jobs[i].pid == pid)
			return &jobs[i];
	if (*njobs == max)
		return NULL;
	jobs[*njobs] = (struct untagged_job){ .pid = pid };
	return &jobs[(*njobs)++];
}

/* One process's descriptors: the sample's connections it holds. */
static void scan_fds(int pid, const struct sender_sample *a, struct sender_sample *b,
		     struct untagged_job *jobs, int *njobs, int max)
{
	char dir[64], path[320], link[64];
	const struct conn *ca;
	struct conn *cb;
	struct untagged_job *j;
	unsigned long long ino;
	struct dirent *e;
	ssize_t n;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	d = opendir(dir);
	if (!d)
		return;
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		/* A connection held by several processes (dup, fork) is
		 * counted once, for the first that holds it. */
		if (sscanf(link, "socket:[%llu]", &ino) != 1 || !(cb = find_conn(b, ino)) ||
		    cb->claimed)
			continue;
		cb->claimed = 1;
		ca = find_conn(a, ino);
		j = job_of(jobs, njobs, max, pid);
		if (!j)
			break;
		j->conns++;
		j->bytes += cb->acked - (ca && ca->acked <= cb->acked ? ca->acked : 0);
	}
	closedir(d);
}

static int cmp_bytes(const void *x, const void *y)
{
	const struct untagged_job *a = x, *b = y;

	return a->bytes < b->bytes ? 1 : a->bytes > b->bytes ? -1 : a->pid - b->pid;
}

int senders_jobs(const struct sender_sample *before, struct sender_sample *after,
		 uint64_t min_bytes, struct untagged_job *jobs, int max)
{
	struct untagged_job all[256];
	struct dirent *e;
	int n = 0, i, k = 0;
	char *end;
	long pid;
	DIR *d;

	if (!after->n)
		return 0;
	d = opendir("/proc");
	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		scan_fds((int)pid, before, after, all, &n, (int)(sizeof(all) / sizeof(all[0])));
	}
	closedir(d);
	/* The biggest senders first. */
	qsort(all, (size_t)n, sizeof(all[0]), cmp_bytes);
	for (i = 0; i < n && k < max; i++) {
		if (all[i].bytes < min_bytes)
			break;
		jobs[k] = all[i];
		jobs[k].uid = owner(jobs[k].pid);
		read_cmdline(jobs[k].pid, jobs[k].cmdline, sizeof(jobs[k].cmdline));
		k++;
	}
	return k;
}
