#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""bench/ddp: is p3.torch faster than DDP on my model?

Two hosts, network namespaces p3ddp0 and p3ddp1 joined by a veth pair,
one rank in each; every model is trained with DDP (Gloo), p3.torch fifo
and p3.torch p3, side by side in one run, at each link point:

  balanced  each egress shaped (tbf over pfifo, or --qdisc p3: sch_p3
            pacing at the rate) so that one step's exchange takes about
            one compute-only step (both ranks computing at once, with no
            exchange): each rank sends the model's bytes a step, DDP's
            ring and p3.torch's owners alike
  fast      the veth unshaped: compute-bound

On this host natively (sch_p3 cannot load here, so the order is libp3's
alone); inside the VM (selftests/vm-run -- bench/ddp/run.py --qdisc p3)
the kernel's order is measured.  The modes run in rounds, in alternating
order, so that drift shows as spread rather than as a ratio.  --upload
adds an untagged iperf3 upload from host 0 for the whole run; --python
runs the ranks under another torch (pip's 2.13 in a venv).
--same-malloc gives every mode the allocator setting p3.torch makes
(glibc's mmap threshold raised, p3/torch/_malloc.py), which DDP gets only
partly, from its bucket rebuild: the ratio is then the exchange's alone.

Writes build/bench-ddp/results.jsonl (one line per run) and prints the
table of speeds against DDP's (bench/ddp/report.py makes it again, and
the plot, from the file).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from models import MODELS, model_bytes  # noqa: E402
import report  # noqa: E402

NS = ('p3ddp0', 'p3ddp1')
ADDR = ('10.78.0.1', '10.78.0.2')
MODES = ('ddp', 'fifo', 'p3')
# --same-malloc: the threshold p3.torch raises glibc's to (and the trim
# threshold that goes with it), fixed from the start for every mode.
SAME_MALLOC = {'MALLOC_MMAP_THRESHOLD_': str(32 << 20),
               'MALLOC_TRIM_THRESHOLD_': str(64 << 20)}


def sh(*argv, check=True, **kw):
    return subprocess.run(argv, check=check, text=True, **kw)


def topology():
    for ns in NS:
        sh('ip', 'netns', 'del', ns, check=False, stderr=subprocess.DEVNULL)
        sh('ip', 'netns', 'add', ns)
    sh('ip', 'link', 'add', 'eth0', 'netns', NS[0], 'type', 'veth', 'peer',
       'name', 'eth0', 'netns', NS[1])
    for i, ns in enumerate(NS):
        sh('ip', '-n', ns, 'addr', 'add', ADDR[i] + '/24', 'dev', 'eth0')
        sh('ip', '-n', ns, 'link', 'set', 'eth0', 'up')
        sh('ip', '-n', ns, 'link', 'set', 'lo', 'up')


def shape(mbit, qdisc):
    """Each host's egress at mbit (None: unshaped)."""
    for ns in NS:
        sh('tc', '-n', ns, 'qdisc', 'del', 'dev', 'eth0', 'root', check=False,
           stderr=subprocess.DEVNULL)
        if mbit is None:
            continue
        kbit = '%dkbit' % round(mbit * 1000)
        if qdisc == 'p3':
            sh('tc', '-n', ns, 'qdisc', 'add', 'dev', 'eth0', 'root', 'handle',
               '1:', 'p3', 'rate', kbit)
        else:
            sh('tc', '-n', ns, 'qdisc', 'add', 'dev', 'eth0', 'root', 'handle',
               '1:', 'tbf', 'rate', kbit, 'burst', '64kb', 'latency', '1s')
            sh('tc', '-n', ns, 'qdisc', 'add', 'dev', 'eth0', 'parent', '1:1',
               'pfifo', 'limit', '1000')


def run_ranks(mode, model, args, out, tag, port, wrap=()):
    """Both ranks of one run (compute: each alone, at once, so that the
    two share the CPU as in training), each under the command @wrap
    (e.g. p3ctl run --level 0 --); returns when both are done, raising if
    either failed."""
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE='2',
                   MASTER_ADDR=ADDR[0], MASTER_PORT=str(port),
                   GLOO_SOCKET_IFNAME='eth0', OMP_NUM_THREADS='1',
                   PYTHONPATH=os.path.join(TOP, 'userlib', 'python'),
                   P3_LIB=os.path.join(TOP, 'build', 'userlib', 'libp3.so'),
                   **(SAME_MALLOC if args.same_malloc else {}))
        procs.append(subprocess.Popen(
            ['ip', 'netns', 'exec', NS[r], *wrap, args.python,
             os.path.join(HERE, 'rank.py'), '--mode', mode, '--model', model,
             '--batch', str(args.batch), '--steps', str(args.steps),
             '--warmup', str(args.warmup), '--out', out, '--tag', tag]
            + (['--sample'] if args.sample else [])
            + (['--yappi', args.yappi] if args.yappi else [])
            + (['--link-trace', os.path.abspath(args.link_trace)]
               if args.link_trace else [])
            + (['--slice', str(args.slice)] if args.slice else []),
            env=env))
    rcs = [p.wait(timeout=1800) for p in procs]
    if any(rcs):
        raise RuntimeError('%s %s: ranks exited %s' % (mode, model, rcs))


