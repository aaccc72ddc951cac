#!/bin/bash
# TAP tests of selftests/vm/kernel-log.sh on kernel logs as guests print
# them: which deaths are the emulator's, and what vm-run shows of a log.
set -uo pipefail
cd "$(dirname "$0")" || exit 1
# shellcheck source=selftests/vm/kernel-log.sh
. ./kernel-log.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
n=0 failed=0

check() {	# check STATUS NAME
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n - $2"
	else
		failed=$((failed + 1))
		echo "not ok $n - $2"
	fi
}

# An oops's register lines, with FLAGS in its EFLAGS field.
oops() {
	cat <<-END
	[   10.000000] booted
	[  139.288000] BUG: kernel NULL pointer dereference, address: 0000000000000008
	[  139.290250] RIP: 0010:net_rx_action+0xec/0x420
	[  139.290448] RSP: 0018:ffffc90000093d78 EFLAGS: $1
	[  139.290504] RAX: 0000000000000000 RBX: ffff88807dc37340 RCX: ffff88807dc37488
	[  139.291148] Kernel panic - not syncing: Fatal exception in interrupt
	END
}

echo "TAP version 13"
# CI's 6.12 guest, session 28 (see kernel-log.sh).
oops 04c47406 >"$dir/ci"
impossible_cpu_state "$dir/ci"
check $? "EFLAGS 04c47406 (bits 22, 23, 26) is the emulator's"
for f in 00010246 00000086 00050202 00000002 00247ed7; do
	oops "$f" >"$dir/ok"
	! impossible_cpu_state "$dir/ok"
	check $? "EFLAGS $f is a state a CPU can be in"
done
for f in 0000000a 00008202 00400202 0000000100000202 00000200; do
	oops "$f" >"$dir/bad"
	impossible_cpu_state "$dir/bad"
	check $? "EFLAGS $f (a reserved bit set, or bit 1 clear) is the emulator's"
done
# A second oops with impossible flags after a first, normal one counts.
{ oops 00010246; oops 04c47406; } >"$dir/two"
impossible_cpu_state "$dir/two"
check $? "impossible flags in a later oops are found"
printf '[    1.0] booted\n[    2.0] no oops here\n' >"$dir/none"
! impossible_cpu_state "$dir/none"
check $? "a log without an oops is not the emulator's fault"

kernel_report "$dir/ci" 3 >"$dir/report"
[ "$(head -n1 "$dir/report")" = "[  139.288000] BUG: kernel NULL pointer dereference, address: 0000000000000008" ] &&
	[ "$(wc -l <"$dir/report")" -eq 3 ]
check $? "kernel_report starts at the first problem and keeps LINES lines"
[ "$(kernel_problem "$dir/ci")" = "BUG: kernel NULL pointer dereference, address: 0000000000000008; RIP: 0010:net_rx_action+0xec/0x420" ]
check $? "kernel_problem names the first problem and its RIP on one line"
seq 100 >"$dir/plain"
[ "$(kernel_problem "$dir/plain")" = "no problem reported" ]
check $? "kernel_problem of a log without a problem says so"

kernel_report "$dir/plain" 120 >"$dir/report"
[ "$(head -n1 "$dir/report")" = 61 ] && [ "$(wc -l <"$dir/report")" -eq 40 ]
check $? "kernel_report of a log without a problem is its last 40 lines"

echo "1..$n"
[ "$failed" -eq 0 ]
