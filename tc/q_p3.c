// SPDX-License-Identifier: GPL-2.0
/*
 * q_p3.c	tc plugin for the p3 qdisc (Priority-based Parameter
 *		Propagation): strict priority across bands, per-flow FIFO.
 *
 * tc dlopen()s this from TC_LIB_DIR for "tc qdisc ... p3" and looks up
 * p3_qdisc_util.  The checks here only catch mistakes early, with a
 * message naming the option; the kernel is the authority and explains
 * anything else through extack.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <linux/pkt_sched_p3.h>

#include "tc_plugin.h"

#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))
#define __printf(a, b)		__attribute__((format(printf, a, b)))

/*
 * parse_qopt() runs before tc appends anything sizeable to the request,
 * so the bound iproute2's own qdiscs pass is ample for our 80 bytes.
 */
#define P3_NLMSG_MAX	1024

struct p3_opt {
	__u32	set;		/* 1 << TCA_P3_* for each option given */
	__u8	bands;
	__u8	defband;
	__u8	tag;
	__u32	limit;
	__u32	memory;
	__u32	quantum;
	__u32	buckets;
	__u32	flows;
	__u64	rate;
	__u8	dscpmap[TC_P3_DSCP_CODES];
};

static const char * const p3_tag_names[] = {
	[TC_P3_TAG_PRIORITY]	= "priority",
	[TC_P3_TAG_DSCP]	= "dscp",
	[TC_P3_TAG_MARK]	= "mark",
};

static_assert(ARRAY_SIZE(p3_tag_names) == __TC_P3_TAG_MAX,
	      "every tag source in pkt_sched_p3.h needs a name");

/* The kernel's ranges, for early messages naming the option; the kernel
 * stays the authority.
 */
#define P3_MIN_BANDS	2
#define P3_MAX_BANDS	64
#define P3_MIN_BUCKETS	16
#define P3_MAX_BUCKETS	1048576
#define P3_MAX_FLOWS	1048576
#define P3_MAX_DEADLINE_US	10000000

static void p3_explain(void)
{
	fprintf(stderr,
		"Usage: ... p3 [ bands N ] [ default BAND ] [ tag { priority | dscp | mark } ]\n"
		"              [ limit PACKETS ] [ memory BYTES ] [ quantum BYTES ] [ rate RATE ]\n"
		"              [ buckets N ] [ flows N ] [ dscpmap { CODE:BAND[,...] | builtin } ]\n"
		"Defaults: bands 8 (2..64), default bands-1, tag dscp, limit 10000,\n"
		"          memory 32mb (64kb..1gb; 0: 1gb), quantum 2 x MTU, rate 0 (unpaced),\n"
		"          buckets 4096 (a power of two, 16..1048576),\n"
		"          flows 16384 (1..1048576 flow entries; beyond them a\n"
		"          packet waits in its band's shared queue).\n"
		"A priority or mark t in 1..N selects band t-1; 0 or above N the default band.\n"
		"A DSCP code point selects the band dscpmap gives it (CODE: 0..63, le, ef, va,\n"
		"          csN, afXY); the rest keep the built-in map: libp3's level L band L,\n"
		"          le and cs1 the last band, any other the default band.\n"
		"Classes (bands): ... class change ... classid H:K p3 deadline TIME\n"
		"          drops a packet of band K-1 that waited longer than TIME\n"
		"          (loss-tolerant band, at most 10s); deadline 0 makes it reliable.\n"
		"See tc-p3(8).\n");
}

