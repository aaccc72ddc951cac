#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Horovod's collectives in p3.torch, two ranks as processes over
loopback (TAP), each result against the numbers worked out by hand:

- allreduce (Average, Sum, Min, Max, Product, prescale and postscale,
  the deprecated average=), allreduce_ in place (a transposed view, int64,
  float16, bfloat16); Adasum raises ValueError naming it;
- allgather of tensors whose first dimensions differ by rank (one empty),
  and a ValueError on every rank where the trailing shapes differ;
- broadcast, broadcast_, broadcast_object (a dict holding a tensor),
  allgather_object;
- broadcast_optimizer_state from rank 0 to a rank 1 whose optimizer had
  another learning rate and no state: SGD, Adam, and a
  DistributedOptimizer mid-training;
- local_rank, local_size, cross_rank, cross_size, from the hostnames and
  from torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE;
- a call before init() raises NotInitializedError, and a lost peer
  PeerError.
"""
import json
import os
import sys
import time
import warnings

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_torch as tt                                  # noqa: E402
from test_torch import ok                                # noqa: E402

import p3.torch as p3t                                   # noqa: E402
import p3.torch as hvd

TIMEOUT = 10


def plain(x):
    """x as JSON holds it."""
    return x.tolist() if torch.is_tensor(x) else x


def mine(rank):
    """This rank's tensor for the reductions: [1 2 3] on rank 0, [3 5 7]
    on rank 1."""
    return torch.tensor([1., 2., 3.]) * (rank + 1) + rank


def raises(fn):
    try:
        fn()
    except Exception as e:
        return '%s: %s' % (type(e).__name__, e)
    return None


# ---------------------------------------------------------------- cases

def reductions(rank):
    x = mine(rank)
    res = {op: plain(hvd.allreduce(x, op=getattr(hvd, op)))
           for op in ('Average', 'Sum', 'Min', 'Max', 'Product')}
    res['default'] = plain(hvd.allreduce(x, name='x'))
    res['input'] = plain(x)
    res['scaled'] = plain(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0,
                                       postscale_factor=0.25))
    res['average scaled'] = plain(hvd.allreduce(x, postscale_factor=3.0))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        res['average=False'] = plain(hvd.allreduce(x, average=False))
        res['average=True'] = plain(hvd.allreduce(x, average=True))
    res['deprecated'] = [c.category.__name__ for c in w]
    y = x.clone()
    res['in place is'] = hvd.allreduce_(y, op=hvd.Sum) is y
    res['in place'] = plain(y)
    # A transposed view: not contiguous, written back where it lies.
    base = torch.arange(6.).reshape(2, 3) * (rank + 1)
    view = base.t()
    hvd.allreduce_(view, op=hvd.Sum)
    res['view'] = plain(base)
    res['int64 sum'] = plain(hvd.allreduce(torch.tensor([rank + 1, 10 * rank]),
                                          op=hvd.Sum))
    res['int64 average'] = plain(hvd.allreduce(torch.tensor([rank + 1])))
    half = torch.tensor([0.5, 1.5]).half() * (rank + 1)
    res['float16'] = plain(hvd.allreduce(half, op=hvd.Sum).float())
    bf = torch.tensor([1.0, 1.0078125, 3.0]).bfloat16() * (rank + 1)
    out = hvd.allreduce_(bf)
    res['bfloat16'] = plain(out.float())
    res['bfloat16 dtype'] = str(out.dtype)
    res['adasum'] = raises(lambda: hvd.allreduce(x, op=hvd.Adasum))
    res['adasum_'] = raises(lambda: hvd.allreduce_(x, op=hvd.Adasum))
    res['op and average'] = raises(lambda: hvd.allreduce(x, average=True,
                                                         op=hvd.Sum))
    return res


def gathers(rank):
    rows = 2 + rank
    t = torch.arange(rows * 2).reshape(rows, 2) + 100 * rank
    res = {'int64': plain(hvd.allgather(t)),
           'float32': plain(hvd.allgather(t.float())),
           'bfloat16': plain(hvd.allgather(t.bfloat16()).float()),
           'bfloat16 dtype': str(hvd.allgather(t.bfloat16()).dtype)}
    some = torch.ones(0 if rank == 0 else 2, 3)
    res['one empty'] = plain(hvd.allgather(some * (rank + 1)))
    res['mismatch'] = raises(lambda: hvd.allgather(torch.zeros(1, 2 + rank)))
    res['after mismatch'] = plain(hvd.allgather(torch.tensor([rank])))
    res['objects'] = hvd.allgather_object({'rank': rank,
                                           'data': list(range(rank + 2))})
    return res


def broadcasts(rank):
    t = torch.full((3,), rank + 1.0)
    res = {'from 1': plain(hvd.broadcast(t, 1)), 'kept': plain(t)}
    res['in place is'] = hvd.broadcast_(t, 0) is t
    res['in place'] = plain(t)
    bf = torch.tensor([1.0078125, -2.5]).bfloat16() * (rank + 1)
    hvd.broadcast_(bf, 1)
    res['bfloat16'] = plain(bf.float())
    obj = {'rank': rank, 'nested': [rank, 'x' * (rank + 1)],
           'tensor': torch.full((2,), float(rank))}
    got = hvd.broadcast_object(obj, root_rank=1)
    res['object'] = dict(got, tensor=plain(got['tensor']))
    res['object default root'] = hvd.broadcast_object(('from', rank))
    res['bad root'] = raises(lambda: hvd.broadcast(t, 2))
    return res


def model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def local_step(net, opt, rank):
    """One step of opt on this rank's own batch (no other rank)."""
    torch.manual_seed(100 + rank)
    opt.zero_grad()
    net(torch.randn(16, 4)).pow(2).mean().backward()
    opt.step()


