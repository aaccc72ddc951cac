#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""The emulated cluster as a discrete-event model: no CPU, no TCP, exact
links.  What each schedule could reach, as a yardstick for emulate.py.

  bench/train/simulate.py --models vgg19 --grid "vgg19=1,2,4"
  bench/train/simulate.py --compare build/bench/train/results.jsonl

Every host's egress is a link that sends PACKET goodput bytes at a time at
the goodput rate (rate * 1448/1514) and picks the next packet only when
the last has left, as a qdisc under a shaper does.  A message (a key, plus
libp3's frame header) arrives when its last packet has left; the fabric
adds no delay.  Workers and servers do what emulate.py's do: backward
pushes each layer's keys as its gradient exists, a server sends a key back
to every worker once all of them pushed it, a forward layer waits for all
of its keys.  Which packet a link sends next is the schedule:

  fifo      the flows (one per peer) take turns, a packet each, and each
            sends its messages in the order they were queued: a pfifo
            where every flow keeps one packet, as the emulation's TSQ
            setting makes it (modes fifo and slice);
  p3user    the flows take turns, and each sends its most urgent message
            first, by (iteration, forward rank, arrival): libp3's heap
            over one socket per peer;
  p3kernel  the most urgent band (level) first, the flows in it taking
            turns, each in libp3's order: sch_p3 over a socket per band;
  perfect   the most urgent message on the link first, whatever its peer:
            P3's order with nothing committed, the best a priority
            schedule can do with these keys.

Nothing here costs time but the links and the compute, so a schedule's
figure is what it reaches once the emulator's own CPU, TCP's dynamics and
its ACKs are taken away.  Run with --compare, it sets the measured
iteration times of a results file beside the model's.
"""
import argparse
import collections
import heapq
import itertools
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import job as jobmod    # noqa: E402
import models           # noqa: E402

# The emulation's packets: gso_max_size 4096 on every host holds two
# 1448-byte segments.
PACKET = 2 * 1448
POLICIES = ("fifo", "p3user", "p3kernel", "perfect")
# The job mode whose keys (plan and sharding) each schedule sends.
PLAN_OF = {"fifo": "fifo", "slice": "slice", "p3user": "p3user",
           "p3kernel": "p3kernel", "perfect": "p3kernel"}
POLICY_OF = {"fifo": "fifo", "slice": "fifo", "p3user": "p3user",
             "p3kernel": "p3kernel", "perfect": "perfect"}
SIM_MODES = tuple(PLAN_OF)

# Ordered by `order`, (iteration, forward rank, arrival), which is unique.
Message = collections.namedtuple("Message", "order peer key iteration")


class Link:
    """One host's shaped egress, sending per its policy."""

    def __init__(self, policy, rate, packet):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy}")
        self.policy, self.rate, self.packet = policy, rate, packet
        self.queues = collections.defaultdict(list)     # (level, peer)
        self.left = {}                  # bytes of each message not sent
        self.turn = 0                   # the peer whose turn comes next
        self.sending = None

    def add(self, msg, nbytes):
        q = self.queues[(self._level(msg), msg.peer)]
        if self.policy == "fifo":
            q.append(msg)               # kept in arrival order
        else:
            heapq.heappush(q, msg)      # by (iteration, prio, arrival)
        self.left[msg] = nbytes

    def _level(self, msg):
        return msg.key.level if self.policy == "p3kernel" else 0

    def next_packet(self):
        """(message, bytes, whether it is the message's last packet) of
        the packet to send next, or None when nothing is queued."""
        live = [qk for qk, q in self.queues.items() if q]
        if not live:
            return None
        if self.policy == "perfect":
            qk = min(live, key=lambda k: self.queues[k][0])
        else:
            level = min(lv for lv, _ in live)
            peers = sorted(p for lv, p in live if lv == level)
            peer = next((p for p in peers if p >= self.turn), peers[0])
            self.turn = peer + 1
            qk = (level, peer)
        q = self.queues[qk]
        msg = q[0]
        n = min(self.packet, self.left[msg])
        self.left[msg] -= n
        done = self.left[msg] == 0
        if done:
            del self.left[msg]
            if self.policy == "fifo":
                q.pop(0)
            else:
                heapq.heappop(q)
        return msg, n, done


