#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Fault injection into the p3 qdisc and into libp3 channels, run as root
inside the selftest VM.

Kernel side (needs the debug kernel of `make check-debug`: failslab,
fail_page_alloc, fail-nth and kmemleak; a TAP SKIP line otherwise):

  create, change, replace   every allocation of one request, in turn, is
      made to fail (/proc/thread-self/fail-nth on the thread that sends
      the netlink request, so nothing else is hit): the request must
      fail cleanly or succeed, and the qdisc must then exist fully (the
      options asked for, one class per band, its statistics readable)
      or not at all (the previous qdisc untouched). A refused change of
      a qdisc holding packets keeps every packet and the configuration.
  flow creation   happens in the transmit path, in whatever context sends:
      failslab with its cache filter on the p3_flow cache only, at a
      probability, while new flows arrive; a packet whose flow could not
      be made must spill into its band's shared flow (`spilled`), not be
      dropped, and the flows must all be collected afterwards.
  module load   fail-nth over finit_module() of sch_p3.ko.

After all of it the kernel log must hold no report, and kmemleak
(selftests/debug-kernel/guest.sh's scans, after the suite) no
unreferenced object but the core's known one.

libp3 side (any kernel): a channel of 8 bands carrying 5 tensors, while
  - netem on the receiver's ingress loses, duplicates, corrupts or
    reorders packets;
  - a proxy between the hosts damages one band's byte stream mid-slice:
    a flipped byte, a repeated or swapped chunk, a FIN or an RST;
  - the sender or the receiver is killed mid-slice.
The receiver must deliver every tensor byte-exact or report an error (a
damaged stream must be reported); it never completes a tensor whose bytes
differ. The sender must finish or fail, never hang.

  selftests/vm-run -- selftests/p3_faults.py [--max-nth N] [-t NAME]...
"""
import argparse
import errno
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from p3lib import (RADDR, RCV, SDEV, SND, Check, Tap, no_ipv6, router, sh,
                   tc, teardown, topology)
from p3_nlfuzz import (NLA_F_NESTED, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
                       NLM_F_REPLACE, NLM_F_REQUEST, P3_BANDS, P3_DEFAULT,
                       P3_LIMIT, P3_QUANTUM, P3_RATE, P3_TAG, RTM_DELQDISC,
                       RTM_GETQDISC, RTM_GETTCLASS, RTM_NEWQDISC,
                       RTM_NEWTCLASS, TC_H_ROOT, TCA_KIND, TCA_OPTIONS,
                       TCMSG, KernelLog, KernelReports, Rtnl, decode_xstats,
                       in_netns, nla, parse_attrs, u)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DBG = "/sys/kernel/debug"
TCA_STATS2, TCA_STATS_QUEUE, TCA_STATS_BASIC = 7, 3, 1


# --- kernel fault injection -------------------------------------------

def dbg_write(path, value):
    with open(os.path.join(DBG, path), "w") as f:
        f.write(str(value))


def dbg_read(path):
    with open(os.path.join(DBG, path)) as f:
        return f.read().strip()


def fault_setup():
    """failslab and fail_page_alloc armed for fail-nth only: probability
    0 (nothing fails at random), sleeping allocations included, order-0
    pages included; each injected failure logs its stack, unlimited, so
    that a refusal can be traced to the allocation that caused it."""
    for attr in ("failslab", "fail_page_alloc"):
        dbg_write(f"{attr}/probability", 0)
        dbg_write(f"{attr}/verbose", 2)
        dbg_write(f"{attr}/verbose_ratelimit_burst", 1000000)
        dbg_write(f"{attr}/ignore-gfp-wait", "N")
        dbg_write(f"{attr}/task-filter", "N")
        dbg_write(f"{attr}/times", -1)
    dbg_write("fail_page_alloc/min-order", 0)
    dbg_write("fail_page_alloc/ignore-gfp-highmem", "N")
    dbg_write("failslab/cache-filter", "N")


class FailNth:
    """/proc/thread-self/fail-nth of the calling thread, opened once: an
    open() between arming and the request would itself allocate."""

    def __init__(self):
        self.fd = os.open("/proc/thread-self/fail-nth", os.O_RDWR)

    def arm(self, n):
        os.pwrite(self.fd, str(n).encode(), 0)

    def left(self):
        """0 once the armed failure was injected."""
        return int(os.pread(self.fd, 32, 0).decode().strip() or 0)

    def close(self):
        os.close(self.fd)


def p3_opts(**kw):
    sizes = {P3_BANDS: 1, P3_DEFAULT: 1, P3_TAG: 1, P3_LIMIT: 4,
             P3_QUANTUM: 4, P3_RATE: 8}
    ids = {"bands": P3_BANDS, "default": P3_DEFAULT, "tag": P3_TAG,
           "limit": P3_LIMIT, "quantum": P3_QUANTUM, "rate": P3_RATE}
    return b"".join(nla(ids[k], u(sizes[ids[k]], v)) for k, v in kw.items())


def newqdisc_body(ifindex, parent, handle, **opts):
    return (TCMSG.pack(0, ifindex, handle, parent, 0) +
            nla(TCA_KIND, b"p3\0") +
            nla(TCA_OPTIONS | NLA_F_NESTED, p3_opts(**opts)))


def class_stats(nl, ifindex, handle):
    """{minor: (qlen, backlog, drops, packets)} of the p3's classes."""
    rep = nl.request(RTM_GETTCLASS, NLM_F_REQUEST | NLM_F_DUMP,
                     TCMSG.pack(0, ifindex, 0, handle, 0))
    out = {}
    for t, payload in rep.msgs:
        if t != RTM_NEWTCLASS:
            continue
        _, idx, h, parent, _ = TCMSG.unpack_from(payload)
        if h >> 16 != handle >> 16:
            continue
        q = (0, 0, 0, 0)
        for at, data in parse_attrs(payload[TCMSG.size:]):
            if at & 0x3fff != TCA_STATS2:
                continue
            pk = 0
            qs = None
            for st, sd in parse_attrs(data):
                if st & 0x3fff == TCA_STATS_BASIC and len(sd) >= 12:
                    pk = struct.unpack_from("=QI", sd)[1]
                elif st & 0x3fff == TCA_STATS_QUEUE and len(sd) >= 20:
                    qs = struct.unpack_from("=IIIII", sd)
            if qs:
                q = (qs[0], qs[1], qs[2], pk)
        out[h & 0xffff] = q
    return out


def qdisc_queue(nl, ifindex, handle):
    """(qlen, drops, packets sent) of the qdisc @handle, from TCA_STATS2."""
    rep = nl.request(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP,
                     TCMSG.pack(0, ifindex, 0, 0, 0))
    for t, payload in rep.msgs:
        _, idx, h, _, _ = TCMSG.unpack_from(payload)
        if idx != ifindex or h != handle:
            continue
        qs, pk = None, 0
        for at, data in parse_attrs(payload[TCMSG.size:]):
            if at & 0x3fff == TCA_STATS2:
                for st, sd in parse_attrs(data):
                    if st & 0x3fff == TCA_STATS_QUEUE and len(sd) >= 20:
                        qs = struct.unpack_from("=IIIII", sd)
                    elif st & 0x3fff == TCA_STATS_BASIC and len(sd) >= 12:
                        pk = struct.unpack_from("=QI", sd)[1]
        if qs:
            return qs[0], qs[2], pk
    return None


def del_root(k):
    """tc qdisc del dev SDEV root, without an exec."""
    k.nl.request(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK,
                 TCMSG.pack(0, k.ifindex, 0, TC_H_ROOT, 0))


def whole(nl, ifindex, handle, want):
    """Problems with the p3 at @handle, which must have options @want,
    one class per band and readable statistics; [] if it is whole."""
    q = nl.p3_at(ifindex, handle)
    if q is None:
        return ["gone"]
    bad = [f"{k} {q['options'].get(k)} != {v}" for k, v in want.items()
           if q["options"].get(k) != v]
    bands = q["options"].get("bands")
    cls = class_stats(nl, ifindex, handle)
    if sorted(cls) != list(range(1, (bands or 0) + 1)):
        bad.append(f"classes {sorted(cls)} for {bands} bands")
    if q["xstats"] is None or len(q["xstats"]) < 8:
        bad.append("no xstats")
    return bad


# Frames of the allocators and of the injection itself: the site of a
# failure is the first frame after them.
ALLOC_FRAME = re.compile(
    r"dump_stack|fail_dump|should_fail|failslab|slab_pre_alloc|"
    r"kmem_cache_alloc|kmalloc|kzalloc|kcalloc|kvmalloc|kvzalloc|kvcalloc|"
    r"kmem_cache|alloc_pages|prepare_alloc|get_page_from|slab_alloc|"
    r"new_slab|allocate_slab|vmalloc|vmap|get_vm_area|__alloc_skb|"
    r"alloc_skb|kasan|kmemleak|stack_depot|create_object|mem_pool|"
    r"kstrdup|kmemdup|krealloc|folio_alloc|alloc_page|rmqueue")


def fault_site(lines):
    """'f1 < f2' for the stack the last injected failure logged; '?' when
    it logged none (an allocation with __GFP_NOWARN)."""
    start = None
    for i, ln in enumerate(lines):
        if "FAULT_INJECTION: forcing a failure" in ln:
            start = i
    if start is None:
        return "?"
    frames = []
    for ln in lines[start:]:
        m = re.match(r"\s*([A-Za-z_][\w.]*)\+0x", ln)
        if m and not ALLOC_FRAME.search(m[1]):
            frames.append(m[1])
            if len(frames) == 2:
                break
    return " < ".join(frames) or "?"


def sweep(nl, fnth, max_nth, attempt, check, reset, step=1):
    """fail-nth over every allocation of attempt(): for n = 1, 1 + step,
    1 + 2 * step, ... the n-th allocation fails, check(result) lists
    problems, reset() puts the starting state back. Ends when a run needs
    fewer than n allocations. Returns (injected, outcomes, problems);
    outcomes count "result at site" strings."""
    outcomes, problems = {}, []
    log = KernelLog()
    n = tried = 0
    for n in range(1, max_nth + 1, step):
        log.lines()
        fnth.arm(n)
        try:
            rep = attempt()
            res = rep.err if rep.acked else "no-ack"
            msg = rep.msg
        except OSError as e:
            res, msg = f"oserror {errno.errorcode.get(e.errno, e.errno)}", None
        left = fnth.left()
        fnth.arm(0)
        injected = left == 0
        key = (errno.errorcode.get(res, res) if isinstance(res, int) and res
               else ("ok" if res == 0 else res))
        if injected:
            # Refusals without an extack are only reported: an ENOMEM
            # from deep in the core has no message to give.
            if isinstance(res, int) and res and not msg:
                key += " (no extack)"
            key += " at " + fault_site(log.lines())
            outcomes[key] = outcomes.get(key, 0) + 1
        for p in check(res, injected):
            problems.append(f"fail-nth {n} ({key}): {p}")
        reset()
        if not injected:
            log.close()
            return tried, outcomes, problems
        tried += 1
    log.close()
    return tried, outcomes, problems + [f"still injecting at n={max_nth}"]


class Skip(Exception):
    """A test that cannot run here, and why."""


class Kernel:
    """State shared by the kernel fault tests."""

    def __init__(self, args):
        self.args = args
        self.nl = Rtnl(SND)
        with in_netns(SND):
            self.ifindex = socket.if_nametoindex(SDEV)
        self.fnth = FailNth()

    def close(self):
        self.fnth.close()
        self.nl.close()


def traffic_ok(chk, what):
    """A burst of 100 urgent datagrams from the sender host arrives."""
    code = ("import socket, time\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, 1)\n"
            "for i in range(100):\n"
            f"    s.sendto(b'x' * 100, ('{RADDR}', 5401))\n"
            "    time.sleep(0.002)\n")
    with in_netns(RCV):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("0.0.0.0", 5401))
    rx.settimeout(2)
    got = 0
    try:
        subprocess.run(["ip", "netns", "exec", SND, sys.executable, "-c",
                        code], check=True, timeout=120)
        while got < 100:
            rx.recv(2048)
            got += 1
    except socket.timeout:
        pass
    finally:
        rx.close()
    chk.expect(got == 100, f"{what}: {got}/100 datagrams arrived")


