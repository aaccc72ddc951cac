#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""What made each step slow, from bench/torch runs (host side).

  bench/torch/steps.py [--png OUT.png] RESULTS.jsonl [RESULTS.jsonl ...]

Every run records both ranks' counters at each timed step's start
(worker.py, step_snapshot).  Per run, one row per step: its length; on
each host's link, how long the co-located bursts took it, how long the
job's own packets did and how long it stayed idle; how TCP recovered its
losses (segments sent again, retransmission timeouts); what bounded loss
asked for again or summed as zeros; and the p3 qdiscs' drops.

Then, per run, what sets its slowest steps apart: the slowest quarter of
the steps against the rest, by the share of the link the bursts took,
by the idle link time and by TCP's timeouts.  The bursts come at a steady rate, so a long
step meets more of them in any case; only a larger share means they
made it long.  Last, how closely the steps' lengths follow each of
these, as correlation coefficients.  --png draws each run's steps, slowest last, as link time
stacked by what filled it.
"""
import argparse
import json
import statistics

from report import new_figure, run_label, save

# A burst is 64 KB datagrams (worker.py, Bursts.DGRAM = 65,507 bytes of
# payload), each leaving as 45 IP fragments.  The job never fragments, so
# the IP counters of fragments count the bursts alone, at this many bytes
# on the wire each (IP and Ethernet headers included).
BURST_DGRAM = 65507 + 8
FRAGMENTS = 45
WIRE_PER_FRAGMENT = (BURST_DGRAM + FRAGMENTS * (20 + 14)) / FRAGMENTS


def label(r):
    tol = r.get('loss_tolerance')
    return (run_label(r['mode'], r['bulk'])
            + (', %g%% tolerated' % (100 * tol) if tol is not None else '')
            + (', ACKs most urgent' if r.get('ack_band') else ''))


def value(snap, path):
    """The counter at path (keys into a snapshot), None if not recorded
    (older runs lack the later counters; some modes have no qdisc or no
    stats())."""
    for k in path:
        snap = snap.get(k) if isinstance(snap, dict) else None
    return snap


def diffs(snaps, path):
    """Per step, the change of one counter; None for each step if the
    run did not record it."""
    if value(snaps[0], path) is None:
        return [None] * (len(snaps) - 1)
    return [value(b, path) - value(a, path) for a, b in zip(snaps, snaps[1:])]

# The guest's CPU time that is not idle (worker.py, guest_cpu).
GUEST_BUSY = ('user', 'system', 'softirq')


def scaled(xs, factor):
    return [None if x is None else x * factor for x in xs]


def step_rows(r):
    """[{step, burst_s, job_s, idle_s: [link 0, link 1], ...}] for each of
    rank 0's timed steps.  The links' figures come from rank 0's own
    counters, so that they fall in rank 0's steps (the other rank's start
    at other times): bytes it sent and received (a veth receives what the
    other host's qdisc sent), the fragments it created (its link's
    bursts, counted as they enter the qdisc, which drops a few tenths of
    a percent of them; a burst queued at a step's end counts in that
    step) and the fragments it received (the other link's bursts).  The
    other counters are both ranks' sums, each over its own steps, and
    None where a run did not record them."""
    snaps = [rank['snapshots'] for rank in r['ranks']]
    per_byte = 8 / (r['mbit'] * 1e6)
    bursts = [scaled(diffs(snaps[0], ('net', name)), WIRE_PER_FRAGMENT * per_byte)
              for name in ('Ip.FragCreates', 'Ip.ReasmReqds')]
    busy = [scaled(diffs(snaps[0], ('link', way)), per_byte) for way in ('tx', 'rx')]

    def both(*path):
        per_rank = [diffs(s, path) for s in snaps]
        return [None if None in x else sum(x) for x in zip(*per_rank)]
    cols = {'retrans': both('net', 'Tcp.RetransSegs'),
            'timeouts': both('net', 'TcpExt.TCPTimeouts'),
            'spurious': both('net', 'TcpExt.TCPSpuriousRTOs'),
            'probes': both('net', 'TcpExt.TCPLossProbes'),
            'rto_s': scaled(both('tcp_rto', 'rto_ms'), 1e-3),
            'tcp_busy': scaled(both('tcp_rto', 'busy_us'), 1e-6),
            'guest_idle': diffs(snaps[0], ('guest', 'idle')),
            'guest_busy': [None if None in x else sum(x) for x in
                           zip(*(diffs(snaps[0], ('guest', k))
                                 for k in GUEST_BUSY))],
            'rerequests': both('stats', 'rerequests'),
            'bytes_lost': both('stats', 'bytes_lost'),
            'limit': both('qdisc', 'drops_limit'),
            'deadline': both('qdisc', 'drops_deadline')}
    rows = []
    for k, step in enumerate(r['steps']):
        row = {'step': step, 'burst_s': [b[k] for b in bursts]}
        if busy[0][k] is not None:
            row['job_s'] = [max(0.0, u[k] - b[k]) for u, b in zip(busy, bursts)]
            row['idle_s'] = [step - u[k] for u in busy]
        row.update({name: col[k] for name, col in cols.items()})
        rows.append(row)
    return rows


def pair(xs):
    return '%.2f, %.2f' % tuple(xs) if xs else '–'


def count(n, form='%d'):
    return '–' if n is None or n != n else form % n


def run_text(r, rows):
    out = ['\n%s, %s pressure: %d steps' % (label(r), r['pressure'], len(rows)),
           '| step | length (s) | bursts on link 0, 1 (s) | job on link 0, 1 '
           '(s) | idle link 0, 1 (s) | TCP sent again (segments) | TCP '
           'timeouts (found spurious) | in timeout recovery (socket-s) | rerequests | bytes '
           'lost | qdisc limit drops | deadline drops |',
           '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
    for k, w in enumerate(rows):
        out.append('| %d | %.2f | %s | %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s |' % (
            k + 1, w['step'], pair(w['burst_s']), pair(w.get('job_s')),
            pair(w.get('idle_s')), count(w['retrans']), count(w['timeouts']),
            count(w['spurious']), count(w['rto_s'], '%.1f'),
            *(count(w[k]) for k in ('rerequests', 'bytes_lost', 'limit', 'deadline'))))
    out.append(totals_text(rows))
    drops = band_drops(r)
    if drops:
        out.append('\nqdisc drops by band over the run, both hosts: ' + ', '.join(
            'band %d: %d' % (b, n) for b, n in enumerate(drops) if n))
    return '\n'.join(out)


def totals_text(rows):
    """The run's TCP recovery and the guest's CPU, summed over its steps.
    A timeout found spurious fired on a segment that was delayed, not
    lost; a tail loss probe is TCP's cheaper attempt before a
    timeout."""
    def total(key):
        xs = [w[key] for w in rows]
        return None if None in xs else sum(xs)
    return ('\nover the run, both hosts: %s TCP timeouts, %s found spurious, '
            '%s tail loss probes, %s segments sent again; guest CPU %s s a '
            'step' % (*(count(total(k)) for k in ('timeouts', 'spurious',
                                                  'probes', 'retrans')),
                      count(mean_of(rows, lambda w: w['guest_busy']), '%.1f')))


def band_drops(r):
    """Both hosts' drops per band between the first and last snapshot."""
    total = []
    for rank in r['ranks']:
        snaps = rank['snapshots']
        first, last = (s.get('qdisc', {}).get('band_drops') for s in
                       (snaps[0], snaps[-1]))
        if first and last:
            total = [t + b - a for t, a, b in
                     zip(total or [0] * len(last), first, last)]
    return total


def mean_of(rows, f):
    xs = [f(w) for w in rows if f(w) is not None]
    return statistics.fmean(xs) if xs else float('nan')


def slowest_quarter(rows):
    """(the slowest quarter of the steps, at least one; the rest)."""
    by_length = sorted(rows, key=lambda w: w['step'])
    cut = len(rows) - max(1, len(rows) // 4)
    return by_length[cut:], by_length[:cut]


def summary(runs):
    """One line per run: the steps' spread, then the slowest quarter of
    its steps against the rest (means a step): the bursts' share of the
    link, the idle link time (both links' mean), TCP's timeouts, those
    found spurious, the socket-seconds spent recovering from them and
    with data outstanding (both hosts), and the guest's idle vCPU time."""
    out = ['\n| run | steps | median (s) | max (s) | max / median | slowest '
           'quarter: mean step (s) | bursts, share of the link | idle link '
           '(s) | TCP timeouts (spurious) | in recovery (socket-s) | TCP busy '
           '(socket-s) | guest idle (vCPU-s) | the rest: mean step (s) | '
           'bursts | idle (s) | TCP timeouts (spurious) | in recovery '
           '(socket-s) | TCP busy | guest idle |',
           '|---|---:|---:|---:|---:|' + '---:|' * 14]
    share = lambda w: sum(w['burst_s']) / (2 * w['step'])
    idle = lambda w: sum(w['idle_s']) / 2 if 'idle_s' in w else float('nan')
    for r, rows in runs:
        ys = sorted(w['step'] for w in rows)
        cells = []
        for part in slowest_quarter(rows):
            cells += ['%.2f' % mean_of(part, lambda w: w['step']),
                      '%.0f%%' % (100 * mean_of(part, share)),
                      count(mean_of(part, idle), '%.2f'),
                      '%.1f (%s)' % (mean_of(part, lambda w: w['timeouts']),
                                     count(mean_of(part, lambda w: w['spurious']),
                                           '%.1f')),
                      count(mean_of(part, lambda w: w['rto_s']), '%.1f'),
                      count(mean_of(part, lambda w: w['tcp_busy']), '%.1f'),
                      count(mean_of(part, lambda w: w['guest_idle']), '%.2f')]
        out.append('| %s | %d | %.2f | %.2f | %.2f | %s |' % (
            label(r), len(ys), statistics.median(ys), ys[-1],
            ys[-1] / statistics.median(ys), ' | '.join(cells)))
    return '\n'.join(out)


def correlations(runs):
    """Per run, how closely a step's length follows each candidate cause
    over its steps (Pearson's r; '–' where a column is constant or was
    not recorded)."""
    causes = (("bursts' share of the link", lambda w: sum(w['burst_s']) / (2 * w['step'])),
              ('idle link', lambda w: sum(w['idle_s']) / 2 if 'idle_s' in w else None),
              ('TCP timeouts', lambda w: w['timeouts']),
              ('in timeout recovery', lambda w: w['rto_s']),
              ('TCP busy', lambda w: w['tcp_busy']),
              ('guest idle', lambda w: w['guest_idle']))
    out = ['\n| run | ' + ' | '.join('r(step, %s)' % name for name, _ in causes)
           + ' | r(idle link, in timeout recovery) |',
           '|---|' + '---:|' * (len(causes) + 1)]

    def r_of(xs, ys):
        pairs = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
        try:
            return '%.2f' % statistics.correlation(*zip(*pairs))
        except (statistics.StatisticsError, ValueError, TypeError):
            return '–'
    for r, rows in runs:
        length = [w['step'] for w in rows]
        cells = [r_of(length, [f(w) for w in rows]) for _, f in causes]
        cells.append(r_of([causes[1][1](w) for w in rows],
                          [causes[3][1](w) for w in rows]))
        out.append('| %s | %s |' % (label(r), ' | '.join(cells)))
    return '\n'.join(out)


def plot_steps(runs, parts, title, png):
    """Per run, its steps from fastest to slowest, each a bar of parts
    stacked bottom up: (a row's seconds, legend, colour)."""
    fig, ax = new_figure((8, 4))
    x0, ticks = 0, []
    for n, (r, rows) in enumerate(runs):
        rows = sorted(rows, key=lambda w: w['step'])
        xs = range(x0, x0 + len(rows))
        bottom = [0.0] * len(rows)
        for seconds, name, colour in parts:
            ys = [seconds(w) for w in rows]
            ax.bar(xs, ys, 0.8, bottom=bottom, color=colour,
                   label=name if n == 0 else None)
            bottom = [b + y for b, y in zip(bottom, ys)]
        ticks.append((x0 + len(rows) / 2, label(r)))
        x0 += len(rows) + 2
    ax.set_xticks([t for t, _ in ticks])
    ax.set_xticklabels([name for _, name in ticks], fontsize=7)
    ax.set_ylabel('seconds of a step (mean of the two links)')
    ax.set_title(title)
    save(fig, ax, png)


def plot(runs, png):
    """Each step's link time, the two links' mean: bursts, the job's
    packets, idle."""
    def links(key):
        return lambda w: sum(w.get(key) or (0, 0)) / 2
    plot_steps(runs, ((links('burst_s'), 'bursts', 'tab:red'),
                      (links('job_s'), "the job's packets", 'tab:blue'),
                      (links('idle_s'), 'idle', 'lightgrey')),
               "Each step's link time, fastest to slowest, per run (TCG VM)",
               png)


def load_runs(paths, recorded, rows_of, what):
    """[(run, rows_of(run))] for every run in the results files that
    has timed steps and recorded(run); exits naming what is missing if
    none has."""
    runs = []
    for path in paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r['steps'] and recorded(r):
                    runs.append((r, rows_of(r)))
    if not runs:
        raise SystemExit('no run with %s in %s' % (what, ', '.join(paths)))
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('results', nargs='+')
    ap.add_argument('--png')
    args = ap.parse_args()
    runs = load_runs(args.results, lambda r: all(rank.get('snapshots')
                                                 for rank in r['ranks']),
                     step_rows, 'per-step counters')
    for r, rows in runs:
        print(run_text(r, rows))
    print(summary(runs))
    print(correlations(runs))
    if args.png:
        plot(runs, args.png)


if __name__ == '__main__':
    main()
