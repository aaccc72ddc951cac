/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Out-of-tree differences between the kernels sch_p3 is built for.
 * Each shim is chosen by probing what the kernel's headers define,
 * never by version number, so backports are picked up as they land.
 */
#ifndef _P3_COMPAT_H
#define _P3_COMPAT_H

#include <net/pkt_sched.h>

/* MODULE_ALIAS_NET_SCH() arrived in 6.9, when qdisc auto-load moved from
 * "sch_<kind>" to "net-sch-<kind>".  Older kernels request "sch_p3",
 * which modprobe resolves from the module's file name; the explicit
 * alias keeps "net-sch-p3" working for them too.
 */
#ifndef MODULE_ALIAS_NET_SCH
#define MODULE_ALIAS_NET_SCH(id) MODULE_ALIAS("net-sch-" id)
#endif

#endif /* _P3_COMPAT_H */