def create_test(k, chk, parent_setup, parent, handle, prev_kind):
    """Sweep of a p3 creation at @parent; the place held @prev_kind."""
    want = dict(bands=16, default=3, tag=1, limit=500, quantum=3028,
                rate=2500000)
    body = newqdisc_body(k.ifindex, parent, handle, **want)

    def attempt():
        return k.nl.request(RTM_NEWQDISC,
                            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE |
                            NLM_F_REPLACE, body)

    def check(res, injected):
        q = k.nl.p3_at(k.ifindex, handle)
        if q is None:
            if res == 0:
                return ["acknowledged, but no p3 there"]
            there = [x["kind"] for x in k.nl.qdiscs(k.ifindex,
                                                     invisible=True)
                     if x["parent"] == parent]
            if prev_kind not in there:
                return [f"refused, and {prev_kind} is gone too: {there}"]
            return []
        if isinstance(res, int) and res:
            return [f"refused ({res}), but a p3 is there"]
        return whole(k.nl, k.ifindex, handle, want)

    def reset():
        del_root(k)
        parent_setup()

    reset()
    n, outcomes, problems = sweep(k.nl, k.fnth, k.args.max_nth, attempt,
                                  check, reset, k.args.nth_step)
    chk.note(f"{n} allocations failed in turn{stride(k)}; outcomes:\n"
             f"{fmt_outcomes(outcomes)}")
    chk.failures += problems[:10]
    if len(problems) > 10:
        chk.failures.append(f"... {len(problems) - 10} more")
    traffic_ok(chk, "afterwards")
    return n


