// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The channel over loopback (127.0.0.1 / ::1 only): many tensors of random
 * sizes and levels checked byte for byte, plans with merged messages,
 * pipelined iterations, backpressure, in-band priority and failures.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p3.h"
#include "tap.h"
#include "util.h"

#define GUARD	64
#define GUARD_BYTE 0xa5

struct tensor {
	uint32_t	id;
	uint64_t	size;
	unsigned int	level;
	uint8_t		*mem;		/* GUARD + size + GUARD */
	int		done;
};

static uint8_t *guarded(uint64_t size)
{
	uint8_t *m = malloc(size + 2 * GUARD);

	memset(m, GUARD_BYTE, size + 2 * GUARD);
	return m;
}

static int guards_ok(const struct tensor *t)
{
	return all_bytes(t->mem, GUARD, GUARD_BYTE) &&
	       all_bytes(t->mem + GUARD + t->size, GUARD, GUARD_BYTE);
}

static char port[16];

static struct p3_listener *listen_any(const char *host, uint32_t max_payload)
{
	struct p3_chan_opts o;
	struct p3_listener *l = NULL;

	p3_chan_opts_init(&o);
	if (max_payload)
		o.max_payload = max_payload;
	if (p3_listen(host, "0", &o, &l))
		return NULL;
	snprintf(port, sizeof(port), "%d", p3_listener_port(l));
	return l;
}

static struct p3_chan *connect_to(const char *host, unsigned int bands, size_t max_queued)
{
	struct p3_chan_opts o;
	struct p3_chan *c = NULL;
	int err;

	p3_chan_opts_init(&o);
	o.bands = bands;
	if (max_queued)
		o.max_queued = max_queued;
	err = p3_chan_connect(host, port, &o, &c);
	if (err)
		tap_diag("connect: %s", p3_strerror(err));
	return c;
}

/* ------------------------------------------------ random tensors, threads */

struct sender_job {
	const char	*host;
	unsigned int	bands;
	struct tensor	*t;
	size_t		n;
	uint64_t	iters;		/* send iterations 0..iters-1 */
	uint64_t	seed;
	int		err;
	uint64_t	chan_id;
};

/* Cut a tensor into random slices and queue them in a random order. */
static int send_tensor(struct p3_chan *c, const struct tensor *t, uint64_t iter, uint64_t *rs,
		       uint8_t *scratch)
{
	uint64_t off[64], len[64], o = 0, k, n = 0, j, tmp;
	int err;

	while (o < t->size) {
		k = n == 63 ? t->size - o : rnd_range(rs, 1, 300000);
		if (k > t->size - o)
			k = t->size - o;
		off[n] = o;
		len[n++] = k;
		o += k;
	}
	for (k = n; k > 1; k--) {
		j = rnd_next(rs) % k;
		tmp = off[k - 1], off[k - 1] = off[j], off[j] = tmp;
		tmp = len[k - 1], len[k - 1] = len[j], len[j] = tmp;
	}
	fill_pattern(scratch, t->size, t->id, iter);
	for (k = 0; k < n; k++) {
		err = p3_chan_send(c, t->level, t->id, iter, t->id, off[k], scratch + off[k],
				   len[k], -1);
		if (err)
			return err;
	}
	return 0;
}

static void *sender(void *arg)
{
	struct sender_job *j = arg;
	uint64_t rs = j->seed, it, max = 0;
	struct p3_chan *c = connect_to(j->host, j->bands, 0);
	uint8_t *scratch;
	size_t i;

	if (!c) {
		j->err = -ECONNREFUSED;
		return NULL;
	}
	j->chan_id = p3_chan_id(c);
	for (i = 0; i < j->n; i++)
		max = j->t[i].size > max ? j->t[i].size : max;
	scratch = malloc(max);
	for (it = 0; it < j->iters && !j->err; it++)
		for (i = 0; i < j->n && !j->err; i++)
			j->err = send_tensor(c, &j->t[i], it, &rs, scratch);
	if (!j->err)
		j->err = p3_chan_flush(c, 30000);
	free(scratch);
	p3_chan_close(c);
	return NULL;
}

static void make_tensors(struct tensor *t, size_t n, unsigned int bands, uint64_t *rs)
{
	uint64_t r;
	size_t i;

	for (i = 0; i < n; i++) {
		r = rnd_range(rs, 0, 99);
		t[i].id = (uint32_t)(i * 7919 + 3);	/* sparse ids exercise the table */
		t[i].size = r < 70 ? rnd_range(rs, 1, 4096)
			    : r < 95 ? rnd_range(rs, 4097, 262144) : rnd_range(rs, 262145, 3000000);
		t[i].level = (unsigned int)rnd_range(rs, 0, bands - 1);
		t[i].mem = guarded(t[i].size);
		t[i].done = 0;
	}
}

static void free_tensors(struct tensor *t, size_t n)
{
	while (n--)
		free(t[n].mem);
}

static struct tensor *find(struct tensor *t, size_t n, uint32_t id)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (t[i].id == id)
			return &t[i];
	return NULL;
}

struct rx_result {
	size_t	completions, unknown, dup, bad_bytes, bad_time;
	int	err;
};

