// SPDX-License-Identifier: LGPL-2.1-or-later
/* What both ends of a channel share: options, lifetime, time, queries.
 * Threads, waits and the progress thread are in chan_thread.c. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chan.h"

#define DEFAULT_BANDS		8
#define DEFAULT_MAX_QUEUED	(64u << 20)
#define DEFAULT_PEER_TIMEOUT_MS	30000

/*
 * A peer that vanishes without a FIN or an RST (power loss, a pulled
 * cable, a partition) would leave TCP waiting for ever on a receiver that
 * has nothing to send, and for many minutes of retransmissions on a
 * sender.  TCP_USER_TIMEOUT bounds how long sent data may stay unacked;
 * keepalive probes, started after a third of the bound, give an idle
 * receiver something to be unacked, and the user timeout then ends them
 * too.  A live peer's kernel answers probes even while its process
 * computes, so a long pause between iterations is never taken for death.
 */
int chan_sock_peer_timeout(int fd, int timeout_ms)
{
	int ms = timeout_ms ? timeout_ms : DEFAULT_PEER_TIMEOUT_MS;
	int on = 1, idle = ms / 3000 > 0 ? ms / 3000 : 1, intvl = idle, cnt = 3;
	unsigned int uto = (unsigned int)ms;

	if (timeout_ms < 0)
		return 0;
	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto)) < 0)
		return -errno;
	return 0;
}

P3_EXPORT void p3_chan_opts_init_sized(struct p3_chan_opts *o, size_t size)
{
	struct p3_chan_opts d = {
		.bands = DEFAULT_BANDS,
		.tag_method = P3_METHOD_DEFAULT,
		.notsent_lowat = -1,
		.max_queued = DEFAULT_MAX_QUEUED,
		.max_payload = P3_DEFAULT_MAX_PAYLOAD,
		.timeout_ms = CHAN_DEFAULT_TIMEOUT_MS,
		.level_stride = 1,
	};

	/* A caller's struct is never written past its own end: an older
	 * program's ends at its layout, a newer one's new fields are zeroed
	 * (their defaults, as the struct rule has it). */
	if (!o || size < P3_CHAN_OPTS_SIZE_1 || size > UINT32_MAX)
		return;
	memset(o, 0, size);
	memcpy(o, &d, size < sizeof(d) ? size : sizeof(d));
	o->size = (uint32_t)size;
}

/* The first layout's entry point: programs linked against it have room
 * for that layout only. */
P3_EXPORT void (p3_chan_opts_init)(struct p3_chan_opts *o)
{
	p3_chan_opts_init_sized(o, P3_CHAN_OPTS_SIZE_1);
}

int chan_opts_read(struct p3_chan_opts *o, const struct p3_chan_opts *opts)
{
	int err;

	p3_chan_opts_init(o);
	err = opts ? p3_struct_in(o, sizeof(*o), P3_CHAN_OPTS_SIZE_1, opts) : 0;
	/* 0, and every caller of the first layout: a level per band, in turn. */
	if (!o->level_stride)
		o->level_stride = 1;
	return err;
}

/* The tag level of band's sockets at stride, or -P3_ELEVEL past 63, the
 * last level a tag can say.  Each factor is checked first: no overflow. */
int chan_band_level(unsigned int band, uint64_t stride)
{
	if (band >= P3_MAX_BANDS || stride >= P3_MAX_BANDS || band * stride >= P3_MAX_BANDS)
		return -P3_ELEVEL;
	return (int)(band * stride);
}

struct p3_chan *chan_alloc(int role, unsigned int bands, uint64_t id, uint32_t max_payload)
{
	struct p3_chan *c = calloc(1, sizeof(*c));
	unsigned int b;

	if (!c)
		return NULL;
	c->role = role;
	c->bands = bands;
	c->id = id;
	c->max_payload = max_payload ? max_payload : P3_DEFAULT_MAX_PAYLOAD;
	for (b = 0; b < P3_MAX_BANDS; b++) {
		c->tx[b].fd = -1;
		c->rx[b].fd = -1;
		c->rx[b].status = b < bands ? 0 : 1;
	}
	c->wake = -1;
	c->notify = -1;
	if (chan_thread_init(c)) {
		/* No socket or memory yet; the lock and condition hold nothing. */
		if (c->wake >= 0)
			close(c->wake);
		if (c->notify >= 0)
			close(c->notify);
		free(c);
		return NULL;
	}
	return c;
}

