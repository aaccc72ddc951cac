#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""The emulated cluster as a discrete-event model: no CPU, no TCP, exact
links.  What each schedule reaches by itself, to tell it apart from what
emulate.py's implementation costs.

  bench/train/simulate.py --models vgg19 --grid "vgg19=1,2,4"
  bench/train/simulate.py --compare build/bench/train/results.jsonl

Every host's egress is a link that sends PACKET goodput bytes at a time at
the goodput rate (rate * 1448/1514) and picks the next packet only when
the last has left, as a qdisc under a shaper does.  Each of its TCP
sockets is a stream: libp3 writes a message whole before it starts the
next, up to COMMIT bytes ahead of the link, and what is written leaves in
that order, packets spanning messages.  A message (a key, plus libp3's
frame header) arrives when its last byte has left; the fabric adds no
delay.  Workers and servers do what emulate.py's do: backward
pushes each layer's keys as its gradient exists, a server sends a key back
to every worker once all of them pushed it, a forward layer waits for all
of its keys.  Which packet a link sends next is the schedule; sockets
that take turns do so a packet each, in the order they became ready:

  fifo      the sockets (one per peer) take turns, each sending its
            messages in the order they were queued: a pfifo where every
            flow keeps one packet, as the emulation's TSQ setting makes
            it (modes fifo and slice);
  p3user    the sockets take turns, each writing its most urgent message
            next, by (iteration, forward rank, arrival): libp3's heap
            over one socket per peer;
  p3kernel  the most urgent band (level) first, its sockets taking turns,
            each in libp3's order: sch_p3 over a socket per band;
  p3shared  as p3kernel, but a band's sockets share one budget of bytes
            written ahead, and the band's most urgent message, whatever
            its peer, is written next: what one libp3 engine for all of a
            host's channels could do (a design tried in the model only);
  global    the most urgent message on the link first, whatever its peer,
            preempted between any two packets, nothing written ahead:
            strict priority across the whole link (not a bound: it can
            lose to the others).

