// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * p3ctl: add, change, delete and watch sch_p3 qdiscs through libp3.
 *
 *   p3ctl [--json] add|change|replace DEV [parent ID] [handle ID] [OPTIONS]
 *   p3ctl [--json] del|show DEV [parent ID] [handle ID]
 *   p3ctl [--json] stat DEV [parent ID] [handle ID] [-w] [-c COUNT] [-i SECS]
 *   p3ctl stat DEV [parent ID] [handle ID] --prometheus
 *   p3ctl [--json] doctor [DEV] [--tag dscp|priority|mark] [--sample SECS]
 *   p3ctl run --level N [--tag dscp|priority|mark] [--] CMD [ARG...]   (run.c)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "p3.h"
#include "cli.h"

struct cli {
	const char		*cmd;
	const char		*dev;
	uint32_t		parent;
	uint32_t		handle;
	struct p3_qdisc_opts	opts;
	int			json;
	int			prometheus;
	int			watch;
	long			count;
	double			interval;
	struct doctor_opts	doctor;		/* sample_s < 0: no --sample */
};

static volatile sig_atomic_t stop;

static void usage(FILE *f)
{
	fputs("usage: p3ctl [--json] add|change|replace DEV [parent ID] [handle ID] [bands N]\n"
	      "              [default B] [tag dscp|priority|mark] [limit PKTS]\n"
	      "              [memory BYTES] [quantum BYTES] [rate RATE] [buckets N] [flows N]\n"
	      "       p3ctl [--json] del|show DEV [parent ID] [handle ID]\n"
	      "       p3ctl [--json] stat DEV [parent ID] [handle ID] [-w] [-c COUNT] [-i SECS]\n"
	      "       p3ctl stat DEV [parent ID] [handle ID] --prometheus\n"
	      "       p3ctl [--json] doctor [DEV] [--tag dscp|priority|mark] [--sample SECS]\n"
	      "       p3ctl run --level N [--tag dscp|priority|mark] [--] CMD [ARG...]\n"
	      "ID is root, MAJ: or MAJ:MIN (hex); RATE as tc: 50mbit, 1gbit, 10mbps;\n"
	      "BYTES: 64k, 16m (1024-based).  See p3ctl(1).\n", f);
}

static int fail(const char *what, int err)
{
	const char *ext = p3_last_extack();

	fprintf(stderr, "p3ctl: %s: %s\n", what, p3_strerror(err));
	if (ext && *ext)
		fprintf(stderr, "p3ctl: kernel says: %s\n", ext);
	if (err == -EPERM)
		fprintf(stderr, "p3ctl: changing qdiscs needs CAP_NET_ADMIN (run as root)\n");
	if (err == -ENOENT && !strcmp(what, "add"))
		fprintf(stderr, "p3ctl: is the sch_p3 module loaded? (modprobe sch_p3)\n");
	return 1;
}

/* ------------------------------------------------------------- parsing */

static int parse_handle(const char *s, uint32_t *h)
{
	unsigned long maj, min = 0;
	char *end;

	if (!strcmp(s, "root")) {
		*h = P3_ROOT;
		return 0;
	}
	maj = strtoul(s, &end, 16);
	if (end == s || *end != ':' || maj > 0xffff)
		return -1;
	if (end[1]) {
		s = end + 1;
		min = strtoul(s, &end, 16);
		if (end == s || *end || min > 0xffff)
			return -1;
	}
	*h = P3_HANDLE(maj, min);
	return 0;
}

struct unit {
	const char	*name;
	double		mult;
};

static int parse_scaled(const char *s, const struct unit *u, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !(v >= 0) || isinf(v))
		return -1;
	for (; u->name; u++) {
		if (!strcasecmp(end, u->name)) {
			*out = v * u->mult;
			return 0;
		}
	}
	return -1;
}

/* Like tc: a bare number is bits per second; "bps" means bytes. */
static int parse_rate(const char *s, uint64_t *bytes_per_s)
{
	static const struct unit units[] = {
		{ "", 0.125 }, { "bit", 0.125 }, { "kbit", 125 }, { "mbit", 125e3 },
		{ "gbit", 125e6 }, { "tbit", 125e9 }, { "kibit", 128 },
		{ "mibit", 131072 }, { "gibit", 134217728 }, { "bps", 1 }, { "kbps", 1e3 },
		{ "mbps", 1e6 }, { "gbps", 1e9 }, { NULL, 0 },
	};
	double v;

	if (parse_scaled(s, units, &v) || v > 1.8e19)
		return -1;
	*bytes_per_s = (uint64_t)llround(v);
	return 0;
}

