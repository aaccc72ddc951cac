#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Preemption latency: how long an urgent message takes while bulk TCP
flows saturate a shaped link, under pfifo, pfifo_fast, prio, skbprio, fq
and p3.  Runs as root inside the VM (bench/preempt/run.sh boots it):

  selftests/vm-run --kernel 6.12 -- bench/preempt/preempt.py --out DIR

The topology is the selftests' (selftests/p3lib.py): hosts p3snd and p3rcv
joined by veth s0 <-> r0, receive work steered to one CPU.  s0's egress is
the bottleneck: `tbf rate R` at the root with the compared qdisc as its
child, or p3's own `rate R` at the root.

For every qdisc and number of bulk flows, one session:
  1. the qdisc is installed and a long-lived urgent connection is opened
     on the idle link (as a training job opens its channels at start);
  2. N bulk flows start (tagged least urgent) and run for a warm-up;
  3. a UDP socket re-tagged urgent/bulk every 5 datagrams counts intra-flow
     reordering (the trick of selftests/p3_traffic.py);
  4. urgent messages of each size go out, alternately on a fresh connection
     and on the long-lived one, and their completion time is recorded
     (first payload byte written -> 1-byte reply received; the handshake
     of a fresh connection is timed separately).
Then TCP counters (nstat) and the bulk goodput seen by the sink close the
session.  With --tsq, a final experiment traces one urgent message behind
a FIFO (TCP_INFO of the urgent socket, the queue's backlog, the size of
the packets each flow hands to the qdisc) to explain its slowness.

Everything runs in this one process and its forked children (a fresh
python3 takes seconds to start under TCG): the sink and the urgent server
are children in p3rcv, the bulk senders a child in p3snd; urgent and UDP
sockets are made here after setns(2) into p3snd.  Raw results go to
DIR/results.json; bench/preempt/report.py turns them into the report.
Progress goes to stderr.
"""
import argparse
import json
import math
import os
import platform
import re
import signal
import socket
import struct
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "selftests"))

sys.path.insert(0, HERE)

import p3lib  # noqa: E402
import p3t    # noqa: E402
from nsutil import (InNetns, Qstats, log, netstat,  # noqa: E402
                    provenance, run, save_results, setns, tc_batch)
from p3lib import PORT, RADDR, RCV, SDEV, SND  # noqa: E402

UPORT = PORT + 1        # the urgent server; bulk and UDP go to the sink
TCP_INFO_FMT = struct.Struct("=8B24I4Q6IQ3Q2I2Q2I")
# Wire bytes of a TCP segment beyond its payload: Ethernet 14, IPv4 20,
# TCP with timestamps 32.  MSS is 1448 on a 1500-byte MTU.
HDR_BYTES, MSS = 66, 1448
TBF_BURST = 70000       # one 64 KB GSO packet (68,130 wire bytes) fits


def tcp_info(sock):
    """The TCP_INFO fields this benchmark looks at."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO,
                          TCP_INFO_FMT.size)
    v = TCP_INFO_FMT.unpack(raw.ljust(TCP_INFO_FMT.size, b"\0"))
    u32 = v[8:32]
    u64 = v[32:36]
    tail = v[36:]
    return {"mss": u32[2], "unacked": u32[4], "retrans": u32[7],
            "rtt_us": u32[15], "cwnd": u32[18],
            "total_retrans": u32[23], "pacing_rate": u64[0],
            "bytes_acked": u64[2], "notsent": tail[2],
            "min_rtt_us": tail[3], "data_segs_out": tail[5],
            "delivery_rate": tail[6], "bytes_sent": tail[12],
            "reord_seen": tail[15]}


# ------------------------------------------------------------- children

class Child:
    """A forked process that entered netns @ns and runs fn(ready_fd)."""

    def __init__(self, ns, fn, *args):
        r, w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            code = 0
            try:
                os.close(r)
                setns(ns)
                fn(w, *args)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r) as f:
            line = f.readline().strip()
        if line != "ready":
            raise RuntimeError(f"child {fn.__name__} did not start")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def ready(w):
    os.write(w, b"ready\n")
    os.close(w)


def sink_main(w, out):
    """p3t's sink (bulk TCP and UDP, per group and 100 ms bin)."""
    # A bulk sender that aborts its connections makes the sink's reader
    # threads die on ECONNRESET: expected, not worth a traceback.
    threading.excepthook = lambda args: None
    sink = p3t.Sink(PORT)

    def finish(*_):
        sink.stop = True
    signal.signal(signal.SIGTERM, finish)
    ready(w)
    sink.run()
    with open(out, "w") as f:
        json.dump(sink.report(), f)


