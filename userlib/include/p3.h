/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libp3 - user-space half of sch_p3 (Priority-based Parameter Propagation).
 *
 * Socket tagging, the slice planner, the multi-band channel transport and
 * qdisc control.  Every call returns 0 (or a count) on success and a
 * negative error on failure: either -errno or -P3_E*, a library code above
 * the errno range.  p3_strerror() turns both into a message.  Nothing in
 * the library prints, exits or raises signals (sends use MSG_NOSIGNAL).
 *
 * A channel may be used from several threads at once (see "Threads" below);
 * a listener belongs to one thread at a time.  The other calls keep no state
 * between calls (the netlink extack text is per thread).
 */
#ifndef P3_H
#define P3_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define P3_VERSION_MAJOR	1
#define P3_VERSION_MINOR	1

#define P3_MAX_BANDS		64

/* ---------------------------------------------------------------- errors */

#define P3_ERRBASE		0x3000	/* library codes, far above any errno */

enum p3_error {
	P3_EBADMAGIC = P3_ERRBASE,	/* frame does not start with P3_FRAME_MAGIC */
	P3_EVERSION,		/* frame version not understood */
	P3_EBADFRAME,		/* bad type, flags, reserved bits or zero length */
	P3_ETOOBIG,		/* payload longer than the receiver's bound */
	P3_ELEVEL,		/* level not below the channel's band count (or 64) */
	P3_ERANGE,		/* offset + length outside the registered tensor */
	P3_ECSUM,		/* CRC32C mismatch */
	P3_ETRUNC,		/* buffer ends (or peer closed) inside a frame */
	P3_EDUP,		/* slice duplicates or overlaps received bytes */
	P3_ESTALE,		/* slice for an older iteration than registered */
	P3_EHELLO,		/* bad, duplicate or inconsistent hello */
	P3_EINCOMPLETE,		/* peer closed all bands with tensors incomplete */
	P3_ENEEDCAP_PRIO,	/* SO_PRIORITY > 6 needs CAP_NET_ADMIN */
	P3_ENEEDCAP_MARK,	/* SO_MARK needs CAP_NET_ADMIN */
	P3_EDSCPRANGE,		/* level > 30 has no DSCP code point */
	P3_ETAGVERIFY,		/* getsockopt read back another tag */
	P3_ENOTP3,		/* the qdisc found there is not p3 */
	P3_ENLPARSE,		/* malformed netlink reply */
	P3_ECLOSED,		/* the channel was shut down (by another thread) */
	__P3_EMAX
};

/* The library's version, "MAJOR.MINOR.PATCH"; the SONAME's number is
 * MAJOR, the ABI.
 */
const char *p3_version(void);

/* Message for a negative (or positive) errno or P3_E* code; never NULL. */
const char *p3_strerror(int err);

/*
 * Extended-ack text of the last failed netlink request made by this
 * thread ("" if the kernel sent none).  Valid until the next p3_qdisc_*.
 */
const char *p3_last_extack(void);

/* CLOCK_MONOTONIC in nanoseconds: the clock of completion timestamps. */
uint64_t p3_now_ns(void);

/* --------------------------------------------------------------- tagging */

/*
 * How a socket carries its level to the qdisc.  By SO_PRIORITY or SO_MARK
 * level L is written as tag L + 1, tag 0 meaning "untagged" (the qdisc's
 * default band); by DSCP as the code point p3_level_dscp(L).
 */
enum p3_tag_method {
	P3_METHOD_DEFAULT,	/* the process-wide method, see p3_tag_config */
	P3_METHOD_DSCP,		/* IP_TOS / IPV6_TCLASS; unprivileged, L <= 30 */
	P3_METHOD_PRIORITY,	/* SO_PRIORITY; L >= 6 needs CAP_NET_ADMIN */
	P3_METHOD_MARK,		/* SO_MARK; always needs CAP_NET_ADMIN */
};

#define P3_DEFAULT_NOTSENT_LOWAT	16384

/* Parse "dscp", "priority"/"prio", "mark"; returns a method or -EINVAL. */
int p3_tag_method_parse(const char *name);
/* "dscp", "priority", "mark" (the default method resolved). */
const char *p3_tag_method_name(int method);

/*
 * Process-wide defaults used by p3_tag() and by channels.  method may not
 * be P3_METHOD_DEFAULT; notsent_lowat is bytes, 0 = leave sockets alone.
 * Before the first call the method comes from $P3_TAG_METHOD (else dscp).
 */
int p3_tag_config(int method, int notsent_lowat);

/*
 * Tag socket fd with level using the process-wide method, verify it by
 * reading it back, and (on TCP) set TCP_NOTSENT_LOWAT.  IPv4 sockets get
 * IP_TOS, IPv6 get IPV6_TCLASS, and dual-stack IPv6 sockets get both so
 * v4-mapped traffic is tagged too.  The ECN bits are kept.  A level of 64
 * or more fails with -P3_ELEVEL.
 */
