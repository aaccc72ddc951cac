#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Where training really runs, in the VM: every part at its defaults, a
container host that routes and one that bridges, VXLAN and Geneve
overlays, and `p3ctl doctor` on each of them.

Three namespaces stand for the machines:

  p3pod  eth0 ---- vpod  p3host  h0 ==== p0  p3peer
         (a pod)          (the node; p3 on  (another node)
                           h0, its "NIC")

The pod's sender runs unprivileged (uid 65534) and tags with libp3's
Python binding at its defaults; the checks read h0's per-band counters.
Roles of this file (run by the tests): send, sink.

Runs inside the selftest VM:  selftests/p3_deploy.py [-t TEST]...
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

import p3lib
from p3lib import sh

POD, HOST, PEER = "p3pod", "p3host", "p3peer"
REPO = os.path.dirname(p3lib.HERE)
P3CTL = os.path.join(REPO, "build", "bin", "p3ctl")
PYPATH = os.path.join(REPO, "userlib", "python")
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
BANDS = 8           # the qdisc's default
SINK_PORT = 5301
# The underlay (h0 <-> p0), the pod's link and the overlay.
UNDER = {HOST: ("10.201.0.1", "fd00:201::1"), PEER: ("10.201.0.2", "fd00:201::2")}
PODNET = {POD: ("10.201.1.2", "fd00:201:1::2"), HOST: ("10.201.1.1", "fd00:201:1::1")}
BRIDGED_POD = ("10.201.0.3", "fd00:201::3")
OVER = {HOST: ("10.202.0.1", "fd00:202::1"), PEER: ("10.202.0.2", "fd00:202::2")}


# ------------------------------------------------------------ the roles

def tag(sock, level, method):
    import p3
    if method == "none":
        return
    p3.tag(sock, level, method=None if method == "default" else method)


def role_send(a):
    """UDP: base + L datagrams at each level L.  TCP: one connection per
    level to the sink, a.bytes each.  With --seconds, UDP goes on in
    rounds until then (traffic for the doctor's sample)."""
    fam = socket.AF_INET6 if ":" in a.dst else socket.AF_INET
    sent = {}
    end = time.monotonic() + a.seconds
    while True:
        for level in range(a.levels):
            if a.proto == "udp":
                s = socket.socket(fam, socket.SOCK_DGRAM)
                tag(s, level, a.method)
                n = a.base + level
                for _ in range(n):
                    s.sendto(b"x" * 200, (a.dst, 9))
                    if a.ready and not os.path.exists(a.ready):
                        open(a.ready, "w").close()
                    if a.seconds:
                        time.sleep(0.002)
            else:
                s = socket.socket(fam, socket.SOCK_STREAM)
                tag(s, level, a.method)
                s.settimeout(20)
                s.connect((a.dst, SINK_PORT))
                s.sendall(b"x" * a.bytes)
                s.shutdown(socket.SHUT_WR)
                s.recv(1)       # the sink closes once it has it all
                n = a.bytes
            s.close()
            sent[level] = sent.get(level, 0) + n
        if time.monotonic() >= end:
            break
    print(json.dumps(sent))


def role_sink(a):
    """Accepts connections and drains each to its end, for a.seconds."""
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    srv.bind(("::", SINK_PORT))
    srv.listen(16)
    srv.settimeout(a.seconds)
    open(a.ready, "w").close()
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        try:
            c, _ = srv.accept()
        except socket.timeout:
            break
        c.settimeout(20)
        while c.recv(65536):
            pass
        c.close()


# ------------------------------------------------------------ topologies

def teardown():
    sh("pkill -f 'p3_deploy.py sink'", check=False)
    for ns in (POD, HOST, PEER):
        sh(f"ip netns del {ns}", check=False)
    time.sleep(0.2)


def mac(ns, dev):
    return json.loads(sh(f"ip -j link show {dev}", ns=ns))[0]["address"]


def addr(ns, dev, v4, v6, plen=24):
    sh(f"ip addr add {v4}/{plen} dev {dev}", ns=ns)
    sh(f"ip addr add {v6}/64 dev {dev} nodad", ns=ns)


def static_neigh(ns, dev, addrs, lladdr):
    """No ARP/ND packet waits in (or is counted by) the qdisc."""
    for a in addrs:
        sh(f"ip neigh replace {a} lladdr {lladdr} dev {dev} nud permanent",
           ns=ns)


