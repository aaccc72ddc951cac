# shellcheck shell=bash
# Sourced by vm-run (and selftests/vm/test-kernel-log.sh): what a guest's
# kernel log says when something went wrong.

# The lines that open a kernel's report of a problem.
problem_re='\] (WARNING:|BUG:|kernel BUG|Oops|general protection|watchdog: BUG|UBSAN:|INFO: task|Kernel panic)'

# The line in kernel log FILE where its last report of a problem opens;
# empty if it has none. A panic's "Kernel panic" line and an oops's
# "Oops: 0002 [#1]" line belong to the report they follow, and a WARNING
# met on the way to a fatal oops opens an earlier one.
last_report_at() {
	grep -n -E "$problem_re" "$1" |
		grep -v -E 'Kernel panic|Oops: [0-9a-f]{4} \[#' |
		tail -n 1 | cut -d: -f1
}

# The fatal problem in kernel log FILE and where it was, on one line: the
# last report's first line and the first RIP after it, kernel code's (CS
# 0010) if there is one: a trace also shows the user RIP.
kernel_problem() {
	local from report what where
	from=$(last_report_at "$1")
	report=$(tail -n +"${from:-1}" "$1")
	what=$(grep -m1 -E "$problem_re" <<<"$report" | sed 's/^\[[^]]*\] //')
	where=$(grep -m1 -o -E 'RIP: 0010:[^ ]+' <<<"$report" ||
		grep -m1 -o -E 'RIP: [0-9a-f]{4}:[^ ]+' <<<"$report")
	echo "${what:-no problem reported}${where:+; $where}"
}

# Kernel log FILE from line FROM (default: its first report of a
# problem), up to LINES lines; its last 40 lines if it has no report.
kernel_report() {
	local from=${3:-}
	[ -n "$from" ] ||
		from=$(grep -n -m1 -E "$problem_re" "$1" | cut -d: -f1)
	if [ -n "$from" ]; then
		tail -n +"$from" "$1" | head -n "$2"
	else
		tail -n 40 "$1"
	fi
}

# True if the last kernel-mode register dump in kernel log FILE (the
# fatal oops's; SS 0018) shows RFLAGS with a reserved bit set (3, 5, 15,
# 22 and up) or bit 1 clear. The CPU pushes those flags when it takes the
# fault, and no x86 CPU can hold such a value: a guest that died so was
# killed by QEMU's emulation, not by the kernel. CI saw it once (6.12:
# EFLAGS 04c47406, which also has DF, NT and IOPL 3 in kernel code; a
# NULL dereference in net_rx_action during the traffic tests); 40 runs
# of the same tests in one guest did not bring it back. Only the last
# dump counts: the flags of other frames are read from memory, which a
# kernel bug can overwrite.
impossible_cpu_state() {
	local flags
	flags=$(grep -o -E '^\[ *[0-9.]+\] RSP: 0018:[0-9a-f]{16} EFLAGS: [0-9a-f]{8,16}( |$)' "$1" |
		tail -n 1 | sed -E 's/.*EFLAGS: ([0-9a-f]+).*/\1/')
	[ -n "$flags" ] && (( (0x$flags & ~0x3f7fd7) != 0 || (0x$flags & 2) == 0 ))
}