def test_create_root(k, chk):
    return create_test(k, chk, lambda: None, TC_H_ROOT, 0x10000, "noqueue")


def tbf_setup():
    tc(f"qdisc add dev {SDEV} root handle 1: tbf rate 20mbit burst 32k "
       "latency 100ms")


def htb_setup():
    tc(f"qdisc add dev {SDEV} root handle 1: htb default 1")
    tc(f"class add dev {SDEV} parent 1: classid 1:1 htb rate 20mbit "
       "ceil 20mbit")


def test_create_tbf(k, chk):
    return create_test(k, chk, tbf_setup, 0x10001, 0x100000, "bfifo")


def test_create_htb(k, chk):
    return create_test(k, chk, htb_setup, 0x10001, 0x100000, "pfifo")


def fill(n_per_band=6, bands=8):
    """Queues packets in every band of a p3 paced at 8 kbit/s: nothing
    much leaves while the test looks."""
    with in_netns(SND):
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                 for _ in range(bands)]
    for b, s in enumerate(socks):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, b + 1)
        for _ in range(n_per_band):
            s.sendto(b"x" * 1000, (RADDR, 9))
        s.close()


def test_change(k, chk):
    """Refused changes keep packets and configuration; accepted ones fold
    bands and push out over the limit, with the sums still adding up."""
    start = dict(bands=8, tag=0, limit=1000, rate=1000)  # fill() tags SO_PRIORITY
    want = dict(bands=4, limit=20, tag=2, quantum=1514)
    body = newqdisc_body(k.ifindex, TC_H_ROOT, 0x10000, **want)
    state = {}

    def reset():
        del_root(k)
        k.nl.request(RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
                     newqdisc_body(k.ifindex, TC_H_ROOT, 0x10000, **start))
        fill()
        state["before"] = qdisc_queue(k.nl, k.ifindex, 0x10000)

    def attempt():
        return k.nl.request(RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK, body)

    def check(res, injected):
        q = k.nl.p3_at(k.ifindex, 0x10000)
        if q is None:
            return ["the p3 disappeared"]
        qlen, drops, sent = qdisc_queue(k.nl, k.ifindex, 0x10000)
        qlen0, drops0, sent0 = state["before"]
        cls = class_stats(k.nl, k.ifindex, 0x10000)
        bad = []
        if sum(c[0] for c in cls.values()) != qlen:
            bad.append(f"band qlens {[c[0] for c in cls.values()]} != "
                       f"qdisc qlen {qlen}")
        # Every packet queued at the start is still queued, sent or
        # counted as dropped.
        if qlen + (sent - sent0) + (drops - drops0) != qlen0:
            bad.append(f"qlen {qlen0} -> {qlen}, sent +{sent - sent0}, "
                       f"dropped +{drops - drops0}: packets unaccounted")
        # All of the change or none of it. Without an answer (the request
        # or its ack could not be allocated) either is right.
        opts = q["options"]
        old = all(opts.get(x) == v for x, v in start.items())
        new = all(opts.get(x) == v for x, v in want.items())
        if not old and not new:
            bad.append(f"half applied: {opts}")
        elif isinstance(res, int) and res and not old:
            bad.append(f"refused, but applied: {opts}")
        elif res == 0 and not new:
            bad.append(f"acknowledged, but not applied: {opts}")
        if old and drops != drops0:
            bad.append(f"not applied, but {drops - drops0} packets dropped")
        if new:
            bad += whole(k.nl, k.ifindex, 0x10000, want)
            if qlen > 20:
                bad.append(f"{qlen} packets queued under limit 20")
        return bad

    reset()
    n, outcomes, problems = sweep(k.nl, k.fnth, k.args.max_nth, attempt,
                                  check, reset, k.args.nth_step)
    chk.note(f"{n} allocations failed in turn{stride(k)}; queue (qlen, "
             f"drops, sent) "
             f"at start {state['before']}; outcomes:\n"
             f"{fmt_outcomes(outcomes)}")
    chk.failures += problems[:10]
    sh(f"tc qdisc del dev {SDEV} root", ns=SND, check=False)
    return n