/* Poll until every registered tensor is in, collecting completions. */
static void receive_all(struct p3_chan *rx, struct tensor *t, size_t n, uint64_t iter,
			struct rx_result *r)
{
	uint64_t deadline = p3_now_ns() + 60ull * 1000000000;
	struct p3_completion d;
	struct tensor *x;
	int rc;

	while (p3_chan_pending(rx) && p3_now_ns() < deadline) {
		rc = p3_chan_poll(rx, 1000);
		if (rc < 0) {
			r->err = rc;
			return;
		}
		while (p3_chan_next(rx, &d) == 1) {
			r->completions++;
			x = find(t, n, d.tensor);
			if (!x || d.iter != iter) {
				r->unknown++;
				continue;
			}
			r->dup += x->done++ > 0;
			r->bad_bytes += d.bytes != x->size;
			r->bad_time += !d.t_first_ns || d.t_first_ns > d.t_done_ns;
		}
	}
	if (p3_chan_pending(rx))
		r->err = -ETIMEDOUT;
}

static int verify(struct tensor *t, size_t n, uint64_t iter, int *guards)
{
	size_t i, good = 0;

	*guards = 1;
	for (i = 0; i < n; i++) {
		good += check_pattern(t[i].mem + GUARD, t[i].size, t[i].id, iter);
		*guards &= guards_ok(&t[i]);
	}
	return good == n;
}

static void test_random_tensors(const char *host, unsigned int bands, size_t n, uint64_t seed)
{
	struct sender_job j = { .host = host, .bands = bands, .n = n, .iters = 1, .seed = seed };
	struct rx_result r = { 0 };
	struct tensor *t = calloc(n, sizeof(*t));
	struct p3_listener *l = listen_any(host, 0);
	struct p3_chan *rx = NULL;
	uint64_t rs = seed, total = 0;
	pthread_t th;
	int guards;
	size_t i;

	if (!ok(l != NULL, "%s: listen on an ephemeral port", host))
		return;
	make_tensors(t, n, bands, &rs);
	j.t = t;
	pthread_create(&th, NULL, sender, &j);
	ok(p3_accept(l, 10000, &rx) == 0 && rx && p3_chan_bands(rx) == bands,
	   "%s: accepted a %u-band channel", host, bands);
	for (i = 0; rx && i < n; i++) {
		p3_chan_expect(rx, t[i].id, t[i].mem + GUARD, t[i].size, 0);
		total += t[i].size;
	}
	if (rx)
		receive_all(rx, t, n, 0, &r);
	pthread_join(th, NULL);
	ok(!j.err && !r.err, "%s: %zu tensors, %.1f MB, sent and received (%s / %s)", host, n,
	   total / 1e6, p3_strerror(j.err), p3_strerror(r.err));
	ok(r.completions == n && !r.unknown && !r.dup && !r.bad_bytes && !r.bad_time,
	   "%s: exactly one completion per tensor, sizes and timestamps right", host);
	ok(verify(t, n, 0, &guards), "%s: every tensor byte-exact", host);
	ok(guards, "%s: nothing written outside any tensor", host);
	ok(rx && p3_chan_id(rx) == j.chan_id, "%s: channel id from the hello", host);
	p3_chan_close(rx);
	p3_listener_close(l);
	free_tensors(t, n);
	free(t);
}

/* ---------------------------------------------------------- plan + merge */

static void test_plan_send(void)
{
	struct p3_tensor model[150];
	struct tensor t[150];
	struct p3_slice *s;
	struct p3_plan_opts po = { .bands = 4, .alpha_s = 2e-5, .beta_s_per_byte = 1e-9 };
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct p3_chan *tx, *rx = NULL;
	struct rx_result r = { 0 };
	const void *bufs[150];
	uint64_t rs = 99;
	size_t ns, i, merged = 0;
	int guards, err;

	for (i = 0; i < 150; i++) {
		uint64_t bytes = rnd_range(&rs, 0, 9) ? rnd_range(&rs, 4, 9000)
						      : rnd_range(&rs, 1, 900000);

		model[i] = (struct p3_tensor){ NULL, bytes, (uint32_t)i };
		t[i] = (struct tensor){ .id = (uint32_t)i, .size = model[i].bytes,
					.mem = guarded(model[i].bytes) };
		fill_pattern(t[i].mem + GUARD, t[i].size, t[i].id, 4);
		bufs[i] = t[i].mem + GUARD;
	}
	ok(p3_plan(model, 150, &po, &s, &ns) == 0, "plan a 150-layer model into 4 bands");
	for (i = 1; i < ns; i++)
		merged += s[i].msg == s[i - 1].msg;
	tx = connect_to("127.0.0.1", 4, 0);
	err = tx ? p3_chan_send_plan(tx, s, ns, bufs, 4, -1) : -1;
	ok(!err && merged > 20, "queued %zu slices, %zu of them merged into neighbours", ns,
	   merged);
	ok(p3_accept(l, 5000, &rx) == 0, "accepted");
	for (i = 0; i < 150; i++) {
		memset(t[i].mem + GUARD, 0, t[i].size);
		p3_chan_expect(rx, t[i].id, t[i].mem + GUARD, t[i].size, 4);
	}
	/* One thread: pump the sender while polling the receiver. */
	while (p3_chan_pending(rx) && !r.err) {
		p3_chan_poll(tx, 0);
		r.err = p3_chan_poll(rx, 10) < 0;
		while (p3_chan_next(rx, &(struct p3_completion){ 0 }) == 1)
			r.completions++;
	}
	ok(!r.err && r.completions == 150 && verify(t, 150, 4, &guards) && guards,
	   "plan with merged messages delivered byte-exact");
	p3_plan_free(s);
	p3_chan_close(tx);
	p3_chan_close(rx);
	p3_listener_close(l);
	free_tensors(t, 150);
}

