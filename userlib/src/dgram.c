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

struct p3_dgram {
	struct p3_dgram_opts	o;
	struct p3_dgram_stats	st;
	/* Sender: one socket per level, -1 until first used. */
	int			fd[P3_MAX_BANDS];
	struct sockaddr_storage	peer;
	socklen_t		peer_len;
	/* Receiver. */
	int			rx_fd;
	struct p3_dgram_rx	*rx;
	uint8_t			*rbuf;		/* DGRAM_BATCH datagrams */
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
	d->fd[level] = fd;
	return fd;
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

/* Sends one datagram; a drop by the local qdisc (ENOBUFS) is a loss. */
static int send_one(struct p3_dgram *d, int fd, struct iovec *iov, uint64_t deadline)
{
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
	int err;

	for (;;) {
		if (sendmsg(fd, &m, MSG_NOSIGNAL) >= 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno == ENOBUFS) {
			d->st.dropped_local++;
			break;
		}
		if (errno != EAGAIN)
			return -errno;
		err = wait_writable(fd, deadline);
		if (err)
			return err;
	}
	d->st.sent++;
	return 0;
}

P3_EXPORT int p3_dgram_send(struct p3_dgram *d, unsigned int level, uint64_t iter,
			    uint32_t tensor, uint64_t offset, const void *data, uint64_t length,
			    int timeout_ms)
{
	struct p3_frame f = { .type = P3_FRAME_DATA, .tensor = tensor, .iter = iter };
	uint8_t hdr[P3_FRAME_HDR_LEN];
	struct iovec iov[2] = { { hdr, sizeof(hdr) } };
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
	for (done = 0; done < length; done += f.length) {
		f.offset = offset + done;
		f.length = (uint32_t)(length - done < d->o.chunk ? length - done : d->o.chunk);
		iov[1].iov_base = (uint8_t *)data + done;
		iov[1].iov_len = f.length;
		err = p3_frame_header(hdr, &f, iov[1].iov_base);
		if (!err)
			err = send_one(d, fd, iov, deadline);
		if (err)
			return err;
		n++;
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
		d->rbuf = malloc((size_t)DGRAM_BATCH * (o.chunk + P3_FRAME_HDR_LEN + 1));
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

/* Reads what the socket holds now, a batch at a time; each datagram one
 * byte longer than a frame can be, so that an oversized one is seen
 * whole as too long rather than cut to fit. */
static int drain(struct p3_dgram *d)
{
	size_t slot = d->o.chunk + P3_FRAME_HDR_LEN + 1;
	struct mmsghdr msgs[DGRAM_BATCH];
	struct iovec iov[DGRAM_BATCH];
	int i, n;

	for (;;) {
		for (i = 0; i < DGRAM_BATCH; i++) {
			iov[i].iov_base = d->rbuf + (size_t)i * slot;
			iov[i].iov_len = slot;
			memset(&msgs[i].msg_hdr, 0, sizeof(msgs[i].msg_hdr));
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
		}
		n = recvmmsg(d->rx_fd, msgs, DGRAM_BATCH, MSG_DONTWAIT, NULL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		for (i = 0; i < n; i++) {
			if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
				d->st.bad++;
				continue;
			}
			p3_dgram_rx_input(d->rx, iov[i].iov_base, msgs[i].msg_len, p3_now_ns());
		}
		if (n < DGRAM_BATCH)
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
