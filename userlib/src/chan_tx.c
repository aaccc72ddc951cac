// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The sending end of a channel.  Each band has its own TCP connection and
 * its own priority queue.  The kernel (sch_p3) orders packets across
 * bands; this file orders messages inside a band, which the kernel cannot
 * do because it must never reorder one flow.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chan.h"

/* ------------------------------------------------------------- the heap */

static int msg_before(const struct tx_msg *a, const struct tx_msg *b)
{
	if (a->iter != b->iter)
		return a->iter < b->iter;	/* finish an iteration first */
	if (a->prio != b->prio)
		return a->prio < b->prio;
	return a->seq < b->seq;
}

static void heap_swap(struct tx_msg **h, size_t i, size_t j)
{
	struct tx_msg *t = h[i];

	h[i] = h[j];
	h[j] = t;
}

/* Room was made by heap_reserve(), so that a batch cannot fail halfway. */
static void heap_push(struct tx_band *tb, struct tx_msg *m)
{
	struct tx_msg **h = tb->heap;
	size_t i = tb->nheap++;

	h[i] = m;
	for (; i && msg_before(h[i], h[(i - 1) / 2]); i = (i - 1) / 2)
		heap_swap(h, i, (i - 1) / 2);
}

static struct tx_msg *heap_pop(struct tx_band *tb)
{
	struct tx_msg **h = tb->heap, *top;
	size_t i = 0, l, best;

	if (!tb->nheap)
		return NULL;
	top = h[0];
	h[0] = h[--tb->nheap];
	for (;;) {
		best = i;
		l = 2 * i + 1;
		if (l < tb->nheap && msg_before(h[l], h[best]))
			best = l;
		if (l + 1 < tb->nheap && msg_before(h[l + 1], h[best]))
			best = l + 1;
		if (best == i)
			return top;
		heap_swap(h, i, best);
		i = best;
	}
}

/* --------------------------------------------------------------- writing */

/* m leaves the queue, all written or not: a ref message's completion
 * tells the caller that its memory is no longer read (bytes 0: unsent). */
static void msg_release(struct p3_chan *c, struct tx_msg *m, int written)
{
	c->queued -= m->len - m->sent;
	if (m->ref) {
		if (!written)
			m->done.bytes = 0;
		m->done.t_done_ns = p3_now_ns();
		done_push(c, &m->done);
		c->refs--;
	}
	free(m);
}

/* A dead band loses what it held; the caller learns through its error. */
static void band_fail(struct p3_chan *c, struct tx_band *tb, int err)
{
	struct tx_msg *m;

	tb->err = err;
	if (tb->cur) {
		msg_release(c, tb->cur, 0);
		tb->cur = NULL;
	}
	while ((m = heap_pop(tb)))
		msg_release(c, m, 0);
	if (tb->fd >= 0)
		close(tb->fd);
	tb->fd = -1;
}

/*
 * The receiver writes to a sender only to refuse it (p3.h, "The
 * handshake"), then closes.  What it wrote is read while the band has
 * data to write, and again when a write fails, so that the band's error
 * names the receiver's reason rather than the broken pipe or reset that
 * writing into the closed connection brings.  Returns that error, or 0
 * while the refusal is incomplete (nothing to read yet).
 */
