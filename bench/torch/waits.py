#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""How much of each step the links sat idle while a TCP socket waited
for its retransmission timer, from bench/torch runs with --rto-trace
(host side).

  bench/torch/waits.py [--png OUT.png] RESULTS.jsonl [RESULTS.jsonl ...]

A run with --rto-trace holds every timer wait that ended in a firing
(rtotrace.py: from the timer's last start to its firing, on either host)
and each rank's transmitted bytes every 20 ms (idle_spans() says how
they become the link's idle time).  Per step (rank 0's steps), the
table gives the time some socket was waiting, its timers' firings and
longest wait, each link's idle time and both links' at once, and how
much of each fell while some socket waited.  Then the slowest quarter
of the steps against the rest, and how closely the steps' lengths
follow each column.  --png draws each run's steps, slowest last, as the
links' time: busy, idle while a timer waited, idle otherwise.
"""
import argparse
import statistics

from steps import count, label, load_runs, plot_steps, slowest_quarter


def union(spans):
    """Sorted, disjoint spans covering the same time as spans."""
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def intersect(xs, ys):
    """The time in both lists of sorted, disjoint spans."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append([a, b])
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def length(spans, lo, hi):
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in spans)


def idle_spans(samples, mbit):
    """When a link carried nothing, as sorted, disjoint spans.  The veth
    counts a packet when the pacer hands it over, and a 64 KB GSO packet
    is 52 ms of a 10 Mbit/s link, longer than a sample: so each sample's
    bytes occupy the link, at its rate, from the sample's start or from
    the end of what came before, whichever is later."""
    idle, free_at = [], samples[0][0]
    for (t0, b0), (t1, b1) in zip(samples, samples[1:]):
        if b1 == b0:
            continue
        if t0 > free_at:
            idle.append([free_at, t0])
        free_at = max(free_at, t0) + (b1 - b0) * 8 / (mbit * 1e6)
    if samples[-1][0] > free_at:
        idle.append([free_at, samples[-1][0]])
    return idle


def step_rows(r):
    """[{step, wait_s, firings, longest, idle_s: [link 0, link 1, both],
    idle_wait_s: [the same, while a timer waited]}] for each of rank 0's
    timed steps.  A wait on either host counts for both links: a rank
    whose link is idle may be waiting for the other's data."""
    starts = [s['t'] for s in r['ranks'][0]['snapshots']]
    waits = r['timer_waits']
    waiting = union((w['from'], w['to']) for w in waits)
    idle = [idle_spans(rank['link'], r['mbit']) for rank in r['ranks']]
    idle.append(intersect(*idle))
    idle_waiting = [intersect(spans, waiting) for spans in idle]
    rows = []
    for lo, hi in zip(starts, starts[1:]):
        fired = [w['to'] - w['from'] for w in waits if lo <= w['to'] < hi]
        rows.append({'step': hi - lo, 'wait_s': length(waiting, lo, hi),
                     'firings': len(fired),
                     'longest': max(fired, default=0.0),
                     'idle_s': [length(x, lo, hi) for x in idle],
                     'idle_wait_s': [length(x, lo, hi) for x in idle_waiting]})
    return rows


COLUMNS = (('step', 'length (s)', '%.2f'),
           ('wait_s', 'a socket waiting for its timer (s)', '%.2f'),
           ('firings', 'timer firings', '%d'),
           ('longest', 'longest wait that fired (s)', '%.2f'),
           ('idle_s', 'idle: link 0, link 1, both (s)', '%.2f'),
           ('idle_wait_s', 'of that, while a timer waited (s)', '%.2f'))


def cell(x, form):
    return ', '.join(form % v for v in x) if isinstance(x, list) else form % x


def mean(rows, key):
    xs = [w[key] for w in rows]
    if isinstance(xs[0], list):
        return [statistics.fmean(col) for col in zip(*xs)]
    return statistics.fmean(xs)


def run_text(r, rows):
    waits = r['timer_waits']
    lengths = sorted(w['to'] - w['from'] for w in waits)
    again = sum(w['again'] for w in waits)
    out = ['\n%s, %s pressure: %d steps; %d timer firings, %d of them a '
           'backed-off timer firing again; wait median %.2f s, max %.2f s; '
           'trace events lost: %s' % (
               label(r), r['pressure'], len(rows), len(waits), again,
               statistics.median(lengths) if lengths else 0,
               lengths[-1] if lengths else 0, count(r.get('trace_overruns'))),
           '| step | ' + ' | '.join(name for _, name, _ in COLUMNS) + ' |',
           '|---:|' + '---:|' * len(COLUMNS)]
    for k, w in enumerate(rows):
        out.append('| %d | %s |' % (k + 1, ' | '.join(
            cell(w[key], form) for key, _, form in COLUMNS)))
    return '\n'.join(out)


def correlation(xs, ys):
    try:
        return '%.2f' % statistics.correlation(xs, ys)
    except statistics.StatisticsError:
        return '–'


def summary(runs):
    """Per run: the slowest quarter of the steps against the rest (means
    a step), and Pearson's r of step length with each column."""
    out = ['\n| run | part | steps | ' + ' | '.join(
        name for _, name, _ in COLUMNS) + ' |',
        '|---|---|---:|' + '---:|' * len(COLUMNS)]
    for r, rows in runs:
        for part, name in zip(slowest_quarter(rows),
                              ('slowest quarter', 'the rest')):
            out.append('| %s | %s | %d | %s |' % (
                label(r), name, len(part), ' | '.join(
                    cell(mean(part, key), '%.2f') for key, _, _ in COLUMNS)))
        steps = [w['step'] for w in rows]
        cells = []
        for key, _, _ in COLUMNS[1:]:
            xs = [w[key] for w in rows]
            cells.append(', '.join(correlation(steps, col) for col in zip(*xs))
                         if isinstance(xs[0], list) else correlation(steps, xs))
        out.append('| %s | r(step, ·) | | – | %s |' % (label(r), ' | '.join(cells)))
    return '\n'.join(out)


def plot(runs, png):
    """Each step's link time, the two links' mean: busy, idle while a
    socket waited for its timer, idle otherwise."""
    def idle(w):
        return sum(w['idle_s'][:2]) / 2

    def idle_waiting(w):
        return sum(w['idle_wait_s'][:2]) / 2
    plot_steps(runs, (
        (lambda w: w['step'] - idle(w), 'link busy', 'tab:blue'),
        (idle_waiting, 'link idle, a socket waiting for its retransmission '
         'timer', 'tab:red'),
        (lambda w: idle(w) - idle_waiting(w), 'link idle, no timer waiting',
         'lightgrey')),
        'Each step, fastest to slowest: when the links sat idle (TCG VM)', png)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('results', nargs='+')
    ap.add_argument('--png')
    args = ap.parse_args()
    runs = load_runs(args.results, lambda r: r.get('timer_waits') is not None,
                     step_rows, '--rto-trace')
    for r, rows in runs:
        print(run_text(r, rows))
    print(summary(runs))
    if args.png:
        plot(runs, args.png)


if __name__ == '__main__':
    main()