def test_replace_root(k, chk):
    """A p3 grafted over a tbf root (the old one destroyed on success)."""
    return create_test(k, chk, tbf_setup, TC_H_ROOT, 0x20000, "tbf")


def slab_objects():
    try:
        with open("/sys/kernel/slab/p3_flow/shrink", "w") as f:
            f.write("1")
        with open("/sys/kernel/slab/p3_flow/objects") as f:
            return int(f.read().split()[0])
    except OSError:
        return None


def test_flow_alloc(k, chk):
    """Flow creation fails at random (p3_flow cache only) while forwarded
    flows and local sockets send: each failure is one spilled packet (or
    one pushed out by the limit, as any packet may be), never a drop of
    its own."""
    router()
    # Paced far below the spray, so that packets queue and need a flow:
    # one that finds p3 empty leaves without (p3_hold_lone()).
    tc(f"qdisc replace dev {SDEV} root handle 1: p3 bands 8 rate 100kbit "
       "limit 100")
    time.sleep(2.5)
    base = slab_objects()
    q0 = k.nl.p3_at(k.ifindex, 0x10000)
    x0 = decode_xstats(q0["xstats"])
    d0 = qdisc_queue(k.nl, k.ifindex, 0x10000)[1]
    cls0 = class_stats(k.nl, k.ifindex, 0x10000)
    times = 1000000
    # The cache's failslab flag is read-only in 6.1's sysfs: it comes
    # from the boot's slub_debug=...;FZPUA,p3_flow (check-debug.sh).
    with open("/sys/kernel/slab/p3_flow/failslab") as f:
        if f.read().strip() != "1":
            sh("ip netns del p3rtr")
            raise Skip("the p3_flow cache has no failslab flag (boot with "
                       "slub_debug=FZPU;FZPUA,p3_flow)")
    dbg_write("failslab/cache-filter", "Y")
    dbg_write("failslab/ignore-gfp-wait", "Y")
    dbg_write("failslab/times", times)
    dbg_write("failslab/probability", k.args.flow_fail_pct)
    try:
        sh(f"{sys.executable} {HERE}/p3t.py spray {RADDR} --count "
           f"{k.args.flow_faults}", ns="p3rtr", timeout=1800)
        code = ("import socket\n"
                "for i in range(500):\n"
                "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"    s.sendto(b'x' * 32, ('{RADDR}', 9))\n"
                "    s.close()\n")
        subprocess.run(["ip", "netns", "exec", SND, sys.executable, "-c",
                        code], check=True, timeout=600)
    finally:
        dbg_write("failslab/probability", 0)
        left = int(dbg_read("failslab/times"))
        dbg_write("failslab/times", -1)
        dbg_write("failslab/cache-filter", "N")
        dbg_write("failslab/ignore-gfp-wait", "N")
    injected = times - left
    time.sleep(1.0)
    x1 = decode_xstats(k.nl.p3_at(k.ifindex, 0x10000)["xstats"])
    d1 = qdisc_queue(k.nl, k.ifindex, 0x10000)[1]
    cls1 = class_stats(k.nl, k.ifindex, 0x10000)
    band_drops = sum(cls1[c][2] - cls0.get(c, (0, 0, 0, 0))[2]
                     for c in cls1)
    spilled = x1["spilled"] - x0["spilled"]
    other = (x1["drops_limit"] - x0["drops_limit"] +
             x1["drops_memory"] - x0["drops_memory"])
    # The GC runs inline: once the flows have expired (2 s), datagrams
    # one at a time, each leaving p3 empty, which runs a pass that frees
    # up to 8.
    deadline = time.monotonic() + 60
    while (qdisc_queue(k.nl, k.ifindex, 0x10000)[0] and
           time.monotonic() < deadline):
        time.sleep(0.2)
    time.sleep(2.5)
    # Fast enough that each datagram finds p3 empty.
    tc(f"qdisc change dev {SDEV} root handle 1: p3 rate 10mbit")
    trickle = x1["flows"] // 4 + 50
    sh(f"{sys.executable} {HERE}/p3t.py udp {RADDR} --port 9 --count "
       f"{trickle} --size 64 --tags none --pps 200", ns=SND, timeout=600)
    x2 = decode_xstats(k.nl.p3_at(k.ifindex, 0x10000)["xstats"])
    end = slab_objects()
    chk.note(f"{k.args.flow_faults} forwarded + 500 socket flows at "
             f"{k.args.flow_fail_pct}% failure: {injected} failures "
             f"injected; spilled +{spilled}, band "
             f"drops +{band_drops}, "
             f"qdisc drops +{d1 - d0} (other drops +{other}); flows "
             f"created +{x1['flows_created'] - x0['flows_created']}, left "
             f"after {trickle} datagrams {x2['flows']}; slab {base} -> "
             f"{end}")
    chk.expect(injected > 0, "no failure injected")
    chk.expect(injected - other <= spilled <= injected,
               f"spilled +{spilled} for {injected} injected failures "
               f"and {other} packets pushed out")
    chk.expect(band_drops == other and d1 - d0 == other,
               "band, qdisc and cause drop counters disagree: a drop "
               "with no cause")
    chk.expect(x2["flows"] == 0, f"{x2['flows']} flows left")
    if base is not None:
        chk.expect(end <= base, f"p3_flow slab {end} above {base}")
    traffic_ok(chk, "after the failures")
    sh("ip netns del p3rtr")
    return injected