static int band_refusal(struct p3_chan *c, struct tx_band *tb)
{
	unsigned int reason, proto, b = (unsigned int)(tb - c->tx);
	ssize_t n;
	int r;

	do {
		n = recv(tb->fd, tb->refusal + tb->nrefusal,
			 sizeof(tb->refusal) - tb->nrefusal, MSG_DONTWAIT);
		if (n > 0)
			tb->nrefusal += (size_t)n;
	} while (n > 0 && tb->nrefusal < sizeof(tb->refusal));
	if (tb->nrefusal == sizeof(tb->refusal)) {
		r = p3_refusal_parse(tb->refusal, sizeof(tb->refusal), c->cookie, b,
				     &reason, &proto);
		return r < 0 ? r : -(int)reason;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	return n < 0 ? -errno : -EPIPE;	/* closed without a word */
}

#define WRITE_IOV	64	/* pieces per sendmsg(), well under IOV_MAX */

/* One sendmsg() of m's next pieces; advances m past what it took. */
static ssize_t msg_write(int fd, struct tx_msg *m)
{
	struct iovec v[WRITE_IOV];
	struct msghdr mh = { .msg_iov = v };
	size_t i, left;
	ssize_t n;

	for (i = m->iov_at; i < m->niov && mh.msg_iovlen < WRITE_IOV; i++)
		v[mh.msg_iovlen++] = m->iov[i];
	v[0].iov_base = (uint8_t *)v[0].iov_base + m->iov_off;
	v[0].iov_len -= m->iov_off;
	n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	for (left = n > 0 ? (size_t)n : 0; left; ) {
		size_t rest = m->iov[m->iov_at].iov_len - m->iov_off;

		if (left < rest) {
			m->iov_off += left;
			break;
		}
		left -= rest;
		m->iov_at++;
		m->iov_off = 0;
	}
	return n;
}

/* Write what the socket takes.  Preemption happens here: a message is
 * chosen only when the previous one is completely written. */
static void band_write(struct p3_chan *c, struct tx_band *tb)
{
	ssize_t n;

	while (!tb->err) {
		if (!tb->cur)
			tb->cur = heap_pop(tb);
		if (!tb->cur)
			return;
		n = msg_write(tb->fd, tb->cur);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			int err = n < 0 ? -errno : -EPIPE, why = band_refusal(c, tb);

			band_fail(c, tb, why ? why : err);
			return;
		}
		tb->cur->sent += n;
		c->queued -= n;
		if (tb->cur->sent == tb->cur->len) {
			msg_release(c, tb->cur, 1);
			tb->cur = NULL;
		}
	}
}

static int band_busy(const struct tx_band *tb)
{
	return !tb->err && (tb->cur || tb->nheap);
}

/* First error among the bands, so that a lost band is never silent. */
static int tx_error(const struct p3_chan *c)
{
	unsigned int b;

	for (b = 0; b < c->bands; b++)
		if (c->tx[b].err)
			return c->tx[b].err;
	return 0;
}

unsigned int tx_pollset(struct p3_chan *c, struct pollfd *pfd, unsigned int *map)
{
	unsigned int b, n = 0;

	for (b = 0; b < c->bands; b++) {
		if (!band_busy(&c->tx[b]))
			continue;
		pfd[n] = (struct pollfd){ .fd = c->tx[b].fd, .events = POLLOUT | POLLIN };
		map[n++] = b;
	}
	return n;
}

void tx_serve(struct p3_chan *c, const struct pollfd *pfd, const unsigned int *map,
	      unsigned int n)
{
	unsigned int i;
	int r;

	for (i = 0; i < n; i++) {
		struct tx_band *tb = &c->tx[map[i]];

		/* Failed (its socket closed) by another thread since the poll
		 * began: what poll() said of that descriptor is not news. */
		if (tb->err || tb->fd != pfd[i].fd)
			continue;
		if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
			r = band_refusal(c, tb);
			if (r)
				band_fail(c, tb, r);
		}
		if (pfd[i].revents)
			band_write(c, tb);
	}
}

/* Wait for writable sockets and write, once.  0, -P3_ECLOSED, or -errno
 * from poll. */
int tx_step(struct p3_chan *c, int wait_ms)
{
	struct pollfd pfd[P3_MAX_BANDS + 1];
	unsigned int map[P3_MAX_BANDS], n = tx_pollset(c, pfd, map);
	int r;

	if (!n)
		return c->closing ? -P3_ECLOSED : 0;
	r = chan_wait(c, pfd, n, wait_ms);
	if (r < 0)
		return r;
	tx_serve(c, pfd, map, n);
	return 0;
}

int tx_pump(struct p3_chan *c, int timeout_ms)
{
	uint64_t deadline = chan_deadline(timeout_ms);
	int err;

	do {
		err = tx_step(c, chan_wait_ms(deadline));
		if (err)
			return err;
		if (!c->queued)
			break;
	} while (chan_wait_ms(deadline));
	err = tx_error(c);
	return err;
}

static int tx_flush(struct p3_chan *c, int timeout_ms)
{
	uint64_t deadline = chan_deadline(timeout_ms);
	int err;

	while (c->queued) {
		err = tx_step(c, chan_wait_ms(deadline));
		if (err)
			return err;
		if (c->queued && !chan_wait_ms(deadline))
			return -ETIMEDOUT;
	}
	return tx_error(c);
}

