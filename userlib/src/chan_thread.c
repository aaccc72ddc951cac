// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A channel shared by threads: its lock, the waits that drop it, shutdown,
 * and its side of the progress engine (engine.c).
 *
 * Without the engine, a call that must wait polls the sockets itself with
 * the lock dropped, so that other threads can queue or register meanwhile.
 * With it, only the engine touches the sockets; every caller waits on the
 * condition variable for the engine's news, so no two threads ever race
 * for the same bytes and the engine never waits for a caller.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "chan.h"

int chan_thread_init(struct p3_chan *c)
{
	pthread_condattr_t ca;
	int err;

	c->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->notify = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->wake < 0 || c->notify < 0)
		return -errno;
	/* Deadlines are CLOCK_MONOTONIC (p3_now_ns()); so are the waits. */
	err = pthread_condattr_init(&ca);
	if (!err)
		err = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!err)
		err = pthread_cond_init(&c->changed, &ca);
	pthread_condattr_destroy(&ca);
	if (!err)
		err = pthread_mutex_init(&c->lock, NULL);
	return -err;
}

void chan_lock(struct p3_chan *c)
{
	pthread_mutex_lock(&c->lock);
	c->users++;
}

int chan_enter(struct p3_chan *c)
{
	chan_lock(c);
	if (!c->closing)
		return 0;
	chan_unlock(c);
	return -P3_ECLOSED;
}

void chan_unlock(struct p3_chan *c)
{
	/* The last call out lets a waiting p3_chan_close() free the channel. */
	if (!--c->users && c->closing)
		pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
}

static void eventfd_set(int fd, int on)
{
	uint64_t v = 1;

	if (on)
		(void)!write(fd, &v, sizeof(v));
	else
		(void)!read(fd, &v, sizeof(v));
}

void chan_kick(struct p3_chan *c)
{
	if (c->engine_on)
		engine_kick();
}

/* Other threads wait for the engine: a condition wait up to wait_ms. */
static int wait_for_engine(struct p3_chan *c, int wait_ms)
{
	struct timespec ts;
	uint64_t until;

	if (!wait_ms)
		return 0;
	if (wait_ms < 0) {
		pthread_cond_wait(&c->changed, &c->lock);
	} else {
		until = p3_now_ns() + (uint64_t)wait_ms * 1000000u;
		ts.tv_sec = (time_t)(until / 1000000000u);
		ts.tv_nsec = (long)(until % 1000000000u);
		pthread_cond_timedwait(&c->changed, &c->lock, &ts);
	}
	return c->closing ? -P3_ECLOSED : 0;
}

int chan_wait(struct p3_chan *c, struct pollfd *pfd, unsigned int n, int wait_ms)
{
	unsigned int i;
	int r;

	for (i = 0; i < n; i++)
		pfd[i].revents = 0;
	if (c->closing)
		return -P3_ECLOSED;
	if (c->engine_on)
		return wait_for_engine(c, wait_ms);
	/* wake ends the wait on shutdown. */
	pfd[n] = (struct pollfd){ .fd = c->wake, .events = POLLIN };
	pthread_mutex_unlock(&c->lock);
	r = poll(pfd, n + 1, wait_ms);
	pthread_mutex_lock(&c->lock);
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	if (c->closing)
		return -P3_ECLOSED;
	/* Only shutdown writes wake, and its count is never taken: every
	 * later wait ends at once too. */
	if (pfd[n].revents)
		r--;
	return r;
}

/* What an event loop polling p3_chan_fd() should see now; 1 if that
 * changed (a caller waiting for it has news). */
static int notify_update(struct p3_chan *c)
{
	int ready = c->closing;

	if (c->role == P3_ROLE_TX) {
		unsigned int b;

		/* An empty queue, or a by-reference send's completion: a
		 * caller waiting for one need not wait for the whole queue. */
		ready |= !c->queued || c->done_n;
		for (b = 0; b < c->bands; b++)
			ready |= c->tx[b].err != 0;
	} else {
		ready |= rx_ready(c);
	}
	if (ready == c->notified)
		return 0;
	eventfd_set(c->notify, ready);
	c->notified = ready;
	return 1;
}

/* A shut-down channel does no more I/O: its descriptors are left out. */
unsigned int chan_engine_prepare(struct p3_chan *c, struct pollfd *pfd, unsigned int *band)
{
	unsigned int n = 0;

	pthread_mutex_lock(&c->lock);
	if (!c->closing) {
		n = c->role == P3_ROLE_TX ? tx_pollset(c, pfd, band) : rx_gather(c, pfd, band);
		/* Releasing a stalled band can fail it: news without a poll. */
		if (notify_update(c))
			pthread_cond_broadcast(&c->changed);
	}
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* The callers wake when a descriptor of theirs had something, not on
 * every pass for every channel: idle channels' waiters sleep on. */
void chan_engine_serve(struct p3_chan *c, const struct pollfd *pfd, const unsigned int *band,
		       unsigned int n)
{
	pthread_mutex_lock(&c->lock);
	if (!c->closing) {
		if (c->role == P3_ROLE_TX)
			tx_serve(c, pfd, band, n);
		else
			rx_serve(c, pfd, band, n);
		notify_update(c);
		pthread_cond_broadcast(&c->changed);
	}
	pthread_mutex_unlock(&c->lock);
}

int chan_start_engine(struct p3_chan *c)
{
	int err;

	/* Set before the engine can see c; nobody else has c yet. */
	pthread_mutex_lock(&c->lock);
	c->engine_on = 1;
	notify_update(c);
	pthread_mutex_unlock(&c->lock);
	err = engine_add(c);
	if (err) {
		pthread_mutex_lock(&c->lock);
		c->engine_on = 0;
		pthread_mutex_unlock(&c->lock);
	}
	return err;
}

/* The caller consumed something (a completion): p3_chan_fd() may go idle. */
void chan_consumed(struct p3_chan *c)
{
	if (c->engine_on)
		notify_update(c);
}

P3_EXPORT int p3_chan_fd(const struct p3_chan *c)
{
	return c && c->engine_on ? c->notify : -EINVAL;
}

P3_EXPORT void p3_chan_shutdown(struct p3_chan *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	if (!c->closing) {
		c->closing = 1;
		eventfd_set(c->wake, 1);
		notify_update(c);
		pthread_cond_broadcast(&c->changed);
	}
	pthread_mutex_unlock(&c->lock);
}

/* Shut down, wait until no call is inside, then take c from the engine,
 * which never touches it again: close may free it. */
void chan_quiesce(struct p3_chan *c)
{
	p3_chan_shutdown(c);
	pthread_mutex_lock(&c->lock);
	while (c->users)
		pthread_cond_wait(&c->changed, &c->lock);
	pthread_mutex_unlock(&c->lock);
	if (c->engine_on)
		engine_remove(c);
	c->engine_on = 0;
}
