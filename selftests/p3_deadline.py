#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Loss-tolerant bands (DLCP) of the p3 qdisc, run as root inside the
selftest VM.

A band given a deadline (tc class change ... p3 deadline TIME) is
loss-tolerant: a packet of it that waited longer is dropped at dequeue,
and on overflow its packets are pushed out before any reliable one.

  expire_at_dequeue   datagrams held back by the pacer past a 20 ms
                      deadline: every queued packet of the tolerant band
                      is dropped when the pacer lets go, every one of the
                      reliable band beside it is sent, fresh packets are
                      sent, and tbf above p3 counts what p3 counts.
  tolerant_first      at the packet limit, urgent and bulk reliable
                      packets push out the tolerant ones first (though
                      bulk is less urgent); once none is left, bulk loses
                      its own packets; a tolerant packet arriving at a
                      queue of reliable ones is the one dropped.
  options             what tc class show prints, 0 making a band reliable
                      again, and a deadline surviving a change of the
                      qdisc but not the loss of its band.

  selftests/vm-run -- selftests/p3_deadline.py [-t NAME]...
"""
import argparse
import re
import sys
import time

from p3_overload import Sender, counters
from p3lib import (SDEV, add_selection_args, class_stats, no_ipv6,
                   qdisc_json, run_tests, sh, tc)

TBF = f"qdisc add dev {SDEV} root handle 1: tbf rate 1gbit burst 1mb latency 1s"


def xstats():
    return qdisc_json()["xstats"]


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
        # More than one dequeue drops (64): the watchdog must bring the rest.
        tol_errs = snd.send("tolerant", 150, 8)     # band 7
        rel_errs = snd.send("reliable", 50, 7)      # band 6
        time.sleep(0.3)
        held = class_stats()
        tc(f"qdisc change dev {SDEV} parent 1:1 handle 10: p3 rate 0")
        time.sleep(1)
        b = class_stats()
        x = xstats()
        chk.note(f"held: band 7 {held[7]}, band 6 {held[6]}; after: band 7 "
                 f"{b[7]}, band 6 {b[6]}; xstats {x}")
        chk.expect(tol_errs == rel_errs == 0, f"send errors {tol_errs}, "
                   f"{rel_errs}: a drop at dequeue is no sender's error")
        chk.expect(held[7]["qlen"] == 149 and held[6]["qlen"] == 50,
                   f"held {held[7]['qlen']} + {held[6]['qlen']}, want "
                   "149 + 50 behind the pacer")
        chk.expect(b[7]["pkts"] == 1 and b[7]["drops"] == 149,
                   f"tolerant band sent {b[7]['pkts']}, dropped "
                   f"{b[7]['drops']}: want 1 and 149")
        chk.expect(b[6]["pkts"] == 50 and b[6]["drops"] == 0,
                   f"reliable band sent {b[6]['pkts']}, dropped "
                   f"{b[6]['drops']}: want 50 and 0")
        chk.expect(x["drops_deadline"] == 149 and x["drops_tolerant"] == 0,
                   f"drops_deadline {x['drops_deadline']}, drops_tolerant "
                   f"{x['drops_tolerant']}: want 149 and 0")

        # Fresh tolerant packets leave; their enqueue also brings the
        # parent the drops p3 held back while it was empty.
        fresh_errs = snd.send("tolerant", 20, 8)
        time.sleep(0.5)
        b = class_stats()
        chk.expect(fresh_errs == 0 and b[7]["pkts"] == 21 and
                   b[7]["drops"] == 149,
                   f"fresh: sent {b[7]['pkts']}, dropped {b[7]['drops']}, "
                   f"errors {fresh_errs}: want 21, 149, 0")
        p3, top = counters("p3"), counters("tbf")
        chk.note(f"qlen/backlog/drops: p3 {p3}, tbf {top}")
        chk.expect(p3 == top == (0, 0, 149),
                   f"tbf counts {top}, p3 {p3}: want both (0, 0, 149)")
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
        ("urgent pushes out tolerant, not bulk", "urgent", 5, 1, 0,
         (5, 4, 11), (5, 0), 5),
        ("bulk pushes out the rest of tolerant, then its own", "bulk", 6,
         8, 0, (5, 0, 15), (9, 2), 9),
        ("tolerant arriving at reliable packets is dropped", "tol", 3, 5,
         3, (5, 0, 15), (12, 2), 12),
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
    ("tolerant_first", test_tolerant_first),
    ("options", test_options),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    add_selection_args(ap)
    ap.add_argument("--prefix", default="", help="prefix of TAP names")
    args = ap.parse_args()
    sh("modprobe sch_p3")
    return run_tests(TESTS, args, "deadline")


if __name__ == "__main__":
    sys.exit(main())
