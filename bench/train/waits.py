#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Where worker 0's forward pass waits for parameters, from any
emulate.py record (every record carries worker 0's arrival times):

  bench/train/waits.py RESULTS.jsonl

Per run, means over the timed iterations: how long the forward pass
waited for its first layer after the previous backward pass ended, and
at which later layers it waited again.  Priority can shorten the first
wait; once the pass waits at a late layer, the iteration ends when that
layer's last bytes arrive, which the order of the layers before it no
longer changes.
"""
import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import traces           # noqa: E402


def waits(rec, job):
    """(wait for layer 0, {layer name: wait}), means per timed
    iteration, from worker 0's clock: the forward pass of iteration it
    starts when layer 0 arrives and computes each layer as soon as its
    parameters are there."""
    tw, starts, warmup = rec["trace_w0"], rec["starts_w0"], rec["warmup"]
    names = [la["name"] for la in job.profile["layers"]]
    timed = range(warmup, len(starts) - 1)
    if not timed:
        return 0.0, {}
    first, later = 0.0, collections.Counter()
    for it in timed:
        if it:                  # iteration 0 follows no backward pass
            first += starts[it] - tw["bwd_end"][it - 1]
        t = starts[it] + job.fwd[0]
        for la in range(1, len(job.fwd)):
            arrived = tw["arrive"][it][la]
            if arrived is not None and arrived > t:
                later[names[la]] += arrived - t
                t = arrived
            t += job.fwd[la]
    n = len(timed)
    return first / n, {k: v / n for k, v in later.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--top", type=int, default=3,
                    help="later waits to name, the longest first")
    args = ap.parse_args()
    print("| model | Gbit/s | mode | s/iter | wait for layer 0 | "
          "later waits | all waits |")
    print("|---|---:|---|---:|---:|---|---:|")
    with open(args.results) as f:
        for n, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
            except ValueError:
                sys.exit(f"{args.results}:{n}: not JSON")
            if not rec.get("trace_w0"):
                continue
            first, later = waits(rec, traces.job_of(rec))
            longest = sorted(later.items(), key=lambda x: -x[1])
            shown = ", ".join(f"{k} {v:.3f}" for k, v in longest[:args.top])
            if len(longest) > args.top:
                shown += f", {len(longest) - args.top} more"
            print(f"| {rec['model']} | {rec['gbps']:g} | {rec['mode']}"
                  f"{'+bulk' if rec.get('bulk') else ''} | "
                  f"{rec['iter_s']:.3f} | {first:.3f} | {shown or '–'} | "
                  f"{first + sum(later.values()):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
