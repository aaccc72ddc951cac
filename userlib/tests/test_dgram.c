// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The datagram transport over loopback: whole tensors, losses completed
 * at the deadline with zeros and their ranges, tensors of which nothing
 * came, datagrams that come before their tensor, duplicates and stale
 * iterations, hostile datagrams (none writes outside its chunk), bad
 * arguments, a peer whose port is closed, and UDP GSO and GRO: a send
 * carries many frames, a coalesced read is cut back into them, and a
 * route that cannot take GSO gets the frames one datagram each.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "p3.h"
#include "tap.h"
#include "util.h"

#define CHUNK	1000
#define FRAME	(P3_FRAME_HDR_LEN + CHUNK)

#ifndef UDP_SEGMENT
#define UDP_SEGMENT	103
#endif
#ifndef UDP_GRO
#define UDP_GRO		104
#endif

static struct p3_dgram *rx, *tx;

static void open_pair(void)
{
	struct p3_dgram_opts o;
	char port[16];

	p3_dgram_opts_init(&o);
	o.chunk = CHUNK;
	o.early_bytes = 64 << 10;
	if (p3_dgram_bind("127.0.0.1", "0", &o, &rx) || !rx)
		exit(2);
	snprintf(port, sizeof(port), "%d", p3_dgram_port(rx));
	if (p3_dgram_connect("127.0.0.1", port, &o, &tx) || !tx)
		exit(2);
}

static void close_pair(void)
{
	p3_dgram_close(tx);
	p3_dgram_close(rx);
	tx = rx = NULL;
}

/* Polls until a completion is ready (or 2 s pass) and pops it. */
static int next_completion(struct p3_dgram_completion *c)
{
	uint64_t end = p3_now_ns() + 2000000000ull;

	while (p3_now_ns() < end)
		if (p3_dgram_poll(rx, 100) > 0)
			return p3_dgram_next(rx, c) == 1;
	return 0;
}

static void test_whole(void)
{
	static uint8_t src[10500], dst[10500];
	struct p3_dgram_completion c;
	struct p3_dgram_stats st;

	open_pair();
	fill_pattern(src, sizeof(src), 7, 3);
	ok(p3_dgram_expect(rx, 7, dst, sizeof(dst), 3, 0) == 0, "whole: registered");
	ok(p3_dgram_send(tx, 2, 3, 7, 0, src, sizeof(src), 1000) == 11,
	   "whole: 10,500 bytes go as 11 datagrams of at most 1,000");
	ok(next_completion(&c) && c.tensor == 7 && c.iter == 3 && c.bytes == sizeof(src) &&
	   c.missing == 0 && c.t_first_ns && c.t_done_ns >= c.t_first_ns,
	   "whole: completed with nothing missing");
	ok(check_pattern(dst, sizeof(dst), 7, 3), "whole: every byte as sent");
	p3_dgram_stats(rx, &st);
	ok(st.stored == 11 && st.bad == 0 && st.duplicate == 0, "whole: 11 stored, none bad");
	ok_err(p3_dgram_missing(rx, 7, NULL, 0), 0, "whole: no missing range");
	close_pair();
}

