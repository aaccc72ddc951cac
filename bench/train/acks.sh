#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Where TCP's ACKs go, in one VM boot: VGG-19 at 2 Gbit/s (real-equivalent)
# in p3kernel mode with each --acks setting of emulate.py (stock sysctls,
# tcp_reflect_tos=1, pure ACKs in band 0), then p3user for reference; nine
# iterations and no warm-up, so that a slow start shows. Results:
# build/bench/acks/{stock,reflect,urgent,p3user}.jsonl. About 4 minutes.
#
#   bench/train/acks.sh [--rounds N] [--only stock,urgent,...]
#
# --rounds N runs the settings in turn N times (files SETTING-rK.jsonl), so
# that a difference can be told from the boot's drift; --only picks the
# settings, p3user among them (default: stock,reflect,urgent,p3user).
set -euo pipefail
top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
rounds=1 only=stock,reflect,urgent,p3user
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--only) only=$2; shift 2 ;;
	*) echo "usage: $0 [--rounds N] [--only stock,reflect,urgent,p3user]" >&2; exit 2 ;;
	esac
done
case "$rounds" in ''|*[!0-9]*|0) echo "$0: --rounds takes a positive number" >&2; exit 2 ;; esac
for a in ${only//,/ }; do
	case "$a" in stock|reflect|urgent|p3user) ;;
	*) echo "$0: no setting '$a' (stock, reflect, urgent, p3user)" >&2; exit 2 ;;
	esac
done
out=build/bench/acks
mkdir -p "$out"
rm -f "$out"/*.jsonl
run="/usr/bin/python3 bench/train/emulate.py --models vgg19 --grid vgg19=2 --iters 9 --warmup 0"
selftests/vm-run --kernel "${P3_KERNEL:-6.1}" --timeout $((2400 * rounds)) -- "
	set -e
	for k in \$(seq $rounds); do
		for a in ${only//,/ }; do
			f=$out/\$a.jsonl
			[ $rounds -eq 1 ] || f=$out/\$a-r\$k.jsonl
			echo \"== \$a, round \$k of $rounds\"
			if [ \$a = p3user ]; then
				$run --modes p3user --out \$f
			else
				$run --modes p3kernel --acks \$a --out \$f
			fi
		done
	done"
