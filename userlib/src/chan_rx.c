// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The receiving end of a channel: reassembly of tensors from slices.
 *
 * A frame's header is read and checked (tensor, iteration, range, level)
 * first; its payload then goes straight from the socket into the
 * tensor's buffer, checksummed as it arrives, with no copy in between.
 * The range is reserved at the header, so no other frame may write there
 * (a duplicate is refused, never counted twice), and it counts as
 * received only once the checksum matched: a tensor completes only from
 * frames that were whole and intact.  Until its completion, a buffer's
 * contents are the library's.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "chan.h"

#define RX_READ_MAX	(1u << 20)	/* per read(), to keep bands fair */

static void rx_drop_inflight(struct p3_chan *c, const struct rx_tensor *t);

/* ------------------------------------------------------ the tensor table */

/* Fibonacci hashing: the product's top bits, which every bit of the id
 * stirs; its low bits would put ids that share low bits (0, 1024, 2048,
 * ... in a table of 1024) into one chain. */
static size_t tab_slot(uint32_t id, size_t cap)
{
	return (size_t)(((uint64_t)id * 0x9e3779b97f4a7c15ull) >> (64 - __builtin_ctzll(cap)));
}

static struct rx_tensor *tab_find(const struct p3_chan *c, uint32_t id)
{
	size_t i;

	if (!c->tab_cap)
		return NULL;
	for (i = tab_slot(id, c->tab_cap); c->tab[i].used; i = (i + 1) & (c->tab_cap - 1))
		if (c->tab[i].id == id)
			return &c->tab[i];
	return NULL;
}

size_t rx_table_longest_probe(const struct p3_chan *c)
{
	size_t i, d, worst = 0, mask = c->tab_cap - 1;

	for (i = 0; i < c->tab_cap; i++) {
		if (!c->tab[i].used)
			continue;
		d = (i - tab_slot(c->tab[i].id, c->tab_cap)) & mask;
		if (d > worst)
			worst = d;
	}
	return worst + 1;
}

static int tab_grow(struct p3_chan *c)
{
	size_t cap = c->tab_cap ? c->tab_cap * 2 : 64, i, j;
	struct rx_tensor *t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (i = 0; i < c->tab_cap; i++) {
		if (!c->tab[i].used)
			continue;
		for (j = tab_slot(c->tab[i].id, cap); t[j].used; j = (j + 1) & (cap - 1))
			;
		t[j] = c->tab[i];
	}
	free(c->tab);
	c->tab = t;
	c->tab_cap = cap;
	return 0;
}

static struct rx_tensor *tab_insert(struct p3_chan *c, uint32_t id)
{
	struct rx_tensor *t = tab_find(c, id);
	size_t i;

	if (t)
		return t;
	/* At most half full, so probes stay short and always end. */
	if ((c->tab_used + 1) * 2 > c->tab_cap && tab_grow(c))
		return NULL;
	for (i = tab_slot(id, c->tab_cap); c->tab[i].used; i = (i + 1) & (c->tab_cap - 1))
		;
	c->tab[i] = (struct rx_tensor){ .id = id, .used = 1, .done = 1 };
	c->tab_used++;
	return &c->tab[i];
}

static int rx_expect(struct p3_chan *c, uint32_t tensor, void *buf, uint64_t size,
		     uint64_t iter)
{
	struct rx_tensor *t;

	t = tab_find(c, tensor);
	if (t && !t->done)
		return -EBUSY;
	if (t && iter < t->iter)
		return -P3_ESTALE;
	t = tab_insert(c, tensor);
	if (!t)
		return -ENOMEM;
	t->iter = iter;
	t->buf = buf;
	t->size = size;
	t->got = 0;
	t->nr = 0;
	t->t_first = 0;
	t->done = 0;
	c->pending++;
	return 0;
}

/* Remove slot i; later members of its probe run move back into the gap,
 * so that no lookup ever stops early at it (linear probing has no
 * tombstones here). */
static void tab_delete(struct p3_chan *c, size_t i)
{
	size_t mask = c->tab_cap - 1, j = i, home;

	free(c->tab[i].r);
	c->tab[i] = (struct rx_tensor){ 0 };
	c->tab_used--;
	for (;;) {
		j = (j + 1) & mask;
		if (!c->tab[j].used)
			return;
		home = tab_slot(c->tab[j].id, c->tab_cap);
		/* j may move to i only if its home is not in (i, j]. */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			c->tab[i] = c->tab[j];
			c->tab[j] = (struct rx_tensor){ 0 };
			i = j;
		}
	}
}

