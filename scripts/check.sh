#!/bin/bash
# The body of `make check`: builds, host tests, the VM selftests on every
# installed kernel, then the CI-sized debug-kernel pass (building the debug
# kernel first if this machine has not). Each suite prints TAP; all of it
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
suite userlib make --no-print-directory -C userlib check WERROR=1 BUILD="$top/build"
suite units dist/test_units.sh "$top/build/userlib/p3ctl"
suite deb dist/test_deb.sh
suite models /usr/bin/python3 bench/train/test_models.py
suite scale /usr/bin/python3 bench/scale/test_project.py
suite vm-tools selftests/vm/test-kernel-log.sh
suite time-budget scripts/test-time-budget.sh
# The debug-kernel pass (make check-debug), CI-sized, in two parts. Its
# kernel is built once per machine (minutes; selftests/debug-kernel/
# build.sh). A TCG guest keeps one core busy, so the first part runs on
# the other, at nice 19, while the stock kernels' guests run: the
# kernel's build, then the suites that measure no time (the fuzzer,
# churn, fault injection, tdc), in a guest of their own beside the
# stock one. The VM selftests, which time traffic, run after the stock
# guests.
rm -rf build/check-debug
early=
if selftests/debug-kernel/build.sh --install-deps; then
	(
		echo "# ==== debug (nlfuzz, churn, faults, tdc): began at $((SECONDS / 60)) min, beside the stock guests"
		nice -n 19 selftests/debug-kernel/build.sh \
			>"$out/debug-kernel-build.log" 2>&1 &&
			P3_VM_PARALLEL=1 nice -n 19 scripts/check-debug.sh --quick \
				--deadline "$deadline" --only nlfuzz --only churn \
				--only faults --only tdc
		rc=$?
		echo "# ==== debug (nlfuzz, churn, faults, tdc): ended at $((SECONDS / 60)) min"
		exit $rc
	) >"$out/debug-early.log" 2>&1 &
	early=$!
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
	selftests/vm-run --kernel "$k" --timeout "$timeout" -- \
		selftests/run-vm-tests.sh "$k" "$@" --deadline "$deadline"
}
kernels=($(selftests/vm-run --list-kernels))
for k in "${kernels[@]}"; do
	userspace=()
	[ "$k" = "${kernels[-1]}" ] && userspace=(--userspace)
	suite "vm-$k" stock_guest "$k" "${userspace[@]}"
done
# If the first part is still running, the VM selftests start beside it
# rather than wait: both are the debug kernel's, at the same pace.
suite debug-vm env ${early:+P3_VM_PARALLEL=1} scripts/check-debug.sh \
	--quick --deadline "$deadline" --only vm
if [ -n "$early" ]; then
	wait "$early"
	rc=$?
	# Its TAP, and its verdict if it died without one.
	tee "$out/debug-early.tap" <"$out/debug-early.log"
	if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$out/debug-early.tap"; then
		echo "not ok - debug (nlfuzz, churn, faults, tdc) exited with status $rc" |
			tee -a "$out/debug-early.tap"
	fi
fi

say_reruns "$out" build/check-debug
scripts/tap-summary.sh "$out"/*.tap
