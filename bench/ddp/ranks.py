#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Is p3.torch as fast as DDP at N ranks on this host?  Launches
bench/ddp/rank.py under torchrun once per mode and round, alternating
DDP and p3 (each launch trains one mode from a fresh process: a mode
that ran second in a process ran up to 15% faster, whichever it was, as
the first mode's memory stayed mapped), and prints one table: each
arm's seconds a step under DDP and p3, p3's speed against DDP (DDP's
time over p3's, the rounds paired; above 1 is faster), each's fraction
of the overlap bound (the compute-only step of every rank at once,
launched first), and rank 0's CPU a step by thread.  --tree NAME=DIR
adds an arm that runs p3 from another checkout (its rank.py, Python
package and built libp3), in the same alternation, for a before/after:

    git worktree add /tmp/before REV && make -C /tmp/before/userlib
    bench/ddp/ranks.py [--ranks 16] [--rounds 6] [--tree before=/tmp/before]
        [--out build/bench-ddp/ranks.jsonl]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, '..', '..')


def launch(a, mode, tag, tree, out):
    """One torchrun of tree's rank.py: rank 0's JSON line."""
    env = dict(os.environ)
    env['P3_LIB'] = os.path.join(tree, 'build', 'userlib', 'libp3.so')
    env.pop('PYTHONPATH', None)     # rank.py finds its tree's package
    with tempfile.NamedTemporaryFile('r', suffix='.jsonl') as f:
        cmd = ['torchrun', '--nproc_per_node', str(a.ranks),
               '--redirects', '2', '--tee', '2',
               os.path.join(tree, 'bench', 'ddp', 'rank.py'), '--mode', mode,
               '--model', a.model, '--batch', str(a.batch),
               '--steps', str(a.steps), '--warmup', str(a.warmup),
               '--tag', tag, '--out', f.name]
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode:
            sys.exit('bench/ddp/ranks: %s failed (exit %d):\n%s'
                     % (' '.join(cmd), r.returncode, r.stdout[-3000:]))
        row = json.loads(f.readline())
    with open(out, 'a') as o:
        o.write(json.dumps(row) + '\n')
    return row


def cpu(row):
    """Rank 0's CPU a step, its main thread's, and libp3's engine's, ms."""
    t = row['thread_cpu_s']
    return (1000 * sum(row['cpu_s']) / len(row['cpu_s']),
            1000 * t.get('MainThread', 0), 1000 * t.get('p3-engine', 0))


def table(rows, arms, bound):
    """bound: the compute-only step of every rank at once (loopback is
    not the bottleneck: the overlap bound is the compute)."""
    ddp = [r for r in rows if r['mode'] == 'ddp']
    lines = ['| p3 from | bound s/step | DDP s/step | p3 s/step | '
             'p3 ÷ DDP (rounds) | of the bound: DDP / p3 | '
             'rank 0 CPU ms/step, DDP → p3 (main; engine) |',
             '|---|---:|---:|---:|---:|---:|---|']
    for arm in arms:
        p3 = [r for r in rows if r['mode'] == 'p3' and r['tag'] == arm]
        pair = [d['mean_s'] / p['mean_s'] for d, p in zip(ddp, p3)]
        m = lambda rs, f: sum(f(r) for r in rs) / len(rs)
        lines.append(
            '| %s | %.3f | %.3f | %.3f | %.2f× (%.2f–%.2f) | %.2f / %.2f | '
            '%.1f → %.1f (%.1f → %.1f; %.1f) |' % (
                arm, bound, m(ddp, lambda r: r['mean_s']),
                m(p3, lambda r: r['mean_s']),
                m(ddp, lambda r: r['mean_s']) / m(p3, lambda r: r['mean_s']),
                min(pair), max(pair),
                bound / m(ddp, lambda r: r['mean_s']),
                bound / m(p3, lambda r: r['mean_s']),
                m(ddp, lambda r: cpu(r)[0]), m(p3, lambda r: cpu(r)[0]),
                m(ddp, lambda r: cpu(r)[1]), m(p3, lambda r: cpu(r)[1]),
                m(p3, lambda r: cpu(r)[2])))
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--ranks', type=int, default=16)
    ap.add_argument('--rounds', type=int, default=6)
    ap.add_argument('--model', default='squeezenet1_1')
    ap.add_argument('--batch', type=int, default=2)
    ap.add_argument('--steps', type=int, default=24)
    ap.add_argument('--warmup', type=int, default=12)
    ap.add_argument('--tree', action='append', default=[], metavar='NAME=DIR',
                    help='an arm running p3 from this checkout as well')
    ap.add_argument('--out', default=os.path.join(ROOT, 'build', 'bench-ddp',
                                                  'ranks.jsonl'))
    a = ap.parse_args()
    arms = {'this': os.path.abspath(ROOT)}
    for spec in a.tree:
        name, sep, path = spec.partition('=')
        if not sep or not os.path.isfile(os.path.join(
                path, 'build', 'userlib', 'libp3.so')):
            ap.error('--tree takes NAME=DIR, a checkout with libp3 built, '
                     'not %r' % spec)
        arms[name] = os.path.abspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    # Every rank computing alone, at once: the overlap bound.
    bound = launch(a, 'compute', 'compute', arms['this'], a.out)['mean_s']
    print('bench/ddp/ranks: compute only: %.3f s a step' % bound, flush=True)
    rows, n = [], a.rounds * (1 + len(arms))
    for k in range(a.rounds):
        # Each round in another order: no arm always follows the same one.
        order = ([('ddp', 'ddp', arms['this'])]
                 + [('p3', t, p) for t, p in arms.items()])
        order = order[k % len(order):] + order[:k % len(order)]
        for mode, tag, tree in order:
            row = launch(a, mode, tag, tree, a.out)
            rows.append(row)
            print('bench/ddp/ranks: %d/%d %s %s: %.3f s a step'
                  % (len(rows), n, mode, tag, row['mean_s']), flush=True)
    print(table(rows, list(arms), bound))


if __name__ == '__main__':
    main()
