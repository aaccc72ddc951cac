#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Loss-tolerant bands (DLCP) of the p3 qdisc, run as root inside the
selftest VM.

A band given a deadline (tc class change ... p3 deadline TIME) is
loss-tolerant: a packet of it that waited longer is dropped at dequeue,
and on overflow its packets are pushed out before any reliable one.

  expire_at_dequeue   datagrams held back by the pacer past a 20 ms
                      deadline: every queued packet of the tolerant band
                      but the last is dropped when the pacer lets go (a
                      drop never empties p3: the last is sent, late),
                      every one of the reliable band beside it is sent,
                      fresh packets are sent, and tbf above p3, which
                      peeks at every packet, counts what p3 counts.
  expire_under_drr    the same under DRR with a second class: DRR counts
                      what p3 counts and serves its other class.
  tolerant_first      at the packet limit, strict priority first, then
                      tolerant before reliable: urgent packets push out
                      tolerant ones before less urgent bulk; bulk never
                      pushes out the more urgent tolerant band, only its
                      own; a tolerant packet pushes out less urgent bulk.
  options             what tc class show prints, 0 making a band reliable
                      again, and a deadline surviving a change of the
                      qdisc but not the loss of its band.

  selftests/vm-run -- selftests/p3_deadline.py [-t NAME]...
