// SPDX-License-Identifier: LGPL-2.1-or-later
/* What both ends of a channel share: options, lifetime, time, queries. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "chan.h"

#define DEFAULT_BANDS		8
#define DEFAULT_MAX_QUEUED	(64u << 20)
#define DEFAULT_TIMEOUT_MS	10000

P3_EXPORT void p3_chan_opts_init(struct p3_chan_opts *o)
{
	if (!o)
		return;
	*o = (struct p3_chan_opts){
		.bands = DEFAULT_BANDS,
		.tag_method = P3_METHOD_DEFAULT,
		.notsent_lowat = -1,
		.max_queued = DEFAULT_MAX_QUEUED,
		.max_payload = P3_DEFAULT_MAX_PAYLOAD,
		.timeout_ms = DEFAULT_TIMEOUT_MS,
	};
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
	if (!c)
		return -EINVAL;
	if (c->role == P3_ROLE_TX)
		return tx_pump(c, timeout_ms);
	return rx_poll(c, timeout_ms);
}

P3_EXPORT void p3_chan_close(struct p3_chan *c)
{
	unsigned int b;

	if (!c)
		return;
	for (b = 0; b < P3_MAX_BANDS; b++) {
		if (c->tx[b].fd >= 0)
			close(c->tx[b].fd);
		if (c->rx[b].fd >= 0)
			close(c->rx[b].fd);
	}
	tx_free(c);
	rx_free(c);
	free(c);
}

P3_EXPORT unsigned int p3_chan_bands(const struct p3_chan *c)
{
	return c ? c->bands : 0;
}

P3_EXPORT uint64_t p3_chan_id(const struct p3_chan *c)
{
	return c ? c->id : 0;
}

P3_EXPORT size_t p3_chan_queued(const struct p3_chan *c)
{
	return c ? c->queued : 0;
}

P3_EXPORT size_t p3_chan_pending(const struct p3_chan *c)
{
	return c ? c->pending : 0;
}

P3_EXPORT int p3_chan_band_status(const struct p3_chan *c, unsigned int band)
{
	if (!c || band >= c->bands)
		return -EINVAL;
	if (c->role == P3_ROLE_TX)
		return c->tx[band].err;
	return c->rx[band].status;
}
