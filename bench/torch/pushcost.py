#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Where a bounded-loss step's CPU goes, for bench/torch's model: the
parts of p3.torch's push (_dlcp.py) timed one by one, for the slices
one of two ranks pushes in a step.

  pushcost.py [--steps N]

- select: each slice's largest-magnitude 1% (np.abs, argpartition,
  sort, the finiteness check), as BoundedLoss.push does in backward;
- encode: those elements in _sparse's wire form;
- datagrams: the whole slices sent as datagrams and received back
  (p3.dgram over loopback, sender and receiver in this process, so the
  kernel's work for both ends is counted too).

CPU time (time.process_time) per step, the median of --steps; no
network shaping, no qdisc.  Run it where the training runs (in the VM
under TCG, every figure is many times a host's) to split the exchange's
CPU cost that bench/torch's `cpu` field reports as a whole.
"""
import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', '..', 'userlib', 'python'))

import p3.dgram  # noqa: E402
from p3.torch import _dlcp, _sparse  # noqa: E402
from p3.torch._layout import Layout  # noqa: E402
from model import VGGSmall  # noqa: E402

FRACTION = 0.01     # p3.torch's reliable_fraction default


def pushed_slices(levels):
    """(offset, n elements) in one flat float32 gradient, of every slice
    that rank 1 pushes to rank 0 (half the model, by the layout)."""
    params = list(VGGSmall().parameters())
    sizes = [p.numel() * 4 for p in params]
    starts = np.cumsum([0] + sizes[:-1])
    lay = Layout(sizes, 2, 'p3', levels, itemsize=4)
    return [((int(starts[sl.tensor]) + sl.offset) // 4, sl.length // 4)
            for sl in lay.slices if lay.owner[sl.msg] == 0], sum(sizes) // 4


def select(vals):
    """What BoundedLoss.push chooses: the top FRACTION, checked finite."""
    idx = _dlcp.largest(vals, max(1, math.ceil(FRACTION * vals.size)))
    if not np.all(np.isfinite(vals[idx])):
        raise FloatingPointError
    return idx


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--steps', type=int, default=5)
    ap.add_argument('--levels', type=int, default=7)
    args = ap.parse_args()
    slices, total = pushed_slices(args.levels)
    grad = np.random.default_rng(1).standard_normal(total).astype(np.float32)
    rx = p3.dgram.Receiver('127.0.0.1', bands=16)
    tx = p3.dgram.Sender('127.0.0.1', rx.port, bands=16)
    bufs = [np.empty(n * 4, np.uint8) for _, n in slices]
    cost = {'select': [], 'encode': [], 'datagrams': []}
    for step in range(args.steps):
        t = time.process_time()
        chosen = [select(grad[o:o + n]) for o, n in slices]
        cost['select'].append(time.process_time() - t)
        t = time.process_time()
        for (o, n), idx in zip(slices, chosen):
            vals = grad[o:o + n]
            out = np.empty(_sparse.wire_bytes(idx.size, n, vals.dtype), np.uint8)
            _sparse.encode(idx, vals[idx], n, out)
        cost['encode'].append(time.process_time() - t)
        t = time.process_time()
        for s, ((o, n), buf) in enumerate(zip(slices, bufs)):
            rx.expect(s, buf, step, deadline=1.0)
            tx.send(1 + 2 * (s % 7), step, s, grad[o:o + n])
            while not any(True for _ in rx.completions(timeout=1.0)):
                pass
        cost['datagrams'].append(time.process_time() - t)
    tx.close()
    rx.close()
    mb = sum(n for _, n in slices) * 4 / 1e6
    print('pushcost: %d slices, %.2f MB pushed a step; CPU s a step, median '
          'of %d:' % (len(slices), mb, args.steps))
    for part, v in cost.items():
        print('  %-9s %.3f' % (part, statistics.median(v)))


if __name__ == '__main__':
    main()
