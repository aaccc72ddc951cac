#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Per-packet cost by flow count, in guest instructions (flowcost.py):
# builds the sender, boots one VM with a single vCPU and QEMU's
# `-icount shift=0`, prints the Markdown table of docs/benchmarks.md and
# keeps build/bench/overhead/flowcost.json.
#
#   bench/overhead/flowcost.sh [--kernel VER] [flowcost.py options...]
set -eu
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd -P)
kernel=6.12
if [ "${1:-}" = --kernel ]; then
	kernel=${2:?}
	shift 2
fi
cd "$REPO"
. bench/preempt/quiet.sh
bench_build "$kernel"
mkdir -p build/bench/overhead
P3_VM_QEMU_ARGS="-icount shift=0 ${P3_VM_QEMU_ARGS:-}" \
	selftests/vm-run --kernel "$kernel" --cpus 1 --timeout 3600 -- \
	/usr/bin/python3 bench/overhead/flowcost.py \
	--out build/bench/overhead "$@"
