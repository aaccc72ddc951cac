#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""One rank of bench/torch: real PyTorch training of the VGG-shaped model
through p3.torch, on this network namespace's eth0, in every mode asked.

Modes (each a fresh DistributedOptimizer; the egress shaper is set by
each rank for its own host):
  fifo      schedule 'fifo' (WFBP), tbf at the link rate over a pfifo
  p3user    schedule 'p3', the same tbf + pfifo: order from libp3 only
  p3kernel  schedule 'p3', the p3 qdisc (8 bands, dscp) pacing at the rate;
            p3.torch keeps its levels (7) above the default band
  p3kforward  p3kernel with order='forward': P3's order throughout, where
            p3kernel takes p3.torch's default (tail-first; it differs
            only with --fc7 small enough, e.g. 256: model.VGG_TAIL_FC7)
  p3dlcp    p3kernel with bounded-loss pushes (loss_tolerance, deadline):
            level l rides band 2 l, its datagrams band 2 l + 1, so the
            qdisc has 16 bands, p3.torch takes 7 levels (bands 0..13) and
            the odd bands 1..13 have a deadline (--qdeadline)
  slimdp    p3kernel with sparsify='slimdp' (keep 0.1, explore 0.02)
  compute   no exchange at all: forward, backward and SGD alone; under
            burst its egress is p3kernel's, so the bursts cost the
            (emulated) CPU what they cost beside training
With --bulk, each rank also uploads to the other over one untagged TCP
connection for the whole run (p3's default band is its least urgent).
--pressure adds, per run, one of:
  none      nothing
  burst     microbursts: every --burst-every s (+-50%, random) a burst of
            --burst-pkts packets, enough to fill the qdisc, to the peer's
            discard sink; untagged (the default band) or at --burst-level
  loss      netem loss --loss % as the root, the mode's shaper under it
--spare-band gives the p3 qdisc one band more than the job uses, so that
untagged traffic (the bursts) has the least urgent band to itself.
--ack-band adds a u32 filter to p3 that sends TCP's pure acknowledgements
to its most urgent band (tc-p3(8), EXAMPLES).  --rto-trace records when
every TCP retransmission timer of the guest was armed and fired
(rtotrace.py) and each rank's link every 20 ms, for
bench/torch/waits.py.

Rank 0 appends one JSON line per run to --out: every timed step's length,
how much of its forward pass overlapped the previous step's exchange, and
from both ranks opt.stats(), the qdiscs' drop counters and the counters
each rank took at every timed step's start (step_snapshot;
bench/torch/steps.py reads them).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', '..', 'userlib', 'python'))

import p3  # noqa: E402
import p3.torch as p3t  # noqa: E402
from model import FC, VGG_TAIL_FC7, VGGSmall, describe  # noqa: E402
from pressure import Bulk, Bursts, sink  # noqa: E402
from sampler import Sampler  # noqa: E402
import rtotrace  # noqa: E402
from tcpdiag import rto_totals  # noqa: E402

QLIMIT = 1000
P3_QDISC = ('p3kernel', 'p3kforward', 'p3dlcp', 'slimdp')
PROFILED = ('MainThread', 'p3.torch reducer', 'p3.torch pusher')
PROFILE_TOP = 25    # the places kept per thread
BANDS = 8           # p3kernel's qdisc; p3dlcp's datagrams need as many more


def kbit(args):
    return round(args.mbit * 1000)


def balance_rate(compute_steps, model, args):
    """--comm-ratio: the link rate (Mbit/s) at which one step's exchange
    takes comm_ratio times a compute-only step, that of the slower rank.
    Each rank sends 2 (n-1)/n of the model a step: its pushes to the other
    owners and its averages back to the other ranks."""
    every = [None] * p3t.size()
    dist.all_gather_object(every, sum(compute_steps) / len(compute_steps))
    n = p3t.size()
    bits = 8 * describe(model)['bytes'] * 2 * (n - 1) / n
    return bits / (args.comm_ratio * max(every)) / 1e6