Nothing here costs time but the links and the compute, so a schedule's
figure is what it reaches once the emulator's own CPU, TCP's congestion
control and its ACKs are taken away.  One option puts back what of that
CPU the schedules turned out to be sensitive to (`git show
216191b:docs/benchmarks.md`, "Why one socket per peer loses"): --jitter
hands each host's messages of one instant (a layer's pushes, a key's W
pulls) to libp3 up to JITTER seconds late, in order.  With --compare, "--jitter measured" draws each batch's
lateness from what the runs being modelled recorded (emulate.py --trace;
workers' and servers' apart, a worker's batch from the records of its
own layer).  The workers then decide differently what
their sockets take first, and a server waits for the last worker's copy
of a key; records give the push spread of the keys.  Run with
--compare, it sets the measured iteration times, link use and push
spread of a results file beside the model's.
"""
import argparse
import collections
import heapq
import itertools
import json
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import job as jobmod    # noqa: E402
import models           # noqa: E402
import report           # noqa: E402
import traces           # noqa: E402

# The emulation's packets: gso_max_size 4096 on every host holds two
# 1448-byte segments.
PACKET = 2 * 1448


def commit_of(lowat):
    """What a socket holds written ahead of the link: the one packet TSQ
    lets into the qdisc (tcp_limit_output_bytes 4096), and what a write
    leaves unsent, as tcp_sendmsg takes data while fewer than lowat bytes
    wait and then fills the packet it started."""
    return PACKET + lowat - 1 + PACKET


COMMIT = commit_of(jobmod.NOTSENT_LOWAT)
POLICIES = ("fifo", "p3user", "p3kernel", "p3shared", "global")
BANDED = ("p3kernel", "p3shared")
# Each mode's plan (keys, sharding, levels) and link policy.
MODES = {"fifo": ("fifo", "fifo"), "slice": ("slice", "fifo"),
         "p3user": ("p3user", "p3user"), "p3kernel": ("p3kernel", "p3kernel"),
         "p3shared": ("p3kernel", "p3shared"),
         "global": ("p3kernel", "global")}

# A host's role, as emulate.py's traces name it, by its links' key.
ROLES = {"w": "workers", "s": "servers"}
# Ordered by `order`, (iteration, forward rank, arrival), which is unique.
Message = collections.namedtuple("Message", "order peer key iteration")


class Socket:
    """One TCP socket of a link: messages wait in libp3's heap (or in
    the order they came, for FIFO), and the socket is written in
    stream order, a message at a time, up to `commit` bytes ahead of
    the link, where nothing can overtake them."""

    def __init__(self, ordered):
        self.ordered = ordered
        # a heap by Message.order, or a FIFO
        self.waiting = [] if ordered else collections.deque()
        self.written = collections.deque()  # [message, bytes] not sent
        self.unsent = 0
        self.cur, self.cur_left = None, 0   # the message being written
        self.in_turns = False           # waiting for the link's turn

    def add(self, msg, nbytes):
        if self.ordered:
            heapq.heappush(self.waiting, (msg, nbytes))
        else:
            self.waiting.append((msg, nbytes))

    def fill(self, commit):
        while self.unsent < commit and (self.cur or self.waiting):
            if self.cur is None:
                self.cur, self.cur_left = (heapq.heappop(self.waiting)
                                           if self.ordered else
                                           self.waiting.popleft())
            n = min(self.cur_left, commit - self.unsent)
            self.written.append([self.cur, n])
            self.unsent += n
            self.cur_left -= n
            if not self.cur_left:
                self.cur = None

    def take(self, packet):
        """(the messages whose last byte it carries, bytes) of the
        socket's next packet, which may span messages, as TCP's do."""
        n = min(packet, self.unsent)
        self.unsent -= n
        done, left = [], n
        while left:
            chunk = self.written[0]
            k = min(left, chunk[1])
            chunk[1] -= k
            left -= k
            if chunk[1]:
                break
            self.written.popleft()
            # a message's chunks are written one after another, so its
            # last one left unless the next is the same message's
            nxt = self.written[0][0] if self.written else self.cur
            if nxt is not chunk[0]:
                done.append(chunk[0])
        return done, n


class Upload:
    """A co-located bulk upload's socket: always has a packet to send,
    and nothing it sends is awaited."""

    # always written, always in the link's turns
    unsent = 1
    in_turns = True

    def take(self, packet):
        return [], packet

    def fill(self, commit):
        pass


class Link:
    """One host's shaped egress, sending per its policy.  Sockets take
    turns a packet each, in the order they last became ready, as sch_p3's
    rotation within a band does and as a FIFO does when each flow keeps
    one packet in it."""

    def __init__(self, policy, rate, packet, commit=None):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy}")
        self.policy, self.rate, self.packet = policy, rate, packet
        # what a socket holds written ahead of the link: at least the
        # packet the qdisc holds
        self.commit = max(packet, commit or 0)
        self.sockets = {}               # (level, peer) -> Socket, Upload
        self.turns = collections.defaultdict(collections.deque)  # by level
        # policy p3shared: each band's messages not yet written, a heap,
        # and its sockets
        self.unwritten = collections.defaultdict(list)
        self.band = collections.defaultdict(list)
        self.strict = []                # policy global: one heap of all
        self.uploads = 0                # and its uploads, below it
        self.left = {}                  # its messages' bytes not sent
        self.sending = None
        self.sent = []                  # (start, end) of every packet

    def busy_share(self, t0, t1):
        """The share of [t0, t1] spent sending."""
        return sum(max(0.0, min(b, t1) - max(a, t0))
                   for a, b in self.sent) / (t1 - t0)

    def add(self, msg, nbytes):
        if self.policy == "global":
            heapq.heappush(self.strict, msg)
            self.left[msg] = nbytes
            return
        if self.policy == "p3shared":
            heapq.heappush(self.unwritten[msg.key.level], (msg, nbytes))
            self._write_band(msg.key.level)
            return
        level = msg.key.level if self.policy == "p3kernel" else 0
        sock = self._socket(level, msg.peer)
        sock.add(msg, nbytes)
        sock.fill(self.commit)          # libp3 writes at once if it can
        self._join(level, sock)

    def _socket(self, level, peer):
        sock = self.sockets.get((level, peer))
        if sock is None:
            sock = self.sockets[(level, peer)] = Socket(self.policy != "fifo")
            self.band[level].append(sock)
        return sock

    def _write_band(self, level):
        """p3shared: writes @level's messages, most urgent first, each
        whole before the next begins, while the band's sockets hold
        fewer than `commit` bytes unsent between them."""
        socks, heap = self.band[level], self.unwritten[level]
        # at most one of them is part-way through a message
        sock = next((sk for sk in socks if sk.cur is not None), None)
        while True:
            room = self.commit - sum(sk.unsent for sk in socks)
            if room <= 0:
                return
            if sock is None:
                if not heap:
                    return
                msg, nbytes = heapq.heappop(heap)
                sock = self._socket(level, msg.peer)
                sock.add(msg, nbytes)
            sock.fill(sock.unsent + room)
            self._join(level, sock)
            if sock.cur is not None:
                return
            sock = None

    def _join(self, level, sock):
        """A socket with bytes written joins the turns at the back."""
        if sock.unsent and not sock.in_turns:
            sock.in_turns = True
            self.turns[level].append(sock)

    def add_upload(self, peer, level):
        """A bulk stream to @peer; sch_p3 puts it in band @level, every
        other policy beside the job's flows."""
        if self.policy == "global":
            self.uploads += 1
            return
        level = level if self.policy in BANDED else 0
        up = self.sockets[(level, peer)] = Upload()
        self.turns[level].append(up)

    def next_packet(self):
        """(the messages it completes, bytes) of the packet to send
        next, or None when nothing is queued."""
        if self.policy == "global":
            return self._next_global()
        levels = [lv for lv, q in self.turns.items() if q]
        if not levels:
            return None
        level = min(levels)
        turns = self.turns[level]
        sock = turns.popleft()
        pkt = sock.take(self.packet)
        if self.policy != "p3shared":
            sock.fill(self.commit)      # libp3's engine, as it drains
        if sock.unsent:
            turns.append(sock)
        else:
            sock.in_turns = False
        # after the socket has taken its place back in the turns, so that
        # a socket the band's budget now starts queues behind it
        if self.policy == "p3shared":
            self._write_band(level)
        return pkt

    def _next_global(self):
        """The most urgent message's next packet: no sockets, nothing
        written ahead, a message preempted between any two packets."""
        if not self.strict:
            return ([], self.packet) if self.uploads else None
        msg = self.strict[0]
        n = min(self.packet, self.left[msg])
        self.left[msg] -= n
        if self.left[msg]:
            return [], n
        del self.left[msg]
        heapq.heappop(self.strict)
        return [msg], n


