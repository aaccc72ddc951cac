#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Overload selftests of the p3 qdisc, run as root inside the selftest VM.

When less urgent traffic overflows the queue, p3 pushes it out to admit
more urgent packets.  These tests check two consequences:

  accounting   under tbf, htb, drr, hfsc and ets, every way a packet can
               be pushed out (another flow's packet, the sender's own
               flow's, the sender's own packet) leaves the parent's qlen,
               backlog and drops equal to p3's, and only a sender whose
               own packet was dropped gets an error (ENOBUFS); the
               packet a parent peeked at is never pushed out, nor is
               anything for a packet that cannot fit.
  goodput      an urgent TCP flow loses no packet and does not collapse
               (keeps half its goodput alone; the benchmark measures
               0.92-1.00) beside an untagged UDP flood (limit 200, the
               default limit, a memory cap) and beside 64 bulk TCP flows
               at a small limit: congestion is signalled only to the
               flow that lost a packet.

  selftests/vm-run -- selftests/p3_overload.py [-t NAME]... [--table]

--table also measures prio and skbprio in the same cases and prints the
Markdown table of docs/benchmarks.md (bench/overload/run.sh).
"""
import argparse
import json
import re
import subprocess
import sys
import time

from p3lib import (RADDR, RCV, RDEV, SDEV, SND, add_selection_args,
                   class_stats, level_tos, no_ipv6, qdisc_json, run_tests,
                   sh, tc, teardown, topology)

RATE = "20mbit"
URGENT_TOS = level_tos(0)    # band 0 under "tag dscp"
URGENT_PORT, BULK_PORT = 5201, 5202

# A sender that keeps its sockets: "NAME COUNT PRIO [SIZE]" on stdin sends
# COUNT datagrams of SIZE bytes of payload (default 86: 128 on the wire)
# from socket NAME with SO_PRIORITY PRIO and answers how many sendto()
# calls failed.  IP_RECVERR makes UDP report the
# ENOBUFS of a dropped packet instead of counting it in silence (and the
# receiver's port unreachable, in place of the next send: that one is
# sent again).
SENDER = r"""
import socket, sys
socks = {}
for line in sys.stdin:
    name, count, prio, *size = line.split()
    payload = bytes(int(size[0]) if size else 86)
    s = socks.get(name)
    if s is None:
        s = socks[name] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, 11, 1)  # IP_RECVERR
    s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, int(prio))
    errs = 0
    for _ in range(int(count)):
        while True:
            try:
                s.sendto(payload, (sys.argv[1], 9))
            except ConnectionRefusedError:
                continue    # the receiver's ICMP, reported instead of a send
            except OSError:
                errs += 1
            break
    print(errs, flush=True)
