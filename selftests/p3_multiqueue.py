#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Where P3 levels land on a multi-queue device (TAP).

A veth with 4 transmit queues; one UDP flow per level (50 datagrams,
p3.tag, so DSCP), through p3 as the root qdisc, p3 on each queue of mq,
and p3 on each queue of mqprio in software mode (2 classes of 2 queues,
map 0 0 0 0 1 1 1 1). Checks what docs/deploy.md ("Multi-queue NICs")
says each placement keeps in order, and prints where every level went:
    selftests/vm-run --kernel 6.12 -- selftests/p3_multiqueue.py
"""
import argparse
import re
import subprocess
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "userlib", "python"))
import p3  # noqa: E402

LEVELS = 8
PER_LEVEL = 50
QUEUES = 4
NS_A, NS_B = "p3mq-a", "p3mq-b"
# rt_tos2priority() of each level's DSCP (ip_tos2prio[] of the TOS byte's
# old class bits), and the mqprio map below: the class each level must reach.
IP_TOS2PRIO = [0, 0, 0, 0, 2, 2, 2, 2, 6, 6, 6, 6, 4, 4, 4, 4]
TOS_PRIORITY = [IP_TOS2PRIO[(p3.level_dscp(lv) << 2 & 0x1e) >> 1]
                for lv in range(LEVELS)]
MAP = [0, 0, 0, 0, 1, 1, 1, 1] + [0] * 8


def sh(cmd, ns=NS_A):
    return subprocess.run(["ip", "netns", "exec", ns] + cmd.split(), check=True,
                          stdout=subprocess.PIPE, text=True).stdout


def setup():
    for ns in (NS_A, NS_B):
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "add", ns], check=True)
    q = f"numtxqueues {QUEUES} numrxqueues {QUEUES}"
    subprocess.run(f"ip link add va {q} netns {NS_A} type veth peer vb {q} "
                   f"netns {NS_B}".split(), check=True)
    sh("ip addr add 10.9.0.1/24 dev va")
    sh("ip addr add 10.9.0.2/24 dev vb", ns=NS_B)
    sh("ip link set va up")
    sh("ip link set vb up", ns=NS_B)


def send():
    """One flow per level, in the sender's namespace."""
    code = ("import socket, p3\n"
            f"for level in range({LEVELS}):\n"
            "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "    p3.tag(s, level)\n"
            f"    for _ in range({PER_LEVEL}):\n"
            "        s.sendto(b'x' * 200, ('10.9.0.2', 5000 + level))\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(p3.__path__[0]))
    subprocess.run(["ip", "netns", "exec", NS_A, sys.executable, "-c", code],
                   check=True, env=env)


def placement():
    """{parent: [packets of band 0, 1, ...]} of every p3 on va."""
    out = {}
    for line in sh("tc qdisc show dev va").splitlines():
        m = re.match(r"qdisc p3 (\S+) (root|parent (\S+))", line)
        if not m:
            continue
        classes = sh(f"tc -s class show dev va parent {m.group(1)}")
        out[m.group(3) or "root"] = [int(n) for n in re.findall(
            r"Sent \d+ bytes (\d+) pkt", classes)]
    return out


def run(kind):
    if kind == "root":
        sh("tc qdisc add dev va root handle 1: p3")
    else:
        extra = "" if kind == "mq" else (
            "num_tc 2 map " + " ".join(map(str, MAP)) + " queues 2@0 2@2 hw 0")
        sh(f"tc qdisc add dev va root handle 1: {kind} {extra}")
        for q in range(1, QUEUES + 1):
            sh(f"tc qdisc add dev va parent 1:{q} handle 1{q}: p3")
    send()
    got = placement()
    for parent in sorted(got):
        levels = [b for b, n in enumerate(got[parent]) if n >= PER_LEVEL]
        print(f"# {kind}: p3 at {parent}: band packets {got[parent]}; levels {levels}")
    sh("tc qdisc del dev va root")
    return got


def where(got, level):
    """The parents whose p3 carried @level's flow (in band @level)."""
    return [p for p, bands in got.items() if bands[level] >= PER_LEVEL]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", default="")
    a = ap.parse_args()
    n = failed = 0

    def tap(ok, name):
        nonlocal n, failed
        n += 1
        failed += not ok
        print(f"{'ok' if ok else 'not ok'} {n} - {a.prefix}multiqueue: {name}")

    subprocess.run(["modprobe", "sch_p3"])
    setup()
    try:
        got = run("root")
        bands = got.get("root", [])
        tap(len(bands) == LEVELS and bands[:-1] == [PER_LEVEL] * (LEVELS - 1)
            and bands[-1] >= PER_LEVEL,
            "root: one p3 sees every level, each in its band")

        got = run("mq")
        one = [where(got, lv) for lv in range(LEVELS)]
        tap(len(got) == QUEUES and all(len(w) == 1 for w in one) and
            all(sum(b[lv] for b in got.values()) == PER_LEVEL
                for lv in range(LEVELS - 1)),
            "mq: each level's flow whole on one queue's p3, in its band")

        got = run("mqprio")
        one = [where(got, lv) for lv in range(LEVELS)]
        want = [{f"1:{q}" for q in ((1, 2) if MAP[TOS_PRIORITY[lv]] == 0 else (3, 4))}
                for lv in range(LEVELS)]
        tap(len(got) == QUEUES and all(len(w) == 1 and w[0] in want[lv]
                                       for lv, w in enumerate(one)),
            "mqprio: each level in the class rt_tos2priority of its DSCP maps to")
    finally:
        for ns in (NS_A, NS_B):
            subprocess.run(["ip", "netns", "del", ns])
    print(f"1..{n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
