#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# libp3 end to end, inside the VM (as root, in the repo root):
#   selftests/vm-run -- userlib/tests/vm_integration.sh
#
# Two network namespaces joined by veth.  The sender's egress carries the
# p3 qdisc shaped to 50 Mbit/s; a libp3 channel (8 bands, DSCP tags)
# streams 4 x 8 MiB of bulk on levels 4..7 and, half a second later, a
# 256 KiB level-0 tensor.  Checks, in numbers:
#   1. every tensor arrives byte-exact;
#   2. the level-0 tensor, sent last, completes before every bulk tensor
#      still in flight (at least 2 must be), within 1 s (its
#      transmission time alone is 42 ms);
#   3. the qdisc's class statistics saw band 0 and the bulk bands;
#   4. with netem loss, delay jitter and reordering on the data path (an
#      ifb on the receiver's ingress, so p3 stays the sender's root
#      qdisc) everything still arrives byte-exact.
# For comparison the same run goes through a plain FIFO (tbf 50 Mbit),
# reported but not judged.  Output is TAP, ending "N passed, N failed".
set -u

REPO=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
HELPER=$REPO/userlib/tests/vm_integration.py
P3CTL=$(command -v p3ctl || echo "$REPO/build/bin/p3ctl")
RATE_BITS=50000000
RATE=$((RATE_BITS / 8))
A=p3a-$$
B=p3b-$$
TMP=$(mktemp -d)
export PYTHONPATH=$REPO/userlib/python${PYTHONPATH:+:$PYTHONPATH}

n=0
passed=0
failed=0

tap() {		# tap 0|1 description
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n - $2"
		passed=$((passed + 1))
	else
		echo "not ok $n - $2"
		failed=$((failed + 1))
	fi
}

# Re-number the ok/not ok lines the Python checker prints.
tap_lines() {
	local line
	while IFS= read -r line; do
		case $line in
		"ok - "*) tap 0 "${line#ok - }" ;;
		"not ok - "*) tap 1 "${line#not ok - }" ;;
		*) echo "$line" ;;
		esac
	done
}