static int parse_size(const char *s, uint32_t *bytes)
{
	static const struct unit units[] = {
		{ "", 1 }, { "b", 1 }, { "k", 1024 }, { "kb", 1024 }, { "m", 1048576 },
		{ "mb", 1048576 }, { "g", 1073741824 }, { "gb", 1073741824 },
		{ "kbit", 128 }, { "mbit", 131072 }, { NULL, 0 },
	};
	double v;

	if (parse_scaled(s, units, &v) || v > UINT32_MAX)
		return -1;
	*bytes = (uint32_t)v;
	return 0;
}

static int parse_u32(const char *s, uint32_t *v, uint32_t max)
{
	unsigned long long x;
	char *end;

	errno = 0;
	x = strtoull(s, &end, 0);
	if (errno || end == s || *end || x > max || *s == '-')
		return -1;
	*v = (uint32_t)x;
	return 0;
}

/* One "key value" pair of the qdisc options. */
static int parse_opt(struct cli *c, const char *key, const char *val)
{
	struct p3_qdisc_opts *o = &c->opts;
	uint32_t v;
	int m;

	if (!strcmp(key, "parent"))
		return parse_handle(val, &c->parent);
	if (!strcmp(key, "handle"))
		return parse_handle(val, &c->handle);
	if (!strcmp(key, "bands") && !parse_u32(val, &v, P3_MAX_BANDS)) {
		o->bands = (uint8_t)v;
		o->mask |= P3_QOPT_BANDS;
		return 0;
	}
	if (!strcmp(key, "default") && !parse_u32(val, &v, 255)) {
		o->defband = (uint8_t)v;
		o->mask |= P3_QOPT_DEFAULT;
		return 0;
	}
	if (!strcmp(key, "tag") && (m = p3_tag_method_parse(val)) > P3_METHOD_DEFAULT) {
		o->tag = (uint8_t)m;
		o->mask |= P3_QOPT_TAG;
		return 0;
	}
	if (!strcmp(key, "limit") && !parse_u32(val, &o->limit, UINT32_MAX)) {
		o->mask |= P3_QOPT_LIMIT;
		return 0;
	}
	if (!strcmp(key, "memory") && !parse_size(val, &o->memory)) {
		o->mask |= P3_QOPT_MEMORY;
		return 0;
	}
	if (!strcmp(key, "quantum") && !parse_size(val, &o->quantum)) {
		o->mask |= P3_QOPT_QUANTUM;
		return 0;
	}
	if (!strcmp(key, "buckets") && !parse_u32(val, &o->buckets, UINT32_MAX)) {
		o->mask |= P3_QOPT_BUCKETS;
		return 0;
	}
	if (!strcmp(key, "flows") && !parse_u32(val, &o->flows, UINT32_MAX)) {
		o->mask |= P3_QOPT_FLOWS;
		return 0;
	}
	if (!strcmp(key, "rate") && !parse_rate(val, &o->rate)) {
		o->mask |= P3_QOPT_RATE;
		return 0;
	}
	return -1;
}

