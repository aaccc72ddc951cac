#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""What made each step slow, from bench/torch runs (host side).

  bench/torch/steps.py [--png OUT.png] RESULTS.jsonl [RESULTS.jsonl ...]

Every run records both ranks' counters at each timed step's start
(worker.py, step_snapshot).  Per run, one row per step: its length, how
much of each host's link the co-located bursts took in it, how TCP
recovered its losses (segments sent again, retransmission timeouts),
what bounded loss asked for again or summed as zeros, and the p3 qdiscs'
drops.  Then a least-squares fit of the step's length on the bursts'
link time, and what is left of each step once the bursts' share is
taken out: if the slowest steps are the ones the bursts filled, no
transport can shorten them, and a mode's tail is measured by the rest.
--png plots each step's length against the bursts' link time, per run.
"""
import argparse
import json
import statistics

from report import new_figure, run_label, save

# A burst is 64 KB datagrams (worker.py, Bursts.DGRAM = 65,507 bytes of
# payload), each leaving as 45 IP fragments.  The job never fragments, so
# every fragment the peer received crossed this host's link, at this
# many bytes on the wire each (IP and Ethernet headers included).
BURST_DGRAM = 65507 + 8
FRAGMENTS = 45
WIRE_PER_FRAGMENT = (BURST_DGRAM + FRAGMENTS * (20 + 14)) / FRAGMENTS


def label(r):
    tol = r.get('loss_tolerance')
    return run_label(r['mode'], r['bulk']) + (', %g%% tolerated' % (100 * tol)
                                             if tol is not None else '')


def diffs(snaps, path):
    """Per step, the change of one counter (path: keys into a snapshot)."""
    def get(s):
        for k in path:
            s = s.get(k) if isinstance(s, dict) else None
        return s or 0
    return [get(b) - get(a) for a, b in zip(snaps, snaps[1:])]


def step_rows(r):
    """[{step, burst_s: [host 0, host 1], ...}] for each timed step: the
    bursts' link seconds on host h's egress are the fragments the other
    rank received in its own step of the same number (the ranks' steps
    end together, at the exchange)."""
    snaps = [rank['snapshots'] for rank in r['ranks']]
    per_s = WIRE_PER_FRAGMENT * 8 / (r['mbit'] * 1e6)
    frags_in = [diffs(s, ('net', 'Ip.ReasmReqds')) for s in snaps]
    both = lambda *path: [sum(x) for x in zip(*(diffs(s, path) for s in snaps))]
    cols = {'retrans': both('net', 'Tcp.RetransSegs'),
            'timeouts': both('net', 'TcpExt.TCPTimeouts'),
            'rerequests': both('stats', 'rerequests'),
            'bytes_lost': both('stats', 'bytes_lost'),
            'limit': both('qdisc', 'drops_limit'),
            'deadline': both('qdisc', 'drops_deadline')}
    rows = []
    for k, step in enumerate(r['steps']):
        row = {'step': step,
               'burst_s': [frags_in[1][k] * per_s, frags_in[0][k] * per_s]}
        row.update({name: col[k] for name, col in cols.items()})
        rows.append(row)
    return rows


def fit(xs, ys):
    """Least squares y = a + b x: (a, b, r²)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    syy = sum((y - my) ** 2 for y in ys)
    b = sxy / sxx if sxx else 0.0
    return my - b * mx, b, (sxy * sxy / (sxx * syy) if sxx and syy else 0.0)


def burst_load(row):
    """The bursts' link time in a step: the mean of the two hosts' (the
    exchange crosses both links)."""
    return sum(row['burst_s']) / 2


def run_text(r, rows):
    out = ['\n%s, %s pressure: %d steps' % (label(r), r['pressure'], len(rows)),
           '| step | length (s) | bursts on link 0, 1 (s) | TCP sent again '
           '(segments) | TCP timeouts | rerequests | bytes lost | '
           'qdisc limit drops | deadline drops |',
           '|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
    for k, w in enumerate(rows):
        out.append('| %d | %.2f | %.2f, %.2f | %d | %d | %d | %d | %d | %d |' % (
            k + 1, w['step'], *w['burst_s'], w['retrans'], w['timeouts'],
            w['rerequests'], w['bytes_lost'], w['limit'], w['deadline']))
    return '\n'.join(out)


def summary(runs):
    """One line per run: the fit of step length on burst link time, the
    steps' spread, and the same with the bursts' fitted share taken out
    (each run's own slope)."""
    out = ['\n| run | steps | median (s) | max (s) | fit: s + s per burst '
           'second | r² | without the bursts: median | max | max / median |',
           '|---|---:|---:|---:|---|---:|---:|---:|---:|']
    for r, rows in runs:
        ys = [w['step'] for w in rows]
        xs = [burst_load(w) for w in rows]
        a, b, r2 = fit(xs, ys)
        rest = [y - b * x for x, y in zip(xs, ys)]
        out.append('| %s | %d | %.2f | %.2f | %.2f + %.2f x | %.2f | %.2f | %.2f '
                   '| %.2f |' % (label(r), len(ys), statistics.median(ys),
                                 max(ys), a, b, r2, statistics.median(rest),
                                 max(rest), max(rest) / statistics.median(rest)))
    return '\n'.join(out)


def plot(runs, png):
    fig, ax = new_figure((7, 4))
    for (r, rows), marker in zip(runs, 'os^vD<>'):
        xs = [burst_load(w) for w in rows]
        ax.scatter(xs, [w['step'] for w in rows], marker=marker, label=label(r))
        a, b, _ = fit(xs, [w['step'] for w in rows])
        ax.plot([min(xs), max(xs)], [a + b * min(xs), a + b * max(xs)], lw=0.8)
    ax.set_xlabel("the bursts' link time in the step, mean of the two links (s)")
    ax.set_ylabel('step length (s)')
    ax.set_title('Each step against the bursts it met (TCG VM)')
    save(fig, ax, png)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('results', nargs='+')
    ap.add_argument('--png')
    args = ap.parse_args()
    runs = []
    for path in args.results:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r['steps'] and all(rank.get('snapshots') for rank in r['ranks']):
                    runs.append((r, step_rows(r)))
    if not runs:
        raise SystemExit('steps.py: no run with per-step counters in '
                         + ', '.join(args.results))
    for r, rows in runs:
        print(run_text(r, rows))
    print(summary(runs))
    if args.png:
        plot(runs, args.png)


if __name__ == '__main__':
    main()