cleanup() {
	ip netns del "$A" 2>/dev/null
	ip netns del "$B" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT

setup_topology() {
	ip netns add "$A" && ip netns add "$B" &&
		ip link add va netns "$A" type veth peer name vb netns "$B" &&
		ip -n "$A" addr add 10.99.0.1/24 dev va &&
		ip -n "$B" addr add 10.99.0.2/24 dev vb &&
		ip -n "$A" link set lo up && ip -n "$B" link set lo up &&
		ip -n "$A" link set va up && ip -n "$B" link set vb up
}

# run_case LABEL CHECK-ARGS...: one transfer from A to B, then the checks.
run_case() {
	local label=$1 port=$((5000 + n)) i
	shift
	rm -f "$TMP/recv.json" "$TMP/recv.json.ready" "$TMP/send.json"
	ip netns exec "$B" "$PY" "$HELPER" recv --port $port --out "$TMP/recv.json" &
	local rpid=$!
	for i in $(seq 100); do
		[ -f "$TMP/recv.json.ready" ] && break
		sleep 0.2
	done
	ip netns exec "$A" "$PY" "$HELPER" send --host 10.99.0.2 --port $port \
		--out "$TMP/send.json" || echo "# $label: sender failed"
	wait $rpid || echo "# $label: receiver failed"
	# A file, not a pipe: tap_lines must run in this shell to keep the
	# counters (and the VM has no /dev/fd for process substitution).
	"$PY" "$HELPER" check "$TMP/send.json" "$TMP/recv.json" --label "$label" \
		--rate $RATE "$@" >"$TMP/check.out"
	grep -q '^ok\|^not ok' "$TMP/check.out" || tap 1 "$label: the checker printed no result"
	tap_lines <"$TMP/check.out"
}

# netem on the receiver's ingress through an ifb; falls back to the
# receiver's egress (the ACK path) if ifb or mirred are not available.
add_netem() {
	local netem="netem delay 3ms 2ms loss 1% reorder 10% 50%"

	if ip -n "$B" link add ifb0 type ifb 2>/dev/null &&
		ip -n "$B" link set ifb0 up &&
		ip netns exec "$B" tc qdisc add dev vb handle ffff: ingress &&
		ip netns exec "$B" tc filter add dev vb parent ffff: matchall \
			action mirred egress redirect dev ifb0 &&
		ip netns exec "$B" tc qdisc add dev ifb0 root $netem; then
		echo "data path"
	else
		ip netns exec "$B" tc qdisc add dev vb root $netem && echo "ACK path"
	fi
}

band_stats_ok() {	# band 0 and some bulk band carried packets
	ip netns exec "$A" "$P3CTL" --json stat va >"$TMP/stat.json" || return 1
	"$PY" - "$TMP/stat.json" <<'PYEOF'
import json, sys
s = json.load(open(sys.argv[1]))
b = s['bands']
print('# band packets:', [x['packets'] for x in b], 'xstats:', s['xstats'])
sys.exit(0 if len(b) == 8 and b[0]['packets'] > 0 and
         sum(x['packets'] for x in b[4:8]) > 0 else 1)
PYEOF
}

# The exporter on the live qdisc: each band's packet counter is the JSON
# stat's, read just after it (a stray packet or two may pass in between).
prometheus_matches_stat() {
	ip netns exec "$A" "$P3CTL" stat va --prometheus >"$TMP/stat.prom" &&
		ip netns exec "$A" "$P3CTL" --json stat va >"$TMP/stat.json" || return 1
	"$PY" - "$TMP/stat.prom" "$TMP/stat.json" <<'PYEOF'
import json, re, sys
prom = {}
for line in open(sys.argv[1]):
    m = re.match(r'p3_band_sent_packets_total\{.*band="(\d+)".*\} (\d+)$', line)
    if m:
        prom[int(m.group(1))] = int(m.group(2))
stat = [b['packets'] for b in json.load(open(sys.argv[2]))['bands']]
print('# prometheus band packets:', [prom.get(b) for b in range(len(stat))])
sys.exit(0 if len(prom) == len(stat) == 8 and sum(stat) > 0 and
         all(0 <= stat[b] - prom[b] <= 3 for b in range(8)) else 1)
PYEOF
}

echo "# libp3 VM integration, kernel $(uname -r)"
modprobe sch_p3 2>/dev/null
setup_topology
tap $? "two namespaces joined by veth"

ip netns exec "$A" "$P3CTL" add va bands 8 default 7 tag dscp rate 50mbit
tap $? "p3ctl add va bands 8 default 7 tag dscp rate 50mbit"
out=$(ip netns exec "$A" "$P3CTL" show va)
echo "# $out"
case $out in *"qdisc p3"*"bands 8"*"tag dscp"*) r=0 ;; *) r=1 ;; esac
tap $r "p3ctl show reads the options back"
out=$(ip netns exec "$A" tc qdisc show dev va 2>&1)
echo "# tc: $out"
case $out in *"qdisc p3"*) r=0 ;; *) r=1 ;; esac
tap $r "tc (with the q_p3 plugin) sees the same qdisc"

run_case "p3 50mbit" --require-order --result "$TMP/p3.result"
band_stats_ok
tap $? "per-band statistics: band 0 and the bulk bands carried packets"
prometheus_matches_stat
tap $? "p3ctl stat --prometheus: the live qdisc's per-band packets, as the JSON stat has them"

# The CLI against the live qdisc: change, a refused change, live view.
ip netns exec "$A" "$P3CTL" change va rate 100mbit &&
	ip netns exec "$A" "$P3CTL" show va | grep -q "rate 100Mbit"
tap $? "p3ctl change va rate 100mbit, read back"
err=$(ip netns exec "$A" "$P3CTL" change va default 9 2>&1)
r=$?
echo "$err" | sed 's/^/# /'
case $err in *"kernel says:"?*) [ $r -eq 1 ] ;; *) false ;; esac
tap $? "p3ctl change va default 9 (of 8 bands) fails with the kernel's reason"
ip netns exec "$A" "$P3CTL" --json stat va -w -c 2 -i 0.5 >"$TMP/watch.json" &&
	"$PY" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if len(rows) == 2 and all(len(r["bands"]) == 8 and
         "bps" in r["bands"][0] for r in rows) else 1)' "$TMP/watch.json"
tap $? "p3ctl stat -w -c 2: two JSON samples with per-band rates"
ip netns exec "$A" "$P3CTL" change va rate 50mbit

where=$(add_netem)
tap $? "netem loss 1%, delay 3+-2 ms, reorder 10% on the $where"
run_case "p3 50mbit + netem ($where)"

ip netns exec "$A" "$P3CTL" del va
tap $? "p3ctl del va"
ip netns exec "$B" tc qdisc del dev ifb0 root 2>/dev/null
ip netns exec "$B" tc qdisc del dev vb ingress 2>/dev/null
ip netns exec "$B" tc qdisc del dev vb root 2>/dev/null
ip netns exec "$A" tc qdisc add dev va root tbf rate 50mbit burst 32k latency 400ms
run_case "FIFO baseline (tbf 50mbit)"

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
