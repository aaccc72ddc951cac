// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The listener: connections arrive one per band, in any order, each
 * opening with a hello that names its channel and band.  Once every band
 * of a channel is in, they become one receiving p3_chan.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chan.h"

#define HELLO_WIRE	(P3_FRAME_HDR_LEN + P3_HELLO_LEN)
#define MAX_PENDING	128	/* connections that have not said hello */
#define MAX_GROUPS	32	/* channels with some bands still missing */
#define FD_PAUSE_MS	100	/* out of descriptors: stop accepting this long */

struct pending {
	int		fd;
	size_t		have;
	uint64_t	since;
	uint8_t		buf[HELLO_WIRE];
};

struct group {
	uint64_t	cookie;		/* the sender's: one channel */
	uint64_t	id;		/* its label */
	unsigned int	bands;
	uint64_t	since;
	uint64_t	seen;		/* bit b: band b has said hello */
	uint8_t		proto;		/* every band's hello names the same */
	int		fd[P3_MAX_BANDS];
};

struct p3_listener {
	int		fd;
	uint32_t	max_payload;
	int		timeout_ms;	/* for a hello, and for a whole channel */
	int		progress;	/* channels get a progress thread */
	int		peer_timeout_ms;
	int		tag_method;	/* the accepted sockets' ACKs travel in their band */
	uint64_t	level_stride;	/* band b's level is b * level_stride, as the sender's */
	struct pending	pend[MAX_PENDING];
	unsigned int	npend;
	struct group	grp[MAX_GROUPS];
	unsigned int	ngrp;
	uint64_t	paused_until;	/* accept() ran out of descriptors */
};

static int listen_socket(const struct addrinfo *ai)
{
	int fd, one = 1;

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    ai->ai_protocol);
	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 256) < 0) {
		one = -errno;
		close(fd);
		return one;
	}
	return fd;
}

P3_EXPORT int p3_listen(const char *host, const char *port, const struct p3_chan_opts *opts,
			struct p3_listener **out)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *res, *ai;
	struct p3_chan_opts o;
	struct p3_listener *l;
	int fd = -EADDRNOTAVAIL, err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	err = chan_opts_read(&o, opts);
	if (err)
		return err;
	if (o.max_payload > INT32_MAX - P3_FRAME_HDR_LEN)
		return -EINVAL;
	if (chan_band_level(1, o.level_stride) < 0)
		return -P3_ELEVEL;
	err = getaddrinfo(host, port ? port : "0", &hints, &res);
	if (err)
		return err == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = listen_socket(ai);
		if (fd >= 0)
			break;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return fd;
	l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		return -ENOMEM;
	}
	l->fd = fd;
	l->max_payload = o.max_payload ? o.max_payload : P3_DEFAULT_MAX_PAYLOAD;
	l->timeout_ms = o.timeout_ms ? o.timeout_ms : CHAN_DEFAULT_TIMEOUT_MS;	/* < 0: never */
	l->progress = o.progress;
	l->peer_timeout_ms = o.peer_timeout_ms;
	l->tag_method = o.tag_method;
	l->level_stride = o.level_stride;
	*out = l;
	return 0;
}

