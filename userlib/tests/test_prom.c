// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * p3ctl stat --prometheus without a kernel: the formatter on hand-filled
 * statistics, line by line; every output through a checker of the text
 * exposition format 0.0.4 (and promtool, where installed); then p3ctl's
 * own usage errors, and that a failed stat prints no metrics at all.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "p3.h"
#include "../cli/cli.h"
#include "tap.h"

/* ------------------------------------------------------------ checker */

/*
 * The grammar of the text format, plus the rules this exporter keeps on
 * top of it: every family has one HELP and one TYPE, both before its
 * samples; a family's samples are contiguous; a counter's name ends in
 * _total; no series (name and labels) repeats.  0 when text passes, else
 * the line number of the first fault, with why.
 */
#define CHECK_MAX	512

struct family {
	char	name[128];
	int	help, type, samples, closed;
	char	kind[16];
};

static int name_ok(const char *s, size_t n, int colon)
{
	size_t i;

	if (!n || isdigit((unsigned char)s[0]))
		return 0;
	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && !(colon && s[i] == ':'))
			return 0;
	return 1;
}

static size_t name_len(const char *s, int colon)
{
	size_t n = 0;

	while (isalnum((unsigned char)s[n]) || s[n] == '_' || (colon && s[n] == ':'))
		n++;
	return n;
}

static struct family *family_of(struct family *fam, int *nfam, const char *name, size_t n)
{
	int i;

	for (i = 0; i < *nfam; i++)
		if (strlen(fam[i].name) == n && !strncmp(fam[i].name, name, n))
			return &fam[i];
	if (*nfam == CHECK_MAX || n >= sizeof(fam->name))
		return NULL;
	memset(&fam[*nfam], 0, sizeof(*fam));
	memcpy(fam[*nfam].name, name, n);
	return &fam[(*nfam)++];
}

/* A float as Go's ParseFloat takes it, or NaN, +Inf, -Inf. */
static int value_ok(const char *s, const char **end)
{
	size_t n = strcspn(s, " \t");
	char *e;

	if ((n == 3 && !strncmp(s, "NaN", 3)) ||
	    (n == 4 && (!strncmp(s, "+Inf", 4) || !strncmp(s, "-Inf", 4)))) {
		*end = s + n;
		return 1;
	}
	/* strtod also takes "inf", "nan" and hex floats. */
	if (!n || strspn(s, "0123456789+-.eE") != n)
		return 0;
	errno = 0;
	strtod(s, &e);
	if (e != s + n || errno == ERANGE)
		return 0;
	*end = e;
	return 1;
}

/* One sample line: name, labels, value, optional timestamp. */
static const char *check_sample(const char *s, char *series, size_t slen, size_t *namelen)
{
	const char *p = s, *v;
	size_t n = name_len(p, 1);

	if (!name_ok(p, n, 1))
		return "bad metric name";
	*namelen = n;
	p += n;
	if (*p == '{') {
		p++;
		while (*p != '}') {
			size_t ln = name_len(p, 0);

			if (!name_ok(p, ln, 0))
				return "bad label name";
			if (ln >= 2 && p[0] == '_' && p[1] == '_')
				return "label name reserved (__)";
			p += ln;
			if (*p++ != '=' || *p++ != '"')
				return "label without =\"";
			while (*p != '"') {
				if (!*p || *p == '\n')
					return "unterminated label value";
				if (*p == '\\') {
					if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
						return "bad escape in label value";
					p++;
				}
				p++;
			}
			p++;
			if (*p == ',')
				p++;
			else if (*p != '}')
				return "label not followed by , or }";
		}
		p++;
	}
	if ((size_t)(p - s) >= slen)
		return "series too long";
	memcpy(series, s, (size_t)(p - s));
	series[p - s] = '\0';
	if (*p != ' ' && *p != '\t')
		return "no blank before the value";
	while (*p == ' ' || *p == '\t')
		p++;
	if (!value_ok(p, &v))
		return "bad value";
	p = v;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p) {
		char *e;

		if (*p == '-')
			p++;
		strtoll(p, &e, 10);
		if (e == p || *e)
			return "bad timestamp";
	}
	return NULL;
}

