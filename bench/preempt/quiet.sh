# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
# Sourced by the benchmark run.sh scripts.  Timings taken while another
# TCG guest (or a compiler) shares the 2-core host mean nothing, so
# bench_lock takes vm-run's one-guest-at-a-time lock for the whole run,
# then waits until no guest that ignores the lock runs and the load has
# settled.  The caller then runs vm-run with P3_VM_PARALLEL=1 (it holds
# the lock already).  P3_BENCH_NOWAIT=1 skips the waiting (not the lock);
# P3_BENCH_WAIT_MAX (seconds, default 1800) bounds it, after which the run
# goes ahead with a warning.

# Builds what a benchmark boots with (module, tc plugin) if this tree has
# not built it for KERNEL yet, and the flood sender.
bench_build() {
	local kernel=$1
	if ! ls build/kmod/"$kernel"*/sch_p3.ko >/dev/null 2>&1 ||
		[ ! -f build/tc/q_p3.so ]; then
		echo "run.sh: building the module and the tc plugin" >&2
		make --no-print-directory module tc >&2
	fi
	make --no-print-directory udpflood >&2
}

bench_lock() {
	local waited=0 max=${P3_BENCH_WAIT_MAX:-1800} n load
	exec 9>>/tmp/p3-vm-run.lock
	if ! flock -n 9; then
		echo "run.sh: waiting for another guest to finish (vm-run lock)" >&2
		flock 9
	fi
	[ "${P3_BENCH_NOWAIT:-0}" = 1 ] && return 0
	while :; do
		n=$(pgrep -c qemu-system || true)
		load=$(cut -d' ' -f1 /proc/loadavg)
		if [ "${n:-0}" -eq 0 ] && awk "BEGIN { exit !($load < 1.0) }"; then
			return 0
		fi
		if [ "$waited" -ge "$max" ]; then
			echo "run.sh: WARNING: host busy ($n other guest(s), load" \
				"$load); measuring anyway, results are unreliable" >&2
			return 0
		fi
		echo "run.sh: host busy ($n other guest(s), load $load), waiting" >&2
		sleep 30
		waited=$((waited + 30))
	done
}

bench_unlock() {
	exec 9>&-
}

# bench_run NAME KERNEL OUT TIMEOUT [vm-run options] -- [NAME.py options]:
# bench/NAME/NAME.py in one guest of KERNEL, alone on the host and with
# the host's load recorded (OUT/hostmon.json), then bench/NAME/report.py
# on what it wrote.  Returns the benchmark's exit status.
bench_run() {
	local name=$1 kernel=$2 out=$3 timeout=$4 vm=() rc=0 mon
	shift 4
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		vm+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	bench_build "$kernel"
	mkdir -p "$out"
	bench_lock
	/usr/bin/python3 bench/preempt/hostmon.py "$out/hostmon.json" &
	mon=$!
	P3_VM_PARALLEL=1 selftests/vm-run --kernel "$kernel" "${vm[@]}" --timeout "$timeout" -- \
		/usr/bin/python3 "bench/$name/$name.py" --out "$out" "$@" || rc=$?
	kill $mon
	wait $mon || true
	bench_unlock
	[ $rc -eq 0 ] || echo "run.sh: the benchmark exited $rc" >&2
	[ -f "$out/results.json" ] || return $rc
	/usr/bin/python3 "bench/$name/report.py" "$out" >/dev/null
	echo "run.sh: report in $out/results.md" >&2
	return $rc
}
