#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Instructions per packet of sch_p3.ko built from several trees, in one
# boot (builds.py): one vCPU under QEMU's `-icount shift=0`.
#
#   bench/overhead/builds.sh [--kernel VER] [--rounds N] [--flows N,N...]
#                            NAME=TREE...
#
# TREE is a checkout of this project (`.` for this one; `git worktree add
# /tmp/before REV` for another revision); each is built with its own
# scripts/kmod-build.sh into build/bench/builds/NAME, inside this repo,
# where the guest sees it.  Prints the Markdown table; keeps
# build/bench/builds/builds.json.  About 2 guest minutes a build a round.
set -eu
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd -P)
kernel=6.12 args=() mods=()
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernel=${2:?}; shift 2 ;;
	--rounds|--flows) args+=("$1" "${2:?}"); shift 2 ;;
	*=*) mods+=("$1"); shift ;;
	*) echo "usage: $0 [--kernel VER] [--rounds N] [--flows N,N...] NAME=TREE..." >&2; exit 2 ;;
	esac
done
[ ${#mods[@]} -gt 0 ] || { echo "builds.sh: name at least one NAME=TREE" >&2; exit 2; }
cd "$REPO"
. bench/preempt/quiet.sh
bench_build "$kernel"
release=$(basename "$(ls -d build/kmod/"$kernel"*/ | head -1)")
for m in "${mods[@]}"; do
	name=${m%%=*} tree=$(cd "${m#*=}" && pwd -P)
	out=build/bench/builds/$name
	"$tree/scripts/kmod-build.sh" "$release" "$out" >/dev/null
	args+=("$name=$out/sch_p3.ko")
done
export P3_BENCH_NOWAIT=1	# counts do not depend on the host's load
bench_lock
P3_VM_PARALLEL=1 P3_VM_QEMU_ARGS="-icount shift=0 ${P3_VM_QEMU_ARGS:-}" \
	selftests/vm-run --kernel "$kernel" --cpus 1 --timeout 3600 -- \
	/usr/bin/python3 bench/overhead/builds.py --out build/bench/builds \
	"${args[@]}"