class Cluster:
    """W workers and S servers of job @j, each host with a Link."""

    def __init__(self, j, policy, packet=PACKET):
        self.j = j
        self.rate = j.rate * jobmod.GOODPUT
        self.now = 0.0
        self.events = []                # (time, seq, callback)
        self.seq = itertools.count()
        self.links = {h: Link(policy, self.rate, packet) for h in
                      [("w", i) for i in range(j.workers)] +
                      [("s", i) for i in range(j.servers)]}
        self.by_layer = j.keys_of_layer()
        self.pushes = collections.Counter()     # (iteration, key id)
        self.parts = collections.Counter()      # (worker, iteration, layer)
        self.nparts = [len(self.by_layer[la]) for la in range(len(j.fwd))]
        self.ready = [[0] * len(j.fwd) for _ in range(j.workers)]
        self.waiting = {}               # worker -> (layer, iteration, gen)
        self.starts = [[] for _ in range(j.workers)]

    def at(self, t, fn):
        heapq.heappush(self.events, (t, next(self.seq), fn))

    def send(self, host, peer, key, iteration):
        link = self.links[host]
        msg = Message((iteration, key.prio, next(self.seq)), peer, key,
                      iteration)
        link.add(msg, key.nbytes + jobmod.FRAME_HDR)
        if link.sending is None:
            self._pump(host)

    def _pump(self, host):
        link = self.links[host]
        nxt = link.next_packet()
        link.sending = nxt
        if nxt is None:
            return
        msg, n, done = nxt
        dt = n / link.rate

        def sent():
            link.sending = None
            if done:
                self._deliver(host, msg)
            self._pump(host)
        self.at(self.now + dt, sent)

    def _deliver(self, host, msg):
        kind, src = host
        if kind == "w":                 # a push reached server msg.peer
            pk = (msg.iteration, msg.key.id)
            self.pushes[pk] += 1
            if self.pushes[pk] == self.j.workers:
                del self.pushes[pk]
                for w in range(self.j.workers):
                    self.send(("s", msg.peer), w, msg.key, msg.iteration + 1)
            return
        w, la = msg.peer, msg.key.layer     # a pull reached worker msg.peer
        pk = (w, msg.iteration, la)
        self.parts[pk] += 1
        if self.parts[pk] == self.nparts[la]:
            del self.parts[pk]
            self.ready[w][la] = msg.iteration
            wait = self.waiting.get(w)
            if wait and wait[0] == la and wait[1] <= msg.iteration:
                del self.waiting[w]
                self._step(w, wait[2])

    def _worker(self, w, starts):
        """emulate.py's worker loop: yields a compute time to sleep, or
        (layer, iteration) to wait for that layer's parameters."""
        j, L = self.j, len(self.j.fwd)
        for it in range(starts):
            for la in range(L):
                if self.ready[w][la] < it:
                    yield (la, it)
                if la == 0:
                    self.starts[w].append(self.now)
                    if it == starts - 1:
                        return
                yield j.fwd[la]
            for la in reversed(range(L)):
                yield j.bwd[la]
                for k in self.by_layer[la]:
                    self.send(("w", w), k.server, k, it)

    def _step(self, w, gen):
        for what in gen:
            if isinstance(what, tuple):
                self.waiting[w] = (*what, gen)
                return
            self.at(self.now + what, lambda: self._step(w, gen))
            return

    def run(self, iters, warmup):
        for w in range(self.j.workers):
            self._step(w, self._worker(w, warmup + iters + 1))
        while self.events:
            self.now, _, fn = heapq.heappop(self.events)
            fn()
        if self.waiting:
            raise RuntimeError(f"workers {sorted(self.waiting)} never got "
                               "their parameters")
        per = [(st[-1] - st[warmup]) / iters for st in self.starts]
        return {"iter_s": statistics.mean(per)}


