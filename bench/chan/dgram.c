// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * dgram: what libp3's datagram transport costs in CPU per MiB on this
 * host's loopback, sender and receiver in one process.
 *
 *   dgram [-m MIB] [-t TENSOR_KIB] [-c CHUNK]
 *
 * Sends MIB in tensors of TENSOR_KIB, one after the other: the receiver
 * registers a tensor, the sender sends it, the receiver polls until it
 * is complete (a tensor fits the receive buffer, so loopback loses
 * nothing), and the data is compared byte for byte.  Prints one JSON
 * line: the CPU time (user + system, getrusage: every thread, and the
 * kernel's work for both ends, which loopback does in the sender's
 * system call) per MiB, the wall rate, and the bytes missing.
 * bench/chan/dgram.sh runs it built with and without UDP GSO.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "p3.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "dgram: %s: %s\n", what, p3_strerror(err));
	exit(1);
}

static size_t arg_size(const char *s, size_t unit)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (*end || !v || v > (1ul << 20)) {
		fprintf(stderr, "dgram: '%s' is not a size from 1 to 1048576\n", s);
		exit(2);
	}
	return v * unit;
}

int main(int argc, char **argv)
{
	size_t total = 256u << 20, tensor = 1u << 20, i, n, missing = 0;
	struct p3_dgram_completion c;
	struct p3_dgram_opts o;
	struct p3_dgram *rx, *tx;
	uint8_t *src, *dst;
	double t0, c0;
	char port[16];
	int opt, err;

	p3_dgram_opts_init(&o);
	while ((opt = getopt(argc, argv, "m:t:c:")) != -1) {
		if (opt == 'm')
			total = arg_size(optarg, 1u << 20);
		else if (opt == 't')
			tensor = arg_size(optarg, 1u << 10);
		else if (opt == 'c')
			o.chunk = (uint32_t)arg_size(optarg, 1);
		else {
			fprintf(stderr, "usage: dgram [-m MIB] [-t TENSOR_KIB] [-c CHUNK]\n");
			return 2;
		}
	}
	n = total / tensor;
	src = malloc(tensor);
	dst = malloc(tensor);
	if (!src || !dst || !n)
		die("setup", -ENOMEM);
	for (i = 0; i < tensor; i++)
		src[i] = (uint8_t)(i * 131 + 7);
	err = p3_dgram_bind("127.0.0.1", "0", &o, &rx);
	if (err)
		die("p3_dgram_bind", err);
	snprintf(port, sizeof(port), "%d", p3_dgram_port(rx));
	err = p3_dgram_connect("127.0.0.1", port, &o, &tx);
	if (err)
		die("p3_dgram_connect", err);

	t0 = now();
	c0 = cpu_seconds();
	for (i = 0; i < n; i++) {
		memset(dst, 0xa5, tensor);
		/* A generous deadline: a tensor lost on loopback shows as
		 * missing bytes, not as a hang. */
		err = p3_dgram_expect(rx, (uint32_t)i, dst, tensor, i, 1000000000ull);
		if (err)
			die("p3_dgram_expect", err);
		err = p3_dgram_send(tx, (unsigned int)(i % 8), i, (uint32_t)i, 0, src, tensor, 5000);
		if (err < 0)
			die("p3_dgram_send", err);
		do {
			err = p3_dgram_poll(rx, 5000);
			if (err < 0)
				die("p3_dgram_poll", err);
		} while (p3_dgram_next(rx, &c) != 1);
		missing += c.missing;
		if (!c.missing && memcmp(src, dst, tensor))
			die("data differs", -EIO);
	}
	c0 = cpu_seconds() - c0;
	t0 = now() - t0;
	printf("{\"mib\": %zu, \"tensor_kib\": %zu, \"chunk\": %u, \"cpu_s_per_mib\": %.6f, "
	       "\"wall_mib_s\": %.1f, \"missing\": %zu}\n",
	       n * tensor >> 20, tensor >> 10, o.chunk, c0 / (double)(n * tensor >> 20),
	       (double)(n * tensor >> 20) / t0, missing);
	p3_dgram_close(tx);
	p3_dgram_close(rx);
	free(src);
	free(dst);
	return 0;
}
