# SPDX-License-Identifier: GPL-2.0
"""Shared pieces of the p3 VM selftests: TAP output, the kernel-log check,
a two-host network-namespace topology, and qdisc/class statistics.

Everything here runs as root inside the selftest VM (selftests/vm-run);
traffic never leaves the VM's own namespaces.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
P3T = [sys.executable, os.path.join(HERE, "p3t.py")]

# The sender and receiver hosts, joined by one veth pair.
SND, RCV = "p3snd", "p3rcv"
SDEV, RDEV = "s0", "r0"
SADDR, RADDR = "10.199.0.1", "10.199.0.2"
SADDR6, RADDR6 = "fd00:199::1", "fd00:199::2"
PORT = 5201

BAD_LOG = re.compile(r"WARNING:|BUG:|Oops|KASAN|UBSAN|kernel BUG|"
                     r"general protection|Call Trace")


def sh(cmd, check=True, ns=None, capture=True, timeout=120):
    """Runs a shell command (in netns @ns) and returns its stdout."""
    if ns:
        cmd = f"ip netns exec {ns} {cmd}"
    r = subprocess.run(cmd, shell=True, text=True, timeout=timeout,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None)
    if check and r.returncode:
        raise RuntimeError(f"`{cmd}` exited {r.returncode}: "
                           f"{(r.stderr or '').strip()}")
    return r.stdout if capture else ""


class Tap:
    """kselftest-style TAP with a closing `N passed, N failed` line."""

    def __init__(self, prefix=""):
        self.n = self.passed = self.failed = self.skipped = 0
        self.prefix = prefix
        print("TAP version 13", flush=True)

    def result(self, ok, name, diag=""):
        self.n += 1
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        for line in diag.splitlines():
            print(f"# {line}")
        print(f"{'ok' if ok else 'not ok'} {self.n} - {self.prefix}{name}",
              flush=True)

    def skip(self, name, why):
        self.n += 1
        self.skipped += 1
        print(f"ok {self.n} - {self.prefix}{name} # SKIP {why}", flush=True)

    def finish(self):
        print(f"1..{self.n}")
        print(f"# {self.passed} passed, {self.failed} failed, "
              f"{self.skipped} skipped", flush=True)
        return 1 if self.failed else 0


class KernelLog:
    """Finds WARNING/BUG/Oops lines the kernel logged since the last look."""

    def __init__(self):
        self.seen = len(self._lines())

    @staticmethod
    def _lines():
        return sh("dmesg", check=False).splitlines()

    def new_problems(self):
        lines = self._lines()
        new = lines[self.seen:]
        self.seen = len(lines)
        return [ln for ln in new if BAD_LOG.search(ln)]


class Check:
    """Collects numeric expectations of one test and explains failures."""

    def __init__(self):
        self.failures = []
        self.notes = []

    def note(self, msg):
        self.notes.append(msg)

    def expect(self, cond, msg):
        if not cond:
            self.failures.append(msg)
        return cond


def add_selection_args(ap):
    """-t NAME (run only these) and -x NAME (run all but these)."""
    ap.add_argument("-t", "--test", action="append", default=[],
                    help="run only this test (repeatable)")
    ap.add_argument("-x", "--skip", action="append", default=[],
                    help="leave this test out (repeatable)")


def selftest_parser(doc):
    """The command line of a suite run by run_tests(): its docstring as
    help, -t/-x (add_selection_args) and --prefix."""
    import argparse
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawTextHelpFormatter)
    add_selection_args(ap)
    ap.add_argument("--prefix", default="", help="prefix of TAP names")
    return ap


def run_tests(tests, args, label, setup=None, cleanup=None):
    """Runs each (name, fn(chk)) of @tests that @args (add_selection_args,
    and --prefix) selects, after @setup (default: a fresh topology()),
    then @cleanup (default: teardown()); fails it on any kernel-log
    problem, and prints TAP.  Returns the exit status."""
    setup = setup or topology
    cleanup = cleanup or teardown
    tap = Tap(args.prefix)
    # A name list kept elsewhere (run-vm-tests.sh's) must not go stale
    # quietly: a test renamed or removed fails the run.
    for name in sorted(set(args.test + args.skip) - {n for n, _ in tests}):
        tap.result(False, f"{label}: {name}", "no such test")
    klog = KernelLog()
    for name, fn in tests:
        if args.test and name not in args.test or name in args.skip:
            continue
        chk = Check()
        t0 = time.monotonic()
        try:
            setup()
            fn(chk)
        except Exception as e:  # a crashed test is a failed test
            chk.failures.append(f"exception: {e!r}")
        finally:
            cleanup()
        for line in klog.new_problems():
            chk.failures.append(f"kernel log: {line}")
        chk.note(f"took {time.monotonic() - t0:.1f} s")
        tap.result(not chk.failures, f"{label}: {name}",
                   "\n".join(chk.notes + chk.failures))
    return tap.finish()


def topology(ipv6=True):
    """Two hosts, p3snd and p3rcv, joined by veth s0 <-> r0."""
    teardown()
    sh(f"ip netns add {SND}")
    sh(f"ip netns add {RCV}")
    sh(f"ip link add {SDEV} netns {SND} type veth peer name {RDEV} "
       f"netns {RCV}")
    for ns, dev, a, a6 in ((SND, SDEV, SADDR, SADDR6),
                           (RCV, RDEV, RADDR, RADDR6)):
        sh(f"ip addr add {a}/24 dev {dev}", ns=ns)
        if ipv6:
            sh(f"ip addr add {a6}/64 dev {dev} nodad", ns=ns)
        sh(f"ip link set {dev} up", ns=ns)
        sh("ip link set lo up", ns=ns)
        # Segmentation offloads stay on: p3 must pace GSO packets whole.
    # Static neighbours: no ARP/ND packet ever waits in (or pollutes the
    # counters of) the qdisc under test, and no datagram is held back in a
    # neighbour queue while its address resolves.
    macs = {ns: json.loads(sh(f"ip -j link show {dev}", ns=ns))[0]["address"]
            for ns, dev in ((SND, SDEV), (RCV, RDEV))}
    for ns, dev, peer, a, a6 in ((SND, SDEV, RCV, RADDR, RADDR6),
                                 (RCV, RDEV, SND, SADDR, SADDR6)):
        sh(f"ip neigh replace {a} lladdr {macs[peer]} dev {dev} nud permanent",
           ns=ns)
        if ipv6:
            sh(f"ip neigh replace {a6} lladdr {macs[peer]} dev {dev} "
               "nud permanent", ns=ns)
    # veth hands each packet to the backlog of the CPU that sent it, and two
    # CPUs drain their backlogs independently: that alone reorders a flow
    # after the qdisc.  Steering all receive work to one CPU (as RSS keeps
    # a flow on one queue) makes arrival order the qdisc's dequeue order.
    sh(f"sh -c 'echo 1 > /sys/class/net/{RDEV}/queues/rx-0/rps_cpus'", ns=RCV)


# A third host, p3rtr, behind the sender: what it sends to p3rcv's address,
# or to FORWARDED (which p3rcv drops: none of it is its own), p3snd
# forwards out of s0.  Forwarded packets have no local socket, so p3 keys
# them by flow hash.
RTR, FORWARDED = "p3rtr", "10.64.0.0/10"
UDPFLOOD = os.path.join(os.path.dirname(HERE), "build", "bench", "overhead",
                        "udpflood")


def router():
    """p3rtr's g0 <-> p3snd's g1, and the routes through p3snd."""
    sh(f"ip netns add {RTR}")
    sh(f"ip link add g0 netns {RTR} type veth peer name g1 netns {SND}")
    sh("ip addr add 10.198.0.1/24 dev g0", ns=RTR)
    sh("ip link set g0 up", ns=RTR)
    sh("ip link set lo up", ns=RTR)
    sh("ip addr add 10.198.0.2/24 dev g1", ns=SND)
    sh("ip link set g1 up", ns=SND)
    mac = json.loads(sh("ip -j link show g1", ns=SND))[0]["address"]
    sh(f"ip neigh replace 10.198.0.2 lladdr {mac} dev g0 nud permanent",
       ns=RTR)
    sh(f"ip route add {FORWARDED} via 10.198.0.2", ns=RTR)
    sh(f"ip route add {RADDR}/32 via 10.198.0.2", ns=RTR)
    sh("sysctl -qw net.ipv4.ip_forward=1", ns=SND)
    sh(f"ip route add {FORWARDED} via {RADDR}", ns=SND)


def udpflood(args, ns=RTR, timeout=600):
    """Runs bench/overhead/udpflood (make udpflood) and returns its
    report."""
    if not os.access(UDPFLOOD, os.X_OK):
        raise RuntimeError(f"{UDPFLOOD} missing: make udpflood")
    return json.loads(sh(f"{UDPFLOOD} {args}", ns=ns, timeout=timeout))


def no_ipv6():
    """Turns IPv6 off on the sender's link: the host's own chatter (MLD,
    and router solicitations, which Linux repeats with backoff for as long
    as no router answers) would otherwise share the queue, its drops and
    its flow table with the packets a test counts."""
    sh(f"sysctl -qw net.ipv6.conf.{SDEV}.disable_ipv6=1", ns=SND)


def stop_procs(procs, timeout=30):
    """Asks every process of @procs to end, then waits up to @timeout s
    for each and kills any still running."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()