class SysResult:
    """A syscall's outcome in the shape of a netlink Reply."""

    def __init__(self, err):
        self.err, self.msg, self.acked = err, None, True


def test_module_load(k, chk):
    """finit_module() of sch_p3.ko with each allocation failing in turn:
    the module is then loaded and works, or is not loaded at all."""
    import ctypes
    path = subprocess.run(["modinfo", "-n", "sch_p3"], text=True,
                          stdout=subprocess.PIPE).stdout.strip()
    libc = ctypes.CDLL(None, use_errno=True)
    sys_finit_module = 313      # x86_64

    def loaded():
        return os.path.exists("/sys/module/sch_p3")

    def attempt():
        rc = libc.syscall(sys_finit_module, fd, b"", 0)
        return SysResult(ctypes.get_errno() if rc else 0)

    def check(res, injected):
        if (res == 0) != loaded():
            return [f"finit_module said {res}, loaded {loaded()}"]
        if loaded():
            # A module that says it loaded must make a working qdisc.
            r = subprocess.run(["ip", "netns", "exec", SND, "tc", "qdisc",
                                "add", "dev", SDEV, "root", "handle", "1:",
                                "p3"], stderr=subprocess.PIPE, text=True)
            del_root(k)
            if r.returncode:
                return [f"loaded, but no p3 qdisc: {r.stderr.strip()}"]
        return []

    def reset():
        if loaded():
            subprocess.run(["rmmod", "sch_p3"], check=True)

    del_root(k)
    sh("rmmod sch_p3", check=False)
    fd = os.open(path, os.O_RDONLY)
    try:
        n, outcomes, problems = sweep(k.nl, k.fnth, k.args.max_nth * 4,
                                      attempt, check, reset,
                                      k.args.nth_step)
    finally:
        os.close(fd)
        sh("modprobe sch_p3", check=False)
    chk.note(f"{n} allocations of the module load failed in turn{stride(k)}; "
             f"outcomes:\n{fmt_outcomes(outcomes)}")
    chk.failures += problems[:10]
    traffic_ok(chk, "after reloading")
    return n


def stride(k):
    return f" (every {k.args.nth_step}th)" if k.args.nth_step > 1 else ""


def fmt_outcomes(outcomes):
    return "\n".join(f"  {c:4} {key}" for key, c in
                     sorted(outcomes.items(), key=lambda kv: -kv[1]))