int p3_tag(int fd, unsigned int level);

/* As p3_tag() with an explicit method and TCP_NOTSENT_LOWAT (-1: default,
 * 0: leave unchanged). */
int p3_tag_ex(int fd, unsigned int level, int method, int notsent_lowat);

/* Level currently tagged on fd with method, -ENOENT if untagged. */
int p3_tag_get(int fd, int method);

/*
 * The DSCP code point of level (0..30): the level-th of RFC 2474's
 * local-use pool xxxx11 (3, 7, ..., 63), then of pool xxxx01 without
 * Lower-Effort (5, 9, ..., 61), so no level takes a code point with a
 * standard meaning; -P3_EDSCPRANGE above 30.  p3_dscp_level() is its
 * inverse, -ENOENT for any other code point (untagged).
 */
int p3_level_dscp(unsigned int level);
int p3_dscp_level(unsigned int dscp);

/* --------------------------------------------------------------- planner */

#define P3_DEFAULT_SLICE	200000	/* 50,000 fp32 parameters, as P3 */

/*
 * Structs that grow.  The option and statistics structs (p3_plan_opts,
 * p3_chan_opts, p3_qdisc_opts, p3_qdisc_stats) begin with `size`: the
 * caller's sizeof, or 0 for the first layout (LIBP3_1's: these
 * definitions, less the fields marked as added since), so a zeroed
 * struct is always right.  New fields are only ever appended.  A newer libp3 reads only the first `size` bytes of an
 * older caller's options and keeps its defaults for the rest, and writes
 * only `size` bytes of statistics.  Options from a newer caller that set
 * a field this libp3 does not know (a non-zero byte past its own layout)
 * fail with -E2BIG instead of being ignored; a size below the first
 * layout fails with -EINVAL.  The records passed in arrays (p3_tensor,
 * p3_slice, p3_send, p3_completion) keep their layout for LIBP3_1.
 */

struct p3_tensor {
	const char	*name;		/* informational, may be NULL */
	uint64_t	bytes;		/* 0-byte tensors produce no slices */
	uint32_t	fwd;		/* forward index: 0 is used first */
};

struct p3_plan_opts {
	uint32_t	size;		/* sizeof(struct p3_plan_opts), 0 = first layout */
	unsigned int	bands;		/* levels to use, 1..64; 0 = 8 */
	uint64_t	slice_bytes;	/* cut size; 0 = P3_DEFAULT_SLICE */
	uint64_t	merge_bytes;	/* merged-message cap; 0 = slice_bytes */
	double		alpha_s;	/* start-up cost per message (s); 0 = no merging */
	double		beta_s_per_byte;	/* cost per byte (s); informational */
	/* Since libp3 1.3, read only with size = sizeof(struct p3_plan_opts).
	 * 64 bits, so that the struct has no padding that a caller would
	 * have to zero for an older libp3 (p3_struct_in's -E2BIG). */
	uint64_t	order;		/* P3_ORDER_*; 0 = P3_ORDER_FORWARD */
};

/*
 * The order slices are meant to be sent in, as p3_slice.prio and .level say.
 *
 * P3_ORDER_FORWARD: P3's, the next forward pass's.
 *
 * P3_ORDER_TAIL_FIRST: as forward, except for the tensors the forward pass
 * needs after the largest one (its tail), when they hold some bytes but at
 * most a quarter of all.  They come first, on level 0, in forward order;
 * every other slice keeps its level and comes after them.  Backward
 * produces that tail first and the next forward pass needs it right after
 * the largest tensor: in forward order it waits out the largest tensor's
 * whole transfer and then delays the end of the iteration, while the
 * tensors that now wait for it are needed long after (docs/libp3.md,
 * "Planner").
 */
#define P3_ORDER_FORWARD	0
#define P3_ORDER_TAIL_FIRST	1

struct p3_slice {
	uint32_t	tensor;		/* index into the input array */
	uint32_t	msg;		/* message id; merged slices share one */
	uint64_t	offset;		/* byte offset in the tensor */
	uint64_t	length;		/* bytes, > 0 */
	uint32_t	prio;		/* send rank of the tensor, 0 = first:
					 * its forward rank unless the order
					 * (P3_ORDER_*) moved it */
	uint8_t		level;		/* 0 (most urgent) .. bands - 1 */
};

/*
 * Plan n tensors.  Large tensors are cut at slice_bytes; runs of small
 * neighbours (same level) are merged into one message while that saves a
 * start-up cost and stays under merge_bytes; forward order is quantised
 * monotonically into bands, then opts->order may move some tensors ahead
 * (P3_ORDER_*).  *out (free with p3_plan_free) holds *nout slices in
 * forward order; their prio and level say when to send them.  -EINVAL for
 * an unknown order.
 */