def shape(mode, pressure, args):
    """This host's egress: p3 pacing at the rate, or tbf over a pfifo;
    under netem when the pressure is loss.  Returns p3's parent ('root'
    or netem's class), or None without p3."""
    subprocess.run(['tc', 'qdisc', 'del', 'dev', 'eth0', 'root'],
                   stderr=subprocess.DEVNULL, check=False)
    # netem drops at its enqueue and, with no delay, hands every packet to
    # its child at once, so the child still orders (and paces) them all.
    parent, h, sub = 'root', '1', '10'
    cmds = ''
    if pressure == 'loss':
        cmds = 'qdisc add dev eth0 root handle 1: netem loss %g%%\n' % args.loss
        parent, h, sub = '1:1', '10', '20'
    at = parent if parent == 'root' else 'parent ' + parent
    with_p3 = mode in P3_QDISC or mode == 'compute'
    if with_p3:
        # Every other option at its default (tag dscp), as a user's first
        # `tc qdisc add` would leave it.
        bands = 2 * BANDS if mode == 'p3dlcp' else BANDS
        # Untagged traffic goes to the least urgent band, and p3.torch
        # keeps its levels above it by itself: 7 of 8 bands; with
        # p3dlcp's datagrams on the odd bands, 7 of 16.  --spare-band
        # adds a band, and the job a level (8 of 17 with p3dlcp).
        bands += args.spare_band
        cmds += ('qdisc add dev eth0 %s handle %s: p3 limit %d rate %dkbit '
                 'bands %d\n' % (at, h, QLIMIT, kbit(args), bands))
        if args.ack_band:
            # IPv4 TCP packets under 128 bytes, pure acknowledgements
            # (SACK blocks included), to the most urgent band: an
            # acknowledgement queued behind a burst holds back the other
            # direction's flow (tc-p3(8), EXAMPLES).
            cmds += ('filter add dev eth0 parent %s: protocol ip prio 1 u32 '
                     'match ip protocol 6 0xff match u16 0 0xff80 at 2 '
                     'classid %s:1\n' % (h, h))
        # A test's own tc lines once p3 is made: P3_TORCH_TC, separated
        # by ';', "{h}" for p3's handle (selftests/p3_torch.py counts
        # packets by protocol and level with filters that classify none).
        for line in os.environ.get('P3_TORCH_TC', '').split(';'):
            if line.strip():
                cmds += line.strip().format(h=h) + '\n'
        # The datagrams' bands: the odd ones above the default band.
        for band in range(1, bands - 1, 2) if mode == 'p3dlcp' else ():
            cmds += ('class change dev eth0 classid %s:%x p3 deadline %dus\n'
                     % (h, band + 1, round(args.qdeadline * 1e6)))
    else:
        cmds += ('qdisc add dev eth0 %s handle %s: tbf rate %dkbit burst 16kb '
                 'latency 10s\nqdisc add dev eth0 parent %s:1 handle %s: pfifo '
                 'limit %d\n' % (at, h, kbit(args), h, sub, QLIMIT))
    subprocess.run(['tc', '-batch', '-'], input=cmds, text=True, check=True)
    return parent if with_p3 else None


def qdisc_drops():
    """This host's egress qdiscs: kind, packets sent, drop counters (p3's
    causes too) and p3's throttled dequeues (each one a pacer timer)."""
    out = subprocess.run(['tc', '-s', '-j', 'qdisc', 'show', 'dev', 'eth0'],
                         capture_output=True, text=True, check=True).stdout
    res = []
    for q in json.loads(out):
        d = {'kind': q.get('kind'), 'drops': q.get('drops'),
             'packets': q.get('packets')}
        x = q.get('xstats') or {}
        for k in ('drops_deadline', 'drops_tolerant', 'drops_limit', 'throttled'):
            if k in x or k in q:
                d[k] = x.get(k, q.get(k))
        if d['kind'] == 'p3':
            # Per band (this tc prints classes in text only): whose link
            # time the bursts took, and where the drops were.
            try:
                d['bands'] = p3.qdisc_stats(
                    'eth0', parent=q.get('parent', 'root'))['bands']
            except (p3.Error, ValueError) as e:
                d['bands'] = str(e)
        res.append(d)
    return res


class LinkSampler:
    """eth0's transmitted bytes every 20 ms (the veth counts a packet when
    the qdisc hands it over: what the link carried), for --timeline."""
    PERIOD = 0.02

    def __init__(self):
        self.samples = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name='link sampler')
        self.thread.start()

    def _run(self):
        with open('/sys/class/net/eth0/statistics/tx_bytes') as f:
            while not self.stop.wait(self.PERIOD):
                f.seek(0)
                self.samples.append((time.monotonic(), int(f.read())))

    def close(self):
        self.stop.set()
        self.thread.join(10)
        return self.samples


