// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * p3ctl stat --prometheus: the qdisc's counters in the Prometheus text
 * exposition format 0.0.4, for node_exporter's textfile collector.
 *
 * The qdisc's totals and the per-band breakdown are separate families
 * (p3_sent_bytes_total and p3_band_sent_bytes_total): a family must sum
 * to something meaningful over its labels, and one holding both the total
 * and its parts would count every byte twice.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "p3.h"
#include "cli.h"

struct prom_field {
	const char	*name;	/* after "p3_" or "p3_band_" */
	const char	*type;
	const char	*help;
	size_t		off;
	size_t		size;	/* of the struct member: 1, 4 or 8 */
};

#define BAND_FIELD(n, t, h, m)                                                          \
	{ n, t, h, offsetof(struct p3_band_stats, m), sizeof(((struct p3_band_stats *)0)->m) }
/* Offsets in struct p3_qdisc_stats: the counters added since the first
 * layout live after its xstats. */
#define STATS_FIELD(n, t, h, m)                                                         \
	{ n, t, h, offsetof(struct p3_qdisc_stats, m),                                  \
	  sizeof(((struct p3_qdisc_stats *)0)->m) }
#define XSTATS_FIELD(n, t, h, m) STATS_FIELD(n, t, h, xstats.m)

/* Every field of struct p3_band_stats, for the qdisc and for each band. */
static const struct prom_field band_fields[] = {
	BAND_FIELD("sent_bytes_total", "counter", "Bytes sent", bytes),
	BAND_FIELD("sent_packets_total", "counter", "Packets sent", packets),
	BAND_FIELD("dropped_packets_total", "counter", "Packets dropped", drops),
	BAND_FIELD("overlimits_total", "counter", "Overlimit events", overlimits),
	BAND_FIELD("requeues_total", "counter", "Packets requeued", requeues),
	BAND_FIELD("backlog_bytes", "gauge", "Bytes queued now", backlog),
	BAND_FIELD("backlog_packets", "gauge", "Packets queued now", qlen),
};

/* The xstats but the drops, which are one family by cause below. */
static const struct prom_field xstats_fields[] = {
	XSTATS_FIELD("flows", "gauge", "Flow entries allocated now", flows),
	XSTATS_FIELD("active_flows", "gauge", "Flows holding packets now", flows_active),
	XSTATS_FIELD("flows_created_total", "counter", "Flow entries created", flows_created),
	XSTATS_FIELD("flows_gc_total", "counter", "Idle flow entries garbage-collected",
		     flows_gc),
	STATS_FIELD("spilled_packets_total", "counter",
		    "Packets queued in their band's shared flow for want of a flow entry "
		    "(the flows cap, or no memory)",
		    spilled),
	XSTATS_FIELD("preemptions_total", "counter",
		     "Switches to a more urgent band while a less urgent one held backlog",
		     preemptions),
	XSTATS_FIELD("boosts_total", "counter",
		     "Flows raised to a more urgent band by a newer packet (priority inheritance)",
		     boosts),
	XSTATS_FIELD("untagged_packets_total", "counter", "Packets sent to the default band",
		     untagged),
	XSTATS_FIELD("throttled_total", "counter", "Dequeues deferred by the rate pacer",
		     throttled),
};

#define DROP_CAUSE(n, m) STATS_FIELD(n, NULL, NULL, m)
static const struct prom_field drop_causes[] = {
	DROP_CAUSE("limit", xstats.drops_limit),
	DROP_CAUSE("memory", xstats.drops_memory),
	DROP_CAUSE("deadline", drops_deadline),
	DROP_CAUSE("tolerant", drops_tolerant),
};

/* The options, when the kernel reported them (struct p3_qdisc_opts.mask). */
static const struct {
	uint32_t	bit;
	const char	*name;
	const char	*help;
	size_t		off;
	size_t		size;
} opt_fields[] = {
#define OPT_FIELD(b, n, h, m)                                                            \
	{ b, n, h, offsetof(struct p3_qdisc_opts, m), sizeof(((struct p3_qdisc_opts *)0)->m) }
	OPT_FIELD(P3_QOPT_BANDS, "bands", "Number of bands", bands),
	OPT_FIELD(P3_QOPT_DEFAULT, "default_band", "Band of untagged packets", defband),
	OPT_FIELD(P3_QOPT_LIMIT, "limit_packets", "Packet limit", limit),
	OPT_FIELD(P3_QOPT_MEMORY, "memory_limit_bytes", "Byte limit, 0 for none", memory),
	OPT_FIELD(P3_QOPT_QUANTUM, "quantum_bytes", "DRR quantum between the flows of a band",
		  quantum),
	OPT_FIELD(P3_QOPT_RATE, "pacing_rate_bytes_per_second",
		  "Pacing rate, 0 for unpaced", rate),
	OPT_FIELD(P3_QOPT_BUCKETS, "flow_buckets", "Hash chains of the flow table", buckets),
	OPT_FIELD(P3_QOPT_FLOWS, "flows_limit", "Most flow entries; beyond them packets spill",
		  flows),
#undef OPT_FIELD
};

struct prom_ctx {
	FILE		*f;
	const char	*dev;
	char		handle[16];
};