KERNEL_TESTS = [
    ("create_root", test_create_root),
    ("create_under_tbf", test_create_tbf),
    ("create_under_htb", test_create_htb),
    ("replace_tbf_root", test_replace_root),
    ("change_with_queue", test_change),
    ("flow_alloc", test_flow_alloc),
    ("module_load", test_module_load),
]


# --- libp3 ------------------------------------------------------------

LIB_PORT = 5500
TENSORS = {1: (0, 256 << 10), 10: (4, 3 << 20), 11: (5, 3 << 20),
           12: (6, 3 << 20), 13: (7, 3 << 20)}


def content(tid, size):
    import numpy as np
    return np.random.default_rng(tid).integers(0, 256, size, dtype=np.uint8)


def role_recv(a):
    import numpy as np
    import p3
    out = {"completions": {}, "errors": [], "timeout": False}
    try:
        with p3.Listener("0.0.0.0", a.port, timeout=60,
                         peer_timeout=a.peer_timeout) as lst:
            open(a.out + ".ready", "w").close()
            rx = lst.accept(timeout=60)
            bufs = {}
            for tid, (_, size) in TENSORS.items():
                bufs[tid] = np.zeros(size, dtype=np.uint8)
                rx.expect(tid, bufs[tid], iteration=1)
            last = time.monotonic()
            while rx.pending:
                if time.monotonic() - last > a.idle:
                    out["timeout"] = True
                    break
                try:
                    done = rx.poll(0.5)
                except p3.Error as e:
                    out["errors"].append([e.errno, str(e)])
                    out.setdefault("t_error", time.monotonic())
                    last = time.monotonic()
                    if e.errno in (p3.EINCOMPLETE, errno.EPIPE):
                        break
                    continue
                for c in done:
                    last = time.monotonic()
                    exact = bool(np.array_equal(bufs[c.tensor],
                                                content(c.tensor, c.bytes)))
                    out["completions"][str(c.tensor)] = exact
            rx.close()
    except p3.Error as e:
        out["errors"].append([e.errno, str(e)])
    with open(a.out, "w") as f:
        json.dump(out, f)


def role_send(a):
    import p3
    out = {"error": None}
    try:
        ch = p3.Channel.connect(a.host, a.port, bands=8, method="dscp",
                                timeout=10, peer_timeout=a.peer_timeout)
        open(a.out + ".ready", "w").close()
        for tid, (lv, size) in TENSORS.items():
            if tid != 1:
                ch.send(tid, content(tid, size), level=lv, iteration=1)
        ch.send(1, content(1, TENSORS[1][1]), level=0, iteration=1)
        ch.flush(timeout=60)
        ch.close()
    except p3.Error as e:
        out["error"] = [e.errno, str(e)]
        out["t_error"] = time.monotonic()
    with open(a.out, "w") as f:
        json.dump(out, f)


class Proxy:
    """TCP proxy in the receiver host: the sender connects to it, it
    connects on to the receiver. One connection (the first to carry
    @at bytes towards the receiver) gets @fault applied mid-stream.

    One thread per connection serves both directions with select(): a
    socket closed by another thread while this one sleeps in recv() on it
    would stay open until the recv() returns, and an RST would never go.
    """

    def __init__(self, listen_port, to_port, fault, at=1 << 20):
        self.to = to_port
        self.fault, self.at = fault, at
        self.done = False
        self.applied = None
        self.lock = threading.Lock()
        with in_netns(RCV):
            self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.ls.bind(("0.0.0.0", listen_port))
            self.ls.listen(64)
        self.ls.settimeout(0.5)
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self):
        while not self.done:
            try:
                c, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with in_netns(RCV):
                up = socket.create_connection(("127.0.0.1", self.to))
            threading.Thread(target=self._serve, args=(c, up),
                             daemon=True).start()

    def _claim(self):
        with self.lock:
            if self.applied is None:
                self.applied = self.fault
                return True
            return False

    @staticmethod
    def _reset(*socks):
        for s in socks:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass

    def _serve(self, c, up):
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(c, selectors.EVENT_READ, up)
        sel.register(up, selectors.EVENT_READ, c)
        total, open_dirs = 0, 2
        try:
            while open_dirs and not self.done:
                for key, _ in sel.select(timeout=0.5):
                    src, dst = key.fileobj, key.data
                    data = src.recv(1 << 16)
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        sel.unregister(src)
                        open_dirs -= 1
                        continue
                    if src is c and total + len(data) >= self.at and \
                            self.applied is None and self._claim():
                        data = self._damage(data, self.at - total, c, up)
                        if data is None:
                            return
                    if src is c:
                        total += len(data)
                    dst.setblocking(True)
                    dst.sendall(data)
            c.close()
            up.close()
        except OSError:
            # One side is gone (the receiver closes a band whose stream
            # it refused): reset the other, as a dying peer would, so that
            # the sender learns of it at once.
            self._reset(c, up)

    def _damage(self, data, cut, c, up):
        """Damages the stream towards the receiver at byte @cut of
        @data; None if the connection was cut instead."""
        cut = max(1, min(cut, len(data) - 1))
        f = self.fault
        if f == "flip":
            return data[:cut] + bytes([data[cut] ^ 0x5a]) + data[cut + 1:]
        if f == "dup":
            return data[:cut] + data[max(0, cut - 100):cut] + data[cut:]
        if f == "swap":
            a, b = data[:cut], data[cut:]
            if len(b) < 200:
                return b + a
            return a + b[100:200] + b[:100] + b[200:]
        up.sendall(data[:cut])
        if f == "rst":
            self._reset(up, c)
        else:
            for s in (up, c):
                s.shutdown(socket.SHUT_RDWR)
                s.close()
        return None

    def close(self):
        self.done = True
        self.ls.close()


