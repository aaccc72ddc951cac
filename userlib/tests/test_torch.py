#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""p3.torch over loopback, two ranks as real processes (TAP):

- exactness: fifo and p3 end with bitwise-identical parameters on every
  rank, within 1e-5 (relative) of one process training on the union of
  the ranks' batches;
- failure: a rank that dies mid-step makes the other raise PeerError
  within its timeout, its parameters those of the last whole step;
- a silent rank (stopped, its connections open) makes the other raise
  StepTimeout after the timeout;
- accuracy: examples/torch_digits.py trains to over 90% test accuracy;
- memory: once a DistributedOptimizer exists, a 16 MiB block comes
  from the heap (glibc's mmap threshold raised, as DDP's bucket rebuild
  does), where a plain process maps it afresh.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

STEPS = 4
BATCH = 32          # per rank
WORLD = 2
LR, MOMENTUM = 0.05, 0.9
SLICE = 4096        # small slices: many per tensor, owners on both ranks


def make_model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10))


def data():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return x, torch.tensor(d.target)


def batch(x, y, step, rank):
    lo = (step * WORLD + rank) * BATCH
    return x[lo:lo + BATCH], y[lo:lo + BATCH]


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# ------------------------------------------------------------- a worker

def worker(schedule, out, die_at, how):
    # Loopback has no p3 qdisc: schedule p3 must say so, once.
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter('always')
        result = train(schedule, die_at, how)
    result['qdisc_warnings'] = sum('p3.torch: no network interface' in str(w.message)
                                   and w.category is RuntimeWarning for w in seen)
    with open(out, 'w') as f:
        json.dump(result, f)
    import p3.torch as p3t
    p3t.shutdown()


def train(schedule, die_at, how):
    import p3.torch as p3t
    torch.set_num_threads(1)
    rank = int(os.environ['RANK'])
    p3t.init(timeout=10)
    model = make_model()
    if rank:                        # differ, so that the broadcast matters
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    p3t.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = data()
    # The observed order (here the registration order: a Sequential).
    order = p3t.forward_order(model, x[:1]) if schedule == 'p3' else None
    opt = p3t.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM), model,
        schedule=schedule, slice_bytes=SLICE, timeout=10, forward_order=order)
    result = {'steps': [], 'from_heap': block_from_heap()}
    try:
        for step in range(STEPS):
            bx, by = batch(x, y, step, rank)
            opt.zero_grad()
            loss = F.cross_entropy(model(bx), by)
            if step == die_at and rank == 1:
                # Gone mid-step, without a goodbye.  The pause lets its
                # progress thread hand step 1's results to the kernel (it
                # does within microseconds), so that rank 0's state at the
                # failure is known exactly.
                time.sleep(0.5)
                if how == 'hang':       # alive, connected, silent
                    os.kill(os.getpid(), signal.SIGSTOP)
                os._exit(3)
            loss.backward()
            opt.step()
            if schedule == 'fifo' or step == STEPS - 1:
                opt.synchronize()
            result['steps'].append(flat(model).tolist())
        opt.synchronize()
        result['final'] = flat(model).tolist()
    except Exception as e:
        result['error'] = type(e).__name__
        result['message'] = str(e)
        result['t_error'] = time.monotonic()
        result['params_at_error'] = flat(model).tolist()
    return result


def block_from_heap():
    """Whether a 16 MiB block malloc()ed and freed by this thread comes
    from the heap (glibc's mmap threshold raised) rather than a mapping
    of its own, which is unmapped when freed."""
    from p3.torch._malloc import glibc
    libc = glibc()
    block = libc.malloc(16 << 20)
    with open('/proc/self/maps') as f:
        heap = [line.split()[0] for line in f if line.rstrip().endswith('[heap]')]
    libc.free(block)
    lo, hi = (int(x, 16) for x in heap[0].split('-')) if heap else (0, 0)
    return lo <= block < hi


# --------------------------------------------------------------- driver

