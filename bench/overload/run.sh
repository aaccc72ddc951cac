#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Overload benchmark: one urgent TCP flow (level 0's DSCP) over a 20 Mbit/s tbf
# link with 20 ms on the ACK path, alone and beside untagged floods, under
# p3 (several limits), prio and skbprio, all in one VM boot.  Prints the
# Markdown table of docs/benchmarks.md ("Overload") and keeps it in
# build/bench/overload/results.md.  About 3 minutes of VM time.
#
#   bench/overload/run.sh [--kernel VER]
set -eu
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd -P)
kernel=6.12
[ "${1:-}" = --kernel ] && kernel=${2:?}
cd "$REPO"
. bench/preempt/quiet.sh
bench_build "$kernel"
mkdir -p build/bench/overload
# Goodput under emulation: no other guest may share the host meanwhile.
bench_lock
P3_VM_PARALLEL=1 selftests/vm-run --kernel "$kernel" -- \
	/usr/bin/python3 selftests/p3_overload.py --table |
	tee build/bench/overload/results.md