def state_of(opt):
    sd = opt.state_dict()
    return {'groups': [{k: list(v) if isinstance(v, tuple) else v
                        for k, v in g.items()} for g in sd['param_groups']],
            'state': {str(i): {k: plain(v) for k, v in s.items()}
                      for i, s in sd['state'].items()}}


def optimizer_states(rank):
    res = {}
    for name, make in (
            ('SGD', lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9)),
            ('Adam', lambda p, lr: torch.optim.Adam(
                p, lr=lr, betas=(0.8, 0.99) if lr < 0.1 else (0.9, 0.999)))):
        net = model()
        opt = make(net.parameters(), 0.05 if rank == 0 else 0.5)
        if rank == 0:
            local_step(net, opt, rank)     # rank 1's has no state at all
        res[name + ' before'] = state_of(opt)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        res[name] = state_of(opt)
    # A DistributedOptimizer mid-training, whose wrapped optimizer on rank
    # 0 alone stepped before it was wrapped: after the broadcasts (state
    # and parameters) one more step leaves the ranks equal.
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05 if rank == 0 else 0.5,
                          momentum=0.9)
    if rank == 0:
        local_step(net, opt, rank)
    dopt = p3t.DistributedOptimizer(opt, net, schedule='p3', timeout=TIMEOUT)
    try:
        local_step(net, dopt, rank)
        res['distributed before'] = state_of(dopt)
        hvd.broadcast_optimizer_state(dopt, 0)
        res['distributed'] = state_of(dopt)
        p3t.broadcast_parameters(net.state_dict(), root_rank=0)
        local_step(net, dopt, rank)
        dopt.synchronize()
        res['distributed params'] = plain(torch.cat(
            [p.detach().reshape(-1) for p in net.parameters()]))
    finally:
        dopt.close()
    return res


def places(rank):
    return {'local_rank': hvd.local_rank(), 'local_size': hvd.local_size(),
            'cross_rank': hvd.cross_rank(), 'cross_size': hvd.cross_size()}


# ----------------------------------------------------------- the ranks

