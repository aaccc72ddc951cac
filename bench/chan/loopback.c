// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * loopback: libp3 channel throughput against plain TCP on this host's
 * loopback, the same bytes both ways, side by side in one run.
 *
 *   loopback [-m MIB] [-t TENSOR_MIB] [-b BANDS] [-r ROUNDS]
 *
 * Plain TCP: one connection, a sender thread writing the buffer and the
 * receiver reading into its own, 4 MiB at a time.  The channel: a sender
 * thread queueing tensors of TENSOR_MIB (each copied into libp3's queue,
 * checksummed, framed) on BANDS bands, levels taken in turn, and the
 * receiver registering each tensor and polling until all are complete;
 * then the same sent by reference (p3_chan_send_ref: no copy, written
 * from the caller's memory), and by reference with each frame's CRC over
 * its header only (checksum -1: no pass of libp3's over the bytes).  Each
 * round runs all four; prints one JSON line per round and one summary
 * with the median ratios to TCP.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "p3.h"

static size_t total, tensor;
static unsigned int bands = 1;
static int by_ref;		/* the channel round sends by reference */
static uint8_t *src, *dst;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "loopback: %s: %s\n", what, p3_strerror(err));
	exit(1);
}

/* ------------------------------------------------------------ plain TCP */

static void *tcp_send(void *arg)
{
	int fd = *(int *)arg;
	size_t off = 0;
	ssize_t n;

	while (off < total) {
		n = send(fd, src + off, total - off < (4 << 20) ? total - off : (4 << 20), 0);
		if (n <= 0)
			die("tcp send", -errno);
		off += (size_t)n;
	}
	return NULL;
}

static double tcp_round(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0), c, a, one = 1;
	pthread_t th;
	size_t off = 0;
	ssize_t n;
	double t0;

	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&sa, &len))
		die("tcp listen", -errno);
	c = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c, (struct sockaddr *)&sa, sizeof(sa)))
		die("tcp connect", -errno);
	a = accept(l, NULL, NULL);
	t0 = now();
	pthread_create(&th, NULL, tcp_send, &c);
	while (off < total) {
		n = recv(a, dst + off, total - off, 0);
		if (n <= 0)
			die("tcp recv", -errno);
		off += (size_t)n;
	}
	t0 = now() - t0;
	pthread_join(th, NULL);
	close(a);
	close(c);
	close(l);
	return total / t0;
}

/* -------------------------------------------------------------- channel */

static void *chan_send(void *arg)
{
	struct p3_chan *tx = arg;
	size_t i, n = total / tensor;
	int err;

	for (i = 0; i < n; i++) {
		err = (by_ref ? p3_chan_send_ref : p3_chan_send)(
			tx, (unsigned int)(i % bands), (uint32_t)i, 0, (uint32_t)i, 0,
			src + i * tensor, tensor, -1);
		if (err)
			die("p3_chan_send", err);
	}
	err = p3_chan_flush(tx, -1);
	if (err)
		die("p3_chan_flush", err);
	return NULL;
}

static double chan_round(int ref, int checksum)
{
	struct p3_chan_opts o;
	struct p3_listener *l;
	struct p3_chan *tx, *rx;
	struct p3_completion d;
	char port[16];
	size_t i, n = total / tensor, done = 0;
	pthread_t th;
	double t0;
	int err;

	p3_chan_opts_init(&o);
	o.bands = bands;
	o.max_queued = 64u << 20;
	o.progress = 1;
	o.checksum = checksum;
	err = p3_listen("127.0.0.1", "0", &o, &l);
	if (err)
		die("p3_listen", err);
	snprintf(port, sizeof(port), "%d", p3_listener_port(l));
	err = p3_chan_connect("127.0.0.1", port, &o, &tx);
	if (!err)
		err = p3_accept(l, 10000, &rx);
	if (err)
		die("connect/accept", err);
	for (i = 0; i < n; i++) {
		err = p3_chan_expect(rx, (uint32_t)i, dst + i * tensor, tensor, 0);
		if (err)
			die("p3_chan_expect", err);
	}
	by_ref = ref;
	t0 = now();
	pthread_create(&th, NULL, chan_send, tx);
	while (done < n) {
		err = p3_chan_poll(rx, 1000);
		if (err < 0)
			die("p3_chan_poll", err);
		while (p3_chan_next(rx, &d) == 1)
			done++;
	}
	t0 = now() - t0;
	pthread_join(th, NULL);
	p3_chan_close(tx);
	p3_chan_close(rx);
	p3_listener_close(l);
	if (memcmp(src, dst, n * tensor))
		die("the data arrived changed", -EIO);
	return n * tensor / t0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	size_t mib = 1024, tmib = 4, i;
	int opt, rounds = 5, r;
	double ratio[64], ratio_ref[64], ratio_bare[64];

	while ((opt = getopt(argc, argv, "m:t:b:r:")) != -1) {
		switch (opt) {
		case 'm': mib = strtoul(optarg, NULL, 0); break;
		case 't': tmib = strtoul(optarg, NULL, 0); break;
		case 'b': bands = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'r': rounds = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-m MIB] [-t TENSOR_MIB] [-b BANDS] [-r ROUNDS]\n",
				argv[0]);
			return 2;
		}
	}
	if (!mib || !tmib || tmib > mib || !bands || bands > P3_MAX_BANDS ||
	    rounds < 1 || rounds > 64) {
		fprintf(stderr, "loopback: bad arguments\n");
		return 2;
	}
	total = mib << 20;
	tensor = tmib << 20;
	src = malloc(total);
	dst = malloc(total);
	if (!src || !dst)
		die("malloc", -ENOMEM);
	for (i = 0; i < total; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 13);
	for (r = 0; r < rounds; r++) {
		double tcp, chan, ref, bare;

		memset(dst, 0, total);
		tcp = tcp_round();
		memset(dst, 0, total);
		chan = chan_round(0, 0);
		memset(dst, 0, total);
		ref = chan_round(1, 0);
		memset(dst, 0, total);
		bare = chan_round(1, -1);
		ratio[r] = chan / tcp;
		ratio_ref[r] = ref / tcp;
		ratio_bare[r] = bare / tcp;
		printf("{\"round\": %d, \"tcp_GBps\": %.3f, \"chan_GBps\": %.3f, "
		       "\"chan_ref_GBps\": %.3f, \"chan_ref_hdrcrc_GBps\": %.3f, \"ratio\": %.3f, "
		       "\"ratio_ref\": %.3f, \"ratio_ref_hdrcrc\": %.3f}\n",
		       r, tcp / 1e9, chan / 1e9, ref / 1e9, bare / 1e9, ratio[r], ratio_ref[r],
		       ratio_bare[r]);
		fflush(stdout);
	}
	qsort(ratio, (size_t)rounds, sizeof(ratio[0]), cmp);
	qsort(ratio_ref, (size_t)rounds, sizeof(ratio_ref[0]), cmp);
	qsort(ratio_bare, (size_t)rounds, sizeof(ratio_bare[0]), cmp);
	printf("{\"MiB\": %zu, \"tensor_MiB\": %zu, \"bands\": %u, \"rounds\": %d, "
	       "\"median_ratio\": %.3f, \"median_ratio_ref\": %.3f, "
	       "\"median_ratio_ref_hdrcrc\": %.3f}\n", mib, tmib, bands,
	       rounds, ratio[rounds / 2], ratio_ref[rounds / 2], ratio_bare[rounds / 2]);
	return 0;
}
