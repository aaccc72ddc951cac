#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Where each step leaves the link idle, from a bench/torch run with
--timeline (host side).

  bench/torch/timeline.py [--png OUT.png] RESULTS.jsonl

Per mode (and upload setting): each timed step split into its phases as
rank 0 saw them (forward, backward, then step() and whatever else ran
before the next forward), the mean length of each, and how busy rank 0's
egress link was in it: the bytes eth0 transmitted against what the
shaped rate allows in that time.  The link carries one step's exchange
(and, with the upload, the upload), so the busy share of a step is how
close the schedule came to the link's bound; the idle time says in which
phase it was lost.  Then, per step, how long after the backward's start
the first gradient reached p3.torch, the first push went to libp3, and
the link carried it.  --png plots the link's rate over two steps per
mode.
"""
import argparse
import bisect
import json
import statistics

PHASES = ('forward', 'backward', 'step() and the rest')
# A phase shorter than two of the worker's 20-ms samples has no busy share
# worth printing: it is interpolation.
SHORTEST = 0.04


def sent_between(link, t0, t1):
    """Bytes transmitted between t0 and t1, interpolated between samples."""
    def at(t):
        i = bisect.bisect_left(link, t, key=lambda sample: sample[0])
        if i == 0:
            return link[0][1]
        if i == len(link):
            return link[-1][1]
        (ta, a), (tb, b) = link[i - 1], link[i]
        return a + (b - a) * (t - ta) / (tb - ta)
    return at(t1) - at(t0)


def first_timed(r):
    """The worker times the intervals from step 'warmup' on: phases has
    warmup + iters entries, steps iters - 1."""
    return len(r['timeline']['phases']) - len(r['steps']) - 1


def steps(r):
    """Per timed step: [(phase, seconds, link busy share)], in order."""
    tl = r['timeline']
    ph, link = tl['phases'], tl['link']
    cap = r['mbit'] * 1e6 / 8               # bytes per second at the rate
    out = []
    for i in range(first_timed(r), len(ph) - 1):
        # zero_grad (from the step's start to f0) is left out: microseconds.
        _, f0, f1, b1, _ = ph[i]
        bounds = (f0, f1, b1, ph[i + 1][0])
        out.append([(PHASES[k], bounds[k + 1] - bounds[k],
                     sent_between(link, bounds[k], bounds[k + 1]) /
                     (cap * (bounds[k + 1] - bounds[k])))
                    for k in range(3)])
    return out


def table(runs):
    lines = ['| mode | upload | step (s) | link busy | ' +
             ' | '.join('%s: s, busy, idle s' % p for p in PHASES) + ' |',
             '|---|---|---:|---:|' + '---|' * len(PHASES)]
    for r in runs:
        st = steps(r)
        if not st:
            continue
        step = statistics.fmean(sum(d for _, d, _ in s) for s in st)
        busy = statistics.fmean(sum(d * u for _, d, u in s) for s in st) / step
        cells = []
        for k in range(len(PHASES)):
            d = statistics.fmean(s[k][1] for s in st)
            if d < SHORTEST:
                cells.append('%.2f, –, –' % d)
                continue
            u = statistics.fmean(s[k][1] * s[k][2] for s in st) / d
            cells.append('%.2f, %.0f%%, %.2f' % (d, 100 * u, d * max(0.0, 1 - u)))
        lines.append('| %s | %s | %.2f | %.0f%% | %s |' % (
            r['mode'], 'yes' if r['bulk'] else 'no', step, 100 * busy,
            ' | '.join(cells)))
    return '\n'.join(lines)


def first_after(times, t):
    later = [x for x in times if x >= t]
    return min(later) - t if later else float('nan')


def backward_starts(runs):
    """Per mode and timed step: seconds from the backward's start to the
    first gradient handed to p3.torch, the first push handed to libp3,
    and the first 20 ms in which the link carried a 1,500-byte packet
    or more."""
    lines = ['| mode | upload | per timed step: first gradient / push / '
             'link egress after the backward starts (s) |', '|---|---|---|']
    for r in runs:
        tl = r['timeline']
        ev = tl.get('events')
        if not ev:
            continue
        grads = [t for t, k in ev if k == 'gradient']
        pushes = [t for t, k in ev if k == 'push']
        sent = [ta for (ta, a), (_, b) in zip(tl['link'], tl['link'][1:])
                if b - a >= 1500]
        cells = []
        for i in range(first_timed(r), len(tl['phases']) - 1):
            f1 = tl['phases'][i][2]
            cells.append('%.2f / %.2f / %.2f' % tuple(
                first_after(x, f1) for x in (grads, pushes, sent)))
        lines.append('| %s | %s | %s |' % (r['mode'], 'yes' if r['bulk']
                                           else 'no', '; '.join(cells)))
    return '\n'.join(lines) if len(lines) > 2 else ''


def plot(runs, png):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.7 * len(runs)),
                             sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], runs):
        ph, link = r['timeline']['phases'], r['timeline']['link']
        first = first_timed(r)
        t_from, t_to = ph[first][0], ph[min(first + 2, len(ph) - 1)][0]
        xs, ys = [], []
        for (ta, a), (tb, b) in zip(link, link[1:]):
            if t_from <= ta <= t_to:
                xs.append(ta - t_from)
                ys.append((b - a) * 8 / (tb - ta) / 1e6)
        ax.plot(xs, ys, lw=0.8)
        for _, f0, f1, b1, _ in ph[first:first + 2]:
            ax.axvspan(f0 - t_from, f1 - t_from, color='tab:green', alpha=0.15)
            ax.axvspan(f1 - t_from, b1 - t_from, color='tab:orange', alpha=0.15)
        ax.axhline(r['mbit'], ls='--', c='grey', lw=0.8)
        ax.set_ylabel('Mbit/s', fontsize=8)
        ax.set_title('%s%s: rank 0 egress (green: forward, orange: backward)'
                     % (r['mode'], ' + upload' if r['bulk'] else ''), fontsize=8)
    axes[-1, 0].set_xlabel('seconds from the start of a timed step')
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('results')
    ap.add_argument('--png')
    args = ap.parse_args()
    with open(args.results) as f:
        runs = [r for r in map(json.loads, f) if r.get('timeline')]
    if not runs:
        raise SystemExit('%s: no run recorded with --timeline' % args.results)
    print(table(runs))
    starts = backward_starts(runs)
    if starts:
        print('\n' + starts)
    if args.png:
        plot(runs, args.png)


if __name__ == '__main__':
    main()
