// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A receiver under attack.  A raw client speaks the wire protocol by hand
 * on a 2-band channel: band 0 delivers tensor A honestly while band 1
 * sends garbage, truncated frames, bad checksums, out-of-range offsets,
 * oversized lengths, duplicates and the like.  Every case must close band
 * 1 with the right error, leave band 0 working, complete A byte-exact, and
 * leave the tensors B and C (laid out right after A, no gap) untouched,
 * except where a frame whose header passed has written its payload in
 * place: there, inside the range it named and nowhere else, and never
 * counted (B does not complete from it).
 */
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "internal.h"
#include "tap.h"
#include "util.h"

#define SZ_A	3000
#define SZ_B	5000
#define SZ_C	3000
#define GUARD	256
#define CANARY	0x5a
#define ITER	1

enum { A = 1, B = 2, C = 3 };

static char port[16];
static uint8_t arena[GUARD + SZ_A + SZ_B + SZ_C + GUARD];
#define MEM_A	(arena + GUARD)
#define MEM_B	(MEM_A + SZ_A)
#define MEM_C	(MEM_B + SZ_B)

static int raw_socket(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(port)),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Did the other end close fd within ms?  Never blocks longer. */
static int closed_by_peer(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint8_t b;

	return poll(&p, 1, ms) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) == 0;
}

static void raw_write(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	ssize_t k;

	while (n) {
		k = send(fd, b, n, MSG_NOSIGNAL);
		if (k <= 0)
			return;	/* the receiver may already have hung up */
		b += k;
		n -= (size_t)k;
	}
}

static void raw_hello_as(int fd, const struct p3_hello *hello)
{
	uint8_t h[P3_FRAME_HDR_LEN + P3_HELLO_LEN];

	p3_hello_build(h, hello);
	raw_write(fd, h, sizeof(h));
}

/* The protocol the raw client's hellos name: 1, where every frame's CRC
 * covers its payload; 2 lets a frame leave it to TCP (P3_FRAME_F_HDRCRC). */
static unsigned int hello_proto = 1;

/* The cookie follows the id, so that one id's bands form one channel. */
static void raw_hello(int fd, uint64_t id, unsigned int band, unsigned int bands)
{
	raw_hello_as(fd, &(struct p3_hello){ .chan_id = id, .cookie = id ^ 0x5eed, .band = band,
					     .bands = bands, .proto = (uint8_t)hello_proto,
					     .max_payload = 1024 });
}

/* A valid frame carrying bytes [off, off + len) of tensor id's content. */
static size_t frame(uint8_t *buf, unsigned int level, uint32_t id, uint64_t off, uint32_t len,
		    uint64_t iter)
{
	static uint8_t content[SZ_B];
	struct p3_frame f = { .type = P3_FRAME_DATA, .level = level, .tensor = id,
			      .offset = off, .length = len, .iter = iter };

	fill_pattern(content, sizeof(content), id, ITER);
	if (off < sizeof(content) && len <= sizeof(content) - off)
		memcpy(buf + P3_FRAME_HDR_LEN, content + off, len);
	else
		memset(buf + P3_FRAME_HDR_LEN, 0x77, len);
	p3_frame_header(buf, &f, buf + P3_FRAME_HDR_LEN);
	return P3_FRAME_HDR_LEN + len;
}

/* frame(), its CRC over the header only (protocol 2's flag). */
static size_t frame_hdr_crc(uint8_t *buf, unsigned int level, uint32_t id, uint64_t off,
			    uint32_t len, uint64_t iter)
{
	struct p3_frame f = { .type = P3_FRAME_DATA, .level = level, .tensor = id,
			      .offset = off, .length = len, .iter = iter };
	size_t n = frame(buf, level, id, off, len, iter);

	p3_frame_header_flags(buf, &f, buf + P3_FRAME_HDR_LEN, P3_FRAME_F_HDRCRC);
	return n;
}

static void reseal(uint8_t *buf, uint32_t len)
{
	uint32_t c;

	memset(buf + 36, 0, 4);
	c = htonl(p3_crc32c(0, buf, P3_FRAME_HDR_LEN + len));
	memcpy(buf + 36, &c, 4);
}

struct setup {
	struct p3_listener	*l;
	struct p3_chan		*rx;
	int			fd[2];
};