/* A deadline of 0 means "no deadline" (wait forever). */
uint64_t chan_deadline(int timeout_ms)
{
	if (timeout_ms < 0)
		return 0;
	return p3_now_ns() + (uint64_t)timeout_ms * 1000000u + 1;
}

/* Milliseconds left until deadline, rounded up, for poll(); -1 = forever. */
int chan_wait_ms(uint64_t deadline_ns)
{
	uint64_t now;

	if (!deadline_ns)
		return -1;
	now = p3_now_ns();
	if (now >= deadline_ns)
		return 0;
	return (int)((deadline_ns - now + 999999) / 1000000);
}

P3_EXPORT int p3_chan_poll(struct p3_chan *c, int timeout_ms)
{
	int err;

	if (!c)
		return -EINVAL;
	err = chan_enter(c);
	if (err)
		return err;
	err = c->role == P3_ROLE_TX ? tx_pump(c, timeout_ms) : rx_poll(c, timeout_ms);
	chan_unlock(c);
	return err;
}

/* Sockets, memory, and the thread primitives chan_alloc() made. */
static void chan_free(struct p3_chan *c)
{
	unsigned int b;

	/* Each closed once: tx_free() closes what is left open, and a number
	 * closed twice may by then be another thread's new socket. */
	for (b = 0; b < P3_MAX_BANDS; b++) {
		if (c->tx[b].fd >= 0)
			close(c->tx[b].fd);
		c->tx[b].fd = -1;
		if (c->rx[b].fd >= 0)
			close(c->rx[b].fd);
		c->rx[b].fd = -1;
	}
	if (c->wake >= 0)
		close(c->wake);
	if (c->notify >= 0)
		close(c->notify);
	tx_free(c);
	rx_free(c);
	pthread_cond_destroy(&c->changed);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

P3_EXPORT void p3_chan_close(struct p3_chan *c)
{
	if (!c)
		return;
	chan_quiesce(c);
	chan_free(c);
}

P3_EXPORT unsigned int p3_chan_bands(const struct p3_chan *c)
{
	return c ? c->bands : 0;
}

P3_EXPORT uint64_t p3_chan_id(const struct p3_chan *c)
{
	return c ? c->id : 0;
}

/* The queries read state the engine and other callers change: under the
 * lock, which they take through a cast (they change nothing). */
static size_t read_locked(const struct p3_chan *c, const size_t *field)
{
	struct p3_chan *w = (struct p3_chan *)c;
	size_t v;

	chan_lock(w);
	v = *field;
	chan_unlock(w);
	return v;
}

P3_EXPORT size_t p3_chan_queued(const struct p3_chan *c)
{
	return c ? read_locked(c, &c->queued) : 0;
}

P3_EXPORT size_t p3_chan_pending(const struct p3_chan *c)
{
	return c ? read_locked(c, &c->pending) : 0;
}

P3_EXPORT int p3_chan_band_status(const struct p3_chan *c, unsigned int band)
{
	struct p3_chan *w = (struct p3_chan *)c;
	int v;

	if (!w || band >= w->bands)
		return -EINVAL;
	chan_lock(w);
	v = w->role == P3_ROLE_TX ? w->tx[band].err : w->rx[band].status;
	chan_unlock(w);
	return v;
}

int done_reserve(struct p3_chan *c, size_t n)
{
	struct p3_completion *v;
	size_t cap, i;

	if (c->done_cap - c->done_n >= n)
		return 0;
	for (cap = c->done_cap ? c->done_cap : 64; cap - c->done_n < n; cap *= 2)
		;
	v = malloc(cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (i = 0; i < c->done_n; i++)
		v[i] = c->done[(c->done_head + i) % c->done_cap];
	free(c->done);
	c->done = v;
	c->done_cap = cap;
	c->done_head = 0;
	return 0;
}

void done_push(struct p3_chan *c, const struct p3_completion *d)
{
	c->done[(c->done_head + c->done_n++) % c->done_cap] = *d;
}
