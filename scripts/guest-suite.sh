# shellcheck shell=bash
# Sourced by check.sh and check-debug.sh: how one suite runs; a suite
# whose guest selftests/vm-run boots may get a second run.

# guest_suite NAME TAP RERUN_BY CMD...: runs CMD, its output on stdout and
# in the file TAP, and returns its status. vm-run's 122 means QEMU, not
# the kernel, failed (selftests/vm/kernel-log.sh): CMD runs once more if
# it is not yet RERUN_BY (epoch seconds), and the dead run's output stays
# beside TAP as NAME.emulator-fault.log. A CMD that fails without a
# "not ok" gets one, with vm-run's diagnosis just above it: CI keeps only
# the end of the log, and tap-summary.sh repeats the comments above a
# failure.
guest_suite() {
	local name=$1 tap=$2 rerun_by=$3 rc
	local dead_log
	dead_log=$(dirname "$tap")/$name.emulator-fault.log
	shift 3
	"$@" 2>&1 | tee "$tap"
	rc=${PIPESTATUS[0]}
	if [ "$rc" -eq 122 ] && [ "$(date +%s)" -le "$rerun_by" ]; then
		mv "$tap" "$dead_log"
		echo "# ==== $name: the emulator failed (its log: $dead_log); running it again, once"
		"$@" 2>&1 | tee "$tap"
		rc=${PIPESTATUS[0]}
	fi
	if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$tap"; then
		{
			grep -E '^vm-run: (the guest|emulator|timed out)' "$tap" |
				tail -n 3 | sed 's/^/# /'
			echo "not ok - $name exited with status $rc"
		} | tee -a "$tap"
	fi
	return "$rc"
}

# The suites that ran twice, said where CI keeps the log: DIR...
say_reruns() {
	local d f
	for d in "$@"; do
		for f in "$d"/*.emulator-fault.log; do
			[ -e "$f" ] || continue
			echo "# $(basename "$f" .emulator-fault.log) ran twice: the first guest died of an emulator fault ($(grep -m1 -o "the guest's kernel: .*" "$f"))"
		done
	done
}
