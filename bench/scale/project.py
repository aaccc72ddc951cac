#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""p3.torch against ring all-reduce (what DDP does) past this machine: the
step time and each rank's sockets and threads at 8-256 ranks, projected.

  bench/scale/project.py [--models vgg19,resnet50] [--ranks 8,16,...]
                         [--gbps 10,25,100] [--alpha SECONDS]
                         [--levels L] [--speedup K]

Compute comes from bench/train/models.py (per-layer forward and backward
on its stated device; --speedup K: a device K times faster); a step is
one forward and one backward, each rank with one NIC of rate B (TCP
goodput: the link's rate * 1448/1514, as bench/train/job.py has it),
full duplex.  A message costs ALPHA seconds
of latency (it delays, it does not hold the link) and its bytes / B on
the link.  Every rank computes alike: the model has no stragglers.

ring  DDP: gradients in buckets (1 MiB for the first, 25 MiB after, in
      backward order; a layer never split), each bucket's all-reduce
      started once its last gradient exists and the previous bucket's is
      over (one stream), a ring of 2 (N - 1) steps of bucket / N bytes,
      each ALPHA + bytes / B; the next forward waits for all of it.

p3    p3.torch's layout (userlib/python/p3/torch/_layout.py: the planner's
      slices and messages, each message owned by one rank, greedy by
      bytes): a rank pushes each message it does not own to its owner,
      the owner sums and returns the average to the N - 1 others.  One
      representative rank's egress and ingress are each a priority
      server (by the message's level, then its prio: forward order),
      non-preemptive per message, carrying every message's mean share
      per rank, (N - 1) / N of its bytes (plus libp3's frame header) for
      the push and again for the pull, scaled by the busiest rank's
      bytes over the mean (a message goes whole to one owner, so with
      few messages per rank some rank carries more: the pace is its).
      The incast: an owner receives the N - 1 pushes of a message on its
      one link and sends the N - 1 averages on its one link, so a sum is
      done no sooner than (N - 1) (bytes + header) / B after the pushes
      start, plus ALPHA, and an average is in no sooner than as long
      again after the sum.  The next forward runs each layer once the
      averages of all its messages are in.

With ALPHA = 0 and an infinite link both are the compute alone.  Under
these assumptions a step is periodic from its backward on, so one step
is simulated exactly (the next step's pushes start after every average
of this one is in).
"""
import argparse
import heapq
import itertools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench", "train"))
sys.path.insert(0, os.path.join(REPO, "userlib", "python"))

import job as jobmod                        # noqa: E402
import models                               # noqa: E402
from p3.torch._layout import Layout         # noqa: E402
from p3.torch._setup import DEFAULT_LEVELS  # noqa: E402

# One message's latency: a one-way trip through a top-of-rack switch and
# two kernel TCP stacks (about 10 us in a data centre) and the library's
# own cost per message (a wake-up, framing; about 15 us), the same for a
# ring step and for a p3 message.  p3.torch's planner merges small
# tensors with MG-WFBP's 100 us (_layout.ALPHA, a 1 Gbit/s cluster's);
# --alpha sets another.
ALPHA = 25e-6
RANKS = (8, 16, 32, 64, 128, 256)
GBPS = (10.0, 25.0, 100.0)
MODELS = ("vgg19", "resnet50")
# DDP's bucket caps: dist._DEFAULT_FIRST_BUCKET_BYTES, then bucket_cap_mb
DDP_FIRST_BUCKET = 1 << 20
DDP_BUCKET = 25 << 20
# Threads and sockets per rank, besides the main thread and PyTorch's own.
# p3.torch: a channel to and one from every peer, each with a socket per
# level, all served by libp3's one progress engine (p3-engine); a
# reducer; a pusher (bounded loss).  Before the engine, each channel had
# a progress thread of its own: 2 (N - 1) of them.
P3_OWN_THREADS = 2
ENGINE_THREADS = 1
# A ring: a connection to each neighbour; Gloo runs collectives on its
# process group's 2 worker threads and polls its sockets from its TCP
# device's loop (a fixed 3, whatever N).
RING_SOCKETS = 2
RING_THREADS = 3


def link_Bps(gbps):
    """TCP goodput in bytes/s of a gbps link (inf: an infinite link)."""
    return gbps * 1e9 / 8 * jobmod.GOODPUT


def layer_bytes(profile):
    bpp = profile.get("bytes_per_param", 4)
    return [la["params"] * bpp for la in profile["layers"]]


def backward_done(profile):
    """When each layer's gradient exists, from the start of backward (the
    last layer's first)."""
    done, t = {}, 0.0
    for i in reversed(range(len(profile["layers"]))):
        t += profile["layers"][i]["bwd_s"]
        done[i] = t
    return [done[i] for i in range(len(done))]


def compute_s(profile):
    return sum(la["fwd_s"] + la["bwd_s"] for la in profile["layers"])


def faster(profile, k):
    """@profile with every layer's compute @k times faster."""
    return dict(profile, layers=[dict(la, fwd_s=la["fwd_s"] / k,
                                      bwd_s=la["bwd_s"] / k)
                                 for la in profile["layers"]])


def counts(n, levels=DEFAULT_LEVELS):
    """Each rank's sockets and threads at n ranks."""
    return {"p3_sockets": 2 * (n - 1) * levels,
            "p3_threads": ENGINE_THREADS + P3_OWN_THREADS,
            "p3_threads_before": 2 * (n - 1) + P3_OWN_THREADS,
            "ring_sockets": RING_SOCKETS, "ring_threads": RING_THREADS}


# ------------------------------------------------------------------ ring

def ddp_buckets(sizes, first=DDP_FIRST_BUCKET, cap=DDP_BUCKET):
    """[(bytes, the lowest layer in it)] in the order DDP fills them: layers
    in backward order, a bucket closed once it holds at least its cap."""
    out, size, limit = [], 0, first
    for i in reversed(range(len(sizes))):
        size += sizes[i]
        if size >= limit:
            out.append((size, i))
            size, limit = 0, cap
    if size:
        out.append((size, 0))
    return out


def ring_step(profile, n, gbps, alpha=ALPHA, first=DDP_FIRST_BUCKET,
              cap=DDP_BUCKET):
    rate = link_Bps(gbps)
    ready = backward_done(profile)
    free, sent = 0.0, 0.0
    for nbytes, low in ddp_buckets(layer_bytes(profile), first, cap):
        free = max(ready[low], free) + 2 * (n - 1) * (alpha +
                                                      nbytes / n / rate)
        sent += 2 * (n - 1) * nbytes / n
    fwd = sum(la["fwd_s"] for la in profile["layers"])
    return {"step_s": fwd + max(ready[0], free), "sent_bytes": sent}


# -------------------------------------------------------------------- p3

def layout(profile, n, levels=DEFAULT_LEVELS):
    """p3.torch's layout of the model's gradients over n ranks."""
    return Layout(layer_bytes(profile), n, "p3", bands=levels,
                  itemsize=profile.get("bytes_per_param", 4))


def msg_bytes(lay):
    return {m: sum(lay.slices[i].length for i in sl)
            for m, sl in lay.msgs.items()}


def rank_bytes(lay, header=0):
    """What each rank sends a step (and receives: the same): a push of
    every message it does not own, N - 1 averages of each it owns."""
    n = lay.world
    out = [0] * n
    for m, b in msg_bytes(lay).items():
        for r in range(n):
            out[r] += (b + header) * ((n - 1) if lay.owner[m] == r else 1)
    return out


class Server:
    """One direction of a rank's link: a non-preemptive priority server."""

    def __init__(self, loop):
        self.loop, self.waiting, self.busy = loop, [], False

    def release(self, key, work, started):
        """Queues a job of @work seconds; started(start, end) once it runs."""
        heapq.heappush(self.waiting, (key, work, started))
        if not self.busy:
            self._next()

    def _next(self):
        if not self.waiting:
            self.busy = False
            return
        _, work, started = heapq.heappop(self.waiting)
        self.busy = True
        now = self.loop.now
        started(now, now + work)
        self.loop.at(now + work, self._next)


class Loop:
    def __init__(self):
        self.now, self.events, self.seq = 0.0, [], itertools.count()

    def at(self, t, fn):
        heapq.heappush(self.events, (t, next(self.seq), fn))

    def run(self):
        while self.events:
            self.now, _, fn = heapq.heappop(self.events)
            fn()


def p3_step(profile, n, gbps, alpha=ALPHA, levels=DEFAULT_LEVELS, lay=None):
    lay = lay or layout(profile, n, levels)
    rate = link_Bps(gbps)
    hdr = jobmod.FRAME_HDR
    per_rank = rank_bytes(lay, hdr)
    sizes = msg_bytes(lay)
    mean = 2 * (n - 1) / n * sum(b + hdr for b in sizes.values())
    skew = max(per_rank) / mean
    ready = backward_done(profile)
    loop = Loop()
    up, down = Server(loop), Server(loop)
    avail = {}
    sent = [0.0]

    def message(m, sl):
        first = [lay.slices[i] for i in sl]
        key = (min(s.level for s in first), min(s.prio for s in first), m)
        share = (n - 1) / n * (sizes[m] + hdr)
        work = skew * share / rate
        serial = (n - 1) * (sizes[m] + hdr) / rate
        low = min(s.tensor for s in first)

        def hop(src, dst, then):
            """@src's job on its server, its bytes into @dst's; then(t)
            once they are all in, the owner's one link included."""
            def started(s, e):
                sent[0] += share

                def arrived(s2, e2):
                    loop.at(max(e2, e + alpha, s + alpha + serial),
                            lambda: then(loop.now))
                loop.at(s + alpha,
                        lambda: dst.release(key, work, arrived))
            src.release(key, work, started)

        def summed(t):
            hop(up, down, lambda t2: avail.__setitem__(m, t2))
        loop.at(ready[low], lambda: hop(up, down, summed))

    for m, sl in lay.msgs.items():
        message(m, sl)
    loop.run()
    t = ready[0]
    for i, la in enumerate(profile["layers"]):
        t = max([t] + [avail[m] for m in lay.tensor_msgs[i]]) + la["fwd_s"]
    return {"step_s": t, "sent_bytes": sent[0], "skew": skew,
            "messages": len(sizes)}


# ------------------------------------------------------------------ table

HEAD = ["model", "Gbit/s", "N", "step ring (s)", "step p3 (s)", "p3 ÷ ring",
        "sockets p3", "threads p3 (before the engine)", "sockets ring",
        "threads ring", "busiest ÷ mean bytes"]


def row(profile, n, gbps, alpha, levels, lay):
    ring = ring_step(profile, n, gbps, alpha)
    p3 = p3_step(profile, n, gbps, alpha, levels, lay)
    c = counts(n, levels)
    return [profile["title"], f"{gbps:g}", str(n),
            f"{ring['step_s']:.3f}", f"{p3['step_s']:.3f}",
            f"{p3['step_s'] / ring['step_s']:.2f}",
            str(c["p3_sockets"]),
            f"{c['p3_threads']} ({c['p3_threads_before']})",
            str(c["ring_sockets"]), str(c["ring_threads"]),
            f"{p3['skew']:.2f}"]


def floats(text):
    return [float(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--ranks", default=",".join(map(str, RANKS)))
    ap.add_argument("--gbps", default=",".join(f"{g:g}" for g in GBPS))
    ap.add_argument("--alpha", type=float, default=ALPHA,
                    help="seconds per message (default %(default)g)")
    ap.add_argument("--levels", type=int, default=DEFAULT_LEVELS)
    ap.add_argument("--speedup", type=float, default=1.0,
                    help="compute this many times faster than models.py's "
                    "device (default %(default)g)")
    args = ap.parse_args()
    ranks = [int(x) for x in floats(args.ranks)]
    if min(ranks) < 2:
        ap.error("--ranks: at least 2")
    print("| " + " | ".join(HEAD) + " |")
    print("|" + "---|" * len(HEAD))
    for name in [m for m in args.models.split(",") if m]:
        prof = faster(models.profile(name), args.speedup)
        lays = {n: layout(prof, n, args.levels) for n in ranks}
        for g in floats(args.gbps):
            for n in ranks:
                print("| " + " | ".join(
                    row(prof, n, g, args.alpha, args.levels, lays[n])) + " |",
                    flush=True)
    print("\ncompute per step: " + ", ".join(
        f"{p['title']} {compute_s(p):.3f} s" for p in
        (faster(models.profile(m), args.speedup)
         for m in args.models.split(",") if m)) +
        f"; alpha {args.alpha * 1e6:g} us; {args.levels} levels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
