#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Kernel event counts per iteration, P3 in the kernel against P3 in user
space, from runs of `emulate.py --count-events` (means over the runs of a
point):

  bench/train/events.py RESULTS.jsonl [--top N]

Per model and rate: every counted event's total, system calls by kind
(all threads), and the N largest (thread name, system call) pairs.
"""
import argparse
import collections
import json
import sys


def load(path):
    """{(model, gbps): {mode: [events_per_iter, ...]}}"""
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except ValueError:
                sys.exit(f"{path}:{n}: not JSON")
            if r.get("events_per_iter") and not r.get("bulk"):
                out[(r["model"], r["gbps"])][r["mode"]].append(
                    r["events_per_iter"])
    return out


SECTIONS = ("event", "system call", "thread: system call")


def flatten(ev):
    """One run's counts as {section: {row: count}}: every event's total,
    system calls by kind, and by (thread name, kind)."""
    rows = {s: collections.Counter() for s in SECTIONS}
    for name, e in ev.items():
        rows["event"][name] = e["total"]
    for key, v in ev.get("sys_enter", {}).get("by", {}).items():
        thread, _, call = key.rpartition(" ")
        rows["system call"][call] += v
        rows["thread: system call"][f"{thread}: {call}"] = v
    return rows


def mean(runs):
    rows = {s: collections.Counter() for s in SECTIONS}
    for r in runs:
        for s, c in flatten(r).items():
            for k, v in c.items():
                rows[s][k] += v / len(runs)
    return rows


def table(section, user, kern, top):
    keys = sorted(set(user) | set(kern),
                  key=lambda k: -max(user.get(k, 0), kern.get(k, 0)))[:top]
    print(f"\n| {section} | p3user | p3kernel | kernel ÷ user |")
    print("|---|---:|---:|---:|")
    for k in keys:
        u, v = user.get(k, 0), kern.get(k, 0)
        print(f"| {k} | {u:,.0f} | {v:,.0f} | "
              f"{f'{v / u:.2f}' if u else '–'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--top", type=int, default=12,
                    help="rows of each kind of system call table")
    args = ap.parse_args()
    data = load(args.results)
    if not data:
        sys.exit(f"{args.results}: no runs with events_per_iter "
                 "(emulate.py --count-events)")
    for (model, gbps), modes in sorted(data.items()):
        runs = {m: modes.get(m, []) for m in ("p3user", "p3kernel")}
        user, kern = mean(runs["p3user"]), mean(runs["p3kernel"])
        print(f"\n{model} at {gbps:g} Gbit/s, counts per iteration over all "
              f"hosts (runs: p3user {len(runs['p3user'])}, p3kernel "
              f"{len(runs['p3kernel'])})")
        for s in SECTIONS:
            table(s, user[s], kern[s], None if s == "event" else args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
