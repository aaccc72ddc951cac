// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * One progress engine for the whole process, over loopback: 16 channel
 * pairs with progress move data at once while the senders make no call,
 * the process's thread count stays that of one channel, closing channels
 * mid-transfer leaves the others going, a peer process killed mid-transfer
 * is reported within the timeout, timeouts hold, the engine leaves with the
 * last channel and comes back with the next, and a child forked while it
 * runs gets an engine of its own.  Built plain, under ASan+UBSan and TSan.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "p3.h"
#include "tap.h"
#include "util.h"

#define KIB		1024u
#define MIB		(1u << 20)
#define PAIRS		16
#define MSG		(512 * KIB)
#define FLOW_MSGS	4	/* per pair, first round */
#define MID_MSGS	8	/* per pair, second round */
#define BIG_MSGS	64	/* the pairs closed mid-transfer: 32 MiB */
#define KILL_MSGS	64	/* the child's, paced */
#define KILL_MSG	(256 * KIB)
#define TIMEOUT_MS	10000

struct pair {
	struct p3_chan	*tx, *rx;
	uint8_t		*dst;	/* room for MID_MSGS messages */
	unsigned int	got;
	int		bad;
};

static struct pair pairs[PAIRS];
static uint8_t *src;	/* MSG bytes of tensor t's pattern at src[t * MSG] */

static uint64_t now_ms(void)
{
	return p3_now_ns() / 1000000u;
}

/* Entries in /proc/self/task: every thread of this process. */
static int threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static struct p3_listener *listener(char *port, size_t len)
{
	struct p3_chan_opts o;
	struct p3_listener *l = NULL;

	p3_chan_opts_init(&o);
	o.progress = 1;
	if (p3_listen("127.0.0.1", "0", &o, &l))
		return NULL;
	snprintf(port, len, "%d", p3_listener_port(l));
	return l;
}

static int connect_progress(const char *port, unsigned int bands, struct p3_chan **tx)
{
	struct p3_chan_opts o;

	p3_chan_opts_init(&o);
	o.bands = bands;
	o.progress = 1;
	o.max_queued = 64 * MIB;
	return p3_chan_connect("127.0.0.1", port, &o, tx);
}

static int open_pair(struct pair *p, unsigned int bands)
{
	struct p3_listener *l;
	char port[16];
	int err;

	*p = (struct pair){ 0 };
	l = listener(port, sizeof(port));
	if (!l)
		return -EADDRNOTAVAIL;
	err = connect_progress(port, bands, &p->tx);
	if (!err)
		err = p3_accept(l, TIMEOUT_MS, &p->rx);
	p3_listener_close(l);
	if (err < 0) {
		p3_chan_close(p->tx);
		p->tx = NULL;
		return err;
	}
	p->dst = malloc((size_t)MID_MSGS * MSG);
	return p->dst ? 0 : -ENOMEM;
}

static void close_pair(struct pair *p)
{
	p3_chan_close(p->tx);
	p3_chan_close(p->rx);
	free(p->dst);
	*p = (struct pair){ 0 };
}

/* Pair i's tensor t: its own pattern, so a message on the wrong channel
 * or in the wrong place fails the check. */
static uint32_t tensor_id(unsigned int i, unsigned int t)
{
	return i * 64 + t;
}

/* One source per (pair, tensor) would be 16x the memory: the pattern is
 * the tensor's index, and the channel its pair. */
static void fill_src(unsigned int msgs)
{
	unsigned int t;

	for (t = 0; t < msgs; t++)
		fill_pattern(src + (size_t)t * MSG, MSG, t, 0);
}

/* Register pair i's msgs tensors of iteration iter and queue them,
 * spread over the bands, without waiting. */
