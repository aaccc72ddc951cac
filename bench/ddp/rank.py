#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""One rank of bench/ddp: a torchvision model trained with DDP (Gloo) or
p3.torch (schedule fifo or p3), or alone (compute: no exchange, one
process), on fixed random data; rank 0 writes one JSON line to --out:
every timed step's seconds, the CPU seconds of the process per step, and
a digest of the final parameters (equal digests: bitwise-equal
training)."""
import argparse
import hashlib
import json
import os
import sys
import threading
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', '..', 'userlib', 'python'))

from models import MODELS, model_bytes  # noqa: E402


def thread_cpu():
    """{thread name: CPU seconds} of this process, C threads (libp3's,
    Gloo's) included; threads of one name are summed.  Python threads go
    by their threading name (the kernel knows them all as python3)."""
    tick = os.sysconf('SC_CLK_TCK')
    named = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for tid in os.listdir('/proc/self/task'):
        try:
            with open('/proc/self/task/%s/stat' % tid) as f:
                stat = f.read()
        except OSError:
            continue            # it ended meanwhile
        name = named.get(int(tid), stat[stat.index('(') + 1:stat.rindex(')')])
        fields = stat[stat.rindex(')') + 2:].split()
        # utime and stime: fields 14 and 15 of stat(5), 12 and 13 here.
        out[name] = out.get(name, 0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('--mode', choices=('compute', 'ddp', 'fifo', 'p3'),
                    required=True)
    ap.add_argument('--model', choices=sorted(MODELS), required=True)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--steps', type=int, default=10)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--out', required=True)
    ap.add_argument('--tag', default='', help='copied into the result')
    ap.add_argument('--slice', type=int, default=None,
                    help="p3.torch's slice_bytes")
    ap.add_argument('--sample', action='store_true',
                    help='profile the Python threads (bench/torch/sampler.py)')
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter('ignore', RuntimeWarning)   # no qdisc: by design
    rank = int(os.environ.get('RANK', 0))
    torch.manual_seed(1234)
    model = MODELS[a.model]()
    gen = torch.Generator().manual_seed(100 + rank)
    n = a.warmup + a.steps
    xs = torch.randn(n, a.batch, 3, 32, 32, generator=gen)
    ys = torch.randint(0, 10, (n, a.batch), generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    net = model
    if a.mode == 'ddp':
        dist.init_process_group('gloo')
        net = torch.nn.parallel.DistributedDataParallel(model)
    elif a.mode in ('fifo', 'p3'):
        import p3.torch as p3t
        p3t.init(timeout=120)
        p3t.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = p3t.DistributedOptimizer(opt, model, schedule=a.mode,
                                       slice_bytes=a.slice)
    steps, cpu = [], []
    sampler = None
    for i in range(n):
        if i == a.warmup:
            before = thread_cpu()
            if a.sample:
                sys.path.insert(0, os.path.join(HERE, '..', 'torch'))
                from sampler import Sampler
                sampler = Sampler(['MainThread', 'p3.torch reducer'])
        t0, c0 = time.monotonic(), time.process_time()
        opt.zero_grad()
        F.cross_entropy(net(xs[i]), ys[i]).backward()
        opt.step()
        if i >= a.warmup:
            steps.append(time.monotonic() - t0)
            cpu.append(time.process_time() - c0)
    after = thread_cpu()
    profile = sampler.close() if sampler else None
    if hasattr(opt, 'synchronize'):
        opt.synchronize()
    if rank == 0:
        with open(a.out, 'a') as f:
            f.write(json.dumps({
                'tag': a.tag, 'model': a.model, 'mode': a.mode,
                'batch': a.batch, 'bytes': model_bytes(model),
                'step_s': steps, 'cpu_s': cpu,
                'mean_s': sum(steps) / len(steps), 'digest': digest(model),
                'threads': len(os.listdir('/proc/self/task')),
                # CPU seconds a timed step, by thread.
                'thread_cpu_s': {k: (v - before.get(k, 0)) / a.steps
                                 for k, v in after.items()
                                 if v - before.get(k, 0) > 0},
                'profile': profile and {k: v[:15] for k, v in profile.items()}
                }) + '\n')
    if a.mode in ('fifo', 'p3'):
        p3t.shutdown()
    elif a.mode == 'ddp':
        dist.destroy_process_group()


if __name__ == '__main__':
    main()