static void test_deadline(void)
{
	static uint8_t src[6500], dst[6500];
	struct p3_dgram_completion c;
	struct p3_range r[4];
	uint64_t t0;
	int got;

	open_pair();
	fill_pattern(src, sizeof(src), 1, 9);
	memset(dst, 0xaa, sizeof(dst));
	ok(p3_dgram_expect(rx, 1, dst, sizeof(dst), 9, 50000000) == 0,
	   "deadline: registered, 50 ms after the first datagram");
	/* Chunks 0, 3, 4 and 6 (the 500-byte tail) go; 1, 2 and 5 are lost. */
	t0 = p3_now_ns();
	p3_dgram_send(tx, 0, 9, 1, 0, src, CHUNK, 1000);
	p3_dgram_send(tx, 0, 9, 1, 3 * CHUNK, src + 3 * CHUNK, 2 * CHUNK, 1000);
	p3_dgram_send(tx, 0, 9, 1, 6 * CHUNK, src + 6 * CHUNK, 500, 1000);
	memset(&c, 0, sizeof(c));
	got = next_completion(&c);
	ok(got && c.missing == 3 * CHUNK, "deadline: completed with 3,000 bytes missing (got %llu)",
	   (unsigned long long)c.missing);
	ok(c.t_done_ns - t0 >= 50000000, "deadline: not before the deadline (%.1f ms)",
	   (c.t_done_ns - t0) / 1e6);
	ok(check_pattern(dst, CHUNK, 1, 9) && !memcmp(dst + 3 * CHUNK, src + 3 * CHUNK, 2 * CHUNK) &&
	   !memcmp(dst + 6 * CHUNK, src + 6 * CHUNK, 500), "deadline: what came is intact");
	ok(all_bytes(dst + CHUNK, 2 * CHUNK, 0) && all_bytes(dst + 5 * CHUNK, CHUNK, 0),
	   "deadline: what was lost reads as zeros");
	ok(p3_dgram_missing(rx, 1, r, 4) == 2 && r[0].offset == CHUNK &&
	   r[0].length == 2 * CHUNK && r[1].offset == 5 * CHUNK && r[1].length == CHUNK,
	   "deadline: missing ranges [1000, 3000) and [5000, 6000), merged");
	ok(p3_dgram_missing(rx, 1, r, 1) == 2, "deadline: a short array learns there are 2");
	close_pair();
}

/* Datagrams that keep coming, slower than the deadline but each within
 * it, are all waited for: the deadline counts from the latest one. */
static void test_idle(void)
{
	static uint8_t src[4 * CHUNK], dst[4 * CHUNK];
	struct p3_dgram_completion c;
	uint64_t t_last = 0;
	int k, got;

	open_pair();
	fill_pattern(src, sizeof(src), 3, 1);
	ok(p3_dgram_expect(rx, 3, dst, sizeof(dst), 1, 40000000) == 0,
	   "idle: registered, 40 ms without a datagram completes it");
	for (k = 0; k < 3; k++) {
		if (k)
			usleep(25000);
		p3_dgram_send(tx, 0, 1, 3, (uint64_t)k * CHUNK, src + k * CHUNK, CHUNK, 1000);
		t_last = p3_now_ns();
		p3_dgram_poll(rx, 0);
	}
	memset(&c, 0, sizeof(c));
	got = next_completion(&c);
	ok(got && c.missing == CHUNK && c.t_done_ns - t_last >= 40000000 &&
	   !memcmp(dst, src, 3 * CHUNK),
	   "idle: chunks 25 ms apart all stored; completed %.1f ms after the last, "
	   "only the unsent chunk missing", (c.t_done_ns - t_last) / 1e6);
	close_pair();
}

static void test_finish(void)
{
	static uint8_t dst[3000];
	struct p3_dgram_completion c;
	uint64_t t0;

	open_pair();
	memset(dst, 0xaa, sizeof(dst));
	ok(p3_dgram_expect(rx, 4, dst, sizeof(dst), 1, 1000000) == 0, "finish: registered");
	ok_err(p3_dgram_missing(rx, 4, NULL, 0), -EBUSY, "finish: no missing ranges before done");
	t0 = p3_now_ns();
	ok(p3_dgram_finish(rx, 4, 30000000) == 0, "finish: in 30 ms, though nothing came");
	ok(next_completion(&c) && c.missing == sizeof(dst) && c.t_first_ns == 0 &&
	   c.t_done_ns - t0 >= 30000000, "finish: all 3,000 bytes missing, after 30 ms");
	ok(all_bytes(dst, sizeof(dst), 0), "finish: zero-filled");
	ok_err(p3_dgram_finish(rx, 5, 0), -ENOENT, "finish: an unknown tensor: -ENOENT");
	ok_err(p3_dgram_expect(rx, 4, dst, sizeof(dst), 0, 0), -P3_ESTALE,
	       "an older iteration cannot be registered");
	ok(p3_dgram_expect(rx, 4, dst, sizeof(dst), 2, 0) == 0, "a newer one can");
	ok_err(p3_dgram_expect(rx, 4, dst, sizeof(dst), 3, 0), -EBUSY,
	       "not while that one is incomplete");
	close_pair();
}

