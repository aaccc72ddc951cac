#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Where an iteration's link time goes, from emulate.py --trace records.

  bench/train/traces.py RESULTS.jsonl

Per run, means over the timed iterations (times in seconds after worker
0's end of backward):

  last push   when the last key had all W workers' pushes at its server;
  server idle a fluid model of each server's link: a key's pull (W copies)
              can start once all its pushes arrived, and the link sends
              whatever it holds at the goodput rate.  Idle is the time
              between its first and last complete key with nothing to
              send; finish is when it would have sent everything;
  end         when worker 0 had each server's last pull, against that
              finish (lag: how far the real link trails the fluid one);
  discordant  the share of a server's key pairs that two workers'
              pushes reached it in opposite orders (traces.discordance);

and then, for runs that have it, how late each host handed its batches
over to libp3 (median, p90, p99 and max, workers and servers apart): the
timing noise simulate.py --jitter models.

Rates over a window are not given: a message counts when its last byte
arrives, so a window's count is off by up to one message per socket.
"""
import argparse
import collections
import itertools
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import job as jobmod    # noqa: E402
import models           # noqa: E402


def fluid(events, rate):
    """(idle, finish) of a link fed (time, bytes) events, from the first
    event to the last, sending at @rate whenever it holds bytes."""
    events = sorted(events)
    t, backlog, idle = events[0][0], 0.0, 0.0
    for te, nbytes in events:
        drained = t + backlog / rate
        if drained < te:
            idle += te - drained
            backlog = 0.0
        else:
            backlog -= (te - t) * rate
        t = te
        backlog += nbytes
    return idle, t + backlog / rate


def spread_summary(spreads):
    """{"median", "p90"} of push spreads (s), or None for none."""
    if len(spreads) < 2:
        return None
    return {"median": statistics.median(spreads),
            "p90": statistics.quantiles(spreads, n=10)[-1]}


def timed_pushes(rec):
    """The iterations whose pushes push_spreads counts."""
    return range(rec["warmup"], len(rec["trace_w0"]["bwd_end"]) - 1)


def complete_pushes(rec):
    """(server, iteration, key, [(worker, time)]) of every key that all
    workers pushed in the iterations timed_pushes gives; none for a run
    without --trace."""
    if "trace_servers" not in rec:
        return
    timed = timed_pushes(rec)
    for server, arrivals in rec["trace_servers"].items():
        for key, got in arrivals.items():
            it = int(key.split(":")[0])
            if it in timed and len(got) == rec["workers"]:
                yield server, it, key, got


def push_spreads(rec):
    """Per key pushed in the timed iterations, how far apart the workers'
    pushes of it reached its server (s); [] for a run without --trace.
    The last backward pass is left out: the run ends once the next
    forward pass has its first layer, with that pass's keys still
    queued."""
    return [max(t for _, t in got) - min(t for _, t in got)
            for _, _, _, got in complete_pushes(rec)]


def push_spread(rec):
    return spread_summary(push_spreads(rec))


def discordance(rec):
    """How differently the workers ordered their pushes: per server and
    timed iteration (as push_spreads has them), the share of its keys'
    pairs that two workers' pushes reached it in opposite orders, the
    mean over every pair of workers and then over all; None for a run
    without --trace.  0 when every worker sends in one order (FIFO
    does), 0.5 for orders unrelated to each other."""
    if "trace_servers" not in rec:
        return None
    # (server, iteration) -> worker -> [(time, key)]
    orders = collections.defaultdict(lambda: collections.defaultdict(list))
    for server, it, key, got in complete_pushes(rec):
        for w, t in got:
            orders[(server, it)][w].append((t, key))
    shares = []
    for by_worker in orders.values():
        ranks = [{k: i for i, (_, k) in enumerate(sorted(pushes))}
                 for pushes in by_worker.values()]
        for a, b in itertools.combinations(ranks, 2):
            pairs = list(itertools.combinations(a, 2))
            if pairs:
                shares.append(sum((a[x] < a[y]) != (b[x] < b[y])
                                  for x, y in pairs) / len(pairs))
    return statistics.mean(shares) if shares else None


def lateness(rec):
    """{"workers": [...], "servers": [...]}: how late (s) each host
    handed each batch over to libp3, in the iterations push_spreads
    counts (a worker's pushes of a layer, after that layer's backward
    was due to end, so its compute thread's oversleeping counts too; a
    server's pulls of a key, after the last push of it arrived); {} for
    a run without it.  A server's pulls of iteration i answer the pushes
    of i - 1.  Runs before commit 5082f36 timed when a sender thread took
    the batch off its queue."""
    if "trace_late" not in rec:
        return {}
    timed = timed_pushes(rec)
    return {role: [s for host in rec["trace_late"][role].values()
                   for it, s in host if it - shift in timed]
            for role, shift in (("workers", 0), ("servers", 1))}


def lateness_by_layer(rec):
    """{layer: [...]}: the workers' lateness of lateness(), by the layer
    whose pushes were late.  Since commit 5082f36 a worker hands its layers
    over in backward order, last layer first, one batch each, so the
    k-th of an iteration's L records is layer L - 1 - k; an iteration
    with another count (runs before 5082f36 recorded a batch per
    layer and server) is left out.  The lateness has a shape that the
    pooled list loses: where the link has room, the first batches of
    backward wait behind the sends of the big ones before them,
    while layer 0's, handed over last, is on time (`git show
    216191b:docs/benchmarks.md`, "Steady state, and what the lateness
    is")."""
    if "trace_late" not in rec:
        return {}
    nlayers = len(rec["trace_w0"]["arrive"][0])
    timed = timed_pushes(rec)
    out = collections.defaultdict(list)
    for host in rec["trace_late"]["workers"].values():
        per_it = collections.defaultdict(list)
        for it, s in host:
            if it in timed:
                per_it[it].append(s)
        for xs in per_it.values():
            if len(xs) == nlayers:
                for k, s in enumerate(xs):
                    out[nlayers - 1 - k].append(s)
    return dict(out)


def late_summary(late):
    """{"median", "p90", "p99", "max"} of lateness (s), or None."""
    if len(late) < 2:
        return None
    q = statistics.quantiles(late, n=100)
    return {"median": statistics.median(late), "p90": q[89], "p99": q[98],
            "max": max(late)}


def job_args(rec):
    """The job.Job arguments a run was made with, but its model, mode and
    rate (records from before a setting existed ran with its default)."""
    return {"workers": rec["workers"], "servers": rec["servers"],
            "slice_bytes": rec.get("slice_bytes"),
            "train_bands": rec["bands"],
            "shard": rec.get("shard", "round-robin"),
            "levels": rec.get("levels", "count"),
            "group_slices": rec.get("group_slices", 0.0),
            "compute_s": round(rec["compute_s"], 6)}


def job_of(rec):
    return jobmod.Job(models.profile(rec["model"]), rec["mode"],
                      gbps=rec["gbps"], **job_args(rec))


def analyse(rec):
    j = job_of(rec)
    rate = j.rate * jobmod.GOODPUT
    keys = {k.id: k for k in j.keys}
    tw = rec["trace_w0"]
    bwd_end = tw["bwd_end"]
    W, S = rec["workers"], rec["servers"]
    last, idle, finish, end, lag = [], [], [], [], []
    for it in timed_pushes(rec):
        t0 = bwd_end[it]
        full = {}
        for arrivals in rec["trace_servers"].values():
            for kid in keys:
                got = arrivals.get(f"{it}:{kid}", [])
                if len(got) == W:
                    full[kid] = max(t for _, t in got) - t0
        last.append(max(full.values()))
        for s in range(S):
            ev = [(full[k.id], W * (k.nbytes + jobmod.FRAME_HDR))
                  for k in j.keys if k.server == s and k.id in full]
            i, f = fluid(ev, rate)
            back = [v - t0 for key, v in tw["pulled"].items()
                    if key.startswith(f"{it + 1}:") and
                    key.endswith(f":{s}")]
            idle.append(i)
            finish.append(f)
            end.append(max(back))
            lag.append(max(back) - f)
    m = statistics.mean
    return {"iter_s": rec["iter_s"], "last_push": m(last),
            "server_idle": m(idle), "fluid_finish": m(finish),
            "end": m(end), "lag": m(lag)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    args = ap.parse_args()
    with open(args.results) as f:
        recs = [r for r in map(json.loads, f) if "trace_servers" in r]
    print("| model | Gbit/s | mode | s/iter | last push | server idle | "
          "fluid finish | end (lag) | discordant |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rec in recs:
        a, d = analyse(rec), discordance(rec)
        print(f"| {rec['model']} | {rec['gbps']:g} | {rec['mode']} | "
              f"{a['iter_s']:.3f} | {a['last_push']:.3f} | "
              f"{a['server_idle']:.3f} | {a['fluid_finish']:.3f} | "
              f"{a['end']:.3f} ({a['lag']:+.3f}) | "
              f"{'' if d is None else format(d, '.3f')} |")
    late = [r for r in recs if "trace_late" in r]
    if late:
        print("\n| model | Gbit/s | mode | hand-overs late, workers (ms: "
              "median / p90 / p99 / max) | servers |")
        print("|---|---|---|---|---|")
    for rec in late:
        cells = []
        by_role = lateness(rec)
        for role in ("workers", "servers"):
            q = late_summary(by_role.get(role, []))
            cells.append("" if q is None else " / ".join(
                f"{q[k] * 1e3:.1f}" for k in ("median", "p90", "p99", "max")))
        print(f"| {rec['model']} | {rec['gbps']:g} | {rec['mode']} | " +
              " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
