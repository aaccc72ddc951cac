# shellcheck shell=bash
# Sourced by dist/test_*.sh: TAP lines "ok N - $tap_name: ...", counted
# in n, with failed set by any failure; diag prints its input as
# comments.
n=0 failed=0
tap() {	# status name
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - $tap_name: $2"
	else echo "not ok $n - $tap_name: $2"; failed=1; fi
}
skip() {	# name reason
	n=$((n + 1))
	echo "ok $n - $tap_name: $1 # SKIP $2"
}
diag() { grep . | sed 's/^/# /'; }
