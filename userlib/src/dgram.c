// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Loss-tolerant delivery over UDP (p3.h, "datagrams"): the sender cuts a
 * tensor range into chunk-sized frames, one per datagram, on a socket
 * tagged with the level; the receiver reads them into dgram_rx.c's
 * reassembly and completes tensors when whole or at their deadline.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "dgram.h"

/* The largest UDP payload over IPv4, less the frame header. */
#define DGRAM_MAX_CHUNK		(65507 - P3_FRAME_HDR_LEN)
/* 1500-byte MTU less IPv6 (40), UDP (8) and frame (40) headers, rounded
 * down to a multiple of 8 so that chunks hold whole fp64 values too. */
#define DGRAM_DEFAULT_CHUNK	1408
#define DGRAM_BATCH		64	/* datagrams per recvmmsg() */
/* With UDP GRO a read may be one coalesced UDP payload, up to 64 KiB. */
#define DGRAM_GRO_BATCH		16
#define DGRAM_GRO_SLOT		65536

#ifndef UDP_SEGMENT
#define UDP_SEGMENT		103	/* linux/udp.h, Linux 4.18 */
#endif
#ifndef UDP_GRO
#define UDP_GRO			104	/* linux/udp.h, Linux 5.0 */
#endif
/* Segments per UDP GSO send: the kernel's cap on 6.1 (UDP_MAX_SEGMENTS;
 * 6.12 allows 128), and what fits in one IPv4 UDP payload. */
#ifndef DGRAM_GSO_MAX_SEGS	/* bench/chan/dgram.sh builds one copy with 1 */
#define DGRAM_GSO_MAX_SEGS	64
#endif
#define DGRAM_GSO_MAX_BYTES	65507

struct p3_dgram {
	struct p3_dgram_opts	o;
	struct p3_dgram_stats	st;
	/* Sender: one socket per level, -1 until first used, and how many
	 * datagrams one send of it carries (1: no UDP GSO). */
	int			fd[P3_MAX_BANDS];
	unsigned int		segs[P3_MAX_BANDS];
	struct sockaddr_storage	peer;
	socklen_t		peer_len;
	/* Receiver. */
	int			rx_fd;
	struct p3_dgram_rx	*rx;
	uint8_t			*rbuf;		/* batch reads of slot bytes */
	size_t			slot;
	unsigned int		batch;
};

P3_EXPORT void p3_dgram_opts_init(struct p3_dgram_opts *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->bands = 8;
	o->tag_method = P3_METHOD_DEFAULT;
	o->chunk = DGRAM_DEFAULT_CHUNK;
	o->buf_bytes = 4 << 20;
	o->early_bytes = 8 << 20;
}

static int opts_read(struct p3_dgram_opts *o, const struct p3_dgram_opts *in)
{
	int err;

	p3_dgram_opts_init(o);
	if (in) {
		err = p3_struct_in(o, sizeof(*o), P3_DGRAM_OPTS_SIZE_1, in);
		if (err)
			return err;
	}
	if (!o->bands || o->bands > P3_MAX_BANDS || !o->chunk || o->chunk > DGRAM_MAX_CHUNK ||
	    o->buf_bytes < 0 || o->tag_method < P3_METHOD_DEFAULT ||
	    o->tag_method > P3_METHOD_MARK)
		return -EINVAL;
	return 0;
}

static struct p3_dgram *dgram_new(const struct p3_dgram_opts *o)
{
	struct p3_dgram *d = calloc(1, sizeof(*d));
	unsigned int i;

	if (!d)
		return NULL;
	d->o = *o;
	d->rx_fd = -1;
	for (i = 0; i < P3_MAX_BANDS; i++)
		d->fd[i] = -1;
	return d;
}

P3_EXPORT void p3_dgram_close(struct p3_dgram *d)
{
	unsigned int i;

	if (!d)
		return;
	for (i = 0; i < P3_MAX_BANDS; i++)
		if (d->fd[i] >= 0)
			close(d->fd[i]);
	if (d->rx_fd >= 0)
		close(d->rx_fd);
	p3_dgram_rx_free(d->rx);
	free(d->rbuf);
	free(d);
}

/* ---------------------------------------------------------------- sender */

P3_EXPORT int p3_dgram_connect(const char *host, const char *port,
			       const struct p3_dgram_opts *opts, struct p3_dgram **out)
{
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM }, *res;
	struct p3_dgram_opts o;
	struct p3_dgram *d;
	int err;

	if (!out || !host || !port)
		return -EINVAL;
	*out = NULL;
	err = opts_read(&o, opts);
	if (err)
		return err;
	err = getaddrinfo(host, port, &hints, &res);
	if (err)
		return err == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	d = dgram_new(&o);
	if (!d) {
		freeaddrinfo(res);
		return -ENOMEM;
	}
	memcpy(&d->peer, res->ai_addr, res->ai_addrlen);
	d->peer_len = res->ai_addrlen;
	freeaddrinfo(res);
	*out = d;
	return 0;
}