/* -------------------------------------------------- pipelined iterations */

static void test_iterations(void)
{
	struct sender_job j = { .host = "127.0.0.1", .bands = 3, .n = 40, .iters = 3, .seed = 5 };
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct tensor t[40];
	struct p3_chan *rx = NULL;
	struct rx_result r = { 0 };
	uint64_t rs = 17, it;
	int all = 1, guards = 1, g;
	pthread_t th;
	size_t i;

	make_tensors(t, 40, 3, &rs);
	j.t = t;
	pthread_create(&th, NULL, sender, &j);
	p3_accept(l, 10000, &rx);
	/* The sender runs ahead: frames of iteration k+1 wait unread until
	 * the tensor is registered again. */
	for (it = 0; rx && it < 3; it++) {
		for (i = 0; i < 40; i++) {
			t[i].done = 0;
			p3_chan_expect(rx, t[i].id, t[i].mem + GUARD, t[i].size, it);
		}
		memset(&r, 0, sizeof(r));
		receive_all(rx, t, 40, it, &r);
		all &= !r.err && r.completions == 40 && verify(t, 40, it, &g);
		guards &= g;
	}
	pthread_join(th, NULL);
	ok(rx && all && !j.err, "3 pipelined iterations of 40 tensors, each byte-exact");
	ok(guards, "re-registered buffers: no write outside them");
	p3_chan_close(rx);
	p3_listener_close(l);
	free_tensors(t, 40);
}

/* ---------------------------------------------------------- backpressure */

static void test_backpressure(void)
{
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct p3_chan *tx = connect_to("127.0.0.1", 2, 256 << 10), *rx = NULL;
	static uint8_t blk[64 << 10];
	uint64_t sent = 0, got = 0;
	struct p3_completion d;
	int err = 0, i, max_ok = 1;
	static uint8_t sink[400][64 << 10];

	/* Nobody reads yet: the kernel's buffers fill, then libp3's queue. */
	for (i = 0; i < 400; i++) {
		err = p3_chan_send(tx, 1, 0, 0, (uint32_t)i, 0, blk, sizeof(blk), 0);
		if (err)
			break;
		sent++;
		max_ok &= p3_chan_queued(tx) <= (256 << 10);
	}
	ok_err(err, -EAGAIN, "non-blocking send returns EAGAIN once 256 KiB are queued");
	ok(max_ok, "the queue never exceeds the memory bound (%llu messages went first)",
	   (unsigned long long)sent);
	ok(p3_chan_send(tx, 1, 0, 0, 9999, 0, blk, sizeof(blk), 50) == -EAGAIN,
	   "send with a 50 ms timeout gives up with EAGAIN");
	p3_accept(l, 5000, &rx);
	for (i = 0; rx && i < 400; i++)
		p3_chan_expect(rx, (uint32_t)i, sink[i], sizeof(blk), 0);
	/* Now drain while sending the rest with a generous timeout. */
	for (i = (int)sent; rx && i < 400; i++) {
		while ((err = p3_chan_send(tx, 1, 0, 0, (uint32_t)i, 0, blk, sizeof(blk), 0)) ==
		       -EAGAIN)
			p3_chan_poll(rx, 1);
		if (err)
			break;
	}
	while (rx && p3_chan_pending(rx) && err == 0) {
		p3_chan_poll(tx, 0);
		if (p3_chan_poll(rx, 10) < 0)
			break;
		while (p3_chan_next(rx, &d) == 1)
			got++;
	}
	ok(!err && got == 400, "all 400 messages arrive once the receiver reads (%llu)",
	   (unsigned long long)got);
	p3_chan_close(tx);
	p3_chan_close(rx);
	p3_listener_close(l);
}

/* ----------------------------------------------------- in-band priority */

/* Queue bulk while the receiver sleeps, then one urgent message; report
 * the urgent one's position in completion order. */
