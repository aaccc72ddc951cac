#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Table and plot from bench/torch's JSON lines (host side).

  bench/torch/report.py [--png OUT.png] RESULTS.jsonl

Per mode, with and without the upload: the mean step time (wall time per
step: the throughput; steps can alternate between fast and slow, where a
median would pick one of the two), its median and range, its speedup over
fifo (same upload setting), p3kernel against p3user, the median share of
each forward pass that overlapped the previous step's exchange, and how
much the upload moved.
With runs under --pressure or of p3dlcp/slimdp, a second table: per
pressure and mode, the median and the slowest step (p99 = max: a run has
far fewer than 100 steps), both against reliable P3 (p3kernel) under the
same pressure, bytes per iteration, and what was lost and asked again;
--png then plots that table.
With runs that recorded them, a third: rank 0's user and system CPU
seconds and wake-ups (voluntary context switches) a step, by thread, and
the whole guest's user, system and softirq time a step; with --sample,
where each thread's CPU went.
"""
import argparse
import json
import statistics

MODES = ('fifo', 'p3user', 'p3kforward', 'p3kernel')
NEW = ('p3kernel', 'p3dlcp', 'slimdp')
PRESSURES = ('none', 'burst', 'loss')
LABEL = {'fifo': 'fifo (WFBP)', 'p3user': 'p3, user space only',
         'p3kernel': 'p3 + sch_p3', 'compute': 'compute alone',
         'p3kforward': "p3 + sch_p3, P3's order",
         'p3dlcp': 'p3 + sch_p3, bounded loss', 'slimdp': 'p3 + sch_p3, Slim-DP'}


def load(path):
    """{(mode, bulk, pressure): run}; lines from before --pressure have
    none."""
    runs = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            r.setdefault('pressure', 'none')
            runs[(r['mode'], r['bulk'], r['pressure'])] = r
    return runs


def median(xs):
    return statistics.median(xs) if xs else float('nan')


def mean(xs):
    return statistics.fmean(xs) if xs else float('nan')


def shaped_run(runs):
    """A run whose links were shaped (with --comm-ratio, compute's were
    not: its steps set the rate)."""
    return next((r for r in runs.values() if r['mbit'] is not None),
                next(iter(runs.values())))


def step_cells(xs):
    """Mean, median and range of step times, as table cells."""
    return '%.2f | %.2f | %.2f–%.2f' % (mean(xs), median(xs), min(xs), max(xs))


def rate_text(r):
    return 'unshaped' if r['mbit'] is None else '%.1f Mbit/s' % r['mbit']


def table(runs):
    any_run = shaped_run(runs)
    lines = ['%d ranks x batch %d, VGG-shaped model of %.1f MB (%.0f%% in '
             'convolutions%s), %s links' % (
                 2, any_run['batch'], any_run['bytes'] / 1e6,
                 100 * any_run['conv_share'],
                 ', fc7 %d wide' % any_run['fc7'] if 'fc7' in any_run else '',
                 rate_text(any_run)), '',
             '| mode | upload | step, mean (s) | median (s) | range (s) | '
             'speedup over fifo | forward overlapped | upload moved (MB) |',
             '|---|---|---:|---:|---|---:|---:|---:|']
    if ('compute', 0, 'none') in runs:
        lines.append('| %s | no | %s | | | |' % (
            LABEL['compute'], step_cells(runs[('compute', 0, 'none')]['steps'])))
    for bulk in (0, 1):
        base = runs.get(('fifo', bulk, 'none'))
        for m in MODES:
            r = runs.get((m, bulk, 'none'))
            if not r:
                continue
            t = mean(r['steps'])
            sp = mean(base['steps']) / t if base else float('nan')
            lines.append('| %s | %s | %s | %.2fx | %.0f%% | %s |' % (
                LABEL[m], 'yes' if bulk else 'no', step_cells(r['steps']), sp,
                100 * median(r['fwd_overlap']),
                '%.0f' % (r['bulk_bytes'] / 1e6) if bulk else ''))
    for bulk in (0, 1):
        k = runs.get(('p3kernel', bulk, 'none'))
        for other, what in (('p3user', 'p3 in user space only'),
                            ('p3kforward', "P3's order")):
            o = runs.get((other, bulk, 'none'))
            if k and o:
                lines.append('\np3 + sch_p3 (order %s) against %s, %s upload: '
                             '%.3fx (means)' % (
                                 k.get('order') or 'forward', what,
                                 'with' if bulk else 'without',
                                 mean(o['steps']) / mean(k['steps'])))
    return '\n'.join(lines)


def counters(r):
    """Both ranks' counters, summed, and bytes sent per iteration and rank."""
    c = {'bytes_lost': 0, 'rerequests': 0, 'drops_deadline': 0,
         'netem_loss': 0, 'per_iter': 0.0, 'pushed': 0}
    for rk in r['ranks']:
        st = rk['stats']
        c['per_iter'] += st['bytes_sent'] / st['iterations'] / len(r['ranks'])
        c['pushed'] += st['bytes_pushed']
        c['bytes_lost'] += st['bytes_lost']
        c['rerequests'] += st['rerequests']
        q = {d['kind']: d for d in rk['qdisc'] or ()}
        c['drops_deadline'] += q.get('p3', {}).get('drops_deadline', 0)
        if 'netem' in q:    # netem's drops include what its child dropped
            c['netem_loss'] += q['netem']['drops'] - sum(
                d['drops'] for k, d in q.items() if k != 'netem')
    return c


