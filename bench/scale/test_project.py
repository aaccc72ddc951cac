#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Unit checks of the scale projection (host only, TAP).

  bench/scale/test_project.py
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import project as P                 # noqa: E402  (puts bench/train on the path)
import job as jobmod                # noqa: E402
import models                       # noqa: E402
from test_models import Tap         # noqa: E402

INF = math.inf


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def one_layer(nbytes, fwd_s=0.01, bwd_s=0.02):
    """A model of one layer of @nbytes gradient bytes: one p3 message."""
    return {"model": "one", "title": "one", "bytes_per_param": 4,
            "layers": [{"name": "l0", "params": nbytes // 4,
                        "fwd_s": fwd_s, "bwd_s": bwd_s}]}


def main():
    t = Tap()
    profiles = {m: models.profile(m) for m in P.MODELS}

    for name, p in profiles.items():
        model = sum(P.layer_bytes(p))
        for n in (8, 64):
            want = 2 * (n - 1) / n * model
            ring = P.ring_step(p, n, 10.0)
            t.ok(close(ring["sent_bytes"], want),
                 f"{name}, {n} ranks: a ring rank sends 2(N-1)/N of the model",
                 f"{ring['sent_bytes']} against {want}")
            lay = P.layout(p, n)
            per = P.rank_bytes(lay)
            t.ok(close(sum(per) / n, want),
                 f"{name}, {n} ranks: a p3 rank sends 2(N-1)/N of the model "
                 "(the mean over ranks)", f"{sum(per) / n} against {want}")
            msgs = len(lay.msgs)
            framed = 2 * (n - 1) / n * (model + msgs * jobmod.FRAME_HDR)
            got = P.p3_step(p, n, 10.0, lay=lay)["sent_bytes"]
            t.ok(close(got, framed),
                 f"{name}, {n} ranks: the modelled p3 rank's egress carries "
                 "that share of every message, frame headers included",
                 f"{got} against {framed}")

    for name, p in profiles.items():
        c = P.compute_s(p)
        for n in (8, 256):
            ring = P.ring_step(p, n, INF, alpha=0.0)["step_s"]
            p3 = P.p3_step(p, n, INF, alpha=0.0)["step_s"]
            t.ok(close(ring, c) and close(p3, c),
                 f"{name}, {n} ranks, alpha 0, an infinite link: both steps "
                 f"are the compute ({c:.3f} s)", f"ring {ring}, p3 {p3}")

    want = {2: (16, 3, 4), 64: (1008, 3, 128)}
    for n, (socks, threads, before) in want.items():
        c = P.counts(n, levels=8)
        t.ok((c["p3_sockets"], c["p3_threads"], c["p3_threads_before"],
              c["ring_sockets"], c["ring_threads"]) ==
             (socks, threads, before, 2, 3),
             f"{n} ranks, 8 levels: p3 {socks} sockets, {threads} threads "
             f"({before} with a thread per channel); ring 2 sockets, "
             "3 threads", repr(c))

    # the incast: one message, owned by one rank, pushed by N - 1 ranks
    # into its one link and returned out of it
    nbytes, alpha = 150000, 25e-6
    p = one_layer(nbytes)
    lay = P.layout(p, 2)
    framed = [b + jobmod.FRAME_HDR for b in P.msg_bytes(lay).values()]
    for n in (2, 64):
        rate = P.link_Bps(10.0)
        lay = P.layout(p, n)
        hop = (n - 1) * sum(framed) / rate
        got = P.p3_step(p, n, 10.0, alpha, lay=lay)["step_s"]
        t.ok(len(framed) == 1 and close(got, 0.03 + 2 * (alpha + hop)),
             f"{n} ranks, one message: the p3 step is compute + 2 (alpha + "
             "(N-1) bytes / B), the owner's link both ways",
             f"{got} against {0.03 + 2 * (alpha + hop)}, "
             f"{len(framed)} messages")

    # a ring with one bucket: the textbook 2 (N - 1) (alpha + S / (N B))
    for name, p in profiles.items():
        n, rate, s = 64, P.link_Bps(25.0), sum(P.layer_bytes(p))
        got = P.ring_step(p, n, 25.0, alpha, first=INF, cap=INF)["step_s"]
        want_s = P.compute_s(p) + 2 * (n - 1) * (alpha + s / n / rate)
        t.ok(close(got, want_s),
             f"{name}: a one-bucket ring adds 2(N-1)(alpha + S/(N B)) to "
             "the compute", f"{got} against {want_s}")
        buckets = P.ddp_buckets(P.layer_bytes(p))
        t.ok(sum(b for b, _ in buckets) == s and
             [low for _, low in buckets] ==
             sorted((low for _, low in buckets), reverse=True) and
             buckets[-1][1] == 0,
             f"{name}: DDP's buckets hold every byte once, in backward order",
             repr(buckets))

    # no schedule beats the compute, nor its own busiest link
    slow = []
    for name, p in profiles.items():
        c = P.compute_s(p)
        for n in P.RANKS:
            lay = P.layout(p, n)
            for g in P.GBPS:
                rate = P.link_Bps(g)
                ring = P.ring_step(p, n, g)["step_s"]
                r = P.p3_step(p, n, g, lay=lay)
                link = r["skew"] * r["sent_bytes"] / rate
                if not (ring >= c and r["step_s"] >= max(c, link)):
                    slow.append((name, n, g, ring, r["step_s"], c, link))
    t.ok(not slow, "at every point of the table, neither step beats the "
         "compute, nor p3's its busiest link", repr(slow))
    return t.done()


if __name__ == "__main__":
    sys.exit(main())
