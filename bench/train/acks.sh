#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Where TCP's ACKs go, in one VM boot: VGG-19 at 2 Gbit/s (real-equivalent)
# in p3kernel mode with each --acks setting of emulate.py (stock sysctls,
# tcp_reflect_tos=1, pure ACKs in band 0), then p3user for reference; nine
# iterations and no warm-up, so that a slow start shows. Results:
# build/bench/acks/{stock,reflect,urgent,p3user}.jsonl. About 4 minutes.
set -euo pipefail
top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
out=build/bench/acks
mkdir -p "$out"
rm -f "$out"/*.jsonl
run="/usr/bin/python3 bench/train/emulate.py --models vgg19 --grid vgg19=2 --iters 9 --warmup 0"
selftests/vm-run --kernel "${P3_KERNEL:-6.1}" --timeout 2400 -- "
	set -e
	for a in stock reflect urgent; do
		$run --modes p3kernel --acks \$a --out $out/\$a.jsonl
	done
	$run --modes p3user --out $out/p3user.jsonl"
