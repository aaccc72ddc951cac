// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The process's progress engine: one thread, "p3-engine", that moves the
 * bytes of every channel opened with opts.progress.  A thread per channel
 * would make a rank of an N-rank mesh (a sending and a receiving channel
 * to each peer) run 2(N-1) of them, each waking for its own few sockets.
 *
 * The engine loops over passes.  A pass takes the registered channels
 * (under the registry's mutex, held only to copy the list), asks each, under
 * its own lock, for the descriptors it waits for now (prepare), waits on all
 * of them with no lock held, then hands each channel whose descriptors had
 * something its revents (serve).  Each step holds one channel's lock at a
 * time, and never blocks under it: reads and writes are non-blocking, and
 * each is bounded (a socket's buffer, RX_READ_MAX a connection), so every
 * channel gets its turn in every pass and none starves another.
 *
 * The wait is an epoll set kept equal to what prepare asked for: a
 * descriptor is added, changed or removed only when its channel's wish
 * changes, so a pass costs the kernel what is ready, not a poll of every
 * socket (at 16 ranks a rank holds 240).  The set is level-triggered, as
 * poll() is, and keyed by channel and band as well as descriptor: one
 * that another channel or band asks for is registered afresh, because its
 * number may be a new socket's.  A channel added or removed makes a new
 * set, and any failure of epoll falls back to poll() for that pass.  So
 * does a socket closed while still in the set where a forked child holds
 * it too: the set keeps a description until every descriptor of it is
 * closed, and this one can no longer be named to take it out, so the set
 * is made anew rather than report it forever.
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
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "chan.h"

/* One channel's share of a pass: its descriptors are pfd[at, at + n). */
struct slot {
	struct p3_chan	*c;
	unsigned int	at;
	unsigned int	n;
};

/* What the epoll set holds for a descriptor. */
struct reg {
	const struct p3_chan	*c;	/* NULL: not in the set */
	unsigned int		band;
	short			events;
	unsigned int		at;	/* its pfd index in the pass that wants it */
	uint32_t		serial;	/* of its ADD: an event of an older one is stale */
	uint64_t		pass;	/* that pass */
};

/* The engine thread's own arrays, grown as channels come. */
struct pass {
	struct slot	*slot;
	size_t		nslot, cslot;
	struct pollfd	*pfd;		/* every channel's, then the wake eventfd */
	size_t		cpfd;
	unsigned int	*band;		/* the band of each pfd[i] */
	size_t		cband;
	/* the epoll set: -1, or built for channel list "version" */
	int		epfd;
	uint64_t	version, count;
	uint64_t	listed;		/* E.version when the channels were taken */
	struct reg	*reg;		/* by descriptor */
	size_t		creg;
	int		*fds;		/* the descriptors in the set */
	size_t		nfds, cfds;
	uint32_t	serials;	/* ADDs so far */
	struct epoll_event *ev;
	size_t		cev;
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
	uint64_t		version;	/* channels added or removed */
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
	p->listed = E.version;
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

/* An event's data: the descriptor, and the serial of its ADD. */
#define WAKE_DATA	UINT64_MAX
static uint64_t ev_data(uint32_t serial, int fd)
{
	return (uint64_t)serial << 32 | (uint32_t)fd;
}

/* An empty epoll set holding the wake eventfd, or -1. */
static void set_reset(struct pass *p)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = WAKE_DATA };
	size_t i;

	if (p->epfd >= 0)
		close(p->epfd);
	for (i = 0; i < p->nfds; i++)
		p->reg[p->fds[i]].c = NULL;
	p->nfds = 0;
	p->version = p->listed;
	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (p->epfd >= 0 && epoll_ctl(p->epfd, EPOLL_CTL_ADD, E.wake, &ev)) {
		close(p->epfd);
		p->epfd = -1;
	}
}

/* Puts descriptor pfd[at] of channel c's band in the set as asked.  0 or
 * -errno. */
static int set_want(struct pass *p, const struct p3_chan *c, unsigned int band, unsigned int at)
{
	const struct pollfd *f = &p->pfd[at];
	struct epoll_event ev = { .events = (uint32_t)(unsigned short)f->events };
	struct reg *r;
	size_t old = p->creg;
	void *q;

	if (f->fd < 0)
		return -EBADF;
	q = grow(p->reg, &p->creg, (size_t)f->fd + 1, sizeof(*p->reg));
	if (!q)
		return -ENOMEM;
	p->reg = q;
	memset(p->reg + old, 0, (p->creg - old) * sizeof(*p->reg));
	r = &p->reg[f->fd];
	r->at = at;
	r->pass = p->count;
	if (r->c == c && r->band == band && r->events == f->events)
		return 0;
	if (r->c == c && r->band == band) {	/* c is never NULL */
		ev.data.u64 = ev_data(r->serial, f->fd);
		if (!epoll_ctl(p->epfd, EPOLL_CTL_MOD, f->fd, &ev)) {
			r->events = f->events;
			return 0;
		}
		if (errno != ENOENT)
			return -errno;
	} else if (r->c) {
		/* Another owner's number: perhaps another socket now. */
		(void)epoll_ctl(p->epfd, EPOLL_CTL_DEL, f->fd, NULL);
	} else {
		q = grow(p->fds, &p->cfds, p->nfds + 1, sizeof(*p->fds));
		if (!q)
			return -ENOMEM;
		p->fds = q;
		p->fds[p->nfds++] = f->fd;
	}
	r->c = NULL;
	ev.data.u64 = ev_data(++p->serials, f->fd);
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, f->fd, &ev))
		return -errno;
	*r = (struct reg){ .c = c, .band = band, .events = f->events, .at = at,
			   .serial = p->serials, .pass = p->count };
	return 0;
}

