#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Accuracy of examples/torch_digits.py through the real sch_p3, with real
losses: two ranks, one per network namespace of the VM, joined by a veth
pair whose egress on each side is `p3 bands 17 rate RATE`, the odd bands
1..15 that bounded-loss pushes' datagrams use (p3.torch takes 8 levels,
level l on band 2 l, its datagrams on 2 l + 1) loss-tolerant with a
deadline.  Cases, all in one boot:

  dense                 every gradient reliable
  bounded, deadline     loss_tolerance: each level's datagrams queue behind
                        its own and the more urgent reliable bands, and the
                        qdisc drops those that outwait the band's deadline
  bounded, netem loss   the same, under netem loss L% (the root, p3 its
                        child): reliable TCP retransmits, datagrams are lost
  Slim-DP               sparsify='slimdp', reliable

With --pressure burst, the cases are instead dense and bounded loss (at
--burst-tolerance) beside microbursts at the job's most urgent level, as
in bench/torch's burst pressure: each host sends the other, every
--burst-every seconds (+-50%), a burst of as many packets as the qdisc
holds (limit 1000), which holds the job's less urgent bands for the
burst's link time and, if it arrives whole, pushes out what of the job
is queued there.  The bursts met are counted in the table too.

Prints the Markdown table of docs/benchmarks.md, with the qdisc's own
drop counters (deadline and total) summed over both hosts.  Run by
bench/accuracy/run.sh --vm (which boots the VM); inside it:

  bench/accuracy/vm.py [--epochs N] [--rate R] [--qdeadline US] [--loss L]
                       [--pressure burst [--burst-every S]
                        [--burst-tolerance F]]
"""
import argparse
import os
import subprocess
import sys
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "selftests"))

import p3lib  # noqa: E402
from p3lib import RADDR, RDEV, RCV, SADDR, SDEV, SND  # noqa: E402

# The selftests' two hosts (p3lib.topology()); rank 0 on the first,
# each with its peer's address.
HOSTS = ((SND, SDEV), (RCV, RDEV))
PEER = {SND: RADDR, RCV: SADDR}
TOLERANT = range(2, 17, 2)      # class minors of bands 1, 3, .., 15
PRESSURE = os.path.join(TOP, "bench", "torch", "pressure.py")
BURST_LIMIT = 1000              # the qdisc's limit beside bursts, and a burst


def sh(cmd, ns=None, **kw):
    if ns:
        cmd = ["ip", "netns", "exec", ns] + cmd
    return subprocess.run(cmd, check=True, text=True, **kw)


def shape(args, netem, deadlines=True):
    """p3 at the root, or under netem; deadlines on the tolerant bands
    unless deadlines is False (a job without datagrams has reliable TCP
    in the odd bands, which a burst would hold past the deadline)."""
    p3 = f"p3 bands 17 rate {args.rate}"
    if args.pressure == "burst":
        p3 += f" limit {BURST_LIMIT}"
    for ns, dev in HOSTS:
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del",
                        "dev", dev, "root"], stderr=subprocess.DEVNULL)
        lines, h = [], "1"
        if netem:
            lines.append(f"qdisc add dev {dev} root handle 1: netem loss "
                         f"{args.loss}%")
            h = "2"
            lines.append(f"qdisc add dev {dev} parent 1:1 handle 2: {p3}")
        else:
            lines.append(f"qdisc add dev {dev} root handle 1: {p3}")
        lines += [f"class change dev {dev} classid {h}:{k:x} p3 deadline "
                  f"{args.qdeadline}us" for k in TOLERANT if deadlines]
        sh(["tc", "-batch", "-"], ns, input="\n".join(lines) + "\n")


def p3_drops(ns, dev):
    """drops_deadline and all of p3's drops on ns's dev."""
    q = p3lib.qdisc_json(dev, ns)
    return q["xstats"].get("drops_deadline", 0), q.get("drops", 0)


def train(args, extra):
    """Runs both ranks; returns rank 0's output."""
    procs = []
    for i, (ns, dev) in enumerate(HOSTS):
        env = dict(os.environ, RANK=str(i), WORLD_SIZE="2",
                   MASTER_ADDR=SADDR, MASTER_PORT="29511",
                   # The guest's hostname resolves to no address of the
                   # namespace: Gloo would fall back to loopback.
                   GLOO_SOCKET_IFNAME=dev,
                   PYTHONPATH=os.path.join(TOP, "userlib", "python"),
                   P3_LIB=os.path.join(TOP, "build", "userlib", "libp3.so"))
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, "/usr/bin/python3",
             os.path.join(TOP, "examples", "torch_digits.py"),
             "--epochs", str(args.epochs)] + extra,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    for p, o in zip(procs, outs):
        if p.returncode:
            sys.exit(f"vm.py: a rank failed ({p.returncode}):\n{o}")
    return outs[0]


def start_bursts(args):
    """Each host's sink, then its bursts to the other host at level 0;
    the processes, to stop_bursts()."""
    run = lambda ns, *what: subprocess.Popen(
        ["ip", "netns", "exec", ns, "/usr/bin/python3", PRESSURE, *what],
        stdout=subprocess.PIPE, text=True)
    sinks = [run(ns, "sink") for ns, _ in HOSTS]
    time.sleep(2)       # bound before the first burst can come
    senders = [run(ns, "bursts", PEER[ns], "--pkts", str(BURST_LIMIT),
                   "--every", str(args.burst_every), "--level", "0",
                   "--seed", str(11 + i))
               for i, (ns, _) in enumerate(HOSTS)]
    return sinks, senders


