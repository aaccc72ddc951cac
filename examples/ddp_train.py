#!/usr/bin/python3
"""A torchvision model trained with DDP the way real scripts do it:
gradient accumulation, clipping, a learning-rate schedule, checkpoints
(resumed if the file exists).  examples/p3_train.py is the same script
moved to p3.torch (docs/torch.md, "Migrating from DDP").

    p3torchrun --nproc_per_node 2 examples/ddp_train.py --steps 4
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
try:
    import torchvision.models as models
except ImportError:     # pip's torch 2.13 comes without: the same models
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nets as models


def batch(step, k, rank, size):
    """Random 32x32 images, the same on every run of the same rank."""
    g = torch.Generator().manual_seed(1000 * step + 10 * k + rank)
    return (torch.randn(size, 3, 32, 32, generator=g),
            torch.randint(0, 10, (size,), generator=g))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', default='resnet18')
    ap.add_argument('--steps', type=int, default=4)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--accumulate', type=int, default=2)
    ap.add_argument('--clip', type=float, default=1.0)
    ap.add_argument('--checkpoint', default='')
    ap.add_argument('--save-params', default='')
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = models.__dict__[a.model](num_classes=10)
    model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    start = 0
    if a.checkpoint and os.path.exists(a.checkpoint):
        ck = torch.load(a.checkpoint)
        model.module.load_state_dict(ck['model'])
        opt.load_state_dict(ck['opt'])
        sched.load_state_dict(ck['sched'])
        start = ck['step']
    for step in range(start, a.steps):
        opt.zero_grad()
        for k in range(a.accumulate):
            x, y = batch(step, k, rank, a.batch)
            loss = F.cross_entropy(model(x), y) / a.accumulate
            if k < a.accumulate - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        sched.step()
        if rank == 0:
            print('step %d: loss %.4f, gradient norm %.3f, lr %g'
                  % (step, loss.item() * a.accumulate, norm,
                     sched.get_last_lr()[0]), flush=True)
            if a.checkpoint:
                torch.save({'model': model.module.state_dict(),
                            'opt': opt.state_dict(),
                            'sched': sched.state_dict(), 'step': step + 1},
                           a.checkpoint)
    if rank == 0 and a.save_params:
        torch.save([p.detach() for p in model.parameters()], a.save_params)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
