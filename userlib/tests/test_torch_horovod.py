#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Horovod's DistributedOptimizer arguments, and the places where a DDP or
Horovod script that does not follow docs/torch.md to the letter would
get wrong results or hang: each works as under DDP or raises at the call
that causes it, naming the fix.  Two ranks as processes over loopback
(TAP), both schedules:

- named_parameters= in place of the model (Horovod's, positional too):
  bitwise DDP's parameters; op=Sum gives the ranks' sum, op=Average with
  gradient_predivide_factor Horovod's scaled average, Compression.fp16
  float16 on the wire summed in float32 (bytes_sent halves), op=Adasum a
  ValueError;
- a gradient changed between backward and step() (clipping) raises at
  step(), naming synchronize(); so does a parameter unfrozen after
  wrapping, naming close();
- synchronize() after step() on rank 0 alone returns at once (a rank-0
  save), with that step's update;
- a weight read outside its module, which never runs, or before its
  module runs, is updated before the forward reads it: DDP's
  parameters, bitwise;
- the process group: dist.init_process_group() after p3.torch.init()
  joins it (Gloo; the script destroys it) or raises naming the fix;
  before it, p3.torch joins the script's group, with a Gloo group of
  its own;
- examples/horovod_train.py, a Horovod script moved by its import line,
  trains under the launcher with fp16 compression.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_torch as tt                                  # noqa: E402
from test_torch import WORLD, data, ok  # noqa: E402
from test_torch_habits import (SCHEDULES, bn_model, done,  # noqa: E402
                               micro, rank_alone, sgd, train,
                               wrap)


def grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def named(kind, rank, positional=False):
    """DDP's training with the optimizer given named_parameters alone."""
    import p3.torch as p3t
    model = bn_model()
    if kind == 'ddp':
        net, opt = wrap(kind, model, sgd(model))
    else:
        args = (model.named_parameters(),) if positional else ()
        kw = {} if positional else {'named_parameters':
                                    model.named_parameters()}
        net, opt = model, p3t.DistributedOptimizer(
            sgd(model), *args, schedule=kind, slice_bytes=tt.SLICE,
            timeout=10, broadcast_buffers=False, **kw)
    train(net, opt, rank)
    # The parameters as a Horovod script saves them: state_dict().
    return {'params': torch.cat([t.reshape(-1).double() for k, t in
                                 model.state_dict().items()
                                 if 'running' not in k and 'num_batches'
                                 not in k]).tolist()}


def reduced(kind, rank, **kw):
    """One step's local gradients and what synchronize() makes of them."""
    import p3.torch as p3t
    x, y = data()
    model = bn_model()
    opt = p3t.DistributedOptimizer(sgd(model), model, schedule=kind,
                                   slice_bytes=tt.SLICE, timeout=10, **kw)
    bx, by = micro(x, y, 0, rank)
    F.cross_entropy(model(bx), by).backward()
    local = grads(model).clone()
    opt.synchronize()
    out = {'local': local.tolist(), 'reduced': grads(model).tolist(),
           'stats': opt.stats()}
    with opt.skip_synchronize():
        opt.step()
    opt.close()
    return out


def clipped(kind, rank):
    """DDP's habit: clip between backward and step(), no synchronize()."""
    x, y = data()
    model = bn_model()
    net, opt = wrap(kind, model, sgd(model))
    bx, by = micro(x, y, 0, rank)
    F.cross_entropy(net(bx), by).backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    try:
        opt.step()
        return {'error': None}
    finally:
        opt.close()


def thawed(kind, rank):
    """A layer frozen at wrapping, unfrozen after step 0."""
    x, y = data()
    model = bn_model()
    model[0].requires_grad_(False)
    net, opt = wrap(kind, model, sgd(model))
    try:
        for step in range(2):
            if step == 1:
                model[0].requires_grad_(True)
            bx, by = micro(x, y, step, rank)
            opt.zero_grad()
            F.cross_entropy(net(bx), by).backward()
            opt.step()
        return {'error': None}
    finally:
        opt.close()


class Outside(nn.Module):
    """A weight read by hand: the head's, whose module never runs (after
    the body's modules, whose pre-hooks run first), or with early=True
    the mix's, before its own module runs."""

    def __init__(self, early=False):
        super().__init__()
        torch.manual_seed(1234)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(),
                                  nn.Linear(256, 256), nn.ReLU())
        self.mix = nn.Linear(256, 256)
        self.head = nn.Linear(256, 10)
        self.early = early

    def forward(self, x):
        h = self.body(x)
        if self.early:
            h = self.mix(h + F.linear(h, self.mix.weight))
            return self.head(h)
        return F.linear(h, self.head.weight, self.head.bias)