class Cluster:
    """W workers and S servers of job @j, each host with a Link."""

    def __init__(self, j, policy, packet=PACKET, commit=COMMIT, upload=0,
                 server_policy=None, jitter=0.0, seed=0):
        self.j = j
        self.jitter, self.rnd = jitter, random.Random(seed)
        self.batch = (None, 0.0)        # (instant, host), when it is in
        self.handed = {}                # host: when its last batch was in
        self.pushed = collections.defaultdict(list)  # (it, key id): times
        self.spreads = []               # of the timed keys, after run()
        self.rate = j.rate * jobmod.GOODPUT
        self.now = 0.0
        self.events = []                # (time, seq, callback)
        # one counter for the events' tie-break and the messages' arrival
        # order: both only need to grow
        self.seq = itertools.count()
        self.links = {("w", i): Link(policy, self.rate, packet, commit)
                      for i in range(j.workers)}
        self.links.update({("s", i): Link(server_policy or policy, self.rate,
                                          packet, commit)
                           for i in range(j.servers)})
        self.by_layer = j.keys_of_layer()
        self.parts = collections.Counter()      # (worker, iteration, layer)
        self.nparts = [len(self.by_layer[la]) for la in range(len(j.fwd))]
        self.ready = [[0] * len(j.fwd) for _ in range(j.workers)]
        self.waiting = {}               # worker -> (layer, iteration, gen)
        self.starts = [[] for _ in range(j.workers)]
        self.finished = 0
        # @upload streams from every worker to a storage host, in the
        # band after the job's (sch_p3's default band for untagged)
        for w in range(j.workers):
            for i in range(upload):
                self.links[("w", w)].add_upload(j.servers + i, j.train_bands)

    def at(self, t, fn):
        heapq.heappush(self.events, (t, next(self.seq), fn))

    def send(self, host, peer, key, iteration):
        """Hands a message to @host's link, or with jitter its batch (the
        messages of this instant) late, never before the batch handed
        over before it: a worker's thread of backward hands them over
        in order, and so, nearly, do a server's receive threads."""
        if not self.jitter:
            self._queue(host, peer, key, iteration)
            return
        if self.batch[0] != (self.now, host):
            t = max(self.now + self._lateness(host, key.layer),
                    self.handed.get(host, 0.0))
            self.handed[host] = t
            self.batch = ((self.now, host), t)
        self.at(self.batch[1], lambda: self._queue(host, peer, key, iteration))

    def _lateness(self, host, layer):
        """A batch's delay: up to `jitter` s, uniformly, or one drawn
        from the measured ones of @host's role; for a worker's pushes,
        from those of the same @layer, where there are any.  (A layer
        whose backward takes no time, as Sockeye's embeddings', is
        handed over with the layer before it, and takes its draw.)"""
        if isinstance(self.jitter, dict):
            own = (self.jitter.get("worker_layers", {}).get(layer)
                   if host[0] == "w" else None)
            return self.rnd.choice(own or self.jitter[ROLES[host[0]]])
        return self.rnd.uniform(0, self.jitter)

    def _queue(self, host, peer, key, iteration):
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
        done, n = nxt
        dt = n / link.rate
        link.sent.append((self.now, self.now + dt))

        def sent():
            link.sending = None
            for msg in done:
                self._deliver(host, msg)
            self._pump(host)
        self.at(self.now + dt, sent)

    def _deliver(self, host, msg):
        if host[0] == "w":              # a push reached server msg.peer
            pk = (msg.iteration, msg.key.id)
            self.pushed[pk].append(self.now)
            if len(self.pushed[pk]) == self.j.workers:
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
        self.finished += 1

    def run(self, iters, warmup):
        starts = warmup + iters + 1
        for w in range(self.j.workers):
            self._step(w, self._worker(w, starts))
        for h, link in self.links.items():
            if link.sending is None:
                self._pump(h)           # the uploads, if any
        # An upload never runs out of packets, so a job that stalls
        # would run forever: stop where emulate.py gives up, at FIFO
        # with no overlap, three times over.
        ideal = self.j.ideal()
        limit = starts * 3 * (ideal["compute_s"] + 3 * ideal["link_s"])
        while (self.events and self.finished < self.j.workers and
               self.now <= limit):
            self.now, _, fn = heapq.heappop(self.events)
            fn()
        if self.finished < self.j.workers:
            raise RuntimeError(f"workers {sorted(self.waiting)} never got "
                               "their parameters")
        per = [(st[-1] - st[warmup]) / iters for st in self.starts]
        # link use as emulate.py has it: each worker's over its own
        # timed iterations, the servers' over worker 0's
        work = [self.links[("w", w)].busy_share(st[warmup], st[-1])
                for w, st in enumerate(self.starts)]
        t0, t1 = self.starts[0][warmup], self.starts[0][-1]
        serve = [lk.busy_share(t0, t1) for h, lk in self.links.items()
                 if h[0] == "s"]
        # how far apart the workers' pushes of a key reached its server,
        # as traces.push_spreads has it: the timed iterations but the
        # last, whose keys the run does not wait for
        self.spreads = [max(ts) - min(ts) for (it, _), ts in
                        self.pushed.items()
                        if warmup <= it < starts - 2 and
                        len(ts) == self.j.workers]
        return {"iter_s": statistics.mean(per),
                "ideal_iter_s": ideal["iter_s"],
                "push_spread_s": traces.spread_summary(self.spreads),
                "link_util": {"workers": statistics.mean(work),
                              "servers": statistics.mean(serve)}}