def simulate(profile, mode, gbps, iters=3, warmup=1, packet=PACKET,
             **job_args):
    """The model's record for one mode at one rate."""
    j = jobmod.Job(profile, PLAN_OF[mode], gbps=gbps, **job_args)
    res = Cluster(j, POLICY_OF[mode], packet).run(iters, warmup)
    res.update({"model": profile["model"], "gbps": gbps, "mode": mode,
                "ideal_iter_s": j.ideal()["iter_s"]})
    return res


def gap_closed(x_mode, x_fifo, x_ideal):
    """(X_mode - X_fifo) / (X_ideal - X_fifo) in throughput, as report.py
    has it; None where FIFO is within 3% of the ideal."""
    if x_ideal < x_fifo * 1.03:
        return None
    return (x_mode - x_fifo) / (x_ideal - x_fifo)


def measured(path):
    """{(model, gbps, mode): iter_s} of a results file's runs without an
    upload, the mean where a point ran more than once."""
    runs = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "model" in r and not r.get("bulk"):
                runs[(r["model"], r["gbps"], r["mode"])].append(r["iter_s"])
    return {k: statistics.mean(v) for k, v in runs.items()}


def table(rows, meas):
    head = ["model", "Gbit/s", "mode", "model s/iter", "gap closed"]
    if meas:
        head += ["measured s/iter", "measured ÷ model"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    fifo = {(r["model"], r["gbps"]): r["iter_s"] for r in rows
            if r["mode"] == "fifo"}
    for r in rows:
        f = fifo.get((r["model"], r["gbps"]))
        g = gap_closed(1 / r["iter_s"], 1 / f, 1 / r["ideal_iter_s"]) \
            if f else None
        cells = [r["model"], f"{r['gbps']:g}", r["mode"],
                 f"{r['iter_s']:.3f}", "" if g is None else f"{g:.0%}"]
        if meas:
            m = meas.get((r["model"], r["gbps"], r["mode"]))
            cells += ["", ""] if m is None else \
                [f"{m:.3f}", f"{m / r['iter_s']:.3f}"]
        print("| " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vgg19,resnet50,inception3,sockeye")
    ap.add_argument("--grid", default="",
                    help='"model=g1,g2 ..." (real-equivalent Gbit/s); '
                    "default: the points --compare's file ran")
    ap.add_argument("--modes", default=",".join(SIM_MODES))
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--packet", type=int, default=PACKET,
                    help="bytes a link sends before it picks again")
    ap.add_argument("--slice-bytes", type=int, default=None)
    ap.add_argument("--compute-s", type=float, default=None)
    ap.add_argument("--bands", type=int, default=None)
    ap.add_argument("--shard", default="round-robin", choices=jobmod.SHARDS)
    ap.add_argument("--compare", help="a results file of emulate.py")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in SIM_MODES]
    if bad:
        ap.error(f"unknown mode(s) {','.join(bad)}; "
                 f"known: {','.join(SIM_MODES)}")
    meas = measured(args.compare) if args.compare else {}
    grid = {}
    for part in args.grid.split():
        name, rates = part.split("=")
        grid[name] = [float(g) for g in rates.split(",")]
    rows = []
    for name in [m for m in args.models.split(",") if m]:
        prof = models.profile(name)
        rates = grid.get(name) or sorted({g for (m, g, _) in meas
                                          if m == name})
        if not rates:
            ap.error(f"no rates for {name}: give --grid or --compare")
        for g in rates:
            for mode in modes:
                print(f"simulating {name} at {g:g} Gbit/s, {mode}",
                      file=sys.stderr, flush=True)
                rows.append(simulate(
                    prof, mode, g, args.iters, args.warmup, args.packet,
                    compute_s=args.compute_s, slice_bytes=args.slice_bytes,
                    train_bands=args.bands, shard=args.shard))
    table(rows, meas)
    return 0


if __name__ == "__main__":
    sys.exit(main())
