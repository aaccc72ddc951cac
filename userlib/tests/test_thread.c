// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Channels shared by threads, over loopback: the progress thread moves data
 * while the caller computes, p3_chan_fd() tells an event loop when to look,
 * shutdown and close end blocked calls in other threads, many threads use
 * one channel at once, and a plan is queued whole or not at all.  Built
 * plain, under ASan+UBSan and under TSan.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "p3.h"
#include "tap.h"
#include "util.h"

#define MIB		(1u << 20)
#define JOIN_LIMIT_S	20	/* a blocked call that never returns fails here */

static char port[16];

static struct p3_listener *listen_loop(int progress)
{
	struct p3_chan_opts o;
	struct p3_listener *l = NULL;

	p3_chan_opts_init(&o);
	o.progress = progress;
	if (p3_listen("127.0.0.1", "0", &o, &l))
		return NULL;
	snprintf(port, sizeof(port), "%d", p3_listener_port(l));
	return l;
}

/* A connected pair: *tx from p3_chan_connect, *rx from p3_accept. */
static int pair(unsigned int bands, size_t max_queued, int tx_progress, int rx_progress,
		struct p3_chan **tx, struct p3_chan **rx)
{
	struct p3_listener *l = listen_loop(rx_progress);
	struct p3_chan_opts o;
	int err;

	*tx = *rx = NULL;
	if (!l)
		return -EADDRNOTAVAIL;
	p3_chan_opts_init(&o);
	o.bands = bands;
	o.max_queued = max_queued;
	o.progress = tx_progress;
	err = p3_chan_connect("127.0.0.1", port, &o, tx);
	if (!err)
		err = p3_accept(l, 10000, rx);
	p3_listener_close(l);
	if (err < 0) {
		tap_diag("pair: %s", p3_strerror(err));
		p3_chan_close(*tx);
		*tx = NULL;
		return err;
	}
	return 0;
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1;
}

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Join t, or fail the test and leave if it is still blocked. */
static void join_or_die(pthread_t t, const char *what)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += JOIN_LIMIT_S;
	if (pthread_timedjoin_np(t, NULL, &ts)) {
		tap_ok(0, "%s: still blocked after %d s", what, JOIN_LIMIT_S);
		exit(tap_done());
	}
}

/* --------------------------------------------- progress while computing */

#define BULK_MSGS	8
#define BULK_MSG	(8 * MIB)

/*
 * The sender queues 64 MiB on one band, far more than the sockets hold,
 * and then makes no call at all (it "computes").  The receiver takes its
 * completions only when p3_chan_fd() says so.  With progress threads
 * everything arrives; without one on the sender the data stops in the
 * queue, which is the behaviour the progress thread exists to end.
 */
static void test_progress(int tx_progress)
{
	struct p3_chan *tx, *rx;
	struct p3_completion d;
	uint8_t *src = malloc(BULK_MSG), *dst = malloc((size_t)BULK_MSGS * BULK_MSG);
	unsigned int i, got = 0, intact = 1;
	int fd, named, err = 0;

	if (!tap_ok(!pair(1, 128 * MIB, tx_progress, 1, &tx, &rx), "progress %d: pair",
		    tx_progress))
		goto out;
	named = engines_named();
	tap_ok(named == 1, "progress %d: %d thread named p3-engine, one for the process's %d "
	       "channels with progress", tx_progress, named, 1 + tx_progress);
	fd = p3_chan_fd(rx);
	tap_ok(fd >= 0 && !readable(fd, 0), "progress %d: receiver fd %d, idle before data",
	       tx_progress, fd);
	for (i = 0; i < BULK_MSGS; i++)
		p3_chan_expect(rx, i, dst + (size_t)i * BULK_MSG, BULK_MSG, 0);
	for (i = 0; i < BULK_MSGS && !err; i++) {
		fill_pattern(src, BULK_MSG, i, 0);
		err = p3_chan_send(tx, 0, 0, 0, i, 0, src, BULK_MSG, 0);
	}
	tap_ok(!err, "progress %d: 64 MiB queued without waiting (%s)", tx_progress,
	       p3_strerror(err));
	/* The receiver's event loop: wait on the fd, take what is ready. */
	while (got < BULK_MSGS && readable(fd, tx_progress ? 30000 : 2000))
		while (p3_chan_next(rx, &d) == 1) {
			intact &= d.bytes == BULK_MSG &&
				  check_pattern(dst + (size_t)d.tensor * BULK_MSG, BULK_MSG,
						d.tensor, 0);
			got++;
		}
	if (tx_progress) {
		tap_ok(got == BULK_MSGS && intact && !p3_chan_queued(tx),
		       "progress 1: all %u messages arrived intact while the sender made no call"
		       " (%u arrived, %zu bytes still queued)", BULK_MSGS, got,
		       p3_chan_queued(tx));
		tap_ok(!readable(fd, 0), "progress 1: fd idle once the completions are taken");
		p3_chan_close(tx);
		tx = NULL;
		tap_ok(readable(fd, 10000) && p3_chan_poll(rx, 0) == -EPIPE,
		       "progress 1: fd readable when the sender leaves, poll says EPIPE");
	} else {
		tap_ok(got < BULK_MSGS && p3_chan_queued(tx) > 0,
		       "progress 0: without the sender's thread the data stops: %u of %u arrived,"
		       " %zu bytes still queued", got, BULK_MSGS, p3_chan_queued(tx));
		tap_ok(p3_chan_flush(tx, 30000) == 0, "progress 0: flush sends the rest");
	}
	p3_chan_close(tx);
	p3_chan_close(rx);
out:
	free(src);
	free(dst);
}