def stop_bursts(procs):
    """Stops them all; the bursts sent and their bytes, both hosts."""
    sinks, senders = procs
    bursts = sent = 0
    for p in senders + sinks:
        p.terminate()
    for p in senders:
        out = p.communicate(timeout=60)[0].split()
        if p.returncode or out[:1] != ["bursts"]:
            sys.exit(f"vm.py: a burst sender failed ({p.returncode})")
        bursts, sent = bursts + int(out[1]), sent + int(out[3])
    for p in sinks:
        p.wait(timeout=60)
    return bursts, sent


def parse(out, epochs):
    acc = per = lost = asked = None
    for ln in out.splitlines():
        if ln.startswith(f"epoch {epochs}:"):
            acc = float(ln.split("test accuracy ")[1].split("%")[0])
        if ln.startswith("stats:"):
            w = ln.replace(",", "").split()
            per = int(w[w.index("per") - 1])
            lost = int(w[w.index("bytes", w.index("per")) - 1])
            asked = int(w[w.index("rerequests") - 1])
    if acc is None or per is None:
        sys.exit(f"vm.py: no result in:\n{out}")
    return acc, per, lost, asked


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--rate", default="20mbit")
    ap.add_argument("--qdeadline", type=int, default=2000,
                    help="the tolerant bands' deadline, µs")
    ap.add_argument("--loss", type=float, default=2.0,
                    help="netem loss, %%")
    ap.add_argument("--tolerance", default="0.01",
                    help="loss_tolerance of the bounded cases")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--pressure", choices=("none", "burst"), default="none")
    ap.add_argument("--burst-every", type=float, default=4.0,
                    help="mean seconds between a host's bursts")
    ap.add_argument("--burst-tolerance", default="0.1",
                    help="loss_tolerance of the bounded case beside bursts")
    args = ap.parse_args()
    bounded = ["--loss-tolerance", args.tolerance]
    if args.pressure == "burst":
        burst_cases(args)
        return
    cases = [
        ("dense", False, []),
        (f"bounded loss ({args.tolerance}), deadline drops", False, bounded),
        (f"bounded loss ({args.tolerance}), netem loss {args.loss:g}%",
         True, bounded),
        ("dense, netem loss %g%%" % args.loss, True, []),
        ("Slim-DP (keep 0.1, explore 0.02)", False,
         ["--sparsify", "slimdp"]),
    ]
    setup()
    print(f"| {args.epochs} epochs, VM, p3 bands 17 rate {args.rate}, "
          f"deadline {args.qdeadline} µs on bands 1, 3, .., 15 | test accuracy | "
          "gradient bytes per iteration (all ranks) | bytes lost | "
          "rerequests | p3 deadline drops | p3 drops |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, netem, extra in cases:
        shape(args, netem)
        t0 = time.monotonic()
        print(f"vm.py: {name} ...", file=sys.stderr, flush=True)
        acc, per, lost, asked = parse(train(args, extra), args.epochs)
        dl, dr = all_drops()
        print(f"vm.py: {name}: {acc}% in {time.monotonic() - t0:.0f} s",
              file=sys.stderr, flush=True)
        print(f"| {name} | {acc}% | {per} | {lost} | {asked} | {dl} | {dr} |",
              flush=True)
    p3lib.teardown()


def setup():
    subprocess.run(["modprobe", "sch_p3"], check=True)
    p3lib.topology(ipv6=False)


def all_drops():
    """p3_drops() summed over both hosts."""
    dl = dr = 0
    for ns, dev in HOSTS:
        a, b = p3_drops(ns, dev)
        dl, dr = dl + a, dr + b
    return dl, dr


def burst_cases(args):
    """Dense and bounded loss beside the bursts, one table; dense
    without the deadlines, which would drop its TCP in the odd bands."""
    setup()
    print(f"| {args.epochs} epochs, VM, p3 bands 17 rate {args.rate} limit "
          f"{BURST_LIMIT} (bounded loss: deadline {args.qdeadline} µs on "
          f"bands 1, 3, .., 15), bursts at level 0 every "
          f"{args.burst_every:g} s | test "
          "accuracy | gradient bytes per iteration (all ranks) | bytes lost "
          "| rerequests | p3 deadline drops | p3 drops | bursts | time (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, extra in (
            ("dense, bursts", []),
            (f"bounded loss ({args.burst_tolerance}), bursts",
             ["--loss-tolerance", args.burst_tolerance])):
        shape(args, False, deadlines=bool(extra))
        print(f"vm.py: {name} ...", file=sys.stderr, flush=True)
        procs = start_bursts(args)
        t0 = time.monotonic()
        try:
            out = train(args, extra)
        finally:
            took = time.monotonic() - t0
            bursts, _ = stop_bursts(procs)
        acc, per, lost, asked = parse(out, args.epochs)
        dl, dr = all_drops()
        print(f"vm.py: {name}: {acc}% in {took:.0f} s", file=sys.stderr,
              flush=True)
        print(f"| {name} | {acc}% | {per} | {lost} | {asked} | {dl} | {dr} "
              f"| {bursts} | {took:.0f} |", flush=True)
    p3lib.teardown()


if __name__ == "__main__":
    main()