int p3_plan(const struct p3_tensor *t, size_t n, const struct p3_plan_opts *opts,
	    struct p3_slice **out, size_t *nout);
void p3_plan_free(struct p3_slice *slices);

/*
 * Smallest slice whose fixed cost (alpha_s plus one frame header) is at
 * most max_overhead (e.g. 0.05; <= 0 or >= 1 means 0.05) of its total send
 * time, with a per-byte cost of max(beta, 1 / link_bytes_per_s).  A larger
 * slice only delays preemption.  Rounded up to 4 bytes and clamped to
 * [4 KiB, 16 MiB]; P3_DEFAULT_SLICE when neither beta nor rate is known.
 */
uint64_t p3_plan_suggest_slice(double alpha_s, double beta_s_per_byte,
			       double link_bytes_per_s, double max_overhead);

/* --------------------------------------------------------------- framing */

/*
 * Wire header, 40 bytes, big endian:
 *   0 magic u32   4 version u8   5 type u8   6 level u8   7 flags u8 (0)
 *   8 tensor u32  12 length u32  16 offset u64  24 iteration u64
 *  32 reserved u32 (0)  36 crc32c u32 over header (crc = 0) and payload
 */
#define P3_FRAME_MAGIC		0x50334652u	/* "P3FR" */
#define P3_FRAME_VERSION	1
#define P3_FRAME_HDR_LEN	40
#define P3_HELLO_LEN		32
#define P3_REFUSE_LEN		16
/* The channel protocol (hello, refusal, data) versions this libp3 speaks;
 * a hello names the one its channel will speak. */
#define P3_PROTO_MIN		1
#define P3_PROTO_MAX		2
#define P3_DEFAULT_MAX_PAYLOAD	(16u << 20)

enum p3_frame_type {
	P3_FRAME_DATA,		/* a slice of a tensor */
	P3_FRAME_HELLO,		/* sender's first frame on a connection */
	P3_FRAME_REFUSE,	/* the receiver's only frame: why it refused */
};

struct p3_frame {
	uint8_t		type;
	uint8_t		level;
	uint32_t	tensor;
	uint32_t	length;		/* payload bytes */
	uint64_t	offset;
	uint64_t	iter;
	const void	*payload;	/* set by p3_frame_parse() */
};

/*
 * What a parser checks a frame against.  tensor_size() returns 0 and the
 * registered size of (tensor, iter), or a negative error that the parser
 * passes back unchanged; NULL skips the size check.
 */
struct p3_frame_limits {
	unsigned int	bands;		/* level must be below; 0 = 64 */
	uint32_t	max_payload;	/* 0 = P3_DEFAULT_MAX_PAYLOAD */
	int		(*tensor_size)(void *ctx, uint32_t tensor, uint64_t iter,
				       uint64_t *size);
	void		*ctx;
};

/* Castagnoli CRC-32 (crc32c("123456789") == 0xe3069283); chain via crc. */
uint32_t p3_crc32c(uint32_t crc, const void *buf, size_t len);

/*
 * Write the header for f (and its CRC over payload, f->length bytes) to
 * hdr[P3_FRAME_HDR_LEN].  Returns 0, or -EINVAL for a field that no parser
 * would accept.
 */
int p3_frame_header(void *hdr, const struct p3_frame *f, const void *payload);

/* Check the header in buf (len >= P3_FRAME_HDR_LEN) except its checksum. */
int p3_frame_parse_header(const void *buf, size_t len, const struct p3_frame_limits *lim,
			  struct p3_frame *f);

/*
 * Check a whole frame at buf: header fields, length bound, level, range
 * against the tensor, checksum.  Returns the frame's size on the wire
 * (header + payload), -P3_ETRUNC if len is too short, or another error.
 */
int p3_frame_parse(const void *buf, size_t len, const struct p3_frame_limits *lim,
		   struct p3_frame *f);

/*
 * The handshake.  Each band's connection opens with a hello; the sender's
 * data follows at once, without waiting for an answer.  A receiver that
 * takes the channel says nothing (a reply to a sender that may already
 * have closed would come back as a reset and turn its clean end into
 * ECONNRESET).  One that refuses a connection answers it with a refusal
 * frame, its reason and the newest protocol version it speaks, then
 * closes it; the sender's band fails with that reason.  Connections are
 * grouped into a channel by the sender's random cookie, never by its
 * chan_id, so that two senders are never merged.
 *
 * Hello payload, 32 bytes, big endian:
 *   0 chan_id u64   8 cookie u64   16 band u8   17 bands u8   18 proto u8
 *  19 zero u8   20 max_payload u32   24 zero u64
 * Refusal payload, 16 bytes: 0 cookie u64   8 reason u32 (a P3_E* code)
 *  12 proto u8 (the receiver's newest)   13 zero (3 bytes).
 * Both carry the band as the header's level.
 */
