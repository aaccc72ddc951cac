#!/usr/bin/python3
"""A Horovod training script moved to p3.torch by its import line alone
(docs/torch.md, "Moving from Horovod"):

    -import horovod.torch as hvd
    +import p3.torch as hvd

Synthetic images, a torchvision model, the learning rate scaled by the
number of workers, parameters and optimizer state broadcast from rank 0,
fp16 compression, and the loss averaged over the ranks for the log.

    p3torchrun --nproc_per_node 2 examples/horovod_train.py --steps 4
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
try:
    import torchvision.models as models
except ImportError:     # pip's torch 2.13 comes without: the same models
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nets as models

import p3.torch as hvd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', default='resnet18')
    ap.add_argument('--steps', type=int, default=4)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--compression', choices=('fp16', 'none'),
                    default='fp16')
    ap.add_argument('--predivide', type=float, default=1.0,
                    help='gradient_predivide_factor')
    ap.add_argument('--save', default='',
                    help="rank 0's state_dict here, the losses and the "
                    "job's bytes pushed beside it (.json)")
    a = ap.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    # Each rank its own initial weights: the broadcast makes them one.
    torch.manual_seed(hvd.rank())
    model = models.__dict__[a.model](num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(),
                          momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    compression = (hvd.Compression.fp16 if a.compression == 'fp16'
                   else hvd.Compression.none)
    opt = hvd.DistributedOptimizer(
        opt, named_parameters=model.named_parameters(),
        compression=compression, op=hvd.Average,
        gradient_predivide_factor=a.predivide)

    data = torch.Generator().manual_seed(1000 + hvd.rank())
    losses = []
    for step in range(a.steps):
        x = torch.randn(a.batch, 3, 32, 32, generator=data)
        y = torch.randint(0, 10, (a.batch,), generator=data)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        mean = hvd.allreduce(loss.detach(), name='loss').item()
        losses.append(mean)
        if hvd.rank() == 0:
            print('step %d: loss %.4f (mean of %d ranks; local rank %d of '
                  '%d)' % (step, mean, hvd.size(), hvd.local_rank(),
                           hvd.local_size()), flush=True)
    # Every rank pushes the slices others own: the job's pushes are the
    # model's gradient bytes each step, in the wire's dtype.
    pushed = hvd.allreduce(torch.tensor(opt.stats()['bytes_pushed']),
                           op=hvd.Sum).item()
    if a.save and hvd.rank() == 0:
        torch.save(model.state_dict(), a.save)
        with open(a.save + '.json', 'w') as f:
            json.dump({'losses': losses, 'job_bytes_pushed': pushed}, f)
    hvd.shutdown()


if __name__ == '__main__':
    main()