P3_EXPORT int p3_chan_flush(struct p3_chan *c, int timeout_ms)
{
	int err;

	if (!c || c->role != P3_ROLE_TX)
		return -EINVAL;
	err = chan_enter(c);
	if (err)
		return err;
	err = tx_flush(c, timeout_ms);
	chan_unlock(c);
	return err;
}

void tx_free(struct p3_chan *c)
{
	unsigned int b;

	for (b = 0; b < P3_MAX_BANDS; b++) {
		band_fail(c, &c->tx[b], 0);
		free(c->tx[b].heap);
		c->tx[b].heap = NULL;
	}
}

/* ------------------------------------------------------------- queueing */

/* Wire size of a message, or 0 if a slice is unusable or it overflows. */
static size_t msg_wire_size(const struct p3_chan *c, const struct p3_send *s, size_t n)
{
	uint64_t total = 0, frames;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!s[i].data || !s[i].length || s[i].offset > UINT64_MAX - s[i].length)
			return 0;
		frames = (s[i].length + c->max_payload - 1) / c->max_payload;
		if (s[i].length > SIZE_MAX / 2 || frames > SIZE_MAX / 2 / P3_FRAME_HDR_LEN)
			return 0;
		total += s[i].length + frames * P3_FRAME_HDR_LEN;
		if (total > SIZE_MAX / 2)
			return 0;
	}
	return total;
}

/* Frames of the slices, max_payload bytes each at most (their sizes
 * were checked by msg_wire_size()). */
static size_t msg_frames(const struct p3_chan *c, const struct p3_send *s, size_t n)
{
	size_t i, frames = 0;

	for (i = 0; i < n; i++)
		frames += (size_t)((s[i].length + c->max_payload - 1) / c->max_payload);
	return frames;
}

/* Encode the slices as frames no longer than max_payload each: copied
 * after their headers, or (ref) left where they are, one piece each. */
static void msg_encode(const struct p3_chan *c, struct tx_msg *m, unsigned int level,
		       const struct p3_send *s, size_t n)
{
	uint8_t *p = m->data, flags = c->proto >= 2 ? P3_FRAME_F_HDRCRC : 0;
	uint64_t off, len;
	size_t i;

	if (!m->ref)
		m->iov[m->niov++] = (struct iovec){ .iov_base = m->data, .iov_len = m->len };
	for (i = 0; i < n; i++) {
		for (off = 0; off < s[i].length; off += len) {
			struct p3_frame f = {
				.type = P3_FRAME_DATA,
				.level = level,
				.tensor = s[i].tensor,
				.offset = s[i].offset + off,
				.iter = m->iter,
			};

			len = s[i].length - off;
			if (len > c->max_payload)
				len = c->max_payload;
			f.length = (uint32_t)len;
			if (m->ref) {
				const uint8_t *payload = (const uint8_t *)s[i].data + off;

				p3_frame_header_flags(p, &f, payload, flags);
				m->iov[m->niov++] = (struct iovec){ p, P3_FRAME_HDR_LEN };
				m->iov[m->niov++] = (struct iovec){ (void *)payload, len };
				p += P3_FRAME_HDR_LEN;
				continue;
			}
			memcpy(p + P3_FRAME_HDR_LEN, (const uint8_t *)s[i].data + off, len);
			p3_frame_header_flags(p, &f, p + P3_FRAME_HDR_LEN, flags);
			p += P3_FRAME_HDR_LEN + len;
		}
	}
}

/* Make room for size more bytes, writing meanwhile; -EAGAIN on timeout.
 * Even with no time to wait, the sockets get one non-blocking write. */
static int tx_make_room(struct p3_chan *c, size_t size, int timeout_ms)
{
	uint64_t deadline = chan_deadline(timeout_ms);
	int err;

	/* An empty queue takes any batch, or a huge one could never go. */
	while (c->queued && c->queued + size > c->max_queued) {
		err = tx_step(c, chan_wait_ms(deadline));
		if (err)
			return err;
		if (c->queued && c->queued + size > c->max_queued && !chan_wait_ms(deadline))
			return -EAGAIN;
	}
	return 0;
}

