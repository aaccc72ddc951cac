// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The datagram receiver's reassembly: registered tensors with a bitmap of
 * the chunks they hold, a bounded queue of datagrams that came before
 * their tensor was registered, and the completions.  Nothing here touches
 * a socket; dgram.c feeds it what it reads.
 *
 * A datagram is written only after every check has passed: its frame
 * (magic, version, type, level, length at most one chunk, checksum), its
 * length on the wire, its tensor and iteration, an offset on a chunk
 * boundary inside the tensor and a length that is exactly that chunk's.
 * So a datagram can fill one chunk of the tensor it names, once, and
 * nothing else.
 */
#include <errno.h>
#include <stdlib.h>

#include "dgram.h"

struct dg_tensor {
	uint32_t	id;
	int		done;
	uint64_t	iter;
	uint8_t		*buf;
	uint64_t	size;
	uint64_t	deadline_ns;	/* the longest wait for a next datagram */
	uint64_t	due_ns;		/* completes then if not before; 0 none */
	uint64_t	t_first_ns;
	uint64_t	got;		/* bytes stored */
	uint64_t	*have;		/* bit k: chunk k stored */
	uint64_t	nchunks;
};

/* A datagram waiting for its tensor (or iteration) to be registered. */
struct dg_early {
	struct dg_early	*next;
	uint32_t	tensor;
	uint64_t	iter;
	size_t		len;
	uint8_t		data[];
};

struct p3_dgram_rx {
	unsigned int		bands;
	uint32_t		chunk;
	struct p3_dgram_stats	*st;

	struct dg_tensor	*t;	/* registered tensors, never removed */
	size_t			nt, tcap;
	int32_t			*hash;	/* index into t by id, linear probing */
	size_t			hcap;	/* power of two, >= 2 * tcap */

	struct dg_early		*early, *early_tail;
	uint64_t		early_used, early_max;

	struct p3_dgram_completion *done;	/* ring of completions */
	size_t			done_head, ndone, done_cap;
};

struct p3_dgram_rx *p3_dgram_rx_new(unsigned int bands, uint32_t chunk, uint64_t early_bytes,
				    struct p3_dgram_stats *stats)
{
	struct p3_dgram_rx *rx;

	if (!bands || bands > P3_MAX_BANDS || !chunk || !stats)
		return NULL;
	rx = calloc(1, sizeof(*rx));
	if (!rx)
		return NULL;
	rx->bands = bands;
	rx->chunk = chunk;
	rx->early_max = early_bytes;
	rx->st = stats;
	return rx;
}

static void early_free_all(struct p3_dgram_rx *rx)
{
	struct dg_early *e, *next;

	for (e = rx->early; e; e = next) {
		next = e->next;
		free(e);
	}
	rx->early = rx->early_tail = NULL;
	rx->early_used = 0;
}

void p3_dgram_rx_free(struct p3_dgram_rx *rx)
{
	size_t i;

	if (!rx)
		return;
	for (i = 0; i < rx->nt; i++)
		free(rx->t[i].have);
	free(rx->t);
	free(rx->hash);
	free(rx->done);
	early_free_all(rx);
	free(rx);
}

/* ------------------------------------------------------------ the table */

static size_t hash_slot(uint32_t id, size_t hcap)
{
	/* Fibonacci hashing: consecutive ids spread over the table. */
	return (size_t)(((uint64_t)id * 0x9e3779b97f4a7c15ull) >> 32) & (hcap - 1);
}

static struct dg_tensor *lookup(const struct p3_dgram_rx *rx, uint32_t id)
{
	size_t i;

	if (!rx->hcap)
		return NULL;
	for (i = hash_slot(id, rx->hcap); rx->hash[i] >= 0; i = (i + 1) & (rx->hcap - 1))
		if (rx->t[rx->hash[i]].id == id)
			return &rx->t[rx->hash[i]];
	return NULL;
}

static void hash_insert(struct p3_dgram_rx *rx, size_t index)
{
	size_t i = hash_slot(rx->t[index].id, rx->hcap);

	while (rx->hash[i] >= 0)
		i = (i + 1) & (rx->hcap - 1);
	rx->hash[i] = (int32_t)index;
}

