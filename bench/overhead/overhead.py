#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Qdisc overhead: packets per second one CPU pushes through p3 (8 and 64
bands) against pfifo_fast and fq, on an unshaped veth, where the CPU and
not the link is the bottleneck.  Runs as root inside the VM
(bench/overhead/run.sh boots it and builds the sender):

  selftests/vm-run -- bench/overhead/overhead.py --out DIR

The selftests' topology (selftests/p3lib.py): p3snd's s0 <-> p3rcv's r0.
build/bench/overhead/udpflood, pinned to CPU 0, sends 64-byte UDP
datagrams with sendmmsg from 1 or 1024 sockets (one flow each, socket i
tagged SO_PRIORITY i % 64 + 1, so 64 bands are all in use).  The receiver
drops every datagram at r0's ingress (clsact, flower), and its receive
work is steered to CPU 1, so CPU 0 spends its time in the sender, the
stack and the qdisc.  Packets are counted where the qdisc counts them
(the root qdisc's packet counter, over rtnetlink) and as r0 receives
them (/proc/net/dev).

--icount (bench/overhead/run.sh --icount boots QEMU with `-icount
shift=0` and one vCPU): the guest's clock then advances one
nanosecond per guest instruction, so packets per guest second are packets
per 10^9 instructions, whatever the host's load; sender, stack, qdisc and
the receiver's drop share the one CPU, the same work for every qdisc but
the qdisc's own.

Every qdisc and flow count is measured --reps times, the order of the
qdiscs rotating from one round to the next so that drift in the host's
speed spreads over all of them.  noqueue (no qdisc at all) is the floor.

--under prio puts each qdisc under test below a prio root, as its one
child (every priority maps to it). A root qdisc with TCQ_F_CAN_BYPASS
(pfifo_fast, fq_codel, pfifo) sends a packet that finds it empty straight
to the driver, which in an unshaped flood is nearly every packet, so at
the root their enqueue and dequeue hardly run; below a parent nothing is
bypassed and every qdisc does its enqueue and dequeue for every packet.
The parent's work is the same for all; pfifo, the simplest child, is the
floor instead of noqueue.
Raw results go to DIR/results.json; bench/overhead/report.py formats them.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "selftests"))
sys.path.insert(0, os.path.join(REPO, "bench", "preempt"))

import p3lib  # noqa: E402
from nsutil import (Qstats, dev_counters, log, provenance,  # noqa: E402
                    run, save_results, tc_batch)
from p3lib import RADDR, RCV, RDEV, SDEV, SND  # noqa: E402

FLOOD = os.path.join(REPO, "build", "bench", "overhead", "udpflood")
QDISCS = {
    "pfifo_fast": "pfifo_fast",
    "fq": "fq",
    "p3 bands 8": "p3 bands 8",
    "p3 bands 64": "p3 bands 64",
    # References: no qdisc at all, and two qdiscs that, like p3 and fq,
    # always enqueue (pfifo_fast sends straight to the driver when it is
    # empty, TCQ_F_CAN_BYPASS); fq_codel is systemd's default qdisc.
    "noqueue": "noqueue",
    "prio": "prio",
    "fq_codel": "fq_codel",
    # The floor under --under prio: the cheapest child there is.
    "pfifo": "pfifo",
}
# A prio root that sends every priority to its band 0 (class 1:1).
PRIO_ROOT = "prio bands 2 priomap " + " ".join(["0"] * 16)
DPORT = 9000


def install(spec, under):
    tc_batch(SND, [f"qdisc del dev {SDEV} root"], force=True)
    if not under:
        tc_batch(SND, [f"qdisc add dev {SDEV} root handle 1: {spec}"])
        return
    tc_batch(SND, [f"qdisc add dev {SDEV} root handle 1: {PRIO_ROOT}",
                   f"qdisc add dev {SDEV} parent 1:1 handle 10: {spec}"])