def last_line(path):
    with open(path) as f:
        return json.loads(f.readlines()[-1])


def upload(on, wrap=()):
    """A bulk upload from host 0 to host 1 (iperf3, port 5201), untagged or
    under the command @wrap; None if not @on."""
    if not on:
        return None
    srv = subprocess.Popen(['ip', 'netns', 'exec', NS[1], 'iperf3', '-s', '-1'],
                           stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    cli = subprocess.Popen(['ip', 'netns', 'exec', NS[0], *wrap, 'iperf3', '-c',
                            ADDR[1], '-t', '86400'], stdout=subprocess.DEVNULL)
    return srv, cli


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--models', default='resnet18,vgg11,squeezenet1_1')
    ap.add_argument('--points', default='balanced,fast',
                    help='balanced, fast, or a rate in Mbit/s (e.g. 2000)')
    ap.add_argument('--qdisc', choices=('tbf', 'p3'), default='tbf')
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--steps', type=int, default=10)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--upload', action='store_true')
    ap.add_argument('--same-malloc', action='store_true',
                    help="every rank, DDP's too, starts with glibc's mmap "
                    "threshold where p3.torch raises it, so that the ratio "
                    "is the exchange's alone (p3/torch/_malloc.py)")
    ap.add_argument('--slice', type=int, default=0,
                    help="p3.torch's slice_bytes (default: p3.DEFAULT_SLICE)")
    ap.add_argument('--yappi', default=None, metavar='FILE',
                    help="rank 0's CPU profile by thread and function "
                    '(rank.py --yappi; python3-yappi)')
    ap.add_argument('--sample', action='store_true',
                    help='profile each rank\'s Python threads (rank.py)')
    ap.add_argument('--link-trace', default=None, metavar='FILE',
                    help="host 0's link over every timed step (rank.py "
                    '--link-trace; plot: linkplot.py FILE)')
    ap.add_argument('--python', default='/usr/bin/python3',
                    help="the ranks' interpreter: Debian's (torch 1.13) by "
                    "default; build/venv-torch2/bin/python for pip's torch "
                    "2.13 (scripts/torch-venv.sh makes it)")
    ap.add_argument('--out', default=os.path.join(TOP, 'build', 'bench-ddp',
                                                  'results.jsonl'))
    ap.add_argument('--append', action='store_true',
                    help='add to --out rather than start it afresh')
    ap.add_argument('--png', default=None, help='the plot (report.py)')
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    if not args.append:
        for path in filter(None, (args.out, args.link_trace)):
            open(path, 'w').close()
    where = 'vm' if args.qdisc == 'p3' else 'host'
    topology()
    load = upload(args.upload)
    port = 29600
    t_begin = time.monotonic()
    try:
        for model in args.models.split(','):
            nbytes = model_bytes(MODELS[model]())
            shape(None, args.qdisc)
            port += 1
            run_ranks('compute', model, args, args.out, 'compute', port)
            compute = last_line(args.out)['mean_s']
            for point in args.points.split(','):
                mbit = (None if point == 'fast' else
                        nbytes * 8 / compute / 1e6 if point == 'balanced'
                        else float(point))
                shape(mbit, args.qdisc)
                for rnd in range(args.rounds):
                    order = MODES if rnd % 2 == 0 else MODES[::-1]
                    for mode in order:
                        port += 1
                        tag = json.dumps({'point': point, 'mbit': mbit,
                                          'round': rnd, 'where': where,
                                          'qdisc': args.qdisc if mbit else None,
                                          'upload': args.upload,
                                          'same_malloc': args.same_malloc,
                                          'slice': args.slice or None,
                                          'compute_s': compute})
                        run_ranks(mode, model, args, args.out, tag, port)
                        r = last_line(args.out)
                        print('bench/ddp: %6.0f s  %-13s %-8s %-4s round %d: '
                              '%.3f s/step' % (time.monotonic() - t_begin,
                                               model, point, mode, rnd,
                                               r['mean_s']),
                              file=sys.stderr, flush=True)
    finally:
        if load:
            for p in load:
                p.kill()
        for ns in NS:
            sh('ip', 'netns', 'del', ns, check=False)
    print(report.table(report.load(args.out)))
    if args.png:
        report.plot(report.load(args.out), args.png)


if __name__ == '__main__':
    main()
