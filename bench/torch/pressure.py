#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Co-located traffic that presses on a training job's link: an endless
bulk upload, microbursts that fill the queue, and the sink that discards
both at the peer.  bench/torch/worker.py runs them beside training;
bench/accuracy/vm.py runs them as processes, one per network namespace:

  pressure.py sink
  pressure.py bursts PEER [--pkts N] [--every S] [--level L] [--seed K]

`bursts` sends until it is killed (SIGTERM), then prints how many bursts
and bytes it sent."""
import argparse
import os
import signal
import socket
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                '..', '..', 'userlib', 'python'))

import p3  # noqa: E402

BULK_PORT = 5301
BURST_PORT = 5302


class Bulk:
    """An upload that never ends: one untagged TCP flow to the peer."""

    def __init__(self, peer):
        self.stop = threading.Event()
        self.sent = 0
        self.sock = socket.create_connection((peer, BULK_PORT), timeout=30)
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name='bulk upload')
        self.thread.start()

    def _run(self):
        chunk = b'\0' * (1 << 16)
        try:
            while not self.stop.is_set():
                self.sent += self.sock.send(chunk)
        except OSError:
            pass

    def close(self):
        self.stop.set()
        self.sock.close()
        self.thread.join(10)


class Bursts:
    """Microbursts that fill the queue, from a co-located sender.

    64 KB datagrams, each leaving as 45 IP fragments (each a packet in the
    qdisc): a burst of 1,000 packets takes 23 system calls, cheap enough
    for an emulated CPU, and the send buffer is forced big enough that a
    burst reaches the qdisc whole, at once."""
    DGRAM = 65507

    def __init__(self, peer, pkts, every, level, seed):
        import random
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.sent = 0
        self.bursts = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, 32, 16 << 20)  # SNDBUFFORCE
        if level >= 0:
            p3.tag(self.sock, level)
        self.sock.connect((peer, BURST_PORT))
        self.sock.setblocking(False)
        self.n = -(-pkts * 1480 // self.DGRAM)     # 1480: fragment payload
        self.every = every
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name='bursts')
        self.thread.start()

    def _run(self):
        data = b'\0' * self.DGRAM
        while not self.stop.wait(self.every * self.rng.uniform(0.5, 1.5)):
            self.bursts += 1
            for _ in range(self.n):
                try:
                    self.sent += self.sock.send(data)
                except OSError:     # the qdisc dropped it, or the buffer's full
                    pass

    def close(self):
        self.stop.set()
        self.thread.join(10)
        self.sock.close()


def sink():
    """Accept the peer's uploads and bursts and discard them, for the whole
    run."""
    srv = socket.create_server(('0.0.0.0', BULK_PORT), reuse_port=True)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    udp.bind(('0.0.0.0', BURST_PORT))

    def drain_udp():
        while udp.recv(1 << 16):
            pass
    threading.Thread(target=drain_udp, daemon=True, name='sink').start()

    def drain(c):
        with c:
            while c.recv(1 << 20):
                pass

    def serve():
        while True:
            c, _ = srv.accept()
            threading.Thread(target=drain, args=(c,), daemon=True,
                             name='sink').start()
    threading.Thread(target=serve, daemon=True, name='sink').start()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='what', required=True)
    sub.add_parser('sink', help='discard uploads and bursts until killed')
    b = sub.add_parser('bursts', help='send bursts to PEER until killed')
    b.add_argument('peer')
    b.add_argument('--pkts', type=int, default=1000,
                   help='packets a burst (IP fragments), default 1000')
    b.add_argument('--every', type=float, default=4.0,
                   help='mean seconds between bursts, default 4')
    b.add_argument('--level', type=int, default=-1,
                   help='p3 level of the bursts; -1 (default): untagged')
    b.add_argument('--seed', type=int, default=0)
    args = ap.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.what == 'sink':
        sink()
        stop.wait()
        return
    bursts = Bursts(args.peer, args.pkts, args.every, args.level, args.seed)
    stop.wait()
    bursts.close()
    print('bursts %d bytes %d' % (bursts.bursts, bursts.sent), flush=True)


if __name__ == '__main__':
    main()
