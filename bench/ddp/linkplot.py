#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""What the link does over a step, from run.py --link-trace FILE: for each
model and mode, how host 0's bytes (sent and received) split between the
step's forward pass, backward pass and step(), and how much of the step
the link was busy sending (a millisecond at half the shaped rate or
more); --png draws a few steps of each mode, phases shaded.

  bench/ddp/linkplot.py FILE [--point 2000] [--png docs/img/ddp-link.png]
      [--plot-model resnet18] [--steps 3]
"""
import argparse
import bisect
import json
import sys

PHASES = ('forward', 'backward', 'step()')
BUSY = 0.5          # of the shaped rate (of the fastest ms if unshaped)


def load(path, point):
    runs = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r['mode'] == 'compute':      # its tag is not JSON
                continue
            tag = json.loads(r['tag'] or '{}')
            if tag.get('point') == point:
                r['mbit'] = tag.get('mbit')
                runs.append(r)
    return runs


def at(samples, t, col):
    """Counter col at time t, interpolated between samples."""
    ts = [s[0] for s in samples]
    k = min(max(bisect.bisect_left(ts, t), 1), len(ts) - 1)
    (t0, *a), (t1, *b) = samples[k - 1], samples[k]
    w = 0.0 if t1 == t0 else min(max((t - t0) / (t1 - t0), 0.0), 1.0)
    return a[col] + w * (b[col] - a[col])


def rates(samples, col):
    """(time, Mbit/s) of counter col between consecutive samples."""
    return [((t0 + t1) / 2, (b[col] - a[col]) * 8 / (t1 - t0) / 1e6)
            for (t0, *a), (t1, *b) in zip(samples, samples[1:]) if t1 > t0]


def summary(r):
    """Per step averages: seconds, MB sent and received, each phase's
    share of the bytes (both ways), share of the step busy sending."""
    s, marks = r['samples'], r['marks'][1:-1] or r['marks']
    tx_rates = rates(s, 1)
    line = r['mbit'] or max(v for _, v in tx_rates)
    out = {'step_s': 0.0, 'tx_mb': 0.0, 'rx_mb': 0.0, 'busy': 0.0,
           **{p: 0.0 for p in PHASES}}
    for m in marks:
        total = sum(at(s, m[-1], c) - at(s, m[0], c) for c in (0, 1)) or 1
        for p, (a, b) in zip(PHASES, zip(m, m[1:])):
            out[p] += sum(at(s, b, c) - at(s, a, c) for c in (0, 1)) / total
        out['step_s'] += m[-1] - m[0]
        out['rx_mb'] += (at(s, m[-1], 0) - at(s, m[0], 0)) / 1e6
        out['tx_mb'] += (at(s, m[-1], 1) - at(s, m[0], 1)) / 1e6
        inside = [v for t, v in tx_rates if m[0] <= t < m[-1]]
        out['busy'] += sum(v >= BUSY * line for v in inside) / max(
            len(inside), 1)
    return {k: v / len(marks) for k, v in out.items()}


def table(runs):
    rows = ['| model | mode | s/step | MB sent, received a step | '
            'bytes in forward / backward / step() | busy sending |',
            '|---|---|---:|---:|---:|---:|']
    for r in runs:
        x = summary(r)
        rows.append('| %s | %s | %.3f | %.1f, %.1f | %s | %.0f%% |' % (
            r['model'], r['mode'], x['step_s'], x['tx_mb'], x['rx_mb'],
            ' / '.join('%.0f%%' % (100 * x[p]) for p in PHASES),
            100 * x['busy']))
    return '\n'.join(rows)


def plot(runs, path, steps=3):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.2 * len(runs)),
                             sharex=True, squeeze=False)
    shade = dict(zip(PHASES, ('#dde8f7', '#f7e3d0', '#e3f2df')))
    for ax, r in zip(axes[:, 0], runs):
        marks = r['marks'][1:1 + steps]
        t0 = marks[0][0]
        for m in marks:
            for p, (a, b) in zip(PHASES, zip(m, m[1:])):
                ax.axvspan((a - t0) * 1e3, (b - t0) * 1e3, color=shade[p],
                           lw=0)
        near = [x for x in r['samples'] if t0 <= x[0] <= marks[-1][-1]]
        for col, name in ((1, 'sent'), (0, 'received')):
            pts = rates(near, col)
            ax.plot([(t - t0) * 1e3 for t, _ in pts], [v for _, v in pts],
                    lw=0.8, label=name)
        ax.set_ylabel('Mbit/s')
        ax.set_title('%s, %s' % (r['model'], r['mode']), fontsize=9,
                     loc='left')
    axes[0, 0].legend(loc='upper right', fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in shade.values()]
    axes[-1, 0].legend(handles, PHASES, loc='upper right', fontsize=8)
    axes[-1, 0].set_xlabel('ms from the step\'s start (host 0, %d steps)'
                           % steps)
    fig.tight_layout()
    fig.savefig(path, dpi=75)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('file')
    ap.add_argument('--point', default='2000',
                    help="run.py's link point (2000, balanced, fast)")
    ap.add_argument('--png', default=None)
    ap.add_argument('--plot-model', default=None,
                    help='draw this model alone (default: every model)')
    ap.add_argument('--steps', type=int, default=3,
                    help='steps drawn of each run (3)')
    a = ap.parse_args()
    runs = load(a.file, a.point)
    if not runs:
        sys.exit('linkplot: no run at point %s in %s' % (a.point, a.file))
    # The last round of each model and mode.
    last = {(r['model'], r['mode']): r for r in runs}
    runs = [last[k] for k in sorted(last)]
    print(table(runs))
    if a.png:
        plot([r for r in runs if a.plot_model in (None, r['model'])], a.png,
             a.steps)


if __name__ == '__main__':
    main()