struct p3_hello {
	uint64_t	chan_id;	/* the sender's label; p3_chan_id() */
	uint64_t	cookie;		/* random, non-zero: the connections of one channel */
	uint8_t		band;
	uint8_t		bands;
	uint8_t		proto;		/* protocol version of the channel */
	uint32_t	max_payload;	/* largest payload its frames will carry */
};

/* Build a hello (P3_FRAME_HDR_LEN + P3_HELLO_LEN bytes) into buf. */
int p3_hello_build(void *buf, const struct p3_hello *h);

/* Parse and check a whole hello frame; returns its wire size. */
int p3_hello_parse(const void *buf, size_t len, struct p3_hello *h);

/* --------------------------------------------------------------- channel */

struct p3_chan;
struct p3_listener;

struct p3_chan_opts {
	uint32_t	size;		/* set by p3_chan_opts_init(); 0 = first layout */
	unsigned int	bands;		/* sockets (= levels) per channel, 1..64 */
	int		tag_method;	/* enum p3_tag_method */
	int		notsent_lowat;	/* -1 default, 0 leave unchanged */
	uint64_t	chan_id;	/* sender: 0 = random */
	size_t		max_queued;	/* sender memory bound, bytes */
	uint32_t	max_payload;	/* largest frame payload either side */
	int		timeout_ms;	/* connect / hello timeout, -1 none */
	int		progress;	/* 1: the background engine moves the data */
	int		peer_timeout_ms; /* a silent peer fails the band after
					  * this: 0 default (30 s), -1 kernel's */
	/* Since 0.3 (libp3 1.2).  64 bits, so that on every ABI it starts where the
	 * first layout's struct ended, its tail padding included. */
	uint64_t	level_stride;	/* band b's sockets carry level
					 * b * level_stride; 0 = 1.  Both
					 * ends must set the same. */
	/* Since libp3 1.4. */
	int		checksum;	/* sender: 0 or 1, each frame's CRC32C
					 * covers its payload; -1, its header
					 * only, the payload left to TCP's own
					 * checksum (protocol 2: the receiver
					 * needs libp3 1.4) */
};

/* Fill opts with defaults: 8 bands, default method, 64 MiB, 16 MiB, 10 s,
 * no progress, peers declared lost after 30 s of silence, level
 * stride 1, every payload checksummed.  size is the caller's sizeof(*opts): fields past it are left
 * alone, so a program built against an older header keeps its own
 * layout.  The macro passes it; p3_chan_opts_init itself, the first
 * layout's entry point, fills only that layout. */
void p3_chan_opts_init_sized(struct p3_chan_opts *opts, size_t size);
void p3_chan_opts_init(struct p3_chan_opts *opts);
#define p3_chan_opts_init(opts) p3_chan_opts_init_sized((opts), sizeof(*(opts)))

/*
 * Sender: open opts->bands TCP connections to host:port, tag connection b
 * with level b (b * level_stride: a stride of 2 leaves every other level
 * to another transport, such as datagrams that follow each band), and
 * introduce each with a hello.  host may be a name.  A band whose level
 * would be 64 or more fails with -P3_ELEVEL.
 */
int p3_chan_connect(const char *host, const char *port, const struct p3_chan_opts *opts,
		    struct p3_chan **out);

struct p3_send {
	uint32_t	tensor;
	uint64_t	offset;		/* where data goes in the tensor */
	const void	*data;
	uint64_t	length;
};

/*
 * Queue one message: the slices in s[0..n), sent back to back on band
 * level and never split by another message.  Data is copied, so buffers
 * may be reused on return.  Within a band, messages leave in order of
 * (iter, prio, arrival); a queued message not yet started is overtaken by
 * a more urgent one.  If the queue would exceed max_queued (an empty queue
 * takes any message), wait up to timeout_ms (-1 forever, 0 not at all)
 * while sending, then fail with -EAGAIN.  A level not below the channel's
 * bands fails with -P3_ELEVEL.
 */
int p3_chan_send_msg(struct p3_chan *c, unsigned int level, uint32_t prio, uint64_t iter,
		     const struct p3_send *s, size_t n, int timeout_ms);

/* One slice as its own message. */
int p3_chan_send(struct p3_chan *c, unsigned int level, uint32_t prio, uint64_t iter,
		 uint32_t tensor, uint64_t offset, const void *data, uint64_t length,
		 int timeout_ms);

/*
 * As p3_chan_send(), without the copy: the frames' payloads are written to
 * the socket from data itself, so data must stay unchanged until libp3
 * says it no longer reads it.  It says so with a completion on this
 * sending channel, one per call, from p3_chan_next() (p3_chan_fd() turns
 * readable for it): tensor, iter, bytes = length once all of it was
 * written, or bytes = 0 if the band failed first.  p3_chan_close() ends
 * every reference at once.  A buffer changed before its completion is
 * refused by the receiver (its checksum no longer matches), never
 * delivered altered, unless the channel's checksum is -1 (its frames'
 * CRC covers their headers only): then what arrives is what the socket
 * read, changed or not.
 */