static void test_early_dup_stale(void)
{
	static uint8_t src[2500], dst[2500];
	struct p3_dgram_completion c;
	struct p3_dgram_stats st;

	open_pair();
	fill_pattern(src, sizeof(src), 2, 5);
	/* Before the tensor is registered: they wait. */
	p3_dgram_send(tx, 1, 5, 2, 0, src, 2 * CHUNK, 1000);
	p3_dgram_poll(rx, 50);
	p3_dgram_stats(rx, &st);
	ok(st.waiting == 2 && st.stored == 0, "early: 2 datagrams wait for their tensor");
	ok(p3_dgram_expect(rx, 2, dst, sizeof(dst), 5, 0) == 0, "early: registered");
	p3_dgram_stats(rx, &st);
	ok(st.waiting == 0 && st.stored == 2, "early: both stored on registration");
	p3_dgram_send(tx, 1, 5, 2, 0, src, CHUNK, 1000);	/* again */
	p3_dgram_send(tx, 1, 4, 2, 2 * CHUNK, src, 500, 1000);	/* an older iteration */
	p3_dgram_send(tx, 1, 5, 2, 2 * CHUNK, src + 2 * CHUNK, 500, 1000);
	ok(next_completion(&c) && c.missing == 0 && check_pattern(dst, sizeof(dst), 2, 5),
	   "early: complete and intact");
	p3_dgram_stats(rx, &st);
	ok(st.duplicate == 1 && st.stale == 1 && st.stored == 3,
	   "a duplicate and a stale datagram are counted, not stored (dup %llu, stale %llu)",
	   (unsigned long long)st.duplicate, (unsigned long long)st.stale);
	p3_dgram_send(tx, 1, 5, 2, 0, src, CHUNK, 1000);
	p3_dgram_poll(rx, 50);
	p3_dgram_stats(rx, &st);
	ok(st.late == 1, "a datagram for a complete tensor is late");
	close_pair();
}

/* A datagram built by hand, sent from a raw UDP socket to the receiver. */
static void send_raw(int fd, const struct p3_frame *f, const void *payload, size_t extra,
		     int corrupt)
{
	uint8_t b[P3_FRAME_HDR_LEN + 3 * CHUNK];
	size_t len = P3_FRAME_HDR_LEN + f->length + extra;

	memset(b, 0x77, sizeof(b));
	p3_frame_header(b, f, payload);
	memcpy(b + P3_FRAME_HDR_LEN, payload, f->length);
	if (corrupt)
		b[P3_FRAME_HDR_LEN] ^= 1;
	send(fd, b, len, 0);
}

