#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Per-packet cost by flow count, in guest instructions: run as root in a
VM booted with one vCPU and QEMU's `-icount shift=0` (bench/overhead/
flowcost.sh does both), where guest time counts executed instructions, one
nanosecond each, whatever the host is doing.  Packets per guest second is
then packets per 10^9 instructions, and 10^9 / pps is the instructions
one packet costs on its whole path: the sender's syscall, forwarding,
the qdisc, the receiver's drop.  Cache misses cost nothing under TCG, so
this measures work (what "bounded work per packet" is about), not time.

Topology: a router namespace p3rtr sends 64-byte UDP datagrams with
udpflood -u N (one unconnected socket, N destinations 10.64.0.0 + i) to
the sender host p3snd, which forwards them out of s0, where the qdisc
under test sits, to p3rcv, which drops them at ingress.  Forwarded
packets have no local socket, so p3 keys each destination as its own flow
(by hash): N flows.  Each configuration sends for as long again to warm
up (making the flows) right before it is measured.

  selftests/vm-run --cpus 1 -- bench/overhead/flowcost.py --out DIR

Results go to DIR/flowcost.json and a Markdown table to stdout.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "selftests"))

from p3lib import (FORWARDED, RCV, RDEV, SDEV, SND, KernelLog,  # noqa
                   qdisc_json, router, sh, tc, teardown, topology,
                   udpflood)

BASE = FORWARDED.split("/")[0]
FLOWS = (16, 1024, 16384, 100000)
# (label, qdisc on s0, the row its excess is taken over).  "overflow"
# rows pace to 1 Mbit/s, so nearly every packet is admitted by pushing out
# another (p3 at its limit) or dropped at the tail (tbf's bfifo, the
# reference: one enqueue and one drop per packet, no transmit).
QDISCS = [
    ("pfifo", "pfifo", None),
    ("fq_codel", "fq_codel", "pfifo"),
    ("p3", "p3", "pfifo"),
    ("p3 buckets 131072", "p3 buckets 131072", "pfifo"),
    ("tail drop (tbf)", "tbf rate 1mbit burst 1600 limit 100kb", None),
    ("p3 overflow", "p3 rate 1mbit limit 1000", "tail drop (tbf)"),
    ("p3 overflow buckets 131072", "p3 rate 1mbit limit 1000 "
     "buckets 131072", "tail drop (tbf)"),
]


def drop_at_receiver():
    """p3rcv drops the flood at ingress: its cost stays the same whatever
    the qdisc under test, and no ICMP comes back."""
    sh(f"tc qdisc add dev {RDEV} clsact", ns=RCV)
    sh(f"tc filter add dev {RDEV} ingress protocol ip prio 1 flower "
       "ip_proto udp action drop", ns=RCV)


def measure(spec, kind, flows, seconds):
    # "replace" keeps handle 1: and so refuses another kind: delete first.
    sh(f"tc qdisc del dev {SDEV} root", ns=SND, check=False)
    tc(f"qdisc add dev {SDEV} root handle 1: {spec}")
    q0 = qdisc_json(kind=kind)
    # One run: a warm-up that makes the flows, then the measurement, with
    # no gap in which they could go idle long enough to be collected.
    res = udpflood(f"-d {BASE} -p 9 -u {flows} -w {seconds} "
                   f"-t {seconds} -s 64")
    q1 = qdisc_json(kind=kind)
    pps = res["sent"] / res["seconds"]
    enq = sum(q1[k] - q0[k] for k in ("packets", "drops", "qlen"))
    rec = {"qdisc": spec, "flows": flows, "guest_seconds": res["seconds"],
           "sent": res["sent"], "pps": pps,
           "insns_per_packet": 1e9 / pps if pps else None,
           # Every datagram sent must have reached the qdisc, or the
           # sender's count would not be the qdisc's packet rate.
           "reached_qdisc": enq / (res["sent"] + res["warmup_sent"])}
    if kind == "p3":
        x0, x1 = q0["xstats"], q1["xstats"]
        rec["flows_live"] = x1["flows"]
        # Flows made (and so freed again) per packet sent, warm-up
        # included: a flow idle for a second is collected, so one whose
        # packets come further apart is made anew for each.
        rec["created_per_packet"] = ((x1["flows_created"] -
                                      x0["flows_created"]) /
                                     (res["sent"] + res["warmup_sent"]))
    return rec


def flood_session(out, name, measure_all):
    """Sets up the forwarded flood, runs measure_all(), which returns the
    records, tears down, and writes them to @out/@name with the kernel's
    complaints.  Returns (records, complaints)."""
    os.makedirs(out, exist_ok=True)
    klog = KernelLog()
    topology(ipv6=False)
    router()
    drop_at_receiver()
    try:
        runs = measure_all()
    finally:
        sh(f"tc qdisc del dev {SDEV} root", ns=SND, check=False)
        teardown()
    problems = klog.new_problems()
    with open(os.path.join(out, name), "w") as f:
        json.dump({"runs": runs, "kernel_problems": problems,
                   "kernel": os.uname().release}, f, indent=1)
    return runs, problems


def markdown(head, rows):
    """A Markdown table: the @head cells, then (label, cells) rows."""
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    lines += [f"| {label} | " + " | ".join(cells) + " |"
              for label, cells in rows]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="guest seconds per measurement (1)")
    ap.add_argument("--flows", default=",".join(map(str, FLOWS)))
    cfg = ap.parse_args()
    flows = [int(x) for x in cfg.flows.split(",")]
    sh("modprobe sch_p3")

    def measure_all():
        runs = []
        for n in flows:
            for label, spec, _ in QDISCS:
                rec = measure(spec, spec.split()[0], n, cfg.seconds)
                rec["label"] = label
                runs.append(rec)
                made = rec.get("created_per_packet")
                print(f"# {n} flows, {label}: {rec['insns_per_packet']:.0f} "
                      f"instructions per packet ({rec['sent']} packets "
                      f"in {rec['guest_seconds']:.3f} guest s, "
                      f"{rec['reached_qdisc']:.4f} reached the qdisc"
                      + (f", {made:.3f} flows made per packet"
                         if made is not None else "") + ")",
                      file=sys.stderr, flush=True)
        return runs

    runs, problems = flood_session(cfg.out, "flowcost.json", measure_all)
    print(table(runs, flows))
    return 1 if problems else 0


def table(runs, flows):
    """Instructions per packet, whole path; for a row with a reference
    also its excess over the reference at the same flow count (the cost
    of the qdisc itself), and that excess against the fewest flows."""
    ipp = {(r["label"], r["flows"]): r["insns_per_packet"] for r in runs}
    live = {(r["label"], r["flows"]): r.get("flows_live") for r in runs}
    rows = []
    for label, _, ref in QDISCS:
        cells = []
        for n in flows:
            cell = f"{ipp[(label, n)]:,.0f}"
            if ref:
                extra = ipp[(label, n)] - ipp[(ref, n)]
                first = ipp[(label, flows[0])] - ipp[(ref, flows[0])]
                cell += f" ({extra:+,.0f}"
                if n != flows[0] and first > 0:
                    cell += f", {extra / first:.2f}×"
                cell += ")"
            if live[(label, n)] is not None:
                cell += f" [{live[(label, n)]:,} flows]"
            cells.append(cell)
        rows.append((label, cells))
    return markdown(["qdisc"] + [f"{n} flows" for n in flows], rows)


if __name__ == "__main__":
    sys.exit(main())
