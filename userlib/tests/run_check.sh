#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Run libp3's host tests: the C suites, the same suites under ASan+UBSan,
# the libFuzzer targets for a bounded time, and the Python binding tests.
# Every suite prints TAP lines; a suite that dies (signal, sanitizer) gets
# one extra "not ok" line so it cannot pass by printing nothing.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
: "${BUILD:=$HERE/../../build}"
: "${PYTHON:=/usr/bin/python3}"
: "${FUZZ_TIME:=20}"
: "${TESTS:=test_frame test_plan}"
: "${FUZZERS:=}"
BUILD=$(cd "$BUILD" && pwd)
O=$BUILD/userlib
OA=$BUILD/userlib-asan
OF=$BUILD/userlib-fuzz
failed=0

# Sanitizer failures exit with codes no test uses on its own.
export ASAN_OPTIONS=exitcode=86:detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87
export TSAN_OPTIONS=exitcode=88:halt_on_error=1:second_deadlock_stack=1

run_suite() {	# name prefix binary...
	local name=$1 prefix=$2 rc
	shift 2
	echo "# suite: $name"
	TAP_PREFIX=$prefix "$@"
	rc=$?
	if [ $rc -eq 1 ]; then
		failed=1
	elif [ $rc -ne 0 ]; then
		echo "not ok 1 - ${prefix}$name exited with status $rc (crash or sanitizer report)"
		failed=1
	fi
}

for t in $TESTS; do
	run_suite "$t" "" "$O/$t"
done
run_suite abi "abi: " "$HERE/test_abi.sh" "$O" "${VERSION:?}"
run_suite doctor "" "$HERE/test_doctor.sh" "$O/p3ctl"
run_suite doctor "asan: " "$HERE/test_doctor.sh" "$OA/p3ctl"
run_suite run "" "$PYTHON" "$HERE/test_run.py" "$O/p3ctl"
run_suite run "asan: " "$PYTHON" "$HERE/test_run.py" "$OA/p3ctl"
for t in $TESTS; do
	run_suite "$t" "asan: " "$OA/$t"
done
for t in ${TSAN_TESTS:-}; do
	run_suite "$t" "tsan: " "$BUILD/userlib-tsan/$t"
done

run_fuzzer() {	# name seconds -> TAP line
	local f=$1 secs=$2 dir log execs crashes
	dir=$OF/corpus-$f
	log=$OF/$f.log
	mkdir -p "$dir" "$OF/artifacts-$f"
	P3_FUZZ_SEEDS=$dir "$OF/$f" -max_total_time="$secs" -print_final_stats=1 \
		-timeout=10 -rss_limit_mb=1024 -artifact_prefix="$OF/artifacts-$f/" \
		"$dir" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	crashes=$(find "$OF/artifacts-$f" -type f | wc -l)
	if [ $rc -eq 0 ] && [ "$crashes" -eq 0 ] && [ -n "$execs" ]; then
		echo "ok - $f: ${execs} execs in ${secs}s, 0 crashes"
	else
		echo "not ok - $f: exit $rc, ${execs:-?} execs, $crashes crash files (see $log)"
	fi
}

if [ -n "$FUZZERS" ]; then
	echo "# suite: fuzzers (${FUZZ_TIME}s each, two at a time)"
	n=0
	set -- $FUZZERS
	while [ $# -gt 0 ]; do
		a=$1; shift
		b=${1:-}; [ $# -gt 0 ] && shift
		run_fuzzer "$a" "$FUZZ_TIME" >"$OF/$a.tap" &
		[ -n "$b" ] && run_fuzzer "$b" "$FUZZ_TIME" >"$OF/$b.tap" &
		wait
		for f in $a $b; do
			n=$((n + 1))
			line=$(cat "$OF/$f.tap")
			echo "${line/ok - /ok $n - }"
			case $line in not*) failed=1 ;; esac
		done
	done
fi

run_python() {	# interpreter name script
	echo "# suite: $2 ($1)"
	P3_LIB=$O/libp3.so PYTHONPATH=$HERE/../python "$1" "$3"
	rc=$?
	if [ $rc -gt 1 ]; then
		echo "not ok 1 - $2 suite under $1 exited with status $rc"
	fi
	[ $rc -ne 0 ] && failed=1
}

run_python "$PYTHON" python "$HERE/test_python.py"

# p3.torch under each torch its users have: Debian's (PYTHON, torch 1.13)
# and pip's 2.x in the venv scripts/torch-venv.sh makes (TORCH2_PYTHON
# names another interpreter; empty, none).
if [ -z "${TORCH2_PYTHON+set}" ]; then
	echo "# suite: the venv of pip's torch 2.x"
	if ! TORCH2_PYTHON=$("$HERE/../../scripts/torch-venv.sh"); then
		echo "not ok 1 - scripts/torch-venv.sh could not make the venv of pip's torch"
		failed=1
		TORCH2_PYTHON=
	fi
fi
# The newest torch runs every suite.  Slim-DP's and bounded loss's
# wire forms are numpy's, and the many-rank jobs' start-up and failure
# paths torchrun's: Debian's 1.13 leaves those to it (CI's minutes).
newest=${TORCH2_PYTHON:-$PYTHON}
for py in "$PYTHON" $TORCH2_PYTHON; do
	# Two ranks as processes over loopback (exactness, failure).
	run_python "$py" torch "$HERE/test_torch.py"
	if [ "$py" = "$newest" ]; then
		# Slim-DP sparsification and stats() (bytes, determinism,
		# hostile slices); bounded loss (DLCP).
		run_python "$py" torch-sparse "$HERE/test_torch_sparse.py"
		run_python "$py" torch-dlcp "$HERE/test_torch_dlcp.py"
	fi
	# The habits of a DDP script (schedulers, accumulation, clipping,
	# buffers, unused parameters, bfloat16, resume), each against DDP.
	run_python "$py" torch-habits "$HERE/test_torch_habits.py"
	# What torch 2.x users do: torch.compile, CPU autocast with
	# GradScaler, each against DDP (skipped on 1.13).
	run_python "$py" torch2 "$HERE/test_torch2.py"
	# Horovod's optimizer arguments, the traps of a DDP or Horovod script
	# that strays from docs/torch.md, and a Horovod script moved by its
	# import line; Horovod's collectives.
	run_python "$py" torch-horovod "$HERE/test_torch_horovod.py"
	run_python "$py" torch-collectives "$HERE/test_torch_collectives.py"
	# 3 ranks: a rank done and closed while another still waits for a
	# third (no barrier); 16 ranks under torchrun: DDP's parameters, its
	# thread count + 4, a rank's death raised on every survivor, start-up
	# (70-115 s, and 30-60 s for the 3-rank jobs, on a loaded 2-core host).
	if [ "$py" = "$newest" ]; then
		run_python "$py" torch-ranks "$HERE/test_torch_ranks.py"
	fi
done

exit $failed