def nodes():
    """The node and its peer, joined by h0 <-> p0, each with lo up."""
    teardown()
    for ns in (POD, HOST, PEER):
        sh(f"ip netns add {ns}")
        sh("ip link set lo up", ns=ns)
    sh(f"ip link add h0 netns {HOST} type veth peer name p0 netns {PEER}")
    sh(f"ip link add eth0 netns {POD} type veth peer name vpod netns {HOST}")
    sh("sysctl -qw net.ipv4.ip_forward=1", ns=HOST)
    sh("sysctl -qw net.ipv6.conf.all.forwarding=1", ns=HOST)


def routed():
    """The pod behind the node's router (the way most CNIs wire a pod)."""
    nodes()
    addr(HOST, "h0", *UNDER[HOST])
    addr(PEER, "p0", *UNDER[PEER])
    addr(POD, "eth0", *PODNET[POD])
    addr(HOST, "vpod", *PODNET[HOST])
    for ns, dev in ((HOST, "h0"), (PEER, "p0"), (POD, "eth0"), (HOST, "vpod")):
        sh(f"ip link set {dev} up", ns=ns)
    sh(f"ip route add default via {PODNET[HOST][0]}", ns=POD)
    sh(f"ip -6 route add default via {PODNET[HOST][1]}", ns=POD)
    sh(f"ip route add 10.201.1.0/24 via {UNDER[HOST][0]}", ns=PEER)
    sh(f"ip -6 route add fd00:201:1::/64 via {UNDER[HOST][1]}", ns=PEER)
    static_neigh(HOST, "h0", UNDER[PEER], mac(PEER, "p0"))
    static_neigh(PEER, "p0", UNDER[HOST], mac(HOST, "h0"))
    static_neigh(POD, "eth0", PODNET[HOST], mac(HOST, "vpod"))
    static_neigh(HOST, "vpod", PODNET[POD], mac(POD, "eth0"))
    return {4: UNDER[PEER][0], 6: UNDER[PEER][1]}


def bridged():
    """The pod on a bridge with the node's NIC (bridge CNI, uplink
    enslaved): its frames leave h0 without being routed."""
    nodes()
    sh("ip link add br0 type bridge", ns=HOST)
    for dev in ("vpod", "h0"):
        sh(f"ip link set {dev} master br0", ns=HOST)
        sh(f"ip link set {dev} up", ns=HOST)
    sh("ip link set br0 up", ns=HOST)
    addr(POD, "eth0", *BRIDGED_POD)
    addr(PEER, "p0", *UNDER[PEER])
    sh("ip link set eth0 up", ns=POD)
    sh("ip link set p0 up", ns=PEER)
    static_neigh(POD, "eth0", UNDER[PEER], mac(PEER, "p0"))
    static_neigh(PEER, "p0", BRIDGED_POD, mac(POD, "eth0"))
    return {4: UNDER[PEER][0], 6: UNDER[PEER][1]}


def overlay(kind, inherit):
    """The routed pod, its traffic to the peer's overlay address carried
    by a @kind tunnel over h0 (as flannel or Cilium do)."""
    routed()
    tos = " tos inherit" if inherit else ""
    for ns, me, other, dev in ((HOST, UNDER[HOST][0], UNDER[PEER][0], "h0"),
                               (PEER, UNDER[PEER][0], UNDER[HOST][0], "p0")):
        if kind == "vxlan":
            sh(f"ip link add tun0 type vxlan id 42 local {me} remote {other} "
               f"dev {dev} dstport 4789{tos}", ns=ns)
        else:
            sh(f"ip link add tun0 type geneve id 42 remote {other}{tos}",
               ns=ns)
        addr(ns, "tun0", *OVER[ns])
        sh("ip link set tun0 up", ns=ns)
    sh(f"ip route add 10.201.1.0/24 via {OVER[HOST][0]} dev tun0 "
       "onlink", ns=PEER, check=False)
    static_neigh(HOST, "tun0", OVER[PEER], mac(PEER, "tun0"))
    static_neigh(PEER, "tun0", OVER[HOST], mac(HOST, "tun0"))
    return {4: OVER[PEER][0], 6: OVER[PEER][1]}


# ------------------------------------------------------------ traffic