def record_exchange(opt):
    """--timeline: when each gradient reached p3.torch and each push and
    pull was handed to libp3, by wrapping the optimizer's exchange (its
    private methods: for this measurement only)."""
    ex, events = opt._ex, []

    def gradient(i, grad, it, _inner=ex.gradient):
        events.append((time.monotonic(), 'gradient'))
        return _inner(i, grad, it)

    def send(q, m, it, pull, _inner=ex._send):
        events.append((time.monotonic(), 'pull' if pull else 'push'))
        return _inner(q, m, it, pull)
    ex.gradient, ex._send = gradient, send
    return events


def thread_usage():
    """{thread: [user s, system s, wake-ups]} of this process so far,
    summed by thread name: Python's for the threads it started, else the
    kernel's (libp3's engine is 'p3-engine'; torch's and Gloo's threads
    keep the process's name).  System time includes the softirqs (packets
    received, the qdisc's timers) that ran while the thread was on the
    CPU: Debian's kernels do not account them apart (no
    CONFIG_IRQ_TIME_ACCOUNTING), so they land on whichever thread they
    interrupt (guest_usage() has them apart).  A wake-up is a voluntary
    context switch: one per sleep (a poll, a lock, a condition) that
    ended."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf('SC_CLK_TCK')
    usage = {}
    for tid in os.listdir('/proc/self/task'):
        try:
            with open('/proc/self/task/%s/stat' % tid) as f:
                stat = f.read()
            with open('/proc/self/task/%s/status' % tid) as f:
                status = f.read()
        except FileNotFoundError:   # the thread ended meanwhile
            continue
        comm = stat[stat.index('(') + 1:stat.rindex(')')]
        rest = stat[stat.rindex(')') + 2:].split()   # from field 3, state
        wakeups = next(int(line.split()[1]) for line in status.splitlines()
                       if line.startswith('voluntary_ctxt_switches'))
        u = usage.setdefault(names.get(int(tid), comm), [0.0, 0.0, 0])
        u[0] += int(rest[11]) / tick    # utime
        u[1] += int(rest[12]) / tick    # stime
        u[2] += wakeups
    return usage


def guest_cpu():
    """The whole guest's CPU seconds so far, both vCPUs summed: user,
    system, softirq and idle, from /proc/stat.  Under TCG both vCPUs run
    on one host thread, so their busy time is the host core's."""
    tick = os.sysconf('SC_CLK_TCK')
    with open('/proc/stat') as f:   # cpu user nice system idle iowait irq softirq
        cpu = [int(x) / tick for x in f.readline().split()[1:8]]
    return {'user': cpu[0] + cpu[1], 'system': cpu[2], 'softirq': cpu[6],
            'idle': cpu[3] + cpu[4]}


def guest_usage():
    """{'guest': [user s, system s, softirq s]} of the whole guest (both
    ranks, every process) so far, as per_step() takes it."""
    cpu = guest_cpu()
    return {'guest': [cpu['user'], cpu['system'], cpu['softirq']]}


# What a step's snapshot keeps of /proc/net/snmp and /proc/net/netstat
# (this network namespace's): IP fragments, which only the bursts make
# (64 KB datagrams; the job's datagrams fit the MTU and TCP segments
# never fragment), and how TCP recovered what the queue dropped or held
# back past its timeout (a timeout later found needless is spurious: the
# packets had been queued behind more urgent ones, not lost).
NET_COUNTERS = {'Ip': ('FragCreates', 'ReasmReqds'),
                'Tcp': ('RetransSegs',),
                'TcpExt': ('TCPTimeouts', 'TCPSpuriousRTOs', 'TCPLossUndo',
                           'TCPLossProbes', 'TCPFastRetrans',
                           'TCPSlowStartRetrans')}


def net_counters():
    """NET_COUNTERS' values in this namespace so far, as {'Ip.FragCreates':
    n, ...}: the files hold a line of names, then one of values."""
    found = {}
    for path in ('/proc/net/snmp', '/proc/net/netstat'):
        with open(path) as f:
            lines = f.read().splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            proto, names = names.split(':')
            wanted = NET_COUNTERS.get(proto, ())
            for name, value in zip(names.split(), values.split(':')[1].split()):
                if name in wanted:
                    found[proto + '.' + name] = int(value)
    return found


