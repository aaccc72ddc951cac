#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Tables and plots from the training emulation's JSON lines (host side).

  bench/train/report.py [--md OUT.md] [--png OUT.png] RESULTS.jsonl...
  bench/train/report.py --demo [--png OUT.png] RESULTS.jsonl

Repeated runs of one configuration are summarised by their median.
Throughput is real-equivalent samples/s (W x batch per iteration, with the
iteration time scaled back by the model's time scale).  "Gap closed" is
(X_mode - X_fifo) / (X_ideal - X_fifo) in throughput X; it is left out
where FIFO is already within 3% of the ideal (nothing to close).
"""
import argparse
import collections
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import job as jobmod    # noqa: E402
import models           # noqa: E402
import traces           # noqa: E402

TITLES = {m: models.MODELS[m][0]().title for m in models.MODELS}
ORDER = ["vgg19", "sockeye", "resnet50", "inception3"]
# P3's published gains (throughput over the MXNet baseline).
PAPER = {"vgg19": 1.66, "sockeye": 1.38, "resnet50": 1.25}
GAP_TARGET = {"vgg19": 0.90}
BULK_TARGET = 1.30
MIN_GAP = 0.03


def load(paths):
    runs, cal = [], []
    for p in paths:
        with open(p) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                if r.get("calibration"):
                    cal.append(r)
                elif "error" in r:
                    print(f"# skipped a failed run: {r['model']} {r['mode']} "
                          f"{r['gbps']:g}gbps: {r['error']}", file=sys.stderr)
                else:
                    runs.append(r)
    return runs, cal


class Table:
    """Median iteration time per (model, gbps, bulk, mode)."""

    def __init__(self, runs):
        acc = collections.defaultdict(list)
        self.meta = {}
        for r in runs:
            k = (r["model"], r["gbps"], int(r["bulk"]), r["mode"])
            acc[k].append(r["iter_s"])
            self.meta[k] = r
        self.iter = {k: statistics.median(v) for k, v in acc.items()}
        self.n = {k: len(v) for k, v in acc.items()}
        self.spread = {k: (max(v) - min(v)) / statistics.median(v)
                       for k, v in acc.items() if len(v) > 1}

    def bulks(self):
        """The stream counts of the bulk runs."""
        return sorted({b for (_, _, b, _) in self.iter if b})

    def points(self, bulk=0):
        pts = sorted({(m, g) for (m, g, b, _) in self.iter if b == bulk},
                     key=lambda x: (ORDER.index(x[0]) if x[0] in ORDER else 9,
                                    x[1]))
        return pts

    def get(self, model, gbps, mode, bulk=0):
        if mode == "ideal":
            r = self.any(model, gbps, bulk)
            return r["ideal_iter_s"] if r else None
        return self.iter.get((model, gbps, bulk, mode))

    def any(self, model, gbps, bulk=0):
        for mode in jobmod.MODES_MEASURED:
            r = self.meta.get((model, gbps, bulk, mode))
            if r:
                return r
        return None

    def speedup(self, model, gbps, mode, bulk=0, base="fifo"):
        a, b = self.get(model, gbps, base, bulk), self.get(model, gbps, mode,
                                                           bulk)
        return a / b if a and b else None

    def gap(self, model, gbps, mode):
        f, m, i = (self.get(model, gbps, x) for x in ("fifo", mode, "ideal"))
        return gap_closed(m, f, i) if f and m and i else None


def gap_closed(mode_s, fifo_s, ideal_s):
    """The share of the FIFO-to-ideal gap a mode closes, in throughput,
    from the three iteration times; None where FIFO is within MIN_GAP of
    the ideal (nothing to close)."""
    if 1 / ideal_s - 1 / fifo_s < MIN_GAP / fifo_s:
        return None
    return (1 / mode_s - 1 / fifo_s) / (1 / ideal_s - 1 / fifo_s)


def fmt(v, spec=".2f", none="–"):
    return none if v is None else format(v, spec)


def pct(v):
    return "–" if v is None else f"{v:.0%}"


def sweep_table(t):
    modes = list(jobmod.MODES_MEASURED) + ["ideal"]
    out = ["| model | Gbit/s (real) | emulated link | "
           + " | ".join(f"{jobmod.MODE_TITLES[m]} s/iter" for m in modes)
           + " | samples/s FIFO → P3 kernel | speedup slice / P3 user / "
           "P3 kernel / ideal | gap closed P3 user / P3 kernel |",
           "|" + "---|" * (3 + len(modes) + 3)]
    for model, g in t.points():
        r = t.any(model, g)
        samples = [t.get(model, g, m) for m in ("fifo", "p3kernel")]
        sps = ["–" if s is None else f"{r['workers'] * r['batch'] * r['time_scale'] / s:.0f}"
               for s in samples]
        out.append(
            f"| {TITLES[model]} | {g:g} | {r['rate_mbit']:.2f} Mbit/s | "
            + " | ".join(fmt(t.get(model, g, m)) for m in modes)
            + f" | {sps[0]} → {sps[1]} | "
            + " / ".join(fmt(t.speedup(model, g, m), ".2f") + "x"
                         for m in ("slice", "p3user", "p3kernel", "ideal"))
            + " | " + " / ".join(pct(t.gap(model, g, m))
                                 for m in ("p3user", "p3kernel")) + " |")
    return "\n".join(out)


def best_points(t):
    best = {}
    for model, g in t.points():
        s = t.speedup(model, g, "p3kernel")
        if s is not None and (model not in best or s > best[model][1]):
            best[model] = (g, s)
    return best


def target_table(t):
    out = ["| model | best point | P3 kernel speedup | paper | met | "
           "P3 user speedup | gap closed (kernel) | gap target |",
           "|---|---|---|---|---|---|---|---|"]
    for model, (g, s) in sorted(best_points(t).items(),
                                key=lambda x: ORDER.index(x[0])):
        paper = PAPER.get(model)
        met = "–" if paper is None else ("yes" if s >= paper else
                                         f"no ({s / paper - 1:+.0%})")
        gt = GAP_TARGET.get(model)
        gap = t.gap(model, g, "p3kernel")
        gmet = "–" if gt is None else (f"≥{gt:.0%}: " + (
            "yes" if gap is not None and gap >= gt else "no"))
        out.append(f"| {TITLES[model]} | {g:g} Gbit/s | {s:.2f}x | "
                   f"{'–' if paper is None else f'{paper:.2f}x'} | {met} | "
                   f"{fmt(t.speedup(model, g, 'p3user'))}x | {pct(gap)} | "
                   f"{gmet} |")
    return "\n".join(out)


def bulk_table(t):
    if not t.bulks():
        return None
    out = ["| model | Gbit/s | upload streams | FIFO s/iter | P3 user s/iter "
           "| P3 kernel s/iter | kernel ÷ user throughput | target | "
           "without upload: user / kernel s/iter |",
           "|---|---|---|---|---|---|---|---|---|"]
    for n in t.bulks():
        for model, g in t.points(bulk=n):
            u = t.get(model, g, "p3user", n)
            k = t.get(model, g, "p3kernel", n)
            ratio = u / k if u and k else None
            met = "–" if ratio is None else (f"≥{BULK_TARGET:.1f}x: " + (
                "yes" if ratio >= BULK_TARGET else "no"))
            out.append(f"| {TITLES[model]} | {g:g} | {n} | "
                       f"{fmt(t.get(model, g, 'fifo', n))} | {fmt(u)} | "
                       f"{fmt(k)} | {fmt(ratio)}x | {met} | "
                       f"{fmt(t.get(model, g, 'p3user'))} / "
                       f"{fmt(t.get(model, g, 'p3kernel'))} |")
    return "\n".join(out)


def cal_table(cal):
    if not cal:
        return None
    out = ["| emulated rate | one TCP flow through p3 `rate` | through tbf "
           "+ pfifo |", "|---|---|---|"]
    for c in sorted(cal, key=lambda c: c["rate_Bps"]):
        out.append(f"| {c['rate_Bps'] * 8 / 1e6:.2f} Mbit/s | "
                   f"{c['p3_eff']:.1%} | {c['tbf_eff']:.1%} |")
    return "\n".join(out)


def diag_table(runs):
    """Per run: link use in the timed window, stall, CPU, TCP, preemption."""
    out = ["| model | Gbit/s | mode | upload | s/iter | stall s/iter | link "
           "use workers / servers | push spread s, median / p90 | "
           "discordant | workers' hand-overs late, p90 ms | VM CPU | "
           "TCP retrans | p3 preemptions |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    key = {m: i for i, m in enumerate(jobmod.MODES)}
    for r in sorted(runs, key=lambda r: (ORDER.index(r["model"]), r["gbps"],
                                         int(r["bulk"]), key[r["mode"]])):
        lu = r.get("link_util") or {}
        spread = traces.push_spread(r)
        late = traces.late_summary(traces.lateness(r).get("workers", []))
        out.append(
            f"| {TITLES[r['model']]} | {r['gbps']:g} | {r['mode']} | "
            f"{int(r['bulk']) or '–'} | {r['iter_s']:.2f} | "
            f"{r.get('stall_s', 0):.2f} | {pct(lu.get('workers'))} / "
            f"{pct(lu.get('servers'))} | "
            f"{fmt(spread and spread['median'])} / "
            f"{fmt(spread and spread['p90'])} | "
            f"{fmt(traces.discordance(r), '.3f')} | "
            f"{fmt(late and late['p90'] * 1e3, '.0f')} | "
            f"{pct(r.get('cpu_busy'))} | "
            f"{(r.get('tcp') or {}).get('TcpRetransSegs', '–')} | "
            f"{(r.get('qdisc') or {}).get('preemptions', '–')} |")
    return "\n".join(out)


def health(runs):
    """CPU load and run-to-run spread: how far to trust the numbers."""
    busy = [r["cpu_busy"] for r in runs if r.get("cpu_busy") is not None]
    drops = sum(r.get("qdisc", {}).get("drops", 0) for r in runs)
    if not busy:
        return ""
    hot = sum(b >= jobmod.CPU_BOUND for b in busy)
    warn = (f"  {hot} runs had the VM's CPU {jobmod.CPU_BOUND:.0%} busy or "
            "more: there the emulator's own CPU may set the pace, not the "
            "link (run again with a larger --compute-s, or "
            "P3_TRAIN_COMPUTE_S for run.sh)." if hot else "")
    threads = sorted({r["tcg_thread"] for r in runs if r.get("tcg_thread")})
    how = {"single": "both vCPUs on one host thread",
           "multi": "a host thread per vCPU"}
    qemu = (f"  QEMU ran {' or '.join(how.get(t, t) for t in threads)}."
            if threads else "")
    clocks = sorted({r["clocksource"] for r in runs if r.get("clocksource")})
    clock = (f"  The guest's clock source: {' or '.join(clocks)}."
             if clocks else "")
    return (f"{len(runs)} runs; VM CPU busy median {statistics.median(busy):.0%}"
            f", max {max(busy):.0%}; qdisc drops in all runs: {drops}.{qemu}{clock}"
            f"{warn}")


def plot(t, path, demo=False):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modelset = [m for m in ORDER if any(p[0] == m for p in t.points())]
    n = len(modelset)
    cols = 1 if n == 1 else 2
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.2 * rows),
                             squeeze=False)
    style = {"slice": ("tab:gray", "s", "--"), "p3user": ("tab:orange", "^", "-"),
             "p3kernel": ("tab:blue", "o", "-"), "ideal": ("black", "_", ":")}
    for ax, model in zip(axes.flat, modelset):
        gs = sorted(g for m, g in t.points() if m == model)
        for mode, (color, marker, ls) in style.items():
            ys = [t.speedup(model, g, mode) for g in gs]
            xs = [g for g, y in zip(gs, ys) if y is not None]
            ys = [y for y in ys if y is not None]
            if ys:
                ax.plot(xs, ys, color=color, marker=marker, ls=ls,
                        label=jobmod.MODE_TITLES[mode])
        for n, mk in zip(t.bulks(), "xP*D"):
            bg = sorted(g for m, g in t.points(bulk=n) if m == model)
            for mode, color in (("p3user", "tab:orange"),
                                ("p3kernel", "tab:blue")):
                # Against FIFO without the upload: what the job keeps.
                ys = [t.get(model, g, "fifo") / t.get(model, g, mode, n)
                      if t.get(model, g, "fifo") and t.get(model, g, mode, n)
                      else None for g in bg]
                pts = [(g, y) for g, y in zip(bg, ys) if y is not None]
                if pts:
                    ax.plot(*zip(*pts), color=color, marker=mk, ls="none",
                            ms=9, label=f"{jobmod.MODE_TITLES[mode]} + "
                            f"{n}-stream upload")
        if model in PAPER:
            ax.axhline(PAPER[model], color="tab:red", lw=0.8, ls="-.",
                       label=f"P3 paper (+{PAPER[model] - 1:.0%})")
        ax.axhline(1.0, color="black", lw=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xticks(gs)
        ax.set_xticklabels([f"{g:g}" for g in gs])
        ax.set_xlabel("link rate, real-equivalent Gbit/s")
        ax.set_ylabel("speedup over FIFO (WFBP)")
        ax.set_title(f"{TITLES[model]}: emulated, {t.any(model, gs[0])['workers']}"
                     f" workers + {t.any(model, gs[0])['servers']} servers")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def demo_plot(t, model, g, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in ("fifo", "slice", "p3user", "p3kernel", "ideal")
             if t.get(model, g, m) is not None]
    vals = [t.get(model, g, m) for m in modes]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    colors = {"fifo": "tab:red", "slice": "tab:gray", "p3user": "tab:orange",
              "p3kernel": "tab:blue", "ideal": "black"}
    bars = ax.bar([jobmod.MODE_TITLES[m] for m in modes], vals,
                  color=[colors[m] for m in modes])
    for b, v in zip(bars, vals):
        ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.2f}", ha="center",
                va="bottom", fontsize=8)
    r = t.any(model, g)
    ax.set_ylabel("emulated seconds per iteration")
    ax.set_title(f"{TITLES[model]}, {r['workers']}+{r['servers']} hosts, "
                 f"{g:g} Gbit/s real-equivalent ({r['rate_mbit']:.2f} Mbit/s)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def demo(t, png):
    pts = [p for p in t.points() if p[0] == "vgg19"] or t.points()
    model, g = pts[0]
    r = t.any(model, g)
    print(f"\n{TITLES[model]}, {r['workers']} workers + {r['servers']} servers,"
          f" {g:g} Gbit/s real-equivalent (emulated {r['rate_mbit']:.2f} "
          f"Mbit/s per host, time x{r['time_scale']:.2f}, bytes "
          f"1/{1 / r['byte_scale']:.0f})\n")
    print(f"  {'mode':<22} {'s/iter':>8} {'samples/s':>10} {'speedup':>8}")
    fifo = t.get(model, g, "fifo")
    for m in ("fifo", "slice", "p3user", "p3kernel", "ideal"):
        v = t.get(model, g, m)
        if v is None:
            continue
        sps = r["workers"] * r["batch"] * r["time_scale"] / v
        print(f"  {jobmod.MODE_TITLES[m]:<22} {v:8.2f} {sps:10.1f} "
              f"{fifo / v:7.2f}x")
    gap = t.gap(model, g, "p3kernel")
    if gap is not None:
        print(f"\n  P3 in the kernel closes {gap:.0%} of the FIFO-to-ideal gap.")
    if png:
        demo_plot(t, model, g, png)
        print(f"  plot: {png}")
    p3 = t.get(model, g, "p3kernel")
    ideal = t.get(model, g, "ideal")
    print(f"speedup: {TITLES[model]} {fifo / p3:.2f}x (fifo {fifo:.2f} s/iter,"
          f" p3 {p3:.2f} s/iter, ideal {ideal:.2f} s/iter)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--md", help="write the markdown tables here")
    ap.add_argument("--png", help="write the plot here")
    ap.add_argument("--demo", action="store_true",
                    help="the demo's short table and final speedup line")
    args = ap.parse_args()
    runs, cal = load(args.results)
    if not runs:
        sys.exit("report.py: no successful runs in " + " ".join(args.results))
    t = Table(runs)
    if args.demo:
        demo(t, args.png)
        return 0
    parts = ["### Throughput and speedup over FIFO\n", sweep_table(t),
             "\n### Best point per model against P3's gains\n",
             target_table(t)]
    b = bulk_table(t)
    if b:
        parts += ["\n### With a co-located bulk upload on every worker host\n",
                  b]
    c = cal_table(cal)
    if c:
        parts += ["\n### Shaper calibration\n", c]
    parts += ["\n### Per run\n",
              "Push spread: how far apart the workers' pushes of one key "
              "reached its server (runs with --trace); a server sends a key "
              "back only once the last of them is in.  Discordant: the "
              "share of a server's key pairs that two workers' pushes "
              "reached it in opposite orders.  Hand-overs late: how long "
              "after a layer's backward was due to end the worker's sender "
              "began to hand its pushes over to libp3.\n",
              diag_table(runs), "\n" + health(runs)]
    text = "\n".join(parts) + "\n"
    if args.md:
        os.makedirs(os.path.dirname(os.path.abspath(args.md)), exist_ok=True)
        with open(args.md, "w") as f:
            f.write(text)
    print(text)
    if args.png:
        plot(t, args.png)
        print(f"plot: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
