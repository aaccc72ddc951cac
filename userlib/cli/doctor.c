// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * p3ctl doctor: why DEV's traffic is not scheduled by p3.
 *
 * Each check reads the kernel's state (links, routes and qdiscs through
 * libnl-route, the p3 qdisc through libp3), judges it, and records a
 * finding: an ok line, a note, or a problem with the commands that fix
 * it.  Text findings are printed as they are made, JSON ones as one object
 * at the end.  The kernel answers netlink requests at once and the
 * socket's receive timeout bounds them all the same: the traffic sample
 * is the only wait.
 */
#include <errno.h>
#include <inttypes.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <netlink/netlink.h>
#include <netlink/cache.h>
#include <netlink/route/link.h>
#include <netlink/route/link/geneve.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/link/vxlan.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/route.h>
#include <netlink/route/tc.h>

#include "p3.h"
#include "cli.h"

#define MAX_FINDINGS	32
#define MAX_FIXES	3
#define LINE_LEN	400
#define MIN_PACKETS	20	/* a sample with fewer judges nothing */
#define MAX_TUNNELS	8	/* tunnel problems listed one by one */
#define MAX_NAMED	3	/* foreign veths, untagged jobs named */
#define MIN_JOB_RATE	131072	/* bytes/s: a job's untagged traffic worth naming */
#define NL_TIMEOUT_S	5
#define TOS_INHERIT	1	/* IFLA_VXLAN_TOS / IFLA_GENEVE_TOS */

enum kind { OK, NOTE, PROBLEM };

struct finding {
	enum kind	kind;
	const char	*id;		/* problems only */
	char		text[LINE_LEN];
	int		nfix;
	char		fix[MAX_FIXES][LINE_LEN];
};

/* DEV's root qdisc, whatever its kind. */
struct root_qdisc {
	int		found;
	char		kind[32];
	uint32_t	handle;
	uint64_t	packets;
};

/* What the traffic sample compares: the counters and when they were read. */
struct snapshot {
	struct p3_qdisc_stats	p3;
	struct root_qdisc	root;
	uint64_t		t_ns;
};

struct doctor {
	const struct doctor_opts *o;
	const char		*dev;
	char			route_dev[IF_NAMESIZE];	/* dev when not given */
	int			ifindex;
	struct nl_sock		*sk;
	struct nl_cache		*links;
	struct rtnl_link	*link;		/* dev, NULL if there is none */
	int			have_p3;
	struct snapshot		now;		/* p3 and root as first read */
	char			where[32];	/* " parent X:Y" for p3ctl, "" at root */
	int			nforeign;	/* veths whose peer is in another netns */
	char			foreign[128];	/* the first MAX_NAMED of them */
	int			problems;
	int			nfind;
	int			printed;	/* text findings already on stdout */
	struct finding		find[MAX_FINDINGS];
	struct finding		spill;		/* findings past the last slot */
};

/* ------------------------------------------------------------ findings */

