#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""The table (markdown) and plot of bench/ddp's results.jsonl: each
model and link point, DDP's seconds a step and each p3.torch schedule's
speed against it (DDP's time over its own: above 1 is faster), the
rounds' range in brackets, and whether its parameters ended bitwise
equal to DDP's.

    bench/ddp/report.py [--png FILE] [--threads] build/bench-ddp/results.jsonl
"""
import argparse
import json
from collections import defaultdict

MODES = ('fifo', 'p3')


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def groups(rows):
    """{(model, point, upload, same_malloc, torch): {'mbit', 'compute_s',
    mode: [rows]}}"""
    out = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r['tag'] == 'compute':
            continue
        tag = json.loads(r['tag'])
        same = tag.get('same_malloc', False)
        # Runs before the record named its torch were all Debian's 1.13.
        version = r.get('torch', '1.13')
        g = out[r['model'], tag['point'], tag['upload'], same, version]
        g['torch'] = version
        g['mbit'], g['compute_s'] = tag['mbit'], tag['compute_s']
        g['where'], g['upload'] = tag['where'], tag['upload']
        g['same_malloc'] = same
        g[r['mode']].append(r)
    return out


def extras(g):
    """What else the runs of group g had: the upload beside them, the
    allocator's threshold set alike for every mode."""
    return ((', upload' if g['upload'] else '')
            + (', same malloc' if g['same_malloc'] else '')
            + ', torch ' + '.'.join(g['torch'].split('.')[:2]))


def mean(xs):
    return sum(xs) / len(xs)


def speeds(g, mode):
    """Each round's DDP time over mode's, paired by round."""
    return [d['mean_s'] / m['mean_s'] for d, m in zip(g['ddp'], g[mode])]


def bound(g):
    """The overlap bound of a step: the longer of the compute-only step
    and the bytes each rank sends a step (the model's, DDP's ring and
    p3.torch's owners alike) at the link's rate."""
    wire = (g['ddp'][0]['bytes'] * 8 / (g['mbit'] * 1e6) if g['mbit']
            else 0.0)
    return max(g['compute_s'], wire)


def table(rows):
    """Speeds against DDP, each mode's fraction of the overlap bound
    (bound ÷ its step: 1 is at the bound), and p3's CPU a step (rank 0's
    process, all threads) against DDP's."""
    lines = ['| model | link | compute s/step | bound s/step | DDP s/step | '
             + ' | '.join('%s ÷ DDP (rounds)' % m for m in MODES)
             + ' | of the bound: DDP / ' + ' / '.join(MODES)
             + ' | CPU a step, p3 ÷ DDP | params = DDP\'s |',
             '|---|---|---:|---:|---:|' + '---:|' * len(MODES)
             + '---:|---:|---|']
    for (model, point, *_), g in groups(rows).items():
        if not g['ddp']:
            continue
        link = ('%.0f Mbit/s' % g['mbit'] if g['mbit'] else 'unshaped veth')
        cells = []
        for m in MODES:
            s = speeds(g, m)
            cells.append('%.2f× (%.2f–%.2f)' % (
                mean([d['mean_s'] for d in g['ddp']]) /
                mean([r['mean_s'] for r in g[m]]), min(s), max(s))
                if s else '–')
        equal = all(r['digest'] == g['ddp'][0]['digest']
                    for m in ('ddp',) + MODES for r in g[m])
        b = bound(g)
        frac = ' / '.join('%.2f' % (b / mean([r['mean_s'] for r in g[m]]))
                          if g[m] else '–' for m in ('ddp',) + MODES)
        cpu = ('%.2f×' % (mean([mean(r['cpu_s']) for r in g['p3']]) /
                          mean([mean(r['cpu_s']) for r in g['ddp']]))
               if g['p3'] else '–')
        lines.append('| %s | %s (%s)%s | %.3f | %.3f | %.3f | %s | %s | %s | %s |' % (
            model, link, point, extras(g), g['compute_s'], b,
            mean([d['mean_s'] for d in g['ddp']]),
            ' | '.join(cells), frac, cpu, 'bitwise' if equal else 'no'))
    return '\n'.join(lines)


def threads(rows):
    """Rank 0's CPU seconds a timed step, by thread, the rounds' mean: one
    line per model, point and mode (the five busiest threads)."""
    lines = ['| model | link | mode | step s | CPU s | CPU by thread (s) |',
             '|---|---|---|---:|---:|---|']
    for (model, point, *_), g in groups(rows).items():
        for m in ('ddp',) + MODES:
            runs = g[m]
            if not runs:
                continue
            by = defaultdict(float)
            for r in runs:
                for name, v in r['thread_cpu_s'].items():
                    by[name] += v / len(runs)
            busiest = sorted(by.items(), key=lambda kv: -kv[1])[:5]
            lines.append('| %s | %s%s | %s | %.3f | %.3f | %s |' % (
                model, point, extras(g), m, mean([r['mean_s'] for r in runs]),
                mean([mean(r['cpu_s']) for r in runs]),
                ', '.join('%s %.3f' % kv for kv in busiest)))
    return '\n'.join(lines)


def plot(rows, png):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    gs = [(k, g) for k, g in groups(rows).items() if g['ddp']]
    fig, ax = plt.subplots(figsize=(1.6 * len(gs) + 2, 3.6))
    width = 0.8 / len(MODES)
    for j, m in enumerate(MODES):
        vals = [mean([d['mean_s'] for d in g['ddp']]) /
                mean([r['mean_s'] for r in g[m]]) for _, g in gs]
        ax.bar([i + (j - (len(MODES) - 1) / 2) * width for i in range(len(gs))],
               vals, width, label='p3.torch ' + m)
    ax.axhline(1.0, color='k', lw=0.8, ls='--', label='DDP')
    ax.set_xticks(range(len(gs)))
    ax.set_xticklabels(['%s\n%s%s' % (k[0], '%.0f Mbit/s' % g['mbit']
                                      if g['mbit'] else 'unshaped',
                                      extras(g).replace(', ', '\n'))
                        for k, g in gs], fontsize=8)
    ax.set_ylabel('speed ÷ DDP\'s')
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('results')
    ap.add_argument('--png')
    ap.add_argument('--threads', action='store_true',
                    help='also where each mode\'s CPU went, by thread')
    a = ap.parse_args()
    rows = load(a.results)
    print(table(rows))
    if a.threads:
        print()
        print(threads(rows))
    if a.png:
        plot(rows, a.png)


if __name__ == '__main__':
    main()