static int start_round(struct pair *p, unsigned int i, unsigned int msgs, uint64_t iter)
{
	unsigned int t, bands = p3_chan_bands(p->tx);
	int err = 0;

	p->got = 0;
	p->bad = 0;
	for (t = 0; t < msgs && !err; t++)
		err = p3_chan_expect(p->rx, tensor_id(i, t), p->dst + (size_t)t * MSG, MSG, iter);
	for (t = 0; t < msgs && !err; t++)
		err = p3_chan_send(p->tx, t % bands, 0, iter, tensor_id(i, t), 0,
				   src + (size_t)t * MSG, MSG, 0);
	return err;
}

/*
 * The receivers' event loop: one poll() over the p3_chan_fd() of every
 * pair in want (a bit each), completions taken as they come, until each
 * has msgs or the time is up.  Returns the pairs that finished.
 */
static unsigned int event_loop(unsigned int want, unsigned int msgs, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	struct pollfd pfd[PAIRS];
	unsigned int map[PAIRS], i, n, done = 0;
	struct p3_completion d;

	while (now_ms() < end) {
		for (n = 0, i = 0; i < PAIRS; i++) {
			if (!(want & (1u << i)) || pairs[i].got == msgs)
				continue;
			pfd[n] = (struct pollfd){ .fd = p3_chan_fd(pairs[i].rx), .events = POLLIN };
			map[n++] = i;
		}
		if (!n)
			break;
		if (poll(pfd, n, 200) < 0)
			break;
		for (i = 0; i < n; i++) {
			struct pair *p = &pairs[map[i]];

			if (!pfd[i].revents)
				continue;
			while (p3_chan_next(p->rx, &d) == 1) {
				unsigned int t = d.tensor - map[i] * 64;

				p->bad |= d.bytes != MSG || t >= msgs ||
					  !check_pattern(p->dst + (size_t)t * MSG, MSG, t, 0);
				p->got++;
			}
			/* An error or an end, not a completion: stop watching. */
			if (p->got < msgs && p3_chan_poll(p->rx, 0) < 0) {
				p->bad = 1;
				p->got = msgs;
			}
		}
	}
	for (i = 0; i < PAIRS; i++)
		done += (want & (1u << i)) && pairs[i].got == msgs && !pairs[i].bad;
	return done;
}

/* ------------------------------------------------------ many channels */

static int base_threads;

static void test_many(void)
{
	unsigned int i, n, opened = 0;
	int one, many, err = 0;

	if (!tap_ok(!open_pair(&pairs[0], 4), "one pair opened"))
		return;
	one = threads();
	tap_ok(one <= base_threads + 1 && engines_named() == 1,
	       "one pair with progress: %d threads (baseline %d), %d named p3-engine", one,
	       base_threads, engines_named());
	for (i = 1, opened = 1; i < PAIRS && !err; i++, opened++)
		err = open_pair(&pairs[i], 4);
	if (!tap_ok(!err, "%u pairs opened (%s)", opened, p3_strerror(err)))
		exit(tap_done());
	many = threads();
	tap_ok(many == one && engines_named() == 1,
	       "%d channels with progress: %d threads, as with 2 (a thread per channel would be "
	       "%d)", 2 * PAIRS, many, base_threads + 2 * PAIRS);

	fill_src(MID_MSGS);
	for (i = 0; i < PAIRS && !err; i++)
		err = start_round(&pairs[i], i, FLOW_MSGS, 0);
	tap_ok(!err, "%u MiB queued on %d senders without waiting (%s)",
	       PAIRS * FLOW_MSGS * MSG / MIB, PAIRS, p3_strerror(err));
	n = event_loop((1u << PAIRS) - 1, FLOW_MSGS, 30000);
	tap_ok(n == PAIRS, "data flows on every channel at once while the senders make no call: "
	       "%u of %d pairs got all %d messages intact", n, PAIRS, FLOW_MSGS);
	for (i = 0, n = 0; i < PAIRS; i++)
		n += p3_chan_queued(pairs[i].tx) == 0;
	tap_ok(n == PAIRS, "every sender's queue is empty (%u of %d)", n, PAIRS);
	tap_ok(threads() == one, "still %d threads after the transfer (%d)", one, threads());
}

