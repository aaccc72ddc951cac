#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Churn of the p3 qdisc under traffic, run as root inside the selftest VM.

Eight flows send all along (six bulk TCP connections in the least urgent
band, one UDP flow re-tagged between bands, and an urgent UDP probe whose
every datagram's arrival the receiver timestamps). Meanwhile:

  cycles   add / change / replace / del of p3, through `tc -batch`, at
           the root and under tbf, with bands, limits, rates and tag
           sources varied so that queued packets are folded, pushed out
           and re-paced;
  reloads  delete the qdisc, rmmod sch_p3, modprobe, add it back: the
           flows go through the device's default qdisc meanwhile;
  flows    short flows: forwarded datagrams each to its own port (a flow
           per 5-tuple, keyed by hash) and local UDP sockets that send
           once and close (keyed by socket), while the qdisc is changed
           now and then; once they have expired, a wave of new flows,
           whose lookups run the GC, must leave none of them (xstats
           `flows`, the p3_flow slab after a shrink).

Checks, in numbers: the kernel logs no report; the probe never stops for
more than a second (--max-gap; the debug kernel's pass allows 3) around
any batch of changes or any reload (the gap
between two arrivals, measured at the receiver); after the wave, xstats
counts no flow but the wave's and the churn's, and the p3_flow slab no
more than those above its baseline; on a debug
kernel, kmemleak finds nothing that points at sch_p3 or the qdisc layer.

  selftests/vm-run -- selftests/p3_churn.py [--cycles N] [--reloads N]
      [--flows N] [--socket-flows N] [--max-gap SECONDS] [--prefix P]

The defaults are the CI-sized run of `make check` (stock kernels, and the
debug kernel's --quick pass); `make check-debug` runs --cycles 1000
--reloads 100 --flows 100000 --socket-flows 2000.
"""
import argparse
import bisect
import os
import socket
import struct
import subprocess
import sys
import threading
import time

from p3lib import (PORT, RADDR, RCV, SDEV, SND, Check, Sink, Tap, p3t,
                   router, sh, stop_procs, tc, tc_batch, teardown, topology)
from p3_nlfuzz import KernelReports, decode_xstats, in_netns, Rtnl

PROBE_PORT = 5301
# kmod/sch_p3.c: the most idle flows one GC pass frees (P3_GC_BATCH).
GC_BATCH = 8
PROBE_PPS = 200
# A change may hold traffic up this long, no longer (--max-gap). The
# debug kernel asks for more: there, grafting a qdisc waits out RCU grace
# periods under KASAN and lockdep in an emulator that shares its core
# with another guest, and such a wait reached 887 ms with nothing wrong
# in sch_p3. The stall this check is for, a pacer or watchdog left
# pointing seconds ahead, lasts far longer than either bound.
MAX_GAP = 1.0
# The short flows' pace: below what the probe and the datagrams send
# together, so that the bulk flows' packets always wait and p3 never
# empties; each datagram then waits and needs a flow.  One that found p3
# empty would leave without one (p3_hold_lone()), and the test counts
# flows.  At 20 Mbit/s the bulk flows, cut back by the changes to limit
# 8, left p3 empty for all but 428 of 5,000 datagrams on 6.1 under TCG,
# and 758 on the debug kernel, which sprayed 100 a second. At 200 kbit/s
# (the probe alone sends 170) the debug kernel, alone on a slow host,
# still made only 4,706: its guest stalls for up to 0.9 s, and the
# pacer's credit then empties the queue. At 100 kbit/s it made 5,212
# and 5,222, and 6.1 5,085.
SHORT_FLOWS_RATE = "100kbit"


class Probe:
    """An urgent UDP flow from the sender host to the receiver host; the
    receiver records the CLOCK_MONOTONIC arrival time of every datagram."""

    def __init__(self, max_gap, pps=PROBE_PPS, tag=1):
        self.window = max_gap
        with in_netns(RCV):
            self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.rx.bind(("0.0.0.0", PROBE_PORT))
        with in_netns(SND):
            self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.tx.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, tag)
        self.rx.settimeout(0.2)
        self.arrivals = []
        self.sent = 0
        self.interval = 1.0 / pps
        self.stop = False
        self.threads = [threading.Thread(target=self._send, daemon=True),
                        threading.Thread(target=self._recv, daemon=True)]
        for t in self.threads:
            t.start()

    def _send(self):
        nxt = time.monotonic()
        seq = 0
        while not self.stop:
            try:
                self.tx.sendto(struct.pack("!I", seq) + b"\0" * 60,
                               (RADDR, PROBE_PORT))
            except OSError:
                pass    # a full qdisc or none at all: try the next one
            seq += 1
            self.sent = seq
            nxt += self.interval
            d = nxt - time.monotonic()
            if d > 0:
                time.sleep(d)
            else:
                nxt = time.monotonic()

    def _recv(self):
        while not self.stop:
            try:
                self.rx.recv(2048)
            except socket.timeout:
                continue
            except OSError:
                return
            self.arrivals.append(time.monotonic())

    def max_gap(self, t0, t1):
        """Longest time without an arrival in [t0, t1 + window], counting
        from the last arrival before t0."""
        a = self.arrivals
        end = t1 + self.window
        i = max(0, bisect.bisect_left(a, t0) - 1)
        j = bisect.bisect_right(a, end)
        pts = a[i:j]
        if not pts:
            return end - t0
        gaps = [y - x for x, y in zip(pts, pts[1:])]
        # Still silent at the end of the window?
        gaps.append(min(end, time.monotonic()) - pts[-1])
        return max(gaps)

    def close(self):
        self.stop = True
        for t in self.threads:
            t.join(timeout=5)
        self.rx.close()
        self.tx.close()


P3_OPTS = [
    "bands 8 rate 20mbit",
    "bands 4 limit 300 tag priority",
    "bands 16 rate 30mbit quantum 3028",
    "bands 2 default 0 limit 50 rate 10mbit",
    "bands 64 tag dscp memory 1048576",
    "bands 8 tag mark limit 1000 rate 40mbit",
]


def cycle_lines(i, d=SDEV):
    """One add/change/replace/del cycle; every third one is under tbf."""
    o = [P3_OPTS[(i + k) % len(P3_OPTS)] for k in range(3)]
    if i % 3 == 2:
        return [
            f"qdisc add dev {d} root handle 1: tbf rate 20mbit burst 32k "
            "latency 100ms",
            f"qdisc add dev {d} parent 1:1 handle 10: p3 {o[0]}",
            f"qdisc change dev {d} parent 1:1 handle 10: p3 {o[1]}",
            f"qdisc replace dev {d} parent 1:1 handle 10: p3 {o[2]}",
            f"qdisc del dev {d} parent 1:1 handle 10:",
            f"qdisc del dev {d} root",
        ]
    return [
        f"qdisc add dev {d} root handle 1: p3 {o[0]}",
        f"qdisc change dev {d} root handle 1: p3 {o[1]}",
        f"qdisc replace dev {d} root handle 1: p3 {o[2]}",
        f"qdisc del dev {d} root",
    ]


def slab_objects():
    """Live objects of the p3_flow slab after a shrink (its own cache: the
    VM boots with slab_nomerge); None without the sysfs file."""
    base = "/sys/kernel/slab/p3_flow"
    try:
        with open(f"{base}/shrink", "w") as f:
            f.write("1")
        with open(f"{base}/objects") as f:
            return int(f.read().split()[0])
    except OSError:
        return None


def p3_xstats(nl, ifindex):
    for q in nl.qdiscs(ifindex):
        if q["kind"] == "p3":
            return decode_xstats(q["xstats"])
    return None


def test_cycles(args, chk, probe):
    per = args.batch
    worst, worst_at, failed, errs = 0.0, None, 0, []
    sh(f"tc qdisc del dev {SDEV} root", ns=SND, check=False)
    t_all = time.monotonic()
    done = commands = 0
    while done < args.cycles:
        n = min(per, args.cycles - done)
        lines = []
        for i in range(done, done + n):
            lines += cycle_lines(i)
        commands += len(lines)
        t0 = time.monotonic()
        rc, e = tc_batch(lines)
        t1 = time.monotonic()
        if rc:
            failed += 1
            errs += e[:2]
        gap = probe.max_gap(t0, t1)
        if gap > worst:
            worst, worst_at = gap, done
        done += n
    # The last window must have closed before its gap can be judged.
    time.sleep(args.max_gap)
    gap = probe.max_gap(t1, t1)
    worst = max(worst, gap)
    took = time.monotonic() - t_all
    chk.note(f"{args.cycles} cycles ({commands} tc commands) in {took:.1f} s"
             f", batches of {per}; longest "
             f"probe gap {worst * 1e3:.0f} ms (batch at cycle {worst_at})")
    chk.expect(failed == 0, f"{failed} batches had failing commands: {errs}")
    chk.expect(worst <= args.max_gap,
               f"the probe stopped for {worst:.2f} s (> {args.max_gap} s)")
    return took


def test_reloads(args, chk, probe):
    worst, gaps, fails = 0.0, [], []
    t_all = time.monotonic()
    add = f"tc qdisc add dev {SDEV} root handle 1: p3 bands 8 tag priority rate 20mbit"
    for i in range(args.reloads):
        t0 = time.monotonic()
        # One shell per cycle: every exec costs under emulation.
        r = subprocess.run(
            ["sh", "-c",
             f"ip netns exec {SND} tc qdisc del dev {SDEV} root 2>/dev/null;"
             " rmmod sch_p3 && modprobe sch_p3 && "
             f"ip netns exec {SND} {add}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=120)
        t1 = time.monotonic()
        if r.returncode:
            fails.append(f"cycle {i}: {r.stdout.strip()}")
            sh("modprobe sch_p3", check=False)
        g = probe.max_gap(t0, t1)
        gaps.append(g)
        worst = max(worst, g)
    time.sleep(args.max_gap)
    worst = max(worst, probe.max_gap(t1, t1))
    took = time.monotonic() - t_all
    gaps.sort()
    chk.note(f"{args.reloads} unload/reload cycles in {took:.1f} s; probe "
             f"gap median {gaps[len(gaps) // 2] * 1e3:.0f} ms, "
             f"max {worst * 1e3:.0f} ms" if gaps else "no reloads")
    chk.expect(not fails, f"{len(fails)} cycles failed: {fails[:3]}")
    chk.expect(worst <= args.max_gap,
               f"the probe stopped for {worst:.2f} s (> {args.max_gap} s)")
    return took


def local_flows(count):
    """@count UDP sockets in the sender host, each sends one datagram and
    closes: a flow per socket."""
    code = ("import socket\n"
            f"for i in range({count}):\n"
            "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"    s.sendto(b'x' * 32, ('{RADDR}', 9))\n"
            "    s.close()\n")
    subprocess.run(["ip", "netns", "exec", SND, sys.executable, "-c", code],
                   check=True, timeout=1800)


def test_short_flows(args, chk, probe, nl, ifindex):
    router()
    tc(f"qdisc replace dev {SDEV} root handle 1: p3 bands 8 tag priority "
       f"rate {SHORT_FLOWS_RATE}")
    # Idle flows of the earlier tests may stay until new flows' lookups
    # free them: the baseline is taken now, and the wave below frees them.
    time.sleep(2.5)
    base = slab_objects()
    x0 = p3_xstats(nl, ifindex)
    t0 = time.monotonic()
    stop = threading.Event()

    def changer():
        # limit 8 is below what the six bulk flows keep queued (two
        # packets each at least, by TCP small queues): from the start, and
        # every other half second, the qdisc overflows with thousands of
        # flows in its table, and each change lowers the limit under a
        # queue.
        opts = (f"bands 4 rate {SHORT_FLOWS_RATE} limit 8",
                f"bands 8 rate {SHORT_FLOWS_RATE}")
        k = 0
        while True:
            tc_batch([f"qdisc change dev {SDEV} root handle 1: p3 "
                      f"{opts[k % 2]}"])
            k += 1
            if stop.wait(0.5):
                break
    th = threading.Thread(target=changer, daemon=True)
    th.start()
    try:
        spray = p3t(["spray", RADDR, "--count", str(args.flows)],
                    ns="p3rtr", wait=False)
        if args.socket_flows:
            local_flows(args.socket_flows)
        spray.wait(timeout=3600)
    finally:
        stop.set()
        th.join(timeout=30)
    t1 = time.monotonic()
    tc(f"qdisc change dev {SDEV} root handle 1: p3 bands 8 tag priority rate 20mbit")
    x1 = p3_xstats(nl, ifindex)
    # The GC runs inline: once they have expired (P3_FLOW_EXPIRE, 2 s),
    # each new flow's lookup frees up to GC_BATCH of the idle ones and
    # recycles one more.  A wave of new flows big enough to free them all
    # twice over; the churn's eight flows keep p3 from emptying.
    time.sleep(2.5)
    wave = x1["flows"] // GC_BATCH * 2 + 200
    p3t(["spray", RADDR, "--count", str(wave), "--first-port", "20000"],
        ns="p3rtr", wait=True)
    x2 = p3_xstats(nl, ifindex)
    end = slab_objects()
    created = x1["flows_created"] - x0["flows_created"]
    # A closed socket's memory comes back for the next one, and with it
    # its key: socket flows may reuse an idle flow, so only the forwarded
    # ones (a hash each) are counted exactly.
    want = args.flows
    chk.note(f"{args.flows} forwarded + {args.socket_flows} socket flows in "
             f"{t1 - t0:.1f} s; flows created {created}, live after "
             f"{x1['flows']}, after a wave of {wave} more {x2['flows']}; gc "
             f"{x2['flows_gc'] - x0['flows_gc']}; drops_limit "
             f"{x2['drops_limit'] - x0['drops_limit']}; slab objects "
             f"{base} -> {end}; longest probe gap "
             f"{probe.max_gap(t0, t1) * 1e3:.0f} ms")
    chk.expect(created >= want * 0.999,
               f"only {created} flows created of {want}")
    chk.expect(x2["drops_limit"] > x0["drops_limit"],
               "the queue never overflowed: the drop path went untested")
    # Left: the wave's own flows, and the churn's eight.
    chk.expect(x2["flows"] <= wave + 8,
               f"{x2['flows']} flows left after the wave of {wave}")
    chk.expect(x2["flows_gc"] - x0["flows_gc"] >= created - 8,
               "idle flows not garbage-collected")
    if base is not None:
        chk.expect(end <= base + wave + 8,
                   f"p3_flow slab objects {end} above baseline {base} and "
                   f"the wave")
    sh("ip netns del p3rtr")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--batch", type=int, default=10,
                    help="cycles per tc -batch run")
    ap.add_argument("--reloads", type=int, default=5)
    ap.add_argument("--flows", type=int, default=5000,
                    help="forwarded short flows")
    ap.add_argument("--socket-flows", type=int, default=200,
                    help="local short flows, a socket each")
    ap.add_argument("--max-gap", type=float, default=MAX_GAP,
                    help="seconds the urgent probe may stop for "
                    f"(default {MAX_GAP})")
    ap.add_argument("--prefix", default="")
    args = ap.parse_args()
    tap = Tap(args.prefix)
    print(f"# churn: kernel {os.uname().release}; cycles {args.cycles}, "
          f"reloads {args.reloads}, flows {args.flows} + "
          f"{args.socket_flows}", flush=True)
    sh("modprobe sch_p3")
    klog = KernelReports()
    topology()
    nl = Rtnl(SND)
    with in_netns(SND):
        ifindex = socket.if_nametoindex(SDEV)
    tc(f"qdisc replace dev {SDEV} root handle 1: p3 bands 8 tag priority rate 20mbit")
    sink = Sink()
    flows = [
        p3t(["bulk", RADDR, "--port", str(PORT), "--conns", "6",
             "--seconds", "100000", "--tag", "prio:8", "--group", "1"],
            wait=False),
        p3t(["udp", RADDR, "--port", str(PORT), "--count", "100000000",
             "--pps", "100", "--tags", "prio:2,prio:7", "--switch-every",
             "3", "--group", "2"], wait=False),
    ]
    probe = Probe(args.max_gap)
    time.sleep(1.0)
    tests = [("cycles", lambda c: test_cycles(args, c, probe)),
             ("reloads", lambda c: test_reloads(args, c, probe)),
             ("short_flows", lambda c: test_short_flows(args, c, probe, nl,
                                                        ifindex))]
    try:
        for name, fn in tests:
            chk = Check()
            try:
                fn(chk)
            except Exception as e:  # a crashed test is a failed test
                chk.failures.append(f"exception: {e!r}")
            for line in klog.new():
                chk.failures.append(f"kernel log: {line}")
            tap.result(not chk.failures, f"churn: {name}",
                       "\n".join(chk.notes + chk.failures))
    finally:
        probe.close()
        stop_procs(flows)
        sink.stop()
        nl.close()
        teardown()
    # The debug kernel's kmemleak scans come after the suite, from
    # selftests/debug-kernel/guest.sh.
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