def lib_topology():
    topology()
    tc(f"qdisc replace dev {SDEV} root handle 1: p3 bands 8 tag dscp "
       "rate 100mbit")


def netem_ingress(spec):
    """netem on the receiver's ingress, through an ifb."""
    sh("ip link add ifb0 type ifb", ns=RCV)
    sh("ip link set ifb0 up", ns=RCV)
    tc("qdisc add dev r0 handle ffff: ingress", ns=RCV)
    tc("filter add dev r0 parent ffff: matchall action mirred egress "
       "redirect dev ifb0", ns=RCV)
    tc(f"qdisc add dev ifb0 root netem {spec}", ns=RCV)


SILENT_PEER_TIMEOUT = 5.0


def lib_run(chk, name, fault=None, netem=None, kill=None, silent=False):
    """One transfer; returns its outcome for the summary.  silent: every
    packet, both ways, is dropped mid-transfer, as if the link were cut,
    and both ends must notice within their peer timeout."""
    lib_topology()
    if netem or silent:
        netem_ingress(netem or "loss 0%")
    peer_timeout = ["--peer-timeout", str(SILENT_PEER_TIMEOUT)] if silent else []
    tmp = tempfile.mkdtemp()
    rout, sout = f"{tmp}/recv.json", f"{tmp}/send.json"
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "userlib", "python"))
    me = [sys.executable, os.path.abspath(__file__)]
    port = LIB_PORT
    proxy = None
    recv = subprocess.Popen(["ip", "netns", "exec", RCV] + me +
                            ["--role", "recv", "--port", str(port), "--out",
                             rout, "--idle", "20"] + peer_timeout, env=env)
    for _ in range(300):
        if os.path.exists(rout + ".ready"):
            break
        time.sleep(0.1)
    to_port = port
    if fault:
        proxy = Proxy(port + 1, port, fault)
        to_port = port + 1
    send = subprocess.Popen(["ip", "netns", "exec", SND] + me +
                            ["--role", "send", "--host", RADDR, "--port",
                             str(to_port), "--out", sout] + peer_timeout,
                            env=env)
    killed = None
    t_silent = None
    if silent:
        for _ in range(600):
            if os.path.exists(sout + ".ready"):
                break
            time.sleep(0.1)
        time.sleep(1.2)
        # Both directions: with the receiver's own packets still flowing,
        # its close after its timeout reached the sender as a reset first
        # (CI, 6.1: ECONNRESET 5.1 s in), and the sender's timeout went
        # untested.
        tc("qdisc change dev ifb0 root netem loss 100%", ns=RCV)
        tc("qdisc replace dev r0 root netem loss 100%", ns=RCV)
        t_silent = time.monotonic()
    if kill:
        # Mid-slice: the 3 MiB slices take ~0.25 s each at 100 Mbit/s.
        for _ in range(600):
            if os.path.exists(sout + ".ready"):
                break
            time.sleep(0.1)
        time.sleep(1.2)
        victim = send if kill == "sender" else recv
        # ip netns exec replaces itself with python: this is its pid.
        os.kill(victim.pid, signal.SIGKILL)
        killed = kill
    hung = []
    for who, p in (("sender", send), ("receiver", recv)):
        try:
            p.wait(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            hung.append(who)
    if proxy:
        proxy.close()
    netem_stats = ""
    if netem:
        out = sh("tc -s qdisc show dev ifb0", ns=RCV, check=False)
        m = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+)", out)
        if m:
            netem_stats = f"; netem saw {m[2]} packets, dropped {m[3]}"

    def load(path):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    r, s = load(rout), load(sout)
    sh(f"rm -rf {tmp}", check=False)
    teardown()

    bad = []
    chk.expect(not hung, f"{name}: {hung} hung")
    if silent:
        # Both ends see ETIMEDOUT from TCP (user timeout, keepalive), not
        # the test's own idle limit, within a few peer timeouts.
        for who, res, err in (("sender", s, (s or {}).get("error")),
                              ("receiver", r, (r or {}).get("errors", [[None]])[0])):
            took = (res or {}).get("t_error", 1e9) - t_silent
            if not err or err[0] != errno.ETIMEDOUT or took > 4 * SILENT_PEER_TIMEOUT:
                bad.append(f"{who}: {err} {took:.1f} s after the link went silent "
                           f"(want ETIMEDOUT within {4 * SILENT_PEER_TIMEOUT:.0f} s)")
            else:
                chk.note(f"{name}: {who} saw ETIMEDOUT {took:.1f} s after the "
                         f"link went silent (peer timeout {SILENT_PEER_TIMEOUT:.0f} s)")
    if killed != "receiver":
        if r is None:
            bad.append("the receiver left no result")
        else:
            wrong = [t for t, ok in r["completions"].items() if not ok]
            if wrong:
                bad.append(f"tensors {wrong} completed with wrong bytes")
            complete = len(r["completions"]) == len(TENSORS)
            if not complete and not r["errors"]:
                bad.append(f"only {sorted(r['completions'])} completed and "
                           f"no error reported{' (idle timeout)' if r['timeout'] else ''}")
            if (fault or killed or silent) and not r["errors"] and \
                    (fault != "fin" or not complete):
                bad.append("the damaged stream was not reported")
    if killed != "sender" and s is None and "sender" not in hung:
        bad.append("the sender left no result")
    for b in bad:
        chk.failures.append(f"{name}: {b}")
    got = sorted(r["completions"]) if r else None
    errs = sorted({e[1].split(":")[-1].strip() for e in r["errors"]}) \
        if r else None
    chk.note(f"{name}: completed {got}, receiver errors {errs}, sender "
             f"{(s or {}).get('error') if s else 'killed/none'}{netem_stats}")