def userver_main(w):
    """Urgent server: any number of messages per connection, each an
    8-byte length and that many bytes, answered by one byte."""
    threading.excepthook = lambda args: None
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", UPORT))
    ls.listen(128)
    ready(w)

    def serve(conn):
        buf = bytearray(1 << 20)
        with conn:
            while True:
                hdr = p3t.recv_exact(conn, 8)
                if hdr is None:
                    return
                left = struct.unpack("!Q", hdr)[0]
                while left:
                    n = conn.recv_into(buf, min(len(buf), left))
                    if not n:
                        return
                    left -= n
                conn.sendall(b"K")
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def bulk_main(w, conns, tag, group):
    """N bulk TCP connections in p3t's stream format, sending until
    SIGTERM; then reset (SO_LINGER 0) so no send buffer drains into the
    next session."""
    socks = []
    for _ in range(conns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        p3t.tag_socket(s, tag)
        for _ in range(50):
            try:
                s.connect((RADDR, PORT))
                break
            except ConnectionRefusedError:
                time.sleep(0.1)
        s.sendall(p3t.HDR.pack(p3t.MAGIC, b"B", group, 0))
        s.settimeout(0.5)
        socks.append(s)
    stop = threading.Event()

    def finish(*_):
        stop.set()
    signal.signal(signal.SIGTERM, finish)

    def pump(s):
        buf = b"\0" * (1 << 16)
        while not stop.is_set():
            try:
                s.send(buf)
            except socket.timeout:
                pass
            except OSError:
                return
    threads = [threading.Thread(target=pump, args=(s,), daemon=True)
               for s in socks]
    for t in threads:
        t.start()
    ready(w)
    while not stop.wait(0.2):
        pass
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                     struct.pack("ii", 1, 0))
        s.close()


# ------------------------------------------------------------- qdiscs

# Each qdisc is tagged the way its own users would tag: the Linux
# convention (SO_PRIORITY 6 = TC_PRIO_INTERACTIVE, band 0 of the default
# priomap of pfifo_fast, prio and fq; 2 = TC_PRIO_BULK, band 2) for the
# stock qdiscs -- skbprio serves the higher priority first, so 6 beats 2
# there too -- and libp3's levels for p3 (level 0 = tag 1 = band 0,
# level 7 = tag 8 = band 7).
LINUX_TAGS = ("prio:6", "prio:2")
P3_TAGS = ("prio:1", "prio:8")
# The same bands as prio's, strict, each over fq_codel: what a user of the
# stock qdiscs would build for strict priority with fair, AQM-managed
# bands (ets's classes 10:1..10:3).
ETS = ("ets bands 3 strict 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1",
       [f"parent 10:{b} fq_codel" for b in (1, 2, 3)])
QDISCS = {
    # name: (child of a tbf root, with the qdiscs beneath it if a tuple;
    # None: own root; urgent/bulk tags)
    "pfifo": ("pfifo", LINUX_TAGS),
    "pfifo_fast": ("pfifo_fast", LINUX_TAGS),
    "prio": ("prio bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1",
             LINUX_TAGS),
    "skbprio": ("skbprio", LINUX_TAGS),
    # 6.9+: three bands by priority, weighted round robin (priomap and
    # weights at their defaults, which Debian 12's tc cannot set).
    "fq": ("fq", LINUX_TAGS),
    "ets": (ETS, LINUX_TAGS),
    "p3-tbf": ("p3 bands 8 tag priority", P3_TAGS),
    "p3-rate": (None, P3_TAGS),
}


def uninstall():
    tc_batch(SND, [f"qdisc del dev {SDEV} root"], force=True)


def install(name, rate):
    child, _ = QDISCS[name]
    uninstall()
    if child is None:
        tc_batch(SND, [f"qdisc add dev {SDEV} root handle 10: p3 bands 8 tag priority "
                       f"rate {rate}"])
        return
    child, below = child if isinstance(child, tuple) else (child, [])
    tc_batch(SND, [f"qdisc add dev {SDEV} root handle 1: tbf rate {rate} "
                   f"burst {TBF_BURST} latency 1s",
                   f"qdisc add dev {SDEV} parent 1:1 handle 10: {child}"] +
             [f"qdisc add dev {SDEV} {q}" for q in below])


