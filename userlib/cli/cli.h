/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the files of p3ctl share: the formatting helpers, the Prometheus
 * formatter, and the doctor and run commands' entry points.
 */
#ifndef P3CTL_CLI_H
#define P3CTL_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct p3_qdisc_stats;

/* "root", "MAJ:" or "MAJ:MIN" in hexadecimal, as tc writes handles. */
const char *fmt_handle(uint32_t h, char *buf, size_t len);

/* A rate in bytes per second as tc writes it: "50Mbit". */
const char *fmt_rate(double bytes_per_s, char *buf, size_t len);

/*
 * Print st, the p3 qdisc of dev, in the Prometheus text exposition format
 * 0.0.4: HELP and TYPE before each family, labels device and handle (and
 * band, cause).  0, or -EIO when writing to f failed.
 */
int prom_print(FILE *f, const char *dev, const struct p3_qdisc_stats *st);

struct doctor_opts {
	const char	*dev;		/* NULL: the default route's device */
	int		tag;		/* enum p3_tag_method the applications write */
	double		sample_s;	/* seconds between counter reads, 0: none */
	int		json;
};

/* Diagnose dev and print the findings: 0 when nothing is wrong, 1 when a
 * problem was found, 2 on a usage error. */
int cmd_doctor(const struct doctor_opts *o);

/* The untagged TCP connections through a device (senders.c). */
struct sender_sample;

/* A process and what its untagged connections sent between two samples. */
struct untagged_job {
	int		pid;
	unsigned int	uid;		/* (unsigned int)-1 if unknown */
	int		conns;
	uint64_t	bytes;
	char		cmdline[240];	/* quoted for a shell; "" if gone or too long */
};

/* The connections of this network namespace whose source address is on
 * dev and whose DSCP tags no band of bands, with their bytes acked. */
int senders_sample(const char *dev, unsigned int bands, struct sender_sample **out);
void senders_free(struct sender_sample *s);

/* Up to max processes holding after's connections that sent min_bytes or
 * more since before, the most first; their number, or -errno.  Each
 * connection is counted for one process (after is marked). */
int senders_jobs(const struct sender_sample *before, struct sender_sample *after,
		 uint64_t min_bytes, struct untagged_job *jobs, int max);

/* p3ctl run (argv[0] is "run"): exec the job with the tagging shim
 * preloaded, or return 2 (usage, a level that cannot be tagged), 126 or
 * 127 (as env(1): CMD could not be run). */
int cmd_run(int argc, char **argv);

#endif /* P3CTL_CLI_H */