static void test_fd_without_progress(void)
{
	struct p3_chan *tx, *rx;

	if (!tap_ok(!pair(2, 0, 0, 0, &tx, &rx), "no progress: pair"))
		return;
	tap_ok(p3_chan_fd(tx) == -EINVAL && p3_chan_fd(rx) == -EINVAL,
	       "no progress: p3_chan_fd is -EINVAL (nothing would make it readable)");
	p3_chan_close(tx);
	p3_chan_close(rx);
}

/* -------------------------------------------- ending calls in other threads */

struct blocked {
	struct p3_chan	*c;
	int		rc;
	uint8_t		*buf;
	atomic_int	calls;	/* sends begun */
};

static void *poll_forever(void *arg)
{
	struct blocked *b = arg;

	b->rc = p3_chan_poll(b->c, -1);
	return NULL;
}

static void *send_forever(void *arg)
{
	struct blocked *b = arg;
	int i;

	/* The receiver never reads: the queue fills and the call waits. */
	for (i = 0; i < 64 && !b->rc; i++) {
		atomic_fetch_add(&b->calls, 1);
		b->rc = p3_chan_send(b->c, 0, 0, 0, (uint32_t)i, 0, b->buf, MIB, -1);
	}
	return NULL;
}

/* Waits until @b's sender has begun no new send for 300 ms: it is blocked
 * in one.  Closing the channel between two of its calls would free it
 * under the next, a use after close no API can make safe; on a loaded
 * host a fixed sleep once did that.
 */
static void wait_blocked(struct blocked *b)
{
	int seen;

	do {
		seen = atomic_load(&b->calls);
		sleep_ms(300);
	} while (!seen || atomic_load(&b->calls) != seen);
}

static void test_shutdown(int progress)
{
	struct p3_chan *tx, *rx;
	struct blocked b = { 0 };
	static uint8_t buf[MIB];
	uint8_t *dst = malloc(MIB);
	pthread_t t;

	if (!tap_ok(!pair(1, 2 * MIB, progress, progress, &tx, &rx), "shutdown %d: pair",
		    progress))
		goto out;
	/* A receiver blocked in poll(-1) for a tensor that never comes. */
	p3_chan_expect(rx, 7, dst, MIB, 0);
	b.c = rx;
	pthread_create(&t, NULL, poll_forever, &b);
	sleep_ms(100);
	p3_chan_shutdown(rx);
	join_or_die(t, "shutdown: blocked poll");
	tap_ok(b.rc == -P3_ECLOSED, "shutdown %d: a poll(-1) in another thread returns "
	       "P3_ECLOSED (%s)", progress, p3_strerror(b.rc));
	tap_ok(p3_chan_expect(rx, 8, dst, MIB, 0) == -P3_ECLOSED &&
	       p3_chan_poll(rx, 0) == -P3_ECLOSED, "shutdown %d: later calls fail with P3_ECLOSED",
	       progress);

	/* A sender blocked for room, closed outright by another thread. */
	b = (struct blocked){ .c = tx, .buf = buf };
	pthread_create(&t, NULL, send_forever, &b);
	wait_blocked(&b);
	p3_chan_close(tx);	/* waits for the send to leave */
	join_or_die(t, "close: blocked send");
	tap_ok(b.rc == -P3_ECLOSED, "shutdown %d: close ends a send waiting for room in another "
	       "thread (%s)", progress, p3_strerror(b.rc));
	p3_chan_close(rx);
out:
	free(dst);
}