static void test_hostile(void)
{
	/* Two tensors side by side in one buffer, fenced. */
	static uint8_t arena[4 * CHUNK + 300], pay[3 * CHUNK];
	uint8_t *a = arena + 100, *b = arena + 100 + 1500 + 100;
	struct sockaddr_in to = { .sin_family = AF_INET };
	struct p3_dgram_completion c;
	struct p3_dgram_stats st;
	int fd;

	open_pair();
	memset(arena, 0xee, sizeof(arena));
	memset(pay, 0x11, sizeof(pay));
	ok(p3_dgram_expect(rx, 10, a, 1500, 1, 0) == 0 &&
	   p3_dgram_expect(rx, 11, b, 1500, 1, 0) == 0, "hostile: two tensors of 1,500 bytes");
	memset(a, 0xee, 1500);
	memset(b, 0xee, 1500);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	to.sin_port = htons((uint16_t)p3_dgram_port(rx));
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	connect(fd, (struct sockaddr *)&to, sizeof(to));
	/* Tail chunk of a, but longer: would run into b. */
	send_raw(fd, &(struct p3_frame){ .type = P3_FRAME_DATA, .tensor = 10, .offset = CHUNK,
					.length = CHUNK, .iter = 1 }, pay, 0, 0);
	/* Unaligned, out of range, past the end, a bad checksum. */
	send_raw(fd, &(struct p3_frame){ .type = P3_FRAME_DATA, .tensor = 10, .offset = 500,
					.length = CHUNK, .iter = 1 }, pay, 0, 0);
	send_raw(fd, &(struct p3_frame){ .type = P3_FRAME_DATA, .tensor = 10, .offset = 2 * CHUNK,
					.length = 10, .iter = 1 }, pay, 0, 0);
	send_raw(fd, &(struct p3_frame){ .type = P3_FRAME_DATA, .tensor = 10, .offset = 0,
					.length = CHUNK, .iter = 1 }, pay, 0, 1);
	/* Longer than a chunk, trailing bytes after the frame, a hello. */
	send_raw(fd, &(struct p3_frame){ .type = P3_FRAME_DATA, .tensor = 11, .offset = 0,
					.length = CHUNK + 8, .iter = 1 }, pay, 0, 0);
	send_raw(fd, &(struct p3_frame){ .type = P3_FRAME_DATA, .tensor = 11, .offset = 0,
					.length = CHUNK, .iter = 1 }, pay, 9, 0);
	send_raw(fd, &(struct p3_frame){ .type = P3_FRAME_HELLO, .length = P3_HELLO_LEN },
		 pay, 0, 0);
	/* A level the receiver has no band for, and plain junk. */
	send_raw(fd, &(struct p3_frame){ .type = P3_FRAME_DATA, .level = 40, .tensor = 11,
					.offset = 0, .length = CHUNK, .iter = 1 }, pay, 0, 0);
	send(fd, "junk", 4, 0);
	p3_dgram_poll(rx, 100);
	p3_dgram_stats(rx, &st);
	ok(st.bad == 9 && st.stored == 0, "hostile: 9 datagrams refused, none stored (bad %llu)",
	   (unsigned long long)st.bad);
	ok(all_bytes(arena, 100, 0xee) && all_bytes(a, 1500, 0xee) && all_bytes(a + 1500, 100, 0xee) &&
	   all_bytes(b, 1500, 0xee) && all_bytes(b + 1500, (size_t)(arena + sizeof(arena) - (b + 1500)), 0xee),
	   "hostile: not a byte of either tensor or the fences changed");
	/* The right chunk still goes in. */
	send_raw(fd, &(struct p3_frame){ .type = P3_FRAME_DATA, .tensor = 10, .offset = CHUNK,
					.length = 500, .iter = 1 }, pay, 0, 0);
	p3_dgram_poll(rx, 100);
	p3_dgram_finish(rx, 10, 0);
	ok(p3_dgram_next(rx, &c) == 1 && c.tensor == 10 && c.missing == CHUNK &&
	   all_bytes(a + CHUNK, 500, 0x11) && all_bytes(a, CHUNK, 0) && all_bytes(b, 1500, 0xee),
	   "hostile: a good chunk after them lands where it should, and only there");
	close(fd);
	close_pair();
}

static void test_args(void)
{
	struct p3_dgram_opts o;
	struct p3_dgram *d;
	uint8_t x[10] = { 0 };

	p3_dgram_opts_init(&o);
	o.chunk = 0;
	ok_err(p3_dgram_bind("127.0.0.1", "0", &o, &d), -EINVAL, "chunk 0: -EINVAL");
	o.chunk = 70000;
	ok_err(p3_dgram_bind("127.0.0.1", "0", &o, &d), -EINVAL, "chunk above 65467: -EINVAL");
	p3_dgram_opts_init(&o);
	o.bands = 65;
	ok_err(p3_dgram_connect("127.0.0.1", "9", &o, &d), -EINVAL, "bands 65: -EINVAL");
	open_pair();
	ok_err(p3_dgram_send(tx, 8, 0, 0, 0, x, 10, 0), -P3_ELEVEL, "level 8 of 8 bands");
	ok_err(p3_dgram_send(tx, 0, 0, 0, 10, x, 10, 0), -EINVAL, "an unaligned offset");
	ok_err(p3_dgram_send(rx, 0, 0, 0, 0, x, 10, 0), -EINVAL, "a receiver cannot send");
	ok_err(p3_dgram_expect(tx, 0, x, 10, 0, 0), -EINVAL, "a sender cannot expect");
	ok_err(p3_dgram_port(tx), -EINVAL, "a sender has no port");
	close_pair();
}

static void test_refused(void)
{
	struct p3_dgram_opts o;
	struct p3_dgram *d;
	uint8_t x[10] = { 0 };
	char port[16];
	int i, err = 0;

	p3_dgram_opts_init(&o);
	p3_dgram_bind("127.0.0.1", "0", &o, &d);
	snprintf(port, sizeof(port), "%d", p3_dgram_port(d));
	p3_dgram_close(d);
	p3_dgram_connect("127.0.0.1", port, &o, &d);
	for (i = 0; i < 20 && err != -ECONNREFUSED; i++) {
		err = p3_dgram_send(d, 0, 0, 0, 0, x, 10, 100);
		usleep(10000);
	}
	ok_err(err, -ECONNREFUSED, "a closed port: -ECONNREFUSED");
	p3_dgram_close(d);
}