def role(ns, args, user=True, wait=True, timeout=300):
    cmd = (["ip", "netns", "exec", ns] + (NOBODY if user else []) +
           ["env", f"PYTHONPATH={PYPATH}", sys.executable,
            os.path.abspath(__file__)] + args)
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"{' '.join(args)} in {ns}: exit {r.returncode}: "
                           f"{r.stderr.strip()[-500:]}")
    return r


def counters(dev="h0", ns=HOST):
    bands = p3lib.class_stats(dev=dev, ns=ns)
    return bands, p3lib.qdisc_json(dev=dev, ns=ns)["xstats"]["untagged"]


class Sink:
    def __init__(self):
        self.ready = "/tmp/p3-deploy-sink.ready"
        if os.path.exists(self.ready):
            os.unlink(self.ready)
        self.proc = role(PEER, ["sink", "--seconds", "240",
                                "--ready", self.ready], user=False, wait=False)
        for _ in range(300):
            if os.path.exists(self.ready):
                return
            time.sleep(0.1)
        raise RuntimeError("the sink did not start")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def send(dst, proto, method="default", user=True, ns=POD):
    """Every level once from @ns; returns ({level: packets or bytes sent},
    per-band deltas on h0, untagged delta)."""
    before, u0 = counters()
    args = ["send", "--dst", dst, "--proto", proto, "--method", method]
    sent = json.loads(role(ns, args, user=user).stdout)
    time.sleep(0.3)
    after, u1 = counters()
    return ({int(k): v for k, v in sent.items()},
            p3lib.diff_bands(after, before), u1 - u0)


def show(sent, delta, what):
    field = "pkts" if what == "udp" else "bytes"
    return (f"sent {[sent[k] for k in sorted(sent)]} {field}; band {field} "
            f"{[delta.get(b, {}).get(field, 0) for b in range(BANDS)]}")


def expect_levels(chk, label, sent, delta, untagged, proto):
    """Level L reached band L: UDP to the packet, TCP at least its payload
    (plus headers); the default band may carry the host's own chatter."""
    chk.note(f"{label}: {show(sent, delta, proto)}; untagged +{untagged}")
    for level, n in sorted(sent.items()):
        got = delta.get(level, {})
        if proto == "udp":
            ok = got.get("pkts", 0) == n if level < BANDS - 1 \
                else got.get("pkts", 0) >= n
        else:
            ok = got.get("bytes", 0) >= n
        chk.expect(ok, f"{label}: level {level} sent {n}, band {level} "
                       f"got {got}")
    chk.expect(untagged < 20, f"{label}: {untagged} packets untagged")


def expect_default_band(chk, label, sent, delta, proto, chatter=0):
    """The tag was lost: everything in the least urgent band. With tag
    priority the host's own control packets (IGMP and MLD reports, at
    TC_PRIO_CONTROL 7, read as level 6) may add up to @chatter packets to
    band 6: far fewer than the level-6 datagrams a kept tag would put
    there."""
    chk.note(f"{label}: {show(sent, delta, proto)}")
    field = "pkts" if proto == "udp" else "bytes"
    urgent = sum(delta.get(b, {}).get(field, 0) for b in range(BANDS - 1))
    control = delta.get(BANDS - 2, {}).get(field, 0) if chatter else 0
    chk.expect(urgent - control == 0 and control <= chatter < sent[BANDS - 2] // 2,
               f"{label}: {urgent} {field} in bands 0..6")
    chk.expect(delta.get(BANDS - 1, {}).get(field, 0) >= sum(sent.values()),
               f"{label}: the default band missed some")


def p3_defaults(how="tc"):
    if how == "tc":
        sh("tc qdisc add dev h0 root p3", ns=HOST)
    else:
        sh(f"{P3CTL} add h0", ns=HOST)


def every_path(chk, label, dst, tcp=True):
    """UDP and TCP, IPv4 and IPv6, every level, from the pod."""
    sink = Sink() if tcp else None
    try:
        for fam in (4, 6):
            for proto in ("udp", "tcp") if tcp else ("udp",):
                sent, delta, untagged = send(dst[fam], proto)
                expect_levels(chk, f"{label} IPv{fam} {proto}", sent, delta,
                              untagged, proto)
    finally:
        if sink:
            sink.stop()