def pressure_table(runs):
    any_run = shaped_run(runs)
    d = next((r for r in runs.values() if r['mode'] == 'p3dlcp'), None)
    lines = ['%s; %s%s' % (
        rate_text(any_run), 'bounded loss: loss_tolerance %g, deadline %g s, '
        'qdisc deadline %g s; ' % (d['loss_tolerance'], d['deadline'],
                                   d['qdeadline']) if d else '',
        'untagged traffic in a band of its own' if any_run.get('spare_band')
        else 'untagged traffic in the least urgent band'), '',
             '| pressure | mode | step median (s) | step max = p99 (s) | '
             'median / P3 | max / P3 | bytes / iteration | of P3 | '
             'bytes_lost | rerequests | drops_deadline | netem drops |',
             '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
    for p in PRESSURES:
        base = runs.get(('p3kernel', 0, p))
        for m in NEW:
            r = runs.get((m, 0, p))
            if not r:
                continue
            c = counters(r)
            rel = ((median(r['steps']) / median(base['steps']),
                    max(r['steps']) / max(base['steps']),
                    c['per_iter'] / counters(base)['per_iter'])
                   if base else (float('nan'),) * 3)
            lines.append('| %s | %s | %.2f | %.2f | %.2fx | %.2fx | {:,.0f} | '
                         '%.1f%% | %d | %d | %d | %d |'.format(c['per_iter']) % (
                             p, LABEL[m], median(r['steps']), max(r['steps']),
                             rel[0], rel[1], 100 * rel[2],
                             c['bytes_lost'], c['rerequests'],
                             c['drops_deadline'], c['netem_loss']))
    alone = ['%s %.2f s' % (p, median(runs[('compute', 0, p)]['steps']))
             for p in PRESSURES if ('compute', 0, p) in runs]
    if alone:   # what the pressure costs the CPU, without any exchange
        lines.append('\ncompute alone (median step): ' + ', '.join(alone))
    return '\n'.join(lines)


def run_label(mode, bulk):
    return LABEL[mode] + (' + upload' if bulk else '')


def thread_table(runs):
    """Rank 0's user and system CPU and wake-ups a timed step, by thread,
    per run, and the guest's (both ranks, the kernel's softirqs apart);
    threads that used under 5 ms and woke under once a step are summed
    into 'the rest'."""
    lines = ['| mode | pressure | thread | user (s) | system (s) | '
             'wake-ups | softirq (s) |',
             '|---|---|---|---:|---:|---:|---:|']
    for (m, bulk, p), r in runs.items():
        threads = r['ranks'][0].get('threads')
        guest = r['ranks'][0].get('guest')
        if not threads:
            continue
        label = run_label(m, bulk)
        rest = [0.0, 0.0, 0.0]
        for name, u in sorted(threads.items(), key=lambda t: -t[1][0] - t[1][1]):
            if u[0] + u[1] < 0.005 and u[2] < 1:
                rest = [a + b for a, b in zip(rest, u)]
                continue
            lines.append('| %s | %s | %s | %.3f | %.3f | %.0f | |' % (label, p, name, *u))
        lines.append('| %s | %s | the rest | %.3f | %.3f | %.0f | |' % (label, p, *rest))
        total = [sum(u[i] for u in threads.values()) for i in range(3)]
        lines.append('| %s | %s | **rank 0** | **%.3f** | **%.3f** | **%.0f** | |'
                     % (label, p, *total))
        if guest:
            lines.append('| %s | %s | **the guest** | %.3f | %.3f | | %.3f |'
                         % (label, p, *guest))
    return '\n'.join(lines) if len(lines) > 2 else ''


def profile_text(runs):
    """Rank 0's --sample profile: per run and thread, where its CPU went
    a step (bench/torch/sampler.py)."""
    out = []
    for (m, bulk, p), r in runs.items():
        prof = r['ranks'][0].get('profile')
        for name, places in sorted((prof or {}).items()):
            total = sum(t for _, t in places)
            out.append('\n%s, %s, %s: %.3f s a step in the top %d places'
                       % (run_label(m, bulk), p, name, total, len(places)))
            out += ['  %6.3f  %s' % (t, where) for where, t in places if t >= 0.005]
    return '\n'.join(out)


def new_figure(size):
    """A figure and its axes, drawn without a display."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt.subplots(figsize=size)


def save(fig, ax, png):
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def plot_pressure(runs, png):
    fig, ax = new_figure((7, 3.6))
    width = 0.27
    for j, m in enumerate(NEW):
        xs, ys, lo, hi = [], [], [], []
        for i, p in enumerate(PRESSURES):
            r = runs.get((m, 0, p))
            if not r:
                continue
            xs.append(i + (j - 1) * width)
            ys.append(median(r['steps']))
            lo.append(ys[-1] - min(r['steps']))
            hi.append(max(r['steps']) - ys[-1])
        if xs:
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=LABEL[m])
    if ('compute', 0, 'none') in runs:
        ax.axhline(median(runs[('compute', 0, 'none')]['steps']), ls='--',
                   c='grey', label='compute alone')
    ax.set_xticks(range(len(PRESSURES)))
    ax.set_xticklabels(['no pressure', 'microbursts', 'netem loss'])
    ax.set_ylabel('step time (s), median; bars: min-max')
    ax.set_title('Bounded loss and Slim-DP under pressure, 2 ranks (TCG VM)')
    ax.set_ylim(top=1.3 * ax.get_ylim()[1])     # room for the legend
    save(fig, ax, png)


def plot(runs, png):
    fig, ax = new_figure((7, 3.6))
    width = 0.38
    modes = [m for m in MODES if (m, 0, 'none') in runs or (m, 1, 'none') in runs]
    for j, bulk in enumerate((0, 1)):
        xs, ys, errs = [], [], []
        for i, m in enumerate(modes):
            r = runs.get((m, bulk, 'none'))
            if not r:
                continue
            xs.append(i + (j - 0.5) * width)
            ys.append(mean(r['steps']))
            errs.append([[ys[-1] - min(r['steps'])], [max(r['steps']) - ys[-1]]])
        ax.bar(xs, ys, width, label='with upload' if bulk else 'alone',
               yerr=[[e[0][0] for e in errs], [e[1][0] for e in errs]],
               capsize=3)
    if ('compute', 0, 'none') in runs:
        ax.axhline(mean(runs[('compute', 0, 'none')]['steps']), ls='--', c='grey',
                   label='compute alone')
    ax.set_xticks(range(len(modes)))
    ax.set_xticklabels([LABEL[m] for m in modes])
    ax.set_ylabel('step time (s), mean; bars: min-max')
    ax.set_title('Real PyTorch training, 2 ranks, VGG-shaped model (TCG VM)')
    save(fig, ax, png)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('results')
    ap.add_argument('--png')
    args = ap.parse_args()
    runs = load(args.results)
    pressured = any(k[0] in NEW[1:] or k[2] != 'none' for k in runs)
    if not pressured or any(k[0] in ('fifo', 'p3user') for k in runs):
        print(table(runs) + '\n')
    if pressured:
        print(pressure_table(runs))
    threads = thread_table(runs)
    if threads:
        print('\nrank 0, by thread\n\n' + threads)
    profile = profile_text(runs)
    if profile:
        print('\nrank 0, where the threads\' CPU went' + profile)
    if args.png:
        (plot_pressure if pressured else plot)(runs, args.png)


if __name__ == '__main__':
    main()