static int urgent_position(uint64_t bulk_iter, uint32_t bulk_prio, uint64_t urg_iter,
			   uint32_t urg_prio, int *err)
{
	static uint8_t bulk[40][256 << 10], urg[64 << 10];
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct p3_chan *tx = connect_to("127.0.0.1", 1, 0), *rx = NULL;
	struct p3_completion d;
	int i, pos = -1, n = 0;

	*err = 0;
	for (i = 0; i < 40; i++)
		*err |= p3_chan_send(tx, 0, bulk_prio, bulk_iter, 100 + i, 0, bulk[i],
				     sizeof(bulk[i]), 0);
	*err |= p3_chan_send(tx, 0, urg_prio, urg_iter, 1, 0, urg, sizeof(urg), 0);
	p3_accept(l, 5000, &rx);
	for (i = 0; rx && i < 40; i++)
		p3_chan_expect(rx, 100 + i, bulk[i], sizeof(bulk[i]), bulk_iter);
	if (rx)
		p3_chan_expect(rx, 1, urg, sizeof(urg), urg_iter);
	while (rx && p3_chan_pending(rx)) {
		p3_chan_poll(tx, 0);
		if (p3_chan_poll(rx, 10) < 0)
			break;
		while (p3_chan_next(rx, &d) == 1) {
			if (d.tensor == 1)
				pos = n;
			n++;
		}
	}
	*err |= n != 41;
	p3_chan_close(tx);
	p3_chan_close(rx);
	p3_listener_close(l);
	return pos;
}

static void test_priority(void)
{
	int err, pos;

	pos = urgent_position(0, 10, 0, 0, &err);
	ok(!err && pos >= 0 && pos <= 12,
	   "a more urgent message queued last overtakes queued bulk (done %d of 41)", pos + 1);
	pos = urgent_position(2, 0, 1, 9, &err);
	ok(!err && pos >= 0 && pos <= 12,
	   "an older iteration goes before a newer one (done %d of 41)", pos + 1);
}

/* ---------------------------------------------------- several channels */

static void test_two_channels(void)
{
	struct sender_job j[2] = {
		{ .host = "127.0.0.1", .bands = 8, .n = 30, .iters = 1, .seed = 1 },
		{ .host = "127.0.0.1", .bands = 5, .n = 30, .iters = 1, .seed = 2 },
	};
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct tensor t[2][30];
	struct p3_chan *rx[2] = { NULL, NULL };
	struct rx_result r[2] = { { 0 } };
	pthread_t th[2];
	uint64_t rs = 3;
	int k, i, guards, good = 1, which;

	for (k = 0; k < 2; k++) {
		make_tensors(t[k], 30, j[k].bands, &rs);
		j[k].t = t[k];
		pthread_create(&th[k], NULL, sender, &j[k]);
	}
	p3_accept(l, 10000, &rx[0]);
	p3_accept(l, 10000, &rx[1]);
	for (k = 0; k < 2 && rx[k]; k++) {
		which = p3_chan_bands(rx[k]) == 8 ? 0 : 1;
		for (i = 0; i < 30; i++)
			p3_chan_expect(rx[k], t[which][i].id, t[which][i].mem + GUARD,
				       t[which][i].size, 0);
		receive_all(rx[k], t[which], 30, 0, &r[k]);
		good &= !r[k].err && r[k].completions == 30 && verify(t[which], 30, 0, &guards);
		good &= p3_chan_id(rx[k]) == j[which].chan_id;
	}
	for (k = 0; k < 2; k++)
		pthread_join(th[k], NULL);
	ok(rx[0] && rx[1] && good, "two channels connecting at once are told apart by id");
	for (k = 0; k < 2; k++) {
		p3_chan_close(rx[k]);
		free_tensors(t[k], 30);
	}
	p3_listener_close(l);
}

/* -------------------------------------------------------------- failures */