/* ------------------------------------------------- many threads, one channel */

#define STRESS_THREADS	4
#define STRESS_TENSORS	40	/* per thread */

struct stress {
	struct p3_chan	*tx;
	unsigned int	first;
	int		err;
};

static uint64_t stress_size(uint32_t id)
{
	return 1 + (id * 7919u) % 300000;
}

static void *stress_sender(void *arg)
{
	struct stress *s = arg;
	uint8_t *buf = malloc(300000);
	uint32_t id;

	for (id = s->first; id < s->first + STRESS_TENSORS && !s->err; id++) {
		fill_pattern(buf, stress_size(id), id, 3);
		s->err = p3_chan_send(s->tx, id % 4, id, 3, id, 0, buf, stress_size(id), 10000);
	}
	/* Without a progress thread the tail moves only inside a call. */
	if (!s->err)
		s->err = p3_chan_flush(s->tx, 10000);
	free(buf);
	return NULL;
}

static void *stress_watcher(void *arg)
{
	struct p3_chan *tx = arg;
	int i;

	for (i = 0; i < 200; i++) {
		(void)p3_chan_queued(tx);
		(void)p3_chan_band_status(tx, (unsigned int)i % 4);
		if (i % 50 == 0)
			p3_chan_poll(tx, 1);
	}
	return NULL;
}

static void test_stress(int progress)
{
	struct stress s[STRESS_THREADS];
	struct p3_chan *tx, *rx;
	struct p3_completion d;
	pthread_t t[STRESS_THREADS + 1];
	unsigned int n = STRESS_THREADS * STRESS_TENSORS, i, got = 0, intact = 1, errs = 0;
	uint8_t **dst = calloc(n, sizeof(*dst));

	if (!tap_ok(!pair(4, 4 * MIB, progress, progress, &tx, &rx), "stress %d: pair",
		    progress))
		goto out;
	for (i = 0; i < n; i++) {
		dst[i] = malloc(stress_size(i));
		p3_chan_expect(rx, i, dst[i], stress_size(i), 3);
	}
	for (i = 0; i < STRESS_THREADS; i++) {
		s[i] = (struct stress){ .tx = tx, .first = i * STRESS_TENSORS };
		pthread_create(&t[i], NULL, stress_sender, &s[i]);
	}
	pthread_create(&t[STRESS_THREADS], NULL, stress_watcher, tx);
	while (got < n && p3_chan_poll(rx, 10000) > 0)
		while (p3_chan_next(rx, &d) == 1) {
			intact &= d.bytes == stress_size(d.tensor) &&
				  check_pattern(dst[d.tensor], d.bytes, d.tensor, 3);
			got++;
		}
	for (i = 0; i <= STRESS_THREADS; i++)
		join_or_die(t[i], "stress thread");
	for (i = 0; i < STRESS_THREADS; i++)
		errs += s[i].err != 0;
	tap_ok(got == n && intact && !errs,
	       "stress %d: %d threads sending, one watching, one receiving: %u of %u tensors "
	       "intact, %u send errors", progress, STRESS_THREADS, got, n, errs);
	p3_chan_close(tx);
	p3_chan_close(rx);
out:
	for (i = 0; i < n; i++)
		free(dst[i]);
	free(dst);
}

/* ------------------------------------------------------- plans, whole or not */

