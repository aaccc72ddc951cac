#!/bin/bash
# suites.sh [--deadline EPOCH] NAME SECONDS CMD... [--- NAME SECONDS CMD...]...:
# several suites in one debug guest, one after the other, each followed by
# guest.sh's look at the kernel log, and after the last one kmemleak's
# scans for all of them (four scans of this kernel take over a minute
# under TCG; an object left unreferenced by any suite is still found
# then). One boot costs over a minute too; make check's CI-sized pass
# runs all its suites in one (scripts/check-debug.sh --quick).
# SECONDS is what the suite takes here; with --deadline a suite that would
# not end before it is skipped, visibly (scripts/time-budget.sh), and the
# later ones still get their chance.
# Exit status: 0 if every suite that ran passed its own and guest.sh's
# checks, else 1.
set -u
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=scripts/time-budget.sh
. scripts/time-budget.sh

deadline=
if [ "${1:-}" = --deadline ]; then
	# Room after the last suite for the closing kmemleak scans.
	deadline=$((${2:?} - 90))
	shift 2
fi
[ $# -ge 3 ] || {
	echo "usage: $0 [--deadline EPOCH] NAME SECONDS CMD... [--- NAME SECONDS CMD...]..." >&2
	exit 2
}

rc=0
# run_one NAME SECONDS CMD...
run_one() {
	local name=$1 est=$2 need t0
	shift 2
	need=$(budget_need "$est")
	if [ -n "$deadline" ] && budget_late "debug-$name" "$need" "$deadline"; then
		return
	fi
	echo "# ==== debug-$name: $*"
	t0=$SECONDS
	selftests/debug-kernel/guest.sh --no-kmemleak "$@" || rc=1
	ran+=("$name")
	budget_took "$est" $((SECONDS - t0))
	echo "# ==== debug-$name: took $((SECONDS - t0)) s (estimated $need s)"
}

suite=() ran=()
selftests/debug-kernel/guest.sh --kmemleak-start
for arg in "$@" ---; do
	if [ "$arg" = --- ]; then
		[ ${#suite[@]} -ge 3 ] || { echo "$0: a suite needs NAME SECONDS CMD" >&2; exit 2; }
		run_one "${suite[@]}"
		suite=()
	else
		suite+=("$arg")
	fi
done
if [ ${#ran[@]} -gt 0 ]; then
	what=$(printf '%s, ' "${ran[@]}")
	selftests/debug-kernel/guest.sh --kmemleak-check "${what%, }" || rc=1
fi
exit $rc
