#!/bin/bash
# guest.sh CMD [ARG...]: runs one suite inside the debug guest, then what
# only this kernel can check, as TAP lines after the suite's own:
#   - kmemleak: objects that became unreferenced during the suite (those of
#     the boot were scanned and cleared before it started);
#   - the kernel log: any KASAN, UBSAN, lockdep, debug-objects, WARN or
#     BUG report, whether or not it tainted the kernel.
# Exit status: the suite's, or 1 if either check failed.
# scripts/check-debug.sh runs it:  vm-run ... -- selftests/debug-kernel/guest.sh CMD...
set -u
leak=/sys/kernel/debug/kmemleak
report='WARNING:|BUG:|Oops|KASAN|UBSAN|kernel BUG|general protection|ODEBUG|'
report+='possible circular locking|inconsistent lock state|possible recursive locking|'
report+='suspicious RCU usage|INFO: task|rcu: INFO|self-detected stall|'
report+='kmemleak: [0-9]+ new suspected|Unable to handle|list_(add|del) corruption|'
report+='refcount_t:|leaked reference|Redzone|Poison overwritten|Object already free'

if [ -w "$leak" ]; then
	# No scans behind our back; the boot's leftovers are not ours.
	echo scan=off >"$leak"
	echo scan >"$leak"
	echo clear >"$leak"
fi
start=$(dmesg | wc -l)

"$@"
rc=$?

echo "# ---- debug kernel checks after: $*"
if [ -w "$leak" ] && ! echo scan 2>/dev/null >"$leak"; then
	# It turns itself off when it cannot allocate its own metadata.
	dmesg | grep -i kmemleak | tail -n 5 | sed 's/^/# /'
	echo "not ok - kmemleak: disabled during $1, nothing was checked"
	rc=1
elif [ -w "$leak" ]; then
	# An object must look unreferenced in two scans (and be 5 s old).
	sleep 6
	echo scan >"$leak"
	echo scan >"$leak"
	n=$(grep -c '^unreferenced object' "$leak")
	if [ "$n" -eq 0 ]; then
		echo "ok - kmemleak: no unreferenced object after $1"
	else
		sed 's/^/# /' "$leak" | head -n 80
		echo "not ok - kmemleak: $n unreferenced objects after $1"
		rc=1
	fi
else
	echo "ok - kmemleak # SKIP no $leak"
fi
bad=$(dmesg | tail -n +"$((start + 1))" | grep -cE "$report")
if [ "$bad" -eq 0 ]; then
	echo "ok - kernel log: no KASAN, UBSAN, lockdep, ODEBUG, WARN or BUG report during $1"
else
	dmesg | tail -n +"$((start + 1))" | grep -E -A 30 "$report" | head -n 120 | sed 's/^/# /'
	echo "not ok - kernel log: $bad report lines during $1"
	rc=1
fi
exit $rc