/* One message to queue: its band, priority and slices. */
struct tx_spec {
	unsigned int		level;
	uint32_t		prio;
	const struct p3_send	*s;
	size_t			n;
	size_t			size;	/* on the wire, set by tx_check() */
	int			ref;	/* send from the caller's memory */
};

/* Refuse a batch before any of it is queued: its total wire size, or an
 * error (a band out of range or dead, an unusable slice). */
static int tx_check(const struct p3_chan *c, struct tx_spec *spec, size_t nspec, size_t *total)
{
	size_t i;

	*total = 0;
	for (i = 0; i < nspec; i++) {
		if (spec[i].level >= c->bands)
			return -P3_ELEVEL;
		if (c->tx[spec[i].level].err)
			return c->tx[spec[i].level].err;
		spec[i].size = msg_wire_size(c, spec[i].s, spec[i].n);
		if (!spec[i].size || spec[i].size > SIZE_MAX / 2 - *total)
			return -EINVAL;
		*total += spec[i].size;
	}
	return 0;
}

static int heap_reserve(struct tx_band *tb, size_t more)
{
	struct tx_msg **h;
	size_t cap = tb->cheap ? tb->cheap : 16;

	while (cap - tb->nheap < more)
		cap *= 2;
	if (cap == tb->cheap)
		return 0;
	h = realloc(tb->heap, cap * sizeof(*h));
	if (!h)
		return -ENOMEM;
	tb->heap = h;
	tb->cheap = cap;
	return 0;
}

/* A message with room for its bytes (copy) or headers (ref), and its
 * pieces after them. */
static struct tx_msg *msg_alloc(const struct p3_chan *c, const struct tx_spec *sp,
				uint64_t iter)
{
	size_t frames = msg_frames(c, sp->s, sp->n), niov = sp->ref ? 2 * frames : 1;
	size_t bytes = sp->ref ? frames * P3_FRAME_HDR_LEN : sp->size;
	size_t at = (bytes + 15) & ~(size_t)15;		/* the pieces, aligned */
	struct tx_msg *m = malloc(sizeof(*m) + at + niov * sizeof(struct iovec));
	uint64_t payload = 0;
	size_t i;

	if (!m)
		return NULL;
	*m = (struct tx_msg){ .iter = iter, .prio = sp->prio, .len = sp->size,
			      .iov = (struct iovec *)(m->data + at), .ref = sp->ref };
	for (i = 0; sp->ref && i < sp->n; i++)
		payload += sp->s[i].length;
	if (sp->ref)
		m->done = (struct p3_completion){ .tensor = sp->s[0].tensor, .iter = iter,
						  .bytes = payload, .t_first_ns = p3_now_ns() };
	return m;
}

/* Encode every message, then reserve each band's heap, so that once the
 * first message is queued nothing can fail: all of the batch or none. */
static int tx_build(struct p3_chan *c, const struct tx_spec *spec, size_t nspec,
		    uint64_t iter, struct tx_msg **m)
{
	size_t need[P3_MAX_BANDS] = { 0 }, i, refs;
	unsigned int b;
	int err = 0;

	for (i = 0; i < nspec && !err; i++) {
		m[i] = msg_alloc(c, &spec[i], iter);
		if (!m[i]) {
			err = -ENOMEM;
			break;
		}
		msg_encode(c, m[i], spec[i].level, spec[i].s, spec[i].n);
		need[spec[i].level]++;
	}
	for (b = 0; b < c->bands && !err; b++)
		if (need[b])
			err = heap_reserve(&c->tx[b], need[b]);
	/* Every ref message's completion has its place before it leaves. */
	for (i = 0, refs = 0; i < nspec; i++)
		refs += spec[i].ref;
	if (!err && refs)
		err = done_reserve(c, c->refs + refs);
	if (err)
		while (i--)
			free(m[i]);
	return err;
}

/* Queue a batch of messages atomically: -EAGAIN, -ENOMEM or a refusal
 * leaves the queue as it was. */