static int prom_check(const char *text, char *why, size_t len)
{
	static struct family fam[CHECK_MAX];
	static char seen[4 * CHECK_MAX][256];
	struct family *f, *last = NULL;
	char line[1024], series[256];
	int nfam = 0, nseen = 0, ln = 0, i;
	const char *p = text, *e, *err;
	size_t n;

	if (*text && text[strlen(text) - 1] != '\n') {
		snprintf(why, len, "no newline at the end");
		return 1;
	}
	for (; *p; p = e + 1) {
		e = strchr(p, '\n');
		ln++;
		if ((size_t)(e - p) >= sizeof(line)) {
			snprintf(why, len, "line too long");
			return ln;
		}
		memcpy(line, p, (size_t)(e - p));
		line[e - p] = '\0';
		err = NULL;
		if (!line[0]) {
			continue;
		} else if (!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7)) {
			int help = line[2] == 'H';
			const char *a = line + 7, *rest;

			n = name_len(a, 1);
			rest = a + n;
			if (!name_ok(a, n, 1) || (*rest && *rest != ' ')) {
				err = "bad metric name in HELP/TYPE";
			} else if (!(f = family_of(fam, &nfam, a, n))) {
				err = "too many families";
			} else if (f->samples) {
				err = "HELP/TYPE after the family's samples";
			} else if (help ? f->help++ : f->type++) {
				err = "HELP/TYPE repeated";
			} else if (help) {
				for (rest++; *rest && !err; rest++)
					if (*rest == '\\' && rest[1] != '\\' && rest[1] != 'n')
						err = "bad escape in HELP";
					else if (*rest == '\\')
						rest++;
			} else if (strcmp(rest, " counter") && strcmp(rest, " gauge") &&
				   strcmp(rest, " histogram") && strcmp(rest, " summary") &&
				   strcmp(rest, " untyped")) {
				err = "unknown TYPE";
			} else {
				snprintf(f->kind, sizeof(f->kind), "%s", rest + 1);
			}
		} else if (line[0] == '#') {
			continue;	/* a comment */
		} else if (!(err = check_sample(line, series, sizeof(series), &n))) {
			f = family_of(fam, &nfam, line, n);
			if (!f || !f->type || !f->help)
				err = "sample before its family's HELP and TYPE";
			else if (f->closed || (f->samples && last != f))
				err = "family's samples not contiguous";
			else if (!strcmp(f->kind, "counter") &&
				 (n < 6 || strncmp(line + n - 6, "_total", 6)))
				err = "counter name without _total";
			for (i = 0; !err && i < nseen; i++)
				if (!strcmp(seen[i], series))
					err = "series repeated";
			if (!err && nseen < 4 * CHECK_MAX)
				snprintf(seen[nseen++], sizeof(seen[0]), "%s", series);
			if (!err) {
				if (last && last != f)
					last->closed = 1;
				last = f;
				f->samples++;
			}
		}
		if (err) {
			snprintf(why, len, "%s: %.200s", err, line);
			return ln;
		}
	}
	return 0;
}

/* ---------------------------------------------------------- formatter */

static char *format(const char *dev, const struct p3_qdisc_stats *st)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int err;

	if (!f)
		return NULL;
	err = prom_print(f, dev, st);
	if (fclose(f) || err) {
		free(buf);
		return NULL;
	}
	return buf;
}

