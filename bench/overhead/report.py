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
FQ_CODEL_TARGET = 1.05


def pps(r):
    return r["qdisc_pps"] if r["qdisc_pps"] is not None else r["send_pps"]


def icount_lines(res, med):
    """Under -icount shift=0 a guest second is 10^9 instructions: the
    cost of a packet in instructions, and the qdisc's own part of it
    (less the floor's: noqueue, the same path without a qdisc, or under
    a prio root pfifo, the same path with the cheapest child)."""
    floor_q = "pfifo" if res.get("under") else "noqueue"
    where = (f"Every qdisc is the one child of a {res['under']} root, "
             "where none takes the empty-queue bypass.  "
             if res.get("under") else "")
    out = ["", "## Instructions per packet (-icount shift=0, one vCPU)", "",
           "Guest time counts guest instructions, so these are counts, not "
           f"timings: the host's load does not enter.  {where}\"own\" is "
           f"the cost less {floor_q}'s.  Target: p3 within "
           f"{FQ_CODEL_TARGET:.2f}× of fq_codel's.", "",
           "| flows | qdisc | instructions per packet | own | ÷ fq_codel | "
           "own ÷ fq_codel's own |", "|---:|---|---:|---:|---:|---:|"]
    for nflows in res["flows"]:
        ipp = {q: 1e9 / med[(nflows, q)] for q in res["qdiscs"]
               if (nflows, q) in med}
        floor, ref = ipp.get(floor_q), ipp.get("fq_codel")
        for q, v in ipp.items():
            own = v - floor if floor else None
            ref_own = ref - floor if floor and ref else None
            out.append(
                f"| {nflows} | {q} | {v:,.0f} | "
                f"{'–' if own is None else f'{own:,.0f}'} | "
                f"{'–' if not ref else f'{v / ref:.3f}'} | "
                f"{'–' if not ref_own or own is None else f'{own / ref_own:.2f}'} |")
    return out


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "build/bench/overhead"
    with open(os.path.join(outdir, "results.json")) as f:
        res = json.load(f)
    runs = res["runs"]
    med, best, paired = {}, {}, {}
    by_round = {(r["round"], r["flows"], r["qdisc"]): pps(r) for r in runs}
    for (rnd, nflows, q), v in by_round.items():
        base = by_round.get((rnd, nflows, BASE))
        if base:
            paired.setdefault((nflows, q), []).append(v / base)
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
             "sender).  The ratio to pfifo_fast is taken within each round "
             "(same flow count, measured within a minute of each other) and "
             "the median of the rounds is shown, with their range.", "",
             hostmon.summary(os.path.join(outdir, "hostmon.json")), "",
             "| flows | qdisc | median kpps | range kpps | ÷ pfifo_fast | "
             "range of ÷ | receiver kpps | send errors |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for nflows in res["flows"]:
        for q in res["qdiscs"]:
            rs = [r for r in runs if r["flows"] == nflows and r["qdisc"] == q]
            rx = statistics.median(r["rx_pps"] for r in rs)
            pr = paired.get((nflows, q), [])
            # Without pfifo_fast among --qdiscs there is nothing to divide by.
            ratio = (f"{statistics.median(pr):.3f} | "
                     f"{min(pr):.2f}–{max(pr):.2f}" if pr else "– | –")
            lines.append(
                f"| {nflows} | {q} | {med[(nflows, q)] / 1e3:.1f} | "
                f"{min(pps(r) for r in rs) / 1e3:.1f}–"
                f"{best[(nflows, q)] / 1e3:.1f} | {ratio} | "
                f"{rx / 1e3:.1f} | {sum(r['errors'] for r in rs)} |")
    lines += ["", "## Targets", ""]
    for nflows in res["flows"]:
        for q in ("p3 bands 8", "p3 bands 64"):
            if (nflows, q) not in paired:
                continue
            r = statistics.median(paired[(nflows, q)])
            lines.append(f"- {nflows} flow(s), {q}: {r:.3f} of {BASE} → "
                         f"**{'met' if r >= TARGET else 'missed'}** "
                         f"(target ≥ {TARGET})")
        if (nflows, "p3 bands 8") in med and (nflows, "p3 bands 64") in med:
            r64 = [by_round[(k, nflows, "p3 bands 64")] /
                   by_round[(k, nflows, "p3 bands 8")]
                   for k in range(res["reps"])
                   if (k, nflows, "p3 bands 8") in by_round and
                   (k, nflows, "p3 bands 64") in by_round]
            lines.append(f"- {nflows} flow(s), 64 bands ÷ 8 bands: "
                         f"{statistics.median(r64):.3f} (rounds "
                         f"{min(r64):.2f}–{max(r64):.2f})")
    if res.get("icount"):
        lines += icount_lines(res, med)
    if res.get("kernel_problems"):
        lines += ["", "## Kernel log problems", ""] + \
            [f"    {ln}" for ln in res["kernel_problems"]]
    lines.append("")
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
