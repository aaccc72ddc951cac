#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The shared library's ABI: its SONAME, that it exports p3_* and nothing
# else, each under the LIBP3_1 version node, and that p3_version() says
# the version the Makefile built.  TAP.  Usage: test_abi.sh DIR VERSION
dir=$1 want=$2
n=0 failed=0
check() {	# check STATUS NAME
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else failed=1; echo "not ok $n - $2"; fi
}
so=$dir/libp3.so
soname=$(objdump -p "$so" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = libp3.so.1 ]
check $? "SONAME is libp3.so.1 (got '$soname')"
syms=$(nm -D --defined-only "$so" | awk '{ print $3 }')
others=$(echo "$syms" | grep -v '^p3_' | grep -v -x -e LIBP3_1 -e LIBP3_1.1 -e LIBP3_1.2 -e LIBP3_1.4 -e LIBP3_1.5)
[ -n "$syms" ] && [ -z "$others" ]
check $? "exports only p3_* symbols${others:+ (also: $(echo $others))}"
# 1.1 added p3_dgram_* under LIBP3_1.1, 1.2 p3_chan_opts_init_sized
# under LIBP3_1.2, 1.4 p3_chan_send_plan_ref and p3_chan_next_batch under
# LIBP3_1.4, 1.5 p3_level_dscp and p3_dscp_level under LIBP3_1.5;
# everything else is LIBP3_1's.
unversioned=$(objdump -T "$so" | awk '$NF ~ /^p3_/ {
	want = $NF ~ /^p3_dgram_/ ? "LIBP3_1.1" : \
		$NF == "p3_chan_opts_init_sized" ? "LIBP3_1.2" : \
		$NF ~ /^p3_chan_(send_plan_ref|next_batch)$/ ? "LIBP3_1.4" : \
		$NF ~ /^p3_(level_dscp|dscp_level)$/ ? "LIBP3_1.5" : "LIBP3_1"
	if ($(NF - 1) != want) print $NF }')
[ -z "$unversioned" ]
check $? "every p3_* symbol is versioned LIBP3_1, p3_dgram_* LIBP3_1.1, p3_chan_opts_init_sized LIBP3_1.2, p3_chan_send_plan_ref and p3_chan_next_batch LIBP3_1.4, p3_level_dscp and p3_dscp_level LIBP3_1.5${unversioned:+ (not: $(echo $unversioned))}"
got=$(/usr/bin/python3 -c "import ctypes; l = ctypes.CDLL('$so'); \
l.p3_version.restype = ctypes.c_char_p; print(l.p3_version().decode())")
[ "$got" = "$want" ]
check $? "p3_version() is $want (got '$got')"
echo "1..$n"
exit $failed