static void fill(struct p3_qdisc_stats *st)
{
	*st = (struct p3_qdisc_stats){
		.size = sizeof(*st),
		.handle = P3_HANDLE(1, 0),
		.parent = P3_ROOT,
		.opts = { .size = sizeof(st->opts),
			  .mask = P3_QOPT_BANDS | P3_QOPT_TAG | P3_QOPT_RATE,
			  .bands = 2, .tag = P3_METHOD_DSCP, .rate = 6250000 },
		.total = { .packets = 300, .bytes = 450000, .drops = 7, .overlimits = 0,
			   .requeues = 1, .backlog = 3000, .qlen = 2 },
		.have_xstats = 1,
		.xstats = { .flows = 5, .flows_active = 2, .flows_created = 40, .flows_gc = 35,
			    .preemptions = 12, .boosts = 3, .untagged = 9, .drops_limit = 4,
			    .drops_memory = 2, .drops_alloc = 1, .throttled = 0 },
		.drops_deadline = 6, .drops_tolerant = 3,
		.nbands = 2,
		.band = { { .packets = 200, .bytes = 300000, .requeues = 1 },
			  { .packets = 100, .bytes = 150000, .drops = 7, .backlog = 3000,
			    .qlen = 2 } },
		.spilled = 8,
	};
}

#define L	"{device=\"eth0\",handle=\"1:\"}"
#define B(n)	"{device=\"eth0\",handle=\"1:\",band=\"" #n "\"}"