def measure(spec, flows, cfg, qs):
    install(spec, cfg.under)
    q0, r0 = qs.read().get("root", {}), dev_counters(RCV, RDEV)
    out = run(SND, [FLOOD, "-d", RADDR, "-p", str(DPORT), "-f", str(flows),
                    "-s", str(cfg.size), "-t", str(cfg.seconds), "-b",
                    str(cfg.burst), "-P", "64", "-c", "0"],
              timeout=cfg.seconds + 60)
    q1, r1 = qs.read().get("root", {}), dev_counters(RCV, RDEV)
    res = json.loads(out)
    secs = res["seconds"]
    return {"qdisc": spec, "flows": flows, "seconds": secs,
            "sent": res["sent"], "errors": res["errors"],
            # noqueue has no counters: the sender's count stands in.
            "qdisc_pps": ((q1.get("packets", 0) - q0.get("packets", 0)) / secs
                          if spec != "noqueue" else None),
            "send_pps": res["sent"] / secs,
            "rx_pps": (r1["rx_packets"] - r0["rx_packets"]) / secs,
            "rx_drop": r1["rx_drop"] - r0["rx_drop"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--burst", type=int, default=32)
    ap.add_argument("--flows", default="1,1024")
    ap.add_argument("--qdiscs", default=None,
                    help="comma-separated, of: " + ", ".join(QDISCS) +
                    " (default: all but pfifo at the root, all but noqueue "
                    "under prio)")
    ap.add_argument("--under", choices=["prio"],
                    help="measure each qdisc as the child of a prio root, "
                    "where none takes the empty-queue bypass")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 round of 2 s")
    ap.add_argument("--icount", action="store_true",
                    help="the guest runs under QEMU's -icount shift=0 "
                    "(run.sh --icount): record it, for the report")
    cfg = ap.parse_args()
    if cfg.quick:
        cfg.reps, cfg.seconds = 1, 2.0
    flows = [int(x) for x in cfg.flows.split(",")]
    if cfg.qdiscs is None:
        skip = "noqueue" if cfg.under else "pfifo"
        cfg.qdiscs = ",".join(q for q in QDISCS if q != skip)
    unknown = [q for q in cfg.qdiscs.split(",") if q not in QDISCS]
    if unknown:
        ap.error(f"unknown qdisc {unknown[0]!r}: one of {', '.join(QDISCS)}")
    if cfg.under and "noqueue" in cfg.qdiscs.split(","):
        ap.error("noqueue cannot be a child qdisc (--under)")
    qdiscs = [QDISCS[q] for q in cfg.qdiscs.split(",")]
    os.makedirs(cfg.out, exist_ok=True)
    if not os.access(FLOOD, os.X_OK):
        sys.exit(f"overhead: {FLOOD} missing (bench/overhead/run.sh "
                 "builds it)")

    t_begin = time.monotonic()
    p3lib.sh("modprobe sch_p3")
    klog = p3lib.KernelLog()
    p3lib.topology(ipv6=False)
    # Receive work on CPU 1, the sender on CPU 0 (udpflood -c 0); with
    # one CPU (--icount) both share it.
    if (os.cpu_count() or 1) > 1:
        p3lib.sh(f"sh -c 'echo 2 > /sys/class/net/{RDEV}/queues/rx-0/"
                 "rps_cpus'", ns=RCV)
    # Drop the datagrams as early as the receiver can (no socket lookup,
    # no ICMP); ARP must still pass, and a static entry avoids it anyway.
    tc_batch(RCV, [f"qdisc add dev {RDEV} clsact",
                   f"filter add dev {RDEV} ingress protocol ip prio 1 "
                   "flower ip_proto udp action drop"])
    mac = run(RCV, ["ip", "-br", "link", "show", RDEV]).split()[2]
    run(SND, ["ip", "neigh", "replace", RADDR, "lladdr", mac, "dev", SDEV,
              "nud", "permanent"])
    qs = Qstats(SND, SDEV, child_major=1)
    runs = []
    total = cfg.reps * len(flows) * len(qdiscs)
    try:
        for rep in range(cfg.reps):
            for nflows in flows:
                k = rep % len(qdiscs)
                for spec in qdiscs[k:] + qdiscs[:k]:
                    rec = measure(spec, nflows, cfg, qs)
                    rec["round"] = rep
                    runs.append(rec)
                    pps = rec["qdisc_pps"] or rec["send_pps"]
                    log(f"[{len(runs)}/{total}] round {rep + 1}, "
                        f"{nflows} flows, {spec}: {pps / 1e3:.1f} kpps "
                        f"(rx {rec['rx_pps'] / 1e3:.1f} kpps)")
    finally:
        p3lib.teardown()
    res = {"kernel": platform.release(), "cpus": os.cpu_count(),
           "quick": cfg.quick, "icount": cfg.icount, "under": cfg.under,
           "size": cfg.size, "burst": cfg.burst,
           "seconds": cfg.seconds, "reps": cfg.reps, "flows": flows,
           "qdiscs": qdiscs, "runs": runs, **provenance()}
    for nflows in flows:
        for spec in qdiscs:
            v = [r["qdisc_pps"] or r["send_pps"] for r in runs
                 if r["qdisc"] == spec and r["flows"] == nflows]
            log(f"{nflows} flows, {spec}: median "
                f"{statistics.median(v) / 1e3:.1f} kpps")
    return save_results(cfg.out, res, klog, t_begin)


if __name__ == "__main__":
    sys.exit(main())