int p3_chan_send_ref(struct p3_chan *c, unsigned int level, uint32_t prio, uint64_t iter,
		     uint32_t tensor, uint64_t offset, const void *data, uint64_t length,
		     int timeout_ms);

/* A tensor's memory, as p3_chan_send_plan_bufs() reads it. */
struct p3_buf {
	const void	*data;
	uint64_t	len;		/* bytes */
};

/*
 * Queue a plan, all of it or (on any error) none of it: bufs[tensor] holds
 * each tensor, nbufs of them; slices sharing a msg id (adjacent in the
 * plan) become one message.  A slice of a tensor at or past nbufs, or
 * reaching past its buffer's len, fails with -P3_ERANGE.
 */
int p3_chan_send_plan_bufs(struct p3_chan *c, const struct p3_slice *s, size_t n,
			   const struct p3_buf *bufs, size_t nbufs, uint64_t iter,
			   int timeout_ms);

/*
 * As p3_chan_send_plan_bufs(), without the copy (p3_chan_send_ref()'s
 * rules): each message is written from bufs' memory, which must stay
 * unchanged until its completion (tensor: its first slice's, bytes: its
 * payload, 0 if unsent).  With the progress engine the engine thread
 * writes it: the caller only frames it, and with checksum -1 touches none
 * of its bytes.
 */
int p3_chan_send_plan_ref(struct p3_chan *c, const struct p3_slice *s, size_t n,
			  const struct p3_buf *bufs, size_t nbufs, uint64_t iter,
			  int timeout_ms);

/* As p3_chan_send_plan_bufs(), with bare pointers that the library cannot
 * bound: a slice past its buffer reads past it.  Prefer the _bufs form. */
int p3_chan_send_plan(struct p3_chan *c, const struct p3_slice *s, size_t n,
		      const void *const *bufs, uint64_t iter, int timeout_ms);

/* Bytes queued and not yet written to a socket (sender). */
size_t p3_chan_queued(const struct p3_chan *c);

/* Sender: write until nothing is queued; -ETIMEDOUT after timeout_ms. */
int p3_chan_flush(struct p3_chan *c, int timeout_ms);

/* Listen on host:port (host NULL = any, port "0" = pick one). */
int p3_listen(const char *host, const char *port, const struct p3_chan_opts *opts,
	      struct p3_listener **out);
int p3_listener_port(const struct p3_listener *l);
int p3_listener_fd(const struct p3_listener *l);

/*
 * Accept connections until every band of one channel has said hello, and
 * return it as a receiving channel.  A connection that closes before its
 * hello, or whose first bytes are not the frame magic (a health check, a
 * port scan), is closed silently.  One that starts as a p3 frame but whose
 * hello is bad is closed and its error returned; call again to go on.
 * Each accepted socket is tagged (opts.tag_method) with its band's level
 * (band * opts.level_stride, as the sender's), so that its ACKs travel in
 * that band; a hello whose band has no such level is refused with
 * P3_ELEVEL.
 * Every connection, and every channel short of bands, is given
 * opts.timeout_ms from its first connection, counted whether or not a
 * p3_accept() is running.  -ETIMEDOUT if no channel completes within
 * timeout_ms.
 */
int p3_accept(struct p3_listener *l, int timeout_ms, struct p3_chan **out);
void p3_listener_close(struct p3_listener *l);

/*
 * Receiver: register buf (size bytes) as the target of tensor for
 * iteration iter.  -EBUSY if the tensor is registered and incomplete,
 * -P3_ESTALE if iter is older than the one registered before.
 * A frame for a tensor/iteration not yet registered waits (its connection
 * is not read) until it is; a frame for an older iteration is an error.
 */
int p3_chan_expect(struct p3_chan *c, uint32_t tensor, void *buf, uint64_t size,
		   uint64_t iter);

/*
 * Receiver: forget tensor (registered or finished): its buffer is no
 * longer written, it stops counting as pending, and its table slot is
 * freed.  A frame of it already half read is discarded; one that starts
 * later waits, as for a tensor never registered.  -ENOENT if it is not
 * registered.
 */
int p3_chan_cancel(struct p3_chan *c, uint32_t tensor);

/*
 * Move data for up to timeout_ms.  Returns, on a receiver, the number of
 * completions ready for p3_chan_next(); on a sender, 0.  A connection that
 * delivers a bad frame is closed and its error returned once; the others
 * go on.  -P3_EINCOMPLETE when every band is closed and tensors are still
 * missing, or when every open band waits with a frame for a tensor not
 * registered and its peer has closed (registering it and polling again
 * still delivers it); -EPIPE when every band is closed and nothing is
 * missing.
 */
