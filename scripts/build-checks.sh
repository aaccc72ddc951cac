#!/bin/bash
# TAP checks of the build itself: the module must build without a single
# warning at W=1 and be clean under sparse (C=2) on every kernel, and the
# user-space parts must build with -Werror.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
n=0 failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

result() {	# result OK-STATUS NAME
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n - $2"
	else
		failed=$((failed + 1))
		sed 's/^/# /' "$log" | tail -30
		echo "not ok $n - $2"
	fi
}

# Warnings (gcc's and sparse's) and errors, but not kbuild's chatter.
warnings() {
	grep -E 'warning:|error:' "$log" | grep -v 'Skipping BTF'
}

echo "TAP version 13"
for k in $(selftests/vm-run --list-kernels); do
	rm -rf "build/kmod/$k"
	scripts/kmod-build.sh "$k" "build/kmod/$k" W=1 >"$log" 2>&1
	rc=$?
	[ $rc -eq 0 ] && warnings >/dev/null && rc=1
	result $rc "sch_p3 builds without warnings at W=1 on $k"

	scripts/kmod-build.sh "$k" "build/kmod/$k" C=2 >"$log" 2>&1
	rc=$?
	[ $rc -eq 0 ] && warnings >/dev/null && rc=1
	[ $rc -eq 0 ] && ! grep -q ' CHECK ' "$log" && rc=1	# sparse ran?
	result $rc "sch_p3 is clean under sparse (C=2) on $k"
done
/usr/bin/python3 scripts/upstream-series.py --check >"$log" 2>&1
result $? "docs/upstream.md is what scripts/upstream-series.py makes of the tree"
# checkpatch.pl --strict on the series' uAPI and qdisc patches (netdev's
# rules apply to net/ paths), from the debug kernel's source (6.1's,
# unpacked once per machine by selftests/debug-kernel/build.sh): no error
# and no warning; its CHECKs are on the kernel's CamelCase types (Qdisc).
cp=$(ls /var/cache/sch_p3/debug-kernel/*/src/scripts/checkpatch.pl 2>/dev/null | head -n1)
if [ -n "$cp" ]; then
	series=$(mktemp -d)
	/usr/bin/python3 scripts/upstream-series.py --patches-only --out "$series" \
		--kernel-src "${cp%/scripts/checkpatch.pl}" >"$log" 2>&1
	for p in "$series"/kernel/000[12]-*.patch; do
		perl "$cp" --strict --no-tree --terse "$p" >"$log" 2>&1
		grep -q ' 0 errors, 0 warnings' "$log"
		result $? "$(basename "$p"): checkpatch.pl --strict finds no error and no warning"
	done
	rm -rf "$series"
else
	n=$((n + 1))
	echo "ok $n - checkpatch.pl --strict # SKIP no kernel source unpacked yet"
fi
make --no-print-directory tc >"$log" 2>&1
result $? "tc plugin q_p3.so builds with -Werror"
make --no-print-directory userlib WERROR=1 >"$log" 2>&1
result $? "libp3, p3ctl and tests build with -Werror"
make --no-print-directory udpflood >"$log" 2>&1
result $? "udpflood (bench and GC selftest sender) builds with -Werror"
echo "1..$n"
[ "$failed" -eq 0 ]