def worker(mode, out):
    """One rank.  mode 'cases': every case, the places from the
    hostnames; 'torchrun': the places with LOCAL_RANK=0 and
    LOCAL_WORLD_SIZE=1 (one rank a host), then rank 1 leaves and rank 0
    all-reduces."""
    torch.set_num_threads(1)
    warnings.simplefilter('ignore', RuntimeWarning)     # no qdisc here
    rank = int(os.environ['RANK'])
    for k in ('LOCAL_RANK', 'LOCAL_WORLD_SIZE'):
        os.environ.pop(k, None)
    if mode == 'torchrun':
        os.environ.update(LOCAL_RANK='0', LOCAL_WORLD_SIZE='1')
    p3t.init(timeout=TIMEOUT)
    runs = [('places', places)]
    if mode == 'cases':
        runs += [('reductions', reductions), ('gathers', gathers),
                 ('broadcasts', broadcasts), ('optimizers', optimizer_states)]
    res = {}
    for key, case in runs:
        try:
            res[key] = case(rank)
        except Exception as e:
            res[key] = {'error': '%s: %s' % (type(e).__name__, e)}
    if mode == 'torchrun':
        if rank == 1:
            with open(out, 'w') as f:
                json.dump(res, f)
            os._exit(0)         # gone, without a word to rank 0
        t0 = time.monotonic()
        res['lost'] = {'error': raises(lambda: hvd.allreduce(torch.ones(2))),
                       'took': time.monotonic() - t0}
    with open(out, 'w') as f:
        json.dump(res, f)
    p3t.shutdown()


# ------------------------------------------------------------ checks

def before_init():
    """Every call needs init() first, LOCAL_RANK set or not."""
    t = torch.ones(2)
    calls = {
        'allreduce': lambda: hvd.allreduce(t),
        'allreduce_': lambda: hvd.allreduce_(t),
        'allgather': lambda: hvd.allgather(t),
        'broadcast': lambda: hvd.broadcast(t, 0),
        'broadcast_': lambda: hvd.broadcast_(t, 0),
        'broadcast_object': lambda: hvd.broadcast_object({}),
        'allgather_object': lambda: hvd.allgather_object({}),
        'broadcast_optimizer_state': lambda: hvd.broadcast_optimizer_state(
            torch.optim.SGD([nn.Parameter(t)], lr=0.1), 0),
        'local_rank': hvd.local_rank, 'local_size': hvd.local_size,
        'cross_rank': hvd.cross_rank, 'cross_size': hvd.cross_size}
    env = dict(os.environ)
    os.environ.update(LOCAL_RANK='0', LOCAL_WORLD_SIZE='1')
    try:
        wrong = {k: raises(f) for k, f in calls.items()}
    finally:
        os.environ.clear()
        os.environ.update(env)
    wrong = {k: v for k, v in wrong.items()
             if not (v or '').startswith('NotInitializedError')}
    ok(not wrong, 'before init(), each of the %d calls raises '
       'NotInitializedError (not: %s)' % (len(calls), wrong))
    ops = ('Average', 'Sum', 'Adasum', 'Min', 'Max', 'Product')
    ok(all(getattr(hvd, k) is getattr(p3t, k) for k in ops),
       'the ops are p3.torch\'s, which DistributedOptimizer(op=...) takes')