def simulate(profile, mode, gbps, iters=3, warmup=1, packet=PACKET,
             commit=COMMIT, upload=0, server_policy=None, jitter=0.0,
             seeds=1, **job_args):
    """The model's record for one mode at one rate, with @upload bulk
    streams from every worker (and the servers' links on
    @server_policy, if given).  @jitter: seconds (uniform), or
    {"workers": [...], "servers": [...]}, measured lateness to draw from
    (and "worker_layers": {layer: [...]}, a worker's by layer).
    With @jitter, random: the means over @seeds runs (seeds 0, 1, ...),
    and the push spread of all their keys."""
    plan, policy = MODES[mode]
    j = jobmod.Job(profile, plan, gbps=gbps, **job_args)
    clusters = [Cluster(j, policy, packet, commit, upload, server_policy,
                        jitter, seed)
                for seed in range(seeds if jitter else 1)]
    runs = [c.run(iters, warmup) for c in clusters]
    res = {"iter_s": statistics.mean(r["iter_s"] for r in runs),
           "ideal_iter_s": runs[0]["ideal_iter_s"],
           "link_util": {side: statistics.mean(r["link_util"][side]
                                               for r in runs)
                         for side in runs[0]["link_util"]},
           "push_spread_s": traces.spread_summary(
               [x for c in clusters for x in c.spreads])}
    res.update({"model": profile["model"], "gbps": gbps, "mode": mode,
                "upload": upload,
                "jitter": "measured" if isinstance(jitter, dict) else jitter})
    return res