static int parse_flags(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' },   { "watch", no_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'c' },
		{ "interval", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },   { "version", no_argument, NULL, 'V' },
		{ "tag", required_argument, NULL, 't' },
		{ "sample", required_argument, NULL, 's' },
		{ "prometheus", no_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int o;

	while ((o = getopt_long(argc, argv, "jwc:i:hV", lo, NULL)) != -1) {
		switch (o) {
		case 'j':
			c->json = 1;
			break;
		case 'w':
			c->watch = 1;
			break;
		case 'P':
			c->prometheus = 1;
			break;
		case 'c':
			c->count = strtol(optarg, &end, 10);
			if (*end || c->count < 1)
				return -1;
			break;
		case 'i':
			c->interval = strtod(optarg, &end);
			if (*end || !(c->interval >= 0.05) || c->interval > 3600)
				return -1;
			break;
		case 't':
			c->doctor.tag = p3_tag_method_parse(optarg);
			if (c->doctor.tag <= P3_METHOD_DEFAULT) {
				fprintf(stderr, "p3ctl: --tag takes dscp, priority or mark\n");
				return -1;
			}
			break;
		case 's':
			c->doctor.sample_s = strtod(optarg, &end);
			if (*end || !(c->doctor.sample_s >= 0) || c->doctor.sample_s > 3600) {
				fprintf(stderr, "p3ctl: --sample takes 0 to 3600 seconds\n");
				return -1;
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("p3ctl (libp3) %d.%d\n", P3_VERSION_MAJOR, P3_VERSION_MINOR);
			exit(0);
		default:
			return -1;
		}
	}
	return 0;
}

static int parse_args(struct cli *c, int argc, char **argv)
{
	int i;

	/* The options' size: libp3 reads flows only from a struct that says
	 * it holds it. */
	*c = (struct cli){ .parent = P3_ROOT, .opts.size = sizeof(c->opts), .interval = 1.0,
			   .doctor.sample_s = -1 };
	/* Flags may come anywhere: getopt moves the words to the end. */
	if (parse_flags(c, argc, argv) || argc - optind < 1)
		return -1;
	c->cmd = argv[optind];
	c->dev = argv[optind + 1];	/* argv[argc] is NULL */
	/* doctor takes at most DEV, and no qdisc options. */
	if (!strcmp(c->cmd, "doctor"))
		return argc - optind > 2 ? -1 : 0;
	if (!c->dev)
		return -1;
	for (i = optind + 2; i < argc; i += 2) {
		if (i + 1 >= argc || parse_opt(c, argv[i], argv[i + 1])) {
			fprintf(stderr, "p3ctl: bad option \"%s%s%s\"\n", argv[i],
				i + 1 < argc ? " " : "", i + 1 < argc ? argv[i + 1] : "");
			return -1;
		}
	}
	return 0;
}

/* -------------------------------------------------------------- output */

static void print_opts_text(const struct p3_qdisc_stats *st)
{
	const struct p3_qdisc_opts *o = &st->opts;
	char h[16], p[16], r[32];

	printf("qdisc p3 %s parent %s", fmt_handle(st->handle, h, sizeof(h)),
	       fmt_handle(st->parent, p, sizeof(p)));
	if (o->mask & P3_QOPT_BANDS)
		printf(" bands %u", o->bands);
	if (o->mask & P3_QOPT_DEFAULT)
		printf(" default %u", o->defband);
	if (o->mask & P3_QOPT_TAG)
		printf(" tag %s", p3_tag_method_name(o->tag));
	if (o->mask & P3_QOPT_LIMIT)
		printf(" limit %" PRIu32 "p", o->limit);
	if (o->mask & P3_QOPT_MEMORY)
		printf(" memory %" PRIu32 "b", o->memory);
	if (o->mask & P3_QOPT_QUANTUM)
		printf(" quantum %" PRIu32 "b", o->quantum);
	if (o->mask & P3_QOPT_RATE)
		printf(" rate %s", o->rate ? fmt_rate((double)o->rate, r, sizeof(r)) : "unlimited");
	if (o->mask & P3_QOPT_BUCKETS)
		printf(" buckets %" PRIu32, o->buckets);
	if (o->mask & P3_QOPT_FLOWS)
		printf(" flows %" PRIu32, o->flows);
	putchar('\n');
}

static void print_opts_json(const struct p3_qdisc_stats *st)
{
	const struct p3_qdisc_opts *o = &st->opts;
	char h[16], p[16];

	printf("\"kind\":\"p3\",\"handle\":\"%s\",\"parent\":\"%s\",\"options\":{",
	       fmt_handle(st->handle, h, sizeof(h)), fmt_handle(st->parent, p, sizeof(p)));
	printf("\"bands\":%u,\"default\":%u,\"tag\":\"%s\",", o->bands, o->defband,
	       (o->mask & P3_QOPT_TAG) ? p3_tag_method_name(o->tag) : "");
	printf("\"limit\":%" PRIu32 ",\"memory\":%" PRIu32 ",\"quantum\":%" PRIu32
	       ",\"rate\":%" PRIu64 ",\"buckets\":%" PRIu32 ",\"flows\":%" PRIu32 "}", o->limit,
	       o->memory, o->quantum, o->rate, o->buckets, o->flows);
}

static void print_band_json(const struct p3_band_stats *b, uint32_t deadline_us,
			    const double *rate)
{
	printf("{\"packets\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"drops\":%" PRIu32
	       ",\"overlimits\":%" PRIu32 ",\"requeues\":%" PRIu32 ",\"backlog\":%" PRIu32
	       ",\"qlen\":%" PRIu32, b->packets, b->bytes, b->drops, b->overlimits, b->requeues,
	       b->backlog, b->qlen);
	if (deadline_us)
		printf(",\"deadline_us\":%" PRIu32, deadline_us);
	if (rate)
		printf(",\"pps\":%.1f,\"bps\":%.1f", rate[0], rate[1] * 8);
	putchar('}');
}

static void print_xstats_json(const struct p3_qdisc_stats *st)
{
	const struct p3_xstats *x = &st->xstats;

	printf("\"xstats\":{\"flows\":%" PRIu32 ",\"flows_active\":%" PRIu32
	       ",\"flows_created\":%" PRIu64 ",\"flows_gc\":%" PRIu64 ",\"preemptions\":%" PRIu64
	       ",\"boosts\":%" PRIu64 ",\"untagged\":%" PRIu64 ",\"drops_limit\":%" PRIu64
	       ",\"drops_memory\":%" PRIu64 ",\"throttled\":%" PRIu64
	       ",\"drops_deadline\":%" PRIu64 ",\"drops_tolerant\":%" PRIu64
	       ",\"spilled\":%" PRIu64 "}", x->flows, x->flows_active, x->flows_created,
	       x->flows_gc, x->preemptions, x->boosts, x->untagged, x->drops_limit,
	       x->drops_memory, x->throttled, st->drops_deadline,
	       st->drops_tolerant, st->spilled);
}

/* rates[b] = {packets/s, bytes/s} against the previous sample, or NULL. */
static void print_stats_json(const struct p3_qdisc_stats *st, double (*rates)[2])
{
	unsigned int b;

	putchar('{');
	print_opts_json(st);
	printf(",\"total\":");
	print_band_json(&st->total, 0, NULL);
	putchar(',');
	print_xstats_json(st);
	printf(",\"bands\":[");
	for (b = 0; b < st->nbands; b++) {
		if (b)
			putchar(',');
		print_band_json(&st->band[b], st->deadline_us[b], rates ? rates[b] : NULL);
	}
	printf("]}\n");
}

static void print_stats_text(const struct p3_qdisc_stats *st, double (*rates)[2])
{
	const struct p3_xstats *x = &st->xstats;
	const struct p3_band_stats *t = &st->total;
	char r[32];
	unsigned int b;

	print_opts_text(st);
	printf(" Sent %" PRIu64 " bytes %" PRIu64 " pkt (dropped %" PRIu32 ", overlimits %" PRIu32
	       " requeues %" PRIu32 ") backlog %" PRIu32 "b %" PRIu32 "p\n", t->bytes, t->packets,
	       t->drops, t->overlimits, t->requeues, t->backlog, t->qlen);
	if (st->have_xstats)
		printf(" flows %" PRIu32 " (active %" PRIu32 ") created %" PRIu64 " gc %" PRIu64
		       " spilled %" PRIu64 " preemptions %" PRIu64 " boosts %" PRIu64
		       " untagged %" PRIu64 "\n drops: limit %" PRIu64 " memory %" PRIu64
		       " deadline %" PRIu64 " (tolerant %" PRIu64
		       ")  throttled %" PRIu64 "\n", x->flows, x->flows_active, x->flows_created,
		       x->flows_gc, st->spilled, x->preemptions, x->boosts, x->untagged,
		       x->drops_limit, x->drops_memory, st->drops_deadline,
		       st->drops_tolerant, x->throttled);
	printf(" %4s %12s %14s %8s %10s %6s%s\n", "band", "packets", "bytes", "drops", "backlog",
	       "qlen", rates ? "      pkt/s        rate" : "");
	for (b = 0; b < st->nbands; b++) {
		const struct p3_band_stats *s = &st->band[b];

		printf(" %4u %12" PRIu64 " %14" PRIu64 " %8" PRIu32 " %9" PRIu32 "b %6" PRIu32, b,
		       s->packets, s->bytes, s->drops, s->backlog, s->qlen);
		if (rates)
			printf(" %10.0f %11s", rates[b][0], fmt_rate(rates[b][1], r, sizeof(r)));
		if (st->deadline_us[b])
			printf("  deadline %" PRIu32 "us", st->deadline_us[b]);
		putchar('\n');
	}
}

/* ------------------------------------------------------------ commands */

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void sleep_s(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s, .tv_nsec = (long)((s - (time_t)s) * 1e9) };

	while (!stop && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void band_rates(const struct p3_qdisc_stats *now, const struct p3_qdisc_stats *prev,
		       double dt, double (*rates)[2])
{
	unsigned int b;

	for (b = 0; b < now->nbands; b++) {
		rates[b][0] = (double)(now->band[b].packets - prev->band[b].packets) / dt;
		rates[b][1] = (double)(now->band[b].bytes - prev->band[b].bytes) / dt;
	}
}

static int cmd_watch(const struct cli *c)
{
	static struct p3_qdisc_stats st[2];
	double rates[P3_MAX_BANDS][2];
	int tty = isatty(STDOUT_FILENO), err, cur = 0;
	uint64_t t_prev = 0, t_now;
	long n;

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* One extra sample: the first only sets the baseline for rates. */
	for (n = 0; !stop && (!c->count || n <= c->count); n++) {
		err = p3_qdisc_stats(c->dev, c->parent, c->handle, &st[cur]);
		if (err)
			return fail("stat", err);
		t_now = p3_now_ns();
		if (n) {
			band_rates(&st[cur], &st[!cur], (double)(t_now - t_prev) / 1e9, rates);
			if (tty && !c->json)
				fputs("\033[H\033[2J", stdout);
			if (c->json)
				print_stats_json(&st[cur], rates);
			else
				print_stats_text(&st[cur], rates);
			fflush(stdout);
		}
		t_prev = t_now;
		cur = !cur;
		if (!c->count || n < c->count)
			sleep_s(c->interval);
	}
	return 0;
}

static int cmd_show(const struct cli *c, int stats)
{
	struct p3_qdisc_stats st = { 0 };	/* size 0: this layout */
	int err;

	err = stats ? p3_qdisc_stats(c->dev, c->parent, c->handle, &st)
		    : p3_qdisc_get(c->dev, c->parent, c->handle, &st);
	if (err)
		return fail(stats ? "stat" : "show", err);
	if (c->prometheus) {
		/* All or nothing: a textfile collector must not read half. */
		err = prom_print(stdout, c->dev, &st);
		if (!err && fflush(stdout))
			err = -errno;
		if (err)
			return fail("stat: writing the metrics", err);
	} else if (!stats && c->json) {
		putchar('{');
		print_opts_json(&st);
		printf("}\n");
	} else if (!stats) {
		print_opts_text(&st);
	} else if (c->json) {
		print_stats_json(&st, NULL);
	} else {
		print_stats_text(&st, NULL);
	}
	return 0;
}

static int cmd_modify(const struct cli *c)
{
	int err;

	if (!strcmp(c->cmd, "add"))
		err = p3_qdisc_add(c->dev, c->parent, c->handle, &c->opts);
	else if (!strcmp(c->cmd, "change"))
		err = p3_qdisc_change(c->dev, c->parent, c->handle, &c->opts);
	else
		err = p3_qdisc_replace(c->dev, c->parent, c->handle, &c->opts);
	return err ? fail(c->cmd, err) : 0;
}

/* The defaults: libp3's own tag method, a two-second sample. */
static int cmd_doctor_args(struct cli *c)
{
	c->doctor.dev = c->dev;
	c->doctor.json = c->json;
	/* libp3 tells its resolved default method by name only. */
	if (!c->doctor.tag)
		c->doctor.tag = p3_tag_method_parse(p3_tag_method_name(P3_METHOD_DEFAULT));
	if (c->doctor.sample_s < 0)
		c->doctor.sample_s = 2;
	return cmd_doctor(&c->doctor);
}

int main(int argc, char **argv)
{
	struct cli c;
	int err;

	/* Before the flags are parsed: CMD's own flags are not p3ctl's. */
	if (argc > 1 && !strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (parse_args(&c, argc, argv)) {
		usage(stderr);
		return 2;
	}
	if (c.prometheus && strcmp(c.cmd, "stat") && strcmp(c.cmd, "stats")) {
		fprintf(stderr, "p3ctl: --prometheus is stat's\n");
		return 2;
	}
	if (!strcmp(c.cmd, "doctor"))
		return cmd_doctor_args(&c);
	if (c.doctor.tag || c.doctor.sample_s >= 0) {
		fprintf(stderr, "p3ctl: --tag and --sample are doctor's\n");
		return 2;
	}
	if (!strcmp(c.cmd, "add") || !strcmp(c.cmd, "change") || !strcmp(c.cmd, "replace"))
		return cmd_modify(&c);
	if (c.opts.mask) {
		fprintf(stderr, "p3ctl: %s takes no qdisc options\n", c.cmd);
		return 2;
	}
	if (!strcmp(c.cmd, "del") || !strcmp(c.cmd, "delete")) {
		err = p3_qdisc_del(c.dev, c.parent, c.handle);
		return err ? fail("del", err) : 0;
	}
	if (!strcmp(c.cmd, "show"))
		return cmd_show(&c, 0);
	if (!strcmp(c.cmd, "stat") || !strcmp(c.cmd, "stats")) {
		if (c.prometheus && (c.watch || c.json)) {
			fprintf(stderr, "p3ctl: --prometheus prints one sample: not with %s\n",
				c.watch ? "-w" : "--json");
			return 2;
		}
		return c.watch ? cmd_watch(&c) : cmd_show(&c, 1);
	}
	fprintf(stderr, "p3ctl: unknown command \"%s\"\n", c.cmd);
	usage(stderr);
	return 2;
}