"""


class Sender:
    def __init__(self):
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", SND, sys.executable, "-c", SENDER,
             RADDR], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)

    def send(self, name, count, prio, size=86):
        """Returns how many of the @count datagrams failed to send."""
        self.proc.stdin.write(f"{name} {count} {prio} {size}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


# Parents of p3, each with one class 1:1 that holds p3 as 10:.  None of
# them shapes below p3's own pacer, so whatever p3 holds, the parent
# counts as its backlog too.
PARENTS = {
    "tbf": ["qdisc add dev {d} root handle 1: tbf rate 1gbit burst 1mb "
            "latency 1s"],
    "htb": ["qdisc add dev {d} root handle 1: htb default 1",
            "class add dev {d} parent 1: classid 1:1 htb rate 1gbit"],
    "drr": ["qdisc add dev {d} root handle 1: drr",
            "class add dev {d} parent 1: classid 1:1 drr",
            "filter add dev {d} parent 1: matchall classid 1:1"],
    "hfsc": ["qdisc add dev {d} root handle 1: hfsc default 1",
             "class add dev {d} parent 1: classid 1:1 hfsc ls m2 1gbit"],
    "ets": ["qdisc add dev {d} root handle 1: ets bands 1"],
}


_QDISC_RE = re.compile(
    r"^qdisc (?P<kind>\S+) .*?\n Sent \d+ bytes \d+ pkt \(dropped "
    r"(?P<drops>\d+),.*?\n backlog (?P<backlog>\d+)(?P<unit>[KM]?)b "
    r"(?P<qlen>\d+)p", re.M | re.S)
_UNIT = {"": 1, "K": 1024, "M": 1024 * 1024}


def counters(kind):
    """(qlen, backlog, drops) of the qdisc of @kind on the sender's link,
    from tc's text: iproute2 6.1 prints broken JSON for hfsc.  tc rounds
    a backlog within 16 bytes of a multiple of 1024 to "Kb": with every
    packet 128 bytes long, that is exact."""
    for m in _QDISC_RE.finditer(tc(f"-s qdisc show dev {SDEV}")):
        if m["kind"] == kind:
            return (int(m["qlen"]), int(m["backlog"]) * _UNIT[m["unit"]],
                    int(m["drops"]))
    raise RuntimeError(f"no {kind} qdisc on {SDEV}")


def accounting(chk, parent, p3_opts, fill):
    """Pushes packets out of a p3 under @parent in every way there is and
    compares the parent's counters with p3's after each step.  @fill
    datagrams overflow the queue @p3_opts allows."""
    no_ipv6()
    for cmd in PARENTS[parent]:
        tc(cmd.format(d=SDEV))
    # 8 bit/s: the first packet leaves, the rest stay for the whole test.
    tc(f"qdisc add dev {SDEV} parent 1:1 handle 10: p3 rate 8bit tag priority "
       f"{p3_opts}")
    snd = Sender()
    steps = [
        # (what, socket, datagrams, SO_PRIORITY, failures expected)
        ("bulk fills the queue", "bulk", fill, 8, 0),
        ("urgent pushes bulk out", "urgent", 5, 1, 0),
        ("bulk pushes its own flow out", "bulk", 5, 8, 0),
        ("a second bulk flow pushes the first out", "bulk2", 3, 8, 0),
        ("urgent pushes out the rest of bulk", "urgent", fill, 1, 0),
        ("bulk finds only urgent: its own packets drop", "bulk", 4, 8, 4),
    ]
    try:
        for what, name, count, prio, want_errs in steps:
            errs = snd.send(name, count, prio)
            p3 = counters("p3")
            top = counters(parent)
            bands = class_stats()
            chk.note(f"{parent}: {what}: p3 qlen/backlog/drops {p3}, "
                     f"{parent} {top}, send errors {errs}")
            chk.expect(top == p3, f"{parent}: {what}: parent counts {top},"
                       f" p3 {p3}")
            chk.expect(errs == want_errs, f"{parent}: {what}: {errs} "
                       f"sends failed, want {want_errs}")
            chk.expect(sum(b["qlen"] for b in bands.values()) == p3[0],
                       f"{parent}: {what}: band qlens do not add up")
        chk.expect(bands[7]["qlen"] == 0 and bands[0]["qlen"] == p3[0],
                   f"queue {p3[0]}, urgent {bands[0]['qlen']}: not a "
                   "queue of urgent packets only")
    finally:
        snd.close()


def peeked_stays(chk):
    """HFSC peeks at p3's next packet when its class becomes active, and
    charges it; shaped to 8 bit/s it then waits, and takes it much later
    without peeking again.  That packet must stay whatever overflows.
    Bulk's one waiting packet is the peeked one; urgent packets fill p3's
    memory (pushing out only their own, since the peeked packet is bulk's
    band's only one); then a big packet of a middle band, which only
    bulk's band could make room for, is dropped alone: nothing is pushed
    out for a packet that cannot fit anyway."""
    no_ipv6()
    tc(f"qdisc add dev {SDEV} root handle 1: hfsc default 1")
    tc(f"class add dev {SDEV} parent 1: classid 1:1 hfsc sc rate 8bit "
       "ul rate 8bit")
    tc(f"qdisc add dev {SDEV} parent 1:1 handle 10: p3 tag priority "
       "memory 64kb")
    snd = Sender()
    try:
        # The first leaves at once, the second waits: 128 s at 8 bit/s.
        bulk_errs = snd.send("bulk", 2, 8)
        urgent_errs = snd.send("urgent", 200, 1)
        before = class_stats()
        mid_errs = snd.send("mid", 1, 4, size=1400)
        after = class_stats()
        p3, top = counters("p3"), counters("hfsc")
        chk.note(f"bulk {before[7]}, urgent {before[0]} -> bulk {after[7]}, "
                 f"mid {after[3]}; qlen/backlog/drops p3 {p3}, hfsc {top}; "
                 f"send errors bulk {bulk_errs}, urgent {urgent_errs}, mid "
                 f"{mid_errs}")
        chk.expect(bulk_errs == urgent_errs == 0 and before[0]["drops"] > 0,
                   "premise: urgent overflowed p3, and no send failed")
        chk.expect(before[7]["qlen"] == 1 and before[7]["drops"] == 0,
                   "urgent pushed out the packet hfsc peeked at")
        chk.expect(after[7] == before[7], f"bulk {before[7]} -> {after[7]}")
        chk.expect(mid_errs == 1 and after[3]["drops"] == 1 and
                   after[0]["qlen"] == before[0]["qlen"],
                   f"mid: {mid_errs} send errors, {after[3]['drops']} drops,"
                   f" urgent {before[0]['qlen']} -> {after[0]['qlen']}: "
                   "want the packet that cannot fit dropped, alone")
        chk.expect(p3 == top, f"hfsc counts {top}, p3 {p3}")
    finally:
        snd.close()


def iperf_server(port):
    return subprocess.Popen(["ip", "netns", "exec", RCV, "iperf3", "-s",
                             "-p", str(port), "-1"],
                            stdout=subprocess.DEVNULL)


def iperf(args, port, wait=True):
    cmd = ["ip", "netns", "exec", SND, "iperf3", "-c", RADDR, "-p",
           str(port), "-J"] + args
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return json.loads(subprocess.run(cmd, stdout=subprocess.PIPE, text=True,
                                     check=True, timeout=120).stdout)


def qdisc_setup(kind, opts):
    """tbf at the link rate at the sender's root, @kind as its child."""
    tc(f"qdisc add dev {SDEV} root handle 1: tbf rate {RATE} burst 32k "
       "latency 300ms")
    if kind in ("prio", "skbprio"):
        # Both read skb->priority, which TOS 4 leaves at 0 like untagged
        # traffic: clsact gives DSCP 1 priority 2 before the root qdisc.
        tc(f"qdisc add dev {SDEV} clsact")
        tc(f"filter add dev {SDEV} egress protocol ip u32 match ip tos "
           f"{URGENT_TOS:#x} 0xfc action skbedit priority 2")
    if kind == "prio":
        # Band 0 for priority 2, band 1 for the rest.
        tc(f"qdisc add dev {SDEV} parent 1:1 handle 10: prio bands 2 "
           "priomap 1 1 0 1 1 1 1 1 1 1 1 1 1 1 1 1")
    elif kind == "skbprio":
        # The higher skb->priority is served first: 2 before 0.
        tc(f"qdisc add dev {SDEV} parent 1:1 handle 10: skbprio {opts}")
    else:
        tc(f"qdisc add dev {SDEV} parent 1:1 handle 10: p3 bands 8 tag dscp "
           f"{opts}")


# A UDP sender blocks once its socket's packets in the qdisc reach its
# send buffer: with the default 208 KB, ~100 datagrams, it never fills even
# a limit of 200.  32 MB (net.core.wmem_max is raised for it) lets one
# flood overflow the default limit of 10000 packets.
FLOOD_SNDBUF = 32 << 20
BACKGROUND = {
    "alone": None,
    "udp flood": ["-u", "-b", "80M", "-l", "1000", "-w", str(FLOOD_SNDBUF)],
    "udp at half the link": ["-u", "-b", "10M", "-l", "1000"],
    "64 bulk tcp": ["-P", "64"],
}


def wait_overflow(kind, least=2.0, most=30.0):
    """Waits until the background traffic has overflowed the queue, the
    premise of every goodput case: at least @least s, at most @most.
    Under TCG 64 TCP connections can take seconds to open, and once the
    urgent flow starts their untagged SYNs wait behind it: a fixed 2 s
    once left them unopened for the whole measurement (0 drops)."""
    t0 = time.monotonic()
    time.sleep(least)
    while (qdisc_json(kind=kind)["drops"] == 0 and
           time.monotonic() - t0 < most):
        time.sleep(0.5)


def urgent_goodput(kind, opts, background, seconds=8):
    """Goodput, mean cwnd and retransmits of one urgent TCP flow (TOS 4)
    over a 20 Mbit/s link with 20 ms on the ACK path, beside @background
    sent untagged.  Returns a dict, with the qdisc's drops."""
    topology()
    # iperf3 -w sets both buffers, and fails unless both are granted.
    sh(f"sysctl -qw net.core.wmem_max={FLOOD_SNDBUF} "
       f"net.core.rmem_max={FLOOD_SNDBUF}")
    sh(f"tc qdisc add dev {RDEV} root netem delay 20ms", ns=RCV)
    qdisc_setup(kind, opts)
    servers = [iperf_server(URGENT_PORT), iperf_server(BULK_PORT)]
    time.sleep(0.5)
    bg = None
    try:
        if BACKGROUND[background]:
            # It is killed once the urgent flow is measured: its own
            # control connection, untagged, may sit out RTO backoffs in
            # the overflowing band for long after its data stopped.
            bg = iperf(BACKGROUND[background] + ["-t", str(seconds + 60)],
                       BULK_PORT, wait=False)
            wait_overflow(kind)
        r = iperf(["-S", str(URGENT_TOS), "-t", str(seconds), "-O", "1"],
                  URGENT_PORT)
    finally:
        if bg:
            bg.kill()
            bg.wait()
        for s in servers:
            s.kill()
            s.wait()
    cwnds = [s["snd_cwnd"] for i in r["intervals"] for s in i["streams"]
             if not s.get("omitted")]
    q = qdisc_json(kind=kind)
    return {"mbit": r["end"]["sum_received"]["bits_per_second"] / 1e6,
            "cwnd": sum(cwnds) / len(cwnds) / 1448 if cwnds else 0,
            "retrans": r["end"]["sum_sent"].get("retransmits", 0),
            "drops": q["drops"],
            "urgent_drops": (class_stats()[0]["drops"] if kind == "p3"
                             else None)}


# (name, background, p3 options).
GOODPUT_CASES = [
    ("udp_flood_limit_200", "udp flood", "limit 200"),
    ("udp_flood_default_limit", "udp flood", ""),
    ("udp_flood_memory_cap", "udp flood", "memory 256kb"),
    ("tcp_64_flows_limit_64", "64 bulk tcp", "limit 64"),
]
# The share of its goodput alone the urgent flow must keep.  The bug this
# guards against (NET_XMIT_CN to the flow that pushed others out) left
# 0.056 and 0.077, with cwnd 2-4.  The flood also costs the guest CPU that
# the urgent sender needs: the fixed module kept only 0.84-0.90 in CI
# (one run of 2026-11-27; 0 retransmits, cwnd near alone's) and
# 0.775-0.847 in a guest of its own on a slow day: the bound sits
# between.  What priority promises exactly, that no urgent packet is
# dropped, is checked exactly.
COLLAPSE_SHARE = 0.5


def fmt(m):
    return (f"{m['mbit']:.1f} Mbit/s, cwnd {m['cwnd']:.0f}, "
            f"{m['retrans']} retransmits, qdisc drops {m['drops']}"
            + ("" if m["urgent_drops"] is None
               else f" ({m['urgent_drops']} urgent)"))


_alone = []


def test_goodput(chk, name):
    """The urgent flow of case @name against the same flow alone, measured
    once per run (in the first goodput test)."""
    _, background, opts = next(c for c in GOODPUT_CASES if c[0] == name)
    if not _alone:
        _alone.append(urgent_goodput("p3", "", "alone"))
    alone = _alone[0]
    m = urgent_goodput("p3", opts, background)
    chk.note(f"alone {fmt(alone)}; beside {background} "
             f"({opts or 'no options'}): {fmt(m)}; "
             f"{m['mbit'] / alone['mbit']:.3f} of alone")
    chk.expect(m["drops"] > 0, "premise: the queue never overflowed")
    chk.expect(m["urgent_drops"] == 0,
               f"the urgent band dropped {m['urgent_drops']} packets")
    chk.expect(m["mbit"] >= COLLAPSE_SHARE * alone["mbit"],
               f"urgent goodput {m['mbit']:.1f} Mbit/s is below "
               f"{COLLAPSE_SHARE:.0%} of alone ({alone['mbit']:.1f}): "
               "the flow collapsed")


TABLE_CASES = [
    ("alone", "p3", "", "alone"),
    ("beside a UDP flood, `limit 200`", "p3", "limit 200", "udp flood"),
    ("beside a UDP flood, default `limit` (10000)", "p3", "", "udp flood"),
    ("beside a UDP flood, `memory 256kb`", "p3", "memory 256kb",
     "udp flood"),
    ("beside 64 bulk TCP flows, `limit 64`", "p3", "limit 64",
     "64 bulk tcp"),
    ("beside UDP at half the link, no overflow", "p3", "",
     "udp at half the link"),
    ("`prio bands 2`, UDP flood", "prio", "", "udp flood"),
    ("`skbprio limit 200`, UDP flood", "skbprio", "limit 200",
     "udp flood"),
]


def table():
    print("| Case | Urgent TCP, Mbit/s | Of alone | Mean cwnd | "
          "Retransmits | Qdisc drops |")
    print("|---|---|---|---|---|---|")
    alone = None
    for name, kind, opts, background in TABLE_CASES:
        m = urgent_goodput(kind, opts, background)
        alone = alone or m
        print(f"| {name} | {m['mbit']:.1f} | "
              f"{m['mbit'] / alone['mbit']:.2f} | {m['cwnd']:.0f} | "
              f"{m['retrans']} | {m['drops']} |", flush=True)
        teardown()
    return 0


def main():
    global RATE
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    add_selection_args(ap)
    ap.add_argument("--prefix", default="", help="prefix of TAP names")
    ap.add_argument("--rate", default=RATE,
                    help=f"link rate of the goodput tests ({RATE})")
    ap.add_argument("--accounting-only", action="store_true",
                    help="skip the goodput tests (the debug kernel is too "
                    "slow under emulation to fill a link with TCP)")
    ap.add_argument("--table", action="store_true",
                    help="print the benchmark table instead of testing")
    args = ap.parse_args()
    RATE = args.rate
    sh("modprobe sch_p3")
    if args.table:
        return table()

    # A 100-byte datagram's skb is ~1 KB of truesize: 200 overflow 64 KB.
    tests = [(f"accounting_under_{p}_{v}", lambda chk, p=p, o=o, n=n:
              accounting(chk, p, o, n))
             for p in PARENTS
             for v, o, n in (("limit", "limit 20", 21),
                             ("memory", "memory 64kb", 200))]
    tests.append(("accounting_peeked_stays", peeked_stays))
    if not args.accounting_only:
        tests += [(name, lambda chk, name=name: test_goodput(chk, name))
                  for name, *_ in GOODPUT_CASES]
    return run_tests(tests, args, "overload")


if __name__ == "__main__":
    sys.exit(main())
