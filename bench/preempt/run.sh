#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Preemption-latency benchmark: one VM boot, then the report.
#
#   bench/preempt/run.sh [--quick] [--kernel VER] [--out DIR]
#                        [preempt.py options...]
#
# Writes DIR (default build/bench/preempt) /{results.json,results.md,
# preempt.png,tsq.png}; DIR must be inside the repo (the VM sees only it).
# Default kernel 6.12 (fq has priority bands from 6.9); --kernel 6.1 runs
# the same on Debian 12's stock kernel.  About 10 minutes of VM time with
# the defaults, 2 with --quick.  Progress on stderr.
set -eu
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd -P)
OUT=build/bench/preempt
kernel=6.12
args=()
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernel=${2:?}; shift 2 ;;
	--out) OUT=${2:?}; shift 2 ;;
	*) args+=("$1"); shift ;;
	esac
done
cd "$REPO"
. bench/preempt/quiet.sh
bench_run preempt "$kernel" "$OUT" 2400 -- "${args[@]}"
