#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""One rank of bench/ddp: a model of models.py (torchvision's, as
examples/nets.py writes it) trained with DDP (Gloo) or p3.torch
(schedule fifo or p3), or alone (compute: no exchange, one
process), on fixed random data; rank 0 writes one JSON line to --out:
every timed step's seconds, the CPU seconds of the process per step, and
a digest of the final parameters (equal digests: bitwise-equal
training).

--mode takes a list too (ddp,fifo,p3): the modes train one after the
other in the same processes, from the same weights, on the same data and
dropout draws, one line each; p3.torch's init() then joins the job once
and DDP runs on the Gloo group it starts.  --each DIR: every rank also
writes DIR/rankN.json (per mode: its thread count at each timed step,
the most sockets it held open at one, p3.torch's levels,
start-up seconds, digest, or the error it raised and when) and rank 0
DIR/params-MODE.pt (its final parameters, flat).  --die-at STEP makes
rank --die-rank leave in the middle of that step (os._exit, after the
forward pass), for the time the others take to raise.  The 16-rank run
of docs/torch.md:

    torchrun --nproc_per_node 16 --redirects 2 --tee 2 bench/ddp/rank.py \\
        --mode ddp,fifo,p3 --model squeezenet1_1 --batch 2 --steps 6 \\
        --warmup 2 --out build/bench-ddp/ranks16.jsonl
"""
import argparse
import hashlib
import json
import os
import resource
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

MODES = ('compute', 'ddp', 'fifo', 'p3')


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


def start_yappi():
    """--yappi: yappi profiling every thread's CPU (python3-yappi)."""
    try:
        import yappi
    except ImportError:
        sys.exit('bench/ddp: --yappi needs python3-yappi (apt install '
                 'python3-yappi)')
    yappi.set_clock_type('cpu')
    yappi.start()
    return yappi


def write_yappi(yappi, path, mode):
    """The timed steps' functions, by thread, by their own CPU time:
    calls into C (libp3's, numpy's) count in their Python caller's."""
    yappi.stop()
    with open(path, 'a') as f:
        for th in yappi.get_thread_stats():
            st = yappi.get_func_stats(filter={'ctx_id': th.id})
            st.sort('tsub')
            f.write('==== %s, thread %s %d\n' % (mode, th.name, th.id))
            st.print_all(out=f, columns={0: ('name', 60), 1: ('ncall', 8),
                                         2: ('tsub', 8), 3: ('ttot', 8),
                                         4: ('tavg', 8)})
    yappi.clear_stats()


def thread_count():
    return len(os.listdir('/proc/self/task'))


def socket_count():
    """The sockets this process holds open (Gloo's, libp3's, the store's)."""
    n = 0
    for fd in os.listdir('/proc/self/fd'):
        try:
            n += os.readlink('/proc/self/fd/' + fd).startswith('socket:')
        except OSError:
            pass            # closed meanwhile (the listing's own fd)
    return n


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def modes_arg(s):
    modes = s.split(',')
    if not modes or any(m not in MODES for m in modes) or (
            'compute' in modes and len(modes) > 1):
        raise argparse.ArgumentTypeError(
            'a mode of %s, or a list of ddp, fifo, p3' % ', '.join(MODES))
    return modes


