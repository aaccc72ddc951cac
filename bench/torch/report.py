#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Table and plot from bench/torch's JSON lines (host side).

  bench/torch/report.py [--png OUT.png] RESULTS.jsonl

Per mode, with and without the upload: the median step time, its speedup
over fifo (same upload setting), p3kernel against p3user, and the median
share of each forward pass that overlapped the previous step's exchange.
"""
import argparse
import json
import statistics

MODES = ('fifo', 'p3user', 'p3kernel')
LABEL = {'fifo': 'fifo (WFBP)', 'p3user': 'p3, user space only',
         'p3kernel': 'p3 + sch_p3', 'compute': 'compute alone'}


def load(path):
    runs = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            runs[(r['mode'], r['bulk'])] = r
    return runs


def median(xs):
    return statistics.median(xs) if xs else float('nan')


def table(runs):
    any_run = next(iter(runs.values()))
    lines = ['%d ranks x batch %d, VGG-shaped model of %.1f MB (%.0f%% in '
             'convolutions), %d Mbit/s links' % (
                 2, any_run['batch'], any_run['bytes'] / 1e6,
                 100 * any_run['conv_share'], any_run['mbit']), '',
             '| mode | upload | step (s) | speedup over fifo | forward overlapped |',
             '|---|---|---|---|---|']
    if ('compute', 0) in runs:
        lines.append('| %s | no | %.2f | | |' % (
            LABEL['compute'], median(runs[('compute', 0)]['steps'])))
    for bulk in (0, 1):
        base = runs.get(('fifo', bulk))
        for m in MODES:
            r = runs.get((m, bulk))
            if not r:
                continue
            t = median(r['steps'])
            sp = median(base['steps']) / t if base else float('nan')
            lines.append('| %s | %s | %.2f | %.2fx | %.0f%% |' % (
                LABEL[m], 'yes' if bulk else 'no', t, sp,
                100 * median(r['fwd_overlap'])))
    for bulk in (0, 1):
        k, u = runs.get(('p3kernel', bulk)), runs.get(('p3user', bulk))
        if k and u:
            lines.append('\np3 + sch_p3 against p3 in user space only, %s upload: '
                         '%.2fx' % ('with' if bulk else 'without',
                                    median(u['steps']) / median(k['steps'])))
    return '\n'.join(lines)


def plot(runs, png):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.38
    for j, bulk in enumerate((0, 1)):
        xs, ys, errs = [], [], []
        for i, m in enumerate(MODES):
            r = runs.get((m, bulk))
            if not r:
                continue
            xs.append(i + (j - 0.5) * width)
            ys.append(median(r['steps']))
            errs.append([[ys[-1] - min(r['steps'])], [max(r['steps']) - ys[-1]]])
        ax.bar(xs, ys, width, label='with upload' if bulk else 'alone',
               yerr=[[e[0][0] for e in errs], [e[1][0] for e in errs]],
               capsize=3)
    if ('compute', 0) in runs:
        ax.axhline(median(runs[('compute', 0)]['steps']), ls='--', c='grey',
                   label='compute alone')
    ax.set_xticks(range(len(MODES)))
    ax.set_xticklabels([LABEL[m] for m in MODES])
    ax.set_ylabel('step time (s), median; bars: min-max')
    ax.set_title('Real PyTorch training, 2 ranks, VGG-shaped model (TCG VM)')
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('results')
    ap.add_argument('--png')
    args = ap.parse_args()
    runs = load(args.results)
    print(table(runs))
    if args.png:
        plot(runs, args.png)


if __name__ == '__main__':
    main()
