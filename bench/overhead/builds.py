#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Instructions per packet of several sch_p3.ko builds, in one boot: run
as root in a VM booted with one vCPU and QEMU's `-icount shift=0`
(bench/overhead/builds.sh does both), on flowcost.py's forwarded flood.

It answers "does this change to sch_p3.c cost the packet path anything?"
for changes that leave behaviour alone (inlining, a refactor): each build
is loaded in turn, in rounds, and measured in the same configurations:

  transmit   p3 at the root, unshaped: nearly every packet finds p3 empty
             and leaves as its lone packet (the common path);
  overflow   p3 rate 1mbit limit 1000: nearly every packet is looked up,
             queued, and admitted by pushing another out;

each against its reference (pfifo; tbf's tail drop), measured in the
same round, so the excess is the qdisc's own cost.

  bench/overhead/builds.sh NAME=TREE NAME=TREE...
"""
import argparse
import json
import os
import statistics
import sys

# flowcost puts selftests/ on the path, for p3lib.
from flowcost import flood_session, markdown, measure
from p3lib import SDEV, SND, sh  # noqa: E402

# (configuration, p3's qdisc, its reference qdisc)
CONFIGS = [
    ("transmit", "p3", "pfifo"),
    ("overflow", "p3 rate 1mbit limit 1000",
     "tbf rate 1mbit burst 1600 limit 100kb"),
]


def load(path):
    sh(f"tc qdisc del dev {SDEV} root", ns=SND, check=False)
    sh("rmmod sch_p3", check=False)
    sh(f"insmod {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="guest seconds per measurement (1)")
    ap.add_argument("--flows", default="16,1024")
    ap.add_argument("--report", metavar="JSON",
                    help="print the table of an earlier run's builds.json")
    ap.add_argument("builds", nargs="*", metavar="NAME=PATH.ko")
    cfg = ap.parse_args()
    if cfg.report:
        with open(cfg.report) as f:
            runs = json.load(f)["runs"]
        print(table(runs, list(dict.fromkeys(r["build"] for r in runs))))
        return 0
    if not cfg.builds or not cfg.out:
        ap.error("name --out and at least one NAME=PATH.ko")
    builds = [b.split("=", 1) for b in cfg.builds]
    for name, path in builds:
        if not os.path.isfile(path):
            ap.error(f"{name}: no module at {path}")
    flows = [int(x) for x in cfg.flows.split(",")]

    def measure_all():
        runs = []
        for rnd in range(cfg.rounds):
            for name, path in builds:
                load(path)
                for label, spec, ref in CONFIGS:
                    for n in flows:
                        base = measure(ref, ref.split()[0], n, cfg.seconds)
                        rec = measure(spec, "p3", n, cfg.seconds)
                        rec.update(build=name, config=label, round=rnd,
                                   reference=base["insns_per_packet"])
                        runs.append(rec)
                        print(f"# round {rnd + 1}, {name}, {label}, {n} "
                              f"flows: {rec['insns_per_packet']:.0f} "
                              f"instructions a packet, reference "
                              f"{rec['reference']:.0f}",
                              file=sys.stderr, flush=True)
        return runs

    runs, problems = flood_session(cfg.out, "builds.json", measure_all)
    print(table(runs, [b[0] for b in builds]))
    return 1 if problems else 0


def table(runs, names):
    """p3's own instructions a packet (its excess over the reference of
    the same round), by build: the median over rounds and flow counts,
    its range, and the median's difference from the first build's."""
    own = {}
    for r in runs:
        own.setdefault((r["config"], r["build"]), []).append(
            r["insns_per_packet"] - r["reference"])
    rows = []
    for label, _, _ in CONFIGS:
        first = statistics.median(own[(label, names[0])])
        cells = []
        for name in names:
            vals = own[(label, name)]
            mid = statistics.median(vals)
            cell = f"{mid:,.0f} ({min(vals):,.0f}–{max(vals):,.0f})"
            if name != names[0]:
                cell += f" **{mid - first:+,.0f}**"
            cells.append(cell)
        rows.append((label, cells))
    return markdown(["configuration"] + names, rows)


if __name__ == "__main__":
    sys.exit(main())
