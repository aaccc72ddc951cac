// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The process's progress engine: one thread, "p3-engine", that moves the
 * bytes of every channel opened with opts.progress.  A thread per channel
 * would make a rank of an N-rank mesh (a sending and a receiving channel
 * to each peer) run 2(N-1) of them, each waking for its own few sockets.
 *
 * The engine loops over passes.  A pass takes the registered channels
 * (under the registry's mutex, held only to copy the list), asks each, under
 * its own lock, for the descriptors it waits for now (prepare), polls all of
 * them with no lock held, then hands each channel whose descriptors had
 * something its revents (serve).  Each step holds one channel's lock at a
 * time, and never blocks under it: reads and writes are non-blocking, and
 * each is bounded (a socket's buffer, RX_READ_MAX a connection), so every
 * channel gets its turn in every pass and none starves another.
 *
 * A kick (chan_kick(): a message queued, a tensor registered) writes one
 * process-wide eventfd that the poll includes.  The engine drains it right
 * after its poll and before it serves: a kick after the drain stays counted
 * for the next poll, and whatever a kick before it announced is seen by the
 * next pass's prepare, which comes after.
 *
 * Removal waits for the end of the pass that may hold the channel (it kicks
 * the poll to make that prompt), so that close can free it.  The thread
 * starts with the first channel and leaves with the last, joined by the
 * call that removed it: a program that closed its channels runs no thread
 * of ours, and one that exits with channels open leaves it in poll(),
 * which exit ends.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "chan.h"

/* One channel's share of a pass: its descriptors are pfd[at, at + n). */
struct slot {
	struct p3_chan	*c;
	unsigned int	at;
	unsigned int	n;
};

/* The engine thread's own arrays, grown as channels come. */
struct pass {
	struct slot	*slot;
	size_t		nslot, cslot;
	struct pollfd	*pfd;		/* every channel's, then the wake eventfd */
	size_t		cpfd;
	unsigned int	*band;		/* the band of each pfd[i] */
	size_t		cband;
};

static struct {
	pthread_mutex_t		mu;	/* everything here */
	pthread_cond_t		cond;	/* a pass ended, or the thread left */
	struct p3_chan		**chan;
	size_t			n, cap;
	int			wake;	/* eventfd: ends the engine's poll() */
	int			made;	/* a thread was started, not yet joined */
	int			exited;	/* it has left its loop: join it */
	pthread_t		thread;
	uint64_t		started;	/* passes begun */
	uint64_t		finished;	/* passes ended */
} E = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.wake = -1,
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* fork(): the child has no engine thread, and must not share the wake
 * eventfd with the parent's (either engine would take the other's kicks).
 * The parent's channels are not the child's to serve; one it opens starts
 * a fresh engine.  The mutex is held across fork(), so the state copied is
 * whole. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&E.mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&E.mu);
}

static void fork_child(void)
{
	if (E.wake >= 0)
		close(E.wake);
	E.wake = -1;
	E.n = 0;
	E.made = 0;
	E.exited = 0;
	E.finished = E.started;
	pthread_cond_init(&E.cond, NULL);
	pthread_mutex_unlock(&E.mu);
}

