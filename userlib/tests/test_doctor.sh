#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# p3ctl doctor on the host, where sch_p3 cannot be loaded: its exit codes,
# its JSON, the problems it can see without the module, in a network
# namespace of its own (the VM suite selftests/p3_deploy.py does the rest).
#   test_doctor.sh P3CTL
set -u
P3CTL=$1
n=0 failed=0
tap() {	# status name
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - ${TAP_PREFIX:-}doctor: $2"
	else echo "not ok $n - ${TAP_PREFIX:-}doctor: $2"; failed=1; fi
}
has_id() {	# json id
	/usr/bin/python3 -c '
import json, sys
ids = [p["id"] for p in json.loads(sys.argv[1])["problems"]]
sys.exit(0 if sys.argv[2] in ids else 1)' "$1" "$2"
}

"$P3CTL" doctor --tag carrier-pigeon lo >/dev/null 2>&1
tap $([ $? -eq 2 ]; echo $?) "an unknown --tag is a usage error (exit 2)"
"$P3CTL" doctor --sample -1 lo >/dev/null 2>&1
tap $([ $? -eq 2 ]; echo $?) "a negative --sample is a usage error (exit 2)"
"$P3CTL" show lo --sample 1 >/dev/null 2>&1
tap $([ $? -eq 2 ]; echo $?) "--sample belongs to doctor only (exit 2)"

if ! unshare -n true 2>/dev/null; then
	echo "ok $((n + 1)) - ${TAP_PREFIX:-}doctor: in a namespace # SKIP cannot create a network namespace"
	exit 0
fi
out=$(unshare -n "$P3CTL" --json doctor nosuch0 --sample 0 2>&1)
rc=$?
echo "$out" | sed 's/^/# /'
[ $rc -eq 1 ] && has_id "$out" no-device
tap $? "an unknown device: problem no-device, exit 1"
out=$(unshare -n "$P3CTL" doctor 2>&1)
rc=$?
echo "$out" | sed 's/^/# /'
[ $rc -eq 2 ] && case $out in *"no default route"*) true ;; *) false ;; esac
tap $? "no DEV and no default route: says so, exit 2"
# lo is down in a fresh namespace; sch_p3 is not loadable on the host.
out=$(unshare -n "$P3CTL" --json doctor lo --sample 0 2>&1)
rc=$?
echo "$out" | sed 's/^/# /'
[ $rc -eq 1 ] && has_id "$out" device-down && has_id "$out" no-qdisc &&
	{ [ -e /sys/module/sch_p3 ] || has_id "$out" module-missing; }
tap $? "lo down, no p3: device-down, no-qdisc (module-missing), exit 1"
echo "1..$n"
exit $failed