def setting(r):
    """A run's settings, as simulate() takes them."""
    return {"commit": commit_of(r.get("lowat", jobmod.NOTSENT_LOWAT)),
            **traces.job_args(r)}


def measured(path):
    """{(model, gbps, mode, upload streams, settings, notes): [runs]}
    of a results file.  The model knows no sysctls and no other place
    for the ACKs: runs that set them are kept apart (their notes) and
    compared with the same model."""
    runs = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "model" in r and "error" not in r:
                acks = r.get("acks", "stock")
                notes = tuple(r.get("sysctls", ())) + \
                    ((f"acks {acks}",) if acks != "stock" else ())
                key = (r["model"], r["gbps"], r["mode"], r.get("bulk", 0),
                       tuple(sorted(setting(r).items())), notes)
                runs[key].append(r)
    return runs


def row(r, fifo_s, runs=None):
    """A table row: the model's figures, and the runs' beside them."""
    # the gap is FIFO's without an upload, so not for a run with one
    up = r["upload"]
    g = None if up else \
        report.gap_closed(r["iter_s"], fifo_s, r["ideal_iter_s"])
    cells = [r["model"], f"{r['gbps']:g}",
             r["mode"] + (f", {up} upload stream{'s' * (up > 1)}"
                          if up else "") +
             (f", {r['note']}" if r.get("note") else ""),
             f"{r['iter_s']:.3f}", "" if g is None else f"{g:.0%}",
             f"{r['iter_s'] / r['ideal_iter_s']:.3f}",
             f"{r['link_util']['workers']:.0%}", spread_cell(r)]
    if runs is not None:
        m = statistics.mean(x["iter_s"] for x in runs)
        use = statistics.mean(x["link_util"]["workers"] for x in runs)
        spreads = [x for run in runs for x in traces.push_spreads(run)]
        cells += [f"{m:.3f}" + (f" ({len(runs)})" if len(runs) > 1 else ""),
                  f"{m / r['iter_s']:.3f}", f"{use:.0%}",
                  spread_cell({"push_spread_s":
                               traces.spread_summary(spreads)})]
    return "| " + " | ".join(cells) + " |"


