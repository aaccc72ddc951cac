/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The part of iproute2's tc plugin ABI that q_p3.so uses.
 *
 * Debian ships no iproute2 headers, so this declares, by hand, what
 * iproute2 6.1.0 defines in tc/tc_util.h, include/utils.h,
 * include/libnetlink.h, include/json_print.h and include/color.h.
 * tc dlopen()s the plugin and resolves these functions against its own
 * dynamic symbol table, so every prototype and layout here must match the
 * tc binary exactly; tc/test-parse.sh checks that each undefined symbol of
 * q_p3.so is exported by the installed tc.  The print_*() helpers below
 * are static inline in iproute2 too: only print_color_*() are exported.
 */
#ifndef _TC_PLUGIN_H
#define _TC_PLUGIN_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/types.h>

/* tc/tc_util.h: looked up as "<kind>_qdisc_util" with dlsym(). */
struct qdisc_util {
	struct qdisc_util *next;
	const char *id;
	int (*parse_qopt)(struct qdisc_util *qu, int argc, char **argv,
			  struct nlmsghdr *n, const char *dev);
	int (*print_qopt)(struct qdisc_util *qu, FILE *f, struct rtattr *opt);
	int (*print_xstats)(struct qdisc_util *qu, FILE *f,
			    struct rtattr *xstats);
	int (*parse_copt)(struct qdisc_util *qu, int argc, char **argv,
			  struct nlmsghdr *n, const char *dev);
	int (*print_copt)(struct qdisc_util *qu, FILE *f, struct rtattr *opt);
	int (*has_block)(struct qdisc_util *qu, struct rtattr *opt,
			 __u32 block_idx, bool *p_has);
};

/* include/utils.h */
int get_u32(__u32 *val, const char *arg, int base);
int get_size(unsigned int *size, const char *str);
int get_rate64(__u64 *rate, const char *str);

/* tc/tc_util.h: "N%" of the device's link speed, in bytes/s. */
int get_percent_rate64(__u64 *rate, const char *str, const char *dev);

/* include/libnetlink.h */
int addattr8(struct nlmsghdr *n, int maxlen, int type, __u8 data);
int addattr32(struct nlmsghdr *n, int maxlen, int type, __u32 data);
int addattr64(struct nlmsghdr *n, int maxlen, int type, __u64 data);
int addattr_l(struct nlmsghdr *n, int maxlen, int type, const void *data,
	      int alen);
struct rtattr *addattr_nest(struct nlmsghdr *n, int maxlen, int type);
int addattr_nest_end(struct nlmsghdr *n, struct rtattr *nest);
int parse_rtattr_flags(struct rtattr *tb[], int max, struct rtattr *rta,
		       int len, unsigned short flags);

#define parse_rtattr_nested(tb, max, rta)				\
	parse_rtattr_flags((tb), (max), RTA_DATA(rta), RTA_PAYLOAD(rta),	\
			   NLA_F_NESTED)

static inline __u8 rta_getattr_u8(const struct rtattr *rta)
{
	return *(const __u8 *)RTA_DATA(rta);
}

static inline __u32 rta_getattr_u32(const struct rtattr *rta)
{
	return *(const __u32 *)RTA_DATA(rta);
}

/* Attribute data is only 4-byte aligned. */
static inline __u64 rta_getattr_u64(const struct rtattr *rta)
{
	__u64 v;

	memcpy(&v, RTA_DATA(rta), sizeof(v));
	return v;
}

/* include/json_print.h and include/color.h */
enum output_type {
	PRINT_FP = 1,
	PRINT_JSON = 2,
	PRINT_ANY = 4,
};

enum color_attr {
	COLOR_IFNAME,
	COLOR_MAC,
	COLOR_INET,
	COLOR_INET6,
	COLOR_OPERSTATE_UP,
	COLOR_OPERSTATE_DOWN,
	COLOR_NONE,
};

void print_nl(void);
int print_color_uint(enum output_type t, enum color_attr color,
		     const char *key, const char *fmt, unsigned int value);
int print_color_lluint(enum output_type t, enum color_attr color,
		       const char *key, const char *fmt,
		       unsigned long long value);
int print_color_string(enum output_type t, enum color_attr color,
		       const char *key, const char *fmt, const char *value);
/* Text: "%s" of a human size ("4Mb"); JSON: the number of bytes. */
int print_color_size(enum output_type t, enum color_attr color,
		     const char *key, const char *fmt, __u32 value);
/* Text: "%s" of a human bit rate, honouring -iec; JSON: bytes/s. */
void tc_print_rate(enum output_type t, const char *key, const char *fmt,
		   unsigned long long rate);

static inline int print_uint(enum output_type t, const char *key,
			     const char *fmt, unsigned int value)
{
	return print_color_uint(t, COLOR_NONE, key, fmt, value);
}

static inline int print_lluint(enum output_type t, const char *key,
			       const char *fmt, unsigned long long value)
{
	return print_color_lluint(t, COLOR_NONE, key, fmt, value);
}

static inline int print_string(enum output_type t, const char *key,
			       const char *fmt, const char *value)
{
	return print_color_string(t, COLOR_NONE, key, fmt, value);
}

static inline int print_size(enum output_type t, const char *key,
			     const char *fmt, __u32 value)
{
	return print_color_size(t, COLOR_NONE, key, fmt, value);
}

#endif /* _TC_PLUGIN_H */
