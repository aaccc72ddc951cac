#!/bin/bash
# Runs inside the selftest VM (see selftests/vm-run): every kernel-side
# suite, one after the other, each printing TAP.  `make check` calls it
# once per kernel:  selftests/vm-run --kernel K -- selftests/run-vm-tests.sh K
set -uo pipefail
cd "$(dirname "$0")/.."
kernel=${1:-$(uname -r)}
rc=0

run() {
	echo "# ---- $*"
	"$@" || rc=1
}

run /usr/bin/python3 selftests/tdc.py -f selftests/tc-tests/*.json
run /usr/bin/python3 selftests/p3_traffic.py --prefix "$kernel: "
if [ -x userlib/tests/vm_integration.sh ]; then
	run userlib/tests/vm_integration.sh
fi
exit $rc
