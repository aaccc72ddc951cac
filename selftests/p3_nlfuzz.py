#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Netlink fuzzer of the p3 qdisc, run as root inside the selftest VM.

Sends random and mutated RTM_NEWQDISC, RTM_DELQDISC, RTM_NEWTCLASS,
RTM_DELTCLASS and RTM_GETTCLASS requests (TCA_KIND "p3", TCA_OPTIONS
nests built from p3's policy, then broken: out-of-range values, wrong
lengths, duplicate, unknown and rejected attributes, stray and missing
NLA_F_NESTED, truncated attributes, nests and messages, bad envelopes)
over a raw NETLINK_ROUTE socket with NETLINK_EXT_ACK, to a p3 qdisc at
the root, under tbf and under htb, while TCP and UDP flows go through it.

Checks, in numbers:
  - the kernel logs no report (KASAN, UBSAN, lockdep, WARN, BUG, ...);
  - no request that sets a p3 option out of its range is accepted, and a
    refused change leaves the configuration as it was (re-read and
    compared for a sample of refusals);
  - an accepted valid change reads back as sent;
  - every refused request that reached the p3 qdisc (a well-formed
    envelope) carries an extack message; refusals without one are
    counted by shape, with whether the core or p3 refused them;
  - after each phase the qdisc still carries traffic, in priority order:
    every datagram of an urgent burst arrives, and a new TCP flow in a
    more urgent band than the bulk TCP flows delivers a twentieth of the
    link or more, and more than the bulk flows beside it.

  selftests/vm-run -- selftests/p3_nlfuzz.py [-n REQUESTS] [--seed S]
      [--phases root,tbf,htb] [--no-traffic] [--prefix P]

