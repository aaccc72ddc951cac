#!/bin/bash
# guest.sh [--no-kmemleak] CMD [ARG...]: runs one suite inside the debug
# guest, then what only this kernel can check, as TAP lines after the
# suite's own:
#   - kmemleak: objects that became unreferenced during the suite (those of
#     the boot were scanned and cleared before it started);
#   - the kernel log: any KASAN, UBSAN, lockdep, debug-objects, WARN or
#     BUG report, whether or not it tainted the kernel.
# --no-kmemleak leaves kmemleak to the caller, which runs
#   guest.sh --kmemleak-start            before the first of its suites and
#   guest.sh --kmemleak-check WHAT       after the last,
# so that several suites in one guest share one set of scans: each scan
# of this kernel takes about 20 s under TCG, three a suite.
# Exit status: the suite's, or 1 if a check failed.
# scripts/check-debug.sh runs it:  vm-run ... -- selftests/debug-kernel/guest.sh CMD...
set -u
leak=/sys/kernel/debug/kmemleak
report='WARNING:|BUG:|Oops|KASAN|UBSAN|kernel BUG|general protection|ODEBUG|'
report+='possible circular locking|inconsistent lock state|possible recursive locking|'
report+='suspicious RCU usage|INFO: task|rcu: INFO|self-detected stall|'
# (kmemleak's own "new suspected memory leaks" line is not one: the scan
# below reads its report, less the core's leak it knows.)
report+='Unable to handle|list_(add|del) corruption|'
report+='refcount_t:|leaked reference|Redzone|Poison overwritten|Object already free'

kmemleak_start() {
	[ -w "$leak" ] || return 0
	# No scans behind our back; the boot's leftovers are not ours.
	echo scan=off >"$leak"
	echo scan >"$leak"
	echo clear >"$leak"
}

# kmemleak_check WHAT: TAP for the objects unreferenced since
# kmemleak_start; 1 if there are any.
kmemleak_check() {
	local what=$1 tmp n k rc=0
	if [ ! -w "$leak" ]; then
		echo "ok - kmemleak # SKIP no $leak"
		return 0
	fi
	if ! echo scan 2>/dev/null >"$leak"; then
		# It turns itself off when it cannot allocate its own metadata.
		dmesg | grep -i kmemleak | tail -n 5 | sed 's/^/# /'
		echo "not ok - kmemleak: disabled during $what, nothing was checked"
		return 1
	fi
	tmp=$(mktemp -d)
	# An object must look unreferenced in two scans (and be 5 s old).
	sleep 6
	echo scan >"$leak"
	echo scan >"$leak"
	# One record per object; those of a known core leak are set apart:
	# 6.1's sysfs_slab_add() does not kobject_put() when
	# kobject_init_and_add() fails, leaking the cache's name, so a failed
	# allocation inside kmem_cache_create() (the fault tests make them)
	# leaves the string "p3_flow" behind. Not sch_p3's; see
	# docs/reliability.md.
	awk -v core="$tmp/core" -v ours="$tmp/ours" '
		function flush() {
			if (rec == "") return
			if (rec ~ /kobject_init_and_add/ && rec ~ /sysfs_slab_add/)
				printf "%s", rec >> core
			else
				printf "%s", rec >> ours
			rec = ""
		}
		/^unreferenced object/ { flush() }
		{ rec = rec $0 "\n" }
		END { flush() }' "$leak"
	n=$(grep -c '^unreferenced object' "$tmp/ours" 2>/dev/null)
	k=$(grep -c '^unreferenced object' "$tmp/core" 2>/dev/null)
	[ "${k:-0}" -eq 0 ] ||
		echo "# kmemleak: ${k} object(s) of the core's known sysfs_slab_add() leak, set apart"
	if [ "${n:-0}" -eq 0 ]; then
		echo "ok - kmemleak: no unreferenced object after $what"
	else
		sed 's/^/# /' "$tmp/ours" | head -n 80
		echo "not ok - kmemleak: $n unreferenced objects after $what"
		rc=1
	fi
	rm -rf "$tmp"
	return $rc
}

case ${1:-} in
--kmemleak-start) kmemleak_start; exit 0 ;;
--kmemleak-check) kmemleak_check "${2:?}"; exit ;;
esac
own_kmemleak=1
if [ "${1:-}" = --no-kmemleak ]; then
	own_kmemleak=0
	shift
fi
[ $own_kmemleak -eq 0 ] || kmemleak_start
start=$(dmesg | wc -l)
# The suite, as its results name it: the script, not the interpreter.
what=$1
case $what in */python3 | python3) what=${2:-$1} ;; esac
what=$(basename "$what")
"$@"
rc=$?
echo "# ---- debug kernel checks after: $*"
[ $own_kmemleak -eq 0 ] || kmemleak_check "$what" || rc=1
bad=$(dmesg | tail -n +"$((start + 1))" | grep -cE "$report")
if [ "$bad" -eq 0 ]; then
	echo "ok - kernel log: no KASAN, UBSAN, lockdep, ODEBUG, WARN or BUG report during $what"
else
	dmesg | tail -n +"$((start + 1))" | grep -E -A 30 "$report" | head -n 120 | sed 's/^/# /'
	echo "not ok - kernel log: $bad report lines during $what"
	rc=1
fi
exit $rc
