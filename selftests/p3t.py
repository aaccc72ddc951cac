#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""p3t: the traffic generator and sink of the p3 selftests.

Every sender tags its socket the way an application would (SO_PRIORITY,
IP_TOS, IPV6_TCLASS, SO_MARK) and every measurement is taken at the
receiver, which is what a training job would see.

  sink  --port P [--out FILE]       TCP and UDP receiver; JSON stats on exit
  bulk  DST --port P --conns N --seconds S --tag T --group G
  msg   DST --port P --bytes B --tag T [--repeat R]   prints completion times
  udp   DST --port P --count N --tags T1,T2 [--switch-every K] [--pps R]
  spray DST --first-port P --count N          one datagram to each of N ports

A tag is METHOD:VALUE with METHOD one of prio, tos, tclass, mark, or "none".
"""
import argparse
import json
import selectors
import signal
import socket
import struct
import sys
import threading
import time

# Stream header: magic, kind (B=bulk, M=message), group, message size.
HDR = struct.Struct("!4scBQ")
MAGIC = b"P3T1"
# Datagram header: group, sequence number.
DGRAM = struct.Struct("!BI")
BIN = 0.1  # seconds per receive-rate bin
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)  # not in Python 3.11
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)


def tag_socket(sock, tag):
    if tag == "none":
        return
    method, value = tag.split(":")
    value = int(value, 0)
    if method == "prio":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, value)
    elif method == "tos":
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, value)
    elif method == "tclass":
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, value)
    elif method == "mark":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, value)
    else:
        raise SystemExit(f"p3t: unknown tag method {method!r}")


def family_of(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def receive_drops():
    """Datagrams this host dropped on receipt, by cause: the backlog of
    packets waiting for the receiving CPU (global), and full socket
    buffers (this network namespace's UDP and UDP6 counters)."""
    drops = {"backlog": 0, "rcvbuf": 0}
    with open("/proc/net/softnet_stat") as f:
        drops["backlog"] = sum(int(line.split()[1], 16) for line in f)
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    drops["rcvbuf"] += int(dict(zip(*rows))["RcvbufErrors"])
    with open("/proc/net/snmp6") as f:
        for line in f:
            name, value = line.split()
            if name == "Udp6RcvbufErrors":
                drops["rcvbuf"] += int(value)
    return drops


class Sink:
    """Counts what arrives, per group, in time bins."""

    def __init__(self, port):
        self.lock = threading.Lock()
        self.tcp_bins = {}      # group -> {bin: bytes}
        self.udp = {}           # group -> counters
        self.port = port
        self.drops_at_start = receive_drops()

    def add_tcp(self, group, n):
        # Bins are in CLOCK_MONOTONIC, which every process in the VM
        # shares, so tests can line them up with their own clock.
        b = int(time.monotonic() / BIN)
        with self.lock:
            bins = self.tcp_bins.setdefault(group, {})
            bins[b] = bins.get(b, 0) + n

    def add_udp(self, data):
        if len(data) < DGRAM.size:
            return
        group, seq = DGRAM.unpack_from(data)
        u = self.udp.setdefault(group, {"received": 0, "reordered": 0,
                                        "max_seq": -1, "bytes": 0})
        u["received"] += 1
        u["bytes"] += len(data)
        if seq < u["max_seq"]:
            u["reordered"] += 1
        else:
            u["max_seq"] = seq

    def serve_stream(self, conn):
        with conn:
            hdr = recv_exact(conn, HDR.size)
            if hdr is None:
                return
            magic, kind, group, size = HDR.unpack(hdr)
            if magic != MAGIC:
                return
            if kind == b"M":
                if recv_exact(conn, size, lambda n: self.add_tcp(group, n)):
                    conn.sendall(b"K")
                return
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    return
                self.add_tcp(group, len(data))

    def run(self):
        sel = selectors.DefaultSelector()
        for fam, addr in ((socket.AF_INET6, "::"),):
            ls = socket.socket(fam, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind((addr, self.port))
            ls.listen(128)
            sel.register(ls, selectors.EVENT_READ, "tcp")
            us = socket.socket(fam, socket.SOCK_DGRAM)
            # The sink is one Python thread among the stream threads, and
            # on a debug kernel it can stall for tenths of a second:
            # SO_RCVBUF alone is capped at rmem_max (208 KB, doubled by
            # the kernel: under 200 datagrams of 1,000 bytes).
            try:
                us.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 4 << 20)
            except PermissionError:
                us.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            us.bind((addr, self.port))
            sel.register(us, selectors.EVENT_READ, "udp")
        self.stop = False
        while not self.stop:
            for key, _ in sel.select(timeout=0.2):
                if key.data == "tcp":
                    conn, _ = key.fileobj.accept()
                    threading.Thread(target=self.serve_stream, args=(conn,),
                                     daemon=True).start()
                else:
                    while True:
                        try:
                            data = key.fileobj.recv(65536, socket.MSG_DONTWAIT)
                        except BlockingIOError:
                            break
                        self.add_udp(data)

    def report(self):
        with self.lock:
            now = receive_drops()
            return {"bin": BIN,
                    "tcp": {g: sorted(b.items()) for g, b in
                            self.tcp_bins.items()},
                    "udp": self.udp,
                    "receive_drops": {k: now[k] - self.drops_at_start[k]
                                      for k in now}}


def recv_exact(conn, size, progress=None):
    got = bytearray()
    while len(got) < size:
        data = conn.recv(min(1 << 16, size - len(got)))
        if not data:
            return None
        got += data
        if progress:
            progress(len(data))
    return bytes(got)


def cmd_sink(args):
    sink = Sink(args.port)

    def finish(*_):
        sink.stop = True
    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    # Ready marker: tests wait for it before they start senders.
    print("ready", flush=True)
    sink.run()
    out = json.dumps(sink.report())
    if args.out:
        with open(args.out, "w") as f:
            f.write(out)
    else:
        print(out)


def connect(args, tag):
    s = socket.socket(family_of(args.dst), socket.SOCK_STREAM)
    tag_socket(s, tag)
    s.connect((args.dst, args.port))
    return s


def cmd_bulk(args):
    deadline = time.monotonic() + args.seconds
    buf = b"\0" * (1 << 16)

    def one():
        s = connect(args, args.tag)
        if args.max_rate:
            # TCP paces itself to this (bytes/s), whatever the qdisc.
            s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE,
                         args.max_rate)
        s.settimeout(1.0)
        s.sendall(HDR.pack(MAGIC, b"B", args.group, 0))
        try:
            while time.monotonic() < deadline:
                try:
                    s.send(buf)
                except socket.timeout:
                    pass
        finally:
            s.close()
    threads = [threading.Thread(target=one) for _ in range(args.conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def cmd_msg(args):
    times = []
    payload = b"\x55" * args.bytes
    for _ in range(args.repeat):
        s = connect(args, args.tag)
        # The clock starts once the connection exists: the bound is about
        # moving the bytes, not the handshake.
        t0 = time.monotonic()
        s.sendall(HDR.pack(MAGIC, b"M", args.group, args.bytes) + payload)
        ack = s.recv(1)
        times.append(time.monotonic() - t0)
        s.close()
        if ack != b"K":
            raise SystemExit("p3t: message not acknowledged")
        time.sleep(args.gap)
    print(json.dumps(times))


def cmd_udp(args):
    s = socket.socket(family_of(args.dst), socket.SOCK_DGRAM)
    if args.sndbuf:
        # Queued datagrams count against the socket's send buffer, so by
        # default one socket cannot hold more than ~100 in the qdisc.
        s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, args.sndbuf)
    tags = args.tags.split(",")
    pad = b"\0" * max(0, args.size - DGRAM.size)
    interval = 1.0 / args.pps if args.pps else 0
    next_t = time.monotonic()
    for i in range(args.count):
        if i % args.switch_every == 0:
            tag_socket(s, tags[(i // args.switch_every) % len(tags)])
        s.sendto(DGRAM.pack(args.group, args.first_seq + i) + pad,
                 (args.dst, args.port))
        if interval:
            next_t += interval
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def cmd_spray(args):
    # One socket, many destination ports: each datagram is its own flow
    # once it is forwarded (no local socket), which is what GC must handle.
    s = socket.socket(family_of(args.dst), socket.SOCK_DGRAM)
    data = b"\0" * 16
    for i in range(args.count):
        port = args.first_port + i % 50000
        src_round = i // 50000
        if port == args.first_port and src_round:
            s.close()
            s = socket.socket(family_of(args.dst), socket.SOCK_DGRAM)
        s.sendto(data, (args.dst, port))


def main():
    p = argparse.ArgumentParser(prog="p3t", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("sink")
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--out")
    for name in ("bulk", "msg", "udp", "spray"):
        a = sub.add_parser(name)
        a.add_argument("dst")
        a.add_argument("--port", type=int, default=0)
        a.add_argument("--group", type=int, default=0)
        a.add_argument("--tag", default="none")
        if name == "bulk":
            a.add_argument("--conns", type=int, default=1)
            a.add_argument("--max-rate", type=int, default=0,
                           help="cap per connection, bytes/s (0: none)")
            a.add_argument("--seconds", type=float, required=True)
        if name == "msg":
            a.add_argument("--bytes", type=int, required=True)
            a.add_argument("--repeat", type=int, default=1)
            a.add_argument("--gap", type=float, default=0.2)
        if name == "udp":
            a.add_argument("--count", type=int, required=True)
            a.add_argument("--size", type=int, default=200)
            a.add_argument("--tags", required=True)
            a.add_argument("--switch-every", type=int, default=1 << 30)
            a.add_argument("--pps", type=float, default=0)
            a.add_argument("--sndbuf", type=int, default=0)
            a.add_argument("--first-seq", type=int, default=0,
                           help="sequence number of the first datagram")
        if name == "spray":
            a.add_argument("--first-port", type=int, default=10000)
            a.add_argument("--count", type=int, required=True)
    args = p.parse_args()
    {"sink": cmd_sink, "bulk": cmd_bulk, "msg": cmd_msg, "udp": cmd_udp,
     "spray": cmd_spray}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
