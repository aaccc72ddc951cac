#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# bench/accuracy: final test accuracy and gradient bytes of
# examples/torch_digits.py (2 ranks over loopback) for dense P3, bounded
# loss (DLCP) with sender-side chunk loss, and Slim-DP; prints the
# Markdown table of docs/benchmarks.md.  Usage:
#   bench/accuracy/run.sh [--epochs N] [--seeds K] [--only dense,slimdp]
#   bench/accuracy/run.sh --vm [--epochs N]     through sch_p3, in the VM
#   bench/accuracy/run.sh --vm --bursts [--epochs N]
#                                     the same, beside microbursts
# --seeds K runs every case with the example's --seed 0..K-1 (its split,
# initial weights and shuffles) and reports the mean accuracy, its range,
# and each case's difference from dense seed by seed.
# Loss here is the example's --lose (a seeded fraction of datagram
# chunks left out at the sender): loopback loses nothing by itself.
# With --vm the losses are real: the qdisc's deadline drops and netem
# (bench/accuracy/vm.py, one boot of kernel 6.12, about 10 minutes).
# --bursts runs dense and bounded loss (10% tolerated) beside bursts at
# the job's most urgent level instead (vm.py --pressure burst).
set -euo pipefail
top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
epochs=8 vm=0 seeds=1 only= pressure=none
usage="usage: $0 [--vm [--bursts]] [--epochs N] [--seeds K] [--only dense,dlcp,slimdp]"
while [ $# -gt 0 ]; do
	case $1 in
	--epochs) epochs=${2:?}; shift 2 ;;
	--seeds) seeds=${2:?}; shift 2 ;;
	--only) only=${2:?}; shift 2 ;;
	--vm) vm=1; shift ;;
	--bursts) pressure=burst; shift ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
done
if [ $pressure = burst ] && [ $vm -eq 0 ]; then
	echo "$0: --bursts needs --vm (bursts need the qdisc)" >&2; exit 2
fi
case $seeds in
''|*[!0-9]*|0) echo "$0: --seeds takes a count from 1, not '$seeds'" >&2; exit 2 ;;
esac
make --no-print-directory userlib >/dev/null
if [ $vm -eq 1 ]; then
	make --no-print-directory module tc >/dev/null
	exec selftests/vm-run --kernel 6.12 --timeout 3600 -- \
		/usr/bin/python3 bench/accuracy/vm.py --epochs "$epochs" \
		--pressure "$pressure"
fi
# key|name|arguments
cases=(
	"dense|dense|"
	"dlcp|bounded loss, no chunk lost, 1% tolerated|--loss-tolerance 0.01"
	"dlcp|bounded loss, 5% of chunks lost, 1% tolerated|--loss-tolerance 0.01 --lose 0.05"
	"dlcp|bounded loss, 5% of chunks lost, 10% tolerated|--loss-tolerance 0.1 --lose 0.05"
	"dlcp|bounded loss, 20% of chunks lost, 50% tolerated|--loss-tolerance 0.5 --lose 0.2"
	"slimdp|Slim-DP (keep 0.1, explore 0.02)|--sparsify slimdp"
)
# One line per run: case index, seed, accuracy, bytes per iteration,
# bytes lost, rerequests; dense (case 0) always runs, as the reference.
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for i in "${!cases[@]}"; do
	IFS='|' read -r key name argv <<<"${cases[$i]}"
	if [ "$i" -gt 0 ] && [ -n "$only" ] && [[ ",$only," != *",$key,"* ]]; then
		continue
	fi
	read -ra args <<<"$argv"
	for seed in $(seq 0 $((seeds - 1))); do
		echo "bench/accuracy: $name, seed $seed" >&2
		out=$(build/bin/p3torchrun --nproc_per_node 2 examples/torch_digits.py \
			--epochs "$epochs" --seed "$seed" "${args[@]}" 2>&1) ||
			{ echo "$out" >&2; exit 1; }
		acc=$(sed -n "s/^epoch $epochs: .*test accuracy \([0-9.]*\)%.*/\1/p" <<<"$out")
		read -r per lost asked < <(sed -n 's/^stats: .* \([0-9]*\) per iteration, \([0-9]*\) bytes lost, \([0-9]*\) rerequests$/\1 \2 \3/p' <<<"$out")
		echo "$i $seed $acc $per $lost $asked" >>"$rows"
	done
done
names=$(printf '%s\n' "${cases[@]}" | cut -d'|' -f2)
/usr/bin/python3 - "$rows" "$epochs" "$seeds" "$names" <<'PY'
import statistics as st
import sys

path, epochs, seeds, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split('\n')
runs = {}
for line in open(path):
    i, seed, acc, per, lost, asked = line.split()
    runs.setdefault(int(i), {})[int(seed)] = (float(acc), int(per), int(lost), int(asked))
dense = runs[0]
dense_bytes = st.mean(r[1] for r in dense.values())
if seeds == 1:
    print('| %s epochs | test accuracy | gradient bytes per iteration (all ranks) '
          '| of dense | bytes lost | rerequests |' % epochs)
    print('|---|---:|---:|---:|---:|---:|')
    for i, r in runs.items():
        acc, per, lost, asked = r[0]
        print('| %s | %.1f%% | %d | %.1f%% | %d | %d |' % (
            names[i], acc, per, 100 * per / dense_bytes, lost, asked))
    sys.exit(0)
print('| %s epochs, seeds 0-%d | test accuracy: mean | min-max | minus dense, '
      'seed by seed: mean | min | max | within 0.5 point | within 1 point '
      '| of dense bytes |' % (epochs, seeds - 1))
print('|---|---:|---:|---:|---:|---:|---:|---:|---:|')
for i, r in runs.items():
    accs = [r[s][0] for s in sorted(r)]
    diff = [r[s][0] - dense[s][0] for s in sorted(r)]
    # bounded loss's target is 0.5 points from dense, Slim-DP's 1 point
    print('| %s | %.1f%% | %.1f-%.1f | %+.1f | %+.1f | %+.1f | %d of %d | %d of %d | %.1f%% |' % (
        names[i], st.mean(accs), min(accs), max(accs), st.mean(diff), min(diff),
        max(diff), sum(round(d, 1) >= -0.5 for d in diff), len(diff),
        sum(round(d, 1) >= -1.0 for d in diff), len(diff),
        100 * st.mean(x[1] for x in r.values()) / dense_bytes))
PY