/* P3_DGRAM_GSO=0 in the environment: one datagram a send, for a NIC or
 * tunnel that mishandles UDP GSO without refusing it, and for tests that
 * tell datagrams from TCP by their size in the qdisc. */
static int gso_disabled(void)
{
	const char *v = getenv("P3_DGRAM_GSO");

	return v && !strcmp(v, "0");
}

/*
 * How many datagrams one send on fd carries, as one UDP GSO packet: it
 * crosses the stack and the qdisc once, not once per datagram, which is
 * most of what a datagram costs (the wire still sees datagrams).  As many
 * as the kernel's limits allow and half the send buffer holds, so that
 * one packet waits in the qdisc while the next is built.  1 (no GSO) if
 * the kernel has no UDP_SEGMENT.
 */
static unsigned int gso_segments(int fd, uint32_t seg)
{
	int sndbuf = 0, size = (int)seg;
	socklen_t len = sizeof(sndbuf);
	unsigned int n;

	if (gso_disabled() ||
	    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) < 0 || sndbuf <= 0)
		return 1;
	n = (unsigned int)sndbuf / 2 / seg;
	if (n > DGRAM_GSO_MAX_BYTES / seg)
		n = DGRAM_GSO_MAX_BYTES / seg;
	if (n > DGRAM_GSO_MAX_SEGS)
		n = DGRAM_GSO_MAX_SEGS;
	if (n < 2 || setsockopt(fd, SOL_UDP, UDP_SEGMENT, &size, sizeof(size)) < 0)
		return 1;
	return n;
}

/* The level's socket, opened, connected and tagged on first use. */
static int level_socket(struct p3_dgram *d, unsigned int level)
{
	int fd, err;

	if (d->fd[level] >= 0)
		return d->fd[level];
	fd = socket(d->peer.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (d->o.buf_bytes)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &d->o.buf_bytes, sizeof(d->o.buf_bytes));
	if (connect(fd, (struct sockaddr *)&d->peer, d->peer_len) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	err = p3_tag_ex(fd, level, d->o.tag_method, 0);
	if (err) {
		close(fd);
		return err;
	}
	d->segs[level] = gso_segments(fd, d->o.chunk + P3_FRAME_HDR_LEN);
	d->fd[level] = fd;
	return fd;
}

/* The level's sends go one datagram each from now on: its route cannot
 * take UDP GSO (no checksum offload, or a path MTU below a frame). */
static void gso_off(struct p3_dgram *d, unsigned int level)
{
	int zero = 0;

	setsockopt(d->fd[level], SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero));
	d->segs[level] = 1;
}

/* Waits for room in fd's send buffer until the monotonic deadline (0:
 * none); -EAGAIN once it has passed. */
