#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""`p3ctl run`: a job, unmodified, in a band of sch_p3, in the VM.

The hosts are p3_deploy.py's routed ones (a pod behind the node, p3 on
the node's h0 towards its peer).  Each job runs unprivileged (uid 65534)
under `p3ctl run --level N` and knows nothing of p3: a shell whose
children and grandchildren send TCP and UDP; the same from the pod;
a libp3 job, whose own levels must win; iperf3 (not Python) beside
untagged bulk on a shaped link, first as the urgent job, then as the
bulk pushed below untagged traffic; and `p3ctl doctor` naming an
untagged job and the command that fixes it.

Runs inside the selftest VM:  selftests/p3_run.py [-t TEST]...
"""
import json
import os
import shlex
import subprocess
import sys
import time

import p3lib
import p3_deploy as dep
from p3lib import sh

HOST, POD, PEER = dep.HOST, dep.POD, dep.PEER
P3CTL = dep.P3CTL
DEPLOY = os.path.join(p3lib.HERE, "p3_deploy.py")
PEER4 = dep.UNDER[PEER][0]
RATE_MBIT = 20      # the shaped link of the iperf3 cases
SECONDS = 6         # the bulk's length; the measured job runs inside it
SHARE = 0.85        # of the link, for the job that should come first


def under_run(level, script, ns=HOST, user=True, timeout=300):
    """`p3ctl run --level @level -- bash -c @script` in @ns; its stdout."""
    cmd = (["ip", "netns", "exec", ns] + (dep.NOBODY if user else []) +
           ["env", f"PYTHONPATH={dep.PYPATH}", P3CTL, "run", "--level",
            str(level), "--", "bash", "-c", script])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"p3ctl run --level {level} in {ns}: exit "
                           f"{r.returncode}: {r.stderr.strip()[-500:]}")
    return r.stdout


def send_cmd(proto, method="none", levels=1):
    """p3_deploy's sender: one socket per level, @method tagging (none: it
    tags nothing itself); prints {level: packets or bytes}."""
    return (f"{sys.executable} {DEPLOY} send --dst {PEER4} --proto {proto} "
            f"--method {method} --levels {levels}")


def counted(script, level, ns=HOST):
    """Runs the job; returns (its senders' reports, band deltas on h0,
    untagged delta)."""
    before, u0 = dep.counters()
    out = under_run(level, script, ns=ns)
    time.sleep(0.3)
    after, u1 = dep.counters()
    sent = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return sent, p3lib.diff_bands(after, before), u1 - u0


def expect_band(chk, label, band, sent, delta, untagged):
    """Every TCP byte and UDP packet the job's processes sent in @band."""
    tcp = sum(v for s in sent if s["proto"] == "tcp" for v in s["n"].values())
    udp = sum(v for s in sent if s["proto"] == "udp" for v in s["n"].values())
    got = delta.get(band, {})
    others = {b: d["pkts"] for b, d in delta.items() if b != band and d["pkts"]}
    chk.note(f"{label}: {len(sent)} senders, TCP {tcp} B, UDP {udp} pkts; "
             f"band {band} {got}; other bands' packets {others}; untagged "
             f"+{untagged}")
    chk.expect(len(sent) >= 2 and tcp and udp, f"{label}: the senders did not all report")
    chk.expect(got.get("bytes", 0) >= tcp and got.get("pkts", 0) >= udp,
               f"{label}: band {band} missed the job's traffic")
    chk.expect(sum(others.values()) < 20 and untagged < 20,
               f"{label}: packets outside band {band}")


def tree_script():
    """Three senders: the shell's child (TCP), and two of a grandchild shell
    (UDP and TCP); each prints {"proto", "n"}."""
    lines = []
    for proto, depth in (("tcp", 1), ("udp", 2), ("tcp", 2)):
        cmd = (f"{send_cmd(proto)} | {sys.executable} -c "
               f"'import json,sys; print(json.dumps({{\"proto\": \"{proto}\", "
               f"\"n\": json.load(sys.stdin)}}))'")
        lines.append(cmd if depth == 1 else f"bash -c {shlex.quote(cmd)}")
    return " & ".join(lines) + "; wait"