/* A UDP socket on loopback that takes coalesced reads (UDP GRO). */
static int gro_socket(char *port, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_DGRAM, 0), one = 1;

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(fd, (struct sockaddr *)&a, &alen) ||
	    setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)))
		exit(2);
	snprintf(port, len, "%d", ntohs(a.sin_port));
	return fd;
}

/* Reads one datagram (or coalesced run) into buf; its length, the
 * segment size the kernel reported (0: none), or -1 after 1 s. */
static ssize_t read_gro(int fd, uint8_t *buf, size_t len, int *seg)
{
	union {
		char		b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr	align;
	} ctl;
	struct iovec iov = { buf, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			    .msg_controllen = sizeof(ctl.b) };
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct cmsghdr *c;
	ssize_t n;

	if (poll(&p, 1, 1000) != 1)
		return -1;
	n = recvmsg(fd, &m, 0);
	*seg = 0;
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO)
			memcpy(seg, CMSG_DATA(c), sizeof(*seg));
	return n;
}

static void test_gso_send(void)
{
	static uint8_t src[100 * CHUNK], buf[65536];
	struct p3_frame_limits lim = { .max_payload = CHUNK };
	struct p3_dgram_opts o;
	struct p3_dgram *d;
	struct p3_frame f;
	char port[16];
	int fd, seg, reads = 0, frames = 0, in_order = 1;
	uint64_t next = 0;
	ssize_t n, at;

	fill_pattern(src, sizeof(src), 5, 1);
	fd = gro_socket(port, sizeof(port));
	p3_dgram_opts_init(&o);
	o.chunk = CHUNK;
	if (p3_dgram_connect("127.0.0.1", port, &o, &d))
		exit(2);
	ok(p3_dgram_send(d, 1, 1, 5, 0, src, sizeof(src), 1000) == 100, "gso: 100 frames sent");
	while (frames < 100 && (n = read_gro(fd, buf, sizeof(buf), &seg)) > 0) {
		reads++;
		for (at = 0; at < n; at += seg ? seg : n) {
			size_t len = (size_t)(seg && n - at > seg ? seg : n - at);

			if (p3_frame_parse(buf + at, len, &lim, &f) != (int)len ||
			    f.offset != next || f.length != CHUNK ||
			    memcmp(f.payload, src + next, CHUNK))
				in_order = 0;
			next += CHUNK;
			frames++;
		}
	}
	ok(frames == 100 && in_order, "gso: every frame whole, in order, a datagram each");
	/* One datagram a send would be 100 reads: the sends carried many. */
	ok(reads <= 10, "gso: 100 frames came in %d sends", reads);
	p3_dgram_close(d);
	/* P3_DGRAM_GSO=0: a datagram a send, for a socket opened after it. */
	setenv("P3_DGRAM_GSO", "0", 1);
	if (p3_dgram_connect("127.0.0.1", port, &o, &d))
		exit(2);
	p3_dgram_send(d, 1, 2, 5, 0, src, 10 * CHUNK, 1000);
	for (reads = 0; reads < 10 && read_gro(fd, buf, sizeof(buf), &seg) == FRAME; reads++)
		;
	ok(reads == 10, "P3_DGRAM_GSO=0: 10 frames, 10 datagrams of one frame (%d)", reads);
	unsetenv("P3_DGRAM_GSO");
	p3_dgram_close(d);
	close(fd);
}

/* Frames of tensor 20 (CHUNK each) as one UDP GSO packet to the receiver;
 * the frame at bad gets a wrong checksum. */
