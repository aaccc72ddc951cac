#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What torch 2.x users do, each against DDP (Gloo) on the same torch and
the same data, two ranks as processes over loopback (TAP):

- torch.compile(model): trains through p3.torch with the uncompiled
  model's parameters, and DDP's with the same compiled model;
- CPU automatic mixed precision: autocast(bfloat16) and GradScaler, with
  synchronize(), unscale_(), clipping and step() under
  skip_synchronize(); a gradient that overflows on one rank alone makes
  every rank skip that step and halve its scale, as under DDP;
- foreach optimizers (SGD, Adam), which p3.torch steps a layer at a time;
- a model off the CPU (a GPU's) raises at once: not supported yet.

Both schedules, fifo and p3, run every case.  On torch 1.13 the cases
that need 2.x (torch.compile, torch.amp.GradScaler for the CPU) are
skipped, saying so; foreach runs there too.
"""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_torch as tt                                  # noqa: E402
from test_torch import LR, MOMENTUM, data, ok, rel_err  # noqa: E402
from test_torch_habits import (SCHEDULES, STEPS, bn_model, done,  # noqa: E402
                               micro, rank_alone, sgd, train,
                               wrap)

MAJOR = int(torch.__version__.split('.')[0])
HAS_COMPILE = hasattr(torch, 'compile')
HAS_CPU_SCALER = hasattr(torch, 'amp') and hasattr(torch.amp, 'GradScaler')
OVERFLOW_STEP = 2   # the step whose gradient overflows on rank 1 alone


def compiled(kind, rank, when):
    """STEPS steps of SGD; the model compiled after wrapping (DDP: the
    wrapped one, as PyTorch's guide does), before (p3.torch is handed the
    compiled module), or not at all (when None)."""
    model = bn_model()
    net = torch.compile(model) if when == 'before' else model
    # A rank still compiling its first steps keeps the others waiting.
    net, opt = wrap(kind, net, sgd(model),
                    **({} if kind == 'ddp' else {'timeout': 120}))
    if when == 'after':
        net = torch.compile(net)
    train(net, opt, rank)
    return {'params': done(kind, unwrap(net), opt)}


def unwrap(net):
    """The DDP module under torch.compile's wrapper."""
    return getattr(net, '_orig_mod', net)


def amp(kind, rank, max_norm=1.0):
    """bfloat16 autocast, GradScaler, clipping the unscaled averages; in
    step OVERFLOW_STEP rank 1's loss is scaled past float32's range."""
    x, y = data()
    model = bn_model()
    net, opt = wrap(kind, model, sgd(model))
    scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 16)
    scales, stepped = [], []
    for step in range(STEPS):
        bx, by = micro(x, y, step, rank)
        opt.zero_grad()
        with torch.autocast('cpu', dtype=torch.bfloat16):
            loss = F.cross_entropy(net(bx), by)
        if step == OVERFLOW_STEP and rank == 1:
            loss = loss * 1e38
        before = tt.flat(model)
        scaler.scale(loss).backward()
        if kind == 'ddp':
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(opt)
        else:
            opt.synchronize()
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            with opt.skip_synchronize():
                scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        stepped.append(not torch.equal(before, tt.flat(model)))
    return {'params': done(kind, net, opt), 'scales': scales,
            'stepped': stepped}


def foreach(kind, rank, name):
    model = bn_model()
    if name == 'sgd':
        base = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM,
                               foreach=True)
    else:
        base = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    net, opt = wrap(kind, model, base)
    train(net, opt, rank)
    return {'params': done(kind, net, opt)}


# ----------------------------------------------------------- the ranks

def worker(_, out):
    import p3.torch as p3t
    rank = rank_alone()
    p3t.init(timeout=60)        # the first compiled step compiles
    runs = []
    for k in ('ddp',) + SCHEDULES:
        runs += [(('foreach sgd', k), foreach, (k, rank, 'sgd')),
                 (('foreach adam', k), foreach, (k, rank, 'adam'))]
        if HAS_CPU_SCALER:
            runs.append((('amp', k), amp, (k, rank)))
        if HAS_COMPILE:
            runs += [(('eager', k), compiled, (k, rank, None)),
                     (('compiled', k), compiled, (k, rank, 'after'))]
            if k != 'ddp':
                runs.append((('compiled first', k), compiled,
                             (k, rank, 'before')))
    res = {}
    for key, case, args in runs:
        try:
            res['|'.join(key)] = case(*args)
        except Exception as e:
            res['|'.join(key)] = {'error': '%s: %s' % (type(e).__name__, e)}
    with open(out, 'w') as f:
        json.dump(res, f)
    p3t.shutdown()