/* ------------------------------------------- closing while others flow */

#define CLOSE_RX	3	/* its receiver closes: its sender must fail */
#define CLOSE_TX	5	/* its sender closes: its receiver must fail */

static void test_close_mid(void)
{
	static const unsigned int cut[2] = { CLOSE_RX, CLOSE_TX };
	unsigned int i, k, n, want = 0, t;
	size_t q_rx, q_tx;
	uint64_t t0, cut_at;
	int err = 0, r;

	for (i = 0; i < PAIRS && !err; i++) {
		if (i == CLOSE_RX || i == CLOSE_TX)
			continue;
		err = start_round(&pairs[i], i, MID_MSGS, 1);
		want |= 1u << i;
	}
	tap_ok(!err, "second round queued on %d pairs (%s)", PAIRS - 2, p3_strerror(err));
	/* The two pairs to cut get far more than their sockets hold, queued
	 * by reference from the same source (it lives to the end). */
	for (k = 0; k < 2 && !err; k++) {
		i = cut[k];
		for (t = 0; t < BIG_MSGS && !err; t++)
			err = p3_chan_send_ref(pairs[i].tx, t % 4, 0, 1, tensor_id(i, t), 0,
					       src + (size_t)(t % MID_MSGS) * MSG, MSG, 0);
	}
	/* The receiver that stays takes every tensor (their buffers overlap:
	 * their contents go unchecked), so that what its sender's sockets
	 * still hold drains and the end arrives behind it.  A receiver that
	 * stopped reading would see no end until the peer timeout: TCP sends
	 * the FIN behind the data, into a closed window. */
	for (t = 0; t < BIG_MSGS && !err; t++)
		err = p3_chan_expect(pairs[CLOSE_TX].rx, tensor_id(CLOSE_TX, t),
				     pairs[CLOSE_TX].dst + (size_t)(t % MID_MSGS) * MSG, MSG, 1);
	/* The one that closes reads nothing: its close resets the sender's
	 * connections (a socket closed with unread data does). */
	q_rx = p3_chan_queued(pairs[CLOSE_RX].tx);
	q_tx = p3_chan_queued(pairs[CLOSE_TX].tx);
	cut_at = now_ms();
	p3_chan_close(pairs[CLOSE_RX].rx);
	pairs[CLOSE_RX].rx = NULL;
	p3_chan_close(pairs[CLOSE_TX].tx);
	pairs[CLOSE_TX].tx = NULL;
	tap_ok(!err && q_rx > 4 * MIB && q_tx > 4 * MIB,
	       "a receiver and a sender closed mid-transfer (%zu and %zu bytes still queued), "
	       "while %d pairs move theirs", q_rx, q_tx, PAIRS - 2);
	n = event_loop(want, MID_MSGS, 30000);
	tap_ok(n == PAIRS - 2, "the other pairs are untouched: %u of %d got all %d messages "
	       "intact", n, PAIRS - 2, MID_MSGS);

	t0 = now_ms();
	r = p3_chan_flush(pairs[CLOSE_RX].tx, TIMEOUT_MS);
	tap_ok(r < 0 && r != -ETIMEDOUT && now_ms() - t0 < TIMEOUT_MS,
	       "the sender whose receiver closed reports %s (%llu ms after the close)",
	       p3_strerror(r), (unsigned long long)(now_ms() - cut_at));
	t0 = now_ms();
	do
		r = p3_chan_poll(pairs[CLOSE_TX].rx, TIMEOUT_MS);
	while (r > 0 && p3_chan_next(pairs[CLOSE_TX].rx, &(struct p3_completion){ 0 }) &&
	       now_ms() - t0 < TIMEOUT_MS);
	tap_ok(r < 0 && r != -ETIMEDOUT && now_ms() - t0 < TIMEOUT_MS,
	       "the receiver whose sender closed reports %s (%llu ms after the close)",
	       p3_strerror(r), (unsigned long long)(now_ms() - cut_at));
}

