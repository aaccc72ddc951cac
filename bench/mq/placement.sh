#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# bench/mq/placement.sh: where P3 levels land on a multi-queue device with
# p3 as the root qdisc, as a child of mq, and as a child of mqprio (software
# mode). A 4-queue veth; eight UDP flows, one per level, 50 datagrams each,
# tagged with p3.tag (DSCP). Prints, per set-up, each p3 instance's
# packets per band: which levels share a queue, and so which are ordered
# against which. Run it in the VM:
#   selftests/vm-run --kernel 6.12 -- bench/mq/placement.sh
set -eu
cd "$(dirname "$0")/../.."
modprobe sch_p3
ip netns add mqa
ip netns add mqb
trap 'ip netns del mqa; ip netns del mqb' EXIT
ip link add va numtxqueues 4 numrxqueues 4 netns mqa type veth \
	peer vb numtxqueues 4 numrxqueues 4 netns mqb
ip -n mqa addr add 10.9.0.1/24 dev va
ip -n mqb addr add 10.9.0.2/24 dev vb
ip -n mqa link set va up
ip -n mqb link set vb up
qa() { ip netns exec mqa "$@"; }

send() {
	qa /usr/bin/python3 - <<'PY'
import socket, sys
sys.path.insert(0, 'userlib/python')
import p3
for level in range(8):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    p3.tag(s, level)
    for _ in range(50):
        s.sendto(b'x' * 200, ('10.9.0.2', 5000 + level))
PY
}

# One line per p3 instance: its parent and the packets of each band.
report() {
	qa tc qdisc show dev va | grep '^qdisc p3' | while read -r _ _ h where parent _; do
		[ "$where" = root ] && parent=root
		bands=$(qa tc -s class show dev va parent "$h" 2>/dev/null |
			sed -n 's/^ Sent [0-9]* bytes \([0-9]*\) pkt.*/\1/p' | paste -sd' ')
		echo "  p3 $h parent $parent: band packets [$bands]"
	done | sort -k5,5
}

for setup in root mq mqprio; do
	qa tc qdisc del dev va root 2>/dev/null || true
	case $setup in
	root)
		qa tc qdisc add dev va root handle 1: p3 ;;
	mq)
		qa tc qdisc add dev va root handle 1: mq ;;
	mqprio)
		# Two traffic classes of two queues each, chosen by
		# skb->priority (which Linux derives from the TOS byte).
		qa tc qdisc add dev va root handle 1: mqprio num_tc 2 \
			map 0 0 0 0 1 1 1 1 0 0 0 0 0 0 0 0 queues 2@0 2@2 hw 0 ;;
	esac
	if [ $setup != root ]; then
		for q in 1 2 3 4; do
			qa tc qdisc add dev va parent 1:$q handle 1$q: p3
		done
	fi
	send
	echo "$setup:"
	report
done
