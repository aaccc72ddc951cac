#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""P3 in the kernel against P3 in user space, early and in steady state.

  bench/train/steady.py [--early 1-3] [--late 6-9] RESULTS.jsonl ...

For every point (model, rate) with both a p3user and a p3kernel run of
enough timed iterations (emulate.py --iters 9 or more): worker 0's mean
iteration time over the early and the late timed iterations, counted
from 1 after the warm-up, and kernel ÷ user in throughput.  An iteration
runs from one start of layer 0's forward pass to the next.  A point run
more than once (rounds) gives the means over its runs, and beside the
ratio of the means the range of the rounds' own ratios, the k-th run of
one mode against the k-th of the other.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from report import load     # noqa: E402

MODES = ("p3user", "p3kernel")


def span(text):
    lo, hi = (int(x) for x in text.split("-"))
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"not a range of iterations: {text}")
    return lo, hi


def mean_iter(rec, lo, hi):
    """Mean of timed iterations lo..hi (1-based after the warm-up), or
    None if the run timed fewer."""
    starts, w = rec["starts_w0"], rec["warmup"]
    if w + hi >= len(starts):
        return None
    return statistics.mean(starts[w + k] - starts[w + k - 1]
                           for k in range(lo, hi + 1))


def window_cells(by_mode, lo, hi):
    """The user, kernel and kernel ÷ user cells of one window: means over
    the runs that timed it, the ratio of the means in throughput and,
    over rounds, the range of each round's own ratio (k-th run against
    k-th, a round left out where either run did not time the window)."""
    user, kernel = ([mean_iter(r, lo, hi) for r in by_mode[x]]
                    for x in MODES)
    u, k = ([t for t in ts if t is not None] for ts in (user, kernel))
    if not u or not k:
        return ["–"] * 3
    ratio = f"{statistics.mean(u) / statistics.mean(k):.3f}"
    rounds = [a / b for a, b in zip(user, kernel)
              if a is not None and b is not None]
    if len(rounds) > 1:
        ratio += f" ({min(rounds):.3f}–{max(rounds):.3f})"
    return [f"{statistics.mean(u):.3f}", f"{statistics.mean(k):.3f}", ratio]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--early", type=span, default=(1, 3))
    ap.add_argument("--late", type=span, default=(6, 9))
    args = ap.parse_args()
    runs, _ = load(args.results)
    by_point = {}
    for r in runs:
        if r["mode"] in MODES and not r.get("bulk"):
            by_point.setdefault((r["model"], r["gbps"]), {}).setdefault(
                r["mode"], []).append(r)
    (e0, e1), (l0, l1) = args.early, args.late
    print(f"| model | Gbit/s | runs | user, {e0}–{e1} | kernel, {e0}–{e1} | "
          f"kernel ÷ user | user, {l0}–{l1} | kernel, {l0}–{l1} | "
          "kernel ÷ user |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = 0
    for (model, gbps), m in sorted(by_point.items()):
        if len(m) < len(MODES):
            continue
        cells = [f"{len(m[MODES[0]])}/{len(m[MODES[1]])}"]
        for lo, hi in (args.early, args.late):
            cells += window_cells(m, lo, hi)
        print(f"| {model} | {gbps:g} | " + " | ".join(cells) + " |")
        rows += 1
    if not rows:
        sys.exit("steady.py: no point has both a p3user and a p3kernel run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