def link_bytes():
    """eth0's bytes so far: sent (this host's link) and received (the
    other host's: a veth receives what its peer's qdisc handed over)."""
    path = '/sys/class/net/eth0/statistics/%s_bytes'
    if not os.path.exists(path % 'tx'):     # --no-shape, on loopback
        return {}
    found = {}
    for way in ('tx', 'rx'):
        with open(path % way) as f:
            found[way] = int(f.read())
    return found


def step_snapshot(t, opt, bursts, p3_parent):
    """This rank's counters at a step's start (t): the link's bytes, the
    network's counters, how long its TCP sockets spent in timeout
    recovery and with data outstanding (tcpdiag.py), the guest's CPU,
    the optimizer's stats() and, where this host
    has a p3 qdisc (its parent: 'root', or netem's class under loss),
    its drops; the difference between two snapshots is what happened in
    a step (bench/torch/steps.py)."""
    snap = {'t': t, 'link': link_bytes(), 'net': net_counters(),
            'tcp_rto': rto_totals(), 'guest': guest_cpu()}
    if hasattr(opt, 'stats'):
        snap['stats'] = {k: v for k, v in opt.stats().items()
                         if k in ('bytes_sent', 'bytes_lost', 'rerequests')}
    if bursts:
        snap['bursts'] = bursts.bursts
    if p3_parent:
        st = p3.qdisc_stats('eth0', parent=p3_parent)
        snap['qdisc'] = {k: st['xstats'][k] for k in
                         ('drops_limit', 'drops_deadline', 'drops_tolerant')}
        # Whose packets the drops were: the bursts' band or the job's.
        snap['qdisc']['band_drops'] = [b['drops'] for b in st['bands']]
    return snap


def per_step(before, after, steps):
    """What thread_usage() or guest_usage() counts, a step, between two
    of its calls (what a thread that ended in between used is lost)."""
    return {name: [(x - y) / steps
                   for x, y in zip(now, before.get(name, [0] * len(now)))]
            for name, now in after.items()}


