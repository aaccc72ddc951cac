# shellcheck shell=bash
# Sourced by check-debug.sh on the host and by run-vm-tests.sh in the
# guest (whose clock is the host's: vm-run boots it from the host's RTC):
# whether the next suite still fits before make check's deadline, epoch
# seconds. A suite that runs into CI's time limit fails the whole run;
# one skipped for lack of time is visible and costs only itself.
#
# Each suite comes with an estimate of its time on our 2-core machine.
# CI machines have run up to twice as slowly, so an estimate is scaled by
# how much longer than estimated the suites before it took (never down),
# and a suite starts only with a fifth more than that left.

budget_spent=0 budget_planned=0

# budget_need EST: EST scaled by the pace so far.
budget_need() {
	if [ "$budget_planned" -gt 0 ] && [ "$budget_spent" -gt "$budget_planned" ]; then
		echo $(($1 * budget_spent / budget_planned))
	else
		echo "$1"
	fi
}

# budget_start_by NEED DEADLINE: the last moment (epoch seconds) a suite
# needing NEED seconds may start: a fifth to spare.
budget_start_by() {
	echo $(($2 - $1 * 6 / 5))
}

# budget_late NAME NEED DEADLINE: true, after a TAP skip line for NAME on
# stdout, if it is past budget_start_by.
budget_late() {
	local left=$(($3 - $(date +%s)))
	[ "$(date +%s)" -gt "$(budget_start_by "$2" "$3")" ] || return 1
	echo "ok - $1 # SKIP out of time: ${left}s left before the deadline, it needs about ${2}s"
}

# budget_took EST SECONDS: a suite estimated at EST took SECONDS.
budget_took() {
	budget_planned=$((budget_planned + $1))
	budget_spent=$((budget_spent + $2))
}
