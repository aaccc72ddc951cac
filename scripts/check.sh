#!/bin/bash
# The body of `make check`: the builds, then two lanes side by side: the
# VM selftests on every installed kernel, and the host tests followed by
# the CI-sized debug-kernel pass (building the debug kernel first if this
# machine has not). Each suite prints TAP; all of it
# is kept in build/check/, and the run ends with one line:
# "N passed, N failed, N skipped".
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
start=$(date +%s)
# The run must end in CI's time (.ci/run sets this): a suite that would
# not end before it is skipped, visibly (scripts/time-budget.sh).
deadline=${P3_CHECK_DEADLINE:-$((start + 84 * 60))}
out=build/check
rm -rf "$out"
mkdir -p "$out"

# shellcheck source=scripts/guest-suite.sh
. scripts/guest-suite.sh

# suite NAME CMD...: a suite that dies without saying "not ok" still fails
# the run; a guest the emulator killed runs again (guest_suite).
suite() {
	local name=$1 t0=$SECONDS
	shift
	echo "# ==== $name: $*"
	guest_suite "$name" "$out/$name.tap" "$deadline" "$@"
	echo "# ==== $name: took $((SECONDS - t0)) s"
}

suite build scripts/build-checks.sh
suite tc-parse tc/test-parse.sh
# Then two lanes, one a core, each running one guest at a time: a TCG
# guest keeps one core busy, and two guests side by side each run about
# 10% slower than alone (tdc on 6.1 and 6.12 at once: 130 s each, 117 s
# alone). The first lane starts with the newest stock kernel's guest;
# the second, at nice 19 so that it never takes the first lane's core,
# with the host suites beside the debug kernel's build (once per
# machine; selftests/debug-kernel/build.sh). Then each lane takes the
# next guest job that is left (take()), so that neither waits while the
# other has work: the other stock kernel, and the debug kernel's
# CI-sized pass (make check-debug --quick) in three guests. vm-run's
# one-guest-at-a-time lock is off.
export P3_VM_PARALLEL=1
rm -rf build/check-debug "$out/taken"
mkdir -p "$out/taken"
if selftests/debug-kernel/build.sh --install-deps; then
	(
		renice -n 19 -p "$BASHPID" >/dev/null
		selftests/debug-kernel/build.sh
	) >"$out/debug-kernel-build.log" 2>&1 &
fi

# stock_guest KERNEL ARGS...: run-vm-tests.sh in KERNEL's guest. Its
# suites skip themselves rather than run past the deadline. A guest still
# running 150 s after it (a suite far over its estimate) is stopped, a
# failure, so that the summary still comes in CI's time; one that could
# not even boot and skip before it is not started. The bound is taken
# when the guest starts: a second run, after an emulator fault, gets
# what is left then.
stock_guest() {
	local k=$1 left=$((deadline - $(date +%s))) timeout
	shift
	if [ "$left" -lt 90 ]; then
		echo "ok - vm-$k # SKIP out of time: ${left}s left before the deadline"
		return 0
	fi
	timeout=$((left + 150))
	# At most 60 minutes: 40 was too close on a slow host (a rehearsal
	# at 7a4cd65: the 6.12 guest hit it during its last suite, beside
	# the debug guest).
	[ "$timeout" -le 3600 ] || timeout=3600
	echo "# vm-$k: stopped after ${timeout}s at the latest"
	# The debug kernel, built from 6.1's source, runs this pass's
	# time-free 6.1 cases (run-vm-tests.sh --beside-debug). Its jobs are
	# always in this run (a failed build fails them), so this does not ask
	# whether the build is done: a 6.1 guest that starts before it ends
	# would run those cases twice.
	if [[ $k == 6.1.* ]]; then
		set -- "$@" --beside-debug
	fi
	selftests/vm-run --kernel "$k" --timeout "$timeout" -- \
		selftests/run-vm-tests.sh "$k" "$@" --deadline "$deadline"
}

# debug_guest SUITE...: those suites of the debug kernel's CI-sized pass,
# in one guest (build.sh waits for the build started above).
debug_guest() {
	local only=() s
	for s in "$@"; do only+=(--only "$s"); done
	scripts/check-debug.sh --quick --deadline "$deadline" "${only[@]}"
}

kernels=($(selftests/vm-run --list-kernels))
# The guest jobs, the longest first: NAME and command.
declare -A job
job["vm-${kernels[-1]}"]="stock_guest ${kernels[-1]} --userspace"
for k in "${kernels[@]:0:${#kernels[@]}-1}"; do
	job["vm-$k"]="stock_guest $k"
done
job[debug-churn]="debug_guest churn"
job[debug-fuzz-faults-tdc-parents]="debug_guest nlfuzz faults tdc parents"
job[debug-vm]="debug_guest vm"

# take NAME: true for the one lane that runs job NAME (mkdir is atomic).
take() {
	mkdir "$out/taken/$1" 2>/dev/null
}
# lane NAME...: the jobs of NAME... that no other lane took, in order.
lane() {
	local name
	for name in "$@"; do
		if take "$name"; then
			# shellcheck disable=SC2086
			suite "$name" ${job[$name]}
		fi
	done
}
others=()
for k in "${kernels[@]:0:${#kernels[@]}-1}"; do others+=("vm-$k"); done

echo "# ==== second lane: host suites, then guests: began at $((SECONDS / 60)) min"
(
	renice -n 19 -p "$BASHPID" >/dev/null
	suite userlib make --no-print-directory -C userlib check WERROR=1 BUILD="$top/build"
	suite units dist/test_units.sh "$top/build/userlib/p3ctl"
	suite pip dist/test_pip.sh
	suite ddp-models /usr/bin/python3 bench/ddp/test_models.py
	suite deb dist/test_deb.sh
	suite models /usr/bin/python3 bench/train/test_models.py
	suite scale /usr/bin/python3 bench/scale/test_project.py
	suite vm-tools selftests/vm/test-kernel-log.sh
	suite time-budget scripts/test-time-budget.sh
	lane debug-vm debug-fuzz-faults-tdc-parents debug-churn "${others[@]}"
	echo "# ==== second lane: ended at $((SECONDS / 60)) min"
) >"$out/second-lane.log" 2>&1 &
second=$!

# The second lane takes the debug kernel's jobs, the longest first, once
# its host suites are done (and the debug kernel built, once a machine);
# this one the stock kernels', then what is left, the shortest first, so
# that the lanes end within a short job of each other. With the debug
# kernel cached (CI's machine), the rehearsal at 6f4cfa7: host suites 16
# min, debug VM suites 18 (less libp3's integration since), fuzzer,
# faults, tdc and parents 17, churn 7; 6.12 34, 6.1 14
# (docs/reliability.md).
lane "vm-${kernels[-1]}" "${others[@]}" debug-churn debug-fuzz-faults-tdc-parents debug-vm

wait "$second"
rc=$?
# Its suites' output, now that the first lane's is out; a lane that died
# without saying why still fails.
cat "$out/second-lane.log"
if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$out/second-lane.log"; then
	echo "not ok - the second lane exited with status $rc" |
		tee "$out/second-lane.tap"
fi

say_reruns "$out" build/check-debug
scripts/tap-summary.sh "$out"/*.tap