def run_mode(mode, bulk, pressure, args, model, x, y, peer):
    rank = p3t.rank()
    shaped = (mode != 'compute' or pressure == 'burst') and not args.no_shape
    p3_parent = shape(mode, pressure, args) if shaped else None
    # Every mode starts from rank 0's parameters ('compute' trains alone).
    p3t.broadcast_parameters(model.state_dict())
    dist.barrier()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if mode != 'compute':
        extra = {}
        if mode == 'p3dlcp':
            extra = dict(loss_tolerance=args.loss_tolerance,
                         deadline=args.deadline)
        elif mode == 'slimdp':
            extra = dict(sparsify='slimdp')
        elif mode == 'p3kforward':
            extra = dict(order='forward')
        opt = p3t.DistributedOptimizer(
            opt, model, schedule='fifo' if mode == 'fifo' else 'p3',
            bands=args.bands, timeout=120, **extra)
    up = Bulk(peer) if bulk else None
    bursts = (Bursts(peer, args.burst_pkts, args.burst_every,
                     args.burst_level, 11 + rank)
              if pressure == 'burst' else None)
    link = (LinkSampler() if (args.timeline or args.rto_trace)
            and mode != 'compute' else None)
    events = record_exchange(opt) if args.timeline and link else None
    # One kernel traces both hosts' sockets: rank 0 records it.
    tracing = args.rto_trace and mode != 'compute' and rank == 0
    if tracing:
        rtotrace.start()
    steps, fwd, phases, t_prev, snaps = [], [], [], None, []
    cpu, c_prev, threads, guest, sampler, profile = ([], None, None, None,
                                                     None, None)
    for i in range(args.warmup + args.iters):
        t0 = time.monotonic()
        # By thread, over the span of the timed steps below (none if
        # there is only one step).
        if i == args.warmup and args.iters > 1:
            threads, guest = thread_usage(), guest_usage()
            if args.sample:
                sampler = Sampler(PROFILED)
        elif i == args.warmup + args.iters - 1 and args.iters > 1:
            threads = per_step(threads, thread_usage(), args.iters - 1)
            guest = per_step(guest, guest_usage(), args.iters - 1)['guest']
            if sampler:
                profile = {name: [(where, t / (args.iters - 1))
                                  for where, t in places[:PROFILE_TOP]]
                           for name, places in sampler.close().items()}
        # This process's CPU time (every thread, user and system) a step:
        # under TCG all of the guest's work shares one host thread.
        c0 = time.process_time()
        if t_prev is not None and i > args.warmup:
            steps.append(t0 - t_prev)
            cpu.append(c0 - c_prev)
        if i >= args.warmup:
            snaps.append(step_snapshot(t0, opt, bursts, p3_parent))
        t_prev, c_prev = t0, c0
        opt.zero_grad()
        f0 = time.monotonic()
        out = model(x)
        fwd.append((f0, time.monotonic()))
        F.cross_entropy(out, y).backward()
        b1 = time.monotonic()
        opt.step()
        phases.append((t0, f0, fwd[-1][1], b1, time.monotonic()))
        if args.progress and rank == 0:
            print('# %s%s+%s: step %d/%d, %.2f s' % (
                mode, '+bulk' if bulk else '', pressure, i + 1,
                args.warmup + args.iters, time.monotonic() - t0),
                file=sys.stderr, flush=True)
    overlap, stats, levels = [], None, None
    if mode != 'compute':
        opt.synchronize()
        done = opt.exchange_done
        # Step i's forward (its pre-hooks' waits included) against the end
        # of step i-1's exchange: the share of it that ran while gradients
        # were still on the wire.
        for i in range(args.warmup + 1, len(fwd)):
            f0, f1 = fwd[i]
            overlap.append(max(0.0, min(done[i - 1], f1) - f0) / (f1 - f0))
        stats = opt.stats()
        levels = opt.levels
        opt.close()
    link_samples = link.close() if link else None
    timeline = ({'link': link_samples, 'phases': phases, 'events': events,
                 'exchange_done': done} if args.timeline and link else None)
    timer_waits = (rtotrace.waits({rtotrace.address_key(own_address(peer)): 0,
                                   rtotrace.address_key(peer): 1})
                   if tracing else None)
    same = params_equal(model) if args.check_params and mode != 'compute' else None
    bulk_bytes = up.sent if up else 0
    if up:
        up.close()
    burst = {'bytes': bursts.sent, 'bursts': bursts.bursts} if bursts else None
    if bursts:
        bursts.close()
    # Each rank's counters: bytes_lost and rerequests are an owner's, and
    # a qdisc sees only its own host's egress.
    every = [None] * p3t.size()
    dist.all_gather_object(every, {'stats': stats, 'burst': burst,
                                   'threads': threads, 'guest': guest,
                                   'profile': profile, 'snapshots': snaps,
                                   'link': link_samples if args.rto_trace
                                   else None,
                                   'qdisc': qdisc_drops() if shaped else None})
    dist.barrier()
    return {'mode': mode, 'bulk': bulk, 'pressure': pressure,
            'spare_band': args.spare_band, 'ack_band': args.ack_band,
            'levels': levels, 'fc7': args.fc7,
            'order': ('forward' if mode == 'p3kforward' else
                      None if mode in ('fifo', 'compute') else p3t.ORDER),
            'mbit': args.mbit, 'batch': args.batch,
            'steps': steps, 'fwd_overlap': overlap, 'bulk_bytes': bulk_bytes,
            # Each timed step's backward pass, its gradient hooks included.
            'backward': [ph[3] - ph[2] for ph in phases[args.warmup:]],
            'cpu': cpu,
            'timeline': timeline,
            'timer_waits': timer_waits,
            'trace_overruns': rtotrace.overruns() if tracing else None,
            'params_equal': same, 'ranks': every,
            'loss': args.loss if pressure == 'loss' else None,
            'deadline': args.deadline if mode == 'p3dlcp' else None,
            'qdeadline': args.qdeadline if mode == 'p3dlcp' else None,
            'loss_tolerance': (args.loss_tolerance if mode == 'p3dlcp'
                               else None)}