static const char *const expect[] = {
	"# HELP p3_qdisc_info Always 1: where the qdisc sits and where it reads the tag",
	"# TYPE p3_qdisc_info gauge",
	"p3_qdisc_info{device=\"eth0\",handle=\"1:\",parent=\"root\",tag=\"dscp\"} 1",
	"# HELP p3_bands Number of bands",
	"# TYPE p3_bands gauge",
	"p3_bands" L " 2",
	"# HELP p3_pacing_rate_bytes_per_second Pacing rate, 0 for unpaced",
	"# TYPE p3_pacing_rate_bytes_per_second gauge",
	"p3_pacing_rate_bytes_per_second" L " 6250000",
	"# HELP p3_sent_bytes_total Bytes sent by the qdisc",
	"# TYPE p3_sent_bytes_total counter",
	"p3_sent_bytes_total" L " 450000",
	"# HELP p3_sent_packets_total Packets sent by the qdisc",
	"# TYPE p3_sent_packets_total counter",
	"p3_sent_packets_total" L " 300",
	"# HELP p3_dropped_packets_total Packets dropped by the qdisc",
	"# TYPE p3_dropped_packets_total counter",
	"p3_dropped_packets_total" L " 7",
	"# HELP p3_overlimits_total Overlimit events by the qdisc",
	"# TYPE p3_overlimits_total counter",
	"p3_overlimits_total" L " 0",
	"# HELP p3_requeues_total Packets requeued by the qdisc",
	"# TYPE p3_requeues_total counter",
	"p3_requeues_total" L " 1",
	"# HELP p3_backlog_bytes Bytes queued now by the qdisc",
	"# TYPE p3_backlog_bytes gauge",
	"p3_backlog_bytes" L " 3000",
	"# HELP p3_backlog_packets Packets queued now by the qdisc",
	"# TYPE p3_backlog_packets gauge",
	"p3_backlog_packets" L " 2",
	"# HELP p3_band_sent_bytes_total Bytes sent, per band (0 most urgent)",
	"# TYPE p3_band_sent_bytes_total counter",
	"p3_band_sent_bytes_total" B(0) " 300000",
	"p3_band_sent_bytes_total" B(1) " 150000",
	"# HELP p3_band_sent_packets_total Packets sent, per band (0 most urgent)",
	"# TYPE p3_band_sent_packets_total counter",
	"p3_band_sent_packets_total" B(0) " 200",
	"p3_band_sent_packets_total" B(1) " 100",
	"# HELP p3_band_dropped_packets_total Packets dropped, per band (0 most urgent)",
	"# TYPE p3_band_dropped_packets_total counter",
	"p3_band_dropped_packets_total" B(0) " 0",
	"p3_band_dropped_packets_total" B(1) " 7",
	"# HELP p3_band_overlimits_total Overlimit events, per band (0 most urgent)",
	"# TYPE p3_band_overlimits_total counter",
	"p3_band_overlimits_total" B(0) " 0",
	"p3_band_overlimits_total" B(1) " 0",
	"# HELP p3_band_requeues_total Packets requeued, per band (0 most urgent)",
	"# TYPE p3_band_requeues_total counter",
	"p3_band_requeues_total" B(0) " 1",
	"p3_band_requeues_total" B(1) " 0",
	"# HELP p3_band_backlog_bytes Bytes queued now, per band (0 most urgent)",
	"# TYPE p3_band_backlog_bytes gauge",
	"p3_band_backlog_bytes" B(0) " 0",
	"p3_band_backlog_bytes" B(1) " 3000",
	"# HELP p3_band_backlog_packets Packets queued now, per band (0 most urgent)",
	"# TYPE p3_band_backlog_packets gauge",
	"p3_band_backlog_packets" B(0) " 0",
	"p3_band_backlog_packets" B(1) " 2",
	"# HELP p3_flows Flow entries allocated now",
	"# TYPE p3_flows gauge",
	"p3_flows" L " 5",
	"# HELP p3_active_flows Flows holding packets now",
	"# TYPE p3_active_flows gauge",
	"p3_active_flows" L " 2",
	"# HELP p3_flows_created_total Flow entries created",
	"# TYPE p3_flows_created_total counter",
	"p3_flows_created_total" L " 40",
	"# HELP p3_flows_gc_total Idle flow entries garbage-collected",
	"# TYPE p3_flows_gc_total counter",
	"p3_flows_gc_total" L " 35",
	"# HELP p3_spilled_packets_total Packets queued in their band's shared flow for want of "
	"a flow entry (the flows cap, or no memory)",
	"# TYPE p3_spilled_packets_total counter",
	"p3_spilled_packets_total" L " 8",
	"# HELP p3_preemptions_total Switches to a more urgent band while a less urgent one "
	"held backlog",
	"# TYPE p3_preemptions_total counter",
	"p3_preemptions_total" L " 12",
	"# HELP p3_boosts_total Flows raised to a more urgent band by a newer packet "
	"(priority inheritance)",
	"# TYPE p3_boosts_total counter",
	"p3_boosts_total" L " 3",
	"# HELP p3_untagged_packets_total Packets sent to the default band",
	"# TYPE p3_untagged_packets_total counter",
	"p3_untagged_packets_total" L " 9",
	"# HELP p3_throttled_total Dequeues deferred by the rate pacer",
	"# TYPE p3_throttled_total counter",
	"p3_throttled_total" L " 0",
	"# HELP p3_dropped_packets_by_cause_total Packets the qdisc pushed out, by cause: "
	"limit (the packet limit), memory (the byte limit), deadline (loss-tolerant, waited too long), tolerant (loss-tolerant, at a limit: also "
	"counted as limit or memory)",
	"# TYPE p3_dropped_packets_by_cause_total counter",
	"p3_dropped_packets_by_cause_total{device=\"eth0\",handle=\"1:\",cause=\"limit\"} 4",
	"p3_dropped_packets_by_cause_total{device=\"eth0\",handle=\"1:\",cause=\"memory\"} 2",
	"p3_dropped_packets_by_cause_total{device=\"eth0\",handle=\"1:\",cause=\"deadline\"} 6",
	"p3_dropped_packets_by_cause_total{device=\"eth0\",handle=\"1:\",cause=\"tolerant\"} 3",
};

static int nlines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Compare text with want[0..n) line by line; 0 or the first differing line. */
static int same_lines(const char *text, const char *const *want, int n)
{
	const char *p = text;
	int i;

	for (i = 0; i < n; i++) {
		size_t len = strlen(want[i]);

		if (strncmp(p, want[i], len) || p[len] != '\n') {
			tap_diag("line %d: got  %.*s", i + 1, (int)strcspn(p, "\n"), p);
			tap_diag("line %d: want %s", i + 1, want[i]);
			return i + 1;
		}
		p += len + 1;
	}
	if (*p) {
		tap_diag("extra line %d: %.*s", n + 1, (int)strcspn(p, "\n"), p);
		return n + 1;
	}
	return 0;
}

