/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The datagram receiver's state (p3.h, "datagrams"), kept free of sockets
 * so that a fuzzer can feed it datagrams directly.  Times are p3_now_ns().
 */
#ifndef P3_DGRAM_H
#define P3_DGRAM_H

#include "internal.h"

struct p3_dgram_rx;

struct p3_dgram_rx *p3_dgram_rx_new(unsigned int bands, uint32_t chunk, uint64_t early_bytes,
				    struct p3_dgram_stats *stats);
void p3_dgram_rx_free(struct p3_dgram_rx *rx);

/* Check one datagram whole, then store it, queue it for a tensor not yet
 * registered, or drop it; each fate is counted in the stats.  Returns 0,
 * or why it was dropped. */
int p3_dgram_rx_input(struct p3_dgram_rx *rx, const void *buf, size_t len, uint64_t now);

/* One read the kernel coalesced (UDP GRO): consecutive datagrams of seg
 * bytes each, the last possibly shorter, each put through
 * p3_dgram_rx_input().  seg 0 (or >= len): one datagram. */
void p3_dgram_rx_input_run(struct p3_dgram_rx *rx, const void *buf, size_t len, size_t seg,
			   uint64_t now);

int p3_dgram_rx_expect(struct p3_dgram_rx *rx, uint32_t tensor, void *buf, uint64_t size,
		       uint64_t iter, uint64_t deadline_ns, uint64_t now);
int p3_dgram_rx_finish(struct p3_dgram_rx *rx, uint32_t tensor, uint64_t after_ns,
		       uint64_t now);

/* Complete every tensor whose deadline is at or before now; returns the
 * earliest deadline still ahead, or 0 if none. */
uint64_t p3_dgram_rx_expire(struct p3_dgram_rx *rx, uint64_t now);

/* Completions ready, and the oldest of them popped into *out (1, or 0). */
size_t p3_dgram_rx_ready(const struct p3_dgram_rx *rx);
int p3_dgram_rx_next(struct p3_dgram_rx *rx, struct p3_dgram_completion *out);

int p3_dgram_rx_missing(const struct p3_dgram_rx *rx, uint32_t tensor, struct p3_range *r,
			size_t n);

#endif /* P3_DGRAM_H */