static int __printf(1, 2) p3_fail(const char *fmt, ...)
{
	va_list ap;

	fputs("p3: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	p3_explain();
	return -1;
}

/* Each parser returns NULL, or why @arg is not a valid value. */
static const char *p3_parse_bands(struct p3_opt *o, const char *arg,
				  const char *dev)
{
	__u32 v;

	if (get_u32(&v, arg, 0) || v < P3_MIN_BANDS || v > P3_MAX_BANDS)
		return "expected 2..64";
	o->bands = v;
	return NULL;
}

/* "default < bands" needs both, and is checked once all are parsed. */
static const char *p3_parse_default(struct p3_opt *o, const char *arg,
				    const char *dev)
{
	__u32 v;

	if (get_u32(&v, arg, 0) || v >= P3_MAX_BANDS)
		return "expected a band, 0..bands-1";
	o->defband = v;
	return NULL;
}

static const char *p3_parse_tag(struct p3_opt *o, const char *arg,
				const char *dev)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(p3_tag_names); i++) {
		if (!strcmp(arg, p3_tag_names[i])) {
			o->tag = i;
			return NULL;
		}
	}
	return "expected priority, dscp or mark";
}

static const char *p3_parse_limit(struct p3_opt *o, const char *arg,
				  const char *dev)
{
	if (get_u32(&o->limit, arg, 0) || !o->limit || o->limit > 1048576)
		return "expected a packet count, 1..1048576";
	return NULL;
}

/*
 * get_size() and get_rate64() let strtod() accept a sign, and converting
 * a negative double to an unsigned integer is undefined: refuse it first.
 */
static bool p3_get_size(__u32 *size, const char *arg)
{
	return !strchr(arg, '-') && !get_size(size, arg);
}

static const char *p3_parse_memory(struct p3_opt *o, const char *arg,
				   const char *dev)
{
	if (!p3_get_size(&o->memory, arg))
		return "expected a byte count, 64kb..1gb, such as 4mb (0 = 1gb)";
	return NULL;
}

static const char *p3_parse_quantum(struct p3_opt *o, const char *arg,
				    const char *dev)
{
	if (!p3_get_size(&o->quantum, arg))
		return "expected a byte count, such as 3028";
	return NULL;
}

static const char *p3_parse_buckets(struct p3_opt *o, const char *arg,
				    const char *dev)
{
	__u32 v;

	if (get_u32(&v, arg, 0) || v < P3_MIN_BUCKETS || v > P3_MAX_BUCKETS ||
	    (v & (v - 1)))
		return "expected a power of two, 16..1048576";
	o->buckets = v;
	return NULL;
}

static const char *p3_parse_flows(struct p3_opt *o, const char *arg,
				  const char *dev)
{
	__u32 v;

	if (get_u32(&v, arg, 0) || !v || v > P3_MAX_FLOWS)
		return "expected a flow count, 1..1048576";
	o->flows = v;
	return NULL;
}

static const char *p3_parse_rate(struct p3_opt *o, const char *arg,
				 const char *dev)
{
	if (strchr(arg, '%')) {
		if (get_percent_rate64(&o->rate, arg, dev))
			return "expected a percentage of the link speed";
		return NULL;
	}
	if (strchr(arg, '-') || get_rate64(&o->rate, arg))
		return "expected a rate such as 10mbit (0 = unpaced)";
	return NULL;
}

/* A code point by number or by its RFC 4594 / RFC 8622 name; -1 if none. */
static int p3_get_dscp(const char *arg)
{
	unsigned int x, y;
	char end;
	__u32 v;

	if (!strcasecmp(arg, "le"))
		return 1;
	if (!strcasecmp(arg, "va"))
		return 44;
	if (!strcasecmp(arg, "ef"))
		return 46;
	if (!strncasecmp(arg, "cs", 2) &&
	    sscanf(arg + 2, "%1u%c", &x, &end) == 1 && x <= 7)
		return x << 3;
	if (!strncasecmp(arg, "af", 2) &&
	    sscanf(arg + 2, "%1u%1u%c", &x, &y, &end) == 2 &&
	    x >= 1 && x <= 4 && y >= 1 && y <= 3)
		return x << 3 | y << 1;
	if (get_u32(&v, arg, 0) || v >= TC_P3_DSCP_CODES)
		return -1;
	return v;
}