def option_worker(kw, out, steps, tweak=None):
    """One rank of a job whose DistributedOptimizer takes kw (the small
    CNN, SLICE-byte slices, steps cycling over 12 batches so that the loss
    can fall): writes its losses, final parameters and stats(), or the
    error, as JSON to out.  tweak(opt, rank), if given, runs before the
    first step; a dict it returns is called with opt at the end, and what
    that returns joins the result."""
    import p3.torch as p3t
    torch.set_num_threads(1)
    warnings.simplefilter('ignore', RuntimeWarning)     # no qdisc: main()'s
    rank = int(os.environ['RANK'])
    p3t.init(timeout=10)
    model = make_model()
    p3t.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = data()
    opt = p3t.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
        model, slice_bytes=SLICE, timeout=10, **kw)
    extra = tweak(opt, rank) if tweak else None
    result = {'losses': []}
    try:
        for step in range(steps):
            bx, by = batch(x, y, step % 12, rank)
            opt.zero_grad()
            loss = F.cross_entropy(model(bx), by)
            loss.backward()
            opt.step()
            result['losses'].append(loss.item())
        opt.synchronize()
        result['final'] = flat(model).tolist()
        if extra:
            result.update(extra(opt))
    except Exception as e:
        result['error'] = type(e).__name__
        result['message'] = str(e)
    result['stats'] = opt.stats()
    with open(out, 'w') as f:
        json.dump(result, f)
    p3t.shutdown()


def refuses(cases, label):
    """Each (kwargs, start) of cases: DistributedOptimizer(**kwargs)
    raises a ValueError whose message begins 'p3.torch: ' + start, before
    p3.torch.init() is needed."""
    import p3.torch as p3t
    model = make_model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for kw, word in cases:
        try:
            p3t.DistributedOptimizer(sgd, model, **kw)
            got = 'nothing raised'
        except ValueError as e:
            got = str(e)
        except Exception as e:          # NotInitializedError: too late
            got = '%s: %s' % (type(e).__name__, e)
        ok(got.startswith('p3.torch: ' + word),
           '%s: %s raises ValueError naming %s: %s' % (label, kw, word, got))


def run_script(parts, worker):
    """A test script's entry: with --worker KWARGS OUT, one rank
    (worker(KWARGS, OUT)); else each of parts in turn, then the TAP
    plan.  Returns the exit status."""
    if len(sys.argv) > 1 and sys.argv[1] == '--worker':
        worker(sys.argv[2], sys.argv[3])
        return 0
    for part in parts:
        part()
    print('1..%d' % n)
    return 1 if failed else 0


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def run_job(schedule, die_at=-1, how='die'):
    """Two ranks; returns each rank's result and the job's start time."""
    return run_ranks(lambda out: [__file__, '--worker', schedule, out,
                                  str(die_at), how], how)


def run_ranks(argv, how='die'):
    """WORLD ranks of sys.executable argv(out), each writing its result
    as JSON to out; returns the results (None where there is none) and
    the job's start time.  how='hang': rank 1 is killed once rank 0 is
    done."""
    port = free_port()
    tmp = tempfile.mkdtemp(prefix='p3t-')
    procs, outs = [], []
    t0 = time.monotonic()
    for r in range(WORLD):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(WORLD),
                   MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port),
                   OMP_NUM_THREADS='1')
        out = os.path.join(tmp, 'rank%d.json' % r)
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable] + argv(out), env=env))
    procs[0].wait(timeout=300)
    if how == 'hang':
        procs[1].kill()
    procs[1].wait(timeout=300)
    res = []
    for out in outs:
        try:
            with open(out) as f:
                res.append(json.load(f))
        except OSError:
            res.append(None)
    return res, t0


def single_process():
    """One process, the union of the ranks' batches, plain SGD."""
    torch.set_num_threads(1)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    x, y = data()
    steps = []
    for step in range(STEPS):
        parts = [batch(x, y, step, r) for r in range(WORLD)]
        opt.zero_grad()
        # The mean of the ranks' mean losses: the gradient they average.
        loss = sum(F.cross_entropy(model(bx), by) for bx, by in parts) / WORLD
        loss.backward()
        opt.step()
        steps.append(flat(model).tolist())
    return steps


n = 0
failed = 0


# Every line names the torch it ran on: make check runs each suite under
# Debian's torch and under pip's.
TORCH = 'torch ' + '.'.join(torch.__version__.split('.')[:2])


def ok(cond, what):
    global n, failed
    n += 1
    failed += not cond
    print('%sok %d - %s: %s' % ('' if cond else 'not ', n, TORCH, what),
          flush=True)


def launcher(args):
    """The command a user launches a job with on this torch: its own
    torchrun from 2.0 on (the venv's, beside this interpreter), and
    p3torchrun on 1.13, whose torchrun Debian 12's Python breaks; both
    run by this interpreter."""
    here = os.path.dirname(os.path.abspath(__file__))
    if int(torch.__version__.split('.')[0]) >= 2:
        return [os.path.join(os.path.dirname(sys.executable), 'torchrun')] + args
    return [sys.executable, os.path.join(here, '..', 'cli', 'p3torchrun')] + args


def rel_err(a, b):
    a, b = torch.tensor(a), torch.tensor(b)
    return float((a - b).abs().max() / b.abs().max())


