#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# bench/chan/run.sh [loopback options]: libp3 channel throughput against
# plain TCP on this host's loopback (no VM needed), e.g. -m 1024 -b 8.
set -euo pipefail
top=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
cd "$top"
make --no-print-directory userlib >/dev/null
mkdir -p build/bench/chan
cc -O2 -Wall -Wextra -Werror -Iuserlib/include -o build/bench/chan/loopback \
	bench/chan/loopback.c build/userlib/libp3.a \
	$(pkg-config --libs libnl-route-3.0) -lpthread -lm
exec build/bench/chan/loopback "$@"