int p3_chan_poll(struct p3_chan *c, int timeout_ms);

struct p3_completion {
	uint32_t	tensor;
	uint64_t	iter;
	uint64_t	bytes;
	uint64_t	t_first_ns;	/* first slice stored, p3_now_ns() clock */
	uint64_t	t_done_ns;	/* last slice stored */
};

/* Pop one completion: 1 if *out was filled, 0 if none is ready. */
int p3_chan_next(struct p3_chan *c, struct p3_completion *out);

/* As p3_chan_next(), up to n at once (libp3 1.4): how many it wrote to
 * out[0..), in order; 0 when none is ready. */
size_t p3_chan_next_batch(struct p3_chan *c, struct p3_completion *out, size_t n);

/* Receiver: registered tensors not yet complete. */
size_t p3_chan_pending(const struct p3_chan *c);

/* Band state: 0 open, 1 closed cleanly, or the error that closed it. */
int p3_chan_band_status(const struct p3_chan *c, unsigned int band);

unsigned int p3_chan_bands(const struct p3_chan *c);
uint64_t p3_chan_id(const struct p3_chan *c);

/*
 * Threads.  Every call on a channel may run in any thread, at the same time
 * as any other call on it; they take turns on the channel's lock, which a
 * call drops while it waits.
 *
 * Progress.  Without opts.progress, data moves only inside the calls above
 * (send, flush, poll), so a sender whose queue outruns the sockets must
 * come back to p3_chan_poll().  With it, the process's progress engine
 * (one thread, "p3-engine", for every channel with progress) writes queued
 * messages and reads arriving frames the moment the sockets allow; the
 * calls above then only queue, register, and wait for the engine's
 * results, and p3_chan_fd() serves an event loop.
 */

/*
 * With opts.progress: a descriptor that is readable while there is
 * something for the caller: on a receiver a completion for p3_chan_next()
 * or an error for p3_chan_poll(); on a sender an empty queue, a failed
 * band, or (libp3 1.4) a by-reference send's completion for
 * p3_chan_next(); on either after p3_chan_shutdown().  Poll it; never
 * read it.
 * -EINVAL without progress.
 */
int p3_chan_fd(const struct p3_chan *c);

/*
 * Make every call that waits inside c return -P3_ECLOSED now, and every
 * later call fail with it, without freeing c: the way for one thread to
 * stop another before it closes.  Queued data is discarded.
 */
void p3_chan_shutdown(struct p3_chan *c);

/* Shut down, wait for the calls still inside c to return, close every
 * socket and free c (queued data is discarded: p3_chan_flush() first). */
void p3_chan_close(struct p3_chan *c);

/* ------------------------------------------------------------- datagrams */

/*
 * Loss-tolerant delivery (DLCP).  SGD tolerates losing a small part of a
 * gradient, so slices that may be lost go as UDP datagrams, one frame
 * each (the channel's header and CRC32C), on a socket tagged with the
 * slice's level: a band the qdisc may drop at a deadline (tc-p3(8),
 * "LOSS-TOLERANT BANDS").  A tensor travels in chunks of opts.chunk
 * payload bytes, each at an offset that is a multiple of it.  The
 * receiver keeps a bitmap of the chunks it holds and completes a tensor
 * when every chunk is in, or when no datagram of it came for its
 * deadline (counted from its latest datagram, or from
 * p3_dgram_finish()), or the caller finishes it: missing chunks are then
 * zero-filled, the completion says how many bytes were missing, and
 * p3_dgram_missing() says where, for the caller to fetch them reliably.
 * A datagram is checked whole before a byte is written: one that names
 * another tensor, an older iteration, an unaligned or out-of-range chunk,
 * or fails its checksum is dropped and counted, never stored.  A
 * datagram for a tensor (or iteration) not yet registered waits in a
 * bounded queue for p3_dgram_expect().  A p3_dgram belongs to one thread
 * at a time.
 */
struct p3_dgram;

struct p3_dgram_opts {
	uint32_t	size;		/* set by p3_dgram_opts_init() */
	unsigned int	bands;		/* levels, 1..64 */
	int		tag_method;	/* enum p3_tag_method */
	uint32_t	chunk;		/* payload bytes per datagram */
	int		buf_bytes;	/* socket buffer (SO_SNDBUF / SO_RCVBUF) */
	uint64_t	early_bytes;	/* receiver: bound of the waiting queue */
};

/* Defaults: 8 bands, the default tag method, chunks of 1408 bytes (a
 * datagram fits a 1500-byte MTU over IPv6), 4 MiB socket buffers, 8 MiB
 * of datagrams waiting for their tensor.  A chunk is at most 65467 bytes
 * (the largest UDP payload less the frame header). */
void p3_dgram_opts_init(struct p3_dgram_opts *opts);