def main():
    ref = single_process()
    plain = from_heap_in_plain_process()
    jobs = {}
    for schedule in ('fifo', 'p3'):
        res, _ = run_job(schedule)
        jobs[schedule] = res
        good = all(r is not None and 'final' in r for r in res)
        ok(good, '%s: both ranks trained %d steps%s' % (
            schedule, STEPS, '' if good else ': %s' % [
                r and r.get('message') for r in res]))
        if not good:
            continue
        ok(res[0]['final'] == res[1]['final'],
           '%s: the ranks end with bitwise-identical parameters' % schedule)
        want = 1 if schedule == 'p3' else 0
        ok(all(r['qdisc_warnings'] == want for r in res),
           '%s, no p3 qdisc on the host: %s warning(s) that the kernel is not '
           'enforcing the order (want %d per rank)'
           % (schedule, [r['qdisc_warnings'] for r in res], want))
        err = rel_err(res[0]['final'], ref[-1])
        ok(err < 1e-5, '%s: within 1e-5 of one process on the union of the '
           'batches (max relative error %.2g)' % (schedule, err))
        step_memory_kept(schedule, [r['from_heap'] for r in res], plain)
    if all(r and 'final' in r for s in jobs for r in jobs[s]):
        ok(jobs['fifo'][0]['final'] == jobs['p3'][0]['final'],
           'fifo and p3 end with bitwise-identical parameters')

    for schedule in ('fifo', 'p3'):
        res, t0 = run_job(schedule, die_at=2)
        r0 = res[0] or {}
        took = r0.get('t_error', t0 + 1e9) - t0
        ok(r0.get('error') == 'PeerError' and took < 60,
           '%s: rank 1 dies in step 2; rank 0 raises %s after %.1f s from '
           'the start: %s' % (schedule, r0.get('error'), took,
                              r0.get('message', '')[:120]))
        at_err = r0.get('params_at_error')
        # fifo synchronizes every step: its step-1 parameters are whole.
        ok(at_err is not None and at_err == jobs['fifo'][0]['steps'][1],
           '%s: rank 0 kept the parameters of step 1 (nothing partial applied)'
           % schedule)
    res, t0 = run_job('p3', die_at=2, how='hang')
    r0 = res[0] or {}
    took = r0.get('t_error', t0 + 1e9) - t0
    ok(r0.get('error') == 'StepTimeout' and took < 60,
       'p3: rank 1 hangs (SIGSTOP) in step 2; rank 0 raises %s after %.1f s '
       '(timeout 10 s): %s' % (r0.get('error'), took, r0.get('message', '')))
    launcher_mends_std()
    surface()
    forward_order_levels()
    tail_first_layout()
    message_units()
    ranks_agree_on_plan()
    levels_above_untagged()
    accuracy()
    print('1..%d' % n)
    return 1 if failed else 0


def from_heap_in_plain_process():
    """block_from_heap() in a process without a DistributedOptimizer and
    without the environment's malloc settings: 'False' or 'True'."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('MALLOC_')}
    return subprocess.run(
        [sys.executable, __file__, '--from-heap'], env=env, check=True,
        capture_output=True, text=True).stdout.strip()


def step_memory_kept(schedule, from_heap, plain):
    """A step's large temporaries stay in the process under p3.torch: a
    16 MiB block comes from the heap, where a plain process (the control,
    without p3.torch) maps it afresh and unmaps it when freed."""
    ok(all(from_heap) and plain == 'False',
       '%s: a 16 MiB block comes from the heap with p3.torch (ranks: %s), '
       'from a mapping of its own in a plain process (%s: the control)'
       % (schedule, from_heap, plain))


def surface():
    """Every name of p3.torch's __all__, and the ones bench/torch uses
    (ORDER), import as they did before the package was split."""
    import p3.torch as p3t
    names = list(p3t.__all__) + ['ORDER']
    missing = [k for k in names if not hasattr(p3t, k)]
    ok(not missing and p3t.ORDER == 'tail-first',
       'p3.torch provides %d names (missing: %s)' % (len(names), missing))


class HeadFirst(torch.nn.Module):
    """Registers the layer it runs last first, as many real models do."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(100, 1000)
        self.body = torch.nn.Linear(10, 100)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def forward_order_levels():
    import p3.torch as p3t
    from p3.torch._order import forward_ranks
    from p3.torch._layout import Layout
    m = HeadFirst()
    names = {p: n for n, p in m.named_parameters()}
    order = [names[p] for p in p3t.forward_order(m, torch.zeros(2, 10))]
    ok(order == ['body.weight', 'body.bias', 'head.weight', 'head.bias'],
       'forward_order: the parameters in the order the forward pass runs '
       'them: %s' % order)
    params = list(m.parameters())
    sizes = [p.numel() * p.element_size() for p in params]
    for fwd, first in ((None, 'head.'), (forward_ranks(params, p3t.forward_order(
            m, torch.zeros(1, 10))), 'body.')):
        # P3's order: the default would move head.bias (1% of the bytes,
        # after the largest tensor) to level 0 as well
        lay = Layout(sizes, 2, 'p3', 8, SLICE, 4, fwd=fwd, order='forward')
        level0 = {names[params[s.tensor]] for s in lay.slices if s.level == 0}
        ok(level0 and all(n.startswith(first) for n in level0),
           'layout %s: level 0 carries %s' % (
               'by forward_order' if fwd else 'by registration', sorted(level0)))