/* Replaces the whole map: code points not named keep the built-in rule. */
static const char *p3_parse_dscpmap(struct p3_opt *o, const char *arg,
				    const char *dev)
{
	char buf[1024], *pair, *save, *colon;
	int dscp;
	__u32 band;

	memset(o->dscpmap, TC_P3_DSCP_BUILTIN, sizeof(o->dscpmap));
	if (!strcmp(arg, "builtin"))
		return NULL;
	if (strlen(arg) >= sizeof(buf))
		return "too long";
	strcpy(buf, arg);
	for (pair = strtok_r(buf, ",", &save); pair;
	     pair = strtok_r(NULL, ",", &save)) {
		colon = strchr(pair, ':');
		if (!colon)
			return "expected CODE:BAND pairs, such as ef:0,cs6:0";
		*colon = '\0';
		dscp = p3_get_dscp(pair);
		if (dscp < 0)
			return "expected a code point 0..63 or a name (le, ef, va, csN, afXY)";
		if (get_u32(&band, colon + 1, 0) || band >= P3_MAX_BANDS)
			return "expected a band, 0..bands-1";
		o->dscpmap[dscp] = band;
	}
	return NULL;
}

static const struct p3_arg {
	const char	*name;
	int		type;		/* TCA_P3_* */
	const char	*(*parse)(struct p3_opt *o, const char *arg,
				  const char *dev);
} p3_args[] = {
	{ "bands",	TCA_P3_BANDS,	p3_parse_bands },
	{ "default",	TCA_P3_DEFAULT,	p3_parse_default },
	{ "tag",	TCA_P3_TAG,	p3_parse_tag },
	{ "limit",	TCA_P3_LIMIT,	p3_parse_limit },
	{ "memory",	TCA_P3_MEMORY,	p3_parse_memory },
	{ "quantum",	TCA_P3_QUANTUM,	p3_parse_quantum },
	{ "rate",	TCA_P3_RATE,	p3_parse_rate },
	{ "buckets",	TCA_P3_BUCKETS,	p3_parse_buckets },
	{ "flows",	TCA_P3_FLOWS,	p3_parse_flows },
	{ "dscpmap",	TCA_P3_DSCPMAP,	p3_parse_dscpmap },
};

static const struct p3_arg *p3_find_arg(const char *name)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(p3_args); i++)
		if (!strcmp(name, p3_args[i].name))
			return &p3_args[i];
	return NULL;
}

static bool p3_has(const struct p3_opt *o, int type)
{
	return o->set & (1U << type);
}

/*
 * Only the options given are sent, so that "change" leaves the others
 * as they are.  The kernel parses TCA_OPTIONS strictly, which requires
 * NLA_F_NESTED; iproute2 6.1's addattr_nest() does not set it for us.
 */
static int p3_put_opt(struct nlmsghdr *n, const struct p3_opt *o)
{
	struct rtattr *nest;
	int err = 0;

	nest = addattr_nest(n, P3_NLMSG_MAX, TCA_OPTIONS | NLA_F_NESTED);
	if (p3_has(o, TCA_P3_BANDS))
		err |= addattr8(n, P3_NLMSG_MAX, TCA_P3_BANDS, o->bands);
	if (p3_has(o, TCA_P3_DEFAULT))
		err |= addattr8(n, P3_NLMSG_MAX, TCA_P3_DEFAULT, o->defband);
	if (p3_has(o, TCA_P3_TAG))
		err |= addattr8(n, P3_NLMSG_MAX, TCA_P3_TAG, o->tag);
	if (p3_has(o, TCA_P3_LIMIT))
		err |= addattr32(n, P3_NLMSG_MAX, TCA_P3_LIMIT, o->limit);
	if (p3_has(o, TCA_P3_MEMORY))
		err |= addattr32(n, P3_NLMSG_MAX, TCA_P3_MEMORY, o->memory);
	if (p3_has(o, TCA_P3_QUANTUM))
		err |= addattr32(n, P3_NLMSG_MAX, TCA_P3_QUANTUM, o->quantum);
	if (p3_has(o, TCA_P3_RATE))
		err |= addattr64(n, P3_NLMSG_MAX, TCA_P3_RATE, o->rate);
	if (p3_has(o, TCA_P3_BUCKETS))
		err |= addattr32(n, P3_NLMSG_MAX, TCA_P3_BUCKETS, o->buckets);
	if (p3_has(o, TCA_P3_FLOWS))
		err |= addattr32(n, P3_NLMSG_MAX, TCA_P3_FLOWS, o->flows);
	if (p3_has(o, TCA_P3_DSCPMAP))
		err |= addattr_l(n, P3_NLMSG_MAX, TCA_P3_DSCPMAP, o->dscpmap,
				 sizeof(o->dscpmap));
	addattr_nest_end(n, nest);
	return err ? -1 : 0;
}

