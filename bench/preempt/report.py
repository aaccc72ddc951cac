#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Turns bench/preempt's results.json into results.md, preempt.png and,
if the TSQ experiment ran, tsq.png.  Runs on the host (matplotlib is slow
to import under TCG):  bench/preempt/report.py build/bench/preempt
"""
import json
import math
import os
import statistics
import sys

import hostmon

# Wire bytes of a segment beyond its payload (Ethernet 14, IPv4 20, TCP
# with timestamps 32) and the payload of a full one on a 1500-byte MTU.
HDR, MSS = 66, 1448
MTU_FRAME = MSS + HDR                   # 1514
GSO_FRAME = 45 * MSS + 45 * HDR         # 68,130: a 64 KB GSO packet
MSG_HDR = 8                             # the urgent message's length field
TARGET = 1.2


def wire_bytes(size):
    size += MSG_HDR
    return size + math.ceil(size / MSS) * HDR


def bound(size, rate_bps, frame):
    """Physical bound: the message's wire bytes at line rate, plus one
    packet of @frame bytes already on the wire ahead of it."""
    return (wire_bytes(size) + frame) * 8 / rate_bps


def pctl(sorted_vals, q):
    """Nearest-rank percentile; math.inf stands for a censored value."""
    if not sorted_vals:
        return math.nan
    k = max(0, math.ceil(q * len(sorted_vals)) - 1)
    return sorted_vals[k]


def fmt_ms(t, cap):
    if math.isnan(t):
        return "–"
    if math.isinf(t):
        return f"> {cap * 1e3:.0f}"
    return f"{t * 1e3:.1f}" if t < 0.1 else f"{t * 1e3:.0f}"


def fmt_x(r):
    if math.isnan(r):
        return "–"
    if math.isinf(r):
        return "∞"
    return f"{r:.2f}" if r < 10 else f"{r:.0f}"


def cell(msgs, size, mode):
    ts = sorted(m["t"] if not m["censored"] else math.inf
                for m in msgs if m["size"] == size and m["mode"] == mode)
    return ts


def summarize(res):
    """{(qdisc, bulk, size, mode): {n, med, p99, med_x, p99_x, med_xg}}"""
    rate = res["rate_bps"]
    out = {}
    for s in res["sessions"]:
        for size in res["config"]["sizes"]:
            for mode in ("fresh", "long"):
                ts = cell(s["messages"], size, mode)
                b1 = bound(size, rate, MTU_FRAME)
                bg = bound(size, rate, GSO_FRAME)
                med, p99 = pctl(ts, 0.5), pctl(ts, 0.99)
                out[(s["qdisc"], s["bulk"], size, mode)] = {
                    "n": len(ts), "med": med, "p99": p99,
                    "med_x": med / b1, "p99_x": p99 / b1,
                    "med_xg": med / bg, "p99_xg": p99 / bg,
                    "reopened": sum(1 for m in s["messages"]
                                    if m.get("reopened") and
                                    m["size"] == size and m["mode"] == mode)}
    return out


def latency_tables(res, summ):
    rate, cap = res["rate_bps"], res["config"]["cap"]
    lines = []
    for size in res["config"]["sizes"]:
        b1, bg = bound(size, rate, MTU_FRAME), bound(size, rate, GSO_FRAME)
        lines += [f"#### {size >> 10} KB urgent message — bound "
                  f"{b1 * 1e3:.1f} ms (one MTU frame ahead), "
                  f"{bg * 1e3:.1f} ms (one 64 KB GSO packet ahead)", "",
                  "| qdisc | bulk flows | conn | n | median ms | p99 ms | "
                  "median ÷ bound | p99 ÷ bound | median ÷ GSO bound |",
                  "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
        for nbulk in res["config"]["bulk"]:
            for q in res["config"]["qdisc_list"]:
                for mode in ("fresh", "long"):
                    c = summ.get((q, nbulk, size, mode))
                    if not c:
                        continue
                    note = " ¹" if c["reopened"] else ""
                    lines.append(
                        f"| {q} | {nbulk} | {mode}{note} | {c['n']} | "
                        f"{fmt_ms(c['med'], cap)} | {fmt_ms(c['p99'], cap)} "
                        f"| {fmt_x(c['med_x'])} | {fmt_x(c['p99_x'])} | "
                        f"{fmt_x(c['med_xg'])} |")
        lines.append("")
    return lines


def summary_tables(res, summ):
    """Per number of bulk flows: median completion and its ratio to the
    MTU bound, every qdisc x size x connection kind."""
    cap = res["config"]["cap"]
    sizes = res["config"]["sizes"]
    lines = []
    for nbulk in res["config"]["bulk"]:
        head = "| qdisc | " + " | ".join(
            f"{s >> 10} KB {m}" for s in sizes for m in ("fresh", "long"))
        lines += [f"{nbulk} bulk flow{'s' if nbulk > 1 else ''}: median ms "
                  "(÷ MTU bound)", "", head + " |",
                  "|---|" + "---:|" * (2 * len(sizes))]
        for q in res["config"]["qdisc_list"]:
            cells = []
            for size in sizes:
                for mode in ("fresh", "long"):
                    c = summ.get((q, nbulk, size, mode))
                    cells.append(f"{fmt_ms(c['med'], cap)} "
                                 f"({fmt_x(c['med_x'])})" if c else "–")
            lines.append(f"| {q} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def session_table(res):
    rate = res["rate_bps"]
    goodput = rate * MSS / MTU_FRAME
    lines = ["| qdisc | bulk flows | link Mbit/s (bulk only) | "
             "bulk goodput Mbit/s (urgent phase) | link use | "
             "UDP re-tag: out of order / received | TCP reorder events "
             "(sender) | TCP OFO packets (receiver) | retransmits | "
             "qdisc drops |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in res["sessions"]:
        t0, t1 = s["window"]
        urgent_bps = s["urgent_bytes"] * 8 / (t1 - t0)
        use = (s["bulk_goodput_bps"] + urgent_bps) / goodput
        reord = sum(s["snd"].get(k, 0) for k in
                    ("TcpExtTCPSACKReorder", "TcpExtTCPTSReorder",
                     "TcpExtTCPRenoReorder"))
        u = s["udp"]
        lines.append(
            f"| {s['qdisc']} | {s['bulk']} | {s['link_Bps'] * 8e-6:.1f} | "
            f"{s['bulk_goodput_bps'] * 1e-6:.1f} | {use:.2f} | "
            f"{u['reordered']} / {u['received']} | {reord} | "
            f"{s['rcv'].get('TcpExtTCPOFOQueue', 0)} | "
            f"{s['snd'].get('TcpRetransSegs', 0)} | {s['drops']} |")
    return lines


def shaping_check(res):
    by = {}
    for s in res["sessions"]:
        by.setdefault(s["qdisc"], []).append(s["link_Bps"] * 8)
    rate = res["rate_bps"]
    lines = ["| shaping | link rate Mbit/s (mean of sessions) | ÷ configured |",
             "|---|---:|---:|"]
    for q, v in by.items():
        m = statistics.mean(v)
        lines.append(f"| {q} | {m * 1e-6:.2f} | {m / rate:.3f} |")
    return lines


def targets(res, summ):
    lines = []
    ok_all = True
    for (q, nbulk, size, mode), c in sorted(summ.items()):
        if not q.startswith("p3"):
            continue
        if not c["med_x"] <= TARGET:
            ok_all = False
            lines.append(f"- {q}, {nbulk} bulk, {size >> 10} KB {mode}: "
                         f"median {fmt_x(c['med_x'])}× the MTU bound "
                         f"({fmt_x(c['med_xg'])}× the GSO bound)")
    reord = [(s["qdisc"], s["bulk"], s["udp"]["reordered"])
             for s in res["sessions"] if s["qdisc"].startswith("p3")]
    bad = [r for r in reord if r[2]]
    head = [f"- p3 median within {TARGET}× of the MTU bound in every cell: "
            f"**{'met' if ok_all else 'missed'}**"]
    head.append(f"- p3 zero reorders (UDP re-tag probe, all sessions): "
                f"**{'met' if not bad else 'missed'}**")
    return head + (["", "Cells over the target:"] + lines if lines else [])


def tsq_section(res):
    """One row per variant of the TSQ experiment, and the model: a flow
    that keeps `unacked` segments in a FIFO whose backlog takes `delay`
    to drain moves unacked x MSS bytes per delay."""
    if not res.get("tsq"):
        return []
    rate = res["rate_bps"]
    lines = ["| variant | completion s | ÷ size/rate | urgent segs/pkt | "
             "bulk segs/pkt | backlog KB (pkts) | queue delay ms | urgent "
             "unacked segs | urgent cwnd | urgent pacing Mbit/s | urgent "
             "min_rtt ms | bulk min_rtt ms | model s | RTOs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
             "---:|---:|"]
    for r in res["tsq"]:
        m = r["msg"]
        tr = m.get("trace") or []
        size = r["size"]
        ideal = wire_bytes(size) * 8 / rate
        sk = r["skb"]

        def segs(d):
            return d["segs"] / d["skbs"] if d.get("skbs") else math.nan
        # Skip the first samples: the message has not reached the queue.
        mid = [x for x in tr if x["backlog"] is not None][2:]
        backlog = statistics.mean(x["backlog"] for x in mid) if mid else 0
        qlen = statistics.mean(x["qlen"] for x in mid) if mid else 0
        delay = backlog * 8 / rate
        unacked = statistics.mean(x["unacked"] for x in mid) if mid else 0
        cwnd = statistics.median(x["cwnd"] for x in mid) if mid else 0
        pacing = statistics.median(x["pacing_rate"] for x in mid) if mid \
            else 0
        minrtt = tr[-1]["min_rtt_us"] / 1e3 if tr else 0
        bulk_minrtt = [f["minrtt"] for f in r["bulk_flows"] if "minrtt" in f]
        model = size / (unacked * MSS / delay) if unacked and delay else 0
        t = m["t"] or 0
        lines.append(
            f"| {r['label']} | {'> ' if m['censored'] else ''}{t:.2f} | "
            f"{t / ideal:.1f} | {segs(sk['urgent']):.1f} | "
            f"{segs(sk['bulk']):.1f} | {backlog / 1e3:,.0f} ({qlen:.0f}) | "
            f"{delay * 1e3:.0f} | {unacked:.1f} | {cwnd:.0f} | "
            f"{pacing * 8e-6:.2f} | {minrtt:.2f} | "
            f"{statistics.median(bulk_minrtt) if bulk_minrtt else 0:.2f} | "
            f"{model:.2f} | {r['snd'].get('TcpExtTCPTimeouts', 0)} |")
    return lines


def plot(res, summ, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = res["config"]["sizes"]
    bulks = res["config"]["bulk"]
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4.8),
                             squeeze=False, sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, size in zip(axes[0], sizes):
        for i, q in enumerate(res["config"]["qdisc_list"]):
            for mode, style in (("fresh", "-o"), ("long", "--s")):
                ys = [summ.get((q, b, size, mode), {}).get("med_x", math.nan)
                      for b in bulks]
                ys = [y if not math.isinf(y) else
                      res["config"]["cap"] / bound(size, res["rate_bps"],
                                                   MTU_FRAME) for y in ys]
                ax.plot(bulks, ys, style, color=colors[i % len(colors)],
                        label=f"{q} ({mode})", markersize=4)
        ax.axhline(TARGET, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(bulks)
        ax.set_xticklabels([str(b) for b in bulks])
        ax.set_xlabel("bulk TCP flows")
        ax.set_title(f"{size >> 10} KB urgent message")
        ax.grid(True, which="both", lw=0.3)
    axes[0][0].set_ylabel("median completion ÷ physical bound (MTU)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", fontsize=7,
               ncol=len(res["config"]["qdisc_list"]))
    fig.suptitle(f"Urgent-message latency behind bulk TCP, "
                 f"{res['rate']} link, kernel {res['kernel']} (solid: fresh "
                 "connection, dashed: long-lived; dotted line: 1.2×; "
                 "messages cut at the cap plotted at the cap)", fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)


def plot_tsq(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for r in res["tsq"]:
        tr = r["msg"].get("trace") or []
        if not tr:
            continue
        t = [x["t"] for x in tr]
        a1.plot(t, [x["bytes_acked"] / 1024 for x in tr], label=r["label"])
        a2.plot(t, [(x["backlog"] or 0) / 1024 for x in tr],
                label=r["label"])
    a1.set_ylabel("urgent bytes acked (KB)")
    a2.set_ylabel("FIFO backlog (KB)")
    a2.set_xlabel("seconds since the message started")
    a1.legend(fontsize=8)
    a1.grid(True, lw=0.3)
    a2.grid(True, lw=0.3)
    fig.suptitle("512 KB urgent message behind 8 bulk flows, pfifo under "
                 f"tbf {res['rate']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "build/bench/preempt"
    with open(os.path.join(outdir, "results.json")) as f:
        res = json.load(f)
    summ = summarize(res)
    cfg = res["config"]
    md = [f"# Preemption latency ({'quick' if res['quick'] else 'full'} "
          f"run)", "",
          f"Kernel {res['kernel']}, {res['cpus']} vCPUs (QEMU TCG); link "
          f"{res['rate']} (tbf burst {res['tbf_burst']} B, or p3 `rate`); "
          f"{res['vm_seconds']:.0f} s in the VM; commit "
          f"{res.get('git', '?')}, sch_p3.ko sha256 "
          f"{res.get('sch_p3_sha256', '?')}"
          f"{', GSO packets capped at %d segments' % res['gso_max_segs'] if res.get('gso_max_segs') else ''}"
          ".  Urgent message sizes "
          f"{', '.join(str(s >> 10) + ' KB' for s in cfg['sizes'])}; up to "
          f"{cfg['reps']} messages per cell (fewer once a cell has used "
          f"{cfg['cell_budget']} s, at least {cfg['min_reps']}); a message "
          f"not done after {cfg['cap']} s is cut (\"> cap\").  p99 is the "
          "nearest-rank 99th percentile: with fewer than 100 messages it "
          "is the maximum.", "",
          hostmon.summary(os.path.join(outdir, "hostmon.json")), "",
          "Bound: the message's wire bytes (8-byte length + payload, "
          f"{HDR} B of headers per {MSS}-byte segment) at the link rate, "
          f"plus one {MTU_FRAME}-byte frame; the last column uses one "
          f"{GSO_FRAME}-byte 64 KB GSO packet instead (both shapers send "
          "a GSO packet whole).", "",
          "## Targets", ""] + targets(res, summ) + [
          "", "## Summary", ""] + summary_tables(res, summ) + [
          "## Completion time", ""] + latency_tables(res, summ) + [
          "¹ the long-lived connection was cut by the cap and reopened "
          "under load.", "",
          "## Sessions: link, bulk throughput, reordering", ""] + \
        session_table(res) + ["", "## Shaping check", ""] + \
        shaping_check(res) + [""]
    if res.get("tsq"):
        md += ["## TSQ experiment (pfifo under tbf, 8 bulk flows, 512 KB)",
               ""] + tsq_section(res) + [""]
    if res.get("kernel_problems"):
        md += ["## Kernel log problems", ""] + \
            [f"    {ln}" for ln in res["kernel_problems"]] + [""]
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(md))
    plot(res, summ, os.path.join(outdir, "preempt.png"))
    if res.get("tsq"):
        plot_tsq(res, os.path.join(outdir, "tsq.png"))
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