P3_EXPORT int p3_chan_cancel(struct p3_chan *c, uint32_t tensor)
{
	struct rx_tensor *t;
	int err;

	if (!c || c->role != P3_ROLE_RX)
		return -EINVAL;
	err = chan_enter(c);
	if (err)
		return err;
	t = tab_find(c, tensor);
	if (!t) {
		err = -ENOENT;
	} else {
		if (!t->done)
			c->pending--;
		rx_drop_inflight(c, t);
		tab_delete(c, (size_t)(t - c->tab));
		chan_consumed(c);
	}
	chan_unlock(c);
	return err;
}

static int rx_any_stalled(const struct p3_chan *c)
{
	unsigned int b;

	for (b = 0; b < c->bands; b++)
		if (c->rx[b].stalled)
			return 1;
	return 0;
}

P3_EXPORT int p3_chan_expect(struct p3_chan *c, uint32_t tensor, void *buf, uint64_t size,
			     uint64_t iter)
{
	int err;

	if (!c || c->role != P3_ROLE_RX || !buf || !size)
		return -EINVAL;
	err = chan_enter(c);
	if (err)
		return err;
	err = rx_expect(c, tensor, buf, size, iter);
	/* A band stalled on this tensor may go on: the engine looks again.
	 * With none stalled the engine has nothing new to do, and a kick
	 * would cost it a pass (a syscall and a wake-up) per registration. */
	if (!err && rx_any_stalled(c))
		chan_kick(c);
	chan_unlock(c);
	return err;
}

/* ---------------------------------------------------------- completions */

P3_EXPORT size_t p3_chan_next_batch(struct p3_chan *c, struct p3_completion *out, size_t n)
{
	size_t got = 0;

	if (!c || !out)
		return 0;
	chan_lock(c);
	while (got < n && c->done_n > 0) {
		out[got++] = c->done[c->done_head];
		c->done_head = (c->done_head + 1) % c->done_cap;
		c->done_n--;
	}
	if (got)
		chan_consumed(c);
	chan_unlock(c);
	return got;
}

P3_EXPORT int p3_chan_next(struct p3_chan *c, struct p3_completion *out)
{
	return p3_chan_next_batch(c, out, 1) == 1;
}

/* ------------------------------------------------------- received ranges */

