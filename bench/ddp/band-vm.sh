#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# bench/ddp/band.py in one VM boot, through sch_p3: plain DDP beside an
# untagged upload, with and without p3ctl run, against prio with a port
# filter.  Arguments go to band.py (e.g. --rate 60 --steps 3).  Writes
# build/bench-ddp/band.jsonl and prints the table.
#   bench/ddp/band-vm.sh [--kernel VER] [BAND.PY ARGS...]
set -euo pipefail
top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
kernel=6.12
if [ "${1:-}" = --kernel ]; then
	kernel=$2
	shift 2
fi
make --no-print-directory all >/dev/null
selftests/vm-run --kernel "$kernel" --mem 4096 --timeout 3600 -- \
	/usr/bin/python3 bench/ddp/band.py "$@"