static int checked(const char *what, const char *text)
{
	char why[512];
	int ln = text ? prom_check(text, why, sizeof(why)) : -1;

	if (ln)
		tap_diag("%s: line %d: %s", what, ln, text ? why : "no output");
	return !ln;
}

static void test_exact(void)
{
	struct p3_qdisc_stats st;
	char *out;
	int n = (int)(sizeof(expect) / sizeof(*expect));

	fill(&st);
	out = format("eth0", &st);
	ok(out && !same_lines(out, expect, n), "the output, line by line (%d lines)", n);
	ok(checked("the full output", out), "the full output passes the format checker");
	free(out);
}

static void test_escape(void)
{
	struct p3_qdisc_stats st;
	char *out;

	fill(&st);
	out = format("we\"ird\\dev\nx", &st);
	ok(out && strstr(out, "\np3_sent_bytes_total{device=\"we\\\"ird\\\\dev\\nx\","
			      "handle=\"1:\"} 450000\n"),
	   "a quote, a backslash and a newline in the device name are escaped");
	ok(out && strstr(out, "\np3_qdisc_info{device=\"we\\\"ird\\\\dev\\nx\",handle=\"1:\""),
	   "... in the info metric too");
	ok(out && nlines(out) == (int)(sizeof(expect) / sizeof(*expect)),
	   "... and add no line");
	ok(checked("escaped device", out), "the escaped output passes the format checker");
	free(out);
}

static void test_shapes(void)
{
	struct p3_qdisc_stats st;
	char *out;
	unsigned int b;

	/* No xstats (an old kernel), no bands, no options reported. */
	fill(&st);
	st.have_xstats = 0;
	st.nbands = 0;
	st.opts.mask = 0;
	out = format("lo", &st);
	ok(out && !strstr(out, "p3_band_") && !strstr(out, "p3_flows") &&
		   !strstr(out, "p3_bands") && !strstr(out, "by_cause") &&
		   !strstr(out, "p3_spilled") &&
		   strstr(out, "\np3_sent_bytes_total{device=\"lo\",handle=\"1:\"} 450000\n") &&
		   strstr(out, "tag=\"\"} 1\n"),
	   "without xstats, bands and options: their families are left out, not zeroed");
	ok(checked("no xstats", out), "... and the rest passes the format checker");
	free(out);

	/* Every option, 64 bands, counters at their maximum, a minor handle. */
	fill(&st);
	st.handle = P3_HANDLE(0x8001, 0x2);
	st.parent = P3_HANDLE(1, 0x10);
	st.opts.mask = 0x1ff;
	st.opts.bands = 64;
	st.opts.defband = 63;
	st.opts.tag = P3_METHOD_MARK;
	st.opts.limit = UINT32_MAX;
	st.opts.memory = 1 << 20;
	st.opts.quantum = 1514;
	st.opts.rate = UINT64_MAX;
	st.opts.buckets = 4096;
	st.opts.flows = 16384;
	st.total.bytes = UINT64_MAX;
	st.total.drops = UINT32_MAX;
	st.xstats.throttled = UINT64_MAX;
	st.nbands = P3_MAX_BANDS;
	for (b = 0; b < P3_MAX_BANDS; b++)
		st.band[b] = (struct p3_band_stats){ .packets = b, .bytes = 1000ull * b };
	out = format("eth1", &st);
	ok(out && strstr(out, "\np3_sent_bytes_total{device=\"eth1\",handle=\"8001:2\"} "
			      "18446744073709551615\n") &&
		   strstr(out, "\np3_dropped_packets_total{device=\"eth1\",handle=\"8001:2\"} "
			       "4294967295\n") &&
		   strstr(out, "\np3_throttled_total{device=\"eth1\",handle=\"8001:2\"} "
			       "18446744073709551615\n"),
	   "64-bit and 32-bit counters at their maximum, in full");
	ok(out && strstr(out, "parent=\"1:10\",tag=\"mark\"} 1\n") &&
		   strstr(out, "\np3_default_band{device=\"eth1\",handle=\"8001:2\"} 63\n") &&
		   strstr(out, "\np3_limit_packets{device=\"eth1\",handle=\"8001:2\"} 4294967295\n") &&
		   strstr(out, "\np3_memory_limit_bytes{device=\"eth1\",handle=\"8001:2\"} 1048576\n") &&
		   strstr(out, "\np3_quantum_bytes{device=\"eth1\",handle=\"8001:2\"} 1514\n") &&
		   strstr(out, "\np3_flow_buckets{device=\"eth1\",handle=\"8001:2\"} 4096\n") &&
		   strstr(out, "\np3_flows_limit{device=\"eth1\",handle=\"8001:2\"} 16384\n"),
	   "every option the kernel reported has its gauge");
	ok(out && strstr(out, "\np3_band_sent_bytes_total{device=\"eth1\",handle=\"8001:2\","
			      "band=\"63\"} 63000\n"),
	   "band 63 of 64");
	ok(checked("64 bands", out), "64 bands pass the format checker");
	free(out);
}