static int wait_writable(int fd, uint64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	uint64_t now;
	int ms;

	for (;;) {
		ms = -1;
		if (deadline) {
			now = p3_now_ns();
			if (now >= deadline)
				return -EAGAIN;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
		ms = poll(&p, 1, ms);
		if (ms > 0)
			return 0;
		if (ms < 0 && errno != EINTR)
			return -errno;
	}
}

/* Frames for one send: header and payload of each, in order. */
struct dgram_batch {
	struct iovec	iov[2 * DGRAM_GSO_MAX_SEGS];
	uint8_t		hdr[DGRAM_GSO_MAX_SEGS][P3_FRAME_HDR_LEN];
	unsigned int	frames;
	uint64_t	bytes;		/* payload */
};

/* Up to max frames of data's [done, length), f's offset relative to its
 * first byte. */
static int batch_build(struct dgram_batch *b, struct p3_frame *f, uint64_t offset,
		       const uint8_t *data, uint64_t done, uint64_t length, uint32_t chunk,
		       unsigned int max)
{
	int err;

	b->frames = 0;
	b->bytes = 0;
	while (b->frames < max && done + b->bytes < length) {
		struct iovec *iov = &b->iov[2 * b->frames];
		uint64_t at = done + b->bytes;

		f->offset = offset + at;
		f->length = (uint32_t)(length - at < chunk ? length - at : chunk);
		iov[0].iov_base = b->hdr[b->frames];
		iov[0].iov_len = P3_FRAME_HDR_LEN;
		iov[1].iov_base = (uint8_t *)data + at;
		iov[1].iov_len = f->length;
		err = p3_frame_header(iov[0].iov_base, f, iov[1].iov_base);
		if (err)
			return err;
		b->bytes += f->length;
		b->frames++;
	}
	return 0;
}

/* Sends a batch, its frames one datagram each on the wire; a drop by the
 * local qdisc (ENOBUFS) is a loss. */
static int batch_send(struct p3_dgram *d, int fd, const struct dgram_batch *b,
		      uint64_t deadline)
{
	struct msghdr m = { .msg_iov = (struct iovec *)b->iov, .msg_iovlen = 2 * b->frames };
	int err;

	for (;;) {
		if (sendmsg(fd, &m, MSG_NOSIGNAL) >= 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno == ENOBUFS) {
			d->st.dropped_local += b->frames;
			break;
		}
		if (errno != EAGAIN)
			return -errno;
		err = wait_writable(fd, deadline);
		if (err)
			return err;
	}
	d->st.sent += b->frames;
	return 0;
}

P3_EXPORT int p3_dgram_send(struct p3_dgram *d, unsigned int level, uint64_t iter,
			    uint32_t tensor, uint64_t offset, const void *data, uint64_t length,
			    int timeout_ms)
{
	struct p3_frame f = { .type = P3_FRAME_DATA, .tensor = tensor, .iter = iter };
	struct dgram_batch b;
	uint64_t deadline = 0, done;
	int fd, err, n = 0;

	if (!d || d->rx || (length && !data) || offset % d->o.chunk ||
	    offset > UINT64_MAX - length)
		return -EINVAL;
	if (level >= d->o.bands)
		return -P3_ELEVEL;
	if (length / d->o.chunk > INT32_MAX - 1)
		return -E2BIG;
	if (!length)
		return 0;
	fd = level_socket(d, level);
	if (fd < 0)
		return fd;
	if (timeout_ms >= 0)
		deadline = p3_now_ns() + (uint64_t)timeout_ms * 1000000 + 1;
	f.level = (uint8_t)level;
	for (done = 0; done < length; done += b.bytes) {
		err = batch_build(&b, &f, offset, data, done, length, d->o.chunk,
				  d->segs[level]);
		if (err)
			return err;
		err = batch_send(d, fd, &b, deadline);
		/* The kernel refuses GSO at send time on such a route
		 * (EIO; a segment above the path MTU: EINVAL on older
		 * kernels, EMSGSIZE on newer): send this batch and the rest
		 * singly. */
		if ((err == -EIO || err == -EINVAL || err == -EMSGSIZE) && d->segs[level] > 1) {
			gso_off(d, level);
			b.bytes = 0;
			continue;
		}
		if (err)
			return err;
		n += (int)b.frames;
	}
	return n;
}

/* -------------------------------------------------------------- receiver */

static int bind_socket(const struct addrinfo *ai, int buf_bytes)
{
	int fd, err;

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    ai->ai_protocol);
	if (fd < 0)
		return -errno;
	/* A burst of gradient datagrams must not overflow a small default
	 * buffer; FORCE needs CAP_NET_ADMIN and goes past rmem_max. */
	if (buf_bytes &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf_bytes, sizeof(buf_bytes)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf_bytes, sizeof(buf_bytes));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/*
 * How the receiver reads: with UDP GRO where the kernel has it, so that a
 * sender's UDP GSO packet reaches the socket whole instead of cut into a
 * datagram each (one copy and one read for up to 45 frames); else a
 * datagram a slot, each slot one byte longer than a frame can be, so that
 * an oversized datagram is seen whole as too long rather than cut to fit.
 */
static void rx_buffers(struct p3_dgram *d)
{
	int one = 1;

	if (setsockopt(d->rx_fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0) {
		d->slot = DGRAM_GRO_SLOT;
		d->batch = DGRAM_GRO_BATCH;
	} else {
		d->slot = d->o.chunk + P3_FRAME_HDR_LEN + 1;
		d->batch = DGRAM_BATCH;
	}
}

P3_EXPORT int p3_dgram_bind(const char *host, const char *port,
			    const struct p3_dgram_opts *opts, struct p3_dgram **out)
{
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM, .ai_flags = AI_PASSIVE }, *res, *ai;
	struct p3_dgram_opts o;
	struct p3_dgram *d;
	int fd = -EADDRNOTAVAIL, err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	err = opts_read(&o, opts);
	if (err)
		return err;
	err = getaddrinfo(host, port ? port : "0", &hints, &res);
	if (err)
		return err == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = bind_socket(ai, o.buf_bytes);
		if (fd >= 0)
			break;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return fd;
	d = dgram_new(&o);
	if (d) {
		d->rx_fd = fd;
		d->rx = p3_dgram_rx_new(o.bands, o.chunk, o.early_bytes, &d->st);
		rx_buffers(d);
		d->rbuf = malloc((size_t)d->batch * d->slot);
	}
	if (!d || !d->rx || !d->rbuf) {
		if (d)
			p3_dgram_close(d);
		else
			close(fd);
		return -ENOMEM;
	}
	*out = d;
	return 0;
}

P3_EXPORT int p3_dgram_port(const struct p3_dgram *d)
{
	struct sockaddr_storage a;
	socklen_t len = sizeof(a);

	if (!d || d->rx_fd < 0)
		return -EINVAL;
	if (getsockname(d->rx_fd, (struct sockaddr *)&a, &len) < 0)
		return -errno;
	if (a.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
	return ntohs(((struct sockaddr_in *)&a)->sin_port);
}

P3_EXPORT int p3_dgram_fd(const struct p3_dgram *d)
{
	return d && d->rx_fd >= 0 ? d->rx_fd : -EINVAL;
}

P3_EXPORT int p3_dgram_expect(struct p3_dgram *d, uint32_t tensor, void *buf, uint64_t size,
			      uint64_t iter, uint64_t deadline_ns)
{
	if (!d || !d->rx)
		return -EINVAL;
	return p3_dgram_rx_expect(d->rx, tensor, buf, size, iter, deadline_ns, p3_now_ns());
}

P3_EXPORT int p3_dgram_finish(struct p3_dgram *d, uint32_t tensor, uint64_t after_ns)
{
	if (!d || !d->rx)
		return -EINVAL;
	return p3_dgram_rx_finish(d->rx, tensor, after_ns, p3_now_ns());
}

/* The segment size of a read the kernel coalesced (UDP GRO), else 0. */
static size_t gro_segment(struct msghdr *m)
{
	struct cmsghdr *c;
	int size;

	for (c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
		    c->cmsg_len >= CMSG_LEN(sizeof(int))) {
			memcpy(&size, CMSG_DATA(c), sizeof(size));
			return size > 0 ? (size_t)size : 0;
		}
	return 0;
}

/* Reads what the socket holds now, a batch at a time. */
static int drain(struct p3_dgram *d)
{
	union {
		char		buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr	align;
	} ctl[DGRAM_BATCH];
	struct mmsghdr msgs[DGRAM_BATCH];
	struct iovec iov[DGRAM_BATCH];
	unsigned int i;
	int n;

	for (;;) {
		for (i = 0; i < d->batch; i++) {
			iov[i].iov_base = d->rbuf + (size_t)i * d->slot;
			iov[i].iov_len = d->slot;
			memset(&msgs[i].msg_hdr, 0, sizeof(msgs[i].msg_hdr));
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
			msgs[i].msg_hdr.msg_control = ctl[i].buf;
			msgs[i].msg_hdr.msg_controllen = sizeof(ctl[i].buf);
		}
		n = recvmmsg(d->rx_fd, msgs, d->batch, MSG_DONTWAIT, NULL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		for (i = 0; i < (unsigned int)n; i++) {
			if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
				d->st.bad++;
				continue;
			}
			p3_dgram_rx_input_run(d->rx, iov[i].iov_base, msgs[i].msg_len,
					      gro_segment(&msgs[i].msg_hdr), p3_now_ns());
		}
		if ((unsigned int)n < d->batch)
			return 0;
	}
}

P3_EXPORT int p3_dgram_poll(struct p3_dgram *d, int timeout_ms)
{
	struct pollfd p;
	uint64_t end = 0, now, next;
	int err, ms;

	if (!d || !d->rx)
		return -EINVAL;
	p.fd = d->rx_fd;
	p.events = POLLIN;
	if (timeout_ms >= 0)
		end = p3_now_ns() + (uint64_t)timeout_ms * 1000000;
	for (;;) {
		err = drain(d);
		if (err)
			return err;
		now = p3_now_ns();
		next = p3_dgram_rx_expire(d->rx, now);
		if (p3_dgram_rx_ready(d->rx))
			return (int)(p3_dgram_rx_ready(d->rx) > INT32_MAX ? INT32_MAX
								      : p3_dgram_rx_ready(d->rx));
		if (end && now >= end)
			return 0;
		/* Sleep until a datagram, the next deadline or the end. */
		if (end && (!next || end < next))
			next = end;
		ms = next ? (int)((next - now + 999999) / 1000000) : -1;
		if (poll(&p, 1, ms) < 0 && errno != EINTR)
			return -errno;
	}
}

P3_EXPORT int p3_dgram_next(struct p3_dgram *d, struct p3_dgram_completion *out)
{
	if (!d || !d->rx || !out)
		return -EINVAL;
	return p3_dgram_rx_next(d->rx, out);
}

P3_EXPORT int p3_dgram_missing(const struct p3_dgram *d, uint32_t tensor, struct p3_range *r,
			       size_t n)
{
	if (!d || !d->rx || (n && !r))
		return -EINVAL;
	return p3_dgram_rx_missing(d->rx, tensor, r, n);
}

P3_EXPORT void p3_dgram_stats(const struct p3_dgram *d, struct p3_dgram_stats *out)
{
	if (d && out)
		*out = d->st;
}
