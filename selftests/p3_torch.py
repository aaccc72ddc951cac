#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""p3.torch through the real sch_p3: two ranks of bench/torch's VGG-shaped
model, one per network namespace of the VM, train a few steps with
schedule p3 while each host's egress is the p3 qdisc (8 bands and tag dscp by default,
pacing at 100 Mbit/s).  What make check asks of a real training job:

  - it ends, with every timed step recorded and rank 0's parameters equal
    to rank 1's, bit for bit (the same averaged gradient reached both);
  - p3.torch took 7 levels, so that none shares band 7, where the qdisc's
    defaults put untagged traffic (Gloo, an upload);
  - its gradient slices reached the qdisc tagged by level: band 0 (the
    first convolutions) and at least four bands in all carried packets on
    each host, and the most urgent band carried fewer bytes than the
    fully connected layers' bands (VGG's parameters sit at the end);
  - with bounded-loss pushes (bench/torch's p3dlcp: 16 bands, deadlines
    on the odd ones) it ends with the ranks agreeing too, and the levels
    interleave: each level's datagrams travel in the odd band right after
    its reliable band, band 1 (the first layers') included, and the odd
    levels carry nothing but UDP, the even ones nothing but TCP, counted
    by the packets' protocol and DSCP (this once with P3_DGRAM_GSO=0);
  - each rank snapshots its counters at every timed step's start
    (bench/torch/steps.py reads them), and p3.torch's bytes_sent grows
    in every step, as a job that pushes every step must;
  - bench/torch's trace of TCP's retransmission timers (rtotrace.py)
    sees the timers of a connection that loses everything for 1.5 s
    fire, a backed-off timer after twice TCP's least timeout (200 ms) at
    least, and removes its probes after;
  - bench/torch's co-located bursts (pressure.py) reach the qdisc whole
    and at the level asked: every datagram of every burst, as its 45 IP
    fragments, in band 0, and nothing of them elsewhere.

Runs inside the selftest VM:  selftests/p3_torch.py [--iters N]
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

import p3lib

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HOSTS = ("p3t0", "p3t1")


def bands_used(ns):
    """Per-band packets and bytes of eth0's p3 qdisc in namespace ns."""
    return p3lib.class_stats(dev="eth0", ns=ns)




# Packets by protocol and level parity, counted by u32 filters on each
# host's p3 that classify nothing (action ok, no class: the tag decides).
# A level L below 16 is DSCP 4 L + 3: the TOS byte's bits 0x1c are 0x0c
# for an even level, 0x1c for an odd one.
COUNTED = (("udp even", 17, 0x0c), ("udp odd", 17, 0x1c),
           ("tcp even", 6, 0x0c), ("tcp odd", 6, 0x1c))


def count_filters():
    """The COUNTED filters, as bench/torch's P3_TORCH_TC takes them."""
    return ";".join(f"filter add dev eth0 parent {{h}}: protocol ip prio "
                    f"{prio} u32 match ip protocol {proto} 0xff match ip "
                    f"dsfield {tos:#x} 0x1c action ok"
                    for prio, (_, proto, tos) in enumerate(COUNTED, 10))


def protocol_counts(ns):
    """{name: packets} of the COUNTED filters on ns's eth0."""
    out = p3lib.sh("tc -s -j filter show dev eth0 parent 1:", ns=ns,
                   check=False)
    got = {}
    for f in json.loads(out or "[]"):
        for a in f.get("options", {}).get("actions", ()):
            prio = f.get("pref", 0) - 10
            if 0 <= prio < len(COUNTED):
                got[COUNTED[prio][0]] = a.get("stats", {}).get("packets", 0)
    return got


def train(mode, iters, env="", count=False):
    """bench/torch's job in mode, with env (VAR=value ...) added: (rank 0's
    record, per-host band stats, seconds, error text); with count, each
    host's stats hold "protocols" (protocol_counts())."""
    out = tempfile.mktemp(prefix="p3torch-", suffix=".jsonl")
    t0 = time.monotonic()
    if count:
        env += " P3_TORCH_TC=" + shlex.quote(count_filters())
    try:
        p3lib.sh(f"env {env} P3_TORCH_OUT={out} bench/torch/vm.sh --modes {mode} "
                 f"--bulk 0 --warmup 1 --iters {iters} --batch 8 "
                 f"--check-params", timeout=1500)
        with open(out) as f:
            res = [json.loads(line) for line in f]
        stats = {ns: bands_used(ns) for ns in HOSTS}
        if count:
            for ns in HOSTS:
                stats[ns]["protocols"] = protocol_counts(ns)
        err = ""
    except Exception as e:  # a crashed job is a failed test
        res, stats, err = [], {}, repr(e)
    return (res[0] if res else {}), stats, time.monotonic() - t0, err


def job_ends(tap, what, r, iters, took, err):
    # The worker times the steps after its warm-up from start to start:
    # iters - 1 intervals.
    tap.result(len(r.get("steps") or ()) == iters - 1 and r.get("params_equal") is True,
               f"p3.torch, {what} over sch_p3: the job ends, the ranks agree",
               f"took {took:.0f} s; steps {r.get('steps')}; "
               f"ranks' parameters equal: {r.get('params_equal')} {err}")


def snapshots(tap, r, iters):
    """One snapshot per timed step's start (iters: the last is the start
    of the untimed last step), bytes_sent rising between any two."""
    ok, why = bool(r.get("ranks")), []
    for rank, each in enumerate(r.get("ranks") or ()):
        sent = [s.get("stats", {}).get("bytes_sent") for s in each.get("snapshots") or ()]
        grew = len(sent) == iters and all(
            a is not None and b is not None and b > a
            for a, b in zip(sent, sent[1:]))
        ok = ok and grew
        why.append(f"rank {rank}: bytes_sent at each step's start {sent}")
    tap.result(ok, "per-step counters: a snapshot at each timed step's start",
               "; ".join(why))


RTO_JOB = """
import json, socket, subprocess, sys, threading, time
sys.path.insert(0, 'bench/torch')
import rtotrace
rtotrace.start()
srv = socket.create_server(('127.0.0.1', 0))
def drain():
    c, _ = srv.accept()
    while c.recv(1 << 16):
        pass
threading.Thread(target=drain, daemon=True).start()
c = socket.create_connection(srv.getsockname(), timeout=30)
c.sendall(bytes(1000))
time.sleep(0.2)
# Loopback loses everything for 1.5 s: the timer fires at about 0.2 s,
# then, backed off, 0.4 and 0.8 s after each firing, and the one due
# 1.6 s after that gets through.
lose = 'tc qdisc %s dev lo root netem loss 100%%'
subprocess.run((lose % 'add').split(), check=True)
c.sendall(bytes(1000))
time.sleep(1.5)
subprocess.run((lose % 'del').split(), check=True)
time.sleep(2.5)
waits = rtotrace.waits({rtotrace.address_key('127.0.0.1'): 0})
with open(rtotrace.TRACEFS + '/dynamic_events') as f:
    print(json.dumps({'waits': waits, 'left': f.read()}))
"""


def timer_trace(tap):
    """One connection over a loopback that loses every packet for 1.5 s:
    its retransmission timer must fire, and fire again, and a timer
    that fires again was backed off, so it waited at least twice
    TCP_RTO_MIN (less a 4 ms jiffy).  The loss is a window, not a
    rate: 40% random loss left one run with a single firing."""
    ns = "p3timer"
    p3lib.sh(f"ip netns del {ns}", check=False)
    p3lib.sh(f"ip netns add {ns}")
    try:
        p3lib.sh("ip link set lo up", ns=ns)
        with tempfile.NamedTemporaryFile("w", suffix=".py") as job:
            job.write(RTO_JOB)
            job.flush()
            out = json.loads(p3lib.sh(f"/usr/bin/python3 {job.name}",
                                      ns=ns, timeout=120))
        waits, left = out["waits"], out["left"]
    except Exception as e:  # a crashed trace is a failed test
        waits, left = [], repr(e)
    finally:
        p3lib.sh(f"ip netns del {ns}", check=False)
    again = [w["to"] - w["from"] for w in waits if w["again"]]
    ok = (again and min(again) >= 0.396 and "p3rto" not in left
          and all(w["to"] > w["from"] for w in waits))
    tap.result(bool(ok), "rtotrace: a lossy connection's timers fire, a "
               "backed-off one after twice TCP's least timeout",
               f"{len(waits)} waits, {len(again)} of a timer firing again, "
               f"shortest of those {min(again, default=0):.3f} s; probes "
               f"left: {left.strip() or 'none'}")


def bursts(tap):
    """pressure.py bursts at level 0 for a few seconds through an
    unshaped p3 that holds them all: band 0 must count each burst's
    datagrams (ceil(pkts * 1480 / 65507)), each as 45 fragments, and
    their payload to the byte the sender reports."""
    pkts, dgram, frags = 200, 65507, 45
    per_burst = -(-pkts * 1480 // dgram)
    tool = os.path.join(TOP, "bench", "torch", "pressure.py")
    env = f"P3_LIB={os.path.join(TOP, 'build', 'userlib', 'libp3.so')}"
    p3lib.topology(ipv6=False)
    p3lib.no_ipv6()
    sink = None
    try:
        p3lib.tc(f"qdisc add dev {p3lib.SDEV} root p3 bands 8 limit 10000",
                 ns=p3lib.SND)
        sink = subprocess.Popen(
            f"ip netns exec {p3lib.RCV} env {env} /usr/bin/python3 {tool} "
            "sink", shell=True)
        time.sleep(2)
        # timeout exits 124 after its TERM, which the sender answers
        # with its count; a sender that does not end 10 s later is
        # killed, so that no socket of it keeps the namespace and its p3
        # (sch_p3 in use) for the suites after this one.
        out = p3lib.sh(f"env {env} timeout -k 10 -s TERM 8 /usr/bin/python3 {tool}"
                       f" bursts {p3lib.RADDR} --pkts {pkts} --every 0.5 "
                       "--level 0 --seed 1", ns=p3lib.SND, check=False).split()
        b = p3lib.class_stats()
        n, sent = int(out[1]), int(out[3])
        want = n * per_burst * frags
        got = b.get(0, {}).get("pkts", 0)
        others = {k: v["pkts"] for k, v in b.items() if k and v["pkts"]}
        ok = (n >= 3 and sent == n * per_burst * dgram and got == want
              and not others)
        detail = (f"{n} bursts, {sent} bytes sent; band 0 {got} packets "
                  f"(want {want}); other bands {others or 'none'}")
    except Exception as e:  # a crashed sender is a failed test
        ok, detail = False, repr(e)
    finally:
        # Deleting its namespace would not end the sink.
        if sink:
            sink.terminate()
            sink.wait(30)
        p3lib.teardown()
    tap.result(ok, "bench/torch's bursts reach the qdisc whole, at their "
               "level", detail)


def interleaved(tap, stats, levels):
    """Bounded loss: levels 0..levels-1 on the even bands, their
    datagrams on the odd band after each: UDP only at odd levels, TCP
    only at even ones, by the packets' own protocol and DSCP (COUNTED;
    the old layout failed this on every host)."""
    for ns in HOSTS:
        b = stats.get(ns, {})
        n = b.get("protocols", {})
        tap.result(bool(levels and n.get("udp odd") and n.get("tcp even") and
                        n.get("udp even") == 0 and n.get("tcp odd") == 0),
                   f"{ns}: the odd bands carry datagrams only, the even ones "
                   "TCP",
                   f"levels {levels}; packets by protocol and level {n}; "
                   "bytes per band " + str({k: b[k]["bytes"] for k in
                                            sorted(k for k in b
                                                   if isinstance(k, int))}))


def first_layers(tap, stats, levels):
    """A rank pushes only the slices another rank owns, so one host's
    band 1 may stay empty."""
    first = {ns: stats.get(ns, {}).get(1, {}).get("pkts", 0) for ns in HOSTS}
    tap.result(levels > 0 and any(first.values()),
               "the first layers' datagrams travel in band 1, right after "
               "their reliable band 0", f"band 1 packets per host {first}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--prefix", default="")
    args = ap.parse_args()
    tap = p3lib.Tap(args.prefix)
    klog = p3lib.KernelLog()
    timer_trace(tap)
    bursts(tap)
    r, stats, took, err = train("p3kernel", args.iters)
    job_ends(tap, "schedule p3", r, args.iters, took, err)
    snapshots(tap, r, args.iters)
    tap.result(r.get("levels") == 7,
               "p3.torch keeps its levels above the qdisc's default band",
               f"levels {r.get('levels')} (want 7: bands 8, default 7)")
    for ns in HOSTS:
        b = stats.get(ns, {})
        used = sorted(k for k, v in b.items() if v["pkts"])
        urgent = b.get(0, {}).get("bytes", 0)
        fattest = max((v["bytes"] for v in b.values()), default=0)
        tap.result(0 in used and len(used) >= 4 and urgent < fattest,
                   f"{ns}: gradient slices spread over the bands by level",
                   "bands with packets %s; bytes per band %s" % (
                       used, {k: v["bytes"] for k, v in sorted(b.items())}))
    # Datagrams as libp3 sends them (UDP GSO) through the qdisc's
    # deadline bands; then one a send, to tell them from TCP by size.
    r, stats, took, err = train("p3dlcp", args.iters)
    job_ends(tap, "bounded loss", r, args.iters, took, err)
    first_layers(tap, stats, r.get("levels") or 0)
    r, stats, took, err = train("p3dlcp", args.iters, env="P3_DGRAM_GSO=0",
                                count=True)
    job_ends(tap, "bounded loss, one datagram a send", r, args.iters, took,
             err)
    interleaved(tap, stats, r.get("levels") or 0)
    problems = klog.new_problems()
    tap.result(not problems, "kernel log clean", "\n".join(problems))
    for ns in HOSTS:
        p3lib.sh(f"ip netns del {ns}", check=False)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