# ------------------------------------------------------------ checks

def get(res, case, kind, key='params'):
    return (res.get('%s|%s' % (case, kind)) or {}).get(key)


def check(res):
    for kind in SCHEDULES:
        for name in ('sgd', 'adam'):
            case = 'foreach ' + name
            want, got = get(res[0], case, 'ddp'), get(res[0], case, kind)
            ok(want is not None and got == want and got == get(res[1], case,
                                                               kind),
               '%s: %s (foreach=True), a layer a step, equals DDP\'s '
               'bitwise on both ranks%s' % (
                   case, kind, '' if want is None or got is None else
                   ' (max relative difference %.2g)' % rel_err(got, want)))
        if not HAS_CPU_SCALER:
            ok(True, 'amp: %s # SKIP torch %s has no GradScaler for the '
               'CPU (torch.amp.GradScaler)' % (kind, torch.__version__))
        else:
            want = res[0].get('amp|ddp') or {}
            got = [r.get('amp|' + kind) or {} for r in res]
            ok(all('params' in g for g in got) and 'params' in want and
               got[0]['params'] == want['params'] == got[1]['params'],
               'amp: %s: bfloat16 autocast, GradScaler, clipping: both ranks '
               'end bitwise equal to DDP%s' % (kind, '' if 'params' in got[0]
                                               and 'params' in want else
                                               ': %s' % got[0].get('error')))
            skipped = [g.get('stepped') for g in got]
            ok(want.get('stepped') is not None and
               skipped[0] == skipped[1] == want['stepped'] and
               not want['stepped'][OVERFLOW_STEP] and
               all(v for s, v in enumerate(want['stepped'])
                   if s != OVERFLOW_STEP),
               'amp: %s: rank 1\'s overflow in step %d: every rank skips '
               'that step alone, as under DDP (stepped: %s, DDP %s)'
               % (kind, OVERFLOW_STEP, skipped, want.get('stepped')))
            scales = [g.get('scales') for g in got]
            ok(scales[0] is not None and scales[0] == scales[1] ==
               want.get('scales'),
               'amp: %s: every rank\'s scale follows DDP\'s: %s'
               % (kind, scales[0]))
        if not HAS_COMPILE:
            ok(True, 'compile: %s # SKIP torch %s has no torch.compile'
               % (kind, torch.__version__))
            continue
        eager = get(res[0], 'eager', kind)
        want = get(res[0], 'compiled', 'ddp')
        for case, how in (('compiled', 'torch.compile(model) after wrapping'),
                          ('compiled first', 'a model compiled before '
                           'wrapping')):
            got = [get(r, case, kind) for r in res]
            ok(got[0] is not None and got[0] == got[1],
               'compile: %s: %s trains, both ranks bitwise equal%s'
               % (kind, how, '' if got[0] is not None else ': %s' % (
                   res[0].get('%s|%s' % (case, kind)) or {}).get('error')))
            err = rel_err(got[0], eager) if got[0] and eager else 1.0
            ok(err <= 1e-5, 'compile: %s: %s: within 1e-5 of the '
               'uncompiled model under p3.torch (max relative difference '
               '%.2g)' % (kind, how, err))
            err = rel_err(got[0], want) if got[0] and want else 1.0
            ok(err <= 1e-5, 'compile: %s: %s: within 1e-5 of DDP with the '
               'compiled model (max relative difference %.2g)'
               % (kind, how, err))


def devices():
    """A model off the CPU is refused at once, naming its device ('meta'
    stands in for a GPU on a host without one)."""
    import p3.torch as p3t
    model = nn.Linear(4, 4, device='meta')
    try:
        p3t.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                 model)
        err = None
    except ValueError as e:
        err = str(e)
    ok(err is not None and 'meta' in err and 'CPU tensors only' in err,
       'devices: a model on another device raises ValueError naming it, '
       'before any rendezvous: %s' % err)


def cases():
    here = os.path.abspath(__file__)
    res, _ = tt.run_ranks(lambda out: [here, '--worker', '-', out])
    errors = sorted({'%s: %s' % (k, v['error'][:200]) for r in res if r
                     for k, v in r.items() if 'error' in v})
    ok(all(res) and not errors, 'every case ran on both ranks: %s' % errors)
    if all(res):
        check(res)


if __name__ == '__main__':
    sys.exit(tt.run_script([devices, cases], worker))