# ------------------------------------------------------------ the tests

def test_defaults(chk):
    """tc and p3ctl at their defaults, libp3 at its defaults, the sender
    on the node itself: level L in band L."""
    for how in ("tc", "p3ctl"):
        dst = routed()
        p3_defaults(how)
        opts = p3lib.qdisc_json(dev="h0", ns=HOST)["options"]
        chk.expect(opts["tag"] == "dscp" and opts["bands"] == BANDS,
                   f"{how}: default options {opts}")
        sent, delta, untagged = send(dst[4], "udp", ns=HOST)
        expect_levels(chk, f"{how} defaults, on the node", sent, delta,
                      untagged, "udp")
    # The old default (tag priority) against libp3's DSCP: Linux derives
    # the priority from the TOS byte (rt_tos2priority), not the level.
    dst = routed()
    sh("tc qdisc add dev h0 root p3 tag priority", ns=HOST)
    sent, delta, _ = send(dst[4], "udp", ns=HOST)
    chk.note(f"before 0.2 (tag priority), on the node: "
             f"{show(sent, delta, 'udp')}")
    chk.expect(any(delta.get(lv, {}).get("pkts", 0) != n
                   for lv, n in sent.items() if lv < BANDS - 1),
               "tag priority kept the levels apart: the premise is gone")


def test_routed_pod(chk):
    dst = routed()
    p3_defaults()
    every_path(chk, "routed pod", dst)


def test_bridged_pod(chk):
    dst = bridged()
    p3_defaults()
    every_path(chk, "bridged pod", dst)


def test_pod_priority_lost(chk):
    """What the defaults avoid: SO_PRIORITY and SO_MARK from a pod reach
    the node's qdisc as 0 (the kernel clears them on the way out of the
    pod's namespace), however the qdisc reads them."""
    for source in ("priority", "mark"):
        dst = routed()
        sh(f"tc qdisc add dev h0 root p3 tag {source}", ns=HOST)
        sent, delta, _ = send(dst[4], "udp", method=source, user=False)
        expect_default_band(chk, f"pod, tag {source}", sent, delta, "udp",
                            chatter=3 if source == "priority" else 0)
        r = role(POD, ["send", "--dst", dst[4], "--method", source,
                       "--levels", "1", "--base", "1"], user=False)
        chk.expect("RuntimeWarning" in r.stderr and "veth" in r.stderr,
                   f"p3.tag({source}) in the pod did not warn: {r.stderr}")
        # The same socket option on the node itself does reach it.
        sent, delta, untagged = send(dst[4], "udp", method=source,
                                     user=False, ns=HOST)
        expect_levels(chk, f"node, tag {source}", sent, delta, untagged,
                      "udp")


def test_fence(chk):
    """An admin keeps untrusted senders out of the urgent bands whatever
    DSCP they write: a filter on the pod's addresses (filters classify
    before tags), and an nftables rule giving another user's packets the
    default band's class as their priority (read before both).  The
    trusted sender beside them keeps its levels."""
    dst = routed()
    sh("tc qdisc add dev h0 root handle 1: p3", ns=HOST)
    for fam, match in ((4, "ip"), (6, "ip6")):
        proto, prio = ("ip", 1) if fam == 4 else ("ipv6", 2)
        sh(f"tc filter add dev h0 parent 1: protocol {proto} prio {prio} u32 "
           f"match {match} src {PODNET[POD][fam == 6]} classid 1:{BANDS}",
           ns=HOST)
        sent, delta, _ = send(dst[fam], "udp")
        expect_default_band(chk, f"pod fenced by a u32 filter, IPv{fam}",
                            sent, delta, "udp")
    sh("nft add table inet p3fence", ns=HOST)
    sh("nft add chain inet p3fence out "
       "'{ type filter hook output priority 0 ; }'", ns=HOST)
    sh(f"nft add rule inet p3fence out meta skuid 65534 "
       f"meta priority set 1:{BANDS:x}", ns=HOST)
    sent, delta, _ = send(dst[4], "udp", ns=HOST)
    expect_default_band(chk, "another user fenced by nftables", sent,
                        delta, "udp")
    sent, delta, untagged = send(dst[4], "udp", user=False, ns=HOST)
    expect_levels(chk, "root beside the fenced user", sent, delta,
                  untagged, "udp")