/* Sender towards host:port; a socket per level, opened and tagged on its
 * first use. */
int p3_dgram_connect(const char *host, const char *port, const struct p3_dgram_opts *opts,
		     struct p3_dgram **out);

/* Receiver on host:port (host NULL = any, port "0" = pick one). */
int p3_dgram_bind(const char *host, const char *port, const struct p3_dgram_opts *opts,
		  struct p3_dgram **out);

/* The receiver's port, and a descriptor to poll for readability (never
 * read it); -EINVAL on a sender. */
int p3_dgram_port(const struct p3_dgram *d);
int p3_dgram_fd(const struct p3_dgram *d);

/*
 * Sender: bytes [offset, offset + length) of tensor for iteration iter,
 * as datagrams of opts.chunk bytes (the last one shorter) on level.
 * offset must be a multiple of the chunk.  A datagram that the local
 * qdisc drops is lost, as the network may lose it: not an error.  Waits
 * up to timeout_ms (-1 forever) for socket buffer space, then -EAGAIN;
 * -ECONNREFUSED once the peer's port was found closed.  Returns the
 * number of datagrams sent.
 */
int p3_dgram_send(struct p3_dgram *d, unsigned int level, uint64_t iter, uint32_t tensor,
		  uint64_t offset, const void *data, uint64_t length, int timeout_ms);

/*
 * Receiver: buf (size bytes) is where tensor's bytes of iteration iter
 * go; once deadline_ns pass without a datagram of it (after its first
 * one, or after p3_dgram_finish()) it completes, complete or not (0:
 * only when whole, or by p3_dgram_finish()).  A datagram restarts the
 * wait, so a slow link still delivers a large tensor whole.  -EBUSY if the tensor is
 * registered and incomplete, -P3_ESTALE if iter is older than the one
 * registered before.  Datagrams that waited for it are stored now.
 */
int p3_dgram_expect(struct p3_dgram *d, uint32_t tensor, void *buf, uint64_t size,
		    uint64_t iter, uint64_t deadline_ns);

/* Receiver: complete tensor at once (after_ns 0), zero-filling what is
 * missing; or wait for its datagrams at most after_ns from now, and
 * longer only while they keep coming: for a tensor of which none may
 * ever come, once the caller knows they were sent.  -ENOENT if it is not
 * registered, 0 if it was complete already. */
int p3_dgram_finish(struct p3_dgram *d, uint32_t tensor, uint64_t after_ns);

/* Receiver: read datagrams for up to timeout_ms (-1 forever) and complete
 * the tensors whose deadline passed; returns as soon as a completion is
 * ready, with the number ready for p3_dgram_next(). */
int p3_dgram_poll(struct p3_dgram *d, int timeout_ms);

struct p3_dgram_completion {
	uint32_t	tensor;
	uint64_t	iter;
	uint64_t	bytes;		/* the tensor's size */
	uint64_t	missing;	/* of them zero-filled */
	uint64_t	t_first_ns;	/* first datagram stored (0: none) */
	uint64_t	t_done_ns;
};

/* Pop one completion: 1 if *out was filled, 0 if none is ready. */
int p3_dgram_next(struct p3_dgram *d, struct p3_dgram_completion *out);

struct p3_range {
	uint64_t	offset;
	uint64_t	length;
};

/*
 * Receiver: the byte ranges of a completed tensor that were missing
 * (zero-filled), merged, in order: up to n into r.  Returns how many
 * there are in all (call again with more room if above n).  -ENOENT if
 * the tensor is not registered, -EBUSY if it is not complete yet.
 */
int p3_dgram_missing(const struct p3_dgram *d, uint32_t tensor, struct p3_range *r,
		     size_t n);

/* Datagrams by fate, since the p3_dgram was made. */
struct p3_dgram_stats {
	uint64_t	sent;		/* sender: datagrams handed to the kernel */
	uint64_t	dropped_local;	/* sender: ...of them refused (ENOBUFS) */
	uint64_t	stored;		/* receiver: chunks written */
	uint64_t	duplicate;	/* a chunk already held */
	uint64_t	late;		/* for a tensor already complete */
	uint64_t	stale;		/* for an older iteration */
	uint64_t	bad;		/* failed a check: never written */
	uint64_t	waiting;	/* queued for a tensor not registered */
	uint64_t	overflow;	/* ...dropped: the queue was full */
};
void p3_dgram_stats(const struct p3_dgram *d, struct p3_dgram_stats *out);

void p3_dgram_close(struct p3_dgram *d);

/* ----------------------------------------------------------------- qdisc */

#define P3_ROOT			0xffffffffu	/* TC_H_ROOT */
#define P3_HANDLE(maj, min)	(((uint32_t)(maj) << 16) | ((min) & 0xffffu))