static void test_failures(void)
{
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct p3_chan *tx, *rx = NULL;
	static uint8_t big[1 << 20], a[1000], b[100], c9[100];
	int err = 0, i, rc;

	ok_err(p3_accept(l, 100, &rx), -ETIMEDOUT, "accept with nothing to accept times out");
	tx = connect_to("127.0.0.1", 2, 0);
	p3_accept(l, 5000, &rx);
	ok(p3_chan_expect(rx, 1, a, sizeof(a), 3) == 0 &&
	   p3_chan_expect(rx, 1, a, sizeof(a), 3) == -EBUSY, "expect twice: EBUSY");
	ok(p3_chan_expect(rx, 2, a, 0, 0) == -EINVAL, "expect 0 bytes: EINVAL");
	ok(p3_chan_send(tx, 2, 0, 0, 1, 0, a, 10, 0) == -P3_ELEVEL, "send on level >= bands: P3_ELEVEL");
	ok(p3_chan_send(tx, 0, 0, 0, 1, UINT64_MAX - 5, a, 10, 0) == -EINVAL,
	   "send with offset + length past 2^64: EINVAL");

	/* A frame for a tensor nobody registered waits, it is not dropped. */
	p3_chan_send(tx, 1, 0, 0, 7, 0, b, sizeof(b), 0);
	p3_chan_flush(tx, 1000);
	rc = p3_chan_poll(rx, 200);
	ok(rc == 0 && p3_chan_band_status(rx, 1) == 0,
	   "frame for an unregistered tensor waits without error");
	memset(b, 0x11, sizeof(b));
	p3_chan_expect(rx, 7, b, sizeof(b), 0);
	rc = p3_chan_poll(rx, 2000);
	ok(rc == 1 && all_bytes(b, sizeof(b), 0), "...and lands once registered");
	p3_chan_next(rx, &(struct p3_completion){ 0 });
	ok(p3_chan_expect(rx, 7, b, sizeof(b), 0) == 0 &&
	   p3_chan_expect(rx, 8, b, sizeof(b), 0) == 0, "re-register after completion");

	/* Done at iteration 5, a tensor cannot be registered for 4. */
	p3_chan_expect(rx, 9, c9, sizeof(c9), 5);
	p3_chan_send(tx, 1, 0, 5, 9, 0, b, sizeof(b), 0);
	p3_chan_flush(tx, 1000);
	rc = p3_chan_poll(rx, 2000);
	p3_chan_next(rx, &(struct p3_completion){ 0 });
	ok(rc == 1, "tensor 9 of iteration 5 arrives");
	ok_err(p3_chan_expect(rx, 9, c9, sizeof(c9), 4), -P3_ESTALE,
	       "register an older iteration than the last: P3_ESTALE");

	/* The sender goes away with tensors 1, 7 and 8 still missing. */
	p3_chan_close(tx);
	rc = p3_chan_poll(rx, 2000);
	ok_err(rc, -P3_EINCOMPLETE, "peer closed with tensors missing: EINCOMPLETE");
	ok(p3_chan_band_status(rx, 0) == 1 && p3_chan_band_status(rx, 1) == 1,
	   "both bands report a clean close");
	p3_chan_close(rx);

	/* Every band stalled on a tensor nobody registered, then the sender
	 * leaves: an endless poll must end, and registering still delivers.
	 */
	tx = connect_to("127.0.0.1", 2, 0);
	p3_accept(l, 5000, &rx);
	p3_chan_send(tx, 0, 0, 0, 50, 0, b, 10, 0);
	p3_chan_send(tx, 1, 0, 0, 50, 10, b, 10, 0);
	p3_chan_flush(tx, 1000);
	ok(p3_chan_poll(rx, 300) == 0, "both bands stall on unregistered tensor 50");
	p3_chan_close(tx);
	ok_err(p3_chan_poll(rx, 5000), -P3_EINCOMPLETE,
	       "the sender leaves while every band is stalled: EINCOMPLETE, not a hang");
	p3_chan_expect(rx, 50, c9, 20, 0);
	ok(p3_chan_poll(rx, 2000) == 1, "registered after the peer left, tensor 50 completes");
	p3_chan_next(rx, &(struct p3_completion){ 0 });
	ok_err(p3_chan_poll(rx, 2000), -EPIPE, "then every band is closed, nothing missing: EPIPE");
	p3_chan_close(rx);

	/* The receiver goes away: the sender gets an error, not SIGPIPE. */
	tx = connect_to("127.0.0.1", 1, 0);
	p3_accept(l, 5000, &rx);
	p3_chan_close(rx);
	for (i = 0; i < 200 && !err; i++)
		err = p3_chan_send(tx, 0, 0, 0, (uint32_t)i, 0, big, sizeof(big), 2000);
	if (!err)
		err = p3_chan_flush(tx, 2000);
	ok(err == -EPIPE || err == -ECONNRESET, "receiver closed: sender gets %s",
	   p3_strerror(err));
	ok(p3_chan_band_status(tx, 0) == err, "the band stays failed with that error");
	p3_chan_close(tx);
	p3_listener_close(l);
	tx = connect_to("127.0.0.1", 2, 0);
	ok(tx == NULL, "connect to a closed port fails");
}

/* ------------------------------------------------------- send by reference */

/* Completions on the sending channel, polled for up to 10 s. */
static size_t tx_completions(struct p3_chan *tx, struct p3_completion *d, size_t want)
{
	uint64_t end = p3_now_ns() + 10000000000ull;
	size_t got = 0;

	while (got < want && p3_now_ns() < end) {
		p3_chan_poll(tx, 100);
		while (got < want && p3_chan_next(tx, &d[got]) == 1)
			got++;
	}
	return got;
}

struct ref_rx {
	struct p3_chan	*rx;
	size_t		n;
	size_t		got;
};

static void *ref_receiver(void *arg)
{
	struct ref_rx *r = arg;
	uint64_t end = p3_now_ns() + 30000000000ull;
	struct p3_completion d;

	while (r->got < r->n && p3_now_ns() < end && p3_chan_poll(r->rx, 100) >= 0)
		while (p3_chan_next(r->rx, &d) == 1)
			r->got++;
	return NULL;
}