static int tx_queue(struct p3_chan *c, struct tx_spec *spec, size_t nspec, uint64_t iter,
		    int timeout_ms)
{
	uint64_t touched = 0;
	struct tx_msg **m;
	size_t total, i;
	unsigned int b;
	int err, news, by_engine = c->engine_on;

	err = tx_check(c, spec, nspec, &total);
	if (!err)
		err = tx_make_room(c, total, timeout_ms);
	/* A band can die while we wait for room. */
	if (!err)
		err = tx_check(c, spec, nspec, &total);
	if (err)
		return err;
	m = calloc(nspec, sizeof(*m));
	if (!m)
		return -ENOMEM;
	err = tx_build(c, spec, nspec, iter, m);
	for (i = 0; i < nspec && !err; i++) {
		m[i]->seq = c->seq++;
		heap_push(&c->tx[spec[i].level], m[i]);
		c->queued += m[i]->len;
		c->refs += m[i]->ref;
		by_engine &= m[i]->ref;
		touched |= 1ull << spec[i].level;
	}
	free(m);
	/* Start at once: an idle band should not wait for the next poll.
	 * The engine has work only where bytes are left, and news for other
	 * waiters where a band failed or a copy=False message (this batch's
	 * or an earlier one's) may have completed: a kick costs it a pass
	 * over every channel's sockets (at 16 ranks a rank polls 240), so a
	 * copied message written whole here does without.  A batch sent by
	 * reference is written by the engine where there is one, so that the
	 * caller (a training thread) copies none of its bytes into sockets. */
	news = c->refs != 0;
	for (b = 0; b < c->bands; b++) {
		if (touched & (1ull << b)) {
			if (!by_engine)
				band_write(c, &c->tx[b]);
			news |= band_busy(&c->tx[b]) || c->tx[b].err;
		}
	}
	if (news)
		chan_kick(c);
	for (b = 0; !err && b < c->bands; b++)
		if (touched & (1ull << b))
			err = c->tx[b].err;
	return err;
}

/* tx_queue() under the channel's lock, for the public entry points. */
static int tx_queue_locked(struct p3_chan *c, struct tx_spec *spec, size_t nspec, uint64_t iter,
			   int timeout_ms)
{
	int err = chan_enter(c);

	if (err)
		return err;
	err = tx_queue(c, spec, nspec, iter, timeout_ms);
	chan_unlock(c);
	return err;
}

P3_EXPORT int p3_chan_send_msg(struct p3_chan *c, unsigned int level, uint32_t prio,
			       uint64_t iter, const struct p3_send *s, size_t n, int timeout_ms)
{
	struct tx_spec spec = { .level = level, .prio = prio, .s = s, .n = n };

	if (!c || c->role != P3_ROLE_TX || !s || !n)
		return -EINVAL;
	return tx_queue_locked(c, &spec, 1, iter, timeout_ms);
}

P3_EXPORT int p3_chan_send(struct p3_chan *c, unsigned int level, uint32_t prio, uint64_t iter,
			   uint32_t tensor, uint64_t offset, const void *data, uint64_t length,
			   int timeout_ms)
{
	struct p3_send s = { .tensor = tensor, .offset = offset, .data = data, .length = length };

	return p3_chan_send_msg(c, level, prio, iter, &s, 1, timeout_ms);
}

P3_EXPORT int p3_chan_send_ref(struct p3_chan *c, unsigned int level, uint32_t prio,
			       uint64_t iter, uint32_t tensor, uint64_t offset, const void *data,
			       uint64_t length, int timeout_ms)
{
	struct p3_send s = { .tensor = tensor, .offset = offset, .data = data, .length = length };
	struct tx_spec spec = { .level = level, .prio = prio, .s = &s, .n = 1, .ref = 1 };

	if (!c || c->role != P3_ROLE_TX || !data || !length)
		return -EINVAL;
	return tx_queue_locked(c, &spec, 1, iter, timeout_ms);
}

/* A plan as messages: adjacent slices sharing a msg id are one message,
 * at the most urgent priority among them.  Returns the message count, or
 * -EINVAL for a slice without its buffer or a message across levels. */