class Peer:
    """The peer's sink (p3_deploy's) and two iperf3 servers."""

    def __init__(self):
        self.sink = dep.Sink()
        self.iperf = [subprocess.Popen(
            ["ip", "netns", "exec", PEER, "iperf3", "-s", "-p", str(p)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for p in (5201, 5202)]
        time.sleep(0.5)

    def stop(self):
        self.sink.stop()
        for p in self.iperf:
            p.kill()
            p.wait()


def tree_in(chk, ns, level, label):
    """tree_script() under --level @level in @ns: all of it in that band."""
    dep.routed()
    dep.p3_defaults()
    peer = Peer()
    try:
        sent, delta, untagged = counted(tree_script(), level, ns=ns)
        expect_band(chk, label, level, sent, delta, untagged)
    finally:
        peer.stop()


def test_process_tree(chk):
    tree_in(chk, HOST, 2, "a shell's children and grandchildren at level 2")


def test_pod(chk):
    tree_in(chk, POD, 1, "a pod's job at level 1, through the node's h0")


def test_own_tags(chk):
    """A job that tags itself through libp3 (each level L on its own
    socket, every level of the qdisc) keeps its levels under --level 0."""
    dep.routed()
    dep.p3_defaults()
    peer = Peer()
    try:
        for proto in ("udp", "tcp"):
            before, u0 = dep.counters()
            out = under_run(0, send_cmd(proto, "default", dep.BANDS))
            time.sleep(0.3)
            after, u1 = dep.counters()
            sent = {int(k): v for k, v in json.loads(out).items()}
            dep.expect_levels(chk, f"libp3's own levels under --level 0 ({proto})",
                              sent, p3lib.diff_bands(after, before), u1 - u0, proto)
    finally:
        peer.stop()


def iperf(port, seconds, level=None, bitrate=None, title=None):
    """iperf3 to the peer from the node, unprivileged, under p3ctl run
    --level @level (None: as it is); a Popen whose stdout is its JSON."""
    cmd = (f"iperf3 -c {PEER4} -p {port} -t {seconds} -J"
           + (f" -b {bitrate}" if bitrate else "")).split()
    argv = ["ip", "netns", "exec", HOST] + dep.NOBODY
    if level is not None:
        argv += [P3CTL, "run", "--level", str(level), "--"]
    return subprocess.Popen(argv + cmd + (["-T", title] if title else []),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def mbit(proc):
    out, err = proc.communicate(timeout=120)
    if proc.returncode:
        raise RuntimeError(f"iperf3 exited {proc.returncode}: {err.strip()[-300:]}")
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def beside_bulk(chk, label, job_level, bulk_level, job_band, defband=None):
    """The job (iperf3, 4 s) starts 1 s into 6 s of bulk (iperf3); each
    under p3ctl run at its level, or untagged (None).  The job must get
    SHARE of the link, its bytes in @job_band."""
    p3_opts = f"rate {RATE_MBIT}mbit" + (f" default {defband}" if defband is not None else "")
    sh(f"tc qdisc replace dev h0 root p3 {p3_opts}", ns=HOST)
    before, _ = dep.counters()
    bulk = iperf(5201, SECONDS, bulk_level)
    time.sleep(1)
    job = iperf(5202, SECONDS - 2, job_level)
    job_mbit, bulk_mbit = mbit(job), mbit(bulk)
    after, _ = dep.counters()
    delta = p3lib.diff_bands(after, before)
    share = job_mbit / RATE_MBIT
    chk.note(f"{label}: p3 {p3_opts}: the job {job_mbit:.1f} Mbit/s ({share:.2f} of the "
             f"link), the bulk {bulk_mbit:.1f} over its {SECONDS} s; band bytes "
             f"{ {b: d['bytes'] for b, d in sorted(delta.items()) if d['bytes']} }")
    chk.expect(share >= SHARE, f"{label}: the job had {share:.2f} of the link, "
                               f"want {SHARE}")
    chk.expect(delta.get(job_band, {}).get("bytes", 0) >= job_mbit * 1e6 / 8 * (SECONDS - 2) * 0.9,
               f"{label}: band {job_band} did not carry the job's bytes")


def test_iperf3_first(chk):
    """iperf3 (not Python) at level 0 beside untagged bulk."""
    dep.routed()
    peer = Peer()
    try:
        beside_bulk(chk, "iperf3 at level 0 beside untagged bulk", 0, None, 0)
    finally:
        peer.stop()


def test_bulk_below(chk):
    """The bulk at the least urgent level, below untagged traffic (the
    qdisc's default band one above it): an untagged iperf3 comes first."""
    dep.routed()
    peer = Peer()
    try:
        last = dep.BANDS - 1
        beside_bulk(chk, f"untagged iperf3 beside bulk at level {last}", None, last,
                    last - 1, defband=last - 1)
    finally:
        peer.stop()


def test_doctor_names_job(chk):
    """An untagged bulk sender on the node: doctor names its process and
    the p3ctl run command, its arguments quoted for the shell (a title
    with a space and a quote); restarted under that command, it is
    gone."""
    dep.routed()
    dep.p3_defaults()
    peer = Peer()
    title = "it's a job"
    try:
        for run_level in (None, 0):
            before, _ = dep.counters()
            bulk = iperf(5201, 8, run_level, bitrate="40M", title=title)
            time.sleep(2)
            rc, rep = dep.doctor(["h0", "--sample", "2"])
            mbit(bulk)
            after, _ = dep.counters()
            band0 = p3lib.diff_bands(after, before).get(0, {}).get("bytes", 0)
            ids = [p["id"] for p in rep.get("problems", [])]
            jobs = [p for p in rep.get("problems", []) if p["id"] == "untagged-job"]
            chk.note(f"--level {run_level}: exit {rc}, problems {ids}, band 0 +{band0} B")
            for p in jobs:
                chk.note(f"{p['text']} | fix: {'; '.join(p['fix'])}")
            chk.expect("check-failed" not in ids, "a doctor check failed")
            if run_level is None:
                # ip netns exec, setpriv and p3ctl run each exec the next.
                chk.expect(rc == 1 and jobs and f"process {bulk.pid} " in jobs[0]["text"],
                           "doctor did not name the untagged iperf3")
                fix = shlex.split(jobs[0]["fix"][0].split("   #")[0]) if jobs else []
                chk.expect(fix[:5] == ["p3ctl", "run", "--level", "0", "--"]
                           and fix[5:8] == ["iperf3", "-c", PEER4] and fix[-2:] == ["-T", title],
                           f"the fix is not p3ctl run --level 0 -- iperf3 ... -T {title!r}: {fix}")
            else:
                chk.expect(not jobs and band0 > 1 << 20,
                           "doctor named a job that runs under p3ctl run, or band 0 "
                           "did not carry it")
    finally:
        peer.stop()


TESTS = [
    ("process_tree", test_process_tree),
    ("pod", test_pod),
    ("own_tags", test_own_tags),
    ("iperf3_first", test_iperf3_first),
    ("bulk_below", test_bulk_below),
    ("doctor_names_job", test_doctor_names_job),
]


def main():
    args = p3lib.selftest_parser(__doc__).parse_args()
    sh("modprobe sch_p3")
    return p3lib.run_tests(TESTS, args, "run", setup=lambda: None,
                           cleanup=dep.teardown)


if __name__ == "__main__":
    sys.exit(main())