def p3_xstats():
    for q in json.loads(run(SND, ["tc", "-s", "-j", "qdisc", "show", "dev",
                                  SDEV])):
        if q.get("kind") == "p3":
            return {k: v for k, v in q.items() if isinstance(v, int)}
    return {}


def set_sysctl(ns, name, value):
    with InNetns(ns):
        with open("/proc/sys/" + name.replace(".", "/"), "w") as f:
            f.write(str(value))


# ------------------------------------------------------------- urgent side

class Urgent:
    """Urgent messages on fresh connections or on one long-lived one, and
    the re-tagged UDP socket, all in p3snd."""

    def __init__(self, sizes):
        self.msgs = {s: struct.pack("!Q", s) + b"\x55" * s for s in sizes}
        self.long = None
        self.tag = None

    def _socket(self, tag):
        with InNetns(SND):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        p3t.tag_socket(s, tag)
        # As libp3 does: a message's last partial segment must not wait
        # for the ACK of the one before (Nagle).
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def open_long(self, tag):
        self.close_long()
        self.tag = tag
        self.long = self._socket(tag)
        self.long.settimeout(10)
        self.long.connect((RADDR, UPORT))

    def close_long(self):
        if self.long:
            self.long.close()
            self.long = None

    def send(self, mode, size, cap, trace=None):
        """One message; returns a record with its completion time."""
        rec = {"mode": mode, "size": size}
        t_start = time.monotonic()
        if mode == "fresh":
            s = self._socket(self.tag)
            s.settimeout(cap)
            try:
                s.connect((RADDR, UPORT))
            except OSError as e:
                s.close()
                rec.update(t=None, censored=True, error=str(e))
                return rec
            rec["connect"] = time.monotonic() - t_start
        else:
            s = self.long
        msg = self.msgs[size]
        sampler = trace(s) if trace else None
        t0 = time.monotonic()
        try:
            s.settimeout(cap)
            s.sendall(msg)
            s.settimeout(max(0.01, cap - (time.monotonic() - t0)))
            ok = s.recv(1) == b"K"
            rec["t"] = time.monotonic() - t0
            rec["censored"] = not ok
        except OSError:
            rec.update(t=time.monotonic() - t0, censored=True)
        if sampler:
            sampler.stop()
            rec["trace"] = sampler.samples
        info = tcp_info(s)
        rec["info"] = {k: info[k] for k in ("min_rtt_us", "reord_seen",
                                            "total_retrans", "cwnd",
                                            "pacing_rate")}
        if mode == "fresh" or rec["censored"]:
            if rec["censored"]:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, 0))
            s.close()
            if mode == "long":
                # A cut connection is replaced; it is no longer "long-
                # lived on an idle link", which the record says.
                self.long = None
                rec["reopened"] = True
                self.long = self._socket(self.tag)
                self.long.settimeout(30)
                self.long.connect((RADDR, UPORT))
        return rec

    def udp_retag(self, tags, group, count, pps, switch=5):
        """p3_traffic's reorder probe: one UDP socket, re-tagged between
        the urgent and the bulk tag every @switch datagrams."""
        with InNetns(SND):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        pad = b"\0" * (200 - p3t.DGRAM.size)
        nxt = time.monotonic()
        for seq in range(count):
            if seq % switch == 0:
                p3t.tag_socket(s, tags[(seq // switch) % 2])
            s.sendto(p3t.DGRAM.pack(group, seq) + pad, (RADDR, PORT))
            nxt += 1.0 / pps
            d = nxt - time.monotonic()
            if d > 0:
                time.sleep(d)
        s.close()


class Sampler:
    """Samples TCP_INFO of one socket and the qdisc counters every @period
    seconds in a thread, while a message is in flight."""

    def __init__(self, sock, qstats, period=0.02):
        self.sock, self.qstats, self.period = sock, qstats, period
        self.samples = []
        self.done = threading.Event()
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.is_set():
            t = time.monotonic() - self.t0
            try:
                info = tcp_info(self.sock)
            except OSError:
                break
            q = self.qstats.read()
            self.samples.append({"t": t, **info,
                                 "backlog": q.get("child", {}).get("backlog"),
                                 "qlen": q.get("child", {}).get("qlen")})
            self.done.wait(self.period)

    def stop(self):
        self.done.set()
        self.thread.join()


class Capture:
    """Sizes of the packets s0 hands its driver, per TCP destination port,
    from a packet socket.  Qdisc and filter counters cannot tell them:
    they count a GSO packet as its segments.  The driver sees what the
    qdisc dequeued, whole (veth takes GSO packets; tbf's burst fits one)."""

    def __init__(self):
        with InNetns(SND):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                      socket.htons(3))      # ETH_P_ALL
        self.sock.bind((SDEV, 3))
        self.sock.settimeout(0.1)
        self.ports = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        buf = bytearray(128)
        while not self.done.is_set():
            try:
                n, addr = self.sock.recvfrom_into(buf, len(buf),
                                                  socket.MSG_TRUNC)
            except socket.timeout:
                continue
            # Outgoing IPv4 TCP only.
            if addr[2] != socket.PACKET_OUTGOING or buf[12:14] != b"\x08\0" \
                    or buf[23] != 6:
                continue
            ihl = (buf[14] & 15) * 4
            tcp = 14 + ihl
            dport = int.from_bytes(buf[tcp + 2:tcp + 4], "big")
            payload = n - tcp - (buf[tcp + 12] >> 4) * 4
            if payload <= 0:
                continue
            p = self.ports.setdefault(dport, {"skbs": 0, "bytes": 0,
                                              "segs": 0})
            p["skbs"] += 1
            p["bytes"] += n
            p["segs"] += -(-payload // MSS)

    def stop(self):
        self.done.set()
        self.thread.join()
        self.sock.close()
        return self.ports


# ------------------------------------------------------------- sessions

REORDER_KEYS = ("TcpExtTCPSACKReorder", "TcpExtTCPTSReorder",
                "TcpExtTCPRenoReorder")
SND_KEYS = REORDER_KEYS + ("TcpRetransSegs", "TcpExtTCPTimeouts",
                           "TcpExtTCPLossProbes", "TcpExtTCPSpuriousRTOs",
                           "TcpOutSegs")
RCV_KEYS = ("TcpExtTCPOFOQueue", "TcpInSegs")


def counters_delta(before, after, keys):
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys}


def link_rate(qs, seconds):
    """Bytes/s leaving the root qdisc (what the shaper lets through).  Each
    reading is stamped with the middle of the time it took."""
    def read():
        t0 = time.monotonic()
        b = qs.read()["root"]["bytes"]
        return b, (t0 + time.monotonic()) / 2
    a, ta = read()
    time.sleep(seconds)
    b, tb = read()
    return (b - a) / (tb - ta)


def session(cfg, qname, nbulk, group, urgent, qs):
    """One qdisc with @nbulk bulk flows: returns its record."""
    _, (utag, btag) = QDISCS[qname]
    install(qname, cfg.rate)
    rec = {"qdisc": qname, "bulk": nbulk, "group": group,
           "tags": {"urgent": utag, "bulk": btag}, "messages": []}
    urgent.open_long(utag)
    snd0, rcv0 = netstat(SND), netstat(RCV)
    q0 = qs.read()
    bulk = Child(SND, bulk_main, nbulk, btag, group)
    time.sleep(cfg.warmup - 2.0)
    rec["warm_window"] = [time.monotonic()]
    rec["link_Bps"] = link_rate(qs, 2.0)
    rec["warm_window"].append(time.monotonic())
    urgent.udp_retag((utag, btag), 128 + group, cfg.udp_count, cfg.udp_pps)
    time.sleep(0.3)
    rec["window"] = [time.monotonic()]
    cells = {(s, m): {"n": 0, "censored": 0, "spent": 0.0}
             for s in cfg.sizes for m in ("fresh", "long")}
    for rep in range(cfg.reps):
        for size in cfg.sizes:
            for mode in ("fresh", "long"):
                c = cells[(size, mode)]
                if c["censored"] >= 2 or (c["n"] >= cfg.min_reps and
                                           c["spent"] >= cfg.cell_budget):
                    continue
                t = time.monotonic()
                m = urgent.send(mode, size, cfg.cap)
                c["spent"] += time.monotonic() - t
                c["n"] += 1
                c["censored"] += m["censored"]
                rec["messages"].append(m)
                time.sleep(cfg.gap)
    rec["window"].append(time.monotonic())
    rec["urgent_bytes"] = sum(m["size"] for m in rec["messages"]
                              if not m["censored"])
    q1 = qs.read()
    bulk.stop()
    urgent.close_long()
    rec["snd"] = counters_delta(snd0, netstat(SND), SND_KEYS)
    rec["rcv"] = counters_delta(rcv0, netstat(RCV), RCV_KEYS)
    rec["drops"] = (q1.get("child", q1["root"])["drops"] -
                    q0.get("child", q0["root"])["drops"])
    rec["backlog_end"] = q1.get("child", q1["root"])["backlog"]
    if qname.startswith("p3"):
        rec["xstats"] = p3_xstats()
    uninstall()
    time.sleep(0.5)
    return rec


# ------------------------------------------------------------- TSQ

def bulk_snapshot():
    """`ss -tin` of the bulk connections: pacing rate, cwnd, minrtt."""
    out = run(SND, ["ss", "-tinH", "dst", RADDR, "dport", "=", f":{PORT}"])
    flows = []
    for line in out.split("\n"):
        m = re.search(r"pacing_rate (\S+)", line)
        if not m:
            continue
        f = {"pacing_rate": m[1]}
        for key in ("cwnd", "unacked", "minrtt", "rtt", "mss"):
            mm = re.search(rf"\b{key}:([\d.]+)", line)
            if mm:
                f[key] = float(mm[1])
        flows.append(f)
    return flows


def tsq_experiment(cfg, urgent, qs):
    """The design brief's mystery: 8 bulk flows behind a pfifo child of a
    tbf; one 512 KB urgent message, fresh and long-lived, with TCP_INFO
    and the backlog traced, and the packet size each flow hands to the
    qdisc counted.  Then the same with tcp_tso_rtt_log=0 (no TSO-size
    bonus for flows whose min RTT is short) and with GSO off."""
    size, nbulk = 512 * 1024, 8
    results = []
    variants = [("fresh", "fresh", None), ("long-lived", "long", None),
                ("fresh, tcp_tso_rtt_log=0", "fresh", "rttlog"),
                ("fresh, gso_max_segs 2", "fresh", "segs2"),
                ("fresh, ethtool gso/tso off", "fresh", "nogso")]
    urgent.msgs.setdefault(size, struct.pack("!Q", size) + b"\x55" * size)
    for label, mode, knob in variants:
        log(f"tsq: pfifo, {nbulk} bulk, 512 KB {label}")
        install("pfifo", cfg.rate)
        if knob == "rttlog":
            set_sysctl(SND, "net.ipv4.tcp_tso_rtt_log", 0)
        if knob == "nogso":
            run(SND, ["ethtool", "-K", SDEV, "tso", "off", "gso", "off"])
        if knob == "segs2":
            run(SND, ["ip", "link", "set", "dev", SDEV, "gso_max_segs", "2"])
        urgent.open_long(LINUX_TAGS[0])
        bulk = Child(SND, bulk_main, nbulk, LINUX_TAGS[1], 250)
        time.sleep(cfg.warmup + 1.0)
        snd0 = netstat(SND)
        rec = {"label": label, "bulk": nbulk, "size": size,
               "bulk_flows": bulk_snapshot()}
        cap = Capture()
        m = urgent.send(mode, size, cfg.tsq_cap,
                        trace=lambda s: Sampler(s, qs))
        ports = cap.stop()
        snd1 = netstat(SND)
        rec["after_flows"] = bulk_snapshot()
        rec["msg"] = m
        rec["snd"] = counters_delta(snd0, snd1, SND_KEYS)
        rec["skb"] = {"bulk": ports.get(PORT, {}),
                      "urgent": ports.get(UPORT, {})}
        bulk.stop()
        urgent.close_long()
        if knob == "rttlog":
            set_sysctl(SND, "net.ipv4.tcp_tso_rtt_log", 9)
        if knob == "nogso":
            run(SND, ["ethtool", "-K", SDEV, "tso", "on", "gso", "on"])
        if knob == "segs2":
            run(SND, ["ip", "link", "set", "dev", SDEV, "gso_max_segs",
                      "65535"])
        uninstall()
        log(f"tsq: {label}: {'>' if m['censored'] else ''}"
            f"{m['t'] or 0:.2f} s")
        results.append(rec)
        time.sleep(0.5)
    return results


# ------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for results")
    ap.add_argument("--rate", default="40mbit")
    ap.add_argument("--qdiscs", default=",".join(QDISCS))
    ap.add_argument("--bulk", default="1,4,16")
    ap.add_argument("--sizes", default="65536,262144,1048576")
    ap.add_argument("--reps", type=int, default=10,
                    help="messages per size and connection kind")
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--cell-budget", type=float, default=5.0,
                    help="seconds after which a size/kind stops at "
                    "--min-reps messages")
    ap.add_argument("--cap", type=float, default=10.0,
                    help="a message still incomplete after this many "
                    "seconds is cut and counted as censored")
    ap.add_argument("--gap", type=float, default=0.1)
    ap.add_argument("--warmup", type=float, default=2.5)
    ap.add_argument("--udp-count", type=int, default=600)
    ap.add_argument("--udp-pps", type=float, default=600)
    ap.add_argument("--tsq", action=argparse.BooleanOptionalAction,
                    default=True, help="run the TSQ experiment")
    ap.add_argument("--tsq-cap", type=float, default=40.0)
    ap.add_argument("--gso-max-segs", type=int, default=0,
                    help="cap s0's GSO packets at this many segments in "
                    "the sessions (a sensitivity check: the default, 0, "
                    "leaves the 64 KB GSO packets of a real TSO NIC)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 4 bulk flows, 256 KB, 3 messages")
    cfg = ap.parse_args()
    if cfg.quick:
        cfg.bulk, cfg.sizes, cfg.reps, cfg.min_reps = "4", "262144", 3, 2
        cfg.cap, cfg.cell_budget, cfg.warmup = 5.0, 2.0, 2.0
        cfg.udp_count, cfg.tsq = 300, False
    cfg.qdisc_list = cfg.qdiscs.split(",")
    for q in cfg.qdisc_list:
        if q not in QDISCS:
            ap.error(f"unknown qdisc {q}; known: {', '.join(QDISCS)}")
    cfg.bulk = [int(x) for x in str(cfg.bulk).split(",")]
    cfg.sizes = [int(x) for x in str(cfg.sizes).split(",")]
    os.makedirs(cfg.out, exist_ok=True)

    t_begin = time.monotonic()
    p3lib.sh("modprobe sch_p3")
    klog = p3lib.KernelLog()
    p3lib.topology(ipv6=False)
    sink_out = "/tmp/preempt-sink.json"
    sink = Child(RCV, sink_main, sink_out)
    userver = Child(RCV, userver_main)
    qs = Qstats(SND, SDEV)
    urgent = Urgent(cfg.sizes)
    res = {"kernel": platform.release(), "rate": cfg.rate,
           "rate_bps": p3lib.parse_rate(cfg.rate), "quick": cfg.quick,
           "tbf_burst": TBF_BURST, "cpus": os.cpu_count(),
           "gso_max_segs": cfg.gso_max_segs,
           **provenance(),
           "config": {k: v for k, v in vars(cfg).items()
                      if isinstance(v, (int, float, str, list, bool))},
           "qdiscs": {q: {"child": QDISCS[q][0], "tags": QDISCS[q][1]}
                      for q in cfg.qdisc_list},
           "sessions": [], "tsq": []}
    if cfg.gso_max_segs:
        run(SND, ["ip", "link", "set", "dev", SDEV, "gso_max_segs",
                  str(cfg.gso_max_segs)])
    total = len(cfg.qdisc_list) * len(cfg.bulk)
    group = 0
    try:
        for nbulk in cfg.bulk:
            for qname in cfg.qdisc_list:
                group += 1
                t = time.monotonic()
                rec = session(cfg, qname, nbulk, group, urgent, qs)
                res["sessions"].append(rec)
                meds = []
                for size in cfg.sizes:
                    for mode in ("fresh", "long"):
                        ts = sorted(m["t"] if not m["censored"] else math.inf
                                    for m in rec["messages"]
                                    if m["size"] == size and
                                    m["mode"] == mode)
                        med = ts[len(ts) // 2] if ts else math.nan
                        meds.append(f"{size >> 10}K/{mode[0]} "
                                    f"{med * 1e3:.0f}")
                log(f"[{group}/{total}] {qname}, {nbulk} bulk: link "
                    f"{rec['link_Bps'] * 8e-6:.1f} Mbit/s; median ms "
                    f"{', '.join(meds)} ({time.monotonic() - t:.0f} s)")
        if cfg.tsq:
            run(SND, ["ip", "link", "set", "dev", SDEV, "gso_max_segs",
                      "65535"])
            res["tsq"] = tsq_experiment(cfg, urgent, qs)
    finally:
        sink.stop()
        userver.stop(signal.SIGKILL)
        p3lib.teardown()
    with open(sink_out) as f:
        rep = json.load(f)
    for s in res["sessions"]:
        t0, t1 = s["window"]
        s["bulk_goodput_bps"] = p3lib.tcp_rate(rep, s["group"], t0, t1)
        s["udp"] = rep["udp"].get(str(128 + s["group"]),
                                  {"received": 0, "reordered": 0})
        s["udp"]["sent"] = cfg.udp_count
    return save_results(cfg.out, res, klog, t_begin)


if __name__ == "__main__":
    sys.exit(main())