static int p3_parse_opt(struct qdisc_util *qu, int argc, char **argv,
			struct nlmsghdr *n, const char *dev)
{
	struct p3_opt o = {};
	const struct p3_arg *a;
	const char *why;

	for (; argc > 0; argc--, argv++) {
		if (!strcmp(*argv, "help")) {
			p3_explain();
			return -1;
		}
		a = p3_find_arg(*argv);
		if (!a)
			return p3_fail("unknown option \"%s\"", *argv);
		if (argc < 2)
			return p3_fail("\"%s\" needs a value", a->name);
		argc--, argv++;
		why = a->parse(&o, *argv, dev);
		if (why)
			return p3_fail("invalid %s \"%s\": %s",
				       a->name, *argv, why);
		o.set |= 1U << a->type;
	}

	/* Without "bands" the band count is the kernel's to check against. */
	if (p3_has(&o, TCA_P3_BANDS) && p3_has(&o, TCA_P3_DEFAULT) &&
	    o.defband >= o.bands)
		return p3_fail("invalid default \"%u\": expected 0..%u for bands %u",
			       o.defband, o.bands - 1, o.bands);

	return p3_put_opt(n, &o);
}

static bool p3_attr_ok(struct rtattr *tb[], int type, size_t len)
{
	return tb[type] && RTA_PAYLOAD(tb[type]) >= len;
}

/* A newer kernel may know tag sources that this plugin has no name for. */
static void p3_print_tag(__u8 tag)
{
	char buf[4];
	const char *name = buf;

	if (tag < ARRAY_SIZE(p3_tag_names))
		name = p3_tag_names[tag];
	else
		snprintf(buf, sizeof(buf), "%u", tag);
	print_string(PRINT_ANY, "tag", "tag %s ", name);
}

/* The code points not on the built-in rule, as "dscpmap" takes them. */
static void p3_print_dscpmap(const __u8 *map)
{
	char buf[TC_P3_DSCP_CODES * sizeof("63:63,")];
	size_t len = 0;
	unsigned int i;

	for (i = 0; i < TC_P3_DSCP_CODES; i++)
		if (map[i] != TC_P3_DSCP_BUILTIN)
			len += snprintf(buf + len, sizeof(buf) - len, "%s%u:%u",
					len ? "," : "", i, map[i]);
	if (len)
		print_string(PRINT_ANY, "dscpmap", "dscpmap %s ", buf);
}