def tail_first_layout():
    """The planner's order: by default the tensors after the largest go
    first, on level 0, when they hold at most a quarter of the bytes
    (make_model's last Linear and the bias before it: 2%)."""
    from p3.torch._layout import Layout
    sizes = [p.numel() * 4 for p in make_model().parameters()]
    for order, want in ((None, [3, 4, 5]), ('forward', [])):
        kw = {'order': order} if order else {}
        lay = Layout(sizes, 2, 'p3', 4, SLICE, 4, **kw)
        prio0 = min(s.prio for s in lay.slices if s.tensor == 0)
        moved = sorted({s.tensor for s in lay.slices if s.prio < prio0})
        ok(moved == want and all(s.level == 0 for s in lay.slices
                                 if s.tensor in want),
           'layout, order %s: tensors %s ahead of the first layer, on '
           'level 0 (want %s)' % (order or 'default', moved, want))
    refuses([(dict(order='tail'), 'order'),
             (dict(schedule='fifo', order='forward'), 'order')],
            'order')


def message_units():
    """A dense exchange sends a message as one unit: a run of its slices
    adjacent in the flat buffer and of one dtype.  A float64 tensor
    between float32 ones starts a unit of its own, 8-byte aligned; with
    a per-slice wire form (Slim-DP, bounded loss) every slice is one."""
    import numpy as np
    from p3.torch._layout import Layout, Units
    f4, f8 = np.dtype(np.float32), np.dtype(np.float64)
    dtypes = [f4, f4, f4, f8, f4, f4]
    elems = [300000, 7, 5, 3, 11, 200000]
    sizes = [n * d.itemsize for n, d in zip(elems, dtypes)]
    # One level: the four small tensors merge into one message.
    lay = Layout(sizes, 2, 'p3', 1, SLICE, 4, order='forward')
    un = Units(lay, dtypes, whole_messages=True)
    spans = sorted((u.start, u.end) for u in un.units)
    covered = sum(u.end - u.start for u in un.units)
    ok(covered == sum(sizes)
       and all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
       and all(un.tensor_off[t] % d.itemsize == 0
               for t, d in enumerate(dtypes))
       and un.nbytes >= sum(sizes),
       'units: every byte of the model in exactly one unit, each tensor '
       'aligned to its element size (%d units over %d bytes)'
       % (un.n, un.nbytes))
    one_msg = all(len({lay.slices[s].msg for s in u.slices}) == 1
                  and len({dtypes[lay.slices[s].tensor] for s in u.slices}) == 1
                  for u in un.units)
    merged = [u for u in un.units if len(u.slices) > 1]
    ok(one_msg and merged and un.n < lay.ns
       and any(u.dtype == f8 and len(u.slices) == 1 for u in un.units),
       'units: %d slices travel as %d units, each of one message and one '
       'dtype; the float64 tensor alone' % (lay.ns, un.n))
    per_slice = Units(lay, dtypes, whole_messages=False)
    ok(per_slice.n == lay.ns and all(u.slices == [s] for s, u in
                                     enumerate(per_slice.units)),
       'units: with a per-slice wire form, every slice is a unit (%d)'
       % per_slice.n)


def plan_worker(kws, out):
    """One rank of a job whose ranks pass different arguments (kws, a
    JSON list: rank r's DistributedOptimizer keywords): writes what the
    constructor raised, and how long it took."""
    import p3.torch as p3t
    warnings.simplefilter('ignore', RuntimeWarning)     # no qdisc here
    rank = int(os.environ['RANK'])
    p3t.init(timeout=10)
    model = make_model()
    kw = dict(dict(slice_bytes=SLICE, timeout=10), **json.loads(kws)[rank])
    t0 = time.monotonic()
    try:
        p3t.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                 model, **kw)
        result = {'error': None, 'message': ''}
    except Exception as e:
        result = {'error': type(e).__name__, 'message': str(e)}
    result['took'] = time.monotonic() - t0
    with open(out, 'w') as f:
        json.dump(result, f)
    p3t.shutdown()