def overlay_test(chk, kind):
    dst = overlay(kind, inherit=True)
    p3_defaults()
    every_path(chk, f"{kind} tos inherit", dst)
    dst = overlay(kind, inherit=False)
    p3_defaults()
    sent, delta, _ = send(dst[4], "udp")
    expect_default_band(chk, f"{kind} default tos", sent, delta, "udp")
    # The fix p3ctl doctor and docs/deploy.md give, on the live device.
    fix = f"ip link set tun0 type {kind}{' id 42' * (kind == 'geneve')} " \
          "tos inherit"
    sh(fix, ns=HOST)
    sent, delta, untagged = send(dst[4], "udp")
    expect_levels(chk, f"{kind} after `{fix}`", sent, delta, untagged, "udp")


def test_vxlan(chk):
    overlay_test(chk, "vxlan")


def test_geneve(chk):
    overlay_test(chk, "geneve")


# ------------------------------------------------------------ p3ctl doctor

def doctor(args, traffic=None):
    """`p3ctl --json doctor` in the node, with the pod sending @traffic
    (a method) during its sample; returns (exit status, its report)."""
    bg = None
    if traffic:
        # The sample starts once the sender sends: starting Python takes
        # over a second under TCG, longer than a fixed wait allowed.
        ready = "/tmp/p3-deploy-send.ready"
        if os.path.exists(ready):
            os.unlink(ready)
        bg = role(POD, ["send", "--dst", UNDER[PEER][0], "--proto", "udp",
                        "--method", traffic, "--seconds", "4",
                        "--ready", ready],
                  user=traffic in ("default", "none"), wait=False)
        for _ in range(300):
            if os.path.exists(ready):
                break
            time.sleep(0.1)
    try:
        r = subprocess.run(["ip", "netns", "exec", HOST, P3CTL, "--json",
                            "doctor"] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        if bg:
            bg.wait(timeout=120)
    try:
        report = json.loads(r.stdout)
    except ValueError:
        report = {"problems": [], "unparsed": r.stdout + r.stderr}
    return r.returncode, report


def expect_fixed(chk, label, rep, pid, args):
    """Runs the first fix the doctor gave for @pid; asks it again."""
    fixes = [p["fix"] for p in rep.get("problems", []) if p["id"] == pid]
    if not chk.expect(fixes, f"{label}: no {pid} to fix"):
        return
    cmd = fixes[0][0].split("#")[0].strip()
    if cmd.startswith("p3ctl "):
        cmd = P3CTL + cmd[len("p3ctl"):]
    sh(cmd, ns=HOST)
    time.sleep(1.5)     # linkwatch reports a carrier up to a second late
    rc, again = doctor(args)
    ids = [p["id"] for p in again.get("problems", [])]
    chk.note(f"{label}: ran `{fixes[0][0]}`: then exit {rc}, problems {ids}")
    chk.expect(pid not in ids, f"{label}: `{cmd}` did not fix {pid}")


def expect_diagnosis(chk, label, args, want, traffic="default"):
    rc, rep = doctor(args, traffic)
    ids = [p["id"] for p in rep.get("problems", [])]
    chk.note(f"{label}: exit {rc}, problems {ids}")
    for p in rep.get("problems", []):
        chk.note(f"  {p['id']}: {p['text']} | fix: {'; '.join(p['fix'])}")
    if want:
        chk.expect(rc == 1 and set(want) <= set(ids),
                   f"{label}: want {want}, exit 1")
        for p in rep.get("problems", []):
            chk.expect(bool(p.get("fix")), f"{label}: {p['id']} has no fix")
    else:
        chk.expect(rc == 0 and not ids, f"{label}: want silence, exit 0 "
                                        f"({rep.get('unparsed', '')})")
    return rep


def test_doctor_healthy(chk):
    routed()
    p3_defaults()
    expect_diagnosis(chk, "routed pod, defaults, tagged traffic",
                     ["h0", "--sample", "1"], [])
    overlay("vxlan", inherit=True)
    p3_defaults()
    expect_diagnosis(chk, "vxlan tos inherit", ["h0", "--sample", "1"], [])


def test_doctor_setup(chk):
    """Problems of the set-up, found without a sample."""
    now = ["h0", "--sample", "0"]
    routed()
    rep = expect_diagnosis(chk, "no qdisc", now, ["no-qdisc"], None)
    expect_fixed(chk, "no qdisc", rep, "no-qdisc", now)
    expect_diagnosis(chk, "no device", ["nosuch0", "--sample", "0"],
                     ["no-device"], None)
    sh("ip link set h0 down", ns=HOST)
    rep = expect_diagnosis(chk, "device down", now, ["device-down"], None)
    expect_fixed(chk, "device down", rep, "device-down", now)
    routed()
    sh("tc qdisc add dev h0 root p3 tag priority", ns=HOST)
    rc, rep = doctor(now + ["--tag", "priority"])
    ids = [p["id"] for p in rep.get("problems", [])]
    chk.expect("namespace-crossing" in ids and "tag-source" not in ids,
               f"--tag priority: {ids}")
    rep = expect_diagnosis(chk, "tag priority, a pod behind the node", now,
                           ["tag-source", "namespace-crossing"], None)
    expect_fixed(chk, "tag priority", rep, "tag-source", now)
    for kind in ("vxlan", "geneve"):
        overlay(kind, inherit=False)
        p3_defaults()
        rep = expect_diagnosis(chk, f"{kind} without tos inherit", now,
                               ["tunnel-tos"], None)
        expect_fixed(chk, kind, rep, "tunnel-tos", now)


def test_doctor_traffic(chk):
    """Problems only the sample shows."""
    routed()
    p3_defaults()
    expect_diagnosis(chk, "untagged traffic", ["h0", "--sample", "1"],
                     ["untagged"], "none")
    routed()
    # p3 under an htb class that the default class bypasses.
    sh("tc qdisc add dev h0 root handle 1: htb default 1", ns=HOST)
    for c in (1, 2):
        sh(f"tc class add dev h0 parent 1: classid 1:{c} htb rate 100mbit",
           ns=HOST)
    sh("tc qdisc add dev h0 parent 1:2 handle 10: p3", ns=HOST)
    expect_diagnosis(chk, "p3 under a class htb bypasses",
                     ["h0", "--sample", "1"], ["hidden"])


def test_doctor_module(chk):
    """No p3 exists in the VM between tests, so the module can go."""
    routed()
    # Namespaces die asynchronously, and their qdiscs hold the module.
    for _ in range(50):
        sh("rmmod sch_p3", check=False)
        if not os.path.exists("/sys/module/sch_p3"):
            break
        time.sleep(0.2)
    if not chk.expect(not os.path.exists("/sys/module/sch_p3"),
                      "sch_p3 still loaded after 10 s of rmmod"):
        return
    try:
        expect_diagnosis(chk, "module not loaded", ["h0", "--sample", "0"],
                         ["module-missing"], None)
    finally:
        sh("modprobe sch_p3")


TESTS = [
    ("defaults", test_defaults),
    ("routed_pod", test_routed_pod),
    ("bridged_pod", test_bridged_pod),
    ("pod_priority_lost", test_pod_priority_lost),
    ("fence", test_fence),
    ("vxlan", test_vxlan),
    ("geneve", test_geneve),
    ("doctor_healthy", test_doctor_healthy),
    ("doctor_setup", test_doctor_setup),
    ("doctor_traffic", test_doctor_traffic),
    ("doctor_module", test_doctor_module),
]


def run(args):
    sh("modprobe sch_p3")
    # Each test builds the hosts it needs.
    return p3lib.run_tests(TESTS, args, "deploy", setup=lambda: None,
                           cleanup=teardown)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="role")
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--proto", choices=("udp", "tcp"), default="udp")
    s.add_argument("--method", default="default",
                   help="default (libp3's), dscp, priority, mark or none")
    s.add_argument("--levels", type=int, default=BANDS)
    s.add_argument("--base", type=int, default=10)
    s.add_argument("--bytes", type=int, default=30000)
    s.add_argument("--seconds", type=float, default=0)
    s.add_argument("--ready", help="created once the first datagram is sent")
    k = sub.add_parser("sink")
    k.add_argument("--seconds", type=float, default=240)
    k.add_argument("--ready", required=True)
    p3lib.add_selection_args(ap)
    ap.add_argument("--prefix", default="")
    a = ap.parse_args()
    if a.role == "send":
        return role_send(a)
    if a.role == "sink":
        return role_sink(a)
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
