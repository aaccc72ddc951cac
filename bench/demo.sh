#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# make demo: a short VGG-19 training emulation on an emulated cluster (4
# workers + 4 parameter servers in network namespaces, inside a VM), FIFO
# (WFBP) against P3 with the sch_p3 qdisc, at one link rate where the
# network matters.  Prints a small table, writes build/demo/vgg19.png, and
# ends with one line:
#   speedup: VGG-19 <x>x (fifo <t> s/iter, p3 <t> s/iter, ideal <t> s/iter)
#
# P3_DEMO_GBPS (real-equivalent Gbit/s, default 2), P3_DEMO_ITERS (timed
# iterations per mode, default 4) and P3_KERNEL (the VM's kernel) change it.
# The full sweep is bench/train/run.sh; see docs/benchmarks.md.
set -euo pipefail

top=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cd "$top"
PY=/usr/bin/python3
out=build/demo
gbps=${P3_DEMO_GBPS:-2}
iters=${P3_DEMO_ITERS:-4}
kernel=${P3_KERNEL:-6.1}

rm -rf "$out"
mkdir -p "$out"
t0=$(date +%s)
echo "demo: booting a $kernel VM: VGG-19, FIFO then P3 in the kernel," \
	"$iters timed iterations each at $gbps Gbit/s (real-equivalent)" >&2
selftests/vm-run --kernel "$kernel" --timeout 540 -- \
	$PY bench/train/emulate.py --progress --models vgg19 \
	--modes fifo,p3kernel --gbps "$gbps" --iters "$iters" --warmup 1 \
	--out "$out/results.jsonl"
echo "demo: VM done after $(( $(date +%s) - t0 )) s" >&2
$PY bench/train/report.py --demo --png "$out/vgg19.png" "$out/results.jsonl"