def teardown():
    sh("pkill -f p3t.py", check=False)
    for ns in (SND, RCV, "p3rtr"):
        sh(f"ip netns del {ns}", check=False)
    time.sleep(0.2)


def tc(args, ns=SND):
    return sh(f"tc {args}", ns=ns)


def tc_batch(lines, ns=SND, force=True):
    """Runs @lines in one tc -batch (one process: on the debug kernel
    each tc started costs seconds) and returns its exit status and the
    first errors. With @force it goes on after a failed line."""
    with tempfile.NamedTemporaryFile("w", suffix=".tc", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        r = subprocess.run(["ip", "netns", "exec", ns, "tc"] +
                           (["-force"] if force else []) + ["-batch", path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=600)
    finally:
        os.unlink(path)
    errors = [ln for ln in r.stderr.splitlines()
              if ln.startswith(("Command failed", "Error", "RTNETLINK"))]
    return r.returncode, errors


_CLASS_RE = re.compile(
    r"class p3 (?P<h>[0-9a-f]+):(?P<m>[0-9a-f]+) .*?\n"
    r"\s*Sent (?P<bytes>\d+) bytes (?P<pkts>\d+) pkt \(dropped (?P<drops>\d+),"
    r".*?\n\s*backlog (?P<backlog>\S+) (?P<qlen>\d+)p", re.S)


def class_stats(dev=SDEV, ns=SND):
    """Per-band statistics from `tc -s class show` (text: iproute2 6.1 has
    no JSON for classes).  Returns {band: {bytes, pkts, drops, qlen}}."""
    out = tc(f"-s class show dev {dev}", ns=ns)
    bands = {}
    for m in _CLASS_RE.finditer(out):
        bands[int(m["m"], 16) - 1] = {k: int(m[k]) for k in
                                      ("bytes", "pkts", "drops", "qlen")}
    return bands


def qdisc_json(dev=SDEV, ns=SND, kind="p3"):
    """The p3 qdisc's `tc -s -j qdisc show` object (options, stats, xstats)."""
    for q in json.loads(tc(f"-s -j qdisc show dev {dev}", ns=ns)):
        if q.get("kind") == kind:
            # tc prints xstats at the top level of the qdisc object.
            q.setdefault("xstats", q)
            return q
    raise RuntimeError(f"no {kind} qdisc on {dev}")


# Reads the qdisc's byte counter at both ends of a window, inside the
# namespace, by netlink from one process: each read is stamped between the
# clock before and after it.  Timing `tc -s` from outside would add an exec
# of tens of ms under TCG to each end.  Even one netlink dump can take tens
# of ms on a debug kernel under emulation, so each end keeps the quickest
# of five reads, and the window stretches (up to 4x) until its ends are
# known to 0.5% of it.
_RATE_PROBE = """
import sys, time
sys.path.insert(0, {lib!r})
import p3
def read():
    before = time.monotonic()
    sent = p3.qdisc_stats({dev!r})["total"]["bytes"]
    return sent, before, time.monotonic()
def quickest():
    return min((read() for _ in range(5)), key=lambda r: r[2] - r[1])
b0, a0, z0 = quickest()
time.sleep({seconds!r})
while True:
    b1, a1, z1 = quickest()
    window, slack = (a1 + z1 - a0 - z0) / 2, (z1 - a1 + z0 - a0) / 2
    if slack < window / 200 or window > 4 * {seconds!r}:
        break
    time.sleep({seconds!r} / 2)
print(b1 - b0, window, slack)
"""


def qdisc_sent(seconds, dev=SDEV, ns=SND):
    """Bytes the root qdisc of @dev sends in about @seconds: (bytes,
    window in s, how far the window's ends may be off, in s)."""
    lib = os.path.join(HERE, "..", "userlib", "python")
    code = _RATE_PROBE.format(lib=lib, dev=dev, seconds=seconds)
    sent, window, slack = sh(f"{sys.executable} -c {shlex.quote(code)}",
                             ns=ns).split()
    return int(sent), float(window), float(slack)


def diff_bands(after, before):
    return {b: {k: after[b][k] - before.get(b, {}).get(k, 0)
                for k in after[b]} for b in after}


class Sink:
    """The p3t receiver in p3rcv; stop() returns its JSON report."""

    def __init__(self, port=PORT):
        self.out = f"/tmp/p3t-sink-{port}.json"
        if os.path.exists(self.out):
            os.unlink(self.out)
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", RCV] + P3T +
            ["sink", "--port", str(port), "--out", self.out],
            stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("p3t sink did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        with open(self.out) as f:
            return json.load(f)


def p3t(args, ns=SND, wait=True):
    """Runs a p3t sender in the sender host."""
    cmd = ["ip", "netns", "exec", ns] + P3T + args
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                          text=True, timeout=300).stdout


def tcp_span(report, group):
    """(first, last) time.monotonic() instants at which TCP group @group
    delivered data, or None."""
    bins = report["tcp"].get(str(group))
    if not bins:
        return None
    return bins[0][0] * report["bin"], (bins[-1][0] + 1) * report["bin"]


def tcp_rate(report, group, t_from, t_to):
    """Received bit rate of TCP group @group between two time.monotonic()
    instants (the sink bins by the same clock)."""
    bins = dict(report["tcp"].get(str(group), []))
    width = report["bin"]
    lo, hi = int(t_from / width), int(t_to / width)
    if hi <= lo:
        return 0.0
    total = sum(v for b, v in bins.items() if lo <= b < hi)
    return total * 8 / ((hi - lo) * width)


def parse_rate(text):
    """'50mbit' -> bits per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", text)
    mult = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]]
    return float(m[1]) * mult


def level_tos(level):
    """The TOS byte (DSCP << 2) that tags level by DSCP: RFC 2474's
    local-use code points xxxx11 for levels 0..15, then xxxx01 from 5 on
    (p3_level_dscp() in libp3, the qdisc's built-in DSCP map)."""
    dscp = level << 2 | 3 if level < 16 else (level - 15) << 2 | 1
    return dscp << 2
