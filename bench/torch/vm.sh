#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Inside the VM (bench/torch/run.sh boots it): two hosts, network
# namespaces p3t0 and p3t1 joined by one veth pair, and one rank of
# bench/torch/worker.py in each.  Arguments go to both workers.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${P3_TORCH_OUT:?}
for i in 0 1; do
	ip netns del p3t$i 2>/dev/null || true
	ip netns add p3t$i
done
ip link add eth0 netns p3t0 type veth peer name eth0 netns p3t1
for i in 0 1; do
	ip -n p3t$i addr add 10.77.0.$((i + 1))/24 dev eth0
	ip -n p3t$i link set eth0 up
	ip -n p3t$i link set lo up
done
pids=()
for i in 0 1; do
	# GLOO_SOCKET_IFNAME: the guest's hostname resolves to no address of
	# the namespace, and Gloo would fall back to loopback (unreachable
	# from the other host).
	ip netns exec p3t$i env RANK=$i WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 \
		MASTER_PORT=29500 PYTHONWARNINGS=ignore::RuntimeWarning \
		GLOO_SOCKET_IFNAME=eth0 \
		/usr/bin/python3 bench/torch/worker.py \
		--peer 10.77.0.$((2 - i)) --out "$out" "$@" &
	pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=$?
done
exit $rc