static ssize_t plan_specs(const struct p3_slice *s, size_t n, const struct p3_buf *bufs,
			  size_t nbufs, struct p3_send *v, struct tx_spec *spec, int ref)
{
	const struct p3_buf *b;
	size_t i, nspec = 0;

	for (i = 0; i < n; i++) {
		if (s[i].tensor >= nbufs)
			return -P3_ERANGE;
		b = &bufs[s[i].tensor];
		if (!b->data)
			return -EINVAL;
		if (s[i].offset > b->len || s[i].length > b->len - s[i].offset)
			return -P3_ERANGE;
		v[i] = (struct p3_send){ .tensor = s[i].tensor, .offset = s[i].offset,
					 .data = (const uint8_t *)b->data + s[i].offset,
					 .length = s[i].length };
		if (i && s[i].msg == s[i - 1].msg) {
			if (s[i].level != spec[nspec - 1].level)
				return -EINVAL;
			spec[nspec - 1].n++;
			if (s[i].prio < spec[nspec - 1].prio)
				spec[nspec - 1].prio = s[i].prio;
			continue;
		}
		spec[nspec++] = (struct tx_spec){ .level = s[i].level, .prio = s[i].prio,
						  .s = &v[i], .n = 1, .ref = ref };
	}
	return (ssize_t)nspec;
}

/* A plan's messages, copied or (ref) sent from bufs. */
static int plan_queue(struct p3_chan *c, const struct p3_slice *s, size_t n,
		      const struct p3_buf *bufs, size_t nbufs, uint64_t iter, int timeout_ms,
		      int ref)
{
	struct tx_spec *spec;
	struct p3_send *v;
	ssize_t nspec;
	int err;

	if (!c || c->role != P3_ROLE_TX || (n && (!s || !bufs)))
		return -EINVAL;
	if (!n)
		return 0;
	if (n > SIZE_MAX / sizeof(*spec))
		return -EINVAL;
	v = malloc(n * sizeof(*v));
	spec = malloc(n * sizeof(*spec));
	err = v && spec ? 0 : -ENOMEM;
	nspec = err ? err : plan_specs(s, n, bufs, nbufs, v, spec, ref);
	if (nspec >= 0)
		err = tx_queue_locked(c, spec, (size_t)nspec, iter, timeout_ms);
	else
		err = (int)nspec;
	free(v);
	free(spec);
	return err;
}

P3_EXPORT int p3_chan_send_plan_bufs(struct p3_chan *c, const struct p3_slice *s, size_t n,
				     const struct p3_buf *bufs, size_t nbufs, uint64_t iter,
				     int timeout_ms)
{
	return plan_queue(c, s, n, bufs, nbufs, iter, timeout_ms, 0);
}

P3_EXPORT int p3_chan_send_plan_ref(struct p3_chan *c, const struct p3_slice *s, size_t n,
				    const struct p3_buf *bufs, size_t nbufs, uint64_t iter,
				    int timeout_ms)
{
	return plan_queue(c, s, n, bufs, nbufs, iter, timeout_ms, 1);
}