P3_EXPORT int p3_listener_port(const struct p3_listener *l)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (!l)
		return -EINVAL;
	if (getsockname(l->fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -EAFNOSUPPORT;
}

P3_EXPORT int p3_listener_fd(const struct p3_listener *l)
{
	return l ? l->fd : -EINVAL;
}

static void pend_drop(struct p3_listener *l, unsigned int i)
{
	close(l->pend[i].fd);
	l->pend[i] = l->pend[--l->npend];
}

static void group_drop(struct p3_listener *l, unsigned int i, int close_fds)
{
	unsigned int b;

	for (b = 0; close_fds && b < l->grp[i].bands; b++)
		if (l->grp[i].seen & (1ull << b))
			close(l->grp[i].fd[b]);
	l->grp[i] = l->grp[--l->ngrp];
}

/* Forget what has waited too long: a silent or half-open peer must not
 * hold a slot for ever. */
static void listener_expire(struct p3_listener *l)
{
	uint64_t limit = (uint64_t)l->timeout_ms * 1000000u, now = p3_now_ns();
	unsigned int i;

	/* Never: the oldest still makes room when the tables are full. */
	if (l->timeout_ms < 0)
		return;

	for (i = l->npend; i-- > 0;)
		if (now - l->pend[i].since > limit)
			pend_drop(l, i);
	for (i = l->ngrp; i-- > 0;)
		if (now - l->grp[i].since > limit)
			group_drop(l, i, 1);
}

static void listener_accept(struct p3_listener *l)
{
	unsigned int i, oldest;
	int fd;

	while ((fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0 ||
	       errno == ECONNABORTED) {
		if (fd < 0)
			continue;	/* gone before we took it */
		if (l->npend == MAX_PENDING) {
			for (oldest = 0, i = 1; i < l->npend; i++)
				if (l->pend[i].since < l->pend[oldest].since)
					oldest = i;
			pend_drop(l, oldest);
		}
		l->pend[l->npend++] = (struct pending){ .fd = fd, .since = p3_now_ns() };
	}
	/* The connection stays in the backlog, so the listening socket stays
	 * readable: without a pause poll() would return at once, for ever. */
	if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
		l->paused_until = p3_now_ns() + FD_PAUSE_MS * 1000000ull;
}

static struct group *group_get(struct p3_listener *l, const struct p3_hello *h)
{
	unsigned int i, oldest;

	for (i = 0; i < l->ngrp; i++)
		if (l->grp[i].cookie == h->cookie)
			return &l->grp[i];
	if (l->ngrp == MAX_GROUPS) {
		for (oldest = 0, i = 1; i < l->ngrp; i++)
			if (l->grp[i].since < l->grp[oldest].since)
				oldest = i;
		group_drop(l, oldest, 1);
	}
	l->grp[l->ngrp] = (struct group){ .cookie = h->cookie, .id = h->chan_id,
					  .bands = h->bands, .proto = h->proto,
					  .since = p3_now_ns() };
	return &l->grp[l->ngrp++];
}

/* Tell the sender why (p3.h, "The handshake"), then drop the connection.
 * The frame fits any socket buffer; if it cannot be written, the sender
 * learns of the close through its own writes. */
static void pend_refuse(struct p3_listener *l, unsigned int i, const struct p3_hello *h,
			unsigned int reason)
{
	uint8_t buf[P3_FRAME_HDR_LEN + P3_REFUSE_LEN];

	if (!p3_refusal_build(buf, h->cookie, h->band, reason, P3_PROTO_MAX))
		(void)!send(l->pend[i].fd, buf, sizeof(buf), MSG_NOSIGNAL | MSG_DONTWAIT);
	pend_drop(l, i);
}

/* Turn a complete group into a receiving channel. */
static int group_chan(struct p3_listener *l, struct group *g, struct p3_chan **out)
{
	struct p3_chan *c = chan_alloc(P3_ROLE_RX, g->bands, g->id, l->max_payload);
	unsigned int b;
	int err = 0;

	if (!c)
		return -ENOMEM;
	c->proto = g->proto;
	for (b = 0; b < g->bands; b++) {
		/* A receiving socket sends only ACKs, but left untagged they
		 * wait in the qdisc's least urgent band behind this host's own
		 * traffic, and its sender's urgent band stalls on its ACK clock.
		 * Tagged with the band's level, as the sender tagged its end. */
		if (!err)
			err = p3_tag_ex(g->fd[b], (unsigned int)chan_band_level(b, l->level_stride),
					l->tag_method, 0);
		if (!err)
			err = chan_sock_peer_timeout(g->fd[b], l->peer_timeout_ms);
		if (!err)
			err = rx_attach(c, b, g->fd[b]);
		else
			close(g->fd[b]);
	}
	group_drop(l, (unsigned int)(g - l->grp), 0);
	if (!err && l->progress)
		err = chan_start_engine(c);
	if (err) {
		p3_chan_close(c);
		return err;
	}
	*out = c;
	return 1;
}

/* Why this listener cannot take the channel a hello opens, or 0. */
static int hello_refusal(const struct p3_listener *l, const struct p3_hello *h)
{
	if (h->proto < P3_PROTO_MIN || h->proto > P3_PROTO_MAX)
		return P3_EVERSION;
	/* Agreeing the bound: the sender's frames must fit our parser. */
	if (h->max_payload > l->max_payload)
		return P3_ETOOBIG;
	/* A channel with a band whose level no tag can carry could never be
	 * tagged whole: refuse each of its hellos, so that the sender learns
	 * why at once instead of timing out. */
	if (chan_band_level(h->bands - 1, l->level_stride) < 0)
		return P3_ELEVEL;
	return 0;
}

/* The hello of pend[i] is complete: file it.  1 if a channel came out. */
static int pend_hello(struct p3_listener *l, unsigned int i, struct p3_chan **out)
{
	struct p3_hello h;
	struct group *g;
	int n, fd = l->pend[i].fd;

	n = p3_hello_parse(l->pend[i].buf, HELLO_WIRE, &h);
	if (n < 0) {
		pend_drop(l, i);
		return n;
	}
	n = hello_refusal(l, &h);
	if (n) {
		pend_refuse(l, i, &h, (unsigned int)n);
		return -n;
	}
	g = group_get(l, &h);
	if (g->bands != h.bands || g->id != h.chan_id || g->proto != h.proto ||
	    (g->seen & (1ull << h.band))) {
		pend_refuse(l, i, &h, P3_EHELLO);
		return -P3_EHELLO;
	}
	g->fd[h.band] = fd;
	g->seen |= 1ull << h.band;
	l->pend[i] = l->pend[--l->npend];	/* fd now belongs to the group */
	if (g->seen != (h.bands == 64 ? ~0ull : (1ull << h.bands) - 1))
		return 0;
	return group_chan(l, g, out);
}

/* Do the first n bytes (n may be under 4) agree with the frame magic? */
static int magic_prefix_ok(const uint8_t *buf, size_t n)
{
	uint8_t magic[4];

	put_be32(magic, P3_FRAME_MAGIC);
	return !memcmp(buf, magic, n < sizeof(magic) ? n : sizeof(magic));
}

/* Read exactly the hello (data after it belongs to the channel). */
static int pend_read(struct p3_listener *l, unsigned int i, struct p3_chan **out)
{
	struct pending *p = &l->pend[i];
	ssize_t n;

	n = read(p->fd, p->buf + p->have, HELLO_WIRE - p->have);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	/* Gone before a whole hello: a port scan, a health check, a peer that
	 * gave up.  It never claimed to be a p3 sender: nothing to report. */
	if (n <= 0) {
		pend_drop(l, i);
		return 0;
	}
	p->have += n;
	/* Not our magic: something that speaks another protocol (an HTTP
	 * health check, a scanner's banner grab) and never claimed to be a
	 * p3 sender either.  Errors are kept for peers that did. */
	if (!magic_prefix_ok(p->buf, p->have)) {
		pend_drop(l, i);
		return 0;
	}
	if (p->have < HELLO_WIRE)
		return 0;
	return pend_hello(l, i, out);
}

static int listener_step(struct p3_listener *l, int wait_ms, struct p3_chan **out)
{
	struct pollfd pfd[MAX_PENDING + 1];
	unsigned int i, n = l->npend;
	int r, paused = chan_wait_ms(l->paused_until);

	/* While paused, the listening socket is left out (fd -1 is skipped)
	 * and the wait ends with the pause. */
	pfd[0] = (struct pollfd){ .fd = paused > 0 ? -1 : l->fd, .events = POLLIN };
	if (paused > 0 && (wait_ms < 0 || paused < wait_ms))
		wait_ms = paused;
	for (i = 0; i < n; i++)
		pfd[i + 1] = (struct pollfd){ .fd = l->pend[i].fd, .events = POLLIN };
	r = poll(pfd, n + 1, wait_ms);
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	/* Backwards: dropping entry i moves the last one, already seen, into it. */
	for (i = n; i-- > 0;) {
		if (!pfd[i + 1].revents)
			continue;
		r = pend_read(l, i, out);
		if (r)
			return r;
	}
	if (pfd[0].revents)
		listener_accept(l);
	return 0;
}

P3_EXPORT int p3_accept(struct p3_listener *l, int timeout_ms, struct p3_chan **out)
{
	uint64_t deadline = chan_deadline(timeout_ms);
	int r;

	if (!l || !out)
		return -EINVAL;
	*out = NULL;
	do {
		listener_expire(l);
		r = listener_step(l, chan_wait_ms(deadline), out);
		if (r)
			return r < 0 ? r : 0;
	} while (chan_wait_ms(deadline));
	return -ETIMEDOUT;
}

P3_EXPORT void p3_listener_close(struct p3_listener *l)
{
	if (!l)
		return;
	while (l->npend)
		pend_drop(l, l->npend - 1);
	while (l->ngrp)
		group_drop(l, l->ngrp - 1, 1);
	close(l->fd);
	free(l);
}
