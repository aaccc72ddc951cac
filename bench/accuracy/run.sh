#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# bench/accuracy: final test accuracy and gradient bytes of
# examples/torch_digits.py (2 ranks over loopback, one seed) for dense P3,
# bounded loss (DLCP) with sender-side chunk loss, and Slim-DP; prints
# the Markdown table of docs/benchmarks.md.  Usage:
#   bench/accuracy/run.sh [--epochs N]          (default 8)
#   bench/accuracy/run.sh --vm [--epochs N]     through sch_p3, in the VM
# Loss here is the example's --lose (a seeded fraction of datagram
# chunks left out at the sender): loopback loses nothing by itself.
# With --vm the losses are real: the qdisc's deadline drops and netem
# (bench/accuracy/vm.py, one boot of kernel 6.12, about 10 minutes).
set -euo pipefail
top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
epochs=8 vm=0
while [ $# -gt 0 ]; do
	case $1 in
	--epochs) epochs=${2:?}; shift 2 ;;
	--vm) vm=1; shift ;;
	*) echo "usage: $0 [--vm] [--epochs N]" >&2; exit 2 ;;
	esac
done
make --no-print-directory userlib >/dev/null
if [ $vm -eq 1 ]; then
	make --no-print-directory module tc >/dev/null
	exec selftests/vm-run --kernel 6.12 --timeout 3600 -- \
		/usr/bin/python3 bench/accuracy/vm.py --epochs "$epochs"
fi
cases=(
	"dense|"
	"bounded loss, no chunk lost, 1% tolerated|--loss-tolerance 0.01"
	"bounded loss, 5% of chunks lost, 1% tolerated|--loss-tolerance 0.01 --lose 0.05"
	"bounded loss, 5% of chunks lost, 10% tolerated|--loss-tolerance 0.1 --lose 0.05"
	"bounded loss, 20% of chunks lost, 50% tolerated|--loss-tolerance 0.5 --lose 0.2"
	"Slim-DP (keep 0.1, explore 0.02)|--sparsify slimdp"
)
echo "| $epochs epochs | test accuracy | gradient bytes per iteration (all ranks) | of dense | bytes lost | rerequests |"
echo "|---|---:|---:|---:|---:|---:|"
dense=
for c in "${cases[@]}"; do
	name=${c%%|*}
	read -ra args <<<"${c#*|}"
	echo "bench/accuracy: $name" >&2
	out=$(build/bin/p3torchrun --nproc_per_node 2 examples/torch_digits.py \
		--epochs "$epochs" "${args[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
	acc=$(sed -n "s/^epoch $epochs: .*test accuracy \([0-9.]*\)%.*/\1/p" <<<"$out")
	read -r per lost asked < <(sed -n 's/^stats: .* \([0-9]*\) per iteration, \([0-9]*\) bytes lost, \([0-9]*\) rerequests$/\1 \2 \3/p' <<<"$out")
	dense=${dense:-$per}
	awk -v n="$name" -v a="$acc" -v p="$per" -v d="$dense" -v l="$lost" \
		-v r="$asked" 'BEGIN { printf "| %s | %s%% | %d | %.1f%% | %d | %d |\n",
			n, a, p, 100 * p / d, l, r }'
done