def train(mode, a, xs, ys, rank, rec):
    """One mode's run from the seeded weights; rank 0's JSON line (or
    None where this rank is not rank 0); fills rec (this rank's
    --each record) as it goes."""
    t_setup = time.monotonic()
    torch.manual_seed(1234)
    model = MODELS[a.model]()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    net = model
    if mode == 'ddp':
        net = torch.nn.parallel.DistributedDataParallel(model)
    elif mode in ('fifo', 'p3'):
        import p3.torch as p3t
        p3t.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = p3t.DistributedOptimizer(opt, model, schedule=mode,
                                       slice_bytes=a.slice)
    n = a.warmup + a.steps
    steps, cpu, threads, sockets = [], [], [], []
    sampler = trace = None
    for i in range(n):
        if i == a.warmup:
            if a.link_trace and rank == 0:
                from linktrace import LinkTrace
                trace = LinkTrace(a.link_dev)
            before = thread_cpu()
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            if a.yappi and rank == 0:
                yappi = start_yappi()
            if a.sample:
                sys.path.insert(0, os.path.join(HERE, '..', 'torch'))
                from sampler import Sampler
                sampler = Sampler(['MainThread', 'p3.torch reducer'])
        t0, c0 = time.monotonic(), time.process_time()
        if i == 0:
            rec['setup_s'] = t0 - t_setup
        opt.zero_grad()
        loss = F.cross_entropy(net(xs[i]), ys[i])
        t_fwd = time.monotonic()
        if i == a.die_at and rank == a.die_rank:
            # Gone mid-step, without a goodbye.
            rec['t_death'] = time.time()
            rec['died_at'] = i
            return None
        loss.backward()
        t_bwd = time.monotonic()
        opt.step()
        if trace:
            trace.mark(t0, t_fwd, t_bwd, time.monotonic())
        if i >= a.warmup:
            steps.append(time.monotonic() - t0)
            cpu.append(time.process_time() - c0)
            threads.append(thread_count())
            if a.each:      # its readlink()s would count in the CPU a step
                sockets.append(socket_count())
    after = thread_cpu()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    if trace:
        trace.save(a.link_trace, model=a.model, mode=mode, batch=a.batch,
                   tag=a.tag)
    if a.yappi and rank == 0:
        write_yappi(yappi, a.yappi, mode)
    profile = sampler.close() if sampler else None
    if hasattr(opt, 'synchronize'):
        opt.synchronize()
    rec.update(threads=threads, sockets=max(sockets, default=0),
               step_s=steps, digest=digest(model),
               levels=getattr(opt, 'levels', 0))
    if a.each and rank == 0:
        torch.save(torch.cat([p.detach().reshape(-1)
                              for p in model.parameters()]),
                   os.path.join(a.each, 'params-%s.pt' % mode))
    if hasattr(opt, 'close'):
        opt.close()
    if rank:
        return None
    return {
        'tag': a.tag, 'model': a.model, 'mode': mode,
        'torch': torch.__version__.split('+')[0], 'batch': a.batch, 'bytes': model_bytes(model),
        'step_s': steps, 'cpu_s': cpu,
        'mean_s': sum(steps) / len(steps), 'digest': digest(model),
        # The most threads at a timed step (after a step; p3.torch's
        # close() ends its reducer).
        'threads': max(threads),
        'world': int(os.environ.get('WORLD_SIZE', 1)),
        # CPU seconds a timed step, by thread.
        'thread_cpu_s': {k: (v - before.get(k, 0)) / a.steps
                         for k, v in after.items()
                         if v - before.get(k, 0) > 0},
        # Minor page faults a timed step, the whole process: memory the
        # allocator hands back to the kernel and takes again each step.
        'faults': faults / a.steps,
        'profile': profile and {k: v[:15] for k, v in profile.items()}}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--mode', type=modes_arg, required=True,
                    help='compute, ddp, fifo, p3, or a list of the last '
                    'three (ddp,fifo,p3)')
    ap.add_argument('--model', choices=sorted(MODELS), required=True)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--steps', type=int, default=10)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--out', required=True)
    ap.add_argument('--tag', default='', help='copied into the result')
    ap.add_argument('--slice', type=int, default=None,
                    help="p3.torch's slice_bytes")
    ap.add_argument('--timeout', type=float, default=120,
                    help="p3.torch.init()'s timeout, seconds")
    ap.add_argument('--sample', action='store_true',
                    help='profile the Python threads (bench/torch/sampler.py)')
    ap.add_argument('--yappi', default=None, metavar='FILE',
                    help="rank 0 appends yappi's CPU profile of the timed "
                    'steps, by thread, to FILE')
    ap.add_argument('--link-trace', default=None, metavar='FILE',
                    help="rank 0 appends the link's bytes every ms over "
                    'the timed steps, and their phases, to FILE '
                    '(linktrace.py; plotted by linkplot.py)')
    ap.add_argument('--link-dev', default='eth0',
                    help='the device --link-trace samples (eth0)')
    ap.add_argument('--each', default=None,
                    help='every rank writes DIR/rankN.json, rank 0 '
                    'DIR/params-MODE.pt')
    ap.add_argument('--die-at', type=int, default=-1,
                    help='rank --die-rank leaves mid-way through this step '
                    '(counting warm-up steps from 0)')
    ap.add_argument('--die-rank', type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter('ignore', RuntimeWarning)   # no qdisc: by design
    rank = int(os.environ.get('RANK', 0))
    gen = torch.Generator().manual_seed(100 + rank)
    n = a.warmup + a.steps
    xs = torch.randn(n, a.batch, 3, 32, 32, generator=gen)
    ys = torch.randint(0, 10, (n, a.batch), generator=gen)
    each = {'rank': rank, 'modes': {}}
    t_init = time.monotonic()
    if {'fifo', 'p3'} & set(a.mode):
        import p3.torch as p3t
        p3t.init(timeout=a.timeout)
    elif 'ddp' in a.mode:
        dist.init_process_group('gloo')
    each['init_s'] = time.monotonic() - t_init
    lines = []
    try:
        for mode in a.mode:
            rec = each['modes'][mode] = {}
            try:
                line = train(mode, a, xs, ys, rank, rec)
            except Exception as e:
                rec.update(error=type(e).__name__, message=str(e)[:300],
                           t_error=time.time())
                break
            if 't_death' in rec:
                break
            if line:
                lines.append(line)
    finally:
        if a.each:
            with open(os.path.join(a.each, 'rank%d.json' % rank), 'w') as f:
                json.dump(each, f)
    if any('t_death' in r for r in each['modes'].values()):
        os._exit(3)
    failed = [r['error'] for r in each['modes'].values() if 'error' in r]
    if lines:
        with open(a.out, 'a') as f:
            for line in lines:
                f.write(json.dumps(line) + '\n')
    if {'fifo', 'p3'} & set(a.mode):
        p3t.shutdown()
    elif 'ddp' in a.mode:
        dist.destroy_process_group()
    if failed:
        sys.exit('bench/ddp: rank %d: %s' % (rank, failed[0]))


if __name__ == '__main__':
    main()