def check_reductions(res):
    r = [x['reductions'] for x in res]
    want = {'Average': [2.0, 3.5, 5.0], 'Sum': [4.0, 7.0, 10.0],
            'Min': [1.0, 2.0, 3.0], 'Max': [3.0, 5.0, 7.0],
            'Product': [3.0, 10.0, 21.0]}
    for op, v in want.items():
        ok(r[0][op] == r[1][op] == v, 'allreduce op=%s of [1 2 3] and '
           '[3 5 7]: %s on both ranks (want %s)' % (op, r[0][op], v))
    ok(r[0]['default'] == want['Average'] and r[0]['input'] == [1, 2, 3],
       'allreduce: Average by default, the input left as it was')
    ok(r[0]['scaled'] == r[1]['scaled'] == [2.0, 3.5, 5.0],
       'allreduce: Sum with prescale_factor 2, postscale_factor 0.25: %s'
       % r[0]['scaled'])
    ok(r[0]['average scaled'] == [6.0, 10.5, 15.0],
       'allreduce: Average with postscale_factor 3: %s'
       % r[0]['average scaled'])
    ok(r[0]['average=False'] == want['Sum'] and
       r[0]['average=True'] == want['Average'] and
       r[0]['deprecated'] == ['DeprecationWarning'] * 2,
       'allreduce(average=False/True) is Sum/Average, with a '
       'DeprecationWarning (%s)' % r[0]['deprecated'])
    ok(r[0]['op and average'] and
       r[0]['op and average'].startswith('ValueError'),
       'allreduce(average=True, op=Sum) raises ValueError: %s'
       % r[0]['op and average'])
    ok(all(x['in place is'] and x['in place'] == want['Sum'] for x in r),
       'allreduce_ sums in place and returns its tensor')
    ok(all(x['view'] == [[0.0, 3.0, 6.0], [9.0, 12.0, 15.0]] for x in r),
       'allreduce_ of a transposed (non-contiguous) view writes the sum '
       'into it: %s' % r[1]['view'])
    ok(all(x['int64 sum'] == [3, 10] and x['int64 average'] == [1] for x in r),
       'allreduce of int64: Sum [1 0] + [2 10] = %s; Average of 1 and 2 '
       'truncated, as Horovod scales: %s' % (r[0]['int64 sum'],
                                             r[0]['int64 average']))
    ok(all(x['float16'] == [1.5, 4.5] for x in r),
       'allreduce of float16: %s' % r[0]['float16'])
    a = torch.tensor([1.0, 1.0078125, 3.0]).bfloat16()
    bf = ((a.float() + (a * 2).float()) / 2).bfloat16().float().tolist()
    ok(all(x['bfloat16'] == bf and x['bfloat16 dtype'] == 'torch.bfloat16'
           for x in r), 'allreduce_ of bfloat16: the float32 average, rounded '
       'once, stays bfloat16: %s (want %s)' % (r[0]['bfloat16'], bf))
    for k in ('adasum', 'adasum_'):
        e = [x[k] or '' for x in r]
        ok(all(v.startswith('ValueError') and 'Adasum' in v and 'Average' in v
               for v in e), '%s(op=Adasum) raises ValueError naming Adasum '
           'and Average: %s' % (k.replace('adasum', 'allreduce'), e[0]))


def check_gathers(res):
    g = [x['gathers'] for x in res]
    want = [[0, 1], [2, 3], [100, 101], [102, 103], [104, 105]]
    for k in ('int64', 'float32', 'bfloat16'):
        ok(all(x[k] == want for x in g), 'allgather of %s, 2 rows on rank 0 '
           'and 3 on rank 1: rank 0\'s then rank 1\'s (%s)' % (k, g[0][k]))
    ok(g[0]['bfloat16 dtype'] == 'torch.bfloat16',
       'allgather of bfloat16 gives bfloat16')
    ok(all(x['one empty'] == [[2.0] * 3] * 2 for x in g),
       'allgather: rank 0 gives no rows, rank 1 two')
    e = [x['mismatch'] or '' for x in g]
    ok(all(v.startswith('ValueError') for v in e) and
       all(x['after mismatch'] == [0, 1] for x in g),
       'allgather of (1, 2) and (1, 3): ValueError on both ranks, and the '
       'next call works: %s' % e[0])
    want = [{'rank': 0, 'data': [0, 1]}, {'rank': 1, 'data': [0, 1, 2]}]
    ok(all(x['objects'] == want for x in g),
       'allgather_object: both ranks\' dicts, in rank order')


