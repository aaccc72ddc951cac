#!/bin/bash
# check-debug.sh [--if-cached] [--only SUITE]...: the body of
# `make check-debug`. Boots the debug kernel of selftests/debug-kernel/
# (KASAN, lockdep, kmemleak, UBSAN, debug objects, fault injection) and
# runs in it, one guest each:
#   vm      the VM selftests (selftests/run-vm-tests.sh)
#   nlfuzz  selftests/p3_nlfuzz.py, $P3_NLFUZZ_REQUESTS requests (100000)
#   churn   selftests/p3_churn.py, $P3_CHURN_ARGS
#           (--cycles 1000 --reloads 100 --flows 100000)
#   faults  selftests/p3_faults.py
# each followed by a kmemleak scan and a look for reports in the kernel
# log (selftests/debug-kernel/guest.sh). TAP goes to build/check-debug/;
# the run ends with "N passed, N failed, N skipped".
#
# The kernel is built once per machine (about an hour on two cores) and
# cached outside the repo; see selftests/debug-kernel/build.sh. With
# --if-cached (for CI) a machine without the cached kernel skips the whole
# pass, saying so, instead of building it.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

if_cached=0
only=()
while [ $# -gt 0 ]; do
	case $1 in
	--if-cached) if_cached=1; shift ;;
	--only) only+=("${2:?}"); shift 2 ;;
	*) echo "usage: $0 [--if-cached] [--only vm|nlfuzz|churn|faults]..." >&2; exit 2 ;;
	esac
done

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

if ! dir=$(selftests/debug-kernel/build.sh --print-dir); then
	if [ $if_cached -eq 1 ]; then
		echo "#"
		echo "# ==== check-debug: SKIPPED: no debug kernel cached${dir:+ in $dir}"
		echo "# ==== (\`make check-debug\` builds it once, in about 25 minutes)"
		echo "#"
		echo "ok - debug-kernel pass (KASAN, lockdep, kmemleak, UBSAN) # SKIP no cached debug kernel"
		exit 0
	fi
	# What the kernel build needs beyond scripts/deps.sh.
	need=()
	for p in flex bison bc libelf-dev; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
			need+=("$p")
	done
	if [ ${#need[@]} -gt 0 ]; then
		echo "check-debug: installing ${need[*]}" >&2
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
			--no-install-recommends "${need[@]}" >/dev/null || exit 1
	fi
	dir=$(selftests/debug-kernel/build.sh) || exit 1
fi
rel=$(<"$dir/release")
moddir=$dir/root/lib/modules/$rel
echo "# check-debug: kernel $rel from $dir"

# sch_p3.ko for the debug kernel. scripts/kmod-build.sh only knows the
# kernels under /lib/modules; this is the same link tree, pointed at the
# cached build tree.
kmods=$top/build/kmod-debug
tree=$kmods/$rel/tree
mkdir -p "$tree/kmod"
ln -sfn "$top/include" "$tree/include"
ln -sf "$top/Kbuild" "$tree/Kbuild"
for f in "$top"/kmod/Kbuild "$top"/kmod/*.[ch]; do
	ln -sf "$f" "$tree/kmod/"
done
make --no-print-directory -s -C "$dir/src" M="$tree" modules || exit 1
cp "$tree/kmod/sch_p3.ko" "$kmods/$rel/sch_p3.ko"
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
	rm -f "$out"/*.tap
else
	for s in "${only[@]}"; do rm -f "$out/$s.tap"; done
fi

suite() {
	local name=$1 rc
	shift
	if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then
		return
	fi
	echo "# ==== debug-$name: $*"
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
	# against 35).
	P3_VM_APPEND="slub_debug=FZPUA,p3_flow pci=noacpi log_buf_len=16M watchdog_thresh=60 rcupdate.rcu_cpu_stall_timeout=300 ${P3_VM_APPEND:-}" \
		selftests/vm-run --kernel-image "$dir/vmlinuz" --modules-dir "$moddir" \
		--kmod-dir "$kmods" --mem 3072 --timeout 14400 --oops-fatal -- \
		selftests/debug-kernel/guest.sh "$@" 2>&1 | tee "$out/$name.tap"
	rc=${PIPESTATUS[0]}
	if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$out/$name.tap"; then
		echo "not ok - debug-$name exited with status $rc" | tee -a "$out/$name.tap"
	fi
}

suite vm selftests/run-vm-tests.sh debug
# A 2 Mbit/s link: at 20, the background flows' KASAN-checked packets take
# most of the guest's CPU, and the fuzzer crawls.
suite nlfuzz python3 selftests/p3_nlfuzz.py -n "${P3_NLFUZZ_REQUESTS:-100000}" \
	--link 2mbit --prefix "debug: "
# shellcheck disable=SC2086 # P3_CHURN_ARGS is a list of options
suite churn python3 selftests/p3_churn.py --prefix "debug: " \
	${P3_CHURN_ARGS:---cycles 1000 --reloads 100 --flows 100000}
suite faults python3 selftests/p3_faults.py --prefix "debug: "

passed=$(cat "$out"/*.tap | grep -E '^ok\b' | grep -vc '# SKIP')
skipped=$(cat "$out"/*.tap | grep -E '^ok\b' | grep -c '# SKIP')
failed=$(cat "$out"/*.tap | grep -cE '^not ok\b')
echo
grep -hE '^not ok\b' "$out"/*.tap | sed 's/^/FAILED: /'
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