LIB_CASES = [
    ("netem loss 5%", dict(netem="loss 5%")),
    ("netem duplicate 5%", dict(netem="duplicate 5%")),
    ("netem corrupt 2%", dict(netem="corrupt 2%")),
    ("netem reorder 25%", dict(netem="delay 5ms reorder 25% 50%")),
    ("netem all", dict(netem="delay 3ms 2ms loss 2% duplicate 2% "
                       "corrupt 1% reorder 10% 50%")),
    ("proxy flips a byte", dict(fault="flip")),
    ("proxy repeats 100 bytes", dict(fault="dup")),
    ("proxy swaps two chunks", dict(fault="swap")),
    ("proxy sends FIN mid-slice", dict(fault="fin")),
    ("proxy resets mid-slice", dict(fault="rst")),
    ("sender killed mid-slice", dict(kill="sender")),
    ("receiver killed mid-slice", dict(kill="receiver")),
    ("peer goes silent mid-slice", dict(silent=True)),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--test", action="append",
                    help="only this test (repeatable): a kernel test name, "
                    "or 'libp3'")
    ap.add_argument("--max-nth", type=int, default=400,
                    help="give up a sweep after this many allocations")
    ap.add_argument("--nth-step", type=int, default=1,
                    help="fail every Nth allocation of a sweep, not each "
                    "(a shorter run for CI)")
    ap.add_argument("-x", "--exclude", action="append", default=[],
                    help="skip this test (repeatable; names as for -t)")
    ap.add_argument("--flow-faults", type=int, default=5000,
                    help="forwarded flows sent while creation fails")
    ap.add_argument("--flow-fail-pct", type=int, default=20)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--role", choices=["send", "recv"], help=argparse.SUPPRESS)
    ap.add_argument("--host")
    ap.add_argument("--port", type=int)
    ap.add_argument("--out")
    ap.add_argument("--idle", type=float, default=20)
    ap.add_argument("--peer-timeout", type=float, default=30.0)
    args = ap.parse_args()
    if args.role:
        return (role_send if args.role == "send" else role_recv)(args)

    tap = Tap(args.prefix)
    sh("modprobe sch_p3")
    klog = KernelReports()
    want = set(args.test or [])
    debug = os.path.exists(f"{DBG}/failslab") and \
        os.path.exists("/proc/self/fail-nth")
    injected = 0
    if not debug:
        tap.skip("faults: kernel fault injection",
                 "no /sys/kernel/debug/failslab: not the debug kernel")
    else:
        fault_setup()
        for name, fn in KERNEL_TESTS:
            if want and name not in want or name in args.exclude:
                continue
            chk = Check()
            t0 = time.monotonic()
            k = None
            skipped = None
            try:
                topology()
                # The sweeps account for every packet in the queue: a
                # router solicitation arriving mid-check is one too many.
                no_ipv6()
                k = Kernel(args)
                injected += fn(k, chk) or 0
            except Skip as e:
                skipped = str(e)
            except Exception as e:  # a crashed test is a failed test
                chk.failures.append(f"exception: {e!r}")
            finally:
                if k:
                    k.close()
                teardown()
            if skipped:
                tap.skip(f"faults: {name}", skipped)
                continue
            for line in klog.new():
                chk.failures.append(f"kernel log: {line}")
            chk.note(f"took {time.monotonic() - t0:.1f} s")
            tap.result(not chk.failures, f"faults: {name}",
                       "\n".join(chk.notes + chk.failures))
        # kmemleak's scans come after the suite, from
        # selftests/debug-kernel/guest.sh.

    if (not want or "libp3" in want) and "libp3" not in args.exclude:
        for name, kw in LIB_CASES:
            chk = Check()
            t0 = time.monotonic()
            try:
                lib_run(chk, name, **kw)
            except Exception as e:
                chk.failures.append(f"exception: {e!r}")
                teardown()
            for line in klog.new():
                chk.failures.append(f"kernel log: {line}")
            chk.note(f"took {time.monotonic() - t0:.1f} s")
            tap.result(not chk.failures, f"faults: libp3 {name}",
                       "\n".join(chk.notes + chk.failures))
    print(f"# faults: {injected} kernel faults injected")
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