static int p3_print_opt(struct qdisc_util *qu, FILE *f, struct rtattr *opt)
{
	struct rtattr *tb[TCA_P3_MAX + 1];

	if (!opt)
		return 0;
	parse_rtattr_nested(tb, TCA_P3_MAX, opt);

	if (p3_attr_ok(tb, TCA_P3_BANDS, sizeof(__u8)))
		print_uint(PRINT_ANY, "bands", "bands %u ",
			   rta_getattr_u8(tb[TCA_P3_BANDS]));
	if (p3_attr_ok(tb, TCA_P3_DEFAULT, sizeof(__u8)))
		print_uint(PRINT_ANY, "default", "default %u ",
			   rta_getattr_u8(tb[TCA_P3_DEFAULT]));
	if (p3_attr_ok(tb, TCA_P3_TAG, sizeof(__u8)))
		p3_print_tag(rta_getattr_u8(tb[TCA_P3_TAG]));
	if (p3_attr_ok(tb, TCA_P3_LIMIT, sizeof(__u32)))
		print_uint(PRINT_ANY, "limit", "limit %u ",
			   rta_getattr_u32(tb[TCA_P3_LIMIT]));
	if (p3_attr_ok(tb, TCA_P3_MEMORY, sizeof(__u32)))
		print_size(PRINT_ANY, "memory", "memory %s ",
			   rta_getattr_u32(tb[TCA_P3_MEMORY]));
	if (p3_attr_ok(tb, TCA_P3_QUANTUM, sizeof(__u32)))
		print_size(PRINT_ANY, "quantum", "quantum %s ",
			   rta_getattr_u32(tb[TCA_P3_QUANTUM]));
	if (p3_attr_ok(tb, TCA_P3_RATE, sizeof(__u64)))
		tc_print_rate(PRINT_ANY, "rate", "rate %s ",
			      rta_getattr_u64(tb[TCA_P3_RATE]));
	if (p3_attr_ok(tb, TCA_P3_BUCKETS, sizeof(__u32)))
		print_uint(PRINT_ANY, "buckets", "buckets %u ",
			   rta_getattr_u32(tb[TCA_P3_BUCKETS]));
	if (p3_attr_ok(tb, TCA_P3_FLOWS, sizeof(__u32)))
		print_uint(PRINT_ANY, "flows", "flows %u ",
			   rta_getattr_u32(tb[TCA_P3_FLOWS]));
	if (p3_attr_ok(tb, TCA_P3_DSCPMAP, TC_P3_DSCP_CODES))
		p3_print_dscpmap(RTA_DATA(tb[TCA_P3_DSCPMAP]));
	return 0;
}

/*
 * A time as tc writes one: "2ms", "500us", "1.5ms", "1s"; a bare number
 * is microseconds, as in tc's other qdiscs.
 */
static const char *p3_parse_deadline(__u32 *us, const char *arg)
{
	static const struct {
		const char	*suffix;
		double		us;
	} units[] = {
		{ "", 1 }, { "us", 1 }, { "usec", 1 }, { "usecs", 1 },
		{ "ms", 1e3 }, { "msec", 1e3 }, { "msecs", 1e3 },
		{ "s", 1e6 }, { "sec", 1e6 }, { "secs", 1e6 },
	};
	char *end;
	double t;
	unsigned int i;

	t = strtod(arg, &end);
	if (end == arg || strchr(arg, '-'))
		goto bad;
	for (i = 0; i < ARRAY_SIZE(units); i++) {
		if (strcasecmp(end, units[i].suffix))
			continue;
		t *= units[i].us;
		/* Written so that NaN fails it too. */
		if (!(t >= 0 && t <= P3_MAX_DEADLINE_US))
			goto bad;
		/* The nearest microsecond when the decimal is one ("2.007ms"
		 * is 2006.9999... in binary), else up: never shortened.
		 */
		*us = (__u32)(t + 0.5);
		if (*us - t > 1e-6 || t - *us > 1e-6) {
			*us = (__u32)t;
			if (*us < t)
				(*us)++;
		}
		return NULL;
	}
bad:
	return "expected a time up to 10s, such as 2ms (0 = reliable)";
}

static int p3_parse_class_opt(struct qdisc_util *qu, int argc, char **argv,
			      struct nlmsghdr *n, const char *dev)
{
	struct rtattr *nest;
	const char *why;
	__u32 us;

	if (argc == 1 && !strcmp(*argv, "help")) {
		p3_explain();
		return -1;
	}
	if (argc != 2 || strcmp(argv[0], "deadline"))
		return p3_fail("a class takes one option: deadline TIME");
	why = p3_parse_deadline(&us, argv[1]);
	if (why)
		return p3_fail("invalid deadline \"%s\": %s", argv[1], why);