static void send_gso(int fd, const uint8_t *src, int frames, int bad)
{
	static uint8_t b[64 * FRAME];
	int i, size = FRAME;

	for (i = 0; i < frames; i++) {
		struct p3_frame f = { .type = P3_FRAME_DATA, .tensor = 20, .iter = 1,
				      .offset = (uint64_t)i * CHUNK, .length = CHUNK };

		p3_frame_header(b + i * FRAME, &f, src + i * CHUNK);
		memcpy(b + i * FRAME + P3_FRAME_HDR_LEN, src + i * CHUNK, CHUNK);
		if (i == bad)
			b[i * FRAME + P3_FRAME_HDR_LEN] ^= 1;
	}
	setsockopt(fd, SOL_UDP, UDP_SEGMENT, &size, sizeof(size));
	send(fd, b, (size_t)frames * FRAME, 0);
}

static void test_gro_receive(void)
{
	static uint8_t src[8 * CHUNK], dst[8 * CHUNK];
	struct sockaddr_in to = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct p3_dgram_completion c;
	struct p3_dgram_stats st;
	int fd;

	open_pair();
	fill_pattern(src, sizeof(src), 20, 1);
	memset(dst, 0xee, sizeof(dst));
	ok(p3_dgram_expect(rx, 20, dst, sizeof(dst), 1, 0) == 0, "gro: registered");
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	to.sin_port = htons((uint16_t)p3_dgram_port(rx));
	connect(fd, (struct sockaddr *)&to, sizeof(to));
	/* Frames 0-5 with frame 2 corrupt, then frames 0-7 whole. */
	send_gso(fd, src, 6, 2);
	p3_dgram_poll(rx, 100);
	p3_dgram_stats(rx, &st);
	ok(st.bad == 1 && st.stored == 5, "gro: a coalesced read is cut into frames, the bad "
	   "one alone refused (bad %llu, stored %llu)", (unsigned long long)st.bad,
	   (unsigned long long)st.stored);
	send_gso(fd, src, 8, -1);
	ok(next_completion(&c) && c.tensor == 20 && c.missing == 0 &&
	   !memcmp(src, dst, sizeof(dst)), "gro: the tensor completes whole, byte for byte");
	close(fd);
	close_pair();
}

/* In a network namespace of its own, loopback's MTU cut below a frame
 * of 4,000 bytes: the kernel refuses GSO there, libp3 sends each frame
 * as a datagram of its own (IP fragments it).  Exit status: 0 whole,
 * 1 not, 100 no namespace. */
static int child_fallback(void)
{
	static uint8_t src[5 * 4000], dst[5 * 4000];
	struct ifreq ifr = { .ifr_name = "lo" };
	struct p3_dgram_completion c;
	struct p3_dgram_opts o;
	int s, n;

	if (unshare(CLONE_NEWNET))
		return 100;
	s = socket(AF_INET, SOCK_DGRAM, 0);
	ifr.ifr_mtu = 1500;
	if (ioctl(s, SIOCSIFMTU, &ifr))
		return 100;
	ifr.ifr_flags = IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr))
		return 100;
	close(s);
	p3_dgram_opts_init(&o);
	o.chunk = 4000;
	if (p3_dgram_bind("127.0.0.1", "0", &o, &rx))
		return 1;
	snprintf((char *)dst, 16, "%d", p3_dgram_port(rx));
	if (p3_dgram_connect("127.0.0.1", (char *)dst, &o, &tx))
		return 1;
	fill_pattern(src, sizeof(src), 3, 1);
	memset(dst, 0, sizeof(dst));
	p3_dgram_expect(rx, 3, dst, sizeof(dst), 1, 0);
	n = p3_dgram_send(tx, 0, 1, 3, 0, src, sizeof(src), 1000);
	if (n != 5)
		return 1;
	if (!next_completion(&c) || c.missing || memcmp(src, dst, sizeof(dst)))
		return 1;
	return 0;
}

static void test_gso_fallback(void)
{
	int status = -1;
	pid_t pid = fork();

	if (!pid)
		_exit(child_fallback());
	waitpid(pid, &status, 0);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 100) {
		ok(1, "gso refused by the route # SKIP cannot create a network namespace");
		return;
	}
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "gso refused by the route (MTU below a frame): every frame sent singly, the tensor whole");
}

int main(void)
{
	test_whole();
	test_deadline();
	test_idle();
	test_finish();
	test_early_dup_stale();
	test_hostile();
	test_args();
	test_refused();
	test_gso_send();
	test_gro_receive();
	test_gso_fallback();
	return tap_done();
}
