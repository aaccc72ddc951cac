#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Emulated parameter-server training on network namespaces (run as root,
inside the VM: selftests/vm-run -- bench/train/emulate.py ...).

W workers and S servers, each a network namespace with one veth port on a
bridge (its own namespace, p3e-sw).  Every host's egress is shaped to the
same rate: `p3 ... rate R` in p3kernel mode, `tbf rate R` over a pfifo
child otherwise.  Workers emulate per-layer forward and backward time by
sleeping; backward pushes each layer's gradient as soon as it exists (last
layer first) to the servers that own its keys; a server aggregates a key
once all W workers pushed it and sends the updated parameters back to
every worker; a worker's forward layer waits for its parameters.  All
traffic goes through libp3 channels (framing, CRC32C, reassembly) so that
the modes differ only in what they are about:

  fifo      MXNet-style shards, whole, in backward order, one socket/peer
  slice     P3's slices (round-robin over servers), same order, one socket
  p3user    slices, one socket per peer, libp3's in-band priority queue
            (P3's user-space design), small TCP_NOTSENT_LOWAT
  p3kernel  slices on one tagged socket per level and peer (--bands levels,
            DSCP), the p3 qdisc on every host

With --bulk each worker host also runs an untagged bulk TCP upload (a
checkpoint, over --bulk-streams connections) to a storage host through the
same NIC.

Every host runs as a process forked from this one after the imports (a
fresh python3 with ctypes takes ~10 s to start under TCG); the child enters
its namespace with setns(2).  Results are JSON lines; progress goes to
stderr:  [3/24] vgg19 p3kernel 8gbps (20.0mbit): 1.234 s/iter
"""
import argparse
import collections
import ctypes
import json
import os
import queue
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import job as jobmod    # noqa: E402  (puts userlib/python on sys.path)
import kcount           # noqa: E402
import models           # noqa: E402
import p3               # noqa: E402

PREFIX = "p3e-"
SWITCH = PREFIX + "sw"
SUBNET = "10.77.0"
STORE_IP = f"{SUBNET}.200"
BULK_PORT = 9000
BULK_CHUNK = 1 << 20
RTO_MIN = "15s"         # see Cluster.up()
# Packet-level sizes do not shrink with the job, so they are kept small:
# what a flow has committed beyond the reach of user space is about
# NOTSENT_LOWAT in its socket plus what TSQ lets into the qdisc.
GSO_MAX = 4096          # bytes per GSO packet (TCP builds them this big)
NOTSENT_LOWAT = jobmod.NOTSENT_LOWAT    # --lowat changes it
TSQ_LIMIT = 4096        # tcp_limit_output_bytes: one such packet per flow
                        # in the qdisc (TSQ's 1 MB default is ~1 ms at
                        # 10 Gbit/s, ~5 s on these links)
TBF_BURST = 6000        # one such packet with its headers (p3's pacer sends
                        # one, then waits len/R); --calibrate compares them
QLIMIT = 10000          # packets: p3's default limit, and the pfifo's
CLONE_NEWNET = 0x40000000
PR_SET_NAME = 15

_libc = ctypes.CDLL(None, use_errno=True)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sh(cmd, check=True, input=None):
    r = subprocess.run(cmd, shell=True, text=True, input=input,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and r.returncode:
        raise RuntimeError(f"`{cmd}` exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def enter_netns(name):
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET):
            e = ctypes.get_errno()
            raise OSError(e, f"setns {name}: {os.strerror(e)}")
    finally:
        os.close(fd)


# ------------------------------------------------------------- topology

class Cluster:
    """The namespaces, the bridge, and each host's egress shaper."""

    def __init__(self, workers, servers, acks="stock", quickack=False,
                 shaper="auto", sysctls=()):
        self.acks = acks
        self.sysctls = list(sysctls)    # KEY=VALUE, beyond the settings
        self.quickack = quickack        # no delayed ACKs (route quickack 1)
        self.shaper = shaper
        self.workers = [(f"w{i}", f"{SUBNET}.{10 + i}") for i in range(workers)]
        self.servers = [(f"s{i}", f"{SUBNET}.{100 + i}")
                        for i in range(servers)]
        self.hosts = self.workers + self.servers + [("store", STORE_IP)]

    @staticmethod
    def ns(host):
        return PREFIX + host

    def up(self):
        self.down()
        lines = [f"netns add {SWITCH}"]
        lines += [f"netns add {self.ns(h)}" for h, _ in self.hosts]
        lines += [f"link add eth0 netns {self.ns(h)} type veth peer name {h} "
                  f"netns {SWITCH}" for h, _ in self.hosts]
        sh("ip -batch -", input="\n".join(lines) + "\n")
        sw = ["link add br0 type bridge", "link set br0 up", "link set lo up"]
        sw += [f"link set {h} master br0 up" for h, _ in self.hosts]
        sh(f"ip -n {SWITCH} -batch -", input="\n".join(sw) + "\n")
        for h, ip in self.hosts:
            # TCP's loss timers assume packets that take microseconds; here
            # one takes up to ~0.2 s, so the 200 ms minimum RTO and the tail
            # loss probe would fire on mere queueing (and collapse cwnd)
            # although nothing is lost.  Scale them with the emulation.
            sh(f"ip -n {self.ns(h)} -batch -",
               input=f"addr add {ip}/24 dev eth0\nlink set eth0 up\n"
                     "link set lo up\n"
                     f"route replace {SUBNET}.0/24 dev eth0 proto kernel "
                     f"scope link src {ip} rto_min {RTO_MIN}"
                     f"{' quickack 1' if self.quickack else ''}\n")
            # acks=stock: libp3 tags each accepted socket with its band's
            # level, so a band's ACKs travel in that band.  acks=reflect
            # has the kernel do the same (the accepted socket takes its
            # SYN's DSCP); kept to compare, as a deployment might set it.
            sh(f"ip netns exec {self.ns(h)} sysctl -qw "
               "net.ipv4.tcp_early_retrans=0 "
               f"net.ipv4.tcp_limit_output_bytes={TSQ_LIMIT} "
               f"net.ipv4.tcp_reflect_tos={int(self.acks == 'reflect')} "
               + " ".join(self.sysctls))
            # Small GSO packets: a 64 KB one lasts ~0.5 s on these
            # scaled-down links, and no qdisc can preempt a packet once it
            # left; wire-size packets cost too much CPU under TCG.
            sh(f"ip -n {self.ns(h)} link set eth0 gso_max_size {GSO_MAX}")

    def down(self):
        out = sh("ip netns list", check=False)
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(PREFIX):
                sh(f"ip netns del {name}", check=False)

    def shape(self, mode, rate_Bps, train_bands=jobmod.TRAIN_BANDS):
        """The same rate on every host's egress: the p3 qdisc's pacer in
        p3kernel mode, otherwise tbf (burst of one GSO packet) over a
        pfifo, the FIFO a NIC has without P3 (shaper "auto"; "p3" or
        "tbf" puts every mode behind that one).  p3 has a band per
        training level and one more, the default, for untagged traffic."""
        bits = int(rate_Bps * 8)
        shaper = self.shaper if self.shaper != "auto" else \
            "p3" if mode == "p3kernel" else "tbf"
        p3 = (f"p3 bands {train_bands + 1} default {train_bands} "
              f"tag dscp limit {QLIMIT}")
        tbf = (f"qdisc add dev eth0 root handle 1: tbf rate {bits}bit"
               f" burst {TBF_BURST} latency 10s\n")
        for h, _ in self.hosts:
            sh(f"tc -n {self.ns(h)} qdisc del dev eth0 root", check=False)
            if shaper == "p3":
                cmds = (f"qdisc add dev eth0 root handle 1: {p3} "
                        f"rate {bits}bit\n")
                if self.acks == "urgent":
                    # Pure ACKs (IP length < 64) to band 0: receiving
                    # sockets send nothing else, so no flow is reordered.
                    cmds += ("filter add dev eth0 parent 1: protocol ip prio 1"
                             " u32 match ip protocol 6 0xff match u16 0x0000 "
                             "0xffc0 at 2 flowid 1:1\n")
            elif shaper == "tbf-p3" and mode == "p3kernel":
                # tbf is the link for every mode, p3 (unpaced) under it
                cmds = tbf + f"qdisc add dev eth0 parent 1:1 handle 10: {p3}\n"
            else:
                cmds = tbf + (f"qdisc add dev eth0 parent 1:1 handle 10: "
                              f"pfifo limit {QLIMIT}\n")
            sh(f"tc -n {self.ns(h)} -batch -", input=cmds)

    def qdisc_stats(self):
        """Drops and p3's preemptions summed over the hosts; bytes sent by
        each host."""
        tot = {"drops": 0, "preemptions": 0, "sent": {}, "xstats": {}}
        for h, _ in self.hosts:
            try:
                qs = json.loads(sh(f"tc -n {self.ns(h)} -s -j qdisc show dev eth0"))
            except (RuntimeError, ValueError):
                continue
            for q in qs:
                if q.get("root") or q.get("kind") in ("pfifo",):
                    tot["drops"] += q.get("drops", 0)
                if q.get("root"):
                    tot["sent"][h] = q.get("bytes", 0)
                xs = q.get("xstats", q)
                tot["preemptions"] += xs.get("preemptions", 0) or 0
                if q.get("root") and q.get("kind") == "p3":
                    tot["xstats"][h] = xs
        return tot

    NSTAT = ("TcpOutSegs", "TcpRetransSegs", "TcpExtTCPTimeouts",
             "TcpExtTCPSpuriousRTOs", "TcpExtTCPSpuriousRtxHostQueues",
             "TcpExtTCPLossProbes", "TcpExtTCPOrigDataSent",
             "TcpExtDelayedACKs")

    def nstat(self):
        """TCP counters summed over the hosts (absolute)."""
        tot = dict.fromkeys(self.NSTAT, 0)
        for h, _ in self.hosts:
            for line in sh(f"ip netns exec {self.ns(h)} nstat -asz",
                           check=False).splitlines():
                f = line.split()
                if len(f) >= 2 and f[0] in tot:
                    tot[f[0]] += int(f[1])
        return tot


def cpu_times():
    """Jiffies: total, idle, user, system, softirq (all CPUs)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4], v[0] + v[1], v[2], v[5] + v[6]


def thread_stats(pids):
    """Per thread name, summed over the processes @pids: [CPU seconds
    (utime + stime), wake-ups (voluntary context switches: each blocking
    wait that ended), read and write system calls (syscr + syscw)]."""
    out = {}
    tck = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            task = f"/proc/{pid}/task/{tid}"
            try:
                with open(f"{task}/stat") as f:
                    raw = f.read()
                with open(f"{task}/status") as f:
                    waits = next(int(line.split()[1]) for line in f
                                 if line.startswith("voluntary_ctxt"))
                with open(f"{task}/io") as f:
                    io = dict(line.split(": ") for line in f.read().splitlines())
            except (OSError, StopIteration):
                continue
            name = raw[raw.index("(") + 1:raw.rindex(")")]
            v = raw.rsplit(")", 1)[1].split()
            now = [(int(v[11]) + int(v[12])) / tck, waits,
                   int(io["syscr"]) + int(io["syscw"])]
            out[name] = [a + b for a, b in zip(out.get(name, [0, 0, 0]), now)]
    return out


def clocksource():
    """The kernel's clock source.  Under TCG the kernel leaves the TSC
    for the emulated HPET, where every clock read is a device access and
    clock_gettime() a system call; on the TSC the VM was no less busy
    (`git show 216191b:docs/benchmarks.md`, "Exact counts, and where the
    forward pass waits"), but a record should say which clock it ran on."""
    try:
        with open("/sys/devices/system/clocksource/clocksource0/"
                  "current_clocksource") as f:
            return f.read().strip()
    except OSError:
        return None


def tx_bytes(dev="eth0"):
    """Bytes @dev sent, in the caller's namespace (/proc/net/dev follows
    the reader's network namespace)."""
    with open("/proc/self/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == dev:
                return int(rest.split()[8])
    return 0


def sample_tx(ctl, period=0.25, trace=None, late=None):
    """Samples this host's sent bytes until the controller asks for them,
    then reports them with @trace and @late, if any."""
    samples = []
    while True:
        samples.append((time.monotonic(), tx_bytes()))
        r, _, _ = select.select([ctl.r], [], [], period)
        if r:
            ctl.wait("report")
            ctl.send(samples=samples, trace=trace, late=late)
            return


# ------------------------------------------------------------- children

class Child:
    """A forked host process and its two pipes (JSON lines)."""

    open_fds = set()        # the parent's ends, which no child should keep

    def __init__(self, name, netns, fn, *args):
        c_r, p_w = os.pipe()        # parent -> child
        p_r, c_w = os.pipe()        # child -> parent
        self.name = name
        self.pid = os.fork()
        if self.pid == 0:
            os.close(p_w)
            os.close(p_r)
            for fd in Child.open_fds:
                os.close(fd)
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                enter_netns(netns)
                p3.tag_config("dscp", NOTSENT_LOWAT)
                _libc.prctl(PR_SET_NAME, (name.rstrip("0123456789") +
                                          "-main").encode(), 0, 0, 0)
                ctl = Ctl(os.fdopen(c_r, "r"), os.fdopen(c_w, "w"))
                fn(ctl, *args)
            except BaseException as e:      # report, never unwind into
                try:                         # the parent's code
                    os.write(c_w, (json.dumps({"error": f"{name}: {e!r}"})
                                   + "\n").encode())
                except OSError:
                    pass
                code = 1
            os._exit(code)
        os.close(c_r)
        os.close(c_w)
        self.w = os.fdopen(p_w, "w")
        self.rfd = p_r
        Child.open_fds |= {p_w, p_r}
        self.buf = b""

    def send(self, msg):
        self.w.write(json.dumps(msg) + "\n")
        self.w.flush()

    def lines(self):
        data = os.read(self.rfd, 65536)
        if not data:
            raise RuntimeError(f"{self.name} exited")
        self.buf += data
        *done, self.buf = self.buf.split(b"\n")
        return [json.loads(x) for x in done if x]

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        Child.open_fds -= {self.w.fileno(), self.rfd}
        self.w.close()
        os.close(self.rfd)


class Ctl:
    """The child's side of the pipes."""

    def __init__(self, r, w):
        self.r, self.w = r, w
        self.lock = threading.Lock()

    def send(self, **msg):
        with self.lock:
            self.w.write(json.dumps(msg) + "\n")
            self.w.flush()

    def wait(self, what):
        for line in self.r:
            msg = json.loads(line)
            if msg.get("cmd") == what:
                return msg
        raise RuntimeError("controller went away")


def gather(children, key, timeout, progress=None):
    """Waits until every child sent a message with @key; returns them.
    Messages with "progress" go to @progress meanwhile."""
    want = {c.rfd: c for c in children}
    got = {}
    deadline = time.monotonic() + timeout
    while len(got) < len(children):
        left = deadline - time.monotonic()
        if left <= 0:
            missing = [c.name for c in children if c.name not in got]
            raise TimeoutError(f"no '{key}' from {', '.join(missing)}")
        ready, _, _ = select.select([fd for fd, c in want.items()
                                     if c.name not in got], [], [], left)
        for fd in ready:
            c = want[fd]
            for msg in c.lines():
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                if key in msg:
                    got[c.name] = msg
                elif "progress" in msg and progress:
                    progress(msg["progress"])
    return got


def fatal(ctl, what):
    """Thread body wrapper: an exception ends the whole host process.  The
    thread is named after its function (see `top -H`)."""
    def wrap(fn, *args):
        try:
            name = f"{what[0]}-{fn.__name__}"
            _libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
            fn(*args)
        except BaseException as e:
            try:
                ctl.send(error=f"{what}: {e!r}")
            finally:
                os._exit(1)
    return wrap


# --------------------------------------------------------------- sending

class HandOver:
    """A host's hand-overs to libp3: a batch is a layer's pushes (worker)
    or a key's pulls (server).  Each send goes into libp3's per-band heap
    of that peer's channel, ordered by (iteration, prio, arrival), and is
    written at once if its socket has room; the channel's progress thread
    (libp3's engine, the Python binding's default) writes the rest the
    moment the socket can take it.  @late, if a list, gets (iteration,
    seconds) per batch: how long after it was due its first send began,
    the timing noise simulate.py --jitter models."""

    def __init__(self, chans, j, to_server, late=None):
        self.chans = chans
        self.to_server = to_server
        self.late = late
        self.prioritised = j.mode in ("p3user", "p3kernel")
        self.banded = j.mode == "p3kernel"
        self.zero = memoryview(bytearray(max(k.nbytes for k in j.keys)))

    def __call__(self, batch, it, due):
        """@batch: (peer, keys) pairs due at @due, of iteration @it."""
        if self.late is not None:
            self.late.append((it, round(time.monotonic() - due, 6)))
        for peer, keys in batch:
            ch = self.chans[peer]
            for k in keys:
                # a server aggregates by key; a worker reassembles layers
                tensor, offset = ((k.id, 0) if self.to_server
                                  else (k.layer, k.shard_off))
                ch.send(tensor, self.zero[:k.nbytes],
                        k.level if self.banded else 0, iteration=it,
                        offset=offset,
                        prio=k.prio if self.prioritised else 0)


def sender(q, hand_over):
    """The host's sender thread: hands over each batch (pairs of peer and
    keys, iteration, due) as it comes off @q, and sleeps until the next.
    A batch's lateness so includes its wait behind the batches before it.
    Sending from the thread that times the compute, as p3.torch's hooks
    do, was tried and not shown to matter either way (`git show
    216191b:docs/benchmarks.md`, "The emulator's sender without its
    timer"); here libp3's calls stay
    off that thread."""
    while True:
        hand_over(*q.get())


def connect_peers(j, ips, port, chan_id, out):
    for i, ip in enumerate(ips):
        out[i] = p3.Channel.connect(ip, port, bands=j.bands, chan_id=chan_id,
                                    max_queued=1 << 30, timeout=60)


def accept_peers(lst, n, base):
    chans = {}
    while len(chans) < n:
        ch = lst.accept(timeout=60)
        chans[ch.chan_id - base] = ch
    return chans


def meet_peers(ctl, j, cfg, ips, chan_id, accept_base):
    """A host's channels to and from every peer at @ips, once the
    controller says connect: (those it opened, with @chan_id; those it
    accepted, whose ids count from @accept_base), each by peer number.
    Returns when the controller says go."""
    with p3.Listener(host=None, port=cfg["port"], timeout=60) as lst:
        ctl.send(ready=1)
        ctl.wait("connect")
        out = {}
        t = threading.Thread(target=connect_peers,
                             args=(j, ips, cfg["port"], chan_id, out))
        t.start()
        inbound = accept_peers(lst, len(ips), accept_base)
        t.join()
    if len(out) != len(ips):
        raise RuntimeError(f"could not connect to every peer of {ips}")
    ctl.send(connected=1)
    ctl.wait("go")
    return out, inbound


# ---------------------------------------------------------------- server

def server_main(ctl, j, sid, cfg):
    mine = [k for k in j.keys if k.server == sid]
    byid = {k.id: k for k in mine}
    pull, push = meet_peers(ctl, j, cfg, cfg["worker_ips"], 1001 + sid, 1)
    W = j.workers
    count = {k.id: 0 for k in mine}
    lock = threading.Lock()
    last = cfg["iters"]
    # --trace: when each worker's push of a key arrived, by "iteration:key"
    pushed = collections.defaultdict(list) if cfg["trace"] else None
    late = [] if cfg["trace"] else None
    txq = queue.Queue()

    def receive(w, ch):
        bufs = {k.id: bytearray(k.nbytes) for k in mine}
        for k in mine:
            ch.expect(k.id, bufs[k.id], 0)
        while True:
            for c in ch.poll(0.5):
                if c.iteration + 1 < last:
                    ch.expect(c.tensor, bufs[c.tensor], c.iteration + 1)
                now = time.monotonic()
                if pushed is not None:
                    pushed[f"{c.iteration}:{c.tensor}"].append((w, now))
                with lock:
                    count[c.tensor] += 1
                    full = count[c.tensor] == W
                    if full:
                        count[c.tensor] = 0
                if full:
                    keys = [byid[c.tensor]]
                    txq.put(([(w2, keys) for w2 in range(W)],
                             c.iteration + 1, now))

    wrap = fatal(ctl, f"server {sid}")
    threading.Thread(target=wrap, daemon=True,
                     args=(sender, txq, HandOver(pull, j, False, late))).start()
    for w in range(W):
        threading.Thread(target=wrap, args=(receive, w, push[w]),
                         daemon=True).start()
    sample_tx(ctl, trace=pushed, late=late)
    while True:
        time.sleep(3600)


# ---------------------------------------------------------------- worker

def sleep_until(t):
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)


def worker_main(ctl, j, wid, cfg):
    S = j.servers
    L = len(j.fwd)
    by_layer = j.keys_of_layer()
    # Per layer, the keys each server owns; the layer's batch of pushes
    # (server, keys), one pair per server that owns some, and so how many
    # servers send the layer back.
    push_keys = [[[k for k in by_layer[la] if k.server == s] for s in range(S)]
                 for la in range(L)]
    batches = [[(s, ks) for s, ks in enumerate(push_keys[la]) if ks]
               for la in range(L)]
    nsrv = [len(b) for b in batches]
    push, pull = meet_peers(ctl, j, cfg, cfg["server_ips"], 1 + wid, 1001)

    iters = cfg["iters"]                # iteration starts to time
    cond = threading.Condition()
    ready = [0] * L                     # newest iteration with parameters
    got = [0] * L
    arrive = [[None] * L for _ in range(iters)]
    # --trace: when each server's part of a layer arrived, by
    # "iteration:layer:server"
    pulled = {} if cfg["trace"] else None
    bwd_end = []
    late = [] if cfg["trace"] else None
    txq = queue.Queue()

    def receive(s, ch):
        layers = [la for la in range(L) if push_keys[la][s]]
        bufs = {la: bytearray(j.shard_bytes[(la, s)]) for la in layers}
        for la in layers:
            ch.expect(la, bufs[la], 1)
        while True:
            for c in ch.poll(0.5):
                la, it = c.tensor, c.iteration
                if it + 1 < iters:
                    ch.expect(la, bufs[la], it + 1)
                if pulled is not None:
                    pulled[f"{it}:{la}:{s}"] = time.monotonic()
                with cond:
                    got[la] += 1
                    if got[la] == nsrv[la]:
                        got[la] = 0
                        ready[la] = it
                        arrive[it][la] = time.monotonic()
                        cond.notify_all()

    wrap = fatal(ctl, f"worker {wid}")
    threading.Thread(target=wrap, daemon=True,
                     args=(sender, txq, HandOver(push, j, True, late))).start()
    for s in range(S):
        threading.Thread(target=wrap, args=(receive, s, pull[s]),
                         daemon=True).start()

    starts, stalls, sent = [], [], []
    t = time.monotonic()
    for it in range(iters):
        stall = 0.0
        for la in range(L):
            if ready[la] < it:
                w0 = time.monotonic()
                with cond:
                    while ready[la] < it:
                        cond.wait()
                t = time.monotonic()
                stall += t - w0
            if la == 0:
                starts.append(t)
                sent.append(tx_bytes())
                if wid == 0 and cfg.get("progress"):
                    ctl.send(progress=it)
                if it == iters - 1:
                    break
            t += j.fwd[la]
            sleep_until(t)
        if it == iters - 1:
            break
        for la in reversed(range(L)):
            t += j.bwd[la]
            sleep_until(t)
            txq.put((batches[la], it, t))
        stalls.append(stall)
        bwd_end.append(t)
    trace = {"arrive": arrive, "bwd_end": bwd_end} if wid == 0 else None
    if trace is not None and pulled is not None:
        trace["pulled"] = pulled
    ctl.send(result={"starts": starts, "stalls": stalls, "sent": sent,
                     "trace": trace, "late": late})
    while True:
        time.sleep(3600)


# ------------------------------------------------------------------ bulk

def store_main(ctl, cfg):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", cfg["bulk_port"]))
    srv.listen(64)
    ctl.send(ready=1)

    def drain(c):
        buf = bytearray(BULK_CHUNK)
        while c.recv_into(buf):
            pass

    while True:
        c, _ = srv.accept()
        threading.Thread(target=drain, args=(c,), daemon=True).start()


def ckpt_main(ctl, cfg):
    """A checkpoint upload over cfg["streams"] TCP connections: untagged,
    default socket options."""
    ctl.send(ready=1)
    ctl.wait("connect")
    socks = [socket.create_connection((STORE_IP, cfg["bulk_port"]),
                                      timeout=60)
             for _ in range(cfg.get("streams", 1))]
    ctl.send(connected=1)
    buf = bytes(BULK_CHUNK)

    def upload(s):
        while True:
            s.sendall(buf)

    for s in socks[1:]:
        threading.Thread(target=upload, args=(s,), daemon=True).start()
    upload(socks[0])


# ---------------------------------------------------------- calibration

def sink_main(ctl, cfg):
    """Counts the bytes of one bulk connection over a window."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", cfg["bulk_port"]))
    srv.listen(4)
    ctl.send(ready=1)
    c, _ = srv.accept()
    buf = bytearray(BULK_CHUNK)
    n, t_end, t_mark = 0, None, None
    while True:
        k = c.recv_into(buf)
        now = time.monotonic()
        if t_mark is None and now > cfg["t_from"]:
            t_mark, n = now, 0
        n += k
        if now > cfg["t_to"]:
            t_end = now
            break
    ctl.send(goodput=n / (t_end - t_mark))
    while True:
        time.sleep(3600)


def calibrate(cluster, rate, seconds=3.0):
    """Goodput of one bulk TCP flow through each shaper at @rate."""
    out = {}
    for mode in ("p3kernel", "fifo"):
        cluster.shape(mode, rate)
        now = time.monotonic()
        cfg = {"bulk_port": BULK_PORT + 999, "t_from": now + 4,
               "t_to": now + 4 + seconds}
        kids = []
        try:
            kids.append(Child("sink", cluster.ns("store"), sink_main, cfg))
            gather(kids, "ready", 60)
            kids.append(Child("ckpt", cluster.ns(cluster.workers[0][0]),
                              ckpt_main, cfg))
            gather(kids[1:], "ready", 60)
            kids[1].send({"cmd": "connect"})
            out[mode] = gather(kids[:1], "goodput", 120)["sink"]["goodput"]
        finally:
            for c in reversed(kids):
                c.kill()
    return {"rate_Bps": rate, "p3_goodput": out["p3kernel"],
            "tbf_goodput": out["fifo"],
            "p3_eff": out["p3kernel"] / (rate * jobmod.GOODPUT),
            "tbf_eff": out["fifo"] / (rate * jobmod.GOODPUT)}


# ------------------------------------------------------------ one run

def run_one(cluster, j, iters, warmup, bulk, port, progress=None,
            trace=False, count_events=False):
    """Runs job @j once; returns the result record.  @trace adds when
    every push and pull of every key arrived (trace_servers, trace_w0);
    @count_events the kernel's event counts per iteration (events_per_iter),
    over the same window as the CPU, in tables of this run's own (a
    table keyed by thread fills up over a sweep's threads)."""
    cluster.shape(j.mode, j.rate, j.train_bands)
    ideal = j.ideal()
    tcp0 = cluster.nstat()
    cfg = {"port": port, "bulk_port": BULK_PORT + port % 1000,
           "streams": bulk,
           "iters": warmup + iters + 1, "progress": progress is not None,
           "trace": trace,
           "worker_ips": [ip for _, ip in cluster.workers],
           "server_ips": [ip for _, ip in cluster.servers]}
    kids = []
    counts = kcount.EventCounts(log) if count_events else None
    try:
        if bulk:
            kids.append(Child("store", cluster.ns("store"), store_main, cfg))
        servers = [Child(f"s{i}", cluster.ns(h), server_main, j, i, cfg)
                   for i, (h, _) in enumerate(cluster.servers)]
        workers = [Child(f"w{i}", cluster.ns(h), worker_main, j, i, cfg)
                   for i, (h, _) in enumerate(cluster.workers)]
        ckpts = [Child(f"ckpt{i}", cluster.ns(h), ckpt_main, cfg)
                 for i, (h, _) in enumerate(cluster.workers)] if bulk else []
        kids += servers + workers + ckpts
        gather(kids, "ready", 120)
        job_kids = servers + workers
        for c in job_kids + ckpts:
            c.send({"cmd": "connect"})
        gather(job_kids + ckpts, "connected", 180)
        if bulk:
            time.sleep(2.0)         # let the uploads reach steady state
        cpu0 = cpu_times()
        th0 = thread_stats([c.pid for c in kids])
        ev0 = counts.snapshot() if counts else None
        t0 = time.monotonic()
        for c in job_kids:
            c.send({"cmd": "go"})
        # A generous bound: FIFO with no overlap at all, three times over.
        bound = cfg["iters"] * 3 * (ideal["compute_s"] + 3 * ideal["link_s"])
        t_last = [t0]

        def tick(it):
            now = time.monotonic()
            progress(f"iteration {it}/{cfg['iters'] - 1} "
                     f"({'warm-up' if it <= warmup else 'timed'}), "
                     f"last took {now - t_last[0]:.2f} s")
            t_last[0] = now

        res = gather(workers, "result", bound + 120,
                     tick if progress else None)
        for c in servers:
            c.send({"cmd": "report"})
        srv = gather(servers, "samples", 60)
        wall = time.monotonic() - t0
        cpu1 = cpu_times()
        th1 = thread_stats([c.pid for c in kids])
        ev1 = counts.snapshot() if counts else None
        # Per thread name, CPU seconds per second of the run, and the
        # wake-ups and read/write system calls per timed iteration's
        # worth of the run (the warm-up included).
        iterations_run = cfg["iters"] - 1
        delta = {n: [a - b for a, b in zip(v, th0.get(n, [0, 0, 0]))]
                 for n, v in th1.items()}
        pcpu = {n: round(d[0] / wall, 3) for n, d in delta.items()}
        pcpu["ALL"] = round(sum(pcpu.values()), 3)
        pwake = {n: round(d[1] / iterations_run) for n, d in delta.items()}
        pcalls = {n: round(d[2] / iterations_run) for n, d in delta.items()}
    finally:
        for c in reversed(kids):
            c.kill()
        if counts:
            counts.close()
    q = cluster.qdisc_stats()
    tcp1 = cluster.nstat()
    tcp = {k: tcp1[k] - tcp0[k] for k in tcp0}
    # Link use in the timed window (from worker 0's clock).
    st0 = res["w0"]["result"]["starts"]
    ta, tb = st0[warmup], st0[-1]

    def at(samples, t):
        return min(samples, key=lambda x: abs(x[0] - t))

    # Bytes each worker's eth0 sent per timed iteration: the model's
    # pushes, plus headers and ACKs, which differ between the modes.
    wb = [(r["result"]["sent"][-1] - r["result"]["sent"][warmup]) / iters
          for r in res.values()]
    wu = [b * iters / (j.rate * (r["result"]["starts"][-1] -
                                 r["result"]["starts"][warmup]))
          for b, r in zip(wb, res.values())]
    su = []
    for r in srv.values():
        (t1, b1), (t2, b2) = at(r["samples"], ta), at(r["samples"], tb)
        su.append((b2 - b1) / (j.rate * (t2 - t1)) if t2 > t1 else 0)
    util = {"workers": sum(wu) / len(wu), "servers": sum(su) / len(su)}
    per = []
    stall = []
    for name in sorted(res):
        st = res[name]["result"]["starts"]
        per.append((st[-1] - st[warmup]) / iters)
        stall.append(sum(res[name]["result"]["stalls"][warmup:]) / iters)
    it_s = sum(per) / len(per)
    dt, di = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    split = {n: (cpu1[i] - cpu0[i]) / dt if dt else None
             for i, n in ((2, "user"), (3, "system"), (4, "irq"))}
    rec = j.describe()
    rec.update({
        "bulk": int(bulk), "acks": cluster.acks, "bands": j.train_bands,
        "lowat": NOTSENT_LOWAT, "sysctls": cluster.sysctls,
        "iters": iters, "warmup": warmup,
        "iter_s": it_s, "iter_s_workers": per,
        "stall_s": sum(stall) / len(stall),
        "samples_per_s": j.samples_per_s(it_s),
        "ideal_iter_s": ideal["iter_s"], "ideal_bound": ideal["bound"],
        "compute_s": ideal["compute_s"], "link_s": ideal["link_s"],
        "wall_s": wall, "cpu_busy": 1 - di / dt if dt else None,
        # vm-run passes P3_* in: how many host threads ran the vCPUs
        "tcg_thread": os.environ.get("P3_VM_TCG_THREAD", "single")
        if os.environ.get("P3_VM") else None,
        "clocksource": clocksource(),
        "cpu_split": split, "cpu_procs": pcpu,
        "wakeups_per_iter": pwake, "rw_calls_per_iter": pcalls,
        "qdisc": q, "tcp": tcp, "link_util": util,
        "events_per_iter": kcount.per_iteration(ev0, ev1, iterations_run,
                                                counts.names)
        if counts else None,
        "worker_tx_per_iter": sum(wb) / len(wb),
        "trace_w0": res["w0"]["result"]["trace"],
        "starts_w0": res["w0"]["result"]["starts"],
    })
    if trace:
        rec["trace_servers"] = {n: r["trace"] for n, r in srv.items()}
        rec["trace_late"] = {
            "workers": {n: r["result"]["late"] for n, r in res.items()},
            "servers": {n: r["late"] for n, r in srv.items()}}
    return rec


def same_setup(r, args):
    """Whether record @r ran with the settings of this command line, so
    that --resume counts only those (records from before a setting
    existed ran with its default)."""
    return (r.get("bands", jobmod.TRAIN_BANDS) == args.bands and
            r.get("slice_bytes", jobmod.SLICE_BYTES) == args.slice_bytes and
            r.get("shard", "round-robin") == args.shard and
            # only the kernel mode has levels; user space records P3's
            r.get("levels", "count") == (args.levels if r["mode"] == "p3kernel"
                                         else "count") and
            r.get("lowat", jobmod.NOTSENT_LOWAT) == args.lowat and
            r.get("sysctls", []) == args.sysctl and
            r.get("acks", "stock") == args.acks)


def set_lowat(nbytes):
    """TCP_NOTSENT_LOWAT for the host processes forked from now on."""
    global NOTSENT_LOWAT
    NOTSENT_LOWAT = nbytes


def parse_list(s, conv=str):
    return [conv(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vgg19")
    ap.add_argument("--modes", default="fifo,slice,p3user,p3kernel")
    ap.add_argument("--gbps", default="4",
                    help="real-equivalent link rates (comma-separated)")
    ap.add_argument("--grid", default="",
                    help="per-model rates, e.g. 'vgg19=1,2 sockeye=2,4' "
                    "(overrides --gbps for those models)")
    ap.add_argument("--bulk-gbps", default="",
                    help="per-model rates of the bulk runs, same syntax as "
                    "--grid (default: the model's rates)")
    ap.add_argument("--bulk", default="none", choices=("none", "only", "both"),
                    help="co-located bulk upload on every worker host")
    ap.add_argument("--bulk-modes", default="fifo,p3user,p3kernel",
                    help="modes to run with the bulk upload")
    ap.add_argument("--bulk-streams", default="1",
                    help="TCP connections of each upload (comma-separated: "
                    "one set of runs per value)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--compute-s", type=float, default=jobmod.EMU_COMPUTE_S,
                    help="emulated compute per iteration (s)")
    ap.add_argument("--model-bytes", type=int,
                    default=jobmod.EMU_MODEL_BYTES,
                    help="emulated parameter bytes of every model")
    ap.add_argument("--slice-bytes", type=int, default=jobmod.SLICE_BYTES)
    ap.add_argument("--out", help="append JSON lines here (else stdout)")
    ap.add_argument("--resume", action="store_true",
                    help="skip the runs --out already holds")
    ap.add_argument("--calibrate", action="store_true",
                    help="first measure one bulk flow through each shaper "
                    "at every rate of the sweep")
    ap.add_argument("--acks", default="stock",
                    choices=("stock", "reflect", "urgent"),
                    help="p3kernel: where TCP's pure ACKs go: where libp3 "
                    "tags them with stock sysctls (their flow's band), "
                    "their flow's band by tcp_reflect_tos=1 as well, or "
                    "band 0 (u32 filter)")
    ap.add_argument("--bands", type=int, default=jobmod.TRAIN_BANDS,
                    help="p3kernel: training levels, one tagged socket each "
                    "per peer (default %(default)s)")
    ap.add_argument("--shaper", default="auto",
                    choices=("auto", "p3", "tbf", "tbf-p3"),
                    help="every host's egress: auto (p3 for p3kernel, tbf "
                    "over a pfifo otherwise), the one named for every "
                    "mode, or tbf-p3: tbf for every mode, over p3 "
                    "(unpaced) in p3kernel mode and over a pfifo otherwise")
    ap.add_argument("--shard", default="round-robin", choices=jobmod.SHARDS,
                    help="sliced modes: deal slices to servers round robin "
                    "(P3), or split every layer evenly over all servers")
    ap.add_argument("--levels", default=jobmod.DEFAULT_LEVELS,
                    choices=jobmod.LEVELS,
                    help="p3kernel (other modes have no levels): how layers "
                    "share the bands: libp3's planner in P3's order (equal "
                    "runs of layers), no later than equal runs of bytes "
                    "would put them (an experiment, not faster), or "
                    "(default) the planner's order tail-first: the small "
                    "tail after the largest layer first, on level 0")
    ap.add_argument("--group-slices", type=float, default=0.0,
                    help="sliced modes: layers the forward pass needs within "
                    "this many slice times of each other share a level "
                    "(default 0: a rank per layer)")
    ap.add_argument("--lowat", type=int, default=NOTSENT_LOWAT,
                    help="TCP_NOTSENT_LOWAT of every socket, bytes (default "
                    "%(default)s)")
    ap.add_argument("--quickack", action="store_true",
                    help="no delayed ACKs (route quickack 1)")
    ap.add_argument("--sysctl", action="append", default=[],
                    metavar="KEY=VALUE",
                    help="set this sysctl in every host's namespace too "
                    "(repeatable; to test a cause, the sweep runs stock)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--trace", action="store_true",
                    help="record when every push and pull of every key "
                    "arrived (servers, and worker 0's pulls), and how late "
                    "every host's sender began to hand each batch over "
                    "(its wait behind earlier batches included)")
    ap.add_argument("--progress", action="store_true",
                    help="report every iteration of worker 0")
    ap.add_argument("--keep", action="store_true",
                    help="leave the namespaces up afterwards")
    ap.add_argument("--count-events", action="store_true",
                    help="count system calls, context switches, softirqs, "
                    "timers and TCP/qdisc function calls per iteration "
                    "(exact; tracing slows the guest)")
    args = ap.parse_args()
    if os.geteuid():
        sys.exit("emulate.py: needs root (run it in the VM: selftests/vm-run)")
    if args.lowat <= 0:
        ap.error("--lowat must be positive")
    # the values go into a shell command: one word each
    bad = [x for x in args.sysctl
           if not re.fullmatch(r"[a-z0-9_.]+=[0-9A-Za-z_.:-]+", x)]
    if bad:
        ap.error(f"--sysctl wants KEY=VALUE, without spaces: {bad[0]!r}")
    set_lowat(args.lowat)

    def grid(spec):
        return {m: parse_list(g, float) for m, g in
                (x.split("=", 1) for x in spec.split())}

    rates, bulk_rates = grid(args.grid), grid(args.bulk_gbps)
    plan = []
    bulk_modes = parse_list(args.bulk_modes)
    for _ in range(args.repeat):
        for model in parse_list(args.models):
            gs = rates.get(model, parse_list(args.gbps, float))
            if args.bulk in ("none", "both"):
                plan += [(model, m, g, 0) for g in gs
                         for m in parse_list(args.modes)]
            if args.bulk in ("only", "both"):
                plan += [(model, m, g, n)
                         for n in parse_list(args.bulk_streams, int)
                         for g in bulk_rates.get(model, gs)
                         for m in bulk_modes]
    if args.resume and args.out and os.path.exists(args.out):
        done = {}
        with open(args.out) as f:
            for line in f:
                r = json.loads(line)
                if "mode" in r and "error" not in r and same_setup(r, args):
                    k = (r["model"], r["mode"], r["gbps"], int(r["bulk"]))
                    done[k] = done.get(k, 0) + 1
        left = []
        for k in plan:
            if done.get(k, 0):
                done[k] -= 1
            else:
                left.append(k)
        log(f"emulate: {len(plan) - len(left)} of {len(plan)} runs already "
            f"in {args.out}")
        plan = left
    profiles = {m: models.profile(m) for m in parse_list(args.models)}
    # Before the cluster, which takes minutes: a bad --out fails at once.
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    out = open(args.out, "a") if args.out else sys.stdout
    cluster = Cluster(args.workers, args.servers, args.acks, args.quickack,
                      args.shaper, args.sysctl)
    cluster.up()
    log(f"emulate: {args.workers} workers, {args.servers} servers"
        f"{' and a storage host' if args.bulk != 'none' else ''} up; "
        f"{len(plan)} runs")
    failed = 0
    try:
        if args.calibrate:
            rates = sorted({jobmod.Job(profiles[m], "fifo", args.workers,
                                       args.servers, g, args.compute_s,
                                       args.model_bytes).rate
                            for m, _, g, _ in plan})
            for r in rates:
                cal = calibrate(cluster, r)
                log(f"calibrate {r * 8 / 1e6:.2f}mbit: one TCP flow gets "
                    f"{cal['p3_eff']:.1%} of the goodput bound through p3, "
                    f"{cal['tbf_eff']:.1%} through tbf")
                out.write(json.dumps(dict(cal, calibration=True)) + "\n")
        for n, (model, mode, g, bulk) in enumerate(plan, 1):
            j = jobmod.Job(profiles[model], mode, args.workers, args.servers,
                           g, args.compute_s, args.model_bytes,
                           args.slice_bytes, args.bands, args.shard,
                           args.group_slices, args.levels)
            tag = (f"[{n}/{len(plan)}] {model} {mode}"
                   f"{f'+bulk{bulk}' if bulk else ''}"
                   f" {g:g}gbps ({j.rate * 8 / 1e6:.1f}mbit)")
            try:
                prog = (lambda m, tag=tag: log(f"    {tag}: {m}")) \
                    if args.progress else None
                rec = run_one(cluster, j, args.iters, args.warmup, bulk,
                              7000 + 10 * (n % 200), prog, args.trace,
                              args.count_events)
            except Exception as e:          # one bad run must not end a sweep
                failed += 1
                log(f"{tag}: FAILED: {e}")
                rec = dict(j.describe(), bulk=bulk, error=str(e))
            else:
                log(f"{tag}: {rec['iter_s']:.3f} s/iter (ideal "
                    f"{rec['ideal_iter_s']:.3f}, stall {rec['stall_s']:.3f},"
                    f" cpu {rec['cpu_busy']:.0%}, drops "
                    f"{rec['qdisc']['drops']})")
                if (rec["cpu_busy"] or 0) >= jobmod.CPU_BOUND:
                    log(f"    {tag}: the VM's CPU was {rec['cpu_busy']:.0%} "
                        "busy; the emulator, not the link, may have set the "
                        "pace (a larger --compute-s halves its load)")
                if args.verbose:
                    log(f"    cpu {json.dumps(rec['cpu_split'])} procs "
                        f"{json.dumps(rec['cpu_procs'])} workers "
                        f"{rec['iter_s_workers']}")
                    log(f"    tcp {json.dumps(rec['tcp'])} link use "
                        f"{json.dumps(rec['link_util'])} preemptions "
                        f"{rec['qdisc']['preemptions']}")
            out.write(json.dumps(rec) + "\n")
            out.flush()
    finally:
        if not args.keep:
            cluster.down()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