/* ------------------------------------------------------ bounded waits */

static void test_timeout(void)
{
	struct pair *p = &pairs[0];
	uint64_t t0;
	int r;

	/* A tensor nobody sends: the wait ends with its timeout, 0. */
	p3_chan_expect(p->rx, 999, p->dst, MSG, 2);
	t0 = now_ms();
	r = p3_chan_poll(p->rx, 300);
	t0 = now_ms() - t0;
	tap_ok(r == 0 && t0 >= 250 && t0 < 3000,
	       "poll(300) on an idle channel served by the engine: %d after %llu ms", r,
	       (unsigned long long)t0);
	p3_chan_cancel(p->rx, 999);
}

/* ------------------------------------------------ a peer process killed */

static pid_t child;
static struct p3_listener *kill_l;
static int kill_pipe[2], go_pipe[2];	/* child to parent: connected; back: go */

/* The child: one sender, without progress (it runs no thread: see
 * spawn_child()), sending paced slices for longer than the parent waits,
 * then holding the channel open. */
static void child_main(const char *port)
{
	struct p3_chan_opts o;
	struct p3_chan *tx;
	uint8_t *buf = malloc(KILL_MSG);
	unsigned int t;
	char ok = 1;

	alarm(60);	/* never outlive a parent that failed */
	p3_chan_opts_init(&o);
	o.bands = 2;
	if (!buf || p3_chan_connect("127.0.0.1", port, &o, &tx))
		_exit(2);
	/* The parent accepts at test time, seconds later: sending into the
	 * backlog would fill the sockets and time out. */
	if (write(kill_pipe[1], &ok, 1) != 1 || read(go_pipe[0], &ok, 1) != 1)
		_exit(4);
	for (t = 0; t < KILL_MSGS; t++) {
		fill_pattern(buf, KILL_MSG, t, 0);
		if (p3_chan_send(tx, t % 2, 0, 0, t, 0, buf, KILL_MSG, TIMEOUT_MS) ||
		    p3_chan_flush(tx, TIMEOUT_MS))
			_exit(3);
		poll(NULL, 0, 20);
	}
	pause();
	_exit(0);
}

/* Before any thread: fork() of a threaded process is a hazard of its own
 * (and ThreadSanitizer refuses it); the child is ready by test time. */
static void spawn_child(void)
{
	char port[16];

	kill_l = listener(port, sizeof(port));
	if (!kill_l || pipe(kill_pipe) || pipe(go_pipe))
		return;
	child = fork();
	if (!child)
		child_main(port);
}

static void test_peer_killed(void)
{
	struct p3_chan *rx = NULL;
	struct p3_completion d;
	uint8_t *dst = malloc((size_t)KILL_MSGS * KILL_MSG);
	unsigned int t, got = 0;
	uint64_t t0;
	char ok = 0;
	int r, status;

	if (!tap_ok(child > 0 && read(kill_pipe[0], &ok, 1) == 1 &&
		    p3_accept(kill_l, TIMEOUT_MS, &rx) == 0, "peer process: its channel accepted"))
		goto out;
	for (t = 0; t < KILL_MSGS; t++)
		p3_chan_expect(rx, t, dst + (size_t)t * KILL_MSG, KILL_MSG, 0);
	(void)!write(go_pipe[1], &ok, 1);
	while (got < 3 && p3_chan_poll(rx, TIMEOUT_MS) > 0)
		while (p3_chan_next(rx, &d) == 1)
			got += d.bytes == KILL_MSG &&
			       check_pattern(dst + (size_t)d.tensor * KILL_MSG, KILL_MSG, d.tensor, 0);
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	child = 0;
	t0 = now_ms();
	do
		r = p3_chan_poll(rx, TIMEOUT_MS);
	while (r > 0 && p3_chan_next(rx, &d) == 1 && now_ms() - t0 < TIMEOUT_MS);
	tap_ok(got >= 3 && p3_chan_pending(rx) > 0 && r < 0 && r != -ETIMEDOUT &&
	       now_ms() - t0 < TIMEOUT_MS,
	       "peer process killed mid-transfer (%u slices in, %zu pending): poll reports %s "
	       "after %llu ms", got, p3_chan_pending(rx), p3_strerror(r),
	       (unsigned long long)(now_ms() - t0));
out:
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	}
	p3_chan_close(rx);
	p3_listener_close(kill_l);
	free(dst);
}