"""
import re
import sys
import time

from p3_overload import Sender, counters
from p3lib import (RADDR, SDEV, SND, class_stats, no_ipv6, qdisc_json,
                   run_tests, selftest_parser, sh, tc)

TBF = f"qdisc add dev {SDEV} root handle 1: tbf rate 1gbit burst 1mb latency 1s"


def xstats():
    return qdisc_json()["xstats"]


def wait_drained(timeout=20):
    """Waits until p3 holds nothing (the debug kernel is slow to drain)."""
    end = time.monotonic() + timeout
    while counters("p3")[0] and time.monotonic() < end:
        time.sleep(0.2)


def deadline_of(classid):
    """The deadline `tc class show` prints for @classid, or None."""
    m = re.search(rf"class p3 {classid} .*?(?:deadline (\S+))?\s*$",
                  tc(f"class show dev {SDEV} classid {classid}"), re.M)
    return m and m.group(1)


def test_expire_at_dequeue(chk):
    no_ipv6()
    tc(TBF)
    # 8 bit/s: the first packet leaves, the rest wait for the change below.
    tc(f"qdisc add dev {SDEV} parent 1:1 handle 10: p3 rate 8bit tag priority")
    tc(f"class change dev {SDEV} classid 10:8 p3 deadline 20ms")
    snd = Sender()
    try:
        # Reliable first: its head shields the tolerant band from the
        # peeks every enqueue brings, however slowly the burst goes in.
        rel_errs = snd.send("reliable", 50, 7)      # band 6
        tol_errs = snd.send("tolerant", 150, 8)     # band 7
        time.sleep(0.3)
        held = class_stats()
        tc(f"qdisc change dev {SDEV} parent 1:1 handle 10: p3 rate 0")
        wait_drained()
        b = class_stats()
        x = xstats()
        p3, top = counters("p3"), counters("tbf")
        chk.note(f"held: band 7 {held[7]}, band 6 {held[6]}; after: band 7 "
                 f"{b[7]}, band 6 {b[6]}; qlen/backlog/drops: p3 {p3}, tbf "
                 f"{top}; drops_deadline {x['drops_deadline']}")
        chk.expect(tol_errs == rel_errs == 0, f"send errors {tol_errs}, "
                   f"{rel_errs}: a drop at dequeue is no sender's error")
        chk.expect(held[6]["qlen"] == 49 and held[7]["qlen"] == 150,
                   f"held {held[6]['qlen']} + {held[7]['qlen']}, want "
                   "49 + 150 behind the pacer")
        chk.expect(b[7]["pkts"] == 1 and b[7]["drops"] == 149,
                   f"tolerant band sent {b[7]['pkts']}, dropped "
                   f"{b[7]['drops']}: want 1 (the last, late) and 149")
        chk.expect(b[6]["pkts"] == 50 and b[6]["drops"] == 0,
                   f"reliable band sent {b[6]['pkts']}, dropped "
                   f"{b[6]['drops']}: want 50 and 0")
        chk.expect(x["drops_deadline"] == 149 and x["drops_tolerant"] == 0,
                   f"drops_deadline {x['drops_deadline']}, drops_tolerant "
                   f"{x['drops_tolerant']}: want 149 and 0")
        chk.expect(p3 == top == (0, 0, 149),
                   f"tbf counts {top}, p3 {p3}: want both (0, 0, 149)")

        fresh_errs = snd.send("tolerant", 20, 8)
        time.sleep(0.5)
        b = class_stats()
        chk.expect(fresh_errs == 0 and b[7]["pkts"] == 21 and
                   b[7]["drops"] == 149,
                   f"fresh: sent {b[7]['pkts']}, dropped {b[7]['drops']}, "
                   f"errors {fresh_errs}: want 21, 149, 0")
    finally:
        snd.close()


SIBLING_PORT = 10
DRR = [f"qdisc add dev {SDEV} root handle 1: drr",
       f"class add dev {SDEV} parent 1: classid 1:1 drr",
       f"class add dev {SDEV} parent 1: classid 1:2 drr",
       f"filter add dev {SDEV} parent 1: protocol ip prio 1 u32 match ip "
       f"dport {SIBLING_PORT} 0xffff classid 1:2",
       f"filter add dev {SDEV} parent 1: prio 2 matchall classid 1:1"]


def sibling_sent():
    out = tc(f"-s class show dev {SDEV} classid 1:2")
    return int(re.search(r"Sent \d+ bytes (\d+) pkt", out).group(1))


def test_expire_under_drr(chk):
    """Expiry of all p3 holds under DRR: the parent is told of the drops
    at once, while p3 still holds the last packet (sent late), so DRR's
    counters stay p3's and its other class is served."""
    no_ipv6()
    for cmd in DRR:
        tc(cmd)
    tc(f"qdisc add dev {SDEV} parent 1:1 handle 10: p3 rate 8bit tag priority")
    tc(f"class change dev {SDEV} classid 10:8 p3 deadline 20ms")
    snd = Sender()
    try:
        errs = snd.send("tolerant", 150, 8)
        time.sleep(0.3)
        tc(f"qdisc change dev {SDEV} parent 1:1 handle 10: p3 rate 0")
        wait_drained()
        p3, top = counters("p3"), counters("drr")
        sh(f"{sys.executable} -c \"import socket; s = socket.socket(2, 2); "
           f"[s.sendto(bytes(86), ('{RADDR}', {SIBLING_PORT})) "
           f"for _ in range(10)]\"", ns=SND)
        time.sleep(0.5)
        sent = sibling_sent()
        chk.note(f"qlen/backlog/drops: p3 {p3}, drr {top}; the other class "
                 f"sent {sent}; send errors {errs}")
        chk.expect(p3 == top == (0, 0, 148),
                   f"drr counts {top}, p3 {p3}: want both (0, 0, 148)")
        chk.expect(sent == 10, f"the other class sent {sent} of 10")
    finally:
        snd.close()


