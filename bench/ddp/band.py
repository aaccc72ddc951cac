#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""bench/ddp/band.py: does `p3ctl run` protect a job nobody changed?

Plain DDP (Gloo, no p3.torch) trains bench/ddp's model between two hosts
(run.py's namespaces) beside a 1-stream iperf3 upload from host 0, one
step time per case, in one run; run it in the VM (band-vm.sh), where
sch_p3 loads:

  alone        DDP, nothing beside it                     (p3 rate R)
  untagged     DDP and the upload, both untagged          (p3 rate R)
  job first    DDP under p3ctl run --level 0              (p3 rate R)
  bulk last    the upload under p3ctl run --level 7       (p3 rate R default 6)
  prio, port   the stock way: tbf rate R over prio, a u32 filter sending
               the upload's port (5201) to the last band; DDP's ports are
               ephemeral, so no filter can name them
  iperf3 first an iperf3 job (not Python: a parameter server's or an
               NCCL socket job's stand-in) under p3ctl run --level 0 beside
               the untagged upload: its share of R and band 0's bytes

Writes build/bench-ddp/band.jsonl (a line per case) and prints the table.
  bench/ddp/band.py [--model resnet18] [--rate 60] [--steps 3] [--warmup 1]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), 'selftests'))

import p3lib  # noqa: E402
import run  # noqa: E402

P3CTL = os.path.join(run.TOP, 'build', 'bin', 'p3ctl')
LAST = 7        # the least urgent level of p3's default 8 bands


def p3ctl_run(level):
    return (P3CTL, 'run', '--level', str(level), '--')


def shape(kind, mbit):
    """Each host's egress: p3 (with extra options) or tbf over prio."""
    kbit = '%dkbit' % round(mbit * 1000)
    for ns in run.NS:
        run.sh('tc', '-n', ns, 'qdisc', 'del', 'dev', 'eth0', 'root', check=False,
               stderr=subprocess.DEVNULL)
        if kind == 'prio':
            run.sh('tc', '-n', ns, 'qdisc', 'add', 'dev', 'eth0', 'root', 'handle', '1:',
                   'tbf', 'rate', kbit, 'burst', '64kb', 'latency', '1s')
            run.sh('tc', '-n', ns, 'qdisc', 'add', 'dev', 'eth0', 'parent', '1:1',
                   'handle', '2:', 'prio')
            run.sh('tc', '-n', ns, 'filter', 'add', 'dev', 'eth0', 'parent', '2:',
                   'protocol', 'ip', 'prio', '1', 'u32', 'match', 'ip', 'dport', '5201',
                   '0xffff', 'flowid', '2:3')
        else:
            run.sh('tc', '-n', ns, 'qdisc', 'add', 'dev', 'eth0', 'root', 'handle', '1:',
                   'p3', 'rate', kbit, *kind.split())


def p3_band_bytes(ns=run.NS[0]):
    """Host 0's bytes per p3 band (selftests' class_stats)."""
    return {b: st['bytes'] for b, st in p3lib.class_stats(dev='eth0', ns=ns).items()}


CASES = [
    # name, qdisc, upload (None, or its wrap), DDP's wrap
    ('alone', '', None, ()),
    ('untagged', '', (), ()),
    ('job first', '', (), p3ctl_run(0)),
    ('bulk last', 'default 6', p3ctl_run(LAST), ()),
    ('prio, port', 'prio', (), ()),
]


def iperf3_first(mbit, seconds=20):
    """iperf3 under --level 0 for @seconds beside the untagged upload."""
    srv = subprocess.Popen(['ip', 'netns', 'exec', run.NS[1], 'iperf3', '-s', '-p',
                            '5202', '-1'], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    before = p3_band_bytes()
    r = subprocess.run(['ip', 'netns', 'exec', run.NS[0], *p3ctl_run(0), 'iperf3', '-c',
                        run.ADDR[1], '-p', '5202', '-t', str(seconds), '-J'],
                       capture_output=True, text=True, check=True, timeout=seconds + 120)
    srv.wait(timeout=30)
    after = p3_band_bytes()
    got = json.loads(r.stdout)['end']['sum_received']['bits_per_second'] / 1e6
    return {'case': 'iperf3 first', 'share': got / mbit, 'mbit': got,
            'band0_bytes': after.get(0, 0) - before.get(0, 0),
            'bytes': json.loads(r.stdout)['end']['sum_received']['bytes']}


def table(rows):
    alone = next((r['mean_s'] for r in rows if r['case'] == 'alone'), None)
    lines = ['| case | DDP s/step | × alone |', '|---|---:|---:|']
    for r in rows:
        if 'mean_s' in r:
            lines.append('| %s | %.2f | %.2f |' % (r['case'], r['mean_s'],
                                                   r['mean_s'] / alone if alone else 0))
        else:
            lines.append('| %s: %.1f Mbit/s, %.2f of the link; band 0 carried %.1f MB '
                         'of its %.1f MB | | |' % (r['case'], r['mbit'], r['share'],
                                                  r['band0_bytes'] / 1e6, r['bytes'] / 1e6))
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--model', default='resnet18')
    ap.add_argument('--rate', type=float, default=60, help='Mbit/s')
    ap.add_argument('--steps', type=int, default=3)
    ap.add_argument('--warmup', type=int, default=1)
    ap.add_argument('--batch', type=int, default=4)
    ap.add_argument('--out', default=os.path.join(run.TOP, 'build', 'bench-ddp',
                                                  'band.jsonl'))
    args = ap.parse_args()
    # What run.run_ranks reads of run.py's arguments.
    args.python, args.sample, args.yappi, args.link_trace = '/usr/bin/python3', False, None, None
    args.slice, args.same_malloc = 0, False
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    rows, port, t0 = [], 29700, time.monotonic()
    steps_out = args.out + '.steps'
    open(steps_out, 'w').close()
    run.topology()
    try:
        for name, qdisc, up, wrap in CASES:
            shape(qdisc, args.rate)
            load = run.upload(up is not None, wrap=up or ())
            try:
                port += 1
                run.run_ranks('ddp', args.model, args, steps_out,
                              json.dumps({'case': name}), port, wrap=wrap)
            finally:
                for p in reversed(load or ()):     # the client first
                    p.kill()
                    p.wait()
            line = run.last_line(steps_out)
            rows.append({'case': name, 'qdisc': qdisc or 'p3', 'mean_s': line['mean_s'],
                         'step_s': line['step_s'], 'mbit': args.rate})
            print('bench/ddp/band: %5.0f s  %-11s %.2f s/step'
                  % (time.monotonic() - t0, name, line['mean_s']), file=sys.stderr, flush=True)
        shape('', args.rate)
        load = run.upload(True)
        try:
            rows.append(iperf3_first(args.rate))
        finally:
            for p in reversed(load):
                p.kill()
                p.wait()
    finally:
        for ns in run.NS:
            run.sh('ip', 'netns', 'del', ns, check=False)
    with open(args.out, 'w') as f:
        for r in rows:
            f.write(json.dumps(r) + '\n')
    print(table(rows))


if __name__ == '__main__':
    main()