def own_address(peer):
    """This host's address on the link to peer (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((peer, 9))
        return s.getsockname()[0]


def params_equal(model):
    """Do all ranks hold bitwise the same parameters?"""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(p3t.size())]
    dist.all_gather(every, flat)
    return all(torch.equal(flat, other) for other in every)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--modes', default='compute,fifo,p3user,p3kernel')
    ap.add_argument('--bulk', default='0,1')
    ap.add_argument('--pressure', default='none',
                    help='comma-separated: none, burst, loss')
    ap.add_argument('--loss', type=float, default=1.0,
                    help='netem loss in %% (pressure loss)')
    ap.add_argument('--burst-pkts', type=int, default=QLIMIT)
    ap.add_argument('--burst-every', type=float, default=0.075,
                    help='mean seconds between bursts')
    ap.add_argument('--burst-level', type=int, default=-1,
                    help='p3 level of the bursts; -1: untagged')
    ap.add_argument('--spare-band', action='store_true',
                    help='one more qdisc band, for untagged traffic alone')
    ap.add_argument('--bands', type=int,
                    help="p3.torch's levels (default: its own choice, 8 or "
                    "fewer to stay above the qdisc's default band); the "
                    "qdisc stays as the mode sets it")
    ap.add_argument('--loss-tolerance', type=float, default=0.01)
    ap.add_argument('--deadline', type=float, default=0.005,
                    help="p3dlcp: p3.torch's deadline (s)")
    ap.add_argument('--qdeadline', type=float,
                    help='p3dlcp: the qdisc bands\' deadline (s); default '
                    '--deadline')
    ap.add_argument('--mbit', type=float, default=100)
    ap.add_argument('--comm-ratio', type=float,
                    help='instead of --mbit: the rate at which a step\'s '
                    'exchange (its payload) takes this many compute-only '
                    'steps, measured first in this boot (--modes must start '
                    'with compute)')
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--fc7', type=int, default=FC,
                    help="fc7's width (default %d, as wide as fc6; %d gives "
                    "VGG-19's light tail, which p3.torch's default order "
                    "sends first)" % (FC, VGG_TAIL_FC7))
    ap.add_argument('--iters', type=int, default=8)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--peer', required=True, help="the other rank's address")
    ap.add_argument('--out', required=True)
    ap.add_argument('--progress', action='store_true')
    ap.add_argument('--timeline', action='store_true',
                    help="record eth0's transmitted bytes every 20 ms and "
                    "each step's phases (bench/torch/timeline.py reads them)")
    ap.add_argument('--ack-band', action='store_true',
                    help="with p3: a u32 filter sends TCP's pure "
                    'acknowledgements to the most urgent band')
    ap.add_argument('--rto-trace', action='store_true',
                    help='trace every TCP retransmission timer (armed, '
                    "fired) and each rank's link every 20 ms "
                    '(bench/torch/rtotrace.py; bench/torch/waits.py reads '
                    'them)')
    ap.add_argument('--check-params', action='store_true',
                    help='after each mode, compare the ranks\' parameters')
    ap.add_argument('--sample', action='store_true',
                    help="profile p3.torch's threads and the main thread "
                    'over the timed steps (bench/torch/sampler.py)')
    ap.add_argument('--no-shape', action='store_true',
                    help='leave the qdisc alone (a dry run on loopback)')
    args = ap.parse_args()
    if args.qdeadline is None:
        args.qdeadline = args.deadline
    if args.comm_ratio and not (args.modes.startswith('compute') and
                                args.pressure.startswith('none') and
                                args.bulk.startswith('0')):
        ap.error('--comm-ratio measures the compute mode first: --modes '
                 'must start with compute, --pressure with none, --bulk '
                 'with 0')

    torch.set_num_threads(1)        # one vCPU per rank
    p3t.init(timeout=120)
    sink()
    torch.manual_seed(p3t.rank())
    model = VGGSmall(args.fc7)
    p3t.broadcast_parameters(model.state_dict())
    g = torch.Generator().manual_seed(7 + p3t.rank())
    x = torch.randn(args.batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    for mode in args.modes.split(','):
        for bulk in (int(b) for b in args.bulk.split(',')):
            for pressure in args.pressure.split(','):
                if mode == 'compute' and (bulk or pressure == 'loss'):
                    continue
                r = run_mode(mode, bulk, pressure, args, model, x, y,
                             args.peer)
                if mode == 'compute' and args.comm_ratio and pressure == 'none':
                    args.mbit = balance_rate(r['steps'], model, args)
                    r['mbit'] = None        # ran unshaped
                    if p3t.rank() == 0:
                        print('# --comm-ratio %g: links at %.2f Mbit/s' % (
                            args.comm_ratio, args.mbit), file=sys.stderr,
                            flush=True)
                if p3t.rank() == 0:
                    r.update(describe(model))
                    with open(args.out, 'a') as f:
                        f.write(json.dumps(r) + '\n')
    p3t.shutdown()


if __name__ == '__main__':
    main()
