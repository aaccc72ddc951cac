#!/bin/bash
# TAP tests of scripts/time-budget.sh: when a suite is skipped for lack
# of time, and how the pace of the suites before it scales its estimate.
set -uo pipefail
cd "$(dirname "$0")" || exit 1
# shellcheck source=scripts/time-budget.sh
. ./time-budget.sh
n=0 failed=0

# expect NAME WANT GOT
expect() {
	n=$((n + 1))
	if [ "$2" = "$3" ]; then
		echo "ok $n - $1"
	else
		failed=$((failed + 1))
		echo "# wanted: $2"
		echo "# got:    $3"
		echo "not ok $n - $1"
	fi
}

now=$(date +%s)
expect "no pace yet: the estimate as it is" 100 "$(budget_need 100)"
budget_took 100 80
expect "suites faster than estimated do not scale it down" 100 "$(budget_need 100)"
budget_took 100 220
expect "suites 1.5 times slower scale it by 1.5" 150 "$(budget_need 100)"

# A fifth to spare: 100 s of need wants 120 s left. The margins keep a
# second ticking over between date calls from flipping the answer.
budget_late x 100 $((now + 200)) >/dev/null
expect "with time to spare the suite runs" 1 $?
skip=$(budget_late "6.1: p3_torch.py" 100 $((now + 110)))
expect "without a fifth to spare it is skipped" 0 $?
case $skip in
"ok - 6.1: p3_torch.py # SKIP out of time: 1"[01][0-9]"s left before the deadline, it needs about 100s") got=yes ;;
*) got=$skip ;;
esac
expect "the skip is a TAP line: the suite, the time left and the time needed" yes "$got"
budget_late x 100 $((now - 5)) >/dev/null
expect "past the deadline everything is skipped" 0 $?

echo "1..$n"
[ "$failed" -eq 0 ]