static void test_send_ref(void)
{
	enum { N = 6, SIZE = 3 << 20 };
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct p3_chan *tx = connect_to("127.0.0.1", 2, 64 << 20);
	struct p3_completion d[N + 1];
	uint8_t *src = malloc((size_t)N * SIZE), *dst = malloc((size_t)N * SIZE);
	struct ref_rx r = { .n = N };
	size_t i, got = 0;
	int fields = 1, err = -1;
	pthread_t th;

	fill_pattern(src, (size_t)N * SIZE, 3, 0);
	if (tx && l && !p3_accept(l, 10000, &r.rx)) {
		for (i = 0; i < N; i++)
			p3_chan_expect(r.rx, (uint32_t)i, dst + i * SIZE, SIZE, 7);
		pthread_create(&th, NULL, ref_receiver, &r);
		for (i = 0, err = 0; i < N && !err; i++)
			err = p3_chan_send_ref(tx, (unsigned int)(i % 2), 0, 7, (uint32_t)i, 0,
					       src + i * SIZE, SIZE, 5000);
		got = tx_completions(tx, d, N);
		pthread_join(th, NULL);
	}
	for (i = 0; i < got; i++)
		fields &= d[i].iter == 7 && d[i].bytes == SIZE && d[i].tensor < N &&
			  d[i].t_done_ns >= d[i].t_first_ns;
	ok(!err && got == N && fields && p3_chan_next(tx, &d[N]) == 0,
	   "6 sends by reference: one completion each on the sender (tensor, iter, bytes), "
	   "no more");
	ok(r.got == N && !memcmp(src, dst, (size_t)N * SIZE),
	   "the receiver gets all 18 MiB byte-exact, read from the caller's memory");
	p3_chan_close(tx);
	p3_chan_close(r.rx);
	p3_listener_close(l);
	free(src);
	free(dst);
}

/* Changing the memory before its completion is the caller's error: it
 * must show as a refused frame, never as altered data delivered. */
static void test_send_ref_changed(void)
{
	enum { SIZE = 48 << 20 };
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct p3_chan *tx = connect_to("127.0.0.1", 1, 64 << 20);
	uint8_t *src = malloc(SIZE), *dst = calloc(1, SIZE);
	struct ref_rx r = { .n = 1 };
	struct p3_completion d;
	int err = -1, status = 0;
	pthread_t th;

	fill_pattern(src, SIZE, 8, 0);
	if (tx && l && !p3_accept(l, 10000, &r.rx)) {
		p3_chan_expect(r.rx, 1, dst, SIZE, 0);
		/* Far more than loopback buffers hold: most is still unsent. */
		err = p3_chan_send_ref(tx, 0, 0, 0, 1, 0, src, SIZE, 5000);
		memset(src + SIZE / 2, 0xee, SIZE / 2);
		pthread_create(&th, NULL, ref_receiver, &r);
		tx_completions(tx, &d, 1);
		pthread_join(th, NULL);
		status = p3_chan_band_status(r.rx, 0);
	}
	ok(!err && r.got == 0 && status == -P3_ECSUM,
	   "memory changed before its completion: the receiver refuses the frame (%s), "
	   "no completion", p3_strerror(status));
	p3_chan_close(tx);
	p3_chan_close(r.rx);
	p3_listener_close(l);
	free(src);
	free(dst);
}

/*
 * A plan sent by reference, from the engine thread, with each frame's CRC
 * over its payload (checksum 0) or its header only (-1, protocol 2): one
 * completion a message, its payload's bytes, and every byte delivered.
 */
static void test_plan_ref(int checksum)
{
	enum { SIZE = 5 << 20 };
	struct p3_slice s[3] = {
		{ .tensor = 0, .msg = 0, .length = SIZE, .level = 0 },
		{ .tensor = 1, .msg = 0, .length = SIZE, .level = 0 },
		{ .tensor = 2, .msg = 1, .length = SIZE, .level = 1 },
	};
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	uint8_t *src = malloc(3 * (size_t)SIZE), *dst = calloc(3, SIZE);
	struct p3_buf bufs[3];
	struct p3_completion d[3];
	struct ref_rx r = { .n = 3 };
	struct p3_chan_opts o;
	struct p3_chan *tx = NULL;
	size_t i, got = 0;
	int err = -1;
	pthread_t th;

	p3_chan_opts_init(&o);
	o.bands = 2;
	o.progress = 1;
	o.checksum = checksum;
	fill_pattern(src, 3 * (size_t)SIZE, 11, 0);
	for (i = 0; i < 3; i++)
		bufs[i] = (struct p3_buf){ src + i * SIZE, SIZE };
	if (l && !p3_chan_connect("127.0.0.1", port, &o, &tx) && !p3_accept(l, 10000, &r.rx)) {
		for (i = 0; i < 3; i++)
			p3_chan_expect(r.rx, (uint32_t)i, dst + i * SIZE, SIZE, 9);
		pthread_create(&th, NULL, ref_receiver, &r);
		err = p3_chan_send_plan_ref(tx, s, 3, bufs, 3, 9, 5000);
		got = tx_completions(tx, d, 2);
		pthread_join(th, NULL);
	}
	ok(!err && got == 2 && d[0].iter == 9 && d[1].iter == 9 &&
	   d[0].bytes + d[1].bytes == 3 * (uint64_t)SIZE &&
	   (d[0].tensor == 0 ? d[0].bytes == 2 * SIZE && d[1].tensor == 2
			     : d[0].tensor == 2 && d[1].tensor == 0 && d[1].bytes == 2 * SIZE),
	   "checksum %d: a plan of 2 messages by reference: a completion each (its first "
	   "tensor, its payload's bytes)", checksum);
	ok(r.got == 3 && !memcmp(src, dst, 3 * (size_t)SIZE),
	   "checksum %d: every byte delivered from the caller's memory", checksum);
	p3_chan_close(tx);
	p3_chan_close(r.rx);
	p3_listener_close(l);
	free(src);
	free(dst);
}

