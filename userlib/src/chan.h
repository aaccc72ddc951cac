/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The channel's private state, shared by chan*.c and listen.c. */
#ifndef P3_CHAN_H
#define P3_CHAN_H

#include <poll.h>
#include <pthread.h>

#include <sys/uio.h>

#include "internal.h"

enum { P3_ROLE_TX = 1, P3_ROLE_RX };

/* Connect and hello timeout when the options leave it 0. */
#define CHAN_DEFAULT_TIMEOUT_MS	10000

/* Sender: one queued message, its frames already encoded. */
/* A message's wire bytes are a list of pieces: one (its frames, copied in)
 * or, for p3_chan_send_ref(), each frame's header here and its payload in
 * the caller's memory, written from there. */
struct tx_msg {
	uint64_t		iter;
	uint32_t		prio;
	uint64_t		seq;		/* arrival order breaks ties */
	size_t			len;		/* bytes on the wire */
	size_t			sent;
	struct iovec		*iov;
	size_t			niov;
	size_t			iov_at;		/* first piece not all written */
	size_t			iov_off;	/* bytes of it written */
	int			ref;		/* caller's memory: complete it when done */
	struct p3_completion	done;		/* ref: what p3_chan_next() says */
	uint8_t			data[];
};

struct tx_band {
	int		fd;
	int		err;		/* sticky: the band is dead */
	size_t		nrefusal;	/* bytes of a refusal read so far */
	uint8_t		refusal[P3_FRAME_HDR_LEN + P3_REFUSE_LEN];
	struct tx_msg	*cur;		/* partly written; never preempted */
	struct tx_msg	**heap;		/* min-heap on (iter, prio, seq) */
	size_t		nheap;
	size_t		cheap;
};

/* Receiver: what has arrived of one tensor, as disjoint sorted ranges. */
struct rx_range {
	uint64_t	start;
	uint64_t	end;
};

struct rx_tensor {
	uint32_t	id;
	uint8_t		used;
	uint8_t		done;
	uint64_t	iter;
	uint8_t		*buf;
	uint64_t	size;
	uint64_t	got;
	uint64_t	t_first;
	struct rx_range	*r;
	size_t		nr;
	size_t		cr;
};

struct rx_conn {
	int		fd;
	int		status;		/* 0 open, 1 clean EOF, < 0 error */
	int		stalled;	/* header waits for p3_chan_expect() */
	int		peer_gone;	/* seen closed by its peer while stalled */
	uint8_t		*buf;		/* the header being (or last) received */
	size_t		have;		/* bytes of the header, then of the payload */
	int		payload;	/* 0: reading a header, 1: its payload */
	uint8_t		*dst;		/* where the payload goes; NULL: dropped */
	uint32_t	crc;		/* of the header and the payload so far */
	int		hdr_crc;	/* the frame's CRC covers its header only */
	struct p3_frame	hdr;
};

struct p3_chan {
	int			role;
	unsigned int		bands;
	uint64_t		id;
	uint64_t		cookie;		/* sender: groups its bands at the receiver */
	uint32_t		max_payload;
	/* The protocol its hellos name (p3.h, P3_PROTO_*): from 2 a data
	 * frame may leave its payload to TCP's checksum (a sender of 2
	 * always does). */
	uint8_t			proto;

	/* Threads: every field below is guarded by lock. */
	pthread_mutex_t		lock;
	pthread_cond_t		changed;	/* the engine moved data, or shutdown */
	unsigned int		users;		/* calls inside, waiting or not */
	int			closing;
	int			wake;		/* eventfd: ends any poll() in the channel */
	int			notify;		/* eventfd: p3_chan_fd() */
	int			notified;	/* notify holds a count */
	int			engine_on;	/* the engine (engine.c) serves it: */
							/* it does the I/O, p3_chan_fd() works */

	/* sender */
	struct tx_band		tx[P3_MAX_BANDS];
	size_t			queued;
	size_t			max_queued;
	uint64_t		seq;

	/* receiver */
	struct rx_conn		rx[P3_MAX_BANDS];
	struct rx_tensor	*tab;		/* open addressing on id */
	size_t			tab_cap;
	size_t			tab_used;
	size_t			pending;
	struct p3_completion	*done;		/* ring */
	size_t			done_head;
	size_t			done_n;
	size_t			done_cap;
	size_t			refs;		/* sender: ref messages not yet completed */
	int			err_report;	/* first unreported conn error */
};

/* Completions (chan.c): room for n more is made first, so that pushing
 * never fails where a completion must not be lost. */