/* Takes out of the set every descriptor this pass did not ask for.  One
 * that cannot be named any more (closed) may still be in it: then the set
 * is made anew at the next pass. */
static void set_prune(struct pass *p)
{
	size_t i = 0;
	int fd;

	while (i < p->nfds) {
		fd = p->fds[i];
		if (p->reg[fd].c && p->reg[fd].pass == p->count) {
			i++;
			continue;
		}
		if (p->reg[fd].c && epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL) && errno != ENOENT)
			p->version = p->listed - 1;
		p->reg[fd].c = NULL;
		p->fds[i] = p->fds[--p->nfds];
	}
}

/* Waits on pfd[0, nfd) and the wake eventfd through the epoll set, and
 * fills their revents.  -1 where the set failed: poll() them instead. */
static int pass_wait_epoll(struct pass *p, unsigned int nfd)
{
	unsigned int i;
	struct reg *r;
	void *q;
	int n, k;

	if (p->epfd < 0 || p->version != p->listed)
		set_reset(p);
	if (p->epfd < 0)
		return -1;
	p->count++;
	for (i = 0; i < p->nslot; i++) {
		struct slot *s = &p->slot[i];
		unsigned int j;

		for (j = s->at; j < s->at + s->n; j++) {
			if (set_want(p, s->c, p->band[j], j)) {
				p->version = p->listed - 1;	/* rebuild next pass */
				return -1;
			}
		}
	}
	set_prune(p);
	q = grow(p->ev, &p->cev, nfd + 1, sizeof(*p->ev));
	if (!q)
		return -1;
	p->ev = q;
	n = epoll_wait(p->epfd, p->ev, (int)(nfd + 1), -1);
	if (n < 0)
		return errno == EINTR ? 0 : -1;
	for (i = 0; i <= nfd; i++)
		p->pfd[i].revents = 0;
	for (k = 0; k < n; k++) {
		uint64_t d = p->ev[k].data.u64;

		if (d == WAKE_DATA) {
			p->pfd[nfd].revents = POLLIN;
			continue;
		}
		r = &p->reg[(int)(uint32_t)d];
		if (r->c && r->pass == p->count && r->serial == (uint32_t)(d >> 32))
			p->pfd[r->at].revents = (short)p->ev[k].events;
		else	/* a description closed here, held open elsewhere */
			p->version = p->listed - 1;
	}
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
	r = pass_wait_epoll(p, nfd);
	if (r < 0)
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
	struct pass p = { .epfd = -1 };

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
	if (p.epfd >= 0)
		close(p.epfd);
	free(p.slot);
	free(p.pfd);
	free(p.band);
	free(p.reg);
	free(p.fds);
	free(p.ev);
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
		E.version++;
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
	E.version++;
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