/* A by-reference send's completion makes a sender's descriptor readable
 * while the rest of its queue is still stuck (band 1's receiver never
 * registers its tensor): a caller waiting for it need not wait for the
 * whole queue. */
static void test_ref_completion_wakes_fd(void)
{
	enum { SMALL = 1 << 20, BIG = 64 << 20 };
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	uint8_t *small = calloc(1, SMALL), *big = calloc(1, BIG), *dst = calloc(1, SMALL);
	struct p3_chan *tx = NULL, *rx = NULL;
	struct p3_chan_opts o;
	struct p3_completion d;
	struct pollfd pfd;
	int woke = 0, err = -1;
	uint64_t end;

	p3_chan_opts_init(&o);
	o.bands = 2;
	o.progress = 1;
	o.max_queued = 2 * (size_t)BIG;
	if (l && !p3_chan_connect("127.0.0.1", port, &o, &tx) && !p3_accept(l, 10000, &rx)) {
		p3_chan_expect(rx, 1, dst, SMALL, 0);
		err = p3_chan_send_ref(tx, 1, 0, 0, 2, 0, big, BIG, 5000);
		if (!err)
			err = p3_chan_send_ref(tx, 0, 0, 0, 1, 0, small, SMALL, 5000);
		pfd = (struct pollfd){ .fd = p3_chan_fd(tx), .events = POLLIN };
		for (end = p3_now_ns() + 10000000000ull; !woke && p3_now_ns() < end; ) {
			p3_chan_poll(rx, 10);
			while (p3_chan_next(rx, &d) == 1)
				;
			woke = poll(&pfd, 1, 10) == 1 && p3_chan_queued(tx) > 0;
		}
	}
	ok(!err && woke && p3_chan_next(tx, &d) == 1 && d.tensor == 1 && d.bytes == SMALL,
	   "a by-reference completion wakes the sender's descriptor while %zu bytes stay queued",
	   tx ? p3_chan_queued(tx) : 0);
	p3_chan_close(tx);
	p3_chan_close(rx);
	p3_listener_close(l);
	free(small);
	free(big);
	free(dst);
}

static void test_checksum_option(void)
{
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct p3_chan_opts o;
	struct p3_chan *c = NULL;

	p3_chan_opts_init(&o);
	o.checksum = 2;
	ok(l && p3_chan_connect("127.0.0.1", port, &o, &c) == -EINVAL && !c,
	   "checksum 2: EINVAL before any connection");
	p3_listener_close(l);
}

/* ------------------------------------------------------- receivers' ACKs */

static int sock_port(int fd, int peer)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int r = peer ? getpeername(fd, (struct sockaddr *)&ss, &len)
		     : getsockname(fd, (struct sockaddr *)&ss, &len);

	if (r < 0)
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -1;
}

/* This process's connected socket whose local port is port, or -1. */
static int fd_by_local_port(int port, int except)
{
	int fd;

	for (fd = 3; fd < 1024; fd++)
		if (fd != except && sock_port(fd, 0) == port && sock_port(fd, 1) >= 0)
			return fd;
	return -1;
}

/* Every socket the listener accepted carries the level its sender's end
 * carries, so that its ACKs travel in the band of the data they clock;
 * with a stride, band b's level is b * stride on both ends. */
static void test_receiver_tags(const char *host, unsigned int stride)
{
	struct p3_chan_opts o;
	struct p3_listener *l = NULL;
	struct p3_chan *tx = NULL, *rx = NULL;
	int lport, lfd, fd, peer, seen = 0, match = 0, level;
	uint64_t levels = 0, want = 0;
	unsigned int b;

	p3_chan_opts_init(&o);
	o.level_stride = stride;
	if (!p3_listen(host, "0", &o, &l)) {
		snprintf(port, sizeof(port), "%d", p3_listener_port(l));
		p3_chan_connect(host, port, &o, &tx);
	}
	lport = l ? p3_listener_port(l) : -1;
	lfd = l ? p3_listener_fd(l) : -1;
	if (tx && l && !p3_accept(l, 10000, &rx)) {
		for (fd = 3; fd < 1024; fd++) {
			if (fd == lfd || sock_port(fd, 0) != lport || sock_port(fd, 1) < 0)
				continue;
			seen++;
			peer = fd_by_local_port(sock_port(fd, 1), fd);
			level = p3_tag_get(fd, P3_METHOD_DEFAULT);
			match += peer >= 0 && level >= 0 && level == p3_tag_get(peer, P3_METHOD_DEFAULT);
			if (level >= 0)
				levels |= 1ull << level;
		}
	}
	for (b = 0; b < o.bands; b++)
		want |= 1ull << (b * stride);
	ok(rx && seen == 8 && match == 8 && levels == want,
	   "%s, stride %u: each of the 8 accepted sockets has its sender's level (%d of %d), "
	   "levels %#llx (want %#llx)", host, stride, match, seen, (unsigned long long)levels,
	   (unsigned long long)want);
	p3_chan_close(tx);
	p3_chan_close(rx);
	p3_listener_close(l);
}

/* A stride that takes a band past level 63, the last a tag can say, is
 * refused where it is set; a listener refuses the hello of such a band. */