static void test_write_error(void)
{
	struct p3_qdisc_stats st;
	FILE *f = fopen("/dev/full", "w");

	fill(&st);
	if (!f) {
		ok(1, "a write error is reported # SKIP no /dev/full");
		return;
	}
	setvbuf(f, NULL, _IONBF, 0);
	ok_err(prom_print(f, "eth0", &st), -EIO, "a write error is reported: -EIO");
	fclose(f);
}

/* The checker must be able to fail, or its passes mean nothing. */
static void test_checker(void)
{
	static const struct {
		const char	*text;
		const char	*what;
	} bad[] = {
		{ "# HELP 1x h\n# TYPE 1x gauge\n1x 1\n", "a name starting with a digit" },
		{ "# HELP a-b h\n# TYPE a-b gauge\na-b 1\n", "a dash in a name" },
		{ "x 1\n", "a sample without HELP and TYPE" },
		{ "# HELP x h\n# TYPE x gauge\nx{d=\"a\"b\"} 1\n", "an unescaped quote" },
		{ "# HELP x h\n# TYPE x gauge\nx{d=\"a\\tb\"} 1\n", "an unknown escape" },
		{ "# HELP x h\n# TYPE x gauge\nx{d=\"a\nb\"} 1\n", "a raw newline in a label" },
		{ "# HELP x h\n# TYPE x gauge\nx{1d=\"a\"} 1\n", "a bad label name" },
		{ "# HELP x h\n# TYPE x gauge\nx 1e\n", "a bad value" },
		{ "# HELP x h\n# TYPE x gauge\nx inf\n", "inf spelt as C does" },
		{ "# HELP x h\n# TYPE x gauge\nx 1\nx 2\n", "a repeated series" },
		{ "# HELP x h\n# TYPE x counter\nx 1\n", "a counter without _total" },
		{ "# HELP x h\n# TYPE x gauge\n# TYPE x gauge\nx 1\n", "a repeated TYPE" },
		{ "# HELP x h\n# TYPE x gauge\nx{a=\"1\"} 1\n# HELP y h\n# TYPE y gauge\n"
		  "y 1\nx{a=\"2\"} 1\n", "a family split in two" },
		{ "# HELP x h\n# TYPE x gauge\nx 1\n# HELP x again\n", "HELP after samples" },
		{ "# HELP x h\n# TYPE x gauges\nx 1\n", "an unknown type" },
	};
	char why[512];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		ok(prom_check(bad[i].text, why, sizeof(why)) > 0, "checker rejects %s",
		   bad[i].what);
	ok(prom_check("# HELP x h\n# TYPE x gauge\nx 1", why, sizeof(why)) > 0,
	   "checker rejects no newline at the end");
	ok(!prom_check("# HELP x a \\\\ and \\n\n# TYPE x gauge\n# a comment\n\n"
		       "x{a=\"\\\\\\\"\\n\",b=\"\",} -1.5e3 1700000000000\n"
		       "# HELP y h\n# TYPE y gauge\ny NaN\n", why, sizeof(why)),
	   "checker accepts escapes, a trailing comma, a comment, a timestamp, NaN");
}

