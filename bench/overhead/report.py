#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Turns bench/overhead's results.json into results.md (on the host):
  bench/overhead/report.py build/bench/overhead
"""
import json
import os
import statistics
import sys

BASE = "pfifo_fast"
TARGET = 0.95


def pps(r):
    return r["qdisc_pps"] if r["qdisc_pps"] is not None else r["send_pps"]


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "build/bench/overhead"
    with open(os.path.join(outdir, "results.json")) as f:
        res = json.load(f)
    runs = res["runs"]
    med = {}
    lines = [f"# Qdisc overhead ({'quick' if res['quick'] else 'full'} run)",
             "",
             f"Kernel {res['kernel']}, {res['cpus']} vCPUs (QEMU TCG), one "
             f"boot, {res['vm_seconds']:.0f} s in the VM; commit "
             f"{res.get('git', '?')}, sch_p3.ko sha256 "
             f"{res.get('sch_p3_sha256', '?')}.  One sender "
             f"thread on CPU 0: {res['size']}-byte UDP payloads, "
             f"sendmmsg bursts of {res['burst']}, {res['seconds']:.0f} s "
             f"per measurement, {res['reps']} rounds with the qdisc order "
             "rotating.  pps is counted by the root qdisc (its packet "
             "counter; noqueue: by the sender).  Ratios compare medians with "
             f"{BASE} at the same flow count; the range is min–max over "
             "the rounds.", "",
             "| flows | qdisc | median kpps | range kpps | ÷ pfifo_fast | "
             "receiver kpps | send errors |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for nflows in res["flows"]:
        for q in res["qdiscs"]:
            rs = [r for r in runs if r["flows"] == nflows and r["qdisc"] == q]
            v = [pps(r) for r in rs]
            med[(nflows, q)] = statistics.median(v)
        base = med.get((nflows, BASE))
        for q in res["qdiscs"]:
            rs = [r for r in runs if r["flows"] == nflows and r["qdisc"] == q]
            v = [pps(r) for r in rs]
            m = med[(nflows, q)]
            rx = statistics.median(r["rx_pps"] for r in rs)
            lines.append(
                f"| {nflows} | {q} | {m / 1e3:.1f} | "
                f"{min(v) / 1e3:.1f}–{max(v) / 1e3:.1f} | "
                f"{m / base:.3f} | {rx / 1e3:.1f} | "
                f"{sum(r['errors'] for r in rs)} |")
    lines += ["", "## Targets", ""]
    for nflows in res["flows"]:
        base = med[(nflows, BASE)]
        for q in ("p3 bands 8", "p3 bands 64"):
            if (nflows, q) not in med:
                continue
            r = med[(nflows, q)] / base
            lines.append(f"- {nflows} flows, {q}: {r:.3f} of {BASE} → "
                         f"**{'met' if r >= TARGET else 'missed'}** "
                         f"(target ≥ {TARGET})")
        if (nflows, "p3 bands 8") in med and (nflows, "p3 bands 64") in med:
            r = med[(nflows, "p3 bands 64")] / med[(nflows, "p3 bands 8")]
            lines.append(f"- {nflows} flows, 64 bands ÷ 8 bands: {r:.3f}")
    if res.get("kernel_problems"):
        lines += ["", "## Kernel log problems", ""] + \
            [f"    {ln}" for ln in res["kernel_problems"]]
    lines.append("")
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