def test_tolerant_first(chk):
    no_ipv6()
    tc(f"qdisc add dev {SDEV} root handle 1: p3 limit 20 rate 8bit "
       "tag priority")
    tc(f"class change dev {SDEV} classid 1:5 p3 deadline 10s")  # band 4
    snd = Sender()
    x0 = xstats()
    steps = [
        # (what, socket, datagrams, SO_PRIORITY, errors, qlen of bands
        #  0, 4, 7 after it, drops of bands 4, 7, drops_tolerant)
        ("tolerant, one leaves", "tol", 10, 5, 0, (0, 9, 0), (0, 0), 0),
        ("bulk fills the queue", "bulk", 11, 8, 0, (0, 9, 11), (0, 0), 0),
        ("urgent pushes out tolerant before the less urgent bulk", "urgent",
         5, 1, 0, (5, 4, 11), (5, 0), 5),
        ("bulk pushes out its own, never the more urgent tolerant", "bulk",
         6, 8, 0, (5, 4, 11), (5, 6), 5),
        ("tolerant pushes out its own older tolerant", "tol", 3, 5, 0,
         (5, 4, 11), (8, 6), 8),
        ("urgent pushes out the rest of tolerant", "urgent", 4, 1, 0,
         (9, 0, 11), (12, 6), 12),
        # The first pushes out bulk; the second finds the first, and
        # takes it, being tolerant, before bulk.
        ("with no tolerant left, tolerant pushes out less urgent bulk, then "
         "its own", "tol2", 2, 5, 0, (9, 1, 10), (13, 7), 13),
    ]
    try:
        for what, name, count, prio, errs, qlens, drops, tolerant in steps:
            got_errs = snd.send(name, count, prio)
            b = class_stats()
            x = xstats()
            got = ((b[0]["qlen"], b[4]["qlen"], b[7]["qlen"]),
                   (b[4]["drops"], b[7]["drops"]),
                   x["drops_tolerant"] - x0["drops_tolerant"])
            chk.note(f"{what}: qlens {got[0]}, drops {got[1]}, "
                     f"drops_tolerant {got[2]}, errors {got_errs}")
            chk.expect(got == (qlens, drops, tolerant) and got_errs == errs,
                       f"{what}: want qlens {qlens}, drops {drops}, "
                       f"drops_tolerant {tolerant}, errors {errs}")
        chk.expect(b[0]["drops"] == 0, "urgent lost packets")
        chk.expect(x["drops_deadline"] == 0, "a 10 s deadline expired")
    finally:
        snd.close()


def test_options(chk):
    tc(f"qdisc add dev {SDEV} root handle 1: p3 bands 4")
    tc(f"class change dev {SDEV} classid 1:2 p3 deadline 1500us")
    tc(f"class change dev {SDEV} classid 1:4 p3 deadline 2")
    chk.expect(deadline_of("1:2") == "1500us", f"1:2 shows "
               f"{deadline_of('1:2')}, want 1500us")
    chk.expect(deadline_of("1:4") == "2us", f"1:4 shows "
               f"{deadline_of('1:4')}, want 2us (a bare number is us)")
    chk.expect(deadline_of("1:1") is None, "reliable 1:1 shows a deadline")
    tc(f"qdisc change dev {SDEV} root handle 1: p3 limit 500")
    chk.expect(deadline_of("1:2") == "1500us",
               "a qdisc change lost the deadline")
    tc(f"class change dev {SDEV} classid 1:2 p3 deadline 0")
    chk.expect(deadline_of("1:2") is None, "deadline 0 left 1:2 tolerant")
    # Band 3 goes with "bands 2", and comes back reliable.
    tc(f"qdisc change dev {SDEV} root handle 1: p3 bands 2")
    tc(f"qdisc change dev {SDEV} root handle 1: p3 bands 4")
    chk.expect(deadline_of("1:4") is None,
               f"1:4 came back with deadline {deadline_of('1:4')}")


TESTS = [
    ("expire_at_dequeue", test_expire_at_dequeue),
    ("expire_under_drr", test_expire_under_drr),
    ("tolerant_first", test_tolerant_first),
    ("options", test_options),
]


def main():
    args = selftest_parser(__doc__).parse_args()
    sh("modprobe sch_p3")
    return run_tests(TESTS, args, "deadline")


if __name__ == "__main__":
    sys.exit(main())
