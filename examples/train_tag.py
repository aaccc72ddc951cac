#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A training loop that pushes its gradients the P3 way, through libp3.

    PYTHONPATH=userlib/python examples/train_tag.py [--iters 3] [--bands 4]

What it shows:
  * the parameters, in forward order, become a plan: big tensors cut into
    slices, small neighbours merged, layer 0 on the most urgent level;
  * backward hooks queue each message the moment its gradients exist
    (the last layer first, as backward produces them), and libp3 sends
    them on one TCP connection per level, tagged with DSCP so that the
    sch_p3 qdisc (if installed on the egress device) serves level 0 first;
  * the parameter server registers a buffer per tensor and records when
    each completes.
Both ends run in this process over 127.0.0.1; --role server / worker with
--host splits them across machines.  Uses PyTorch if it is installed
(apt install python3-torch), otherwise numpy stands in for the model.

Other sockets of the job can be tagged too, e.g. a checkpoint upload that
must never delay gradients:
    p3.tag(upload_socket, bands - 1)
"""

import argparse
import collections
import threading
import time

import numpy as np

import p3

try:
    import torch
except ImportError:
    torch = None


# ------------------------------------------------------------------ model

def torch_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 16 * 16, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10))


NUMPY_LAYERS = [('conv1.weight', (16, 3, 3, 3)), ('conv1.bias', (16,)),
                ('conv2.weight', (32, 16, 3, 3)), ('conv2.bias', (32,)),
                ('fc1.weight', (512, 8192)), ('fc1.bias', (512,)),
                ('fc2.weight', (10, 512)), ('fc2.bias', (10,))]


def parameter_table(model):
    """(name, bytes, forward index) per parameter, in forward order.
    Weight and bias of one layer share a forward index (so a level)."""
    names = ([n for n, _ in model.named_parameters()] if torch
             else [n for n, _ in NUMPY_LAYERS])
    sizes = ([p.numel() * 4 for _, p in model.named_parameters()] if torch
             else [int(np.prod(s)) * 4 for _, s in NUMPY_LAYERS])
    layer_of = {}
    return [(n, b, layer_of.setdefault(n.rsplit('.', 1)[0], len(layer_of)))
            for n, b in zip(names, sizes)]


# ----------------------------------------------------------------- worker

class GradientPusher:
    """Queues each planned message as soon as all its gradients exist."""

    def __init__(self, ch, slices):
        self.ch = ch
        self.msgs = collections.OrderedDict()
        for s in slices:
            self.msgs.setdefault(s.msg, []).append(s)
        self.msg_of = collections.defaultdict(set)
        for m, ss in self.msgs.items():
            for s in ss:
                self.msg_of[s.tensor].add(m)

    def start(self, iteration):
        self.iteration = iteration
        self.ready = {}

    def gradient(self, tensor, grad):
        # A contiguous float32 copy: libp3 copies again when queueing, so
        # the framework may reuse its gradient buffer right away.
        self.ready[tensor] = np.ascontiguousarray(grad, dtype=np.float32)
        for m in sorted(self.msg_of[tensor]):
            ss = self.msgs[m]
            if all(s.tensor in self.ready for s in ss):
                self.ch.send_plan(ss, self.ready, iteration=self.iteration)


def worker(args, port, table, slices, log):
    ch = p3.Channel.connect(args.host, port, bands=args.bands)
    pusher = GradientPusher(ch, slices)
    if torch:
        model = torch_model()
        for i, (_, p) in enumerate(model.named_parameters()):
            # Backward calls the hook when this gradient is computed.
            p.register_hook(lambda g, i=i: pusher.gradient(i, g.detach().numpy()))
        data = torch.randn(32, 3, 16, 16)
        target = torch.randint(0, 10, (32,))
    rng = np.random.default_rng(0)
    for it in range(args.iters):
        pusher.start(it)
        t0 = time.monotonic()
        if torch:
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(data), target).backward()
        else:
            # Backward order: last layer first, with a little compute each.
            for i in reversed(range(len(table))):
                time.sleep(0.002)
                pusher.gradient(i, rng.standard_normal(table[i][1] // 4))
        ch.flush(timeout=60)
        log.append('worker: iteration %d backward+push %.1f ms'
                   % (it, (time.monotonic() - t0) * 1e3))
    ch.close()


# ----------------------------------------------------------------- server

def server(args, lst, table, slices, log):
    level_of = {s.tensor: s.level for s in slices}
    grads = [np.zeros(b // 4, dtype=np.float32) for _, b, _ in table]
    with lst.accept(timeout=30) as rx:
        for it in range(args.iters):
            for t, g in enumerate(grads):
                rx.expect(t, g, iteration=it)
            done = sorted(rx.wait(timeout=60), key=lambda c: c.t_done)
            t0 = done[0].t_first
            log.append('server: iteration %d, completion order (tensor@level '
                       '+ms): %s' % (it, ', '.join(
                           '%s@%d %+.1f' % (table[c.tensor][0], level_of[c.tensor],
                                            (c.t_done - t0) / 1e6)
                           for c in done)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--role', choices=('both', 'server', 'worker'), default='both')
    ap.add_argument('--host', default='127.0.0.1')
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--bands', type=int, default=4)
    ap.add_argument('--iters', type=int, default=3)
    ap.add_argument('--alpha', type=float, default=20e-6, help='s per message')
    ap.add_argument('--link-rate', type=float, default=1.25e9, help='bytes/s')
    args = ap.parse_args()

    model = torch_model() if torch else None
    table = parameter_table(model)
    slice_bytes = p3.suggest_slice(args.alpha, 0, args.link_rate)
    slices = p3.plan(table, bands=args.bands, slice_bytes=slice_bytes,
                     alpha=args.alpha, beta=1 / args.link_rate)
    print('%s model, %d tensors, %.1f MB; slice %d B -> %d slices in %d messages'
          % ('torch' if torch else 'numpy', len(table),
             sum(b for _, b, _ in table) / 1e6, slice_bytes, len(slices),
             len({s.msg for s in slices})))

    log = []
    if args.role == 'worker':
        worker(args, args.port, table, slices, log)
    else:
        lst = p3.Listener(None if args.role == 'server' else args.host, args.port)
        th = None
        if args.role == 'both':
            th = threading.Thread(target=worker, args=(args, lst.port, table, slices, log))
            th.start()
        else:
            print('listening on port', lst.port)
        server(args, lst, table, slices, log)
        if th:
            th.join()
        lst.close()
    print('\n'.join(log))


if __name__ == '__main__':
    main()