static void test_plan_atomic(void)
{
	static uint8_t a[100], big[16 * MIB], c[100];
	struct p3_slice bad[2] = {
		{ .tensor = 0, .msg = 0, .offset = 0, .length = sizeof(a), .level = 0 },
		{ .tensor = 1, .msg = 1, .offset = 0, .length = 10, .level = 0 },
	};
	struct p3_slice two[2] = {
		{ .tensor = 0, .msg = 0, .offset = 0, .length = sizeof(a), .level = 0 },
		{ .tensor = 1, .msg = 1, .offset = 0, .length = 5 * MIB, .level = 0 },
	};
	const void *bad_bufs[2] = { a, NULL }, *two_bufs[2] = { a, big };
	struct p3_chan *tx, *rx;
	struct p3_completion d;
	uint8_t ra[100], rc[100];
	size_t before;
	int r;

	if (!tap_ok(!pair(1, 4 * MIB, 0, 0, &tx, &rx), "plan: pair"))
		return;
	fill_pattern(a, sizeof(a), 0, 0);
	fill_pattern(c, sizeof(c), 2, 0);
	/* A later message without its buffer: nothing of the plan goes. */
	r = p3_chan_send_plan(tx, bad, 2, bad_bufs, 0, 0);
	p3_chan_expect(rx, 0, ra, sizeof(ra), 0);
	p3_chan_expect(rx, 2, rc, sizeof(rc), 0);
	p3_chan_send(tx, 0, 0, 0, 2, 0, c, sizeof(c), 0);
	while (p3_chan_poll(rx, 5000) > 0 && p3_chan_next(rx, &d) == 1 && d.tensor != 2)
		;
	tap_ok(r == -EINVAL && p3_chan_pending(rx) == 1,
	       "plan: a refused plan (%s) queues none of its messages; tensor 0 %s",
	       p3_strerror(r), p3_chan_pending(rx) == 1 ? "never came" : "came anyway");

	/* With lengths, the library bounds every slice: a plan whose second
	 * message reads past its buffer, or names a tensor it was not given,
	 * is refused whole, before anything is queued. */
	{
		struct p3_buf bufs[2] = { { a, sizeof(a) }, { c, sizeof(c) } };
		struct p3_slice over[2] = {
			{ .tensor = 0, .msg = 0, .offset = 0, .length = sizeof(a) },
			{ .tensor = 1, .msg = 1, .offset = 50, .length = 51 },
		};
		uint8_t rb[sizeof(c)] = { 0 };
		size_t q = p3_chan_queued(tx);

		r = p3_chan_send_plan_bufs(tx, over, 2, bufs, 2, 0, 0);
		tap_ok(r == -P3_ERANGE && p3_chan_queued(tx) == q,
		       "plan_bufs: a slice one byte past its buffer: %s, nothing queued",
		       p3_strerror(r));
		r = p3_chan_send_plan_bufs(tx, over, 2, bufs, 1, 0, 0);
		tap_ok(r == -P3_ERANGE && p3_chan_queued(tx) == q,
		       "plan_bufs: a tensor past nbufs: %s, nothing queued", p3_strerror(r));
		over[1].offset = 0;
		over[1].length = sizeof(c);
		p3_chan_expect(rx, 1, rb, sizeof(rb), 0);
		r = p3_chan_send_plan_bufs(tx, over, 2, bufs, 2, 0, 0);
		while (r == 0 && p3_chan_pending(rx) && p3_chan_poll(rx, 5000) > 0)
			while (p3_chan_next(rx, &d) == 1)
				;
		tap_ok(r == 0 && p3_chan_pending(rx) == 0 &&
		       !memcmp(ra, a, sizeof(a)) && !memcmp(rb, c, sizeof(c)),
		       "plan_bufs: the plan in bounds goes whole (%s)", p3_strerror(r));
	}

	/* Fill the queue (the receiver reads nothing), then a plan that cannot
	 * fit at once: -EAGAIN, and the queue is as it was. */
	p3_chan_send(tx, 0, 0, 1, 9, 0, big, sizeof(big), 0);
	before = p3_chan_queued(tx);
	r = p3_chan_send_plan(tx, two, 2, two_bufs, 1, 0);
	tap_ok(r == -EAGAIN && p3_chan_queued(tx) == before,
	       "plan: one that does not fit fails with EAGAIN (%s) and leaves %zu bytes queued "
	       "(now %zu)", p3_strerror(r), before, p3_chan_queued(tx));
	p3_chan_close(tx);
	p3_chan_close(rx);
}

int main(void)
{
	test_progress(1);
	test_progress(0);
	test_fd_without_progress();
	test_shutdown(0);
	test_shutdown(1);
	test_stress(0);
	test_stress(1);
	test_plan_atomic();
	return tap_done();
}