/* --------------------------------------------- closing from many threads */

static void *close_some(void *arg)
{
	unsigned int i, first = (unsigned int)(uintptr_t)arg;

	for (i = first; i < PAIRS; i += 4)
		close_pair(&pairs[i]);
	return NULL;
}

static void test_close_all(void)
{
	pthread_t t[4];
	unsigned int i;
	int err = 0, after;

	/* Still moving data as they close: each pair's last round. */
	for (i = 0; i < PAIRS && !err; i++)
		if (pairs[i].tx && pairs[i].rx)
			err = start_round(&pairs[i], i, FLOW_MSGS, 3);
	for (i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, close_some, (void *)(uintptr_t)i);
	for (i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	after = threads();
	tap_ok(!err && after == base_threads && !engines_named(),
	       "every channel closed by 4 threads at once mid-transfer: %d threads, the "
	       "baseline %d (the engine left with the last)", after, base_threads);

	/* And it comes back with the next channel. */
	if (!tap_ok(!open_pair(&pairs[0], 1), "a pair opened after the engine left"))
		return;
	err = start_round(&pairs[0], 0, 1, 0);
	tap_ok(!err && event_loop(1, 1, TIMEOUT_MS) == 1 && engines_named() == 1,
	       "its data flows: the engine started again");
	close_pair(&pairs[0]);
}

/* ------------------------------------------- fork() while the engine runs */

/* A child forked from a process whose engine runs has no engine thread:
 * a channel it opens must start its own (and not share the parent's
 * wake-ups).  ThreadSanitizer refuses threads after a threaded fork. */
static void test_fork(void)
{
#ifdef __SANITIZE_THREAD__
	tap_ok(1, "fork with the engine running # SKIP not under ThreadSanitizer");
#else
	struct pair *p = &pairs[0];
	int status = -1;
	pid_t pid;

	if (!tap_ok(!open_pair(p, 1), "fork: a pair open in the parent"))
		return;
	pid = fork();
	if (!pid) {
		struct pair *q = &pairs[1];

		alarm(30);
		if (open_pair(q, 1) || start_round(q, 1, 2, 0))
			_exit(2);
		_exit(event_loop(1u << 1, 2, TIMEOUT_MS) == 1 && engines_named() == 1 ? 0 : 3);
	}
	waitpid(pid, &status, 0);
	tap_ok(WIFEXITED(status) && !WEXITSTATUS(status),
	       "fork: the child's own channel moves data on an engine of its own (status %d)",
	       status);
	tap_ok(!start_round(p, 0, 2, 1) && event_loop(1, 2, TIMEOUT_MS) == 1,
	       "fork: the parent's channel still moves data");
	close_pair(p);
#endif
}

#ifndef __SANITIZE_THREAD__	/* test_fork_holds() alone uses these */
/* CPU ticks (utime + stime) the engine thread has used, or -1. */
static long engine_ticks(void)
{
	char tid[256], path[300];
	unsigned long ut, st;
	FILE *f;
	int n;

	if (engine_tasks(tid, sizeof(tid)) != 1)
		return -1;
	snprintf(path, sizeof(path), "/proc/self/task/%s/stat", tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	/* utime and stime are fields 14 and 15; the name (2) has no space. */
	n = fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
	fclose(f);
	return n == 2 ? (long)(ut + st) : -1;
}

/* Descriptors open in this process, a bit each (those below 1024). */
static void open_fds(uint64_t set[16])
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int fd;

	memset(set, 0, 16 * sizeof(*set));
	while (d && (e = readdir(d))) {
		fd = atoi(e->d_name);
		if (e->d_name[0] != '.' && fd < 1024 && fd != dirfd(d))
			set[fd / 64] |= 1ull << (fd % 64);
	}
	if (d)
		closedir(d);
}
#endif

/*
 * A child forked without exec holds every socket the parent has.  When
 * the parent's engine closes a receiving socket at its peer's end, the
 * child's copy keeps it open, and the epoll set would keep it (at EOF,
 * readable) for ever: the engine must not spin on it.  The child closes
 * its copies of the sender's sockets, so that the sender's close ends
 * the connection.
 */
static void test_fork_holds(void)
{
#ifdef __SANITIZE_THREAD__
	tap_ok(1, "fork holding the sockets # SKIP not under ThreadSanitizer");
#else
	struct pair *q = &pairs[1];
	struct p3_chan *tx = NULL, *rx = NULL;
	uint64_t before[16], after[16];
	struct p3_listener *l;
	long t0, t1, hz = sysconf(_SC_CLK_TCK);
	char port[16];
	int fd, status, r = 0;
	pid_t pid;

	if (!tap_ok(!open_pair(q, 1), "fork holding: a second pair open"))
		return;
	l = listener(port, sizeof(port));
	open_fds(before);
	if (l && !connect_progress(port, 2, &tx)) {
		open_fds(after);	/* the sender's sockets are the new ones */
		p3_accept(l, TIMEOUT_MS, &rx);
	}
	p3_listener_close(l);
	if (!tap_ok(tx && rx, "fork holding: a pair of 2 bands open"))
		goto out;
	pid = fork();
	if (!pid) {
		alarm(30);
		for (fd = 0; fd < 1024; fd++)
			if ((after[fd / 64] & ~before[fd / 64]) >> (fd % 64) & 1)
				close(fd);
		pause();
		_exit(0);
	}
	usleep(200000);		/* the child has closed its copies */
	p3_chan_close(tx);
	tx = NULL;
	for (t0 = 0; t0 < 50 && (r = p3_chan_poll(rx, 100)) >= 0; t0++)
		;
	tap_ok(r < 0, "fork holding: the receiver sees its sender's end (%s)", p3_strerror(r));
	t0 = engine_ticks();
	usleep(1000000);
	t1 = engine_ticks();
	tap_ok(t0 >= 0 && t1 >= 0 && t1 - t0 < hz / 4,
	       "fork holding: the engine idles beside a socket closed here and open in a child "
	       "(%ld ms of CPU in 1 s)", (t1 - t0) * 1000 / hz);
	tap_ok(!start_round(q, 1, 2, 0) && event_loop(1u << 1, 2, TIMEOUT_MS) == 1,
	       "fork holding: the other pair still moves data");
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
out:
	p3_chan_close(tx);
	p3_chan_close(rx);
	close_pair(q);
#endif
}

static void *nothing(void *arg)
{
	return arg;
}

int main(void)
{
	pthread_t t;

	signal(SIGPIPE, SIG_IGN);
	src = malloc((size_t)MID_MSGS * MSG);
	spawn_child();
	/* A sanitizer's own thread (ThreadSanitizer's) starts with the first
	 * thread: it belongs to the baseline. */
	pthread_create(&t, NULL, nothing, NULL);
	pthread_join(t, NULL);
	base_threads = threads();
	tap_diag("baseline: %d threads", base_threads);
	test_many();
	test_timeout();
	test_close_mid();
	test_peer_killed();
	test_close_all();
	test_fork();
	test_fork_holds();
	free(src);
	return tap_done();
}
