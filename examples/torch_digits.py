#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Data-parallel training of a small CNN on scikit-learn's digits, through
p3.torch.  Each rank trains on its shard; every step's gradients are
averaged over the ranks by libp3 in P3 order.

    p3torchrun --nproc_per_node 2 examples/torch_digits.py

(p3torchrun is torchrun, mended: Debian 12's own torchrun fails with its
default --redirects/--tee under Python 3.11.)  Or by hand, one shell per
rank:

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        examples/torch_digits.py

Options: --epochs N, --schedule p3|fifo, --batch B (per rank), --lr;
--sparsify slimdp [--keep F] [--explore F] [--no-residual] sends only
Slim-DP's significant and explored elements of each slice;
--loss-tolerance F [--deadline S] [--reliable-fraction F] pushes gradients
with bounded loss (DLCP: datagrams, plus the largest elements reliably;
--lose F drops that fraction of the datagram chunks at the sender, to
see what loss does where the network loses nothing).  Rank 0 prints
the mean loss and the test accuracy after every epoch, and at the end the
gradient bytes it sent per iteration (DistributedOptimizer.stats()).
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

try:
    import p3.torch as p3t
except ImportError:         # run from the source tree, not installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    '..', 'userlib', 'python'))
    import p3.torch as p3t


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 4 * 4, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def digits(seed):
    """The 1797 8x8 digits: an 80/20 split fixed by seed, pixels scaled
    to [0, 1]."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(y), generator=g)
    cut = len(y) * 4 // 5
    return (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])


def lose_chunks(fraction):
    """Make every p3.dgram sender of this process leave out a seeded
    random fraction of its chunks, as a lossy network would."""
    import numpy as np
    import p3.dgram
    real = p3.dgram.Sender.send
    rng = np.random.default_rng(int(os.environ.get('RANK', 0)))

    def send(self, level, iter, tensor, data, offset=0, timeout=None):
        data = np.frombuffer(memoryview(data).cast('B'), np.uint8)
        for at in range(0, data.nbytes, self.chunk):
            if rng.random() >= fraction:
                real(self, level, iter, tensor, data[at:at + self.chunk],
                     offset + at, timeout)
    p3.dgram.Sender.send = send


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--epochs', type=int, default=8)
    ap.add_argument('--seed', type=int, default=0,
                    help='the data split, the initial weights and the '
                    'shuffles (0: the figures of docs/benchmarks.md)')
    ap.add_argument('--schedule', choices=('p3', 'fifo'), default='p3')
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--lr', type=float, default=0.05)
    ap.add_argument('--sparsify', choices=('none', 'slimdp'), default='none')
    ap.add_argument('--keep', type=float, default=None)
    ap.add_argument('--explore', type=float, default=None)
    ap.add_argument('--no-residual', dest='residual', action='store_false',
                    help='slimdp: drop what is not sent (for comparison)')
    ap.add_argument('--loss-tolerance', type=float, default=None)
    ap.add_argument('--deadline', type=float, default=None)
    ap.add_argument('--reliable-fraction', type=float, default=None)
    ap.add_argument('--lose', type=float, default=0.0,
                    help='bounded loss: drop this fraction of datagram '
                    'chunks at random (seeded) before they are sent')
    args = ap.parse_args()
    sparse = {} if args.sparsify == 'none' else dict(
        sparsify=args.sparsify, keep=args.keep, explore=args.explore,
        residual=args.residual)
    if args.loss_tolerance is not None:
        sparse.update(loss_tolerance=args.loss_tolerance,
                      deadline=args.deadline,
                      reliable_fraction=args.reliable_fraction)
    if args.lose:
        lose_chunks(args.lose)

    torch.set_num_threads(1)        # the ranks share this host's cores
    p3t.init()
    rank, world = p3t.rank(), p3t.size()
    # Different per rank on purpose: the broadcast
    torch.manual_seed(rank + 100 * args.seed)
    model = Net()                   # makes every rank start alike
    p3t.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = p3t.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
        model, schedule=args.schedule, **sparse)
    (xtr, ytr), (xte, yte) = digits(args.seed)
    xtr, ytr = xtr[rank::world], ytr[rank::world]      # this rank's shard
    steps = len(ytr) // args.batch
    if rank == 0:
        print('p3.torch digits: %d ranks, %d training images each, %d steps '
              'per epoch, schedule %s, sparsify %s' % (
                  world, len(ytr), steps, args.schedule, args.sparsify),
              flush=True)
    for epoch in range(args.epochs):
        t0, total = time.monotonic(), 0.0
        g = torch.Generator().manual_seed(1000 + epoch + 10000 * args.seed)
        order = torch.randperm(len(ytr), generator=g)
        model.train()
        for s in range(steps):
            idx = order[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            total += loss.item()
        opt.synchronize()           # every layer updated: safe to evaluate
        model.eval()
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        if rank == 0:
            print('epoch %d: loss %.4f, test accuracy %.1f%% (%.1f s)'
                  % (epoch + 1, total / steps, 100 * acc,
                     time.monotonic() - t0), flush=True)
    st = opt.stats()
    # Every rank's counters, summed: each owns (and loses) its own share.
    total = torch.tensor([st['bytes_sent'], st['bytes_lost'], st['rerequests']],
                         dtype=torch.float64)
    torch.distributed.all_reduce(total)
    if rank == 0:
        sent, lost, asked = (int(v) for v in total)
        print('stats: %d iterations; all ranks: %d gradient bytes sent, %.0f '
              'per iteration, %d bytes lost, %d rerequests'
              % (st['iterations'], sent, sent / max(1, st['iterations']),
                 lost, asked), flush=True)
    p3t.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