/* Index of the first range that ends after start. */
static size_t range_find(const struct rx_tensor *t, uint64_t start)
{
	size_t lo = 0, hi = t->nr, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (t->r[mid].end <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int range_overlaps(const struct rx_tensor *t, uint64_t start, uint64_t end)
{
	size_t i = range_find(t, start);

	return i < t->nr && t->r[i].start < end;
}

/* Record [start, end), known not to overlap, merging with neighbours. */
static int range_add(struct rx_tensor *t, uint64_t start, uint64_t end)
{
	size_t i = range_find(t, start), cap;
	struct rx_range *r;

	if (i > 0 && t->r[i - 1].end == start) {
		t->r[i - 1].end = end;
		if (i < t->nr && t->r[i].start == end) {
			t->r[i - 1].end = t->r[i].end;
			memmove(&t->r[i], &t->r[i + 1], (t->nr - i - 1) * sizeof(*r));
			t->nr--;
		}
		return 0;
	}
	if (i < t->nr && t->r[i].start == end) {
		t->r[i].start = start;
		return 0;
	}
	if (t->nr == t->cr) {
		cap = t->cr ? t->cr * 2 : 4;
		r = realloc(t->r, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		t->r = r;
		t->cr = cap;
	}
	memmove(&t->r[i + 1], &t->r[i], (t->nr - i) * sizeof(*t->r));
	t->r[i] = (struct rx_range){ start, end };
	t->nr++;
	return 0;
}

/* ---------------------------------------------------------- the frames */

/*
 * Size of (tensor, iter) for the frame parser.  -EAGAIN means "not
 * registered yet": the connection waits for p3_chan_expect().
 */
static int rx_tensor_size(void *ctx, uint32_t tensor, uint64_t iter, uint64_t *size)
{
	const struct rx_tensor *t = tab_find(ctx, tensor);

	if (!t)
		return -EAGAIN;
	if (iter < t->iter)
		return -P3_ESTALE;
	if (iter > t->iter)
		return -EAGAIN;
	if (t->done)
		return -P3_EDUP;
	*size = t->size;
	return 0;
}

static void rx_limits(struct p3_chan *c, struct p3_frame_limits *lim)
{
	*lim = (struct p3_frame_limits){
		.bands = c->bands,
		.max_payload = c->max_payload,
		.tensor_size = rx_tensor_size,
		.ctx = c,
	};
}

/* f's payload is in t's buffer, intact: count it. */
static int rx_commit(struct p3_chan *c, const struct p3_frame *f)
{
	struct rx_tensor *t = tab_find(c, f->tensor);
	struct p3_completion d;
	int err;

	if (!t->t_first)
		t->t_first = p3_now_ns();
	t->got += f->length;
	if (t->got < t->size)
		return 0;
	t->done = 1;
	c->pending--;
	d = (struct p3_completion){ .tensor = t->id, .iter = t->iter, .bytes = t->size,
				    .t_first_ns = t->t_first, .t_done_ns = p3_now_ns() };
	err = done_reserve(c, 1);
	if (!err)
		done_push(c, &d);
	return err;
}

/* A whole header is in k->buf: check it, reserve its range and aim the
 * payload at the tensor's buffer. */
static int conn_header(struct p3_chan *c, struct rx_conn *k)
{
	struct p3_frame_limits lim;
	struct rx_tensor *t;
	uint64_t end;
	int err;

	/* A header-only CRC is checked before any of its fields is used:
	 * a corrupted tensor or iteration must not wait for a registration
	 * or pass as another error.  (The parser refuses other flags, and
	 * this one on a protocol-1 channel.) */
	k->hdr_crc = c->proto >= 2 && p3_frame_flags(k->buf) == P3_FRAME_F_HDRCRC;
	if (k->hdr_crc && p3_frame_crc_header(k->buf) != p3_frame_crc_wire(k->buf))
		return -P3_ECSUM;
	rx_limits(c, &lim);
	err = p3_frame_parse_header_flags(k->buf, k->have, &lim, &k->hdr,
					  c->proto >= 2 ? P3_FRAME_F_HDRCRC : 0, NULL);
	k->stalled = err == -EAGAIN;
	if (err)
		return k->stalled ? 0 : err;
	if (k->hdr.type != P3_FRAME_DATA)
		return -P3_EBADFRAME;	/* a second hello */
	/* Levels and connections map 1:1; anything else is misrouted. */
	if (k->hdr.level != (unsigned int)(k - c->rx))
		return -P3_ELEVEL;
	/* The parser matched the frame against a registered tensor. */
	t = tab_find(c, k->hdr.tensor);
	end = k->hdr.offset + k->hdr.length;
	if (range_overlaps(t, k->hdr.offset, end))
		return -P3_EDUP;
	err = range_add(t, k->hdr.offset, end);
	if (err)
		return err;
	k->dst = t->buf + k->hdr.offset;
	k->crc = p3_frame_crc_header(k->buf);
	k->payload = 1;
	k->have = 0;
	return 0;
}

/* The payload is all in: count it if it is intact and still wanted. */
static int conn_frame(struct p3_chan *c, struct rx_conn *k)
{
	uint8_t *dst = k->dst;

	k->payload = 0;
	k->have = 0;
	k->dst = NULL;
	if (k->crc != p3_frame_crc_wire(k->buf))
		return -P3_ECSUM;
	/* p3_chan_cancel() ran meanwhile: unwanted, not bad. */
	return dst ? rx_commit(c, &k->hdr) : 0;
}

/* Where the next bytes of k's stream go, and at most how many. */
static uint8_t *conn_space(struct rx_conn *k, size_t *room)
{
	if (!k->payload) {
		*room = P3_FRAME_HDR_LEN - k->have;
		return k->buf + k->have;
	}
	*room = k->hdr.length - k->have;
	if (k->dst)
		return k->dst + k->have;
	/* Discarded: through the header's buffer, its crc field kept. */
	if (*room > P3_FRAME_HDR_LEN - sizeof(uint32_t))
		*room = P3_FRAME_HDR_LEN - sizeof(uint32_t);
	return k->buf;
}

/* n bytes arrived at p, where conn_space() said. */
static int conn_took(struct p3_chan *c, struct rx_conn *k, const uint8_t *p, size_t n)
{
	k->have += n;
	if (!k->payload)
		return k->have == P3_FRAME_HDR_LEN ? conn_header(c, k) : 0;
	if (!k->hdr_crc)
		k->crc = p3_crc32c(k->crc, p, n);
	return k->have == k->hdr.length ? conn_frame(c, k) : 0;
}

/* p3_chan_cancel(): payloads on their way into t go nowhere instead. */
static void rx_drop_inflight(struct p3_chan *c, const struct rx_tensor *t)
{
	unsigned int b;

	for (b = 0; b < c->bands; b++)
		if (c->rx[b].payload && c->rx[b].dst &&
		    c->rx[b].hdr.tensor == t->id)
			c->rx[b].dst = NULL;
}

static void conn_close(struct p3_chan *c, struct rx_conn *k, int status)
{
	if (k->fd >= 0)
		close(k->fd);
	k->fd = -1;
	k->status = status;
	k->stalled = 0;
	k->payload = 0;
	k->dst = NULL;
	free(k->buf);
	k->buf = NULL;
	k->have = 0;
	if (status < 0 && !c->err_report)
		c->err_report = status;
}

/* len bytes that arrived, each where conn_space() says; stops at a
 * stall or a failure. */
static void conn_feed(struct p3_chan *c, struct rx_conn *k, const uint8_t *p, size_t len)
{
	size_t take;
	int err;

	while (len && !k->status && !k->stalled) {
		uint8_t *to = conn_space(k, &take);

		if (take > len)
			take = len;
		memcpy(to, p, take);
		p += take;
		len -= take;
		err = conn_took(c, k, to, take);
		if (err)
			conn_close(c, k, err);
	}
}

/* Read and process what one connection has; stops at a stall.  The read
 * that ends a payload also asks for the next frame's header (into
 * @ahead: the frame's own header, in k->buf, holds the crc its end is
 * checked against), and a read shorter than asked emptied the socket:
 * poll() (level-triggered) says when more comes.  So back-to-back frames
 * take one syscall each, not a header read, a payload read and a read
 * that fails with EAGAIN. */
static void conn_read(struct p3_chan *c, struct rx_conn *k)
{
	uint8_t ahead[P3_FRAME_HDR_LEN];
	size_t budget = RX_READ_MAX, want, room, got, asked;
	struct iovec iov[2];
	ssize_t n;
	int err, niov;

	while (!k->status && !k->stalled && budget) {
		uint8_t *p = conn_space(k, &room);

		want = room < budget ? room : budget;
		iov[0] = (struct iovec){ .iov_base = p, .iov_len = want };
		niov = 1;
		if (k->payload && k->dst && want == room)
			iov[niov++] = (struct iovec){ .iov_base = ahead, .iov_len = sizeof(ahead) };
		asked = want + (niov > 1 ? sizeof(ahead) : 0);
		n = readv(k->fd, iov, niov);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			/* EOF between frames is a clean close, inside one is not. */
			conn_close(c, k, n < 0 ? -errno :
				   k->have || k->payload ? -P3_ETRUNC : 1);
			return;
		}
		got = (size_t)n;
		budget -= got < budget ? got : budget;
		err = conn_took(c, k, p, got < want ? got : want);
		if (err)
			conn_close(c, k, err);
		if (got > want)
			conn_feed(c, k, ahead, got - want);
		if (got < asked)
			return;		/* the socket is empty for now */
	}
}

static int conn_init(struct rx_conn *k)
{
	k->have = 0;
	k->payload = 0;
	k->dst = NULL;
	if (!k->buf)
		k->buf = malloc(P3_FRAME_HDR_LEN);
	return k->buf ? 0 : -ENOMEM;
}

int rx_feed(struct p3_chan *c, unsigned int band, const void *data, size_t len)
{
	struct rx_conn *k = &c->rx[band];

	if (!k->buf && !k->status && conn_init(k))
		return -ENOMEM;
	conn_feed(c, k, data, len);
	return k->status < 0 ? k->status : 0;
}

/* Give stalled connections another look after p3_chan_expect(). */
static void rx_unstall(struct p3_chan *c)
{
	unsigned int b;
	int err;

	for (b = 0; b < c->bands; b++) {
		if (!c->rx[b].stalled)
			continue;
		err = conn_header(c, &c->rx[b]);
		if (err)
			conn_close(c, &c->rx[b], err);
	}
}

static int rx_take_error(struct p3_chan *c)
{
	int err = c->err_report;

	c->err_report = 0;
	return err;
}

/* Open connections into pfd: for data, or, while stalled (their data
 * must wait for p3_chan_expect()), for their peer's close only, until it
 * is seen.  Returns the count and sets *open to whether any connection
 * at all is still open.
 */
static unsigned int rx_pollset(struct p3_chan *c, struct pollfd *pfd, unsigned int *map,
			       int *open)
{
	unsigned int b, n = 0;
	short events;

	*open = 0;
	for (b = 0; b < c->bands; b++) {
		if (c->rx[b].status)
			continue;
		*open = 1;
		if (c->rx[b].stalled && c->rx[b].peer_gone)
			continue;
		events = c->rx[b].stalled ? POLLRDHUP : POLLIN;
		pfd[n] = (struct pollfd){ .fd = c->rx[b].fd, .events = events };
		map[n++] = b;
	}
	return n;
}

/* Read from the connections poll() found ready.  A connection closed
 * meanwhile (by another thread's pass: its descriptor is gone) is skipped,
 * and a stalled one is taken for closed by its peer only if poll() said
 * so: it may have stalled after a poll that asked for data. */
void rx_serve(struct p3_chan *c, const struct pollfd *pfd, const unsigned int *map,
	      unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		struct rx_conn *k = &c->rx[map[i]];

		if (!pfd[i].revents || k->status || k->fd != pfd[i].fd)
			continue;
		if (!k->stalled)
			conn_read(c, k);
		else if (pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR))
			k->peer_gone = 1;
	}
}