P3_EXPORT int p3_chan_send_plan(struct p3_chan *c, const struct p3_slice *s, size_t n,
				const void *const *bufs, uint64_t iter, int timeout_ms)
{
	struct p3_buf *b;
	size_t i, nbufs = 0;
	int err;

	if (!c || c->role != P3_ROLE_TX || (n && (!s || !bufs)))
		return -EINVAL;
	/* Bare pointers: every tensor the plan names, without a bound. */
	for (i = 0; i < n; i++)
		if (s[i].tensor >= nbufs)
			nbufs = (size_t)s[i].tensor + 1;
	b = calloc(nbufs ? nbufs : 1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (i = 0; i < nbufs; i++)
		b[i] = (struct p3_buf){ .data = bufs[i], .len = UINT64_MAX };
	err = p3_chan_send_plan_bufs(c, s, n, b, nbufs, iter, timeout_ms);
	free(b);
	return err;
}

/* ----------------------------------------------------------- connecting */

int tx_push_hello(struct p3_chan *c, unsigned int band)
{
	size_t len = P3_FRAME_HDR_LEN + P3_HELLO_LEN;
	struct tx_spec spec = { .size = len };
	struct tx_msg *m = msg_alloc(c, &spec, 0);

	if (!m)
		return -ENOMEM;
	m->iov[m->niov++] = (struct iovec){ .iov_base = m->data, .iov_len = len };
	p3_hello_build(m->data, &(struct p3_hello){
		.chan_id = c->id, .cookie = c->cookie, .band = (uint8_t)band,
		.bands = (uint8_t)c->bands, .proto = c->proto,
		.max_payload = c->max_payload });
	/* As the current message it goes before anything queued later. */
	c->tx[band].cur = m;
	c->queued += len;
	return 0;
}

static uint64_t random_id(void)
{
	uint64_t id = 0;

	if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
		id = p3_now_ns() ^ ((uint64_t)getpid() << 32);
	return id ? id : 1;
}

/* Socket for band b: tagged before connect() so the SYN carries it too. */
static int band_socket(const struct addrinfo *ai, unsigned int b, const struct p3_chan_opts *o)
{
	int fd, one = 1, err;

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    ai->ai_protocol);
	if (fd < 0)
		return -errno;
	err = p3_tag_ex(fd, (unsigned int)chan_band_level(b, o->level_stride), o->tag_method,
			o->notsent_lowat);
	if (!err)
		err = chan_sock_peer_timeout(fd, o->peer_timeout_ms);
	/* Frames are complete units; Nagle would only hold back a tail. */
	if (!err && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		err = -errno;
	if (!err && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS)
		err = -errno;
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

static int wait_connected(struct p3_chan *c, int timeout_ms)
{
	uint64_t deadline = chan_deadline(timeout_ms);
	struct pollfd pfd;
	socklen_t len;
	unsigned int b;
	int r, soerr;

	for (b = 0; b < c->bands; b++) {
		pfd = (struct pollfd){ .fd = c->tx[b].fd, .events = POLLOUT };
		do
			r = poll(&pfd, 1, chan_wait_ms(deadline));
		while (r < 0 && errno == EINTR);
		if (r < 0)
			return -errno;
		if (!r)
			return -ETIMEDOUT;
		len = sizeof(soerr);
		if (getsockopt(pfd.fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
			return -errno;
		if (soerr)
			return -soerr;
	}
	return 0;
}

static int connect_addr(struct p3_chan *c, const struct addrinfo *ai,
			const struct p3_chan_opts *o)
{
	unsigned int b;
	int fd, err;

	for (b = 0; b < c->bands; b++) {
		fd = band_socket(ai, b, o);
		if (fd < 0)
			return fd;
		c->tx[b].fd = fd;
	}
	err = wait_connected(c, o->timeout_ms);
	for (b = 0; !err && b < c->bands; b++)
		err = tx_push_hello(c, b);
	return err;
}

static void close_bands(struct p3_chan *c)
{
	unsigned int b;

	for (b = 0; b < c->bands; b++)
		band_fail(c, &c->tx[b], 0);
}

static int check_opts(const struct p3_chan_opts *o)
{
	if (!o->bands || o->bands > P3_MAX_BANDS || o->max_payload > INT32_MAX - P3_FRAME_HDR_LEN ||
	    o->checksum < -1 || o->checksum > 1)
		return -EINVAL;
	/* Every band's level must be one a tag can carry. */
	if (chan_band_level(o->bands - 1, o->level_stride) < 0)
		return -P3_ELEVEL;
	return 0;
}

P3_EXPORT int p3_chan_connect(const char *host, const char *port, const struct p3_chan_opts *opts,
			      struct p3_chan **out)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
	struct p3_chan_opts o;
	struct p3_chan *c;
	int err;

	if (!out || !port)
		return -EINVAL;
	*out = NULL;
	err = chan_opts_read(&o, opts);
	if (err)
		return err;
	err = check_opts(&o);
	if (err)
		return err;
	err = getaddrinfo(host, port, &hints, &res);
	if (err)
		return err == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
	c = chan_alloc(P3_ROLE_TX, o.bands, o.chan_id ? o.chan_id : random_id(), o.max_payload);
	if (c) {
		c->cookie = random_id();	/* never the caller's: ids can repeat */
		/* Protocol 1 where it suffices: an older receiver takes it. */
		c->proto = o.checksum < 0 ? 2 : 1;
	}
	err = c ? -ECONNREFUSED : -ENOMEM;
	for (ai = res; c && ai; ai = ai->ai_next) {
		err = connect_addr(c, ai, &o);
		if (!err)
			break;
		close_bands(c);
	}
	freeaddrinfo(res);
	if (err) {
		p3_chan_close(c);
		return err;
	}
	c->max_queued = o.max_queued ? o.max_queued : SIZE_MAX;
	/* The hellos go out now, so the listener can match them early. */
	chan_lock(c);
	tx_step(c, 0);
	chan_unlock(c);
	if (o.progress) {
		err = chan_start_engine(c);
		if (err) {
			p3_chan_close(c);
			return err;
		}
	}
	*out = c;
	return 0;
}
