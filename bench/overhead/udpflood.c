// SPDX-License-Identifier: GPL-2.0
/*
 * udpflood: send small UDP datagrams as fast as one thread can, from
 * FLOWS connected sockets (one flow each: its own socket and destination
 * port), with sendmmsg(2) bursts taken round robin over the sockets.
 *
 *   udpflood -d ADDR [-p PORT] [-f FLOWS | -u DESTS] [-s BYTES]
 *            [-t SECONDS] [-w SECONDS] [-n COUNT] [-b BURST] [-P PRIOS]
 *            [-c CPU]
 *
 * Socket i sends to PORT + i.  -u DESTS sends instead from one unconnected
 * socket to DESTS addresses, ADDR + i for i in 0..DESTS-1, taken in turn
 * message by message: forwarded by a router, these are DESTS flows keyed
 * by hash, as many as a qdisc may have to track (no port range limits
 * them, as it limits sockets).  -n stops after COUNT datagrams (or
 * SECONDS, whichever comes first): -u N -n N visits every destination.
 * -w sends for that long first and leaves it out of the counts, with no
 * pause between the two (a pause long enough would let a qdisc forget
 * the flows the warm-up made it learn).  With -P N (N > 0) socket i is tagged with
 * SO_PRIORITY (i % N) + 1, so that a qdisc with bands spreads the flows
 * over its first N bands.  -c pins the thread to one CPU.  Prints one
 * JSON line: datagrams sent, send
 * errors (ENOBUFS and the like, not fatal) and the seconds it ran.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_BURST	256

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(void)
{
	fprintf(stderr, "usage: udpflood -d ADDR [-p PORT] [-f FLOWS | -u DESTS] "
		"[-s BYTES] [-t SECONDS] [-w SECONDS] [-n COUNT] [-b BURST]\n"
		"                [-P PRIOS] [-c CPU]\n");
	exit(2);
}

static void pin_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		perror("udpflood: sched_setaffinity");
		exit(1);
	}
}

/* One descriptor per flow: 1024 flows need more than the usual limit. */
static void raise_nofile(rlim_t n)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= n)
		return;
	rl.rlim_cur = n;
	if (rl.rlim_max < n)
		rl.rlim_max = n;
	if (setrlimit(RLIMIT_NOFILE, &rl)) {
		perror("udpflood: RLIMIT_NOFILE");
		exit(1);
	}
}

static struct sockaddr_in parse_addr(const char *addr, int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };

	if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
		fprintf(stderr, "udpflood: bad IPv4 address %s\n", addr);
		exit(2);
	}
	sin.sin_port = htons(port);
	return sin;
}

/* A socket tagged @prio (if not 0), connected to @sin unless it is NULL. */
static int open_flow(const struct sockaddr_in *sin, int prio)
{
	int fd;

	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("udpflood: socket");
		exit(1);
	}
	if (prio && setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio,
			       sizeof(prio))) {
		perror("udpflood: SO_PRIORITY");
		exit(1);
	}
	if (sin && connect(fd, (const struct sockaddr *)sin, sizeof(*sin))) {
		perror("udpflood: connect");
		exit(1);
	}
	return fd;
}

int main(int argc, char **argv)
{
	int port = 9000, flows = 1, size = 64, burst = 32, prios = 0, cpu = -1;
	unsigned long long sent = 0, errors = 0, count = 0, sent0 = 0, errors0 = 0;
	struct mmsghdr msgs[MAX_BURST];
	struct sockaddr_in dst[MAX_BURST], base;
	unsigned int dests = 0, next_dest = 0;
	struct iovec iov;
	double seconds = 3, warmup = 0, start, end, t = 0;
	const char *addr = NULL;
	char *payload;
	int *fds;
	int opt, i, n, want;
	unsigned int rounds = 0;

	while ((opt = getopt(argc, argv, "d:p:f:u:s:t:w:n:b:P:c:")) != -1) {
		switch (opt) {
		case 'd': addr = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'f': flows = atoi(optarg); break;
		case 'u': dests = strtoul(optarg, NULL, 0); break;
		case 's': size = atoi(optarg); break;
		case 't': seconds = atof(optarg); break;
		case 'n': count = strtoull(optarg, NULL, 0); break;
		case 'w': warmup = atof(optarg); break;
		case 'b': burst = atoi(optarg); break;
		case 'P': prios = atoi(optarg); break;
		case 'c': cpu = atoi(optarg); break;
		default: usage();
		}
	}
	if (!addr || flows < 1 || flows > 65535 - port || size < 1 ||
	    size > 65507 || burst < 1 || burst > MAX_BURST || seconds <= 0 ||
	    prios < 0 || warmup < 0)
		usage();

	if (cpu >= 0)
		pin_cpu(cpu);
	raise_nofile(flows + 64);

	fds = calloc(flows, sizeof(*fds));
	payload = calloc(1, size);
	if (!fds || !payload) {
		fprintf(stderr, "udpflood: out of memory\n");
		return 1;
	}
	base = parse_addr(addr, port);
	if (dests) {
		flows = 1;
		fds[0] = open_flow(NULL, prios ? 1 : 0);
	}
	for (i = 0; !dests && i < flows; i++) {
		struct sockaddr_in sin = parse_addr(addr, port + i);

		fds[i] = open_flow(&sin, prios ? i % prios + 1 : 0);
	}

	/* Every message of a burst is the same payload; with -u each has its
	 * own destination, set per burst.
	 */
	iov.iov_base = payload;
	iov.iov_len = size;
	memset(msgs, 0, sizeof(msgs));
	for (i = 0; i < burst; i++) {
		msgs[i].msg_hdr.msg_iov = &iov;
		msgs[i].msg_hdr.msg_iovlen = 1;
	}

	start = now();
	end = start + (warmup > 0 ? warmup : seconds);
	for (i = 0;; i = i + 1 == flows ? 0 : i + 1) {
		for (n = 0; dests && n < burst; n++) {
			dst[n] = base;
			dst[n].sin_addr.s_addr =
				htonl(ntohl(base.sin_addr.s_addr) + next_dest);
			next_dest = next_dest + 1 == dests ? 0 : next_dest + 1;
			msgs[n].msg_hdr.msg_name = &dst[n];
			msgs[n].msg_hdr.msg_namelen = sizeof(dst[n]);
		}
		want = burst;
		if (count && (unsigned long long)want > count - sent - errors)
			want = count - sent - errors;
		n = sendmmsg(fds[i], msgs, want, 0);
		if (n < 0) {
			if (errno != ENOBUFS && errno != EAGAIN &&
			    errno != ECONNREFUSED && errno != EINTR) {
				perror("udpflood: sendmmsg");
				return 1;
			}
			errors++;
		} else {
			sent += n;
		}
		/* Reading the clock every burst would cost as much as the
		 * qdisc being measured.
		 */
		if (count && sent + errors >= count) {
			t = now();
			break;
		}
		if (!(++rounds & 63) && (t = now()) >= end) {
			if (warmup <= 0)
				break;
			/* The warm-up is over: count from here. */
			warmup = 0;
			sent0 = sent;
			errors0 = errors;
			start = t;
			end = t + seconds;
		}
	}
	printf("{\"sent\": %llu, \"errors\": %llu, \"seconds\": %.6f, "
	       "\"flows\": %d, \"dests\": %u, \"size\": %d, \"burst\": %d, "
	       "\"warmup_sent\": %llu}\n",
	       sent - sent0, errors - errors0, t - start, flows, dests, size,
	       burst, sent0);
	for (i = 0; i < flows; i++)
		close(fds[i]);
	free(fds);
	free(payload);
	return 0;
}