static uint64_t field_value(const void *base, size_t off, size_t size)
{
	const char *p = (const char *)base + off;
	uint64_t v64;
	uint32_t v32;
	uint8_t v8;

	if (size == 8) {
		memcpy(&v64, p, 8);
		return v64;
	}
	if (size == 4) {
		memcpy(&v32, p, 4);
		return v32;
	}
	memcpy(&v8, p, 1);
	return v8;
}

/* A label value: backslash, double quote and newline are escaped. */
static void prom_escape(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			putc(*s, f);
	}
}

static void prom_head(const struct prom_ctx *c, const char *prefix, const char *name,
		      const char *type, const char *help, const char *suffix)
{
	fprintf(c->f, "# HELP %s%s %s%s\n# TYPE %s%s %s\n", prefix, name, help, suffix, prefix,
		name, type);
}

/* name{device="..",handle=".."[,key="val"]} v */
static void prom_sample(const struct prom_ctx *c, const char *prefix, const char *name,
			const char *key, const char *val, uint64_t v)
{
	fprintf(c->f, "%s%s{device=\"", prefix, name);
	prom_escape(c->f, c->dev);
	fprintf(c->f, "\",handle=\"%s\"", c->handle);
	if (key) {
		fprintf(c->f, ",%s=\"", key);
		prom_escape(c->f, val);
		putc('"', c->f);
	}
	fprintf(c->f, "} %" PRIu64 "\n", v);
}

static void prom_bands(const struct prom_ctx *c, const struct p3_qdisc_stats *st)
{
	const struct prom_field *m;
	unsigned int b, n = st->nbands < P3_MAX_BANDS ? st->nbands : P3_MAX_BANDS;
	char band[8];

	for (m = band_fields; m < band_fields + sizeof(band_fields) / sizeof(*m); m++) {
		prom_head(c, "p3_", m->name, m->type, m->help, " by the qdisc");
		prom_sample(c, "p3_", m->name, NULL, NULL,
			    field_value(&st->total, m->off, m->size));
	}
	if (!n)
		return;
	for (m = band_fields; m < band_fields + sizeof(band_fields) / sizeof(*m); m++) {
		prom_head(c, "p3_band_", m->name, m->type, m->help, ", per band (0 most urgent)");
		for (b = 0; b < n; b++) {
			snprintf(band, sizeof(band), "%u", b);
			prom_sample(c, "p3_band_", m->name, "band", band,
				    field_value(&st->band[b], m->off, m->size));
		}
	}
}

static void prom_xstats(const struct prom_ctx *c, const struct p3_qdisc_stats *st)
{
	const struct prom_field *m;

	for (m = xstats_fields; m < xstats_fields + sizeof(xstats_fields) / sizeof(*m); m++) {
		prom_head(c, "p3_", m->name, m->type, m->help, "");
		prom_sample(c, "p3_", m->name, NULL, NULL, field_value(st, m->off, m->size));
	}
	prom_head(c, "p3_", "dropped_packets_by_cause_total", "counter",
		  "Packets the qdisc pushed out, by cause: limit (the packet limit), "
		  "memory (the byte limit), deadline "
		  "(loss-tolerant, waited too long), tolerant (loss-tolerant, at a limit: "
		  "also counted as limit or memory)", "");
	for (m = drop_causes; m < drop_causes + sizeof(drop_causes) / sizeof(*m); m++)
		prom_sample(c, "p3_", "dropped_packets_by_cause_total", "cause", m->name,
			    field_value(st, m->off, m->size));
}

static void prom_opts(const struct prom_ctx *c, const struct p3_qdisc_stats *st)
{
	const struct p3_qdisc_opts *o = &st->opts;
	char parent[16];
	size_t i;

	/* An info metric: the options that are names, not numbers. */
	prom_head(c, "p3_", "qdisc_info", "gauge",
		  "Always 1: where the qdisc sits and where it reads the tag", "");
	fprintf(c->f, "p3_qdisc_info{device=\"");
	prom_escape(c->f, c->dev);
	fprintf(c->f, "\",handle=\"%s\",parent=\"%s\",tag=\"%s\"} 1\n", c->handle,
		fmt_handle(st->parent, parent, sizeof(parent)),
		(o->mask & P3_QOPT_TAG) ? p3_tag_method_name(o->tag) : "");
	for (i = 0; i < sizeof(opt_fields) / sizeof(*opt_fields); i++) {
		if (!(o->mask & opt_fields[i].bit))
			continue;
		prom_head(c, "p3_", opt_fields[i].name, "gauge", opt_fields[i].help, "");
		prom_sample(c, "p3_", opt_fields[i].name, NULL, NULL,
			    field_value(o, opt_fields[i].off, opt_fields[i].size));
	}
}

int prom_print(FILE *f, const char *dev, const struct p3_qdisc_stats *st)
{
	struct prom_ctx c = { .f = f, .dev = dev };

	fmt_handle(st->handle, c.handle, sizeof(c.handle));
	prom_opts(&c, st);
	prom_bands(&c, st);
	if (st->have_xstats)
		prom_xstats(&c, st);
	return ferror(f) ? -EIO : 0;
}
