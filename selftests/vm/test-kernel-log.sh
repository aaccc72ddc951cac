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

# A kernel WARNING's report, which an oops may follow.
warning() {
	cat <<-END
	[    5.000000] WARNING: CPU: 0 PID: 1 at net/core/dev.c:1 f+0x1/0x2
	[    5.000100] RIP: 0010:warned_here+0x10/0x20
	[    5.000200] RSP: 0018:ffffc90000093d00 EFLAGS: 00010246
	END
}

echo "TAP version 13"
# CI's 6.12 guest, the death 96674f3 answers (see kernel-log.sh).
oops 04c47406 >"$dir/ci"
impossible_cpu_state "$dir/ci"
check $? "EFLAGS 04c47406 (bits 22, 23, 26) is the emulator's"
# TF, IF, DF, OF, IOPL, NT, RF, VM, AC, VIF, VIP, ID: each a CPU can hold.
for f in 00010246 00000086 00050202 00000002 00247ed7 00000102 003a0202 \
	003f7fd7 0000000000000202; do
	oops "$f" >"$dir/ok"
	! impossible_cpu_state "$dir/ok"
	check $? "EFLAGS $f is a state a CPU can be in"
done
# Bits 3, 5, 15, 22, 32 and 63 are reserved; bit 1 is always set.
for f in 0000000a 00000022 00008202 00400202 0000000100000202 \
	8000000000000202 ffffffffffffffff 00000200; do
	oops "$f" >"$dir/bad"
	impossible_cpu_state "$dir/bad"
	check $? "EFLAGS $f (a reserved bit set, or bit 1 clear) is the emulator's"
done
# Only the last kernel-mode dump, the fatal one, counts: other frames'
# flags are read from memory.
{ oops 00010246; oops 04c47406; } >"$dir/two"
impossible_cpu_state "$dir/two"
check $? "impossible flags in the last dump are the emulator's"
{ oops 04c47406; oops 00010246; } >"$dir/two"
! impossible_cpu_state "$dir/two"
check $? "impossible flags in an earlier dump only are not"
{ oops 00010246; echo "[  140.000000] RSP: 002b:00007ffd12345678 EFLAGS: 04c47406"; } >"$dir/user"
! impossible_cpu_state "$dir/user"
check $? "a user-mode dump (SS 002b) is not the kernel's"
{ oops 00010246; echo "EFLAGS: 0x246 EFLAGS: 00000000"; } >"$dir/text"
! impossible_cpu_state "$dir/text"
check $? "EFLAGS in a line that is not a kernel register dump is ignored"
oops 100000000000000202 >"$dir/long"
! impossible_cpu_state "$dir/long"
check $? "flags longer than 16 hex digits are not read (they would wrap)"
printf '[    1.0] booted\n[    2.0] no oops here\n' >"$dir/none"
! impossible_cpu_state "$dir/none"
check $? "a log without an oops is not the emulator's fault"

kernel_report "$dir/ci" 3 >"$dir/report"
[ "$(head -n1 "$dir/report")" = "[  139.288000] BUG: kernel NULL pointer dereference, address: 0000000000000008" ] &&
	[ "$(wc -l <"$dir/report")" -eq 3 ]
check $? "kernel_report starts at the first problem and keeps LINES lines"
[ "$(kernel_problem "$dir/ci")" = "BUG: kernel NULL pointer dereference, address: 0000000000000008; RIP: 0010:net_rx_action+0xec/0x420" ]
check $? "kernel_problem names the problem and its RIP on one line"
{ warning; oops 00010246; } >"$dir/warned"
[ "$(kernel_problem "$dir/warned")" = "BUG: kernel NULL pointer dereference, address: 0000000000000008; RIP: 0010:net_rx_action+0xec/0x420" ]
check $? "kernel_problem names the fatal oops, not a WARNING before it"
[ "$(last_report_at "$dir/warned")" = 5 ] &&
	[ "$(kernel_report "$dir/warned" 1 "$(last_report_at "$dir/warned")")" = "[  139.288000] BUG: kernel NULL pointer dereference, address: 0000000000000008" ]
check $? "kernel_report from last_report_at starts at the fatal oops"
{ warning; echo "[    6.000000] Oops: general protection fault, probably for non-canonical address 0xdead: 0000 [#1] PREEMPT SMP NOPTI"; } >"$dir/gpf"
[ "$(kernel_problem "$dir/gpf")" = "Oops: general protection fault, probably for non-canonical address 0xdead: 0000 [#1] PREEMPT SMP NOPTI" ]
check $? "a 6.12 general protection fault (\"Oops: general ...\") opens a report"
seq 100 >"$dir/plain"
[ "$(kernel_problem "$dir/plain")" = "no problem reported" ]
check $? "kernel_problem of a log without a problem says so"

kernel_report "$dir/plain" 120 >"$dir/report"
[ "$(head -n1 "$dir/report")" = 61 ] && [ "$(wc -l <"$dir/report")" -eq 40 ]
check $? "kernel_report of a log without a problem is its last 40 lines"

echo "1..$n"
[ "$failed" -eq 0 ]
