#!/bin/bash
# check-debug.sh [--quick] [--deadline EPOCH] [--only SUITE]...:
# the body of `make check-debug`. Boots the debug kernel of
# selftests/debug-kernel/ (KASAN, lockdep, kmemleak, UBSAN, debug objects,
# fault injection) and runs in it, one guest each:
#   nlfuzz  selftests/p3_nlfuzz.py: 100,000 requests (--quick: 1,000)
#   churn   selftests/p3_churn.py: 1,000 cycles, 100 reloads, 100,000
#           flows (--quick: 50, 5, 5,000)
#   faults  selftests/p3_faults.py: every allocation of each sweep failed
#           in turn (--quick: every 7th, kernel side only; the libp3
#           fault cases run on the stock kernels in `make check`)
#   tdc     the tc command suite (selftests/tdc.py)
#   parents p3 beneath tbf, htb, hfsc, qfq and drr (selftests/p3_parents.py)
#   vm      the other VM selftests (selftests/run-vm-tests.sh; --quick:
#           the traffic and overload cases it does not leave out by name)
# each followed by a look for reports in the kernel log and a kmemleak
# scan (selftests/debug-kernel/guest.sh; with --quick, one scan after
# the suites of each guest). TAP goes to build/check-debug/;
# the run ends with "N passed, N failed, N skipped".
#
# The kernel is built once per machine and cached outside the repo (see
# selftests/debug-kernel/build.sh); what the build needs is installed
# first. The debug kernel runs about 25 times slower than a stock one
# under emulation, so `make check` asks for --quick and a --deadline: a
# suite that would not finish before it is skipped, visibly, rather than
# run into CI's time limit.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
# shellcheck source=scripts/guest-suite.sh
. scripts/guest-suite.sh
# shellcheck source=scripts/time-budget.sh
. scripts/time-budget.sh

quick=0 deadline=
only=()
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1; shift ;;
	--deadline) deadline=${2:?}; shift 2 ;;
	--only) only+=("${2:?}"); shift 2 ;;
	*) echo "usage: $0 [--quick] [--deadline EPOCH]" \
		"[--only nlfuzz|churn|faults|tdc|parents|vm]..." >&2; exit 2 ;;
	esac
done

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

# Waits for a build already running (make check starts one early).
selftests/debug-kernel/build.sh --install-deps || exit 1
dir=$(selftests/debug-kernel/build.sh) || exit 1
rel=$(<"$dir/release")
moddir=$dir/root/lib/modules/$rel
echo "# check-debug: kernel $rel from $dir"

# sch_p3.ko for the debug kernel, from its cached build tree. make check
# runs two of these at once, at times: one build at a time.
kmods=$top/build/kmod-debug
mkdir -p "$kmods"
flock "$kmods/build.lock" \
	scripts/kmod-build.sh "$dir/src" "$kmods/$rel" -s || exit 1
make --no-print-directory -s tc userlib || exit 1

# The guest mounts its module tree over /lib/modules/RELEASE, which must
# exist on the host: an empty directory (no build/ link, so `make module`
# and vm-run --list-kernels do not count it as an installed kernel).
[ -d "/lib/modules/$rel" ] || $sudo mkdir -p "/lib/modules/$rel" || exit 1

