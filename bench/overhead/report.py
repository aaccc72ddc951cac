#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Turns bench/overhead's results.json into results.md (on the host):
  bench/overhead/report.py build/bench/overhead
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "preempt"))

import hostmon  # noqa: E402

BASE = "pfifo_fast"
TARGET = 0.95


def pps(r):
    return r["qdisc_pps"] if r["qdisc_pps"] is not None else r["send_pps"]


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "build/bench/overhead"
    with open(os.path.join(outdir, "results.json")) as f:
        res = json.load(f)
    runs = res["runs"]
    med, best = {}, {}
    for nflows in res["flows"]:
        for q in res["qdiscs"]:
            v = [pps(r) for r in runs if r["flows"] == nflows and
                 r["qdisc"] == q]
            med[(nflows, q)] = statistics.median(v)
            best[(nflows, q)] = max(v)
    lines = [f"# Qdisc overhead ({'quick' if res['quick'] else 'full'} run)",
             "",
             f"Kernel {res['kernel']}, {res['cpus']} vCPUs (QEMU TCG), one "
             f"boot, {res['vm_seconds']:.0f} s in the VM; commit "
             f"{res.get('git', '?')}, sch_p3.ko sha256 "
             f"{res.get('sch_p3_sha256', '?')}.  One sender thread on CPU 0: "
             f"{res['size']}-byte UDP payloads, sendmmsg bursts of "
             f"{res['burst']}, {res['seconds']:.0f} s per measurement, "
             f"{res['reps']} rounds with the qdisc order rotating.  pps is "
             "counted by the root qdisc (its packet counter; noqueue: by the "
             "sender).  Ratios compare with pfifo_fast at the same flow "
             "count, by median and by best round (other load on the host "
             "only ever slows a round down).", "",
             hostmon.summary(os.path.join(outdir, "hostmon.json")), "",
             "| flows | qdisc | median kpps | best kpps | min kpps | "
             "÷ pfifo_fast (median) | ÷ pfifo_fast (best) | receiver kpps "
             "| send errors |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for nflows in res["flows"]:
        for q in res["qdiscs"]:
            rs = [r for r in runs if r["flows"] == nflows and r["qdisc"] == q]
            rx = statistics.median(r["rx_pps"] for r in rs)
            lines.append(
                f"| {nflows} | {q} | {med[(nflows, q)] / 1e3:.1f} | "
                f"{best[(nflows, q)] / 1e3:.1f} | "
                f"{min(pps(r) for r in rs) / 1e3:.1f} | "
                f"{med[(nflows, q)] / med[(nflows, BASE)]:.3f} | "
                f"{best[(nflows, q)] / best[(nflows, BASE)]:.3f} | "
                f"{rx / 1e3:.1f} | {sum(r['errors'] for r in rs)} |")
    lines += ["", "## Targets", ""]
    for nflows in res["flows"]:
        for q in ("p3 bands 8", "p3 bands 64"):
            if (nflows, q) not in med:
                continue
            rm = med[(nflows, q)] / med[(nflows, BASE)]
            rb = best[(nflows, q)] / best[(nflows, BASE)]
            ok = "met" if min(rm, rb) >= TARGET else \
                "missed" if max(rm, rb) < TARGET else "mixed"
            lines.append(f"- {nflows} flow(s), {q}: {rm:.3f} (median), "
                         f"{rb:.3f} (best) of {BASE} → **{ok}** "
                         f"(target ≥ {TARGET})")
        if (nflows, "p3 bands 8") in med and (nflows, "p3 bands 64") in med:
            rm = med[(nflows, "p3 bands 64")] / med[(nflows, "p3 bands 8")]
            rb = best[(nflows, "p3 bands 64")] / best[(nflows, "p3 bands 8")]
            lines.append(f"- {nflows} flow(s), 64 bands ÷ 8 bands: {rm:.3f} "
                         f"(median), {rb:.3f} (best)")
    if res.get("kernel_problems"):
        lines += ["", "## Kernel log problems", ""] + \
            [f"    {ln}" for ln in res["kernel_problems"]]
    lines.append("")
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
