# shellcheck shell=bash
# Sourced by vm-run (and selftests/vm/test-kernel-log.sh): what a guest's
# kernel log says when something went wrong.

# The lines that open a kernel's report of a problem.
problem_re='\] (WARNING:|BUG:|kernel BUG|Oops|general protection|watchdog: BUG|UBSAN:|INFO: task|Kernel panic)'

# The first problem in kernel log FILE and where it was, on one line.
kernel_problem() {
	local what where
	what=$(grep -m1 -E "$problem_re" "$1" | sed 's/^\[[^]]*\] //')
	# Kernel code (CS 0010) first: a trace also shows the user RIP.
	where=$(grep -m1 -o -E 'RIP: 0010:[^ ]+' "$1" ||
		grep -m1 -o -E 'RIP: [0-9a-f]{4}:[^ ]+' "$1")
	echo "${what:-no problem reported}${where:+; $where}"
}

# The first report of a problem in a kernel log FILE, and what follows it,
# up to LINES lines; the file's last 40 lines if it has none.
kernel_report() {
	local first
	first=$(grep -n -m1 -E "$problem_re" "$1" | cut -d: -f1)
	if [ -n "$first" ]; then
		tail -n +"$first" "$1" | head -n "$2"
	else
		tail -n 40 "$1"
	fi
}

# True if an oops in kernel log FILE shows RFLAGS with a reserved bit set
# (3, 5, 15, 22 and up) or bit 1 clear. The CPU pushes those flags when
# the fault is taken, and no x86 CPU can hold such a value: a guest that
# died so was killed by QEMU's emulation, not by the kernel. CI saw it
# once (6.12: EFLAGS 04c47406, which also has DF, NT and IOPL 3 in kernel
# code; a NULL dereference in net_rx_action during the traffic tests);
# 40 runs of the same tests in one guest did not bring it back.
impossible_cpu_state() {
	local flags
	for flags in $(grep -o -E 'EFLAGS: [0-9a-f]+' "$1" | cut -d' ' -f2); do
		(( (0x$flags & ~0x3f7fd7) != 0 || (0x$flags & 2) == 0 )) && return 0
	done
	return 1
}