int done_reserve(struct p3_chan *c, size_t n);
void done_push(struct p3_chan *c, const struct p3_completion *d);

struct p3_chan *chan_alloc(int role, unsigned int bands, uint64_t id, uint32_t max_payload);
/* The caller's options (NULL: the defaults) into *o, at the caller's size. */
int chan_opts_read(struct p3_chan_opts *o, const struct p3_chan_opts *opts);
int chan_band_level(unsigned int band, uint64_t stride);
/* Bound how long a band's peer may stay silent (opts.peer_timeout_ms). */
int chan_sock_peer_timeout(int fd, int timeout_ms);
int chan_wait_ms(uint64_t deadline_ns);
uint64_t chan_deadline(int timeout_ms);

/* Lock, condition and eventfds: 0 or -errno (chan_alloc() does this). */
int chan_thread_init(struct p3_chan *c);
/* Every public call runs between chan_enter() (-P3_ECLOSED once shut down)
 * or chan_lock() (for queries, which work until close) and chan_unlock(). */
int chan_enter(struct p3_chan *c);
void chan_lock(struct p3_chan *c);
void chan_unlock(struct p3_chan *c);
/* Wait for pfd[0..n) (room for one more is needed) up to wait_ms, with the
 * lock dropped; with the engine serving c, callers wait for its news
 * instead.  Returns ready descriptors (revents set), 0, -P3_ECLOSED, or
 * -errno. */
int chan_wait(struct p3_chan *c, struct pollfd *pfd, unsigned int n, int wait_ms);
/* New work for the engine (a queued message, a registration). */
void chan_kick(struct p3_chan *c);
/* Have the process's engine serve c from now on; 0 or -errno. */
int chan_start_engine(struct p3_chan *c);
/* The engine's two steps on c, each taking c's lock and never blocking:
 * the descriptors c waits for now, into pfd[] with each one's band in
 * band[] (room for c->bands), and progress with the revents that poll()
 * set in them. */
unsigned int chan_engine_prepare(struct p3_chan *c, struct pollfd *pfd, unsigned int *band);
void chan_engine_serve(struct p3_chan *c, const struct pollfd *pfd, const unsigned int *band,
		       unsigned int n);
/* A completion was taken: p3_chan_fd() may have nothing left to say. */
void chan_consumed(struct p3_chan *c);
/* Shut down, wait until no call is inside, and take c from the engine. */
void chan_quiesce(struct p3_chan *c);

/* The process's progress engine (engine.c): one thread, "p3-engine",
 * serving every channel added, started with the first; 0 or -errno. */
int engine_add(struct p3_chan *c);
/* Once it returns, the engine never touches c again. */
void engine_remove(struct p3_chan *c);
/* End the engine's poll(): a served channel has news. */
void engine_kick(void);

int tx_pump(struct p3_chan *c, int timeout_ms);
int tx_step(struct p3_chan *c, int wait_ms);
/* The bands with bytes to write, for room and for a refusal; and writing
 * to those poll() found ready.  Under the lock, never blocking. */
unsigned int tx_pollset(struct p3_chan *c, struct pollfd *pfd, unsigned int *map);
void tx_serve(struct p3_chan *c, const struct pollfd *pfd, const unsigned int *map,
	      unsigned int n);
void tx_free(struct p3_chan *c);
int tx_push_hello(struct p3_chan *c, unsigned int band);

int rx_poll(struct p3_chan *c, int timeout_ms);
/* The engine's receive steps, under the lock, never blocking: release
 * bands stalled on a registration and gather the open connections; read
 * from those poll() found ready. */
unsigned int rx_gather(struct p3_chan *c, struct pollfd *pfd, unsigned int *map);
void rx_serve(struct p3_chan *c, const struct pollfd *pfd, const unsigned int *map,
	      unsigned int n);
/* Something for p3_chan_fd()'s reader: a completion or an error. */
int rx_ready(const struct p3_chan *c);
void rx_free(struct p3_chan *c);
/* Feed bytes to a receiving connection as if read() returned them; used by
 * the stream fuzzer.  Returns 0, or the error that closed the connection. */
int rx_feed(struct p3_chan *c, unsigned int band, const void *data, size_t len);
int rx_attach(struct p3_chan *c, unsigned int band, int fd);
/* The longest lookup in the tensor table, in slots (for the tests). */
size_t rx_table_longest_probe(const struct p3_chan *c);

#endif /* P3_CHAN_H */
