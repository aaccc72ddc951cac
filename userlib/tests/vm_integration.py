#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Roles of the VM integration test (vm_integration.sh runs them).

  recv  --bind A --port P --out F     receive every tensor, record timestamps
  send  --host H --port P --out F     stream bulk levels, then one urgent
                                      level-0 tensor after --delay seconds
  check SEND RECV --label L [--require-order] [--rate BYTES_PER_S]
                                      print TAP lines for one run

Tensors: id 1 (level 0, --urgent-kb KiB) and ids 10.. (levels 4..7,
--bulk-mb MiB each).  Their contents derive from the id, so the receiver
checks them byte for byte without talking to the sender.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

import p3

URGENT = 1
BULK_LEVELS = (4, 5, 6, 7)


def tensors(args):
    t = {URGENT: (0, args.urgent_kb << 10)}
    for i, lv in enumerate(BULK_LEVELS):
        t[10 + i] = (lv, args.bulk_mb << 20)
    return t


def content(tid, size):
    return np.random.default_rng(tid).integers(0, 256, size, dtype=np.uint8)


def recv(args):
    out = {'completions': {}, 'error': None}
    try:
        with p3.Listener(args.bind, args.port, timeout=60) as lst:
            open(args.out + '.ready', 'w').close()
            rx = lst.accept(timeout=60)
            bufs = {}
            for tid, (_, size) in tensors(args).items():
                bufs[tid] = np.zeros(size, dtype=np.uint8)
                rx.expect(tid, bufs[tid], iteration=1)
            for c in rx.wait(timeout=args.timeout):
                exact = bool(np.array_equal(bufs[c.tensor],
                                            content(c.tensor, c.bytes)))
                out['completions'][c.tensor] = {
                    't_first': c.t_first, 't_done': c.t_done, 'exact': exact}
            rx.close()
    except p3.Error as e:
        out['error'] = str(e)
    with open(args.out, 'w') as f:
        json.dump(out, f)
    return 0 if out['error'] is None else 1


def connect(args):
    deadline = time.monotonic() + 60
    while True:
        try:
            return p3.Channel.connect(args.host, args.port, bands=8,
                                      method='dscp', timeout=10)
        except p3.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def send(args):
    ts = tensors(args)
    data = {tid: content(tid, size) for tid, (_, size) in ts.items()}
    out = {}
    with connect(args) as ch:
        out['t_bulk'] = p3.now_ns()
        for tid, (lv, _) in ts.items():
            if tid != URGENT:
                ch.send(tid, data[tid], level=lv, iteration=1, prio=tid)
        # Let the bulk fill the shaped link before the urgent one arrives.
        end = time.monotonic() + args.delay
        while time.monotonic() < end:
            ch.poll(0.01)
        out['t_urgent'] = p3.now_ns()
        ch.send(URGENT, data[URGENT], level=0, iteration=1)
        ch.flush(timeout=args.timeout)
        out['t_flushed'] = p3.now_ns()
    with open(args.out, 'w') as f:
        json.dump(out, f)
    return 0


class Tap:
    def __init__(self, label):
        self.label = label
        self.failed = 0

    def ok(self, cond, text):
        print('%s - %s: %s' % ('ok' if cond else 'not ok', self.label, text))
        self.failed += not cond
        return cond

    def diag(self, text):
        print('# %s: %s' % (self.label, text))


def check(args):
    t = Tap(args.label)
    try:
        snd = json.load(open(args.send_json))
        rcv = json.load(open(args.recv_json))
    except (OSError, ValueError) as e:
        t.ok(False, 'sender and receiver left results (%s)' % e)
        return 1
    comp = {int(k): v for k, v in rcv['completions'].items()}
    want = tensors(args)
    t.ok(rcv['error'] is None and sorted(comp) == sorted(want)
         and all(c['exact'] for c in comp.values()),
         'all %d tensors (%.1f MB) delivered once, byte-exact%s'
         % (len(want), sum(s for _, s in want.values()) / 1e6,
            '' if rcv['error'] is None else ' (%s)' % rcv['error']))
    if URGENT not in comp:
        return 1
    urgent_ms = (comp[URGENT]['t_done'] - snd['t_urgent']) / 1e6
    bulk_done = sorted((c['t_done'], k) for k, c in comp.items() if k != URGENT)
    racing_done = [t for t, _ in bulk_done if t > snd['t_urgent']]
    first_bulk_ms = (racing_done[0] - snd['t_urgent']) / 1e6 if racing_done else 0
    ideal_ms = (want[URGENT][1] / args.rate * 1e3) if args.rate else 0
    order = [k for _, k in sorted((c['t_done'], k) for k, c in comp.items())]
    # Only bulk still on its way when the urgent tensor was queued competes
    # with it; a slow VM may finish the first bulk level before that.
    racing = [k for t, k in bulk_done if t > snd['t_urgent']]
    text = ('level-0 tensor queued %.0f ms after the bulk completed in %.0f ms '
            '(ideal %.0f ms) while %d bulk tensors were in flight; first of '
            'them done at %+.0f ms; order %s'
            % ((snd['t_urgent'] - snd['t_bulk']) / 1e6, urgent_ms, ideal_ms,
               len(racing), first_bulk_ms, order))
    if args.require_order:
        t.ok(len(racing) >= 2 and urgent_ms < args.max_urgent_ms and
             all(comp[URGENT]['t_done'] < comp[k]['t_done'] for k in racing),
             text + ' (must beat them all, under %d ms)' % args.max_urgent_ms)
    else:
        t.diag(text)
    if args.result:
        with open(args.result, 'w') as f:
            json.dump({'urgent_ms': urgent_ms, 'ideal_ms': ideal_ms,
                       'first_bulk_ms': first_bulk_ms, 'order': order}, f)
    return 1 if t.failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('role', choices=('send', 'recv', 'check'))
    ap.add_argument('send_json', nargs='?')
    ap.add_argument('recv_json', nargs='?')
    ap.add_argument('--bind', default='0.0.0.0')
    ap.add_argument('--host', default='127.0.0.1')
    ap.add_argument('--port', type=int, default=5555)
    ap.add_argument('--out')
    ap.add_argument('--bulk-mb', type=int, default=8)
    ap.add_argument('--urgent-kb', type=int, default=256)
    ap.add_argument('--delay', type=float, default=0.5)
    ap.add_argument('--timeout', type=float, default=180)
    ap.add_argument('--label', default='run')
    ap.add_argument('--rate', type=float, default=0, help='link bytes/s')
    ap.add_argument('--require-order', action='store_true')
    ap.add_argument('--max-urgent-ms', type=int, default=1000)
    ap.add_argument('--result')
    args = ap.parse_args()
    return {'send': send, 'recv': recv, 'check': check}[args.role](args)


if __name__ == '__main__':
    sys.exit(main())
