# SPDX-License-Identifier: GPL-2.0
"""Helpers of the VM-side benchmarks (bench/preempt, bench/overhead) that
keep process starts down.  Under TCG every exec reads its binary and
libraries over 9p, and `ip netns exec` adds a mount namespace and a /sys
remount: a `p3lib.tc()` call costs about a second.  So:

  - setns(2) moves the calling thread into a netns; sockets made there
    stay there, and a child forked from that thread starts there too;
  - run() execs a program in a netns with no `ip` and no shell, and
    tc_batch() sends several tc commands through one `tc -batch`;
  - Qstats reads qdisc counters over rtnetlink, and netstat() and
    dev_counters() read /proc in a netns, with no exec at all;
  - log() and save_results() report progress and write the results.
"""
import ctypes
import hashlib
import json
import os
import platform
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "selftests"))

import p3nl  # noqa: E402

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_ROOT_NS = os.open("/proc/self/ns/net", os.O_RDONLY)


def setns(name):
    """Moves this thread into netns @name (None: back to the initial one)."""
    fd = _ROOT_NS if name is None else os.open(f"/run/netns/{name}",
                                              os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET):
            e = ctypes.get_errno()
            raise OSError(e, f"setns {name}: {os.strerror(e)}")
    finally:
        if name is not None:
            os.close(fd)


class InNetns:
    """`with InNetns(ns):` sockets made inside belong to @ns for good."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        setns(self.name)

    def __exit__(self, *exc):
        setns(None)


def run(ns, argv, input=None, check=True, timeout=120):
    """Runs @argv in netns @ns; returns its stdout."""
    with InNetns(ns):
        r = subprocess.run(argv, input=input, text=True, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: "
                           f"{r.stderr.strip()}")
    return r.stdout


def tc_batch(ns, cmds, force=False):
    """Several tc commands (without the leading `tc`) in one exec; with
    @force, a failing command (e.g. deleting what is not there) does not
    stop the others."""
    argv = ["tc"] + (["-force"] if force else []) + ["-batch", "-"]
    return run(ns, argv, input="\n".join(cmds) + "\n", check=not force)


def provenance():
    """What was measured: the repo's commit and the module's hash."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    ko = os.path.join(repo, "build", "kmod", platform.release(), "sch_p3.ko")
    r = subprocess.run(["git", "-C", repo, "describe", "--always", "--dirty"],
                       text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL)
    try:
        with open(ko, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()[:12]
    except OSError:
        sha = None
    return {"git": r.stdout.strip() or None, "sch_p3_sha256": sha}


def _proc_net(ns, name):
    with InNetns(ns):
        with open(f"/proc/thread-self/net/{name}") as f:
            return f.read()


def netstat(ns):
    """Tcp, Udp, TcpExt... counters of netns @ns, named as nstat does."""
    out = {}
    for name in ("netstat", "snmp"):
        lines = _proc_net(ns, name).splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            prefix, names = names.split(":", 1)
            _, values = values.split(":", 1)
            for n, v in zip(names.split(), values.split()):
                out[prefix + n] = int(v)
    return out


def dev_counters(ns, dev):
    """rx/tx packets and drops of @dev from /proc/net/dev."""
    for line in _proc_net(ns, "dev").splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == dev:
            v = [int(x) for x in rest.split()]
            return {"rx_packets": v[1], "rx_drop": v[3],
                    "tx_packets": v[9], "tx_drop": v[11]}
    raise KeyError(dev)


class Qstats:
    """Counters of the qdiscs of one device over rtnetlink: cheap enough
    to sample every few milliseconds, unlike running tc."""

    def __init__(self, ns, dev, child_major=0x10):
        with InNetns(ns):
            self.nl = p3nl.Netlink()
            self.ifindex = socket.if_nametoindex(dev)
        self.child_major = child_major
        self.lock = threading.Lock()

    def read(self):
        """{'root'|'child': {bytes, packets, qlen, backlog, drops}}; the
        child is the qdisc whose handle major is @child_major."""
        body = p3nl.TCMSG.pack(socket.AF_UNSPEC, self.ifindex, 0, 0, 0)
        res = {}
        with self.lock:
            self.nl.send(p3nl.RTM_GETQDISC, p3nl.NLM_F_REQUEST |
                         p3nl.NLM_F_ROOT | p3nl.NLM_F_MATCH, body)
            for mtype, _, payload in self.nl.recv():
                if mtype in (p3nl.NLMSG_ERROR, p3nl.NLMSG_DONE):
                    break
                _, idx, handle, parent, _ = p3nl.TCMSG.unpack_from(payload)
                if idx != self.ifindex:
                    continue
                st = {}
                for _, at, data in p3nl.parse_attrs(
                        payload[p3nl.TCMSG.size:]):
                    if at & p3nl.NLA_TYPE_MASK != 7:    # TCA_STATS2
                        continue
                    for _, nt, nd in p3nl.parse_attrs(data):
                        if nt == 1:                     # TCA_STATS_BASIC
                            st["bytes"], st["packets"] = \
                                struct.unpack_from("=QI", nd)
                        elif nt == 3:                   # TCA_STATS_QUEUE
                            (st["qlen"], st["backlog"], st["drops"],
                             _, _) = struct.unpack_from("=5I", nd)
                if parent == p3nl.TC_H_ROOT:
                    res["root"] = st
                if handle >> 16 == self.child_major:
                    res["child"] = st
        return res


def log(msg):
    """Progress, timestamped, on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def save_results(out, res, klog, t_begin):
    """Writes @res to OUT/results.json with what the kernel logged since
    @klog began (a p3lib.KernelLog) and the seconds since @t_begin; the
    exit status: 1 if the kernel logged a problem."""
    res["kernel_problems"] = klog.new_problems()
    res["vm_seconds"] = time.monotonic() - t_begin
    path = os.path.join(out, "results.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    log(f"wrote {path} ({res['vm_seconds']:.0f} s)")
    return 1 if res["kernel_problems"] else 0