/* Which fields of struct p3_qdisc_opts are set. */
#define P3_QOPT_BANDS		(1u << 0)
#define P3_QOPT_DEFAULT		(1u << 1)
#define P3_QOPT_TAG		(1u << 2)
#define P3_QOPT_LIMIT		(1u << 3)
#define P3_QOPT_MEMORY		(1u << 4)
#define P3_QOPT_QUANTUM		(1u << 5)
#define P3_QOPT_RATE		(1u << 6)
#define P3_QOPT_BUCKETS		(1u << 7)
#define P3_QOPT_FLOWS		(1u << 8)	/* since 0.3 */

struct p3_qdisc_opts {
	uint32_t	size;		/* sizeof(struct p3_qdisc_opts), 0 = first layout */
	uint32_t	mask;		/* P3_QOPT_* */
	uint8_t		bands;		/* 2..64 */
	uint8_t		defband;	/* band of untagged packets */
	uint8_t		tag;		/* enum p3_tag_method, not DEFAULT */
	uint32_t	limit;		/* packets */
	uint32_t	memory;		/* truesize bytes; 0 = the most (1 GB) */
	uint32_t	quantum;	/* DRR quantum, bytes */
	uint64_t	rate;		/* bytes per second, 0 = unpaced */
	uint32_t	buckets;	/* flow hash table, a power of two */
	/* Since 0.3, read only when size covers it (sizeof(struct
	 * p3_qdisc_opts)): P3_QOPT_FLOWS with size 0, the first layout, fails
	 * with -EINVAL.  It fills what was the struct's tail padding (rate
	 * makes it 8-aligned), so struct p3_qdisc_stats, which holds one,
	 * keeps its layout. */
	uint32_t	flows;		/* most flow entries, 1..2^20; beyond
					 * them packets spill (p3_qdisc_stats) */
};

/* Create (fails if one exists), change in place, or create-or-replace.
 * handle 0 lets the kernel choose on add.  The kernel's reason for a
 * refusal is in p3_last_extack(). */
int p3_qdisc_add(const char *ifname, uint32_t parent, uint32_t handle,
		 const struct p3_qdisc_opts *opts);
int p3_qdisc_change(const char *ifname, uint32_t parent, uint32_t handle,
		    const struct p3_qdisc_opts *opts);
int p3_qdisc_replace(const char *ifname, uint32_t parent, uint32_t handle,
		     const struct p3_qdisc_opts *opts);

/* Delete the p3 qdisc at parent (handle 0: whichever p3 is there);
 * -P3_ENOTP3 rather than delete another kind. */
int p3_qdisc_del(const char *ifname, uint32_t parent, uint32_t handle);

struct p3_band_stats {
	uint64_t	packets;
	uint64_t	bytes;
	uint32_t	drops;
	uint32_t	overlimits;
	uint32_t	requeues;
	uint32_t	backlog;	/* bytes queued now */
	uint32_t	qlen;		/* packets queued now */
};

/* Same fields as struct tc_p3_xstats; absent fields read as 0. */
struct p3_xstats {
	uint32_t	flows;
	uint32_t	flows_active;
	uint64_t	flows_created;
	uint64_t	flows_gc;
	uint64_t	preemptions;
	uint64_t	boosts;
	uint64_t	untagged;
	uint64_t	drops_limit;
	uint64_t	drops_memory;
	uint64_t	drops_alloc;	/* always 0: the kernel no longer has it */
	uint64_t	throttled;
};

struct p3_qdisc_stats {
	uint32_t		size;	/* the caller's sizeof, 0 = first layout */
	uint32_t		handle;
	uint32_t		parent;
	struct p3_qdisc_opts	opts;	/* as the kernel reports them */
	struct p3_band_stats	total;
	int			have_xstats;
	struct p3_xstats	xstats;
	unsigned int		nbands;	/* bands with class stats below */
	struct p3_band_stats	band[P3_MAX_BANDS];
	/* Since 0.3: only for a caller whose size field covers them (0 from
	 * a kernel module older than that). */
	uint64_t		drops_deadline;	/* loss-tolerant, expired */
	uint64_t		drops_tolerant;	/* loss-tolerant, at a limit */
	uint32_t		deadline_us[P3_MAX_BANDS];	/* 0 = reliable */
	uint64_t		spilled;	/* queued in their band's shared
						 * flow: no flow entry (the flows
						 * cap, or no memory) */
};

/* Options and handle of the p3 qdisc at parent (handle 0: any p3 there;
 * parent 0: anywhere on the device). -ENOENT if there is none. */
int p3_qdisc_get(const char *ifname, uint32_t parent, uint32_t handle,
		 struct p3_qdisc_stats *out);

/* As p3_qdisc_get(), plus statistics and per-band class statistics. */
int p3_qdisc_stats(const char *ifname, uint32_t parent, uint32_t handle,
		   struct p3_qdisc_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* P3_H */