def spread_cell(r):
    s = r["push_spread_s"]
    return "" if s is None else f"{s['median']:.2f} / {s['p90']:.2f}"


HEAD = ["model", "Gbit/s", "mode", "model s/iter", "gap closed",
        "÷ ideal", "link use", "push spread (s, median / p90)"]
HEAD_RUNS = ["measured s/iter (runs)", "measured ÷ model", "link use",
             "push spread"]


def setting_notes(mode, st):
    """What a row's kernel-mode settings change from the sweep's."""
    if mode != "p3kernel":
        return []
    n = st["train_bands"]
    return ([f"{n} band{'s' * (n != 1)}"]
            if st["train_bands"] != jobmod.TRAIN_BANDS else []) + \
        ([f"levels {st['levels']}"]
         if st["levels"] != jobmod.DEFAULT_LEVELS else [])


def print_head(head):
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))


def progress(what):
    print(f"simulating {what}", file=sys.stderr, flush=True)


def pooled_lateness(runs):
    """traces.lateness of @runs, pooled per role, and the workers' per
    layer ("worker_layers"); None unless every role has some (runs
    without emulate.py --trace have none)."""
    out = {"workers": [], "servers": []}
    layers = collections.defaultdict(list)
    for r in runs:
        for role, xs in traces.lateness(r).items():
            out[role] += xs
        for layer, xs in traces.lateness_by_layer(r).items():
            layers[layer] += xs
    if not all(out.values()):
        return None
    return dict(out, worker_layers=dict(layers))


def measured_noise(runs, noise):
    """@noise with jitter "measured" made the lateness of @runs."""
    return dict(noise, jitter=pooled_lateness(runs))


def compare(path, iters, warmup, packet, noise):
    """The model of every configuration a results file ran, beside it
    (with @noise: jitter and seeds; jitter "measured" takes the
    lateness of the configuration's own runs, and for FIFO, the gap's
    reference, of the runs at its point without an upload)."""
    runs = measured(path)
    at_point = collections.defaultdict(list)
    for (model, gbps, _, up, st, notes), rs in runs.items():
        if not up:
            at_point[(model, gbps, st, notes)] += rs
    fifo_s = {}                         # the gap's reference, per point
    print_head(HEAD + HEAD_RUNS)
    for (model, gbps, mode, up, st, notes), rs in runs.items():
        progress(f"{model} at {gbps:g} Gbit/s, {mode}, upload {up}")
        prof = models.profile(model)
        own, point = dict(noise), dict(noise)
        if noise["jitter"] == "measured":
            own = measured_noise(rs, noise)
            if own["jitter"] is None:
                print("  skipped: its runs recorded no lateness "
                      "(emulate.py --trace)", file=sys.stderr)
                continue
            point = measured_noise(
                at_point.get((model, gbps, st, notes)) or rs, noise)
            if point["jitter"] is None:
                point = own
        if (model, gbps, st) not in fifo_s:
            fifo_s[(model, gbps, st)] = simulate(
                prof, "fifo", gbps, iters, warmup, packet, **point,
                **dict(st))["iter_s"]
        r = simulate(prof, mode, gbps, iters, warmup, packet, upload=up,
                     **own, **dict(st))
        r["note"] = ", ".join(setting_notes(mode, dict(st)) + list(notes))
        print(row(r, fifo_s[(model, gbps, st)], rs))