static struct finding *report(struct doctor *d, enum kind kind, const char *id,
			      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fix(struct finding *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static struct finding *report(struct doctor *d, enum kind kind, const char *id,
			      const char *fmt, ...)
{
	struct finding *f = d->nfind < MAX_FINDINGS ? &d->find[d->nfind++] : &d->spill;
	va_list ap;

	*f = (struct finding){ .kind = kind, .id = id };
	va_start(ap, fmt);
	vsnprintf(f->text, sizeof(f->text), fmt, ap);
	va_end(ap);
	if (kind == PROBLEM)
		d->problems++;
	return f;
}

static void fix(struct finding *f, const char *fmt, ...)
{
	va_list ap;

	if (f->nfix >= MAX_FIXES)
		return;
	va_start(ap, fmt);
	vsnprintf(f->fix[f->nfix++], LINE_LEN, fmt, ap);
	va_end(ap);
}

/* Errors that keep a check from judging are problems too: a silent
 * exit 0 would say all is well. */
static void check_failed(struct doctor *d, const char *what, const char *why)
{
	struct finding *f = report(d, PROBLEM, "check-failed", "could not read %s: %s", what, why);

	fix(f, "tc -s qdisc show dev %s   # look by hand", d->dev);
}

static void print_text(struct doctor *d)
{
	static const char *const label[] = { [OK] = "ok", [NOTE] = "note" };
	const struct finding *f;
	int i;

	for (; d->printed < d->nfind; d->printed++) {
		f = &d->find[d->printed];
		if (f->kind == PROBLEM)
			printf("problem: %s: %s\n", f->id, f->text);
		else
			printf("%s: %s\n", label[f->kind], f->text);
		for (i = 0; i < f->nfix; i++)
			printf("  fix: %s\n", f->fix[i]);
	}
	fflush(stdout);
}

static void json_str(const char *s)
{
	unsigned char c;

	putchar('"');
	for (; (c = (unsigned char)*s); s++) {
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void json_texts(const struct doctor *d, enum kind kind)
{
	const char *sep = "";
	int i;

	putchar('[');
	for (i = 0; i < d->nfind; i++) {
		if (d->find[i].kind != kind)
			continue;
		fputs(sep, stdout);
		json_str(d->find[i].text);
		sep = ",";
	}
	putchar(']');
}

static void json_problem(const struct finding *f)
{
	int i;

	printf("{\"id\":");
	json_str(f->id);
	printf(",\"text\":");
	json_str(f->text);
	printf(",\"fix\":[");
	for (i = 0; i < f->nfix; i++) {
		if (i)
			putchar(',');
		json_str(f->fix[i]);
	}
	printf("]}");
}

static void print_json(const struct doctor *d)
{
	const char *sep = "";
	int i;

	printf("{\"dev\":");
	json_str(d->dev);
	printf(",\"ok\":");
	json_texts(d, OK);
	printf(",\"problems\":[");
	for (i = 0; i < d->nfind; i++) {
		if (d->find[i].kind != PROBLEM)
			continue;
		fputs(sep, stdout);
		json_problem(&d->find[i]);
		sep = ",";
	}
	printf("],\"notes\":");
	json_texts(d, NOTE);
	printf("}\n");
}

/* ------------------------------------------------------ reading state */

static int nl_setup(struct doctor *d)
{
	struct timeval tv = { .tv_sec = NL_TIMEOUT_S };
	int err;

	d->sk = nl_socket_alloc();
	if (!d->sk)
		return -NLE_NOMEM;
	err = nl_connect(d->sk, NETLINK_ROUTE);
	if (err)
		return err;
	if (setsockopt(nl_socket_get_fd(d->sk), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)))
		return -nl_syserr2nlerr(errno);
	return rtnl_link_alloc_cache(d->sk, AF_UNSPEC, &d->links);
}

/* The main table's default route of family, lowest metric: its device. */
static int default_route_ifindex(struct doctor *d, int family)
{
	uint32_t best = UINT32_MAX;
	struct nl_cache *routes;
	struct nl_object *o;
	int ifindex = 0;

	if (rtnl_route_alloc_cache(d->sk, family, 0, &routes))
		return 0;
	for (o = nl_cache_get_first(routes); o; o = nl_cache_get_next(o)) {
		struct rtnl_route *r = (struct rtnl_route *)o;
		struct rtnl_nexthop *nh = rtnl_route_nexthop_n(r, 0);
		struct nl_addr *dst = rtnl_route_get_dst(r);

		if (rtnl_route_get_table(r) != RT_TABLE_MAIN ||
		    rtnl_route_get_type(r) != RTN_UNICAST || !dst || nl_addr_get_prefixlen(dst) ||
		    !nh || rtnl_route_nh_get_ifindex(nh) <= 0 || rtnl_route_get_priority(r) >= best)
			continue;
		best = rtnl_route_get_priority(r);
		ifindex = rtnl_route_nh_get_ifindex(nh);
	}
	nl_cache_free(routes);
	return ifindex;
}

/* DEV as given, else the device of the IPv4 default route, else IPv6's. */
static int pick_dev(struct doctor *d)
{
	int ifindex;

	d->dev = d->o->dev;
	if (d->dev)
		return 0;
	ifindex = default_route_ifindex(d, AF_INET);
	if (!ifindex)
		ifindex = default_route_ifindex(d, AF_INET6);
	d->dev = d->route_dev;
	if (ifindex && rtnl_link_i2name(d->links, ifindex, d->route_dev, sizeof(d->route_dev)))
		return 0;
	fprintf(stderr, "p3ctl: doctor: no default route to take a device from: name one, "
		"p3ctl doctor DEV\n");
	return -1;
}

/* The p3 qdisc anywhere on DEV (parent 0), as libp3 reads it. */
static int read_p3(const struct doctor *d, struct p3_qdisc_stats *st)
{
	*st = (struct p3_qdisc_stats){ .size = sizeof(*st) };
	return p3_qdisc_get(d->dev, 0, 0, st);
}

/* DEV's root qdisc through libnl's cache, which knows every kind. */
static int read_root(struct doctor *d, struct root_qdisc *r)
{
	struct nl_cache *cache;
	struct rtnl_qdisc *q;
	const char *kind;
	int err;

	*r = (struct root_qdisc){ 0 };
	err = rtnl_qdisc_alloc_cache(d->sk, &cache);
	if (err) {
		check_failed(d, "the qdiscs", nl_geterror(err));
		return err;
	}
	q = rtnl_qdisc_get_by_parent(cache, d->ifindex, P3_ROOT);
	if (q) {
		kind = rtnl_tc_get_kind(TC_CAST(q));
		r->found = 1;
		snprintf(r->kind, sizeof(r->kind), "%s", kind ? kind : "?");
		r->handle = rtnl_tc_get_handle(TC_CAST(q));
		r->packets = rtnl_tc_get_stat(TC_CAST(q), RTNL_TC_PACKETS);
		rtnl_qdisc_put(q);
	}
	nl_cache_free(cache);
	return 0;
}

/* Both qdiscs and the time: 0, -ENOENT when DEV has no p3, or another
 * error, already reported as check-failed. */
static int read_snapshot(struct doctor *d, struct snapshot *s)
{
	int err;

	if (read_root(d, &s->root))
		return -1;
	err = read_p3(d, &s->p3);
	s->t_ns = p3_now_ns();
	if (err && err != -ENOENT)
		check_failed(d, "the p3 qdisc", p3_strerror(err));
	return err;
}

/* veths here whose peer is in another network namespace.  DEV itself is
 * left out: a container's own eth0 looks the same, and its packets meet
 * DEV's qdisc before they cross. */
static void find_foreign_veths(struct doctor *d)
{
	struct nl_object *o;
	int32_t nsid;
	size_t n;

	for (o = nl_cache_get_first(d->links); o; o = nl_cache_get_next(o)) {
		struct rtnl_link *l = (struct rtnl_link *)o;

		if (!rtnl_link_is_veth(l) || rtnl_link_get_ifindex(l) == d->ifindex ||
		    rtnl_link_get_link_netnsid(l, &nsid))
			continue;
		n = strlen(d->foreign);
		if (d->nforeign++ < MAX_NAMED)
			snprintf(d->foreign + n, sizeof(d->foreign) - n, "%s%s", n ? ", " : "",
				 rtnl_link_get_name(l));
	}
}

/* The link's speed in Mbit/s, or -1 when unknown. */
static long link_speed_mbit(const struct doctor *d)
{
	struct ethtool_cmd ecmd = { .cmd = ETHTOOL_GSET };
	struct ifreq ifr = { .ifr_data = (void *)&ecmd };
	long speed = -1;
	int fd;

	/* Virtual devices (they have a kind) report made-up speeds: a veth
	 * says 10000. */
	if (rtnl_link_get_type(d->link))
		return -1;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", d->dev);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (!ioctl(fd, SIOCETHTOOL, &ifr) && ethtool_cmd_speed(&ecmd) &&
	    ethtool_cmd_speed(&ecmd) != (uint32_t)SPEED_UNKNOWN)
		speed = (long)ethtool_cmd_speed(&ecmd);
	close(fd);
	return speed;
}

/* -------------------------------------------------------------- checks */

/* The kernel always reports the tag; an older one's default was DSCP. */
static int qdisc_tag(const struct doctor *d)
{
	return (d->now.p3.opts.mask & P3_QOPT_TAG) ? d->now.p3.opts.tag : P3_METHOD_DSCP;
}

/* Up without carrier: a cable, or a veth whose peer is down. */
static void device_no_carrier(struct doctor *d)
{
	char peer[IF_NAMESIZE] = "";
	struct finding *f;
	int32_t nsid;

	/* A peer in another namespace has an index that means nothing here. */
	if (rtnl_link_is_veth(d->link) && rtnl_link_get_link_netnsid(d->link, &nsid))
		rtnl_link_i2name(d->links, rtnl_link_get_link(d->link), peer, sizeof(peer));
	if (*peer) {
		f = report(d, PROBLEM, "device-down",
			   "%s is up but has no carrier: its veth peer %s is down", d->dev, peer);
		fix(f, "ip link set %s up", peer);
		return;
	}
	f = report(d, PROBLEM, "device-down",
		   "%s is up but has no carrier (cable, switch port, or the far end of a virtual link)",
		   d->dev);
	fix(f, "ip -d link show %s   # then bring up what it links to", d->dev);
}

/* 0 when DEV exists (whatever its state), -1 when it does not. */
static int check_device(struct doctor *d)
{
	struct finding *f;
	unsigned int flags;

	d->link = rtnl_link_get_by_name(d->links, d->dev);
	if (!d->link) {
		f = report(d, PROBLEM, "no-device", "no device %s in this network namespace", d->dev);
		fix(f, "ip link show");
		return -1;
	}
	d->ifindex = rtnl_link_get_ifindex(d->link);
	flags = rtnl_link_get_flags(d->link);
	if (!(flags & IFF_UP)) {
		f = report(d, PROBLEM, "device-down", "%s is administratively down", d->dev);
		fix(f, "ip link set %s up", d->dev);
	} else if (!(flags & IFF_RUNNING)) {
		device_no_carrier(d);
	} else {
		report(d, OK, NULL, "%s is up, with carrier", d->dev);
	}
	return 0;
}

static void check_module(struct doctor *d)
{
	struct finding *f;

	/* A p3 qdisc proves it even when sch_p3 is built in. */
	if (d->have_p3 || !access("/sys/module/sch_p3", F_OK)) {
		report(d, OK, NULL, "sch_p3 loaded");
		return;
	}
	f = report(d, PROBLEM, "module-missing", "sch_p3 is not loaded: no /sys/module/sch_p3%s%s",
		   d->link ? " and no p3 qdisc on " : "", d->link ? d->dev : "");
	fix(f, "modprobe sch_p3");
}

static void no_qdisc(struct doctor *d)
{
	const struct root_qdisc *r = &d->now.root;
	/* A root that someone configured has a handle, and refuses "add". */
	const char *verb = r->found && r->handle ? "replace" : "add";
	struct finding *f;
	char h[16];

	if (r->found && r->handle)
		f = report(d, PROBLEM, "no-qdisc", "no p3 qdisc on %s: its root qdisc is %s %s",
			   d->dev, r->kind, fmt_handle(r->handle, h, sizeof(h)));
	else if (r->found)
		f = report(d, PROBLEM, "no-qdisc", "no p3 qdisc on %s: its root qdisc is the "
			   "default %s", d->dev, r->kind);
	else
		f = report(d, PROBLEM, "no-qdisc", "no p3 qdisc on %s", d->dev);
	fix(f, "p3ctl %s %s", verb, d->dev);
	fix(f, "tc qdisc %s dev %s root p3   # the same with the tc plugin", verb, d->dev);
}

static void check_placement(struct doctor *d)
{
	const struct p3_qdisc_stats *st = &d->now.p3;
	char h[16], p[16];

	if (!d->have_p3) {
		no_qdisc(d);
		return;
	}
	fmt_handle(st->handle, h, sizeof(h));
	if (st->parent == P3_ROOT) {
		report(d, OK, NULL, "p3 at root of %s (handle %s), tag %s, %u bands", d->dev, h,
		       p3_tag_method_name(qdisc_tag(d)), st->opts.bands);
		return;
	}
	/* Whether traffic reaches it there is the traffic sample's to say. */
	snprintf(d->where, sizeof(d->where), " parent %s", fmt_handle(st->parent, p, sizeof(p)));
	report(d, OK, NULL, "p3 on %s (handle %s, parent %s), tag %s, %u bands", d->dev, h, p,
	       p3_tag_method_name(qdisc_tag(d)), st->opts.bands);
}

/* "N veth devices (a, b, c, ...)" */
static const char *foreign_list(const struct doctor *d, char *buf, size_t len)
{
	snprintf(buf, len, "%d veth device%s (%s%s)", d->nforeign, d->nforeign == 1 ? "" : "s",
		 d->foreign, d->nforeign > MAX_NAMED ? ", ..." : "");
	return buf;
}

/* The applications' side of the tag: libp3 reads $P3_TAG_METHOD. */
static void fix_app_tag(struct finding *f)
{
	fix(f, "export P3_TAG_METHOD=dscp   # in the applications' environment: only DSCP "
	       "survives the crossing between network namespaces");
}

static void check_tag(struct doctor *d)
{
	int reads = qdisc_tag(d), want = d->o->tag;
	/* Behind a namespace crossing only DSCP arrives: never advise another. */
	int target = d->nforeign ? P3_METHOD_DSCP : want;
	struct finding *f;

	if (reads == want) {
		report(d, OK, NULL, "p3 reads tag %s, which the applications write", p3_tag_method_name(reads));
		return;
	}
	f = report(d, PROBLEM, "tag-source", "p3 on %s reads tag %s but the applications write %s",
		   d->dev, p3_tag_method_name(reads), p3_tag_method_name(want));
	if (reads != target)
		fix(f, "p3ctl change %s%s tag %s", d->dev, d->where, p3_tag_method_name(target));
	if (want != target)
		fix_app_tag(f);
}

static void check_netns(struct doctor *d)
{
	int reads = qdisc_tag(d);
	struct finding *f;
	char list[192];

	if (!d->nforeign) {
		report(d, OK, NULL, "no veth here leads to another network namespace");
		return;
	}
	foreign_list(d, list, sizeof(list));
	if (reads == P3_METHOD_DSCP) {
		report(d, OK, NULL, "tag dscp survives the crossing from the namespaces behind %s",
		       list);
		return;
	}
	f = report(d, PROBLEM, "namespace-crossing",
		   "p3 reads %s, but %s lead to other network namespaces: the kernel clears "
		   "skb->%s when a packet crosses, so containers' packets arrive untagged",
		   p3_tag_method_name(reads), list, p3_tag_method_name(reads));
	fix(f, "p3ctl change %s%s tag dscp", d->dev, d->where);
	if (d->o->tag != P3_METHOD_DSCP)
		fix_app_tag(f);
}

struct tunnel {
	const char	*type;		/* "vxlan" or "geneve" */
	int		tos;		/* TOS_INHERIT, a fixed TOS, < 0 unknown */
	uint32_t	link;		/* underlay device, 0: any */
	struct nl_addr	*remote;	/* NULL: none configured */
	int		vni;		/* Geneve's id, < 0 for VXLAN */
};

static int tunnel_get(struct rtnl_link *l, struct tunnel *t)
{
	uint32_t vni;

	*t = (struct tunnel){ .tos = -1, .vni = -1 };
	if (rtnl_link_is_vxlan(l)) {
		t->type = "vxlan";
		t->tos = rtnl_link_vxlan_get_tos(l);
		rtnl_link_vxlan_get_link(l, &t->link);
		rtnl_link_vxlan_get_group(l, &t->remote);
	} else if (rtnl_link_is_geneve(l)) {
		t->type = "geneve";
		t->tos = rtnl_link_geneve_get_tos(l);
		rtnl_link_geneve_get_remote(l, &t->remote);
		if (!rtnl_link_geneve_get_id(l, &vni))
			t->vni = (int)vni;
	}
	return t->type ? 0 : -1;
}

/* A tunnel's verdict; INHERITS needs no route: its packets keep their DSCP. */
enum { INHERITS, NOT_OVER, OVER, MAY_BE_OVER };

/* Whether the tunnel's packets leave through DEV: its underlay device
 * says so, else the route to its remote, else nobody knows. */
static int tunnel_over_dev(struct doctor *d, const struct tunnel *t)
{
	struct rtnl_nexthop *nh;
	struct rtnl_route *r;
	int over = MAY_BE_OVER;

	if (t->link)
		return t->link == (uint32_t)d->ifindex ? OVER : NOT_OVER;
	if (!t->remote || nl_addr_iszero(t->remote) || rtnl_route_lookup(d->sk, t->remote, &r))
		return MAY_BE_OVER;
	nh = rtnl_route_nexthop_n(r, 0);
	if (nh)
		over = rtnl_route_nh_get_ifindex(nh) == d->ifindex ? OVER : NOT_OVER;
	rtnl_route_put(r);
	return over;
}

static void tunnel_problem(struct doctor *d, const char *name, const struct tunnel *t, int over)
{
	struct finding *f;

	f = report(d, PROBLEM, "tunnel-tos",
		   "%s %s %s carried over %s and does not inherit the inner TOS (tos %d): the "
		   "outer DSCP is its own, so every packet it carries reaches p3's default band",
		   t->type, name, over == OVER ? "is" : "may be", d->dev, t->tos);
	/* iproute2 wants a Geneve device's id even to change only its tos
	 * (the kernel keeps the remote it does not get). */
	if (t->vni >= 0)
		fix(f, "ip link set %s type %s id %d tos inherit", name, t->type, t->vni);
	else
		fix(f, "ip link set %s type %s tos inherit", name, t->type);
	fix(f, "ip -d link show %s   # if the live change is refused: recreate %s with these "
	       "options and tos inherit", name, name);
}

/* Only where the tag is (or is advised to become) DSCP: priority and mark
 * stay on the skb through an encapsulation in this namespace. */
static int dscp_matters(const struct doctor *d)
{
	return (d->have_p3 ? qdisc_tag(d) : d->o->tag) == P3_METHOD_DSCP || d->nforeign;
}

static void check_tunnels(struct doctor *d)
{
	int bad = 0, elsewhere = 0, over;
	struct nl_object *o;
	struct tunnel t;

	if (!dscp_matters(d))
		return;
	for (o = nl_cache_get_first(d->links); o; o = nl_cache_get_next(o)) {
		struct rtnl_link *l = (struct rtnl_link *)o;

		if (tunnel_get(l, &t))
			continue;
		over = t.tos >= 0 && t.tos != TOS_INHERIT ? tunnel_over_dev(d, &t) : INHERITS;
		if (over == NOT_OVER)
			elsewhere++;
		else if (over != INHERITS && bad++ < MAX_TUNNELS)
			tunnel_problem(d, rtnl_link_get_name(l), &t, over);
		nl_addr_put(t.remote);
	}
	if (bad > MAX_TUNNELS)
		report(d, NOTE, NULL, "%d more VXLAN/Geneve devices without tos inherit: "
		       "ip -d link show", bad - MAX_TUNNELS);
	if (!bad)
		report(d, OK, NULL, "no VXLAN/Geneve device over %s without tos inherit%s", d->dev,
		       elsewhere ? " (some over other devices)" : "");
}

/* A pacing rate above the link never holds packets back, and the queue
 * builds in the NIC, out of p3's reach: usually a unit slip (mbps is bytes). */
static void check_rate(struct doctor *d)
{
	uint64_t rate = d->now.p3.opts.rate;
	long mbit = link_speed_mbit(d);
	struct finding *f;
	char r[32];

	if (!rate || mbit <= 0)
		return;
	fmt_rate((double)rate, r, sizeof(r));
	if ((double)rate * 8 <= (double)mbit * 1e6) {
		report(d, OK, NULL, "rate %s is below %s's link speed (%ld Mbit/s)", r, d->dev, mbit);
		return;
	}
	f = report(d, PROBLEM, "rate-above-link",
		   "p3 paces %s at %s, above its link speed of %ld Mbit/s: the NIC queues, not p3",
		   d->dev, r, mbit);
	fix(f, "p3ctl change %s%s rate %ldmbit", d->dev, d->where, mbit * 95 / 100);
}

/* -------------------------------------------------------- the sample */

static void sleep_until(uint64_t deadline_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(deadline_ns / 1000000000u),
			       .tv_nsec = (long)(deadline_ns % 1000000000u) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* Where p3 sits when the sample cannot say whether traffic reaches it. */
static void placement_note(struct doctor *d, const char *why)
{
	const struct snapshot *s = &d->now;
	char h[16], p[16], rh[16];

	report(d, NOTE, NULL, "p3 (handle %s) sits under parent %s of %s, not at root (%s %s): "
	       "only traffic classified to %s reaches it%s", fmt_handle(s->p3.handle, h, sizeof(h)),
	       fmt_handle(s->p3.parent, p, sizeof(p)), d->dev, s->root.found ? s->root.kind : "?",
	       fmt_handle(s->root.handle, rh, sizeof(rh)), p, why);
}

static void judge_hidden(struct doctor *d, uint64_t sent, uint64_t seen, double dt)
{
	const struct snapshot *s = &d->now;
	char h[16], p[16], rh[16];
	struct finding *f;

	if (s->p3.parent == P3_ROOT)
		return;
	if (!s->root.found || sent < MIN_PACKETS) {
		placement_note(d, "; the sample saw too little traffic to tell whether it does");
		return;
	}
	fmt_handle(s->p3.handle, h, sizeof(h));
	fmt_handle(s->p3.parent, p, sizeof(p));
	fmt_handle(s->root.handle, rh, sizeof(rh));
	if (seen * 2 >= sent) {
		report(d, OK, NULL, "p3 (handle %s) saw %" PRIu64 " of the %" PRIu64 " packets %s's "
		       "root qdisc %s %s sent in %.1f s", h, seen, sent, d->dev, s->root.kind, rh, dt);
		return;
	}
	f = report(d, PROBLEM, "hidden", "p3 (handle %s, parent %s) saw %" PRIu64 " of the %"
		   PRIu64 " packets %s's root qdisc %s %s sent in %.1f s: the rest never reach it",
		   h, p, seen, sent, d->dev, s->root.kind, rh, dt);
	fix(f, "p3ctl replace %s   # p3 at root, in place of %s %s", d->dev, s->root.kind, rh);
	/* mq and mqprio take no filters: the stack picks their queue. */
	if (strcmp(s->root.kind, "mq") && strcmp(s->root.kind, "mqprio"))
		fix(f, "tc filter add dev %s parent %s protocol all prio 1 matchall classid %s"
		       "   # or steer all traffic to p3's parent", d->dev, rh, p);
}

static void judge_untagged(struct doctor *d, uint64_t seen, uint64_t untagged, double dt)
{
	struct finding *f;

	if (!d->now.p3.have_xstats) {
		report(d, NOTE, NULL, "p3 reports no untagged counter: tagging not judged");
		return;
	}
	if (seen < MIN_PACKETS) {
		report(d, NOTE, NULL, "p3 saw %" PRIu64 " packets in %.1f s: too little traffic to "
		       "judge tagging (run doctor while the job sends)", seen, dt);
		return;
	}
	if (untagged * 2 <= seen) {
		report(d, OK, NULL, "%" PRIu64 " packets sampled, %" PRIu64 " untagged", seen,
		       untagged);
		return;
	}
	f = report(d, PROBLEM, "untagged", "%" PRIu64 " of %" PRIu64 " packets p3 saw in %.1f s "
		   "were untagged: they all went to the default band %u", untagged, seen, dt,
		   d->now.p3.opts.defband);
	fix(f, "p3_tag(fd, level);   /* C: tag each socket with libp3 */");
	fix(f, "p3.tag(sock, level)   # Python");
	if (qdisc_tag(d) == P3_METHOD_DSCP)
		fix(f, "tcpdump -nvc 20 -i %s   # tos 0x0 is untagged: a container or overlay "
		       "path must keep DSCP", d->dev);
}

/* A counter's growth; libnl's packet count may be the kernel's u32. */
static uint64_t growth(uint64_t before, uint64_t after)
{
	return after >= before ? after - before : (uint32_t)(after - before);
}

/* The processes whose connections sent untagged in the sample, each with
 * the command that would run it in a band: first or last, as the
 * operator knows the job (the doctor cannot tell training from a backup). */
static void judge_jobs(struct doctor *d, const struct sender_sample *before, double dt)
{
	const struct p3_qdisc_opts *o = &d->now.p3.opts;
	struct untagged_job jobs[MAX_NAMED], *j;
	struct sender_sample *after;
	unsigned int last = o->bands - 1u;
	struct finding *f;
	int n, i, err;

	err = senders_sample(d->dev, o->bands, &after);
	n = err ? err : senders_jobs(before, after, (uint64_t)(MIN_JOB_RATE * dt), jobs, MAX_NAMED);
	senders_free(after);
	if (n < 0) {
		check_failed(d, "the host's TCP connections (sock_diag, /proc)", strerror(-n));
		return;
	}
	for (i = 0; i < n; i++) {
		j = &jobs[i];
		f = report(d, PROBLEM, "untagged-job", "process %d (uid %d) sent %.1f MB untagged in "
			   "%.1f s on %d TCP connection%s through %s, all to the default band %u: %s",
			   j->pid, (int)j->uid, (double)j->bytes / 1e6, dt, j->conns,
			   j->conns == 1 ? "" : "s", d->dev, o->defband,
			   *j->cmdline ? j->cmdline : "(its command line is gone or too long to show)");
		if (!*j->cmdline)
			continue;
		/* Under the same user: the fix must not hand root someone's job. */
		fix(f, "p3ctl run --level 0 -- %s   # as uid %d, if it must come first",
		    j->cmdline, (int)j->uid);
		if (o->defband < last)
			fix(f, "p3ctl run --level %u -- %s   # or so, if it should wait", last,
			    j->cmdline);
		else
			fix(f, "p3ctl change %s%s default %u; p3ctl run --level %u -- %s   # or so, "
			       "if it should wait", d->dev, d->where, last - 1, last, j->cmdline);
	}
}

/* Two reads of the counters sample_s apart; the first is d->now. */
static void check_traffic(struct doctor *d)
{
	const struct snapshot *s = &d->now;
	struct sender_sample *socks = NULL;
	struct snapshot later;
	uint64_t seen;
	double dt;
	int err;

	if (!d->o->sample_s) {
		report(d, NOTE, NULL, "traffic not sampled (--sample 0)");
		if (s->p3.parent != P3_ROOT)
			placement_note(d, "");
		return;
	}
	if (!d->o->json)
		print_text(d);
	/* sock_diag shows a connection's DSCP, not its priority or mark. */
	err = qdisc_tag(d) == P3_METHOD_DSCP ? senders_sample(d->dev, s->p3.opts.bands, &socks) : 0;
	if (err)
		check_failed(d, "the host's TCP connections (sock_diag)", strerror(-err));
	sleep_until(s->t_ns + (uint64_t)(d->o->sample_s * 1e9));
	if (read_snapshot(d, &later)) {
		senders_free(socks);
		return;
	}
	dt = (double)(later.t_ns - s->t_ns) / 1e9;
	seen = growth(s->p3.total.packets, later.p3.total.packets);
	judge_hidden(d, growth(s->root.packets, later.root.packets), seen, dt);
	judge_untagged(d, seen, growth(s->p3.xstats.untagged, later.p3.xstats.untagged), dt);
	if (socks)
		judge_jobs(d, socks, dt);
	senders_free(socks);
}

/* ---------------------------------------------------------------- main */

static void doctor_run(struct doctor *d)
{
	int err;

	if (check_device(d)) {
		check_module(d);
		return;
	}
	err = read_snapshot(d, &d->now);
	d->have_p3 = !err;
	check_module(d);
	if (err && err != -ENOENT)
		return;
	check_placement(d);
	find_foreign_veths(d);
	if (d->have_p3) {
		check_tag(d);
		check_netns(d);
	}
	check_tunnels(d);
	if (d->have_p3) {
		check_rate(d);
		check_traffic(d);
	}
}

int cmd_doctor(const struct doctor_opts *o)
{
	struct doctor *d = calloc(1, sizeof(*d));
	int err, ret = 1;

	if (!d) {
		fprintf(stderr, "p3ctl: doctor: out of memory\n");
		return 1;
	}
	d->o = o;
	err = nl_setup(d);
	if (err) {
		fprintf(stderr, "p3ctl: doctor: netlink: %s\n", nl_geterror(err));
	} else if (pick_dev(d)) {
		ret = 2;
	} else {
		doctor_run(d);
		if (o->json)
			print_json(d);
		else
			print_text(d);
		ret = d->problems ? 1 : 0;
	}
	if (d->link)
		rtnl_link_put(d->link);
	nl_cache_free(d->links);
	nl_socket_free(d->sk);
	free(d);
	return ret;
}
