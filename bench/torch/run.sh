#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# bench/torch: real PyTorch training (p3.torch) of a VGG-shaped model, two
# ranks in network namespaces of one VM boot, on shaped links: fifo, p3 in
# user space only, p3 with the sch_p3 qdisc, each alone and beside a bulk
# upload.  Prints the table, writes build/bench-torch/{results.jsonl,
# torch.png}.  Worker options pass through, e.g. the run in
# docs/benchmarks.md (links shaped so that a step's exchange takes 1.1
# compute-only steps of this boot):
#   bench/torch/run.sh --comm-ratio 1.1 --iters 12 --warmup 1 \
#       --modes compute,fifo,p3user,p3kernel
# or at a fixed rate, recording the link for bench/torch/timeline.py:
#   bench/torch/run.sh --mbit 10 --bulk 0 --modes fifo,p3user,p3kernel --timeline
# or, bounded loss and Slim-DP beside microbursts and under netem loss
# (the report as of 216191b, "DLCP and Slim-DP under pressure"):
#   bench/torch/run.sh --mbit 10 --iters 6 --warmup 1 --bulk 0 \
#       --modes compute,p3kernel,p3dlcp,slimdp --pressure none,burst,loss
# or where bounded loss's CPU goes (the report as of 216191b, "Where bounded
# loss's CPU goes, by thread"): --sample profiles p3.torch's threads, and
# report.py prints each thread's CPU and wake-ups a step:
#   bench/torch/run.sh --mbit 10 --iters 9 --warmup 1 --bulk 0 --spare-band \
#       --deadline 0.5 --batch 2 --modes p3dlcp --sample
# or what the slow steps are made of beside bursts at the job's most urgent
# level (the report as of 216191b, "What the slow steps are made of"):
#   bench/torch/run.sh --mbit 10 --iters 26 --warmup 1 --bulk 0 --spare-band \
#       --deadline 0.5 --batch 2 --pressure burst --burst-level 0 \
#       --burst-every 4 --modes p3kernel,p3dlcp --loss-tolerance 0.1
#   bench/torch/steps.py --png steps.png build/bench-torch/results.jsonl
# and, with --rto-trace, how much of the links' idle time fell while a TCP
# socket waited for its retransmission timer; --ack-band sends pure
# acknowledgements to p3's most urgent band (docs/benchmarks.md,
# "Timers, and acknowledgements behind the bursts"):
#   bench/torch/waits.py --png waits.png build/bench-torch/results.jsonl
# P3_KERNEL picks the VM's kernel (default 6.12).
set -euo pipefail
top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
out=build/bench-torch
rm -rf "$out"
mkdir -p "$out"
make --no-print-directory all >/dev/null
t0=$(date +%s)
P3_TORCH_OUT=$top/$out/results.jsonl selftests/vm-run --kernel "${P3_KERNEL:-6.12}" \
	--mem 3072 --timeout 3000 -- \
	env P3_TORCH_OUT="$top/$out/results.jsonl" bench/torch/vm.sh --progress "$@"
echo "bench/torch: VM done after $(( $(date +%s) - t0 )) s" >&2
/usr/bin/python3 bench/torch/report.py --png "$out/torch.png" "$out/results.jsonl"