def check_broadcasts(res):
    b = [x['broadcasts'] for x in res]
    ok(all(x['from 1'] == [2.0] * 3 for x in b) and b[0]['kept'] == [1.0] * 3,
       'broadcast from rank 1: its tensor on both ranks, a new one '
       '(rank 0\'s own left as it was)')
    ok(all(x['in place is'] and x['in place'] == [1.0] * 3 for x in b),
       'broadcast_ from rank 0: in place, returning its tensor')
    bf = (torch.tensor([1.0078125, -2.5]).bfloat16() * 2).float().tolist()
    ok(all(x['bfloat16'] == bf for x in b), 'broadcast_ of bfloat16: %s'
       % b[0]['bfloat16'])
    want = {'rank': 1, 'nested': [1, 'xx'], 'tensor': [1.0, 1.0]}
    ok(all(x['object'] == want for x in b) and
       all(x['object default root'] == ['from', 0] for x in b),
       'broadcast_object: rank 1\'s dict (a tensor inside) on both ranks; '
       'root_rank 0 by default')
    ok(all((x['bad root'] or '').startswith('ValueError') for x in b),
       'broadcast to root_rank 2 of 2 ranks raises ValueError: %s'
       % b[0]['bad root'])


def check_optimizers(res):
    o = [x['optimizers'] for x in res]
    for name in ('SGD', 'Adam', 'distributed'):
        before = [x[name + ' before'] for x in o]
        differed = (before[0]['groups'][0]['lr'] !=
                    before[1]['groups'][0]['lr'])
        ok(differed and before[0]['state'] and o[0][name] == o[1][name] ==
           before[0] and o[1][name]['groups'][0]['lr'] == 0.05,
           'broadcast_optimizer_state, %s: rank 1 (lr %s, %d parameters '
           'with state) ends with rank 0\'s lr %s and state (%d)' % (
               name, before[1]['groups'][0]['lr'], len(before[1]['state']),
               o[1][name]['groups'][0]['lr'], len(o[1][name]['state'])))
    ok(o[1]['Adam']['groups'][0]['betas'] == [0.8, 0.99],
       'broadcast_optimizer_state, Adam: rank 1 takes rank 0\'s betas too')
    ok(o[0]['distributed params'] == o[1]['distributed params'],
       'broadcast_optimizer_state, DistributedOptimizer: after it and '
       'broadcast_parameters, one more step leaves the ranks equal')


def cases():
    before_init()
    here = os.path.abspath(__file__)
    res, _ = tt.run_ranks(lambda out: [here, '--worker', 'cases', out])
    errors = sorted({'%s: %s' % (k, v['error']) for r in res if r
                     for k, v in r.items() if 'error' in v})
    ok(all(res) and not errors, 'every case ran on both ranks: %s' % errors)
    if not all(res) or errors:
        return
    check_reductions(res)
    check_gathers(res)
    check_broadcasts(res)
    check_optimizers(res)
    p = [x['places'] for x in res]
    ok(p == [{'local_rank': r, 'local_size': 2, 'cross_rank': 0,
              'cross_size': 1} for r in (0, 1)],
       'without LOCAL_RANK: both ranks on this host, local ranks 0 and 1 '
       'of 2, one cross group each: %s' % p)


def torchrun():
    here = os.path.abspath(__file__)
    res, _ = tt.run_ranks(lambda out: [here, '--worker', 'torchrun', out])
    p = [x and x.get('places') for x in res]
    ok(p == [{'local_rank': 0, 'local_size': 1, 'cross_rank': r,
              'cross_size': 2} for r in (0, 1)],
       'LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 on each rank (one rank a host): '
       'local rank 0 of 1, cross ranks 0 and 1 of 2: %s' % p)
    lost = (res[0] or {}).get('lost') or {}
    e = lost.get('error') or ''
    ok(e.startswith('PeerError') and lost['took'] < TIMEOUT + 5,
       'rank 1 gone: rank 0\'s allreduce raises PeerError after %.1f s '
       '(timeout %d s): %s' % (lost.get('took', -1), TIMEOUT, e[:120]))


if __name__ == '__main__':
    sys.exit(tt.run_script([cases, torchrun], worker))