/* Room for one more tensor, the table kept at most half full. */
static int table_grow(struct p3_dgram_rx *rx)
{
	size_t tcap, hcap, i;
	struct dg_tensor *t;
	int32_t *hash;

	if (rx->nt < rx->tcap)
		return 0;
	if (rx->tcap >= INT32_MAX / 4)
		return -ENOMEM;
	tcap = rx->tcap ? rx->tcap * 2 : 16;
	t = realloc(rx->t, tcap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	rx->t = t;
	hcap = tcap * 2;
	hash = malloc(hcap * sizeof(*hash));
	if (!hash)
		return -ENOMEM;
	free(rx->hash);
	rx->hash = hash;
	rx->hcap = hcap;
	rx->tcap = tcap;
	for (i = 0; i < hcap; i++)
		hash[i] = -1;
	for (i = 0; i < rx->nt; i++)
		hash_insert(rx, i);
	return 0;
}

/* ------------------------------------------------------ completing one */

static int chunk_held(const struct dg_tensor *t, uint64_t k)
{
	return (t->have[k / 64] >> (k % 64)) & 1;
}

static int push_completion(struct p3_dgram_rx *rx, const struct p3_dgram_completion *c)
{
	struct p3_dgram_completion *ring;
	size_t cap, i;

	if (rx->ndone == rx->done_cap) {
		cap = rx->done_cap ? rx->done_cap * 2 : 16;
		ring = malloc(cap * sizeof(*ring));
		if (!ring)
			return -ENOMEM;
		for (i = 0; i < rx->ndone; i++)
			ring[i] = rx->done[(rx->done_head + i) % rx->done_cap];
		free(rx->done);
		rx->done = ring;
		rx->done_cap = cap;
		rx->done_head = 0;
	}
	rx->done[(rx->done_head + rx->ndone) % rx->done_cap] = *c;
	rx->ndone++;
	return 0;
}

/* The missing chunks become zeros: a gradient part that never came
 * counts as no change, which is what the training then applies. */
static int complete(struct p3_dgram_rx *rx, struct dg_tensor *t, uint64_t now)
{
	struct p3_dgram_completion c = {
		.tensor = t->id, .iter = t->iter, .bytes = t->size,
		.missing = t->size - t->got, .t_first_ns = t->t_first_ns, .t_done_ns = now,
	};
	uint64_t k, off;

	if (c.missing)
		for (k = 0; k < t->nchunks; k++) {
			if (chunk_held(t, k))
				continue;
			off = k * rx->chunk;
			memset(t->buf + off, 0,
			       t->size - off < rx->chunk ? t->size - off : rx->chunk);
		}
	t->done = 1;
	return push_completion(rx, &c);
}

/* -------------------------------------------------------------- storing */

/* The tensor completes at @due, or later if it was to complete later. */
static void wait_until(struct dg_tensor *t, uint64_t due)
{
	if (due > t->due_ns)
		t->due_ns = due;
}

static int store(struct p3_dgram_rx *rx, struct dg_tensor *t, const struct p3_frame *f,
		 uint64_t now)
{
	uint64_t k, want;

	if (f->offset % rx->chunk || f->offset >= t->size) {
		rx->st->bad++;
		return -P3_ERANGE;
	}
	want = t->size - f->offset < rx->chunk ? t->size - f->offset : rx->chunk;
	if (f->length != want) {
		rx->st->bad++;
		return -P3_ERANGE;
	}
	k = f->offset / rx->chunk;
	if (chunk_held(t, k)) {
		rx->st->duplicate++;
		return -P3_EDUP;
	}
	memcpy(t->buf + f->offset, f->payload, f->length);
	t->have[k / 64] |= 1ull << (k % 64);
	t->got += f->length;
	rx->st->stored++;
	if (!t->t_first_ns)
		t->t_first_ns = now;
	/* Every datagram restarts the wait: a slow link still delivers the
	 * rest, and only a silence of deadline_ns means they were lost.
	 */
	if (t->deadline_ns)
		wait_until(t, now + t->deadline_ns);
	if (t->got == t->size)
		return complete(rx, t, now);
	return 0;
}

/* Keeps a copy of a checked datagram for a tensor (or iteration) not yet
 * registered; the oldest make room, as they are the likeliest to be of
 * no use any more. */
static int early_push(struct p3_dgram_rx *rx, const struct p3_frame *f, const void *buf,
		      size_t len)
{
	struct dg_early *e, *old;

	if (len > rx->early_max) {
		rx->st->overflow++;
		return -ENOBUFS;
	}
	while (rx->early && rx->early_used + len > rx->early_max) {
		old = rx->early;
		rx->early = old->next;
		if (!rx->early)
			rx->early_tail = NULL;
		rx->early_used -= old->len;
		free(old);
		rx->st->overflow++;
	}
	e = malloc(sizeof(*e) + len);
	if (!e) {
		rx->st->overflow++;
		return -ENOMEM;
	}
	e->next = NULL;
	e->tensor = f->tensor;
	e->iter = f->iter;
	e->len = len;
	memcpy(e->data, buf, len);
	if (rx->early_tail)
		rx->early_tail->next = e;
	else
		rx->early = e;
	rx->early_tail = e;
	rx->early_used += len;
	rx->st->waiting++;
	return 0;
}

int p3_dgram_rx_input(struct p3_dgram_rx *rx, const void *buf, size_t len, uint64_t now)
{
	struct p3_frame_limits lim = { .bands = rx->bands, .max_payload = rx->chunk };
	struct dg_tensor *t;
	struct p3_frame f;
	int n;

	n = p3_frame_parse(buf, len, &lim, &f);
	if (n >= 0 && ((size_t)n != len || f.type != P3_FRAME_DATA))
		n = -P3_EBADFRAME;
	if (n < 0) {
		rx->st->bad++;
		return n;
	}
	t = lookup(rx, f.tensor);
	if (!t || f.iter > t->iter)
		return early_push(rx, &f, buf, len);
	if (f.iter < t->iter) {
		rx->st->stale++;
		return -P3_ESTALE;
	}
	if (t->done) {
		rx->st->late++;
		return 0;
	}
	return store(rx, t, &f, now);
}

void p3_dgram_rx_input_run(struct p3_dgram_rx *rx, const void *buf, size_t len, size_t seg,
			   uint64_t now)
{
	const uint8_t *p = buf;
	size_t off = 0;

	if (!seg || seg > len)
		seg = len;
	/* do-while: an empty read is still one (bad) datagram. */
	do {
		p3_dgram_rx_input(rx, p + off, len - off < seg ? len - off : seg, now);
		off += seg;
	} while (off < len);
}

/* Stores, or drops as stale, the waiting datagrams of t's tensor that are
 * not newer than its registered iteration. */
static void early_replay(struct p3_dgram_rx *rx, struct dg_tensor *t, uint64_t now)
{
	struct dg_early **pp = &rx->early, *e, *prev = NULL;

	while ((e = *pp)) {
		if (e->tensor != t->id || e->iter > t->iter) {
			prev = e;
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		if (rx->early_tail == e)
			rx->early_tail = prev;
		rx->early_used -= e->len;
		rx->st->waiting--;
		/* Counted again by its fate now: stored, stale, duplicate. */
		p3_dgram_rx_input(rx, e->data, e->len, now);
		free(e);
	}
}

/* --------------------------------------------------------- registering */

int p3_dgram_rx_expect(struct p3_dgram_rx *rx, uint32_t tensor, void *buf, uint64_t size,
		       uint64_t iter, uint64_t deadline_ns, uint64_t now)
{
	uint64_t nchunks = size / rx->chunk + !!(size % rx->chunk);
	struct dg_tensor *t = lookup(rx, tensor);
	uint64_t *have;
	int err;

	if (!buf && size)
		return -EINVAL;
	if (nchunks > SIZE_MAX / 8 / 2)
		return -ENOMEM;
	if (t && !t->done)
		return -EBUSY;
	if (t && iter < t->iter)
		return -P3_ESTALE;
	have = calloc(nchunks / 64 + 1, sizeof(*have));
	if (!have)
		return -ENOMEM;
	if (!t) {
		err = table_grow(rx);
		if (err) {
			free(have);
			return err;
		}
		t = &rx->t[rx->nt];
		memset(t, 0, sizeof(*t));
		t->id = tensor;
		hash_insert(rx, rx->nt++);
	}
	free(t->have);
	*t = (struct dg_tensor){ .id = tensor, .iter = iter, .buf = buf, .size = size,
				 .deadline_ns = deadline_ns, .have = have, .nchunks = nchunks };
	if (!size)
		return complete(rx, t, now);
	early_replay(rx, t, now);
	return 0;
}

int p3_dgram_rx_finish(struct p3_dgram_rx *rx, uint32_t tensor, uint64_t after_ns,
		       uint64_t now)
{
	struct dg_tensor *t = lookup(rx, tensor);

	if (!t)
		return -ENOENT;
	if (t->done)
		return 0;
	if (!after_ns)
		return complete(rx, t, now);
	wait_until(t, now + after_ns);
	return 0;
}

uint64_t p3_dgram_rx_expire(struct p3_dgram_rx *rx, uint64_t now)
{
	uint64_t next = 0;
	size_t i;

	for (i = 0; i < rx->nt; i++) {
		struct dg_tensor *t = &rx->t[i];

		if (t->done || !t->due_ns)
			continue;
		if (t->due_ns <= now)
			complete(rx, t, now);
		else if (!next || t->due_ns < next)
			next = t->due_ns;
	}
	return next;
}

size_t p3_dgram_rx_ready(const struct p3_dgram_rx *rx)
{
	return rx->ndone;
}

int p3_dgram_rx_next(struct p3_dgram_rx *rx, struct p3_dgram_completion *out)
{
	if (!rx->ndone)
		return 0;
	*out = rx->done[rx->done_head];
	rx->done_head = (rx->done_head + 1) % rx->done_cap;
	rx->ndone--;
	return 1;
}

int p3_dgram_rx_missing(const struct p3_dgram_rx *rx, uint32_t tensor, struct p3_range *r,
			size_t n)
{
	const struct dg_tensor *t = lookup(rx, tensor);
	uint64_t k, start;
	size_t runs = 0;

	if (!t)
		return -ENOENT;
	if (!t->done)
		return -EBUSY;
	for (k = 0; k < t->nchunks; k++) {
		if (chunk_held(t, k))
			continue;
		start = k;
		while (k + 1 < t->nchunks && !chunk_held(t, k + 1))
			k++;
		if (runs < n) {
			r[runs].offset = start * rx->chunk;
			r[runs].length = ((k + 1) * rx->chunk < t->size ? (k + 1) * rx->chunk
									: t->size) -
					 r[runs].offset;
		}
		if (runs++ == INT32_MAX)
			break;
	}
	return (int)runs;
}
