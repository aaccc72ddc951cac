#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""One rank of bench/torch: real PyTorch training of the VGG-shaped model
through p3.torch, on this network namespace's eth0, in every mode asked.

Modes (each a fresh DistributedOptimizer; the egress shaper is set by
each rank for its own host):
  fifo      schedule 'fifo' (WFBP), tbf at the link rate over a pfifo
  p3user    schedule 'p3', the same tbf + pfifo: order from libp3 only
  p3kernel  schedule 'p3', the p3 qdisc (8 bands, dscp) pacing at the rate
  compute   no exchange at all: forward, backward and SGD alone
With --bulk, each rank also uploads to the other over one untagged TCP
connection for the whole run (p3's default band is its least urgent).

Rank 0 appends one JSON line per mode to --out: every timed step's length
and how much of its forward pass overlapped the previous step's exchange.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', '..', 'userlib', 'python'))

import p3.torch as p3t  # noqa: E402
from model import VGGSmall, describe  # noqa: E402

BULK_PORT = 5301
QLIMIT = 1000


def shape(mode, mbit):
    """This host's egress: p3 pacing at the rate, or tbf over a pfifo."""
    subprocess.run(['tc', 'qdisc', 'del', 'dev', 'eth0', 'root'],
                   stderr=subprocess.DEVNULL, check=False)
    if mode == 'p3kernel':
        # Every other option at its default (8 bands, tag dscp), as a
        # user's first `tc qdisc add` would leave it.
        cmds = ('qdisc add dev eth0 root handle 1: p3 limit %d rate %dmbit\n'
                % (QLIMIT, mbit))
    else:
        cmds = ('qdisc add dev eth0 root handle 1: tbf rate %dmbit burst 16kb '
                'latency 10s\nqdisc add dev eth0 parent 1:1 handle 10: pfifo '
                'limit %d\n' % (mbit, QLIMIT))
    subprocess.run(['tc', '-batch', '-'], input=cmds, text=True, check=True)


class Bulk:
    """An upload that never ends: one untagged TCP flow to the peer."""

    def __init__(self, peer):
        self.stop = threading.Event()
        self.sent = 0
        self.sock = socket.create_connection((peer, BULK_PORT), timeout=30)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        chunk = b'\0' * (1 << 16)
        try:
            while not self.stop.is_set():
                self.sent += self.sock.send(chunk)
        except OSError:
            pass

    def close(self):
        self.stop.set()
        self.sock.close()
        self.thread.join(10)


def sink():
    """Accept the peer's uploads and discard them, for the whole run."""
    srv = socket.create_server(('0.0.0.0', BULK_PORT), reuse_port=True)

    def drain(c):
        with c:
            while c.recv(1 << 20):
                pass

    def serve():
        while True:
            c, _ = srv.accept()
            threading.Thread(target=drain, args=(c,), daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()


def run_mode(mode, bulk, args, model, x, y, peer):
    rank = p3t.rank()
    if mode != 'compute' and not args.no_shape:
        shape(mode, args.mbit)
    # Every mode starts from rank 0's parameters ('compute' trains alone).
    p3t.broadcast_parameters(model.state_dict())
    dist.barrier()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if mode != 'compute':
        opt = p3t.DistributedOptimizer(
            opt, model, schedule='fifo' if mode == 'fifo' else 'p3',
            timeout=120)
    up = Bulk(peer) if bulk else None
    steps, fwd, t_prev = [], [], None
    for i in range(args.warmup + args.iters):
        t0 = time.monotonic()
        if t_prev is not None and i > args.warmup:
            steps.append(t0 - t_prev)
        t_prev = t0
        opt.zero_grad()
        f0 = time.monotonic()
        out = model(x)
        fwd.append((f0, time.monotonic()))
        F.cross_entropy(out, y).backward()
        opt.step()
        if args.progress and rank == 0:
            print('# %s%s: step %d/%d, %.2f s' % (
                mode, '+bulk' if bulk else '', i + 1, args.warmup + args.iters,
                time.monotonic() - t0), file=sys.stderr, flush=True)
    overlap = []
    if mode != 'compute':
        opt.synchronize()
        done = opt.exchange_done
        # Step i's forward (its pre-hooks' waits included) against the end
        # of step i-1's exchange: the share of it that ran while gradients
        # were still on the wire.
        for i in range(args.warmup + 1, len(fwd)):
            f0, f1 = fwd[i]
            overlap.append(max(0.0, min(done[i - 1], f1) - f0) / (f1 - f0))
        opt.close()
    same = params_equal(model) if args.check_params and mode != 'compute' else None
    bulk_bytes = up.sent if up else 0
    if up:
        up.close()
    dist.barrier()
    return {'mode': mode, 'bulk': bulk, 'mbit': args.mbit, 'batch': args.batch,
            'steps': steps, 'fwd_overlap': overlap, 'bulk_bytes': bulk_bytes,
            'params_equal': same}


def params_equal(model):
    """Do all ranks hold bitwise the same parameters?"""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(p3t.size())]
    dist.all_gather(every, flat)
    return all(torch.equal(flat, other) for other in every)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--modes', default='compute,fifo,p3user,p3kernel')
    ap.add_argument('--bulk', default='0,1')
    ap.add_argument('--mbit', type=int, default=100)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--iters', type=int, default=8)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--peer', required=True, help="the other rank's address")
    ap.add_argument('--out', required=True)
    ap.add_argument('--progress', action='store_true')
    ap.add_argument('--check-params', action='store_true',
                    help='after each mode, compare the ranks\' parameters')
    ap.add_argument('--no-shape', action='store_true',
                    help='leave the qdisc alone (a dry run on loopback)')
    args = ap.parse_args()

    torch.set_num_threads(1)        # one vCPU per rank
    p3t.init(timeout=120)
    sink()
    torch.manual_seed(p3t.rank())
    model = VGGSmall()
    p3t.broadcast_parameters(model.state_dict())
    g = torch.Generator().manual_seed(7 + p3t.rank())
    x = torch.randn(args.batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    for mode in args.modes.split(','):
        for bulk in (int(b) for b in args.bulk.split(',')):
            if mode == 'compute' and bulk:
                continue
            r = run_mode(mode, bulk, args, model, x, y, args.peer)
            if p3t.rank() == 0:
                r.update(describe(model))
                with open(args.out, 'a') as f:
                    f.write(json.dumps(r) + '\n')
    p3t.shutdown()


if __name__ == '__main__':
    main()