static void engine_once(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void engine_kick(void)
{
	uint64_t one = 1;

	/* Read without the mutex: a kicker's channel was added, after the
	 * eventfd was made, under that channel's lock, which the kicker
	 * holds. */
	(void)!write(E.wake, &one, sizeof(one));
}

/* An array of *cap elements of size, grown to hold want: the array, or
 * NULL with p left as it was. */
static void *grow(void *p, size_t *cap, size_t want, size_t size)
{
	size_t c = *cap ? *cap : 16;

	if (want <= *cap)
		return p;
	while (c < want)
		c *= 2;
	p = realloc(p, c * size);
	if (p)
		*cap = c;
	return p;
}

/* Under E.mu: this pass's channels, with room for their descriptors. */
static int pass_take(struct pass *p)
{
	size_t i, fds = 1;
	void *q;

	for (i = 0; i < E.n; i++)
		fds += E.chan[i]->bands;	/* fixed at open: no lock */
	q = grow(p->slot, &p->cslot, E.n, sizeof(*p->slot));
	if (!q)
		return -ENOMEM;
	p->slot = q;
	q = grow(p->pfd, &p->cpfd, fds, sizeof(*p->pfd));
	if (!q)
		return -ENOMEM;
	p->pfd = q;
	q = grow(p->band, &p->cband, fds, sizeof(*p->band));
	if (!q)
		return -ENOMEM;
	p->band = q;
	for (i = 0; i < E.n; i++)
		p->slot[i] = (struct slot){ .c = E.chan[i] };
	p->nslot = E.n;
	return 0;
}

static int any_revents(const struct pollfd *pfd, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		if (pfd[i].revents)
			return 1;
	return 0;
}

/* One pass over p's channels, outside E.mu. */
static void pass_run(struct pass *p)
{
	unsigned int nfd = 0;
	uint64_t v;
	size_t i;
	int r;

	for (i = 0; i < p->nslot; i++) {
		struct slot *s = &p->slot[i];

		s->at = nfd;
		s->n = chan_engine_prepare(s->c, p->pfd + nfd, p->band + nfd);
		nfd += s->n;
	}
	p->pfd[nfd] = (struct pollfd){ .fd = E.wake, .events = POLLIN };
	/* No timeout: every deadline is its caller's, on its condition. */
	r = poll(p->pfd, nfd + 1, -1);
	if (r < 0) {
		/* ENOMEM or EINVAL (more descriptors than RLIMIT_NOFILE): no
		 * revents to trust.  Pause rather than spin; the callers'
		 * timeouts bound their waits meanwhile. */
		if (errno != EINTR)
			poll(NULL, 0, 1);
		return;
	}
	if (p->pfd[nfd].revents)
		(void)!read(E.wake, &v, sizeof(v));
	for (i = 0; i < p->nslot; i++) {
		struct slot *s = &p->slot[i];

		if (any_revents(p->pfd + s->at, s->n))
			chan_engine_serve(s->c, p->pfd + s->at, p->band + s->at, s->n);
	}
}

static void *engine_main(void *arg)
{
	struct pass p = { 0 };

	(void)arg;
	pthread_mutex_lock(&E.mu);
	while (E.n) {
		if (pass_take(&p)) {
			/* Out of memory: try again in a moment, as above. */
			pthread_mutex_unlock(&E.mu);
			poll(NULL, 0, 1);
			pthread_mutex_lock(&E.mu);
			continue;
		}
		E.started++;
		pthread_mutex_unlock(&E.mu);
		pass_run(&p);
		pthread_mutex_lock(&E.mu);
		E.finished = E.started;
		pthread_cond_broadcast(&E.cond);
	}
	E.exited = 1;
	pthread_cond_broadcast(&E.cond);
	pthread_mutex_unlock(&E.mu);
	free(p.slot);
	free(p.pfd);
	free(p.band);
	return NULL;
}

/* Under E.mu: join a thread that has left its loop.  It holds no lock
 * and touches nothing of ours any more: the join is short. */
static void engine_reap(void)
{
	if (E.made && E.exited) {
		pthread_join(E.thread, NULL);
		E.made = 0;
		E.exited = 0;
	}
}

/* Under E.mu.  The thread blocks every signal: a process-directed one
 * goes to the application's threads, whose handlers expect it, and the
 * engine's poll() is never cut short. */
static int engine_start(void)
{
	sigset_t all, old;
	int err;

	engine_reap();
	if (E.made)
		return 0;	/* running: it sees the new channel next pass */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&E.thread, NULL, engine_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return -err;
	/* Named, so that top -H, perf and /proc tell the engine's CPU and
	 * wake-ups from the application's threads (it would inherit its
	 * name); a failure to name changes nothing else. */
	pthread_setname_np(E.thread, "p3-engine");
	E.made = 1;
	return 0;
}

int engine_add(struct p3_chan *c)
{
	struct p3_chan **chan;
	int err;

	pthread_once(&once, engine_once);
	pthread_mutex_lock(&E.mu);
	chan = grow(E.chan, &E.cap, E.n + 1, sizeof(*E.chan));
	err = chan ? 0 : -ENOMEM;
	if (chan)
		E.chan = chan;
	if (!err && E.wake < 0) {
		E.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (E.wake < 0)
			err = -errno;
	}
	if (!err) {
		E.chan[E.n++] = c;
		err = engine_start();
		if (err)
			E.n--;
	}
	pthread_mutex_unlock(&E.mu);
	if (!err)
		engine_kick();	/* a running engine's poll lacks c */
	return err;
}

void engine_remove(struct p3_chan *c)
{
	uint64_t pass;
	size_t i;

	pthread_mutex_lock(&E.mu);
	for (i = 0; i < E.n && E.chan[i] != c; i++)
		;
	if (i == E.n) {
		pthread_mutex_unlock(&E.mu);	/* never added, or before a fork */
		return;
	}
	/* In order, so that the passes keep serving channels in the order
	 * they came. */
	memmove(&E.chan[i], &E.chan[i + 1], (E.n - i - 1) * sizeof(*E.chan));
	E.n--;
	/* A pass begun before this may hold c: wait for its end.  Later
	 * passes do not have it. */
	pass = E.started;
	if (E.finished < pass)
		engine_kick();
	while (E.finished < pass)
		pthread_cond_wait(&E.cond, &E.mu);
	/* The last channel out ends the thread; a channel added meanwhile
	 * keeps it. */
	if (!E.n && E.made) {
		engine_kick();
		while (!E.n && E.made && !E.exited)
			pthread_cond_wait(&E.cond, &E.mu);
		engine_reap();
	}
	pthread_mutex_unlock(&E.mu);
}