def outside(kind, rank, early=False):
    model = Outside(early)
    net, opt = wrap(kind, model, sgd(model),
                    **({'find_unused_parameters': True} if not early
                       else {}))
    train(net, opt, rank)
    return {'params': done(kind, net, opt)}


def rank0_save(kind, rank):
    """STEPS steps; then rank 0 alone calls synchronize() and reads the
    parameters (a save), while rank 1 goes on to a later point."""
    model = bn_model()
    net, opt = wrap(kind, model, sgd(model))
    train(net, opt, rank)
    took = None
    if rank == 0:
        t0 = time.monotonic()
        if kind != 'ddp':
            opt.synchronize()
        took = time.monotonic() - t0
        saved = tt.flat(model).tolist()
    else:
        time.sleep(1)
    res = {'params': done(kind, net, opt), 'took': took}
    if rank == 0:
        res['saved_equal'] = saved == res['params']
    return res


# ----------------------------------------------------------- the ranks

def worker(mode, out):
    import p3.torch as p3t
    import torch.distributed as dist
    rank = rank_alone()
    res = {}
    if mode == 'joined':
        # The script's own group first: p3.torch joins it, with a Gloo
        # group of its own beside it.
        dist.init_process_group('gloo')
        p3t.init(timeout=10)
        res['group'] = p3t._job.need()['group'] is not None
        res['joined'] = named('p3', rank)
        res['joined ddp'] = named('ddp', rank)
    else:
        p3t.init(timeout=10)
        # The script's own init_process_group after p3.torch.init().
        try:
            dist.init_process_group('gloo')
            res['later gloo'] = {'error': None}
        except Exception as e:
            res['later gloo'] = {'error': '%s: %s' % (type(e).__name__, e)}
        try:
            dist.init_process_group('nccl')
            res['later nccl'] = {'error': None}
        except Exception as e:
            res['later nccl'] = {'error': '%s: %s' % (type(e).__name__, e)}
        runs = [('named ddp', named, ('ddp', rank))]
        for k in SCHEDULES:
            runs += [
                ('named ' + k, named, (k, rank)),
                ('positional ' + k, named, (k, rank, True)),
                ('average ' + k, reduced, (k, rank)),
                ('sum ' + k, reduced, (k, rank), {'op': p3t.Sum}),
                ('predivide ' + k, reduced, (k, rank),
                 {'gradient_predivide_factor': 4.0}),
                ('fp16 ' + k, reduced, (k, rank),
                 {'compression': p3t.Compression.fp16}),
                ('clipped ' + k, clipped, (k, rank)),
                ('thawed ' + k, thawed, (k, rank)),
                ('rank 0 save ' + k, rank0_save, (k, rank)),
                ('outside ' + k, outside, (k, rank)),
                ('early ' + k, outside, (k, rank, True))]
        runs += [('rank 0 save ddp', rank0_save, ('ddp', rank)),
                 ('outside ddp', outside, ('ddp', rank)),
                 ('early ddp', outside, ('ddp', rank, True))]
        for key, case, args, *kw in runs:
            try:
                res[key] = case(*args, **(kw[0] if kw else {}))
            except Exception as e:
                res[key] = {'error': '%s: %s' % (type(e).__name__, e)}
        try:
            p3t.DistributedOptimizer(sgd(bn_model()), bn_model(),
                                     op=p3t.Adasum)
            res['adasum'] = {'error': None}
        except ValueError as e:
            res['adasum'] = {'error': str(e)}
    p3t.shutdown()
    # The group the script joined is the script's to destroy (and the
    # one it started, in 'joined').
    try:
        dist.destroy_process_group()
        res['script destroys'] = {'error': None}
    except Exception as e:
        res['script destroys'] = {'error': '%s: %s' % (type(e).__name__, e)}
    with open(out, 'w') as f:
        json.dump(res, f)


