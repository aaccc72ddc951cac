#!/bin/bash
# Runs inside the selftest VM (see selftests/vm-run): every kernel-side
# suite, one after the other, each printing TAP.  `make check` calls it
# once per kernel:
#   selftests/vm-run --kernel K -- selftests/run-vm-tests.sh K --deadline T
# and adds --userspace for one of them (the newest): the suites that test
# libp3 and p3.torch over the qdisc, whose outcome does not depend on
# which kernel carries the packets, run there only. With --deadline EPOCH
# a suite that would not end before it is skipped, visibly. --only NAME
# and --skip NAME (repeatable; NAME is a suite's file name without p3_
# or vm_ and its extension: traffic, parents, integration...) pick suites, so
# that make check can run the debug kernel's in two guests side by side.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/time-budget.sh
. scripts/time-budget.sh
kernel=${1:-$(uname -r)}
[ $# -eq 0 ] || shift
# --quick (the debug kernel, in make check): see below.
userspace=0 quick=0 beside_debug=0 deadline=
only=() skip=() seen=()
while [ $# -gt 0 ]; do
	case $1 in
	--userspace) userspace=1; shift ;;
	--quick) quick=1; shift ;;
	--beside-debug) beside_debug=1; shift ;;
	--deadline) deadline=${2:?}; shift 2 ;;
	--only) only+=("${2:?}"); shift 2 ;;
	--skip) skip+=("${2:?}"); shift 2 ;;
	*) echo "usage: $0 [KERNEL [--userspace] [--quick] [--beside-debug]" \
		"[--only SUITE]... [--skip SUITE]... [--deadline EPOCH]]" >&2
		exit 2 ;;
	esac
done
rc=0

# run SECONDS CMD...: SECONDS is what the suite takes in a stock kernel's
# guest on our 2-core machine beside make check's debug guest (the
# rehearsal of CI at 92553ba, the slower of 6.1 and 6.12), for the
# deadline.
run() {
	local est=$1 t0=$SECONDS need suite
	shift
	suite=$1
	[ "$suite" != /usr/bin/python3 ] || suite=$2
	picked "$suite" || return 0
	if [ -n "$deadline" ]; then
		need=$(budget_need "$est")
		budget_late "$kernel: $(basename "$suite")" "$need" "$deadline" && return
	fi
	echo "# ---- $*"
	"$@" || rc=1
	echo "# ---- took $((SECONDS - t0)) s: $1 ${2:-}"
	budget_took "$est" $((SECONDS - t0))
}

