#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The full training-emulation sweep, in one VM boot: every model at four
# link rates in the four measured modes, then the co-located bulk upload
# (FIFO, P3 in user space, P3 in the kernel; one and four TCP streams per
# upload) at one network-bound rate per model.
# Results: build/bench/train/results.jsonl, then report.md and
# speedup.png from bench/train/report.py.  Progress goes to stderr:
#   [3/76] vgg19 p3kernel 4gbps (1.2mbit): 3.080 s/iter (...)
#
# P3_TRAIN_MODELS, P3_TRAIN_ITERS, P3_TRAIN_REPEAT and P3_KERNEL narrow or
# widen it; takes about an hour as shipped.  P3_TRAIN_COMPUTE_S (emulated
# compute per iteration, 3 s) at 6 halves the VM's CPU load per second and
# doubles the time: for hosts where the report says the CPU set the pace.
# Every run is traced (--trace): the report gives how far apart the
# workers' pushes of a key reached its server.
# `run.sh --resume` finishes a sweep whose VM was stopped, keeping the runs
# already recorded.  P3_VM_TCG_THREAD=single runs both vCPUs on one host
# thread, as the tests do (below).
set -euo pipefail

top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
PY=/usr/bin/python3
out=build/bench/train
models=${P3_TRAIN_MODELS:-vgg19,sockeye,resnet50,inception3}
iters=${P3_TRAIN_ITERS:-3}
repeat=${P3_TRAIN_REPEAT:-1}
compute=${P3_TRAIN_COMPUTE_S:-3}
kernel=${P3_KERNEL:-6.1}
# Real-equivalent Gbit/s: compute-to-communication ratios from about 2.5
# (network-bound) to 0.2 (compute-bound) for every model.
grid="vgg19=1,2,4,8 resnet50=1,2,4,8 inception3=0.5,1,2,4 sockeye=2,4,8,16"
bulk="vgg19=2 resnet50=2 inception3=1 sockeye=4"

[ -f build/userlib/libp3.so ] && [ -n "$(ls build/kmod/*/sch_p3.ko 2>/dev/null)" ] ||
	{ echo "run.sh: build first (make)" >&2; exit 1; }
mkdir -p "$out"
res=$out/results.jsonl
# --resume: carry on with the runs a killed sweep did not finish.
if [ "${1:-}" = --resume ]; then
	resume=--resume calibrate=
else
	resume='' calibrate=--calibrate
	[ -s "$res" ] && mv "$res" "$out/results.$(date +%Y%m%d-%H%M%S).jsonl"
fi
$PY bench/train/models.py --out "$out/profiles" >&2
# A host thread per vCPU (MTTCG): with both vCPUs on one host thread, as
# the tests run, the emulator's CPU and not the link set the pace on a
# slow host (VGG-19 at 2 Gbit/s: the VM 84-85% busy, against 67% this
# way, in the same session).  MTTCG can now and then kill the guest on a
# stale translation of patched kernel text (selftests/vm-run); that costs
# a boot, not a wrong figure, so a guest that died is booted again and
# the sweep resumes where it stopped, at most twice.
export P3_VM_TCG_THREAD=${P3_VM_TCG_THREAD:-multi}
for try in 1 2 3; do
	rc=0
	${P3_VM_RUN:-selftests/vm-run} --kernel "$kernel" --timeout 7200 -- \
		$PY bench/train/emulate.py $calibrate $resume --models "$models" \
		--grid "$grid" --bulk both --bulk-gbps "$bulk" \
		--bulk-streams 1,4 --iters "$iters" --warmup 1 --trace \
		--repeat "$repeat" --compute-s "$compute" --out "$res" || rc=$?
	# 125: the guest died; 122: the emulator failed (vm-run).
	case $rc in
	0) break ;;
	122 | 125) [ "$try" -lt 3 ] || exit "$rc"
		echo "run.sh: the guest died (vm-run exit $rc); resuming" >&2
		resume=--resume calibrate='' ;;
	*) exit "$rc" ;;
	esac
done
$PY bench/train/report.py --md "$out/report.md" --png "$out/speedup.png" "$res"