def jitter_arg(text):
    """--jitter: seconds >= 0, or "measured"."""
    if text == "measured":
        return text
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v >= 0:
        raise argparse.ArgumentTypeError(
            f"want seconds >= 0 or 'measured', not {text!r}")
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vgg19")
    ap.add_argument("--grid", default="",
                    help='"model=g1,g2 ..." (real-equivalent Gbit/s)')
    ap.add_argument("--gbps", default="1,2,4",
                    help="the rates of models --grid leaves out")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--server-policy", choices=POLICIES,
                    help="the servers' links on this policy, whatever the "
                    "mode's (to see which side a schedule wins or loses)")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--packet", type=int, default=PACKET,
                    help="bytes a link sends before it picks again")
    ap.add_argument("--commit", type=int, default=COMMIT,
                    help="bytes a socket holds written ahead of the link, "
                    "the qdisc's packet included")
    ap.add_argument("--slice-bytes", type=int, default=None)
    ap.add_argument("--compute-s", type=float, default=None)
    ap.add_argument("--bands", type=int, default=None)
    ap.add_argument("--shard", default="round-robin", choices=jobmod.SHARDS)
    ap.add_argument("--levels", default=jobmod.DEFAULT_LEVELS,
                    choices=jobmod.LEVELS)
    ap.add_argument("--group-slices", type=float, default=0.0)
    ap.add_argument("--upload", type=int, default=0, metavar="STREAMS",
                    help="a co-located bulk upload of STREAMS connections "
                    "on every worker")
    ap.add_argument("--jitter", type=jitter_arg, default=0.0,
                    metavar="SECONDS|measured",
                    help="hand a host's messages of one instant to libp3 "
                    "up to SECONDS late (uniform, in order), as the "
                    "emulator's CPU does; with --compare, 'measured' draws "
                    "from the lateness its runs recorded (a worker's "
                    "batch from its layer's); the means of "
                    "--seeds runs")
    ap.add_argument("--seeds", type=int, default=5,
                    help="runs per point with --jitter "
                    "(default %(default)s)")
    ap.add_argument("--compare", metavar="RESULTS.jsonl",
                    help="model what emulate.py's results file ran, with "
                    "each run's settings (its TCP_NOTSENT_LOWAT sets "
                    "--commit; of the options above only --iters, "
                    "--warmup, --packet, --jitter and --seeds "
                    "apply)")
    args = ap.parse_args()
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    if args.jitter == "measured" and not args.compare:
        ap.error("--jitter measured needs --compare: the lateness comes "
                 "from its runs")
    noise = {"jitter": args.jitter, "seeds": args.seeds}
    if args.compare:
        compare(args.compare, args.iters, args.warmup, args.packet, noise)
        return 0
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {','.join(bad)}; "
                 f"known: {','.join(MODES)}")
    grid = {}
    for part in args.grid.split():
        name, rates = part.split("=")
        grid[name] = [float(g) for g in rates.split(",")]
    st = {"slice_bytes": args.slice_bytes, "train_bands": args.bands,
          "shard": args.shard, "group_slices": args.group_slices,
          "levels": args.levels,
          "compute_s": args.compute_s}
    print_head(HEAD)
    for name in [m for m in args.models.split(",") if m]:
        prof = models.profile(name)
        for g in grid.get(name) or [float(x) for x in args.gbps.split(",")]:
            progress(f"{name} at {g:g} Gbit/s")
            rows = {mode: simulate(prof, mode, g, args.iters, args.warmup,
                                   args.packet, args.commit, args.upload,
                                   args.server_policy, **noise, **st)
                    for mode in modes}
            # the gap's reference: FIFO as the sweep runs it
            fifo = simulate(prof, "fifo", g, args.iters, args.warmup,
                            args.packet, args.commit, **noise, **st)
            for mode in modes:
                print(row(rows[mode], fifo["iter_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