# picked PATH: true if --only and --skip leave the suite at PATH in.
picked() {
	local name
	name=$(basename "$1")
	name=${name%.*}
	name=${name#p3_}
	name=${name#vm_}
	seen+=("$name")
	if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then
		return 1
	fi
	[[ " ${skip[*]} " != *" $name "* ]]
}

# est STOCK DEBUG: a suite's estimate on this kernel. The debug kernel's
# are the --quick suites alone on our 2-core machine (2026-11-28:
# traffic 568 and 647 s with own_rate (63 and 91 s of them), 456 without,
# overload 294, deadline 225, libp3 169 and 191); the pace of
# the suites before scales them as it does the stock ones.
est() {
	if [ "$kernel" = debug ]; then echo "$2"; else echo "$1"; fi
}

# The debug kernel (KASAN, lockdep, kmemleak) runs several times slower
# under emulation: a link slow enough that it, not the CPU, is still the
# bottleneck. Its tdc run is a guest of its own (scripts/check-debug.sh),
# which make check starts beside the stock kernels' guests: tdc measures
# no time, so it does not mind sharing the machine.
traffic_args=() overload_args=()
if [ "$kernel" = debug ]; then
	traffic_args=(--rate 4mbit)
	overload_args=(--accounting-only)
fi
# The debug kernel is there for memory and lock errors, which depend on
# the code a test reaches, not on how well it measures. Quick (make
# check's pass, in CI's time) leaves out the traffic tests whose kernel
# paths another suite of the same pass reaches: the urgent latency and
# the re-tagged flow (strict_priority, and tdc's re-tag case), the same
# through spilled packets (flows_cap's spill index and shared flows),
# the tag sources (tdc's case for each), the module unload (churn: 5
# reloads with qdiscs live), the pacer's accuracy, alone and beside
# small urgent packets (p3's own pacer sets strict_priority's link
# rate; the stock kernels measure its
# accuracy: on this one the guest is too short of CPU to, and a 12 s
# window came out 1.7% slow on 2026-11-28), and the prio control (no p3
# code at all), and p3 under tbf and htb and tbf's peek (the parents
# suite's cases, which it runs here). Of the overload accounting
# cases (5 parents, each overflowed by packet count and by memory) it
# runs each parent once and each way of overflowing at least twice:
# every parent's notification path and both of p3's drop paths.
# These are lists of what is left out, so that a test added later runs
# until someone decides otherwise; a name that no longer exists fails.
quick_traffic_out=(urgent_latency no_reorder no_reorder_spilled
	reorder_control_prio tag_sources lifecycle own_rate
	own_rate_small_urgent under_tbf under_htb peek_under_tbf)
quick_overload_out=(tbf_memory htb_limit drr_memory hfsc_limit ets_memory)
debug_parents=(tbf htb hfsc qfq drr)
if [ $quick -eq 1 ]; then
	for t in "${quick_traffic_out[@]}"; do traffic_args+=(-x "$t"); done
	for t in "${quick_overload_out[@]}"; do
		overload_args+=(-x "accounting_under_$t")
	done
	# The cap's flood sends 540 datagrams a second on this kernel: a
	# fifth of them (37 s) overflow the cap as well; the spill, recycling
	# and GC paths are the same. make check-debug floods all 100,000.
	traffic_args+=(--flood-dests 20000)
fi
# --beside-debug (make check, for the stock 6.1 kernel, when its pass
# runs the debug kernel too): the debug kernel is built from the same
# source (linux-source-6.1, the same Debian version), so what that pass
# runs there, none of which measures time, is not run twice for 6.1.
# That is the deadline suite, churn, the traffic and overload cases of
# its quick pass and the parents it runs (and libp3's integration, a
# user-space suite the newest kernel runs); 6.1
# keeps the cases that time or pace (those the quick pass leaves out)
# and the goodput ones (too slow for the debug kernel). The host says
# so: the guest does not see the debug kernel's cache.
same_as_debug=$beside_debug
parents=()
if [ $same_as_debug -eq 1 ]; then
	for t in "${quick_traffic_out[@]}"; do traffic_args+=(-t "$t"); done
	for t in tbf_limit htb_memory drr_limit hfsc_memory ets_limit; do
		overload_args+=(-x "accounting_under_$t")
	done
	overload_args+=(-x accounting_peeked_stays)
	for t in "${debug_parents[@]}"; do parents+=(-x "$t"); done
fi
if [ "$kernel" != debug ]; then
	run 190 /usr/bin/python3 selftests/tdc.py -f selftests/tc-tests/*.json
fi
run "$(est 430 520)" /usr/bin/python3 selftests/p3_traffic.py "${traffic_args[@]}" --prefix "$kernel: "
run "$(est 345 300)" /usr/bin/python3 selftests/p3_overload.py "${overload_args[@]}" --prefix "$kernel: "
if [ $same_as_debug -eq 0 ]; then
	run "$(est 75 225)" /usr/bin/python3 selftests/p3_deadline.py --prefix "$kernel: "
	# libp3's channels over the qdisc: a user-space suite (the newest
	# stock kernel runs it); the debug kernel's quick pass leaves it to
	# make check-debug (224 s of CI's critical lane).
	if [ -x userlib/tests/vm_integration.sh ] && [ $quick -eq 0 ]; then
		run "$(est 100 200)" userlib/tests/vm_integration.sh
	fi
fi
# p3 beneath every kind of parent (the debug kernel: tbf, htb and drr, and
# those that peek: hfsc and qfq act on a peek in a later call).
if [ "$kernel" = debug ]; then
	for t in "${debug_parents[@]}"; do parents+=(-t "$t"); done
	parents+=(--rate 10mbit --deadline 1ms)
fi
run "$(est 150 300)" /usr/bin/python3 selftests/p3_parents.py "${parents[@]}" --prefix "$kernel: "
# A real PyTorch job over the qdisc (--userspace: a stock kernel; too
# slow for the debug one). Before the suites below, most of which the
# other stock kernel runs too, so that on a slow machine the deadline
# skips one of those rather than the only PyTorch run.
if [ $userspace -eq 1 ]; then
	run 555 /usr/bin/python3 selftests/p3_torch.py --prefix "$kernel: torch: "
fi
# Short runs of the hardening suites, which check-debug runs in full on
# the debug kernel: so that CI fuzzes, churns and breaks libp3 channels
# on every kernel even where no debug kernel is cached.
if [ "$kernel" != debug ]; then
	# Their default sizes are the CI-sized ones.
	run 230 /usr/bin/python3 selftests/p3_nlfuzz.py --prefix "$kernel: "
	[ $same_as_debug -eq 1 ] ||
		run 115 /usr/bin/python3 selftests/p3_churn.py --prefix "$kernel: "
	if [ $userspace -eq 1 ]; then
		run 270 /usr/bin/python3 selftests/p3_faults.py -t libp3 --prefix "$kernel: "
	fi
	# Defaults, container hosts, overlays, and (user space: once)
	# p3ctl doctor.
	deploy=() deploy_s=540
	if [ $userspace -eq 0 ]; then
		deploy_s=395
		for t in healthy setup traffic module; do
			deploy+=(-x "doctor_$t")
		done
	fi
	run "$deploy_s" /usr/bin/python3 selftests/p3_deploy.py "${deploy[@]}" --prefix "$kernel: "
	# Unmodified jobs in a band: p3ctl run's process trees, a pod, a job's
	# own tags; and (user space: once) iperf3 beside bulk both ways and
	# the doctor naming a job.
	jobs=() jobs_s=150
	if [ $userspace -eq 0 ]; then
		jobs_s=70
		for t in iperf3_first bulk_below doctor_names_job; do
			jobs+=(-x "$t")
		done
	fi
	run "$jobs_s" /usr/bin/python3 selftests/p3_run.py "${jobs[@]}" --prefix "$kernel: "
	# p3 at the root, under mq and under mqprio of a 4-queue veth.
	run 20 /usr/bin/python3 selftests/p3_multiqueue.py --prefix "$kernel: "
fi
# A name that matches no suite here (one renamed since) picked nothing.
for name in "${only[@]}" "${skip[@]}"; do
	if [[ " ${seen[*]} " != *" $name "* ]]; then
		echo "not ok - run-vm-tests.sh: no suite named $name runs on $kernel"
		rc=1
	fi
done
exit $rc