The default of 3,000 requests is the CI-sized run of `make check` (stock
kernels, and the debug kernel's --quick pass); `make check-debug` runs
-n 100000. p3_churn.py and p3_faults.py import the
netlink, namespace and kernel-report helpers from here.
"""
import argparse
import collections
import ctypes
import errno
import os
import random
import re
import socket
import struct
import sys
import time

from p3lib import (PORT, RADDR, SDEV, SND, Sink, Tap, p3t, parse_rate, sh,
                   stop_procs, tc, tc_batch, tcp_rate, tcp_span, teardown,
                   topology)

HERE = os.path.dirname(os.path.abspath(__file__))

# --- netlink ---------------------------------------------------------

NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTCLASS, RTM_DELTCLASS, RTM_GETTCLASS = 40, 41, 42
RTM_NAMES = {RTM_NEWQDISC: "NEWQDISC", RTM_DELQDISC: "DELQDISC",
             RTM_GETQDISC: "GETQDISC", RTM_NEWTCLASS: "NEWTCLASS",
             RTM_DELTCLASS: "DELTCLASS", RTM_GETTCLASS: "GETTCLASS"}

NLM_F_REQUEST, NLM_F_ACK, NLM_F_ECHO = 0x1, 0x4, 0x8
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
NLM_F_DUMP = 0x300
NLM_F_CAPPED, NLM_F_ACK_TLVS = 0x100, 0x200
NLA_F_NESTED, NLA_F_NET_BYTEORDER = 0x8000, 0x4000
NLA_TYPE_MASK = 0x3fff
SOL_NETLINK, NETLINK_EXT_ACK = 270, 11
NLMSGERR_ATTR_MSG, NLMSGERR_ATTR_OFFS = 1, 2

TCA_KIND, TCA_OPTIONS, TCA_STATS, TCA_XSTATS, TCA_RATE = 1, 2, 3, 4, 5
TCA_STAB, TCA_DUMP_INVISIBLE = 8, 10
TCA_INGRESS_BLOCK, TCA_EGRESS_BLOCK = 13, 14
TCA_STATS2, TCA_STATS_APP = 7, 4
TC_H_ROOT, TC_H_INGRESS = 0xFFFFFFFF, 0xFFFFFFF1

HDR = struct.Struct("=IHHII")
TCMSG = struct.Struct("=BxxxiIII")
NLA = struct.Struct("=HH")

# TCA_P3_*, from include/uapi/linux/pkt_sched_p3.h: type -> (name, size,
# [valid values or (lo, hi)]).
P3_BANDS, P3_DEFAULT, P3_TAG, P3_LIMIT = 1, 2, 3, 4
P3_MEMORY, P3_QUANTUM, P3_RATE, P3_PAD, P3_BUCKETS = 5, 6, 7, 8, 9
P3_FLOWS, P3_DSCPMAP = 10, 11
P3_MAX = 11
P3_POLICY = {P3_BANDS: ("bands", 1), P3_DEFAULT: ("default", 1),
             P3_TAG: ("tag", 1), P3_LIMIT: ("limit", 4),
             P3_MEMORY: ("memory", 4), P3_QUANTUM: ("quantum", 4),
             P3_RATE: ("rate", 8), P3_BUCKETS: ("buckets", 4),
             P3_FLOWS: ("flows", 4), P3_DSCPMAP: ("dscpmap", 64)}
BUILTIN = 0xff      # TC_P3_DSCP_BUILTIN
P3_MIN_FLOWS, P3_MAX_FLOWS = 1, 1 << 20
P3_MAX_LIMIT, P3_MAX_MEMORY = 1 << 20, 1 << 30
FMT = {1: "=B", 2: "=H", 4: "=I", 8: "=Q"}
# TCA_P3_CLASS_*: a band's class options (tc class change ... p3 ...).
P3_CLASS_DEADLINE, P3_CLASS_MAX = 1, 1
P3_MAX_DEADLINE_US = 10000000

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


def nla(atype, payload, pad=True):
    data = NLA.pack(NLA.size + len(payload), atype) + payload
    return data + b"\0" * (-len(data) % 4 if pad else 0)


def parse_attrs(buf):
    off = 0
    while off + NLA.size <= len(buf):
        alen, atype = NLA.unpack_from(buf, off)
        if alen < NLA.size or off + alen > len(buf):
            return
        yield atype, buf[off + NLA.size:off + alen]
        off += (alen + 3) & ~3


class in_netns:
    """Context manager: the calling thread enters network namespace @ns
    (ip netns add's name) and comes back on exit. Sockets made inside
    stay in @ns."""

    def __init__(self, ns):
        self.ns = ns

    def _setns(self, fd):
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "setns: " + os.strerror(e))

    def __enter__(self):
        self.home = os.open("/proc/self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.ns}", os.O_RDONLY)
        try:
            self._setns(fd)
        finally:
            os.close(fd)
        return self

    def __exit__(self, *exc):
        try:
            self._setns(self.home)
        finally:
            os.close(self.home)


class Reply:
    """What the kernel answered to one request."""
    __slots__ = ("err", "msg", "offs", "msgs", "acked")

    def __init__(self):
        self.err, self.msg, self.offs = None, None, None
        self.msgs = []          # (type, payload) of non-error replies
        self.acked = False      # an NLMSG_ERROR or NLMSG_DONE came


class Rtnl:
    """A raw NETLINK_ROUTE socket with extended acks, in namespace @ns."""

    def __init__(self, ns=None):
        if ns:
            with in_netns(ns):
                self._open()
                self.lo = socket.if_nametoindex("lo")
        else:
            self._open()
        self.seq = int(time.time()) & 0xffffff

    def _open(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 0))
        self.sock.settimeout(10)

    def close(self):
        self.sock.close()

    def request(self, mtype, flags, body, raw_len=None, sentinel=False):
        """Sends one message and collects its replies. @raw_len overrides
        nlmsg_len (a lying header). With @sentinel (or without NLM_F_ACK),
        a NOOP with an ack request follows, so that a request the core
        drops without a word still ends the wait."""
        self.seq = (self.seq + 1) & 0xffffffff
        seq = self.seq
        mlen = HDR.size + len(body) if raw_len is None else raw_len
        self.sock.send(HDR.pack(mlen, mtype, flags, seq, 0) + body)
        guard = None
        if sentinel or not flags & NLM_F_ACK or not flags & NLM_F_REQUEST:
            self.seq = (self.seq + 1) & 0xffffffff
            guard = self.seq
            self.sock.send(HDR.pack(HDR.size, NLMSG_NOOP,
                                    NLM_F_REQUEST | NLM_F_ACK, guard, 0))
        rep = Reply()
        while True:
            data = self.sock.recv(1 << 20)
            off = 0
            while off + HDR.size <= len(data):
                ln, t, fl, s, _ = HDR.unpack_from(data, off)
                if ln < HDR.size:
                    break
                payload = data[off + HDR.size:off + ln]
                off += (ln + 3) & ~3
                if s == guard and t == NLMSG_ERROR:
                    return rep
                if s != seq:
                    continue
                if t == NLMSG_ERROR:
                    self._error(rep, fl, payload)
                    if guard is None:
                        return rep
                elif t == NLMSG_DONE:
                    rep.acked = True
                    rep.err = -struct.unpack_from("=i", payload)[0] \
                        if len(payload) >= 4 else 0
                    self._tlvs(rep, payload[4:])
                    if guard is None:
                        return rep
                else:
                    rep.msgs.append((t, payload))

    def _error(self, rep, flags, payload):
        rep.acked = True
        rep.err = -struct.unpack_from("=i", payload)[0]
        if flags & NLM_F_ACK_TLVS:
            echoed = HDR.size if flags & NLM_F_CAPPED else \
                HDR.unpack_from(payload, 4)[0]
            self._tlvs(rep, payload[4 + ((echoed + 3) & ~3):])

    @staticmethod
    def _tlvs(rep, buf):
        for atype, data in parse_attrs(buf):
            if atype == NLMSGERR_ATTR_MSG:
                rep.msg = data.rstrip(b"\0").decode(errors="replace")
            elif atype == NLMSGERR_ATTR_OFFS and len(data) == 4:
                rep.offs = struct.unpack("=I", data)[0]

    def qdiscs(self, ifindex, invisible=False):
        """Every qdisc of @ifindex: [{handle, parent, kind, options,
        xstats}], p3's options decoded. With @invisible, also the default
        children that classful qdiscs make (tbf's bfifo, htb's pfifo)."""
        body = TCMSG.pack(0, ifindex, 0, 0, 0)
        if invisible:
            body += nla(TCA_DUMP_INVISIBLE, b"")
        rep = self.request(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, body)
        out = []
        for t, payload in rep.msgs:
            if t != RTM_NEWQDISC:
                continue
            _, idx, handle, parent, _ = TCMSG.unpack_from(payload)
            if idx != ifindex:
                continue
            q = {"handle": handle, "parent": parent, "kind": None,
                 "options": None, "xstats": None}
            for atype, data in parse_attrs(payload[TCMSG.size:]):
                atype &= NLA_TYPE_MASK
                if atype == TCA_KIND:
                    q["kind"] = data.rstrip(b"\0").decode()
                elif atype == TCA_OPTIONS:
                    q["options"] = data
                elif atype == TCA_STATS2:
                    for st, sd in parse_attrs(data):
                        if st & NLA_TYPE_MASK == TCA_STATS_APP:
                            q["xstats"] = sd
            if q["kind"] == "p3" and q["options"] is not None:
                q["options"] = decode_p3(q["options"])
            out.append(q)
        return out

    def p3_at(self, ifindex, handle):
        for q in self.qdiscs(ifindex):
            if q["kind"] == "p3" and q["handle"] == handle:
                return q
        return None


def decode_p3(opts):
    out = {}
    for atype, data in parse_attrs(opts):
        name, size = P3_POLICY.get(atype & NLA_TYPE_MASK, (None, None))
        if name and len(data) == size:
            out[name] = data.hex() if size not in FMT else \
                struct.unpack(FMT[size], data)[0]
    return out


XSTATS = struct.Struct("=IIQQQQQQQQQQQ")
XSTATS_NAMES = ("flows", "flows_active", "flows_created", "flows_gc",
                "preemptions", "boosts", "untagged", "drops_limit",
                "drops_memory", "throttled", "drops_deadline",
                "drops_tolerant", "spilled")


def decode_xstats(data):
    data = (data or b"") + b"\0" * max(0, XSTATS.size - len(data or b""))
    return dict(zip(XSTATS_NAMES, XSTATS.unpack_from(data)))


def fmt_handle(h):
    if h == TC_H_ROOT:
        return "root"
    return "%x:%x" % (h >> 16, h & 0xffff)


# --- kernel reports --------------------------------------------------

# Headlines of kernel reports. Not "Call Trace" alone: an allocation
# failure that fault injection caused on purpose prints a stack too
# (warn_alloc), and is no bug.
# Not kmemleak's "N new suspected memory leaks": every scan logs it, and
# selftests/debug-kernel/guest.sh judges the scans' reports; as a log
# line it would fail whatever runs next.
REPORT = re.compile(
    r"WARNING:|BUG:|Oops|KASAN|UBSAN|kernel BUG|general protection|"
    r"ODEBUG|possible circular locking|inconsistent lock state|"
    r"possible recursive locking|suspicious RCU usage|INFO: task|"
    r"rcu: INFO|self-detected stall|watchdog: BUG|unreferenced object|"
    r"Unable to handle|list_(add|del) corruption|refcount_t:|"
    r"leaked reference|slab error|Redzone|Poison overwritten|"
    r"Object already free|Freepointer")


class KernelLog:
    """The kernel log from now on, read from /dev/kmsg: one reader per
    instance, each with its own position, and no line lost to counting
    when the ring buffer wraps (an overrun is counted in .lost)."""

    def __init__(self):
        self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self.fd, 0, os.SEEK_END)
        self.lost = 0

    def lines(self):
        out = []
        while True:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                return out
            except BrokenPipeError:     # overwritten before we read it
                self.lost += 1
                continue
            # "prio,seq,usec,flags;text" and " KEY=value" lines after it.
            out.append(rec.decode(errors="replace").partition(";")[2]
                       .split("\n")[0])

    def close(self):
        os.close(self.fd)


class KernelReports(KernelLog):
    """New kernel log lines that are reports, since the last look."""

    def new(self):
        return [ln for ln in self.lines() if REPORT.search(ln)]


# --- request generation ----------------------------------------------

def u(size, v):
    if size == 64:      # the DSCP map: v's eight bytes, eight times
        return u(8, v) * 8
    return struct.pack(FMT[size], v & ((1 << (8 * size)) - 1))


def dscpmap(r, bands, bad=False):
    """A map of BUILTIN with a few code points set: to bands below
    bands, or (bad) one to a band no qdisc has."""
    m = bytearray([BUILTIN] * 64)
    for _ in range(r.randint(0, 4)):
        m[r.randrange(64)] = r.randrange(bands)
    if bad:
        m[r.randrange(64)] = r.choice([64, 65, 128, 254])
    return bytes(m)


BAD_VALUES = {
    P3_BANDS: lambda r: r.choice([0, 1, 65, 66, 100, 128, 255]),
    P3_TAG: lambda r: r.choice([3, 4, 7, 64, 128, 255]),
    P3_LIMIT: lambda r: r.choice([0, P3_MAX_LIMIT + 1, 0xffffffff]),
    P3_MEMORY: lambda r: r.choice([1, 2, 1500, 4096, 65535,
                                   P3_MAX_MEMORY + 1, 0xffffffff]),
    P3_QUANTUM: lambda r: r.choice([0, 1, 255, (1 << 20) + 1, 1 << 24,
                                    0xffffffff]),
    P3_BUCKETS: lambda r: r.choice([0, 1, 8, 15, 17, 1000, 4095,
                                    (1 << 20) + 1, 1 << 21, 0xffffffff]),
    P3_FLOWS: lambda r: r.choice([0, P3_MAX_FLOWS + 1, 1 << 21, 0xffffffff,
                                  r.randint(P3_MAX_FLOWS + 1, 0xffffffff)]),
}


class Target:
    """Where the p3 under test sits: device, parent, handle."""

    def __init__(self, ifindex, parent, handle, phase):
        self.ifindex, self.parent, self.handle = ifindex, parent, handle
        self.phase = phase


class Request:
    __slots__ = ("mtype", "flags", "body", "raw_len", "env", "opt",
                 "sent", "bad_range", "targeted")

    def __init__(self):
        self.env = []       # envelope mutations (reach the core, not p3)
        self.opt = "valid"  # the options mutation
        self.sent = {}      # p3 options as sent, by name, if well formed
        self.bad_range = False
        self.raw_len = None
        self.targeted = True


class Gen:
    def __init__(self, rng, target):
        self.r = rng
        self.t = target

    def valid_opts(self):
        r = self.r
        attrs, sent = [], {}
        bands = None
        if r.random() < 0.6:
            bands = r.choice([2, 3, 4, 8, 8, 16, 64, r.randint(2, 64)])
            attrs.append((P3_BANDS, u(1, bands)))
            sent["bands"] = bands
        if r.random() < 0.3:
            d = r.randrange(bands or 2)
            attrs.append((P3_DEFAULT, u(1, d)))
            sent["default"] = d
        if r.random() < 0.4:
            v = r.randint(0, 2)
            attrs.append((P3_TAG, u(1, v)))
            sent["tag"] = v
        if r.random() < 0.4:
            v = r.choice([1, 2, 10, 100, 1000, 10000,
                          r.randint(1, P3_MAX_LIMIT), P3_MAX_LIMIT])
            attrs.append((P3_LIMIT, u(4, v)))
            sent["limit"] = v
        if r.random() < 0.3:
            # (0 reads back as the most, P3_MAX_MEMORY)
            v = r.choice([65536, 1 << 20, 16 << 20, P3_MAX_MEMORY])
            attrs.append((P3_MEMORY, u(4, v)))
            sent["memory"] = v
        if r.random() < 0.3:
            v = r.choice([256, 1514, 3028, 65536, 1 << 20,
                          r.randint(256, 1 << 20)])
            attrs.append((P3_QUANTUM, u(4, v)))
            sent["quantum"] = v
        if r.random() < 0.4:
            v = r.choice([0, 0, 2500000, 125000, 1 << 30, 1,
                          0xffffffffffffffff, r.randint(1, 1 << 40)])
            attrs.append((P3_RATE, u(8, v)))
            sent["rate"] = v
        if r.random() < 0.2:
            v = r.choice([16, 1024, 4096, 4096, 65536, 1 << 20])
            attrs.append((P3_BUCKETS, u(4, v)))
            sent["buckets"] = v
        if r.random() < 0.2:
            # Bands the qdisc has whatever this request leaves it with.
            v = dscpmap(r, bands or 2)
            attrs.append((P3_DSCPMAP, v))
            sent["dscpmap"] = v.hex()
        if r.random() < 0.2:
            v = r.choice([P3_MIN_FLOWS, 2, 64, 4096, 16384, P3_MAX_FLOWS,
                          r.randint(P3_MIN_FLOWS, P3_MAX_FLOWS)])
            attrs.append((P3_FLOWS, u(4, v)))
            sent["flows"] = v
        r.shuffle(attrs)
        return attrs, sent, bands

    def options(self, req):
        """The TCA_OPTIONS payload and whether its flag is right."""
        r = self.r
        attrs, sent, bands = self.valid_opts()
        attrs = [(t, p, True) for t, p in attrs]   # (type, payload, pad)
        kind = r.choices(
            ["valid", "range", "length", "dup", "unknown", "pad", "flags",
             "trunc_attr", "trunc_nest", "garbage", "empty", "flat",
             "many"],
            [30, 14, 10, 6, 8, 3, 5, 6, 4, 4, 3, 4, 3])[0]
        req.opt = kind
        nested = True
        if kind == "range":
            t = r.choice(list(BAD_VALUES) + [P3_DEFAULT, P3_DSCPMAP])
            attrs = [a for a in attrs if a[0] != t]
            if t == P3_DEFAULT:
                b = bands or r.choice([2, 8, 64])
                attrs = [a for a in attrs if a[0] != P3_BANDS]
                attrs.append((P3_BANDS, u(1, b), True))
                attrs.append((P3_DEFAULT, u(1, r.randint(b, 255)), True))
            else:
                size = P3_POLICY[t][1]
                bad = dscpmap(r, 2, True) if t == P3_DSCPMAP else \
                    u(size, BAD_VALUES[t](r))
                attrs.append((t, bad, True))
            r.shuffle(attrs)
            req.bad_range = True
            sent = {}
        elif kind == "length":
            t = r.choice(list(P3_POLICY) + [P3_PAD])
            size = P3_POLICY.get(t, ("pad", 8))[1]
            n = r.choice([x for x in (0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 16)
                          if x != size])
            attrs.append((t, bytes(r.getrandbits(8) for _ in range(n)),
                          True))
            sent = {}
        elif kind == "dup":
            if not attrs:
                attrs = [(P3_BANDS, u(1, 8), True)]
            attrs.append(r.choice(attrs))
            if r.random() < 0.5:
                t = r.choice(list(P3_POLICY))
                attrs.append((t, u(P3_POLICY[t][1], r.getrandbits(32)),
                              True))
            sent = {}
        elif kind == "unknown":
            t = r.choice([0, P3_MAX + 1, P3_MAX + 2, 31, 255, 0x3fff,
                          r.randint(P3_MAX + 1, 0x3fff)])
            attrs.insert(r.randrange(len(attrs) + 1),
                         (t, u(4, r.getrandbits(32)), True))
            sent = {}
        elif kind == "pad":
            attrs.insert(r.randrange(len(attrs) + 1),
                         (P3_PAD, u(8, 0), True))
            sent = {}
        elif kind == "flags":
            if not attrs:
                attrs = [(P3_LIMIT, u(4, 100), True)]
            i = r.randrange(len(attrs))
            t, p, pad = attrs[i]
            attrs[i] = (t | r.choice([NLA_F_NESTED, NLA_F_NET_BYTEORDER,
                                      NLA_F_NESTED | NLA_F_NET_BYTEORDER]),
                        p, pad)
            sent = {}
        elif kind in ("flat", "trunc_nest"):
            nested = kind != "flat"
            sent = {}
        payload = b"".join(nla(t, p) for t, p, _ in attrs)
        if kind == "trunc_attr":
            # The last attribute claims more (or less) than there is.
            tail = nla(P3_LIMIT, u(4, 5))
            claim = r.choice([0, 1, 3, 5, 9, 200, 0xffff])
            payload += struct.pack("=HH", claim, P3_LIMIT) + tail[4:]
            payload = payload[:len(payload) - r.randint(0, 6)]
            sent = {}
        elif kind == "garbage":
            payload = bytes(r.getrandbits(8)
                            for _ in range(r.randint(1, 64)))
            sent = {}
        elif kind == "empty":
            payload = b""
            sent = {}
        elif kind == "many":
            # Every attribute, several times, up to a large nest.
            many = []
            for _ in range(r.randint(20, 200)):
                t = r.choice(list(P3_POLICY))
                many.append(nla(t, u(P3_POLICY[t][1], r.getrandbits(64))))
            payload = b"".join(many)
            sent = {}
        req.sent = sent
        return payload, nested

    def class_options(self, req):
        """A class's TCA_OPTIONS payload: a deadline, or a broken one."""
        r = self.r
        kind = r.choices(["valid", "range", "length", "unknown", "flat",
                          "garbage", "empty"], [40, 20, 12, 10, 6, 6, 6])[0]
        req.opt += "/class-" + kind
        if kind == "valid":
            v = r.choice([0, 1, 2000, P3_MAX_DEADLINE_US,
                          r.randint(0, P3_MAX_DEADLINE_US)])
            return nla(P3_CLASS_DEADLINE, u(4, v)), True
        if kind == "range":
            req.bad_range = True
            v = r.choice([P3_MAX_DEADLINE_US + 1, 0xffffffff,
                          r.randint(P3_MAX_DEADLINE_US + 1, 0xffffffff)])
            return nla(P3_CLASS_DEADLINE, u(4, v)), True
        if kind == "length":
            n = r.choice([0, 1, 2, 3, 5, 8])
            return nla(P3_CLASS_DEADLINE,
                       bytes(r.getrandbits(8) for _ in range(n))), True
        if kind == "unknown":
            t = r.choice([0, P3_CLASS_MAX + 1, 9, 0x3fff])
            return nla(t, u(4, 1000)), True
        if kind == "flat":
            return nla(P3_CLASS_DEADLINE, u(4, 1000)), False
        if kind == "garbage":
            return bytes(r.getrandbits(8)
                         for _ in range(r.randint(1, 32))), True
        return b"", True

    def options_attr(self, req, payload, nested):
        """TCA_OPTIONS around @payload; for "trunc_nest", with a length
        that claims more than the message holds, or cuts into the nest."""
        attr = nla(TCA_OPTIONS | (NLA_F_NESTED if nested else 0), payload)
        if req.opt.endswith("trunc_nest"):
            r = self.r
            claim = r.choice([len(attr) + 1, len(attr) + 4, len(attr) + 64,
                              0xffff, 3, 4, max(4, len(attr) - 1),
                              max(4, len(attr) - 5)])
            attr = struct.pack("=H", claim & 0xffff) + attr[2:]
        return attr

    def tcmsg(self, req, default_parent, default_handle):
        r = self.r
        t = self.t
        ifindex, parent, handle = t.ifindex, default_parent, default_handle
        x = r.random()
        if x < 0.03:
            ifindex = r.choice([0, -1, 9999, r.getrandbits(31)])
            req.env.append("ifindex")
        elif x < 0.05:
            ifindex = self.lo
            req.env.append("ifindex=lo")
        x = r.random()
        if x < 0.08:
            parent = r.choice([TC_H_ROOT, 0, TC_H_INGRESS, t.handle,
                               t.handle | r.randint(1, 70),
                               r.getrandbits(32), 0x10000 | r.randint(0, 9)])
            req.env.append("parent")
        x = r.random()
        if x < 0.08:
            handle = r.choice([0, TC_H_ROOT, t.handle | r.randint(1, 0xffff),
                               r.getrandbits(16) << 16, r.getrandbits(32),
                               0x10000, 0x100000])
            req.env.append("handle")
        if req.env:
            req.targeted = False
        return TCMSG.pack(0, ifindex, handle, parent, 0)

    def kind_attr(self, req):
        r = self.r
        x = r.random()
        if x < 0.94:
            return nla(TCA_KIND, b"p3\0")
        req.targeted = False
        choice = r.choice(["none", "nonul", "other", "long", "empty",
                           "junk"])
        req.env.append("kind:" + choice)
        return {"none": b"",
                "nonul": nla(TCA_KIND, b"p3"),
                "other": nla(TCA_KIND, r.choice([b"tbf\0", b"pfifo\0",
                                                 b"htb\0", b"p33\0",
                                                 b"noqueue\0"])),
                "long": nla(TCA_KIND, b"p3" * 20 + b"\0"),
                "empty": nla(TCA_KIND, b"\0"),
                "junk": nla(TCA_KIND, b"p3\0\xff\xfe")}[choice]

    def extra_top(self, req):
        """Rarely, another top-level TCA_* attribute."""
        r = self.r
        if r.random() > 0.04:
            return b""
        req.targeted = False
        which = r.choice(["rate", "stab", "eblock", "iblock", "unknown",
                          "xstats"])
        req.env.append("top:" + which)
        return {"rate": nla(TCA_RATE, bytes([r.randint(0, 255),
                                             r.randint(0, 255)])),
                "stab": nla(TCA_STAB | NLA_F_NESTED,
                            nla(1, bytes(r.getrandbits(8)
                                         for _ in range(r.randint(0, 20))))),
                "eblock": nla(TCA_EGRESS_BLOCK, u(4, r.randint(0, 5))),
                "iblock": nla(TCA_INGRESS_BLOCK, u(4, r.randint(0, 5))),
                "unknown": nla(r.randint(17, 200), u(4, 7)),
                "xstats": nla(TCA_XSTATS, b"\0" * 8)}[which]

    def make(self):
        r = self.r
        t = self.t
        req = Request()
        op = r.choices(["new", "del", "newclass", "delclass", "getclass",
                        "dumpclass"], [70, 7, 7, 3, 8, 5])[0]
        if op == "new":
            req.mtype = RTM_NEWQDISC
            how, flags = r.choices(
                [("change", 0), ("replace", NLM_F_CREATE | NLM_F_REPLACE),
                 ("add", NLM_F_CREATE | NLM_F_EXCL),
                 ("create", NLM_F_CREATE), ("replace-nocreate",
                                            NLM_F_REPLACE)],
                [45, 30, 12, 8, 5])[0]
            req.opt = how
            body = self.tcmsg(req, t.parent, t.handle)
            body += self.kind_attr(req)
            if r.random() < 0.95:
                payload, nested = self.options(req)
                req.opt = how + "/" + req.opt
                body += self.options_attr(req, payload, nested)
            else:
                req.opt = how + "/no-options"
            body += self.extra_top(req)
        elif op == "del":
            req.mtype, flags = RTM_DELQDISC, 0
            req.opt = "del"
            body = self.tcmsg(req, t.parent, t.handle)
            if r.random() < 0.5:
                body += self.kind_attr(req)
        else:
            req.mtype = {"newclass": RTM_NEWTCLASS,
                         "delclass": RTM_DELTCLASS,
                         "getclass": RTM_GETTCLASS,
                         "dumpclass": RTM_GETTCLASS}[op]
            flags = {"newclass": r.choice([0, NLM_F_CREATE,
                                           NLM_F_CREATE | NLM_F_EXCL]),
                     "dumpclass": NLM_F_DUMP}.get(op, 0)
            req.opt = op
            cl = t.handle | r.choice([0, 1, 2, 7, 8, 64, 65, 0xffff,
                                      r.randint(1, 70)])
            body = self.tcmsg(req, r.choice([t.handle, 0, TC_H_ROOT]), cl)
            if op != "dumpclass":
                body += self.kind_attr(req)
                x = r.random()
                if x < 0.5 and op == "newclass":
                    payload, nested = self.class_options(req)
                    body += self.options_attr(req, payload, nested)
                elif x < 0.75:
                    payload, nested = self.options(req)
                    body += self.options_attr(req, payload, nested)
            req.targeted = False
        flags |= NLM_F_REQUEST | NLM_F_ACK
        x = r.random()
        if x < 0.01:
            flags &= ~NLM_F_ACK
            req.env.append("no-ack")
        elif x < 0.02:
            flags &= ~NLM_F_REQUEST
            req.env.append("no-request")
            req.targeted = False
        elif x < 0.03:
            flags |= NLM_F_ECHO
            req.env.append("echo")
        x = r.random()
        if x < 0.02:
            # Truncated message: cut inside the tcmsg or an attribute,
            # or a header claiming more (or less) than was sent.
            cut = r.choice(["short", "body", "liar"])
            req.env.append("msg:" + cut)
            req.targeted = False
            if cut == "short":
                body = body[:r.randint(0, TCMSG.size - 1)]
            elif cut == "body":
                body = body[:r.randint(TCMSG.size, max(TCMSG.size,
                                                       len(body) - 1))]
            else:
                req.raw_len = HDR.size + len(body) + r.choice(
                    [-3, -1, 1, 4, 100, -len(body) - HDR.size + 4])
        req.flags = flags
        req.body = body
        return req


# --- the run ---------------------------------------------------------

P3_MESSAGES = None
WARNINGS = {"bytes leftover after parsing attributes"}
# Messages of the netlink attribute validator (lib/nlattr.c): it runs p3's
# policy on the TCA_OPTIONS nest, and the core's on the rest.
NLA_MESSAGES = WARNINGS | {"invalid attribute length",
                           "Unknown attribute type",
                           "NLA_F_NESTED is missing",
                           "NLA_F_NESTED not expected",
                           "Attribute failed policy validation"}


def p3_messages():
    """Error strings the p3 module itself can send, from its source."""
    global P3_MESSAGES
    if P3_MESSAGES is None:
        P3_MESSAGES = set()
        path = os.path.join(HERE, "..", "kmod", "sch_p3.c")
        try:
            src = open(path).read()
        except OSError:
            src = ""
        src = re.sub(r'"\s*\n\s*"', "", src)
        for m in re.finditer(r'(?:NL_SET_ERR_MSG\w*\([^"]*|reject_message'
                             r'\s*=\s*)"([^"]+)"', src):
            P3_MESSAGES.add(m.group(1))
    return P3_MESSAGES


# The link's rate in every phase (--link). The bulk senders pace
# themselves to twice that in all, so that queues build but a fuzzed
# configuration without a rate cannot turn them into a CPU-bound flood.
LINK = "20mbit"

PHASES = {
    "root": (["qdisc replace dev {d} root handle 1: p3 bands 8 tag priority rate {rate}"],
             TC_H_ROOT, 0x10000, None),
    "tbf": (["qdisc add dev {d} root handle 1: tbf rate {rate} burst 32k "
             "latency 100ms",
             "qdisc add dev {d} parent 1:1 handle 10: p3 bands 8 tag priority"],
            0x10001, 0x100000, "tbf"),
    "htb": (["qdisc add dev {d} root handle 1: htb default 1",
             "class add dev {d} parent 1: classid 1:1 htb rate {rate} "
             "ceil {rate}",
             "qdisc add dev {d} parent 1:1 handle 10: p3 bands 8 tag priority"],
            0x10001, 0x100000, "htb"),
}


def setup_phase(name):
    cmds, _, _, _ = PHASES[name]
    sh(f"tc qdisc del dev {SDEV} root", ns=SND, check=False)
    for c in cmds:
        tc(c.format(d=SDEV, rate=LINK))


def phase_intact(nl, ifindex, name):
    _, parent, handle, root_kind = PHASES[name]
    qs = nl.qdiscs(ifindex)
    if root_kind and not any(q["kind"] == root_kind and
                             q["parent"] == TC_H_ROOT for q in qs):
        return False
    return any(q["kind"] == "p3" and q["handle"] == handle and
               q["parent"] == parent for q in qs)


class Stats:
    def __init__(self):
        self.requests = self.accepted = self.rejected = 0
        self.no_reply = 0
        self.with_msg = 0
        self.no_msg = collections.Counter()      # shape -> count
        self.no_msg_p3 = collections.Counter()   # targeted ones
        self.messages = collections.Counter()    # (errno, msg) -> count
        self.by_op = collections.Counter()
        self.bad_accepted = []
        self.config_changed = []
        self.readback = []
        self.verified = 0
        self.intact_restores = 0
        self.stale = collections.Counter()
        self.core_changed = []
        self.slow = []      # (seconds, what): the slowest requests

    def timed(self, seconds, req):
        """Keeps the slowest requests, with what they asked: where a
        phase's minutes go (on the debug kernel, a few requests take
        most of them)."""
        what = f"{RTM_NAMES.get(req.mtype)} {req.opt} {','.join(req.env)}"
        self.slow = sorted(self.slow + [(seconds, what)], reverse=True)[:5]

    def shape(self, req, rep):
        env = ",".join(req.env) or "-"
        return (f"{RTM_NAMES.get(req.mtype, req.mtype)} {req.opt} "
                f"env={env} -> {errno.errorcode.get(rep.err, rep.err)}")


def fuzz_phase(args, name, rng, nl, ifindex):
    _, parent, handle, _ = PHASES[name]
    setup_phase(name)
    target = Target(ifindex, parent, handle, name)
    gen = Gen(rng, target)
    gen.lo = nl.lo
    # Rounded up: -n is a floor (the issue asks for at least 100,000).
    n = -(-args.requests // len(args.phases))
    ph = Stats()
    t0 = time.monotonic()
    last = nl.p3_at(ifindex, handle)
    step = max(1, n // 10)
    prev, t_prev = None, t0
    for i in range(n):
        # Each request's time is counted to the next one's start: its
        # read-backs included.
        now_t = time.monotonic()
        if prev is not None:
            ph.timed(now_t - t_prev, prev)
        t_prev = now_t
        if i % 250 == 0 and not phase_intact(nl, ifindex, name):
            setup_phase(name)
            ph.intact_restores += 1
            last = nl.p3_at(ifindex, handle)
        req = prev = gen.make()
        try:
            rep = nl.request(req.mtype, req.flags, req.body,
                             raw_len=req.raw_len,
                             sentinel=req.raw_len is not None or
                             "msg:body" in req.env or
                             req.flags & NLM_F_DUMP == NLM_F_DUMP)
        except socket.timeout:
            ph.no_reply += 1
            ph.no_msg["timeout " + ",".join(req.env)] += 1
            # It may still have been carried out, after the wait.
            last = nl.p3_at(ifindex, handle)
            continue
        ph.requests += 1
        ph.by_op[RTM_NAMES.get(req.mtype)] += 1
        if not rep.acked:
            # Without NLM_F_ACK a change may have been made in silence.
            ph.no_reply += 1
            last = nl.p3_at(ifindex, handle)
            continue
        if rep.err == 0:
            ph.accepted += 1
            if req.mtype == RTM_NEWQDISC and req.bad_range and \
                    req.targeted:
                ph.bad_accepted.append(req.body.hex())
            # A class's deadline out of range is refused wherever it
            # reaches p3. (A message without NLM_F_REQUEST is acked with
            # 0 unread, and a cut one may lose its options.)
            if req.mtype == RTM_NEWTCLASS and req.bad_range and \
                    "/class-" in req.opt and not any(
                        e == "no-request" or e.startswith("msg:")
                        for e in req.env):
                ph.bad_accepted.append(req.body.hex())
            if req.mtype in (RTM_NEWQDISC, RTM_DELQDISC):
                now = nl.p3_at(ifindex, handle)
                if req.mtype == RTM_NEWQDISC and req.targeted and \
                        req.sent and now is not None:
                    ph.verified += 1
                    diff = {k: (v, now["options"].get(k))
                            for k, v in req.sent.items()
                            if now["options"].get(k) != v}
                    if diff:
                        ph.readback.append(f"{req.opt}: {diff}")
                last = now
            continue
        ph.rejected += 1
        shape = ph.shape(req, rep)
        if rep.msg:
            ph.with_msg += 1
            ph.messages[(rep.err, rep.msg)] += 1
            # The lenient parse of the top-level attributes leaves this
            # warning in the extack; a later check that fails without a
            # message of its own then seems to give it as its reason.
            if rep.msg in WARNINGS and rep.err != errno.EINVAL:
                ph.stale[shape] += 1
        else:
            ph.no_msg[shape] += 1
            if req.targeted and req.mtype in (RTM_NEWQDISC, RTM_DELQDISC):
                ph.no_msg_p3[shape] += 1
        # A refused request must leave the p3 exactly as it was. The core
        # applies TCA_OPTIONS before it looks at TCA_STAB and TCA_RATE, so
        # a bad one of those fails a change already made: counted apart.
        # Those are always re-read: left unseen, their change would be
        # blamed on the next refusal that is.
        core_may_apply = any(e.startswith("top:") for e in req.env)
        if req.mtype == RTM_NEWQDISC and (core_may_apply or
                                          rng.random() < args.verify):
            now = nl.p3_at(ifindex, handle)
            if (now and now["options"]) != (last and last["options"]):
                what = f"{shape}: {last and last['options']} -> " \
                    f"{now and now['options']}"
                if core_may_apply:
                    ph.core_changed.append(what)
                else:
                    ph.config_changed.append(what)
                last = now
        if (i + 1) % step == 0 or i + 1 == n:
            el = time.monotonic() - t0
            print(f"# nlfuzz {name}: {i + 1}/{n} requests in {el:.0f} s "
                  f"({(i + 1) / el:.0f}/s), {ph.accepted} accepted, "
                  f"{ph.rejected} refused ({ph.with_msg} with extack)",
                  flush=True)
    ph.seconds = time.monotonic() - t0
    if prev is not None:
        ph.timed(t0 + ph.seconds - t_prev, prev)
    return ph


def traffic_check(nl, ifindex, name, group):
    """Puts a known-good p3 back where the phase had it, then sends an
    urgent UDP burst (group @group) and a fresh TCP flow (group @group +
    100) through it. Returns (t_start, t_end) for the sink."""
    _, parent, handle, _ = PHASES[name]
    if not phase_intact(nl, ifindex, name):
        setup_phase(name)
    where = "root" if parent == TC_H_ROOT else f"parent {fmt_handle(parent)}"
    # Every option, so that none keeps a fuzzed value (a change keeps what
    # it does not name): under tbf and htb, a leftover `rate 1` would pace
    # the check's traffic to a byte a second, and a fuzzed `flows 1` would
    # leave each band's flows in one shared queue.
    rate = LINK if parent == TC_H_ROOT else "0"
    good = (f"bands 8 default 7 tag priority limit 10000 memory 0 "
            f"quantum 3028 rate {rate} flows 16384 dscpmap builtin")
    # Nor a fuzzed deadline, which a change keeps too: 1us on band 0
    # would drop the urgent burst. One tc for all nine: on the debug
    # kernel beside the background flows each tc started took 7 s.
    rc, errors = tc_batch(
        [f"qdisc replace dev {SDEV} {where} handle {fmt_handle(handle)} "
         f"p3 {good}"] +
        [f"class change dev {SDEV} classid {handle >> 16:x}:{k} p3 "
         "deadline 0" for k in range(1, 9)], force=False)
    if rc:
        raise RuntimeError(f"restoring a good p3: {errors}")
    time.sleep(1.0)
    t0 = time.monotonic()
    p3t(["udp", RADDR, "--port", str(PORT), "--count", "200", "--pps",
         "400", "--tags", "prio:1", "--group", str(group)])
    p3t(["bulk", RADDR, "--port", str(PORT), "--conns", "1", "--seconds",
         "2", "--tag", "prio:2", "--group", str(group + 100)])
    time.sleep(1.0)
    return t0, time.monotonic()


def main():
    global LINK
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--requests", type=int, default=3000,
                    help="requests in all, split among the phases (rounded up)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--phases", default="root,tbf,htb")
    ap.add_argument("--verify", type=float, default=0.1,
                    help="fraction of refused changes whose config is "
                    "re-read")
    ap.add_argument("--no-traffic", action="store_true")
    ap.add_argument("--link", default=LINK,
                    help="rate of the shaped link (tc syntax, %(default)s)")
    ap.add_argument("--prefix", default="")
    args = ap.parse_args()
    LINK = args.link
    args.phases = args.phases.split(",")
    seed = args.seed if args.seed is not None else \
        int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    tap = Tap(args.prefix)
    print(f"# nlfuzz: seed {seed}, {args.requests} requests over phases "
          f"{', '.join(args.phases)}; kernel {os.uname().release}",
          flush=True)
    sh("modprobe sch_p3")
    klog = KernelReports()
    topology()
    nl = Rtnl(SND)
    with in_netns(SND):
        ifindex = socket.if_nametoindex(SDEV)
    flows, sink = [], None
    # The datagram flows keep the share of the link they have at 20
    # Mbit/s (5%): at 2 Mbit/s (the debug kernel) the same 300 a second
    # were half the link, and their KASAN-checked packets took most of
    # the guest's CPU (a tc command took 7 s instead of 1).
    share = parse_rate(LINK) / parse_rate("20mbit")
    pps = [str(max(10, round(n * share))) for n in (200, 100)]
    if not args.no_traffic:
        sink = Sink()
        flows = [
            p3t(["bulk", RADDR, "--port", str(PORT), "--conns", "2",
                 "--max-rate", str(int(parse_rate(LINK) / 8)),
                 "--seconds", "100000", "--tag", "prio:8", "--group", "1"],
                wait=False),
            p3t(["udp", RADDR, "--port", str(PORT), "--count", "100000000",
                 "--pps", pps[0], "--tags", "prio:1,prio:8",
                 "--switch-every", "5", "--group", "2"], wait=False),
            p3t(["udp", RADDR, "--port", str(PORT), "--count", "100000000",
                 "--pps", pps[1], "--size", "1000", "--tags", "tos:44",
                 "--group", "3"], wait=False),
        ]
    total = Stats()
    windows = {}
    try:
        for k, name in enumerate(args.phases):
            ph = fuzz_phase(args, name, rng, nl, ifindex)
            if sink:
                t_check = time.monotonic()
                windows[name] = (100 + k, traffic_check(nl, ifindex, name,
                                                        100 + k))
                print(f"# nlfuzz {name}: traffic check took "
                      f"{time.monotonic() - t_check:.0f} s", flush=True)
            reports = klog.new()
            diag = [f"{ph.requests} requests in {ph.seconds:.0f} s: "
                    f"{ph.accepted} accepted, {ph.rejected} refused "
                    f"({ph.with_msg} with extack), {ph.no_reply} without "
                    f"a reply; {dict(ph.by_op)}; {ph.verified} accepted "
                    f"changes read back; p3 re-created "
                    f"{ph.intact_restores} times; slowest: " +
                    "; ".join(f"{t:.1f} s {w}" for t, w in ph.slow)]
            if ph.core_changed:
                diag.append(f"{len(ph.core_changed)} refusals by the core "
                            "after p3 had applied the options (bad TCA_STAB "
                            f"or TCA_RATE), e.g. {ph.core_changed[0]}")
            fails = []
            if reports:
                fails.append(f"{len(reports)} kernel report lines, first: "
                             f"{reports[0]}")
            if ph.bad_accepted:
                fails.append(f"{len(ph.bad_accepted)} out-of-range "
                             f"requests accepted, e.g. "
                             f"{ph.bad_accepted[0]}")
            if ph.config_changed:
                fails.append(f"{len(ph.config_changed)} refused requests "
                             f"changed the config, e.g. "
                             f"{ph.config_changed[0]}")
            if ph.readback:
                fails.append(f"{len(ph.readback)} accepted changes read "
                             f"back differently, e.g. {ph.readback[0]}")
            tap.result(not fails, f"nlfuzz {name}: {ph.requests} requests, "
                       "no kernel report, ranges enforced, refusals change "
                       "nothing", "\n".join(diag + fails))
            for attr in ("requests", "accepted", "rejected", "no_reply",
                         "with_msg", "verified"):
                setattr(total, attr, getattr(total, attr) +
                        getattr(ph, attr))
            total.no_msg.update(ph.no_msg)
            total.stale.update(ph.stale)
            total.core_changed += ph.core_changed
            total.no_msg_p3.update(ph.no_msg_p3)
            total.messages.update(ph.messages)
    finally:
        stop_procs(flows)
        rep = sink.stop() if sink else None
        nl.close()
        teardown()

    # Extack coverage.
    p3msgs = p3_messages()
    lines = [f"{total.rejected} refused, {total.with_msg} with an extack "
             f"message ({100.0 * total.with_msg / max(1, total.rejected):.1f}"
             f"%), {sum(total.no_msg.values())} without"]
    lines.append("messages (origin: p3 = sch_p3.c, nla = the attribute "
                 "validator, core = net/sched; errno, count):")
    for (err, msg), c in total.messages.most_common():
        origin = "p3" if msg in p3msgs else \
            "nla" if msg in NLA_MESSAGES else "core"
        lines.append(f"  {origin:4} {errno.errorcode.get(err, err):10} "
                     f"{c:7}  {msg}")
    if total.stale:
        lines.append(f"{sum(total.stale.values())} of the messages are the "
                     "parser's stale 'bytes leftover' warning, not the "
                     "reason (the core refused without a message of its "
                     "own): " + "; ".join(f"{c} {s}" for s, c in
                                          total.stale.most_common(8)))
    lines.append("refusals without a message, by shape (all from the core "
                 "unless marked p3-path):")
    for shape, c in total.no_msg.most_common(40):
        mark = " p3-path" if shape in total.no_msg_p3 else ""
        lines.append(f"  {c:7}  {shape}{mark}")
    if len(total.no_msg) > 40:
        lines.append(f"  ... {len(total.no_msg) - 40} more shapes")
    tap.result(not total.no_msg_p3,
               "nlfuzz: every refusal of a well-formed request to the p3 "
               "qdisc carries an extack message", "\n".join(lines))

    if rep:
        for name, (group, (t0, t1)) in windows.items():
            got = rep["udp"].get(str(group), {}).get("received", 0)
            # Over the span in which the new flow delivered: the window
            # around it also holds process start-up, seconds long on the
            # debug kernel. Its band (1) is above the bulk flows' (7).
            span = tcp_span(rep, group + 100)
            fresh = tcp_rate(rep, group + 100, *span) if span else 0.0
            beside = tcp_rate(rep, 1, *span) if span else 0.0
            old = tcp_rate(rep, 1, t0, t1)
            # A twentieth of the link, not more: a qdisc wedged or paced
            # to a trickle delivers next to nothing, but the debug kernel
            # sends one flow at 0.54-0.79 Mbit/s of 2 alone on our host,
            # 0.46 in CI beside the stock guests (the pacer's own rate is
            # the traffic suite's own_rate test).
            # Strict priority holds whatever the pace: the bulk flows get
            # the link only while the new flow has nothing queued (0.00 to
            # 0.02 Mbit/s beside it on the debug kernel).
            tap.result(got == 200 and fresh > parse_rate(LINK) / 20 and
                       fresh > beside,
                       f"nlfuzz {name}: the qdisc still carries traffic "
                       "after fuzzing",
                       f"urgent UDP burst {got}/200 received; a new TCP "
                       f"flow {fresh / 1e6:.2f} Mbit/s over "
                       f"{span[1] - span[0] if span else 0:.1f} s, the "
                       f"bulk flows beside it {beside / 1e6:.2f} Mbit/s; "
                       "the bulk flows that lived through the fuzzing "
                       f"{old / 1e6:.2f} Mbit/s")
    else:
        tap.skip("nlfuzz: traffic after fuzzing", "--no-traffic")
    print(f"# nlfuzz: {total.requests} requests, seed {seed}")
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
