# SPDX-License-Identifier: GPL-2.0
# Sourced by the benchmark run.sh scripts: wait_quiet holds a measuring
# run back while other QEMU guests share the host, since timings taken
# under CPU contention mean nothing.  P3_BENCH_NOWAIT=1 skips the wait;
# P3_BENCH_WAIT_MAX (seconds, default 1800) bounds it, after which the run
# goes ahead with a warning.

wait_quiet() {
	local waited=0 max=${P3_BENCH_WAIT_MAX:-1800} n load
	[ "${P3_BENCH_NOWAIT:-0}" = 1 ] && return 0
	while :; do
		n=$(pgrep -c qemu-system || true)
		load=$(cut -d' ' -f1 /proc/loadavg)
		[ "${n:-0}" -eq 0 ] && return 0
		if [ "$waited" -ge "$max" ]; then
			echo "run.sh: WARNING: $n other VM(s) running (load $load);" \
				"measuring anyway, results are unreliable" >&2
			return 0
		fi
		echo "run.sh: $n other VM(s) running (load $load), waiting" >&2
		sleep 30
		waited=$((waited + 30))
	done
}