def ranks_agree_on_plan():
    """Ranks that would slice or order the gradients differently refuse,
    all of them, before any gradient moves: nothing else tells them."""
    for kws in (({}, {'order': 'forward'}), ({}, {'slice_bytes': 2 * SLICE}),
                ({'sparsify': 'slimdp'}, {'sparsify': 'slimdp', 'keep': 0.2})):
        res, _ = run_ranks(lambda out: [__file__, '--plan-worker',
                                        json.dumps(kws), out])
        got = [r and (r['error'], r['took']) for r in res]
        ok(all(r and r['error'] == 'ValueError' and r['took'] < 10 and
               'different exchange' in r['message'] for r in res),
           'ranks passing %s and %s: each raises ValueError at once: %s %s'
           % (kws[0], kws[1], got, (res[0] or {}).get('message', '')[:100]))


def levels_above_untagged():
    """bands=None: the job's levels stay above the band the local p3
    qdisc gives untagged traffic, and the ranks agree on the fewest."""
    import torch.distributed as dist
    from p3.torch._setup import agreed_levels, free_levels
    for default, lossy, want in ((None, False, 8), (7, False, 7),
                                 (3, False, 3), (0, False, 8),
                                 (16, False, 8), (16, True, 8),
                                 (15, True, 7), (7, True, 3)):
        found = None if default is None else (
            'eth0', {'options': {'bands': default + 1, 'default': default}})
        got = free_levels(found, lossy)
        ok(got == want, 'levels: %s leaves %d levels to the job%s (want '
           '%d)' % ('no p3 qdisc' if default is None else
                    'a p3 qdisc whose default band is %d' % default, got,
                    ' with its datagrams' if lossy else '', want))
    store = dist.HashStore()
    store.set('lv/1', '5')          # rank 1's host leaves 5 levels
    got = agreed_levels(store, 'lv', 0, 2, 8)
    ok(got == 5, 'levels: rank 0 (8 free) and rank 1 (5 free) agree '
       'on %d (want 5)' % got)


def digits(*args):
    """examples/torch_digits.py args, two ranks launched by launcher()
    with torchrun's defaults: (exit status, epochs, final test accuracy
    in %, rank 0's output)."""
    here = os.path.dirname(os.path.abspath(__file__))
    example = os.path.join(here, '..', '..', 'examples', 'torch_digits.py')
    env = dict(os.environ, PYTHONWARNINGS='ignore::RuntimeWarning')
    p = subprocess.run(launcher(['--nproc_per_node', str(WORLD),
                                 '--master_port', str(free_port()), example]
                                + list(args)),
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    last = [line for line in p.stdout.splitlines() if line.startswith('epoch')]
    acc = float(last[-1].split('accuracy ')[1].split('%')[0]) if last else 0.0
    if p.returncode:
        print('# ' + '\n# '.join(p.stderr.splitlines()[-5:]))
    return p.returncode, len(last), acc, p.stdout


def accuracy():
    """The README's command (on 1.13 through p3torchrun: Debian 12's own
    torchrun cannot start)."""
    rc, epochs, acc, _ = digits()
    ok(rc == 0 and acc > 90,
       '%s --nproc_per_node %d examples/torch_digits.py: %d epochs, '
       'test accuracy %.1f%% (needs > 90%%)'
       % (os.path.basename(launcher([])[-1]), WORLD, epochs, acc))


def launcher_mends_std():
    """The fault p3torchrun mends is Debian's: say whether it is there."""
    from p3.torch import run
    from torch.distributed.elastic.multiprocessing import api
    broken = api.Std.from_str('0') is not api.Std.NONE
    run.fix_std_parsing()
    ok(api.Std.from_str('0') is api.Std.NONE and api.Std.from_str('3') is api.Std.ALL
       and api.Std.from_str('0:3,1:0') == {0: api.Std.ALL, 1: api.Std.NONE},
       "p3torchrun parses --redirects/--tee 0, 3 and maps (torch's own parser %s)"
       % ('loses NONE and ALL' if broken else 'is sound here'))


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == '--worker':
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) > 1 and sys.argv[1] == '--from-heap':
        print(block_from_heap())
    elif len(sys.argv) > 1 and sys.argv[1] == '--plan-worker':
        plan_worker(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