static void test_level_stride_bounds(void)
{
	struct p3_chan_opts o;
	struct p3_listener *l = NULL;
	struct p3_chan *c = NULL, *rx = NULL;
	int err;

	p3_chan_opts_init(&o);
	o.level_stride = 10;	/* 8 bands: band 7 would be level 70 */
	err = p3_chan_connect("127.0.0.1", "1", &o, &c);
	ok(err == -P3_ELEVEL && !c, "connect, 8 bands at stride 10: P3_ELEVEL (%s)",
	   p3_strerror(err));
	o.level_stride = 64;
	err = p3_listen("127.0.0.1", "0", &o, &l);
	ok(err == -P3_ELEVEL && !l, "listen at stride 64: P3_ELEVEL (%s)", p3_strerror(err));

	o.level_stride = 10;
	if (!p3_listen("127.0.0.1", "0", &o, &l)) {
		snprintf(port, sizeof(port), "%d", p3_listener_port(l));
		o.level_stride = 4;	/* the sender's band 7 is level 28 */
		p3_chan_connect("127.0.0.1", port, &o, &c);
	}
	err = c ? p3_accept(l, 10000, &rx) : 0;
	ok(c && err == -P3_ELEVEL && !rx,
	   "listener at stride 10, sender at 4: band 7's hello refused (%s)", p3_strerror(err));
	p3_chan_close(c);
	p3_listener_close(l);
}

/* ------------------------------------------------------- reads a frame */

/* The read system calls (read, readv, recv...) this process has made:
 * /proc/self/io's syscr, or -1. */
static long read_syscalls(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	char line[128];
	long v = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "syscr: %ld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

#define RPF_N		32	/* 32 frames of 1,000 bytes fit the socket */
#define RPF_LEN		1000

struct rpf_job {
	pthread_barrier_t	go;
	struct p3_chan		*tx;
	uint8_t			*data;
	int			err;
};

static void *rpf_sender(void *arg)
{
	struct rpf_job *j = arg;
	uint32_t i;

	j->tx = connect_to("127.0.0.1", 1, 0);
	pthread_barrier_wait(&j->go);	/* the receiver has registered */
	for (i = 0; j->tx && i < RPF_N && !j->err; i++)
		j->err = p3_chan_send(j->tx, 0, 0, 0, i, 0, j->data + i * RPF_LEN, RPF_LEN,
				      10000);
	if (j->tx && !j->err)
		j->err = p3_chan_flush(j->tx, 10000);
	return NULL;
}

/* Frames waiting back to back are read one system call each: the read
 * that ends a payload takes the next header too, and a short read ends
 * the pass (a header read, a payload read and a read failing with EAGAIN
 * were three a frame). */
static void test_reads_per_frame(void)
{
	struct p3_listener *l = listen_any("127.0.0.1", 0);
	struct rpf_job j = { .data = malloc(RPF_N * RPF_LEN) };
	uint8_t *got = calloc(RPF_N, RPF_LEN);
	struct p3_chan *rx = NULL;
	struct p3_completion d;
	long before, reads = -1;
	size_t done = 0, i;
	pthread_t th;

	for (i = 0; i < RPF_N * RPF_LEN; i++)
		j.data[i] = (uint8_t)(i * 131 + 7);
	pthread_barrier_init(&j.go, NULL, 2);
	pthread_create(&th, NULL, rpf_sender, &j);
	p3_accept(l, 10000, &rx);
	for (i = 0; rx && i < RPF_N; i++)
		p3_chan_expect(rx, (uint32_t)i, got + i * RPF_LEN, RPF_LEN, 0);
	pthread_barrier_wait(&j.go);
	pthread_join(th, NULL);		/* every frame is in the socket */
	before = read_syscalls();
	while (rx && p3_chan_pending(rx) && p3_chan_poll(rx, 1000) >= 0)
		while (p3_chan_next(rx, &d) == 1)
			done++;
	if (before >= 0)
		reads = read_syscalls() - before;
	ok(rx && !j.err && done == RPF_N && !memcmp(got, j.data, RPF_N * RPF_LEN) &&
	   reads >= 0 && reads <= RPF_N + 8,
	   "%d frames waiting back to back: byte-exact in %ld read calls", RPF_N, reads);
	p3_chan_close(rx);
	p3_chan_close(j.tx);
	p3_listener_close(l);
	pthread_barrier_destroy(&j.go);
	free(j.data);
	free(got);
}

int main(void)
{
	test_random_tensors("127.0.0.1", 4, 300, 1234);
	test_random_tensors("::1", 8, 60, 77);
	test_plan_send();
	test_iterations();
	test_backpressure();
	test_priority();
	test_two_channels();
	test_failures();
	test_send_ref();
	test_send_ref_changed();
	test_plan_ref(0);
	test_plan_ref(-1);
	test_ref_completion_wakes_fd();
	test_checksum_option();
	test_receiver_tags("127.0.0.1", 1);
	test_receiver_tags("::1", 1);
	test_receiver_tags("127.0.0.1", 2);
	test_level_stride_bounds();
	test_reads_per_frame();
	return tap_done();
}
