#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# bench/chan/dgram.sh [-r ROUNDS] [dgram options]: the CPU libp3's
# datagrams cost per MiB on this host's loopback (no VM needed), with UDP
# GSO (a send carries up to 45 datagrams) and without (libp3 built with
# DGRAM_GSO_MAX_SEGS=1: one datagram a send), side by side in each round.
set -euo pipefail
top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
rounds=5
if [ "${1:-}" = -r ]; then
	rounds=$2
	shift 2
fi
out=build/bench/chan
mkdir -p "$out"
# libp3's sources, as userlib/Makefile lists them (make expands $(SRCS))
# shellcheck disable=SC2016
srcs=$(printf 'print-srcs:\n\t@echo $(SRCS:%%=src/%%)\n' |
	make -s --no-print-directory -C userlib -f Makefile -f - print-srcs | sed 's|src/|userlib/src/|g')
for variant in gso single; do
	def=
	[ $variant = single ] && def=-DDGRAM_GSO_MAX_SEGS=1
	# word splitting wanted: flag and file lists
	# shellcheck disable=SC2086,SC2046
	cc -O2 -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror $def \
		-Iuserlib/include -Iuserlib/src -Iinclude/uapi -DP3_LIB_VERSION='"bench"' \
		$(pkg-config --cflags libnl-route-3.0) -o "$out/dgram-$variant" \
		bench/chan/dgram.c $srcs $(pkg-config --libs libnl-route-3.0) -lpthread -lm
done
for r in $(seq "$rounds"); do
	for variant in gso single; do
		printf '{"round": %d, "variant": "%s", ' "$r" "$variant"
		"$out/dgram-$variant" "$@" | sed 's/^{//'
	done
done | tee "$out/dgram.jsonl"
/usr/bin/python3 - "$out/dgram.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r['round'], {})[r['variant']] = r
cpu = [b['gso']['cpu_s_per_mib'] / b['single']['cpu_s_per_mib'] for b in by.values()]
rate = [b['gso']['wall_mib_s'] / b['single']['wall_mib_s'] for b in by.values()]
med = lambda v: statistics.median(v)
print('CPU per MiB, GSO / single: median %.2f (rounds %s)' % (
    med(cpu), ' '.join('%.2f' % x for x in cpu)))
print('wall MiB/s, GSO / single: median %.2f' % med(rate))
for v in ('gso', 'single'):
    print('%-6s CPU ms per MiB: median %.3f; MiB/s median %.0f; missing %d' % (
        v, 1e3 * med([b[v]['cpu_s_per_mib'] for b in by.values()]),
        med([b[v]['wall_mib_s'] for b in by.values()]),
        sum(b[v]['missing'] for b in by.values())))
PY