# ------------------------------------------------------------ checks

def err(res, key):
    return (res.get(key) or {}).get('error') or ''


def raised(res, key, what, fix, case):
    """Every rank raised in case key, one saying what and naming fix: the
    first rank to reach step() names it; a rank still in its backward
    may see that rank leave first (a PeerError)."""
    e = sorted((err(r, key) for r in res), key=lambda x: fix not in x)
    ok(all(e) and what in e[0] and fix in e[0],
       '%s: step() raises, the first rank there naming %s: %s'
       % (case, fix, e[0][:90]))


def check(res):
    r0 = res[0]
    want = (r0.get('named ddp') or {}).get('params')
    for kind in SCHEDULES:
        for how in ('named', 'positional'):
            got = [(r.get('%s %s' % (how, kind)) or {}).get('params')
                   for r in res]
            ok(want is not None and got[0] == want == got[1],
               'named_parameters (%s): %s: both ranks end bitwise equal to '
               'DDP%s' % ('Horovod\'s second argument' if how == 'positional'
                          else 'keyword', kind, '' if got[0] else ': %s'
                          % err(r0, '%s %s' % (how, kind))))
        loc = [torch.tensor((r.get('average ' + kind) or {}).get('local', []))
               for r in res]
        avg = (r0.get('average ' + kind) or {}).get('reduced')
        sums = (r0.get('sum ' + kind) or {}).get('reduced')
        ok(sums is not None and torch.equal(torch.tensor(sums),
                                            loc[0] + loc[1]),
           'op=Sum: %s: synchronize() leaves the ranks\' sum in .grad, '
           'bitwise' % kind)
        pre = (r0.get('predivide ' + kind) or {}).get('reduced')
        horovod = ((loc[0] * 0.25 + loc[1] * 0.25) / WORLD) * 4.0
        ok(pre is not None and torch.equal(torch.tensor(pre), horovod),
           'gradient_predivide_factor=4: %s: ((g0 / 4 + g1 / 4) / 2) * 4, '
           'bitwise' % kind)
        fp16 = r0.get('fp16 ' + kind) or {}
        wire = [v.half().float() for v in loc]
        want16 = ((wire[0] + wire[1]) / WORLD).half().float()
        ok(fp16.get('reduced') is not None and
           torch.equal(torch.tensor(fp16['reduced']), want16),
           'Compression.fp16: %s: float16 on the wire, summed in float32, '
           'the average returned in float16, bitwise' % kind)
        # The job's pushes (each rank's part follows the owners the plan
        # picks); the averages a rank returns leave from its reducer,
        # whenever their sums are done.
        dense, half = [sum((r.get(case + kind) or {}).get(
            'stats', {}).get('bytes_pushed', 0) for r in res)
            for case in ('average ', 'fp16 ')]
        ok(dense and half * 2 == dense,
           'Compression.fp16: %s: the job pushes %d bytes, half of %d'
           % (kind, half, dense))
        ok(avg is not None and torch.allclose(torch.tensor(avg),
                                              (loc[0] + loc[1]) / 2),
           'op=Average: %s: the mean of the ranks\' gradients' % kind)
        raised(res, 'clipped ' + kind, 'changed after backward sent them',
               'synchronize()', 'clipping between backward and step(): %s'
               % kind)
        raised(res, 'thawed ' + kind, 'did not require a gradient',
               'close()', 'a layer unfrozen after wrapping: %s' % kind)
        s = r0.get('rank 0 save ' + kind) or {}
        ok(s.get('took') is not None and s['took'] < 0.5 and
           s.get('saved_equal') and s.get('params') ==
           (r0.get('rank 0 save ddp') or {}).get('params'),
           'synchronize() after step() on rank 0 alone: %s: returns in %s s '
           '(under 0.5; rank 1 comes 1 s later), with the parameters of the '
           'last step, DDP\'s'
           % (kind, None if s.get('took') is None else '%.3f' % s['took']))
    for case, what in (('outside', 'a weight read outside its module, '
                        'which never runs'),
                       ('early', 'a weight read before its module runs')):
        want = (r0.get(case + ' ddp') or {}).get('params')
        for kind in SCHEDULES:
            got = [(r.get('%s %s' % (case, kind)) or {}).get('params')
                   for r in res]
            ok(want is not None and got[0] == got[1] == want,
               '%s: %s: both ranks end bitwise equal to DDP%s' % (
                   what, kind, '' if got[0] else ': %s'
                   % err(r0, '%s %s' % (case, kind))))
    ok('Adasum' in err(r0, 'adasum'),
       'op=Adasum raises ValueError naming it: %s' % err(r0, 'adasum'))
    ok(all((r.get('later gloo') or {}).get('error') is None for r in res),
       'dist.init_process_group("gloo") after p3.torch.init() joins its '
       'group: %s' % [err(r, 'later gloo')[:60] for r in res])
    ok(all(r.get('script destroys', {}).get('error', 'none') is None
           for r in res),
       'the script\'s own dist.destroy_process_group() after '
       'p3.torch.shutdown(): %s' % [err(r, 'script destroys')[:60]
                                   for r in res])
    e = err(r0, 'later nccl')
    ok('before p3.torch.init()' in e,
       'dist.init_process_group("nccl") after p3.torch.init() raises, '
       'naming the fix: %s' % e[:100])


