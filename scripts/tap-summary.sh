#!/bin/bash
# tap-summary.sh FILE...: adds up TAP files the way make check reports
# them. Each failure is listed with the diagnostics just above it (our
# suites print a failure's reasons before its "not ok" line), because CI
# keeps only the end of the log; then "N passed, N failed, N skipped".
# Exits 1 if anything failed.
set -uo pipefail
awk '
	/^#/ { why[n++ % 4] = $0; next }
	/^not ok( |$)/ {
		failed++
		out = out "FAILED: " $0 "\n"
		for (i = (n > 4 ? n - 4 : 0); i < n; i++)
			out = out "    " why[i % 4] "\n"
	}
	/^ok( |$)/ { if ($0 ~ /# SKIP/) skipped++; else passed++ }
	{ n = 0 }
	END {
		printf "\n%s", out
		printf "%d passed, %d failed, %d skipped\n", passed, failed, skipped
		exit failed > 0
	}
' "$@"
