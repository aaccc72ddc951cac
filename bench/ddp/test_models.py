#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""examples/nets.py against torchvision 0.14 (same parameters and buffers,
same outputs on torchvision's weights; skipped without torchvision), and
models.py's MODELS training under the running torch (host only, TAP).

  bench/ddp/test_models.py
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from models import MODELS, nets  # noqa: E402

try:
    import torchvision.models as tvm
except ImportError:     # pip's torch 2.13 comes without
    tvm = None


class Tap:
    def __init__(self):
        self.n = self.failed = 0
        print('TAP version 13')

    def ok(self, cond, name, diag=''):
        self.n += 1
        if not cond:
            self.failed += 1
            for line in diag.splitlines():
                print('# ' + line)
        print('%s %d - %s' % ('ok' if cond else 'not ok', self.n, name),
              flush=True)

    def skip(self, name, why):
        self.n += 1
        print('ok %d - %s # SKIP %s' % (self.n, name, why), flush=True)

    def done(self):
        print('1..%d' % self.n)
        print('# %d passed, %d failed' % (self.n - self.failed, self.failed))
        return 1 if self.failed else 0


def shapes(m):
    return ([(k, tuple(v.shape)) for k, v in m.named_parameters()],
            [(k, tuple(v.shape)) for k, v in m.named_buffers()])


def diff(a, b):
    """The lines of @a and @b that differ, for the TAP diagnostics."""
    return '\n'.join('%s | %s' % (x, y) for x, y in zip(a, b) if x != y) + \
        ('\nlengths %d, %d' % (len(a), len(b)) if len(a) != len(b) else '')


def against_torchvision(t, name):
    checks = ('parameters and buffers', 'modules', 'eval outputs',
              'weights from one seed')
    if tvm is None:
        for c in checks:
            t.skip('%s: %s as torchvision\'s' % (name, c),
                   'torchvision not installed')
        return
    torch.manual_seed(0)
    ref = getattr(tvm, name)()
    ours = getattr(nets, name)()
    (pa, ba), (pb, bb) = shapes(ref), shapes(ours)
    t.ok(pa == pb and ba == bb,
         '%s: %d parameters, %d buffers as torchvision\'s (names, shapes, '
         'order)' % (name, len(pa), len(ba)), diff(pa + ba, pb + bb))
    ma = [(k, repr(m)) for k, m in ref.named_modules() if not len(m._modules)]
    mb = [(k, repr(m)) for k, m in ours.named_modules() if not len(m._modules)]
    t.ok(ma == mb, '%s: %d leaf modules as torchvision\'s' % (name, len(ma)),
         diff(ma, mb))
    # Random weights, not ones that happen to match: load torchvision's.
    err, why = float('inf'), ''
    try:
        ours.load_state_dict(ref.state_dict())
        ref.eval()
        ours.eval()
        x = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            err = (ref(x) - ours(x)).abs().max().item()
    except RuntimeError as e:
        why = str(e)
    t.ok(err <= 1e-5, '%s: eval outputs on torchvision\'s weights within '
         '1e-5 (off by %g)' % (name, err), why)
    # The initialisation too, drawn in the same order (at bench/ddp's size).
    torch.manual_seed(1)
    ref = getattr(tvm, name)(num_classes=10).state_dict()
    torch.manual_seed(1)
    ours = getattr(nets, name)(num_classes=10).state_dict()
    bad = [k for k in ref if k not in ours or not torch.equal(ref[k], ours[k])]
    t.ok(not bad and len(ref) == len(ours), '%s: weights from one seed '
         'bitwise torchvision\'s (10 classes)' % name, ' '.join(bad))


def trains(t, name):
    good, why = False, ''
    try:
        torch.manual_seed(0)
        m = MODELS[name]()
        m.train()
        x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
        out = m(x)
        F.cross_entropy(out, y).backward()
        good = tuple(out.shape) == (2, 10) and \
            all(p.grad is not None and torch.isfinite(p.grad).all()
                for p in m.parameters())
    except RuntimeError as e:
        why = str(e)
    t.ok(good, 'models.py %s: forward and backward on 2x3x32x32 under '
         'torch %s' % (name, torch.__version__), why)


def main():
    t = Tap()
    for name in ('resnet18', 'vgg11', 'squeezenet1_1'):
        against_torchvision(t, name)
    for name in MODELS:
        trains(t, name)
    return t.done()


if __name__ == '__main__':
    sys.exit(main())