/* What p3_chan_poll() returns without waiting, or 0 if it must wait. */
static int rx_settled(struct p3_chan *c, unsigned int n, int open)
{
	if (c->err_report)
		return rx_take_error(c);
	if (!open)
		return c->done_n ? (int)c->done_n : c->pending ? -P3_EINCOMPLETE : -EPIPE;
	/* Every open connection is stalled and its peer has gone: nothing
	 * can come that a registration would not release. */
	if (!n)
		return c->done_n ? (int)c->done_n : -P3_EINCOMPLETE;
	return 0;
}

int rx_ready(const struct p3_chan *c)
{
	unsigned int b;

	if (c->done_n || c->err_report)
		return 1;
	for (b = 0; b < c->bands; b++)
		if (!c->rx[b].status && !(c->rx[b].stalled && c->rx[b].peer_gone))
			return 0;
	return 1;	/* p3_chan_poll() would end at once */
}

int rx_poll(struct p3_chan *c, int timeout_ms)
{
	uint64_t deadline = chan_deadline(timeout_ms);
	struct pollfd pfd[P3_MAX_BANDS + 1];
	unsigned int map[P3_MAX_BANDS], n;
	int open, r;

	for (;;) {
		rx_unstall(c);
		n = rx_pollset(c, pfd, map, &open);
		r = rx_settled(c, n, open);
		if (r)
			return r;
		r = chan_wait(c, pfd, n, c->done_n ? 0 : chan_wait_ms(deadline));
		if (r < 0)
			return r;
		rx_serve(c, pfd, map, n);
		if (c->err_report)
			return rx_take_error(c);
		if (c->done_n || !chan_wait_ms(deadline))
			return (int)c->done_n;
	}
}

unsigned int rx_gather(struct p3_chan *c, struct pollfd *pfd, unsigned int *map)
{
	int open;

	rx_unstall(c);
	return rx_pollset(c, pfd, map, &open);
}

void rx_free(struct p3_chan *c)
{
	size_t i;

	for (i = 0; i < P3_MAX_BANDS; i++) {
		free(c->rx[i].buf);
		c->rx[i].buf = NULL;
	}
	for (i = 0; i < c->tab_cap; i++)
		free(c->tab[i].r);
	free(c->tab);
	free(c->done);
	c->tab = NULL;
	c->done = NULL;
}

/* Take over connection fd as band b of a receiving channel. */
int rx_attach(struct p3_chan *c, unsigned int band, int fd)
{
	c->rx[band].fd = fd;
	c->rx[band].status = 0;
	return conn_init(&c->rx[band]);
}
