#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Qdisc overhead benchmark: builds the sender, boots the VM once, reports.
#
#   bench/overhead/run.sh [--quick] [--icount] [--kernel VER] [--out DIR]
#                         [overhead.py options...]
#
# --icount counts instead of timing: one vCPU under QEMU's -icount
# shift=0, where a guest second is 10^9 guest instructions, so the report
# gives instructions per packet, independent of the host's load (default
# DIR build/bench/overhead-icount). Without it, packets per wall-clock
# second, for real hosts. --under prio measures every qdisc as the child
# of a prio root, where none takes the empty-queue bypass (overhead.py).
#
# Writes DIR (default build/bench/overhead) /{results.json,results.md};
# DIR must be inside the repo (the VM sees only it).  Default kernel
# 6.12, as bench/preempt; --kernel 6.1 for Debian 12's stock kernel.
# About 3 minutes of VM time with the defaults, 1 with --quick.
set -eu
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd -P)
OUT=build/bench/overhead
kernel=6.12
args=() vm=()
while [ $# -gt 0 ]; do
	case $1 in
	--icount)
		# sleep=on (the default): an idle guest waits in host time.
		# The flood never idles, so counts stay exact; with sleep=off
		# guest time raced ahead while the guest waited for its 9p root
		# on a busy host, and set-up commands hit their timeouts.
		export P3_VM_QEMU_ARGS="-icount shift=0 ${P3_VM_QEMU_ARGS:-}"
		vm=(--cpus 1)
		[ "$OUT" = build/bench/overhead ] && OUT=build/bench/overhead-icount
		# Counts do not depend on the host's load: no wait for a quiet
		# host (the lock is still taken, not to disturb another's timings).
		export P3_BENCH_NOWAIT=1
		args+=(--icount); shift ;;
	--kernel) kernel=${2:?}; shift 2 ;;
	--out) OUT=${2:?}; shift 2 ;;
	*) args+=("$1"); shift ;;
	esac
done
cd "$REPO"
. bench/preempt/quiet.sh
bench_run overhead "$kernel" "$OUT" 1200 "${vm[@]}" -- "${args[@]}"