static uint32_t listen_max_payload = 64 << 10;

static int setup(struct setup *s, uint64_t id)
{
	struct p3_chan_opts o;
	int b;

	p3_chan_opts_init(&o);
	o.max_payload = listen_max_payload;
	memset(s, 0, sizeof(*s));
	if (p3_listen("127.0.0.1", "0", &o, &s->l))
		return -1;
	snprintf(port, sizeof(port), "%d", p3_listener_port(s->l));
	for (b = 0; b < 2; b++) {
		s->fd[b] = raw_socket();
		raw_hello(s->fd[b], id, b, 2);
	}
	if (p3_accept(s->l, 5000, &s->rx))
		return -1;
	memset(arena, CANARY, sizeof(arena));
	p3_chan_expect(s->rx, A, MEM_A, SZ_A, ITER);
	p3_chan_expect(s->rx, B, MEM_B, SZ_B, ITER);
	p3_chan_expect(s->rx, C, MEM_C, SZ_C, ITER);
	return 0;
}

static void teardown(struct setup *s)
{
	close(s->fd[0]);
	if (s->fd[1] >= 0)
		close(s->fd[1]);
	p3_chan_close(s->rx);
	p3_listener_close(s->l);
}

/* First error p3_chan_poll reports within 3 s, or 0. */
static int first_error(struct p3_chan *rx)
{
	uint64_t end = p3_now_ns() + 3000000000ull;
	int rc;

	while (p3_now_ns() < end) {
		rc = p3_chan_poll(rx, 100);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Send A's second half on band 0 and wait for A to complete. */
static int finish_a(struct setup *s)
{
	static uint8_t buf[P3_FRAME_HDR_LEN + SZ_A];
	struct p3_completion d;
	uint64_t end = p3_now_ns() + 3000000000ull;

	raw_write(s->fd[0], buf, frame(buf, 0, A, 1500, SZ_A - 1500, ITER));
	while (p3_now_ns() < end) {
		if (p3_chan_poll(s->rx, 100) < 0)
			return 0;
		while (p3_chan_next(s->rx, &d) == 1)
			if (d.tensor == A)
				return 1;
	}
	return 0;
}

/* B after an attack: untouched; written only in [0, 2000) by a payload
 * that landed in place; its valid first half kept, the rest untouched;
 * its valid first half kept, the rest anything (a second frame's payload
 * landed in place). */
enum b_state { B_UNTOUCHED, B_IN_FRAME, B_FIRST_HALF, B_FIRST_HALF_KEPT };

static int b_is(enum b_state st)
{
	uint8_t want[SZ_B];

	if (st == B_UNTOUCHED)
		return all_bytes(MEM_B, SZ_B, CANARY);
	if (st == B_IN_FRAME)
		return all_bytes(MEM_B + 2000, SZ_B - 2000, CANARY);
	fill_pattern(want, SZ_B, B, ITER);
	return !memcmp(MEM_B, want, 2500) &&
	       (st == B_FIRST_HALF_KEPT || all_bytes(MEM_B + 2500, SZ_B - 2500, CANARY));
}

/*
 * Run one attack: send hostile bytes on band 1 (close it after if asked),
 * then check the error, band states, tensor A, B's expected state and C.
 */
static void attack(const char *name, const void *bytes, size_t len, int close_after, int want,
		   enum b_state b_after)
{
	static uint8_t buf[P3_FRAME_HDR_LEN + SZ_A];
	struct setup s;
	int err, a_done;

	if (setup(&s, 0xbad0 + tap_n)) {
		ok(0, "%s: setup", name);
		return;
	}
	raw_write(s.fd[0], buf, frame(buf, 0, A, 0, 1500, ITER));
	raw_write(s.fd[1], bytes, len);
	if (close_after) {
		close(s.fd[1]);
		s.fd[1] = -1;
	}
	err = first_error(s.rx);
	a_done = finish_a(&s);
	ok(err == want && p3_chan_band_status(s.rx, 1) == want && p3_chan_band_status(s.rx, 0) == 0,
	   "%s: band 1 closed with \"%s\", band 0 open", name, p3_strerror(want));
	if (err != want)
		tap_diag("got %d: %s", err, p3_strerror(err));
	ok(a_done && check_pattern(MEM_A, SZ_A, A, ITER) && b_is(b_after) &&
	   all_bytes(MEM_C, SZ_C, CANARY) && all_bytes(arena, GUARD, CANARY) &&
	   all_bytes(MEM_C + SZ_C, GUARD, CANARY),
	   "%s: A completes byte-exact, B %s, C and guards untouched", name,
	   b_after == B_UNTOUCHED ? "untouched" : b_after == B_IN_FRAME ?
	   "written only inside the frame's range" : "holds only its valid half");
	teardown(&s);
}

static uint8_t hb[2][P3_FRAME_HDR_LEN + (2 << 20)];

static void test_attacks(void)
{
	uint64_t rs = 1;
	size_t n, m;
	uint32_t v;
	size_t i;

	for (i = 0; i < 4096; i++)
		hb[0][i] = (uint8_t)rnd_next(&rs);
	attack("random garbage", hb[0], 4096, 0, -P3_EBADMAGIC, B_UNTOUCHED);

	n = frame(hb[0], 1, B, 0, 2000, ITER);
	attack("truncated payload", hb[0], n - 1000, 1, -P3_ETRUNC, B_IN_FRAME);
	attack("truncated header", hb[0], 20, 1, -P3_ETRUNC, B_UNTOUCHED);

	n = frame(hb[0], 1, B, 0, 2000, ITER);
	hb[0][P3_FRAME_HDR_LEN + 1234] ^= 0x40;
	attack("bad CRC", hb[0], n, 0, -P3_ECSUM, B_IN_FRAME);

	n = frame(hb[0], 1, B, SZ_B - 10, 100, ITER);
	attack("slice past the tensor's end", hb[0], n, 0, -P3_ERANGE, B_UNTOUCHED);
	n = frame(hb[0], 1, B, 1ull << 40, 100, ITER);
	attack("offset 2^40", hb[0], n, 0, -P3_ERANGE, B_UNTOUCHED);
	n = frame(hb[0], 1, B, 0, 100, ITER);
	memcpy(hb[0] + 16, "\xff\xff\xff\xff\xff\xff\xff\xf6", 8);
	reseal(hb[0], 100);
	attack("offset + length wrapping 2^64", hb[0], n, 0, -P3_ERANGE, B_UNTOUCHED);

	frame(hb[0], 1, B, 0, 100, ITER);
	v = htonl(1u << 20);
	memcpy(hb[0] + 12, &v, 4);
	attack("length 1 MiB above the 64 KiB bound", hb[0], P3_FRAME_HDR_LEN, 0, -P3_ETOOBIG,
	       B_UNTOUCHED);
	memcpy(hb[0] + 12, "\xff\xff\xff\xff", 4);
	attack("length 4 GiB - 1", hb[0], P3_FRAME_HDR_LEN, 0, -P3_ETOOBIG, B_UNTOUCHED);

	n = frame(hb[0], 5, B, 0, 100, ITER);
	attack("level 5 on a 2-band channel", hb[0], n, 0, -P3_ELEVEL, B_UNTOUCHED);
	n = frame(hb[0], 0, B, 0, 100, ITER);
	attack("level 0 frame on band 1's connection", hb[0], n, 0, -P3_ELEVEL, B_UNTOUCHED);

	n = frame(hb[0], 1, B, 0, 2500, ITER);
	memcpy(hb[0] + n, hb[0], n);
	attack("duplicate slice", hb[0], 2 * n, 0, -P3_EDUP, B_FIRST_HALF);
	n = frame(hb[0], 1, B, 0, 2500, ITER);
	m = frame(hb[0] + n, 1, B, 2000, 1000, ITER);
	attack("overlapping slice", hb[0], n + m, 0, -P3_EDUP, B_FIRST_HALF);
	n = frame(hb[0], 1, A, 1000, 1000, ITER);
	attack("slice overlapping another band's data", hb[0], n, 0, -P3_EDUP, B_UNTOUCHED);

	n = frame(hb[0], 1, B, 0, 100, ITER - 1);
	attack("stale iteration", hb[0], n, 0, -P3_ESTALE, B_UNTOUCHED);

	n = frame(hb[0], 1, B, 0, 100, ITER);
	hb[0][4] = 9;
	attack("unknown version", hb[0], n, 0, -P3_EVERSION, B_UNTOUCHED);
	n = frame(hb[0], 1, B, 0, 100, ITER);
	hb[0][33] = 1;
	reseal(hb[0], 100);
	attack("non-zero reserved field", hb[0], n, 0, -P3_EBADFRAME, B_UNTOUCHED);
	p3_hello_build(hb[0], &(struct p3_hello){ .chan_id = 1, .cookie = 1, .band = 1, .bands = 2,
						  .proto = P3_PROTO_MAX,
						  .max_payload = 1024 });
	attack("second hello on a data connection", hb[0], P3_FRAME_HDR_LEN + P3_HELLO_LEN, 0,
	       -P3_EBADFRAME, B_UNTOUCHED);
}

/* Protocol 2's header-only CRC: refused on a protocol-1 channel, and on
 * a protocol-2 one still a checked header, with no other flag. */
static void test_header_crc(void)
{
	size_t n;

	n = frame_hdr_crc(hb[0], 1, B, 0, 100, ITER);
	attack("header-only CRC on a protocol-1 channel", hb[0], n, 0, -P3_EBADFRAME,
	       B_UNTOUCHED);
	hello_proto = 2;
	n = frame_hdr_crc(hb[0], 1, B, 0, 2000, ITER);
	hb[0][16 + 7] ^= 0x08;		/* the offset: 8 bytes on */
	attack("protocol 2, header-only CRC, header changed", hb[0], n, 0, -P3_ECSUM,
	       B_UNTOUCHED);
	n = frame_hdr_crc(hb[0], 1, B, 0, 100, ITER);
	hb[0][8 + 3] ^= 0x40;		/* the tensor: one never registered */
	attack("protocol 2, header-only CRC, tensor id changed", hb[0], n, 0, -P3_ECSUM,
	       B_UNTOUCHED);
	n = frame_hdr_crc(hb[0], 1, B, 0, 100, ITER);
	hb[0][7] = 0x03;
	reseal(hb[0], 100);
	attack("protocol 2, an unknown flag", hb[0], n, 0, -P3_EBADFRAME, B_UNTOUCHED);
	n = frame(hb[0], 1, B, 0, 2000, ITER);
	hb[0][P3_FRAME_HDR_LEN + 1234] ^= 0x40;
	attack("protocol 2, a full CRC still checks the payload", hb[0], n, 0, -P3_ECSUM,
	       B_IN_FRAME);
	hello_proto = 1;
}

/* Random single mutations of a valid stream: whatever the error, the
 * neighbours must survive it. */
static void test_mutations(void)
{
	int rounds = 40, good = 1, r, err;
	uint64_t rs = 2024;
	struct setup s;
	size_t n, pos;

	for (r = 0; r < rounds; r++) {
		n = frame(hb[1], 1, B, 0, 2500, ITER);
		n += frame(hb[1] + n, 1, B, 2500, 2500, ITER);
		pos = rnd_range(&rs, 0, n - 1);
		hb[1][pos] ^= (uint8_t)rnd_range(&rs, 1, 255);
		if (setup(&s, 0x3000 + r)) {
			good = 0;
			break;
		}
		raw_write(s.fd[1], hb[1], n);
		err = first_error(s.rx);
		/*
		 * The error and how much of B survived depend on the byte hit.
		 * A tensor id or a later iteration that nobody registered is
		 * not an error: the connection waits for p3_chan_expect().
		 */
		good &= (err < 0 || p3_chan_band_status(s.rx, 1) == 0) &&
			p3_chan_band_status(s.rx, 0) == 0;
		/* No tensor completes from a corrupt stream. */
		good &= p3_chan_pending(s.rx) == 3;
		/* A hit in the second frame leaves the first one's bytes. */
		if (pos >= P3_FRAME_HDR_LEN + 2500)
			good &= b_is(B_FIRST_HALF_KEPT);
		good &= all_bytes(MEM_C, SZ_C, CANARY) && all_bytes(MEM_A, SZ_A, CANARY);
		teardown(&s);
	}
	ok(good, "%d random byte mutations: each caught, neighbours intact", rounds);
}

/* A well-behaved stream delivered one byte per write still works. */
static void test_drip(void)
{
	struct p3_completion d;
	struct setup s;
	int done = 0;
	size_t n, i;

	if (setup(&s, 0xd1)) {
		ok(0, "drip: setup");
		return;
	}
	n = frame(hb[0], 0, A, 0, 1500, ITER);
	n += frame(hb[0] + n, 0, A, 1500, 1500, ITER);
	for (i = 0; i < n; i++) {
		raw_write(s.fd[0], hb[0] + i, 1);
		if (!(i % 64))
			p3_chan_poll(s.rx, 0);
	}
	for (i = 0; i < 30 && !done; i++) {
		p3_chan_poll(s.rx, 100);
		while (p3_chan_next(s.rx, &d) == 1)
			done |= d.tensor == A;
	}
	ok(done && check_pattern(MEM_A, SZ_A, A, ITER), "frames dripped a byte at a time arrive");
	teardown(&s);
}

/* ---------------------------------------------------------------- hellos */

static int accept_err(struct p3_listener *l)
{
	struct p3_chan *c = NULL;
	int err = p3_accept(l, 2000, &c);

	p3_chan_close(c);
	return err;
}

static void test_hellos(void)
{
	struct p3_listener *l;
	struct p3_chan *c = NULL;
	uint8_t junk[P3_FRAME_HDR_LEN + P3_HELLO_LEN];
	int fd[200], i;

	p3_listen("127.0.0.1", "0", NULL, &l);
	snprintf(port, sizeof(port), "%d", p3_listener_port(l));
	/* A peer that starts as a p3 frame but breaks its hello is told so. */
	p3_hello_build(junk, &(struct p3_hello){ .chan_id = 33, .cookie = 33, .bands = 2,
						 .proto = P3_PROTO_MAX,
						 .max_payload = 1024 });
	junk[4] = P3_FRAME_VERSION + 1;
	fd[0] = raw_socket();
	raw_write(fd[0], junk, sizeof(junk));
	ok_err(accept_err(l), -P3_EVERSION, "a hello of an unknown version is refused");
	close(fd[0]);

	/* Another protocol on the port (an HTTP health check that waits for
	 * an answer, 0x42 garbage) is no error: dropped at its first byte. */
	fd[0] = raw_socket();
	raw_write(fd[0], "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 35);
	memset(junk, 0x42, sizeof(junk));
	fd[1] = raw_socket();
	raw_write(fd[1], junk, sizeof(junk));
	fd[2] = raw_socket();
	fd[3] = raw_socket();
	raw_hello(fd[2], 44, 0, 2);
	raw_hello(fd[3], 44, 1, 2);
	ok(p3_accept(l, 3000, &c) == 0 && c && p3_chan_id(c) == 44,
	   "an HTTP probe and garbage are dropped silently; the channel behind them comes");
	/* Probes not read before the channel completed are read next time. */
	p3_chan_close(c);
	c = NULL;
	ok_err(p3_accept(l, 300, &c), -ETIMEDOUT, "nothing else to accept");
	ok(closed_by_peer(fd[0], 1000) && closed_by_peer(fd[1], 1000),
	   "the listener closed both probes");
	for (i = 0; i < 4; i++)
		close(fd[i]);

	/* A health check (connect, close), a port scan's half-open probe and a
	 * peer that leaves inside its hello are no error: the real channel
	 * behind them comes out of the very next call. */
	fd[0] = raw_socket();
	close(fd[0]);
	fd[0] = raw_socket();
	raw_write(fd[0], junk, 10);
	close(fd[0]);
	fd[0] = raw_socket();
	fd[1] = raw_socket();
	raw_hello(fd[0], 55, 0, 2);
	raw_hello(fd[1], 55, 1, 2);
	ok(p3_accept(l, 3000, &c) == 0 && c && p3_chan_id(c) == 55,
	   "probes that close before a whole hello are dropped silently; the next channel comes");
	p3_chan_close(c);
	c = NULL;
	close(fd[0]);
	close(fd[1]);

	fd[0] = raw_socket();
	fd[1] = raw_socket();
	raw_hello(fd[0], 77, 0, 2);
	raw_hello(fd[1], 77, 0, 2);
	ok_err(accept_err(l), -P3_EHELLO, "two connections claiming the same band");
	fd[2] = raw_socket();
	raw_hello(fd[2], 77, 1, 3);
	ok_err(accept_err(l), -P3_EHELLO, "band count disagreeing within a channel");
	for (i = 0; i < 3; i++)
		close(fd[i]);

	/* A channel speaks one protocol: a band naming another is refused. */
	fd[0] = raw_socket();
	fd[1] = raw_socket();
	raw_hello(fd[0], 78, 0, 2);
	hello_proto = 2;
	raw_hello(fd[1], 78, 1, 2);
	hello_proto = 1;
	ok_err(accept_err(l), -P3_EHELLO, "protocols 1 and 2 within a channel");
	close(fd[0]);
	close(fd[1]);

	/* Idle connections flood the pending list; a real channel still gets in. */
	for (i = 0; i < 150; i++)
		fd[i] = raw_socket();
	p3_accept(l, 300, &c);
	fd[150] = raw_socket();
	fd[151] = raw_socket();
	raw_hello(fd[150], 99, 0, 2);
	raw_hello(fd[151], 99, 1, 2);
	ok(p3_accept(l, 3000, &c) == 0 && c && p3_chan_id(c) == 99,
	   "150 silent connections do not keep a real channel out");
	p3_chan_close(c);
	for (i = 0; i < 152; i++)
		close(fd[i]);
	p3_listener_close(l);
}

/* Out of descriptors: accept() fails with EMFILE while the connection
 * waits in the backlog; p3_accept must wait, not spin on poll(). */
/* The handshake: channels by cookie, refusals that say why. */
static void test_handshake(void)
{
	struct p3_hello h = { .chan_id = 5, .cookie = 0xa, .band = 0, .bands = 2,
			      .proto = P3_PROTO_MAX, .max_payload = 1024 };
	uint8_t r[P3_FRAME_HDR_LEN + P3_REFUSE_LEN];
	unsigned int reason = 0, proto = 0;
	struct p3_chan_opts o;
	struct p3_listener *l;
	struct p3_chan *c = NULL, *tx = NULL;
	int fd[4], i, err;

	p3_chan_opts_init(&o);
	o.max_payload = 64 << 10;
	p3_listen("127.0.0.1", "0", &o, &l);
	snprintf(port, sizeof(port), "%d", p3_listener_port(l));

	/* Two senders that picked the same chan_id (a restarted rank, a
	 * fixed id): band 0 of one and band 1 of the other never make a
	 * channel together. */
	for (i = 0; i < 4; i++)
		fd[i] = raw_socket();
	raw_hello_as(fd[0], &h);
	h.cookie = 0xb;
	h.band = 1;
	raw_hello_as(fd[1], &h);
	ok_err(p3_accept(l, 300, &c), -ETIMEDOUT,
	       "same chan_id, two cookies, one band each: no channel");
	h.band = 0;
	raw_hello_as(fd[2], &h);
	ok(p3_accept(l, 3000, &c) == 0 && c && p3_chan_id(c) == 5,
	   "the second sender's own band 0 completes its channel");
	p3_chan_close(c);
	c = NULL;

	/* A version this listener does not speak: refused, with the reason
	 * and the newest version it speaks, on the wire. */
	h.cookie = 0xc;
	h.proto = P3_PROTO_MAX + 1;
	raw_hello_as(fd[3], &h);
	ok_err(p3_accept(l, 3000, &c), -P3_EVERSION, "a hello of protocol %d: P3_EVERSION",
	       P3_PROTO_MAX + 1);
	ok(recv(fd[3], r, sizeof(r), MSG_WAITALL) == (ssize_t)sizeof(r) &&
	   p3_refusal_parse(r, sizeof(r), 0xc, 0, &reason, &proto) == (int)sizeof(r) &&
	   reason == P3_EVERSION && proto == P3_PROTO_MAX && closed_by_peer(fd[3], 1000),
	   "the sender reads the refusal (P3_EVERSION, and the version the listener speaks), "
	   "then EOF");
	for (i = 0; i < 4; i++)
		close(fd[i]);

	/* A real sender whose frames may exceed the listener's bound: the
	 * listener refuses at the hello, and the sender's band fails with
	 * the listener's reason, not with a reset. */
	p3_chan_opts_init(&o);
	o.bands = 1;
	o.max_payload = 1 << 20;
	err = p3_chan_connect("127.0.0.1", port, &o, &tx);
	ok_err(p3_accept(l, 3000, &c), -P3_ETOOBIG,
	       "max_payload 1 MiB against the listener's 64 KiB: refused at the hello");
	if (!err) {
		static uint8_t big[256 << 10];

		err = p3_chan_send(tx, 0, 0, 0, 1, 0, big, sizeof(big), -1);
		if (!err)
			err = p3_chan_flush(tx, 5000);
	}
	ok_err(err, -P3_ETOOBIG, "the sender learns why: P3_ETOOBIG");
	p3_chan_close(tx);
	p3_listener_close(l);
}

/* A channel short of a band expires timeout_ms after its first
 * connection, even when that time passes outside p3_accept(). */
static void test_expiry(void)
{
	struct p3_chan_opts o;
	struct p3_listener *l;
	struct p3_chan *c = NULL;
	int fd[2];

	p3_chan_opts_init(&o);
	o.timeout_ms = 300;
	p3_listen("127.0.0.1", "0", &o, &l);
	snprintf(port, sizeof(port), "%d", p3_listener_port(l));
	fd[0] = raw_socket();
	raw_hello(fd[0], 66, 0, 2);
	ok_err(p3_accept(l, 100, &c), -ETIMEDOUT, "band 0 alone makes no channel");
	usleep(400 * 1000);
	fd[1] = raw_socket();
	raw_hello(fd[1], 66, 1, 2);
	ok_err(p3_accept(l, 200, &c), -ETIMEDOUT,
	       "band 1, 400 ms after band 0 with timeout 300 ms: the channel has expired");
	ok(closed_by_peer(fd[0], 1000), "the expired band's connection is closed");
	p3_chan_close(c);
	c = NULL;
	close(fd[0]);
	close(fd[1]);
	p3_listener_close(l);

	/* timeout_ms -1: a half-made channel waits as long as it takes. */
	o.timeout_ms = -1;
	p3_listen("127.0.0.1", "0", &o, &l);
	snprintf(port, sizeof(port), "%d", p3_listener_port(l));
	fd[0] = raw_socket();
	raw_hello(fd[0], 67, 0, 2);
	ok_err(p3_accept(l, 100, &c), -ETIMEDOUT, "timeout -1: band 0 alone makes no channel");
	usleep(400 * 1000);
	fd[1] = raw_socket();
	raw_hello(fd[1], 67, 1, 2);
	ok(p3_accept(l, 2000, &c) == 0 && c && p3_chan_id(c) == 67,
	   "timeout -1: band 1, 400 ms later, still completes the channel");
	p3_chan_close(c);
	close(fd[0]);
	close(fd[1]);
	p3_listener_close(l);
}

static void test_emfile(void)
{
	struct p3_listener *l;
	struct p3_chan *c = NULL;
	struct rlimit old, low;
	struct rusage r0, r1;
	uint64_t t0, wall_ns, cpu_ns;
	int fd, spare[64], n = 0, err;

	p3_listen("127.0.0.1", "0", NULL, &l);
	snprintf(port, sizeof(port), "%d", p3_listener_port(l));
	fd = raw_socket();		/* waits in the backlog */
	getrlimit(RLIMIT_NOFILE, &old);
	/* A low limit, then every descriptor below it taken. */
	low = old;
	low.rlim_cur = 32;
	setrlimit(RLIMIT_NOFILE, &low);
	while (n < 64 && (spare[n] = dup(0)) >= 0)
		n++;
	getrusage(RUSAGE_SELF, &r0);
	t0 = p3_now_ns();
	err = p3_accept(l, 1000, &c);
	wall_ns = p3_now_ns() - t0;
	getrusage(RUSAGE_SELF, &r1);
	setrlimit(RLIMIT_NOFILE, &old);
	cpu_ns = (uint64_t)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
			    r0.ru_stime.tv_sec) * 1000000000ull +
		 (uint64_t)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
			    r0.ru_stime.tv_usec) * 1000ull;
	ok(err == -ETIMEDOUT && cpu_ns < wall_ns / 4,
	   "out of descriptors, p3_accept waits out its 1 s (%s) using %.0f ms of CPU, not spinning",
	   p3_strerror(err), cpu_ns / 1e6);
	while (n > 0)
		close(spare[--n]);
	close(fd);
	p3_listener_close(l);
}

int main(void)
{
	test_attacks();
	test_header_crc();
	test_mutations();
	test_expiry();
	test_handshake();
	test_drip();
	test_hellos();
	test_emfile();
	return tap_done();
}