def check_joined(res):
    want = [(r.get('joined ddp') or {}).get('params') for r in res]
    got = [(r.get('joined') or {}).get('params') for r in res]
    ok(want[0] is not None and got[0] == got[1] == want[0] and
       all(r.get('group') for r in res),
       'dist.init_process_group("gloo") before p3.torch.init(): p3.torch '
       'joins the script\'s group, with a Gloo group of its own, and '
       'trains DDP\'s parameters: %s' % (err(res[0], 'joined') or 'bitwise'))


def cases():
    here = os.path.abspath(__file__)
    res, _ = tt.run_ranks(lambda out: [here, '--worker', 'cases', out])
    ok(all(res), 'every case ran on both ranks')
    if all(res):
        check(res)
    res, _ = tt.run_ranks(lambda out: [here, '--worker', 'joined', out])
    ok(all(res), 'the joined job ran on both ranks')
    if all(res):
        check_joined(res)


def example():
    """examples/horovod_train.py under p3torchrun: fp16 and none."""
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, '..', '..', 'examples', 'horovod_train.py')
    tmp = tempfile.mkdtemp(prefix='p3t-hvd-')
    got = {}
    for comp in ('fp16', 'none'):
        save = os.path.join(tmp, comp + '.pt')
        # p3torchrun on both torch versions (torchrun itself on 2.x is
        # test_torch.py's).
        p = subprocess.run(
            [sys.executable, os.path.join(here, '..', 'cli', 'p3torchrun'),
             '--nproc_per_node', str(WORLD), '--master_port',
             str(tt.free_port()), script, '--steps', '3', '--compression',
             comp, '--save', save],
            env=dict(os.environ, PYTHONWARNINGS='ignore'),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=600)
        if p.returncode:
            # The ranks' own errors, not only torchrun's summary.
            print('# ' + '\n# '.join([line for line in p.stderr.splitlines()
                                      if 'Error' in line][-6:]))
            continue
        with open(save + '.json') as f:
            got[comp] = json.load(f)
        got[comp]['params'] = torch.load(save)
    ok(len(got) == 2, 'examples/horovod_train.py (import p3.torch as hvd): '
       'trains 3 steps with fp16 and with no compression under p3torchrun')
    if len(got) == 2:
        a, b = got['fp16'], got['none']
        ok(a['job_bytes_pushed'] * 2 == b['job_bytes_pushed'],
           'examples/horovod_train.py: with fp16 the job pushes half the '
           'bytes (%d, %d)' % (a['job_bytes_pushed'], b['job_bytes_pushed']))
        ok(max(abs(x - y) for x, y in zip(a['losses'], b['losses'])) < 0.05,
           'examples/horovod_train.py: fp16\'s mean losses within 0.05 of '
           'uncompressed: %s, %s' % (['%.4f' % v for v in a['losses']],
                                     ['%.4f' % v for v in b['losses']]))


if __name__ == '__main__':
    sys.exit(tt.run_script([cases, example], worker))
