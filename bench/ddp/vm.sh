#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# bench/ddp in one VM boot, through sch_p3 (p3 at the root of each host,
# pacing at the rate): resnet18 and vgg11 at RATE Mbit/s (default 60),
# then resnet18 beside an untagged iperf3 upload from host 0.  Arguments
# go to every run.py (e.g. --steps 3 --warmup 1 --rounds 2).  Writes
# build/bench-ddp/vm.jsonl and prints the table.
#   bench/ddp/vm.sh [--kernel VER] [--rate MBIT] [RUN.PY ARGS...]
set -euo pipefail
top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
kernel=6.12 rate=60
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernel=$2; shift 2 ;;
	--rate) rate=$2; shift 2 ;;
	*) break ;;
	esac
done
out=build/bench-ddp/vm.jsonl
mkdir -p build/bench-ddp
make --no-print-directory all >/dev/null
common=(--qdisc p3 --batch 4 --points "$rate" --out "$out" "$@")
selftests/vm-run --kernel "$kernel" --mem 4096 --timeout 3600 -- bash -c "
	/usr/bin/python3 bench/ddp/run.py --models resnet18,vgg11 ${common[*]} &&
	/usr/bin/python3 bench/ddp/run.py --append --upload --models resnet18 ${common[*]}"
/usr/bin/python3 bench/ddp/report.py --png build/bench-ddp/ddp-vm.png "$out"