	nest = addattr_nest(n, P3_NLMSG_MAX, TCA_OPTIONS | NLA_F_NESTED);
	if (!nest || addattr32(n, P3_NLMSG_MAX, TCA_P3_CLASS_DEADLINE, us))
		return -1;
	addattr_nest_end(n, nest);
	return 0;
}

/* Reliable bands print nothing: their output stays as it always was. */
static int p3_print_class_opt(struct qdisc_util *qu, FILE *f,
			      struct rtattr *opt)
{
	struct rtattr *tb[TCA_P3_CLASS_MAX + 1];
	char buf[32];
	__u32 us;

	if (!opt)
		return 0;
	parse_rtattr_nested(tb, TCA_P3_CLASS_MAX, opt);
	if (!p3_attr_ok(tb, TCA_P3_CLASS_DEADLINE, sizeof(__u32)))
		return 0;
	us = rta_getattr_u32(tb[TCA_P3_CLASS_DEADLINE]);
	if (!us)
		return 0;
	if (us % 1000000 == 0)
		snprintf(buf, sizeof(buf), "%us", us / 1000000);
	else if (us % 1000 == 0)
		snprintf(buf, sizeof(buf), "%ums", us / 1000);
	else
		snprintf(buf, sizeof(buf), "%uus", us);
	print_string(PRINT_FP, NULL, "deadline %s ", buf);
	print_uint(PRINT_JSON, "deadline_us", NULL, us);
	return 0;
}

static int p3_print_xstats(struct qdisc_util *qu, FILE *f,
			   struct rtattr *xstats)
{
	struct tc_p3_xstats st = {};
	size_t len;

	if (!xstats)
		return 0;

	/*
	 * The struct only grows: an older kernel sends a prefix of it, whose
	 * missing counters read as 0; a newer one sends more than we know.
	 */
	len = RTA_PAYLOAD(xstats);
	memcpy(&st, RTA_DATA(xstats), len < sizeof(st) ? len : sizeof(st));

	print_uint(PRINT_ANY, "flows", "  flows %u", st.flows);
	print_uint(PRINT_ANY, "flows_active", " flows_active %u",
		   st.flows_active);
	print_lluint(PRINT_ANY, "flows_created", " flows_created %llu",
		     st.flows_created);
	print_lluint(PRINT_ANY, "flows_gc", " flows_gc %llu", st.flows_gc);
	print_nl();
	print_lluint(PRINT_ANY, "preemptions", "  preemptions %llu",
		     st.preemptions);
	print_lluint(PRINT_ANY, "boosts", " boosts %llu", st.boosts);
	print_lluint(PRINT_ANY, "untagged", " untagged %llu", st.untagged);
	print_lluint(PRINT_ANY, "throttled", " throttled %llu", st.throttled);
	print_nl();
	print_lluint(PRINT_ANY, "drops_limit", "  drops_limit %llu",
		     st.drops_limit);
	print_lluint(PRINT_ANY, "drops_memory", " drops_memory %llu",
		     st.drops_memory);
	print_nl();
	print_lluint(PRINT_ANY, "drops_deadline", "  drops_deadline %llu",
		     st.drops_deadline);
	print_lluint(PRINT_ANY, "drops_tolerant", " drops_tolerant %llu",
		     st.drops_tolerant);
	/* Not a drop: a line of its own, so the lines above keep their form. */
	print_nl();
	print_lluint(PRINT_ANY, "spilled", "  spilled %llu", st.spilled);
	return 0;
}

struct qdisc_util p3_qdisc_util = {
	.id		= "p3",
	.parse_qopt	= p3_parse_opt,
	.print_qopt	= p3_print_opt,
	.print_xstats	= p3_print_xstats,
	.parse_copt	= p3_parse_class_opt,
	.print_copt	= p3_print_class_opt,
};
