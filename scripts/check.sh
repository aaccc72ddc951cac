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
out=build/check
rm -rf "$out"
mkdir -p "$out"

# A suite that dies without saying "not ok" still fails the run.
suite() {
	local name=$1 rc t0=$SECONDS
	shift
	echo "# ==== $name: $*"
	"$@" 2>&1 | tee "$out/$name.tap"
	rc=${PIPESTATUS[0]}
	if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$out/$name.tap"; then
		echo "not ok - $name exited with status $rc" | tee -a "$out/$name.tap"
	fi
	echo "# ==== $name: took $((SECONDS - t0)) s"
}

suite build scripts/build-checks.sh
suite tc-parse tc/test-parse.sh
suite userlib make --no-print-directory -C userlib check WERROR=1 BUILD="$top/build"
suite units dist/test_units.sh "$top/build/userlib/p3ctl"
suite deb dist/test_deb.sh
suite models /usr/bin/python3 bench/train/test_models.py
# The debug kernel (built once per machine) builds in the background
# while the stock kernels' guests run: a TCG guest keeps one core busy,
# and the build, at nice 19, takes the other instead of 6 minutes of both
# later. The debug pass below waits for it (build.sh's lock).
if ! selftests/debug-kernel/build.sh --print-dir >/dev/null; then
	if selftests/debug-kernel/build.sh --install-deps; then
		nice -n 19 selftests/debug-kernel/build.sh >"$out/debug-kernel-build.log" 2>&1 &
	fi
fi
kernels=($(selftests/vm-run --list-kernels))
for k in "${kernels[@]}"; do
	userspace=
	[ "$k" = "${kernels[-1]}" ] && userspace=--userspace
	suite "vm-$k" selftests/vm-run --kernel "$k" --timeout 2400 -- \
		selftests/run-vm-tests.sh "$k" $userspace
done
# The debug-kernel pass (make check-debug), CI-sized. Its kernel is built
# once per machine (minutes; see selftests/debug-kernel/build.sh). The
# pass skips, visibly, a suite that would not end by $P3_CHECK_DEADLINE
# (.ci/run sets it), or 80 minutes after this started.
suite debug scripts/check-debug.sh --quick \
	--deadline "${P3_CHECK_DEADLINE:-$((start + 80 * 60))}"

passed=$(cat "$out"/*.tap | grep -E '^ok\b' | grep -vc '# SKIP')
skipped=$(cat "$out"/*.tap | grep -E '^ok\b' | grep -c '# SKIP')
failed=$(cat "$out"/*.tap | grep -cE '^not ok\b')
echo
grep -hE '^not ok\b' "$out"/*.tap | sed 's/^/FAILED: /'
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