out=build/check-debug
mkdir -p "$out"
# --only keeps the other suites' results, so that the summary below can
# add up a pass run in parts.
if [ ${#only[@]} -eq 0 ]; then
	rm -f "$out"/*.tap "$out"/*.emulator-fault.log
else
	for s in "${only[@]}"; do
		rm -f "$out/$s.tap" "$out/debug-$s.emulator-fault.log"
	done
fi

# debug_guest CMD...: CMD in the debug kernel's guest, stopped at the
# deadline (taken when it starts, for a second run too).
debug_guest() {
	local timeout=14400
	[ -z "$deadline" ] || timeout=$((deadline - $(date +%s)))
	# KASAN with slub_debug, lockdep and kmemleak under TCG: give the
	# watchdogs room, they measure the emulator's stalls, not ours. The
	# ACPI interpreter is so slow there that each virtio device's _PRT
	# hits the 30 s AML loop timeout: take PCI interrupt routing from the
	# BIOS tables instead (pci=noacpi), which saves 90 s per boot. The
	# fault tests log a stack per injected failure: a log buffer that
	# keeps them all, so that guest.sh sees every report. The p3_flow
	# cache is marked for failslab's cache filter (A): p3_faults.py makes
	# flow creation fail with it, in the transmit path. SLUB's own
	# checks (sanity, red zones, poison, owner tracking) are on for
	# p3_flow only: KASAN already checks every cache, and SLUB debugging
	# on all of them too made the fuzzer three times slower (11 requests/s
	# against 35). no5lvl: QEMU's "-cpu max" offers 5-level paging, and
	# then KASAN's idea of where its shadow starts follows the LA57 bit of
	# boot_cpu_data, which identify_cpu() clears for a moment at boot; an
	# interrupt in that window made KASAN report a wild-memory-access in
	# handle_edge_irq, before any test ran (3 boots here so far).
	env P3_VM_APPEND="slub_debug=FZPUA,p3_flow pci=noacpi no5lvl log_buf_len=16M watchdog_thresh=60 rcupdate.rcu_cpu_stall_timeout=300 ${P3_VM_APPEND:-}" \
		selftests/vm-run --kernel-image "$dir/vmlinuz" --modules-dir "$moddir" \
		--kmod-dir "$kmods" --mem 3072 --timeout "$timeout" --oops-fatal -- \
		"$@"
}

# suite NAME SECONDS CMD...: SECONDS is what the suite takes on this
# 2-core machine, boot included; with --deadline it is not started
# unless it still fits (scripts/time-budget.sh). --quick runs them all in
# one guest (see one_guest below): a boot of this kernel takes over a
# minute, and make check has no minutes to spare.
ran=() plan=() planned=0
suite() {
	local name=$1 est=$2 need skip t0 rerun_by
	shift 2
	if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then
		return
	fi
	if [ $quick -eq 1 ]; then
		plan+=("$name" "$est" "$@" ---)
		planned=$((planned + est))
		return
	fi
	ran+=("$name.tap")
	need=$(budget_need "$est")
	if [ -n "$deadline" ] && skip=$(budget_late "debug-$name" "$need" "$deadline"); then
		echo "# ==== debug-$name: SKIPPED"
		echo "$skip" | tee "$out/$name.tap"
		return
	fi
	echo "# ==== debug-$name: $*"
	t0=$(date +%s)
	# A guest the emulator killed runs again if it can still end in time.
	rerun_by=$(budget_start_by "$need" "${deadline:-9999999999}")
	guest_suite "debug-$name" "$out/$name.tap" "$rerun_by" debug_guest \
		selftests/debug-kernel/guest.sh "$@"
	t0=$(($(date +%s) - t0))
	budget_took "$est" "$t0"
	echo "# ==== debug-$name: took ${t0} s (estimated ${need} s)"
}

# --quick: churn's default sizes, which are the CI-sized ones, but for
# two module reloads rather than five (39 s each here; the third to fifth
# take the same path as the first two, on a machine CI's time bounds),
# and a sixth of the stock kernels' fuzzing (3,000 requests each): about
# 5 requests a second on this kernel, and it is there for the other
# suites' paths too.
if [ $quick -eq 1 ]; then
	nlfuzz=(-n 500) churn=(--reloads 2)
	faults=(--nth-step 7 --flow-faults 1000 --exclude libp3)
	# The option parsing, range and extack cases are the fuzzer's
	# ground on this kernel (every option, every bound, every refusal's
	# message, with traffic through); the stock kernels run them all.
	tdc=(-x bounds extack options netlink)
	vm=(--quick)
	# What each takes in one guest beside a stock kernel's (2026-12-02:
	# the fuzzer's 1,000 requests 843 s, churn 626, faults 519, all of
	# tdc about 690): the fuzzer's 500, churn's 2 reloads and tdc's 75
	# cases scaled, plus the boot (about 90 s) on the first of each
	# guest; the parents 268 s at ec8c1b2. vm's suites skip
	# themselves in the guest (its --deadline, below); its estimate is
	# what is worth a boot. Under-estimating a suite would let it start
	# and then run into the deadline, a failure; over, a visible skip.
	seconds=(560 500 610 450 300 1250)
else
	nlfuzz=(-n 100000)
	churn=(--cycles 1000 --reloads 100 --flows 100000 --socket-flows 2000)
	faults=()
	tdc=()
	vm=()
	seconds=(3650 3660 1900 400 300 1250)
fi
# A 2 Mbit/s link: at 20, the background flows' KASAN-checked packets take
# most of the guest's CPU, and the fuzzer crawls.
suite nlfuzz "${seconds[0]}" python3 selftests/p3_nlfuzz.py "${nlfuzz[@]}" \
	--link 2mbit --prefix "debug: "
# A graft waits out RCU grace periods, which this kernel under TCG beside
# another guest stretches: a CI run saw the urgent probe stop for over a
# second with nothing wrong in sch_p3 (this machine's worst was 887 ms).
suite churn "${seconds[1]}" python3 selftests/p3_churn.py --prefix "debug: " \
	--max-gap 3 "${churn[@]}"
suite faults "${seconds[2]}" python3 selftests/p3_faults.py --prefix "debug: " "${faults[@]}"
# tdc's commands take seconds each on this kernel: room for them.
suite tdc "${seconds[3]}" python3 selftests/tdc.py --cmd-timeout 180 \
	-f selftests/tc-tests/*.json "${tdc[@]}"
# Inside the guest each suite skips itself if it would not end before the
# deadline, less the time guest.sh's kmemleak scans and the shutdown take
# after it (the guest is stopped at the deadline itself, a failure).
[ -z "$deadline" ] || vm+=(--deadline $((deadline - 120)))
# The parents apart from the rest, so that make check can run them in the
# other lane's guest (scripts/check.sh).
suite parents "${seconds[4]}" selftests/run-vm-tests.sh debug --only parents "${vm[@]}"
suite vm "${seconds[5]}" selftests/run-vm-tests.sh debug --skip parents "${vm[@]}"

# one_guest: the suites planned by --quick, in one boot, into quick.tap;
# each suite skips itself in the guest if it would not end in time
# (selftests/debug-kernel/suites.sh), the guest is stopped at the
# deadline.
one_guest() {
	local t0 name
	[ ${#plan[@]} -gt 0 ] || return 0
	unset 'plan[-1]'            # the last ---
	# Named by its suites: make check runs two of these at once.
	name=quick-$(IFS=-; echo "${only[*]:-all}")
	ran+=("$name.tap")
	rm -f "$out/$name.tap" "$out/debug-$name.emulator-fault.log"
	# Not even a boot and one suite fit: skipped, visibly, without one.
	if [ -n "$deadline" ] && [ $(($(date +%s) + 180)) -gt "$deadline" ]; then
		echo "ok - debug-$name # SKIP out of time: $((deadline - $(date +%s)))s left before the deadline" |
			tee "$out/$name.tap"
		return 0
	fi
	echo "# ==== debug (${only[*]:-every suite}): one guest"
	t0=$(date +%s)
	# A second run, after an emulator fault, only if all of it still fits.
	guest_suite "debug-$name" "$out/$name.tap" \
		"$(budget_start_by "$planned" "${deadline:-9999999999}")" \
		debug_guest selftests/debug-kernel/suites.sh \
		${deadline:+--deadline $((deadline - 60))} "${plan[@]}"
	echo "# ==== debug (${only[*]:-every suite}): took $(($(date +%s) - t0)) s"
}
one_guest

# The summary adds up every part run so far (see --only); the exit
# status is this run's own, so that a part that failed earlier is not
# counted again as this one's failure.
say_reruns "$out"
scripts/tap-summary.sh "$out"/*.tap
[ ${#ran[@]} -eq 0 ] || scripts/tap-summary.sh "${ran[@]/#/$out/}" >/dev/null