/* --------------------------------------------------------------- p3ctl */

static char p3ctl[PATH_MAX];

/* Run a shell command; its exit status, its stdout in out. */
static int run(const char *args, char *out, size_t len)
{
	size_t n = 0;
	FILE *p;
	int st;

	p = popen(args, "r");
	if (!p)
		return -1;
	while (n + 1 < len && !feof(p)) {
		size_t r = fread(out + n, 1, len - 1 - n, p);

		if (!r)
			break;
		n += r;
	}
	out[n] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_cli(void)
{
	static const struct {
		const char	*args;
		const char	*says;
	} usage[] = {
		{ "stat lo --prometheus -w", "not with -w" },
		{ "stat lo -w -c 2 --prometheus", "not with -w" },
		{ "--json stat lo --prometheus", "not with --json" },
		{ "show lo --prometheus", "--prometheus is stat's" },
		{ "doctor lo --prometheus", "--prometheus is stat's" },
	};
	char cmd[PATH_MAX + 128], out[4096], *slash;
	ssize_t n = readlink("/proc/self/exe", p3ctl, sizeof(p3ctl) - 8);
	size_t i;
	int rc;

	if (n <= 0 || !(slash = memrchr(p3ctl, '/', (size_t)n))) {
		ok(1, "p3ctl --prometheus # SKIP cannot find this test's directory");
		return;
	}
	strcpy(slash + 1, "p3ctl");
	if (access(p3ctl, X_OK)) {
		ok(1, "p3ctl --prometheus # SKIP no p3ctl beside this test");
		return;
	}
	for (i = 0; i < sizeof(usage) / sizeof(*usage); i++) {
		snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", p3ctl, usage[i].args);
		rc = run(cmd, out, sizeof(out));
		if (!ok(rc == 2 && strstr(out, usage[i].says),
			"p3ctl %s: a usage error (exit 2) that says \"%s\"", usage[i].args,
			usage[i].says))
			tap_diag("exit %d: %s", rc, out);
	}
	if (run("unshare -n true 2>/dev/null", out, sizeof(out))) {
		ok(1, "a failed stat prints no metrics # SKIP cannot create a network namespace");
		return;
	}
	/* lo in a fresh namespace has no p3 qdisc. */
	snprintf(cmd, sizeof(cmd), "unshare -n '%s' stat lo --prometheus 2>/dev/null", p3ctl);
	rc = run(cmd, out, sizeof(out));
	if (!ok(rc == 1 && !out[0], "a failed stat exits 1 and prints no metrics at all"))
		tap_diag("exit %d, stdout: %s", rc, out);
}

/* promtool, where installed, checks against Prometheus' own parser. */
static void test_promtool(void)
{
	struct p3_qdisc_stats st;
	char path[] = "/tmp/p3-prom-XXXXXX", cmd[128], out[4096];
	char *text;
	int fd, rc;

	if (run("command -v promtool >/dev/null 2>&1", out, sizeof(out))) {
		ok(1, "promtool check metrics # SKIP promtool is not installed "
		      "(the checker above stands in)");
		return;
	}
	fill(&st);
	text = format("eth0", &st);
	fd = mkstemp(path);
	if (fd < 0 || !text || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		ok(0, "promtool check metrics: cannot write %s", path);
	} else {
		snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1", path);
		rc = run(cmd, out, sizeof(out));
		if (!ok(rc == 0, "promtool check metrics accepts the output"))
			tap_diag("promtool: %s", out);
	}
	if (fd >= 0)
		close(fd);
	unlink(path);
	free(text);
}

int main(void)
{
	test_checker();
	test_exact();
	test_escape();
	test_shapes();
	test_write_error();
	test_promtool();
	test_cli();
	return tap_done();
}
