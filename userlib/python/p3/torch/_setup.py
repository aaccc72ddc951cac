# SPDX-License-Identifier: LGPL-2.1-or-later
"""What a DistributedOptimizer settles before any gradient moves: the
levels this host's p3 qdisc leaves the job, the ranks' agreement on
those levels and on one plan, and the bounded-loss arguments."""
import fcntl
import socket
import struct
import warnings

import p3
from ._mesh import STRIDE, dgram_level


DEFAULT_LEVELS = 8
_warned = []
# What one message costs beside its bytes, in CPU on the two ranks it
# joins (a hook, a send, a wake-up, a sum, an apply): about 0.1 ms
# natively (bench/ddp on resnet18 and squeezenet1_1, docs/benchmarks.md).
MESSAGE_CPU_S = 1e-4
# A slice is never made smaller than libp3's default: on a slow link the
# per-message CPU, not the wire, would then set the pace.
MAX_AUTO_SLICE = 4 << 20
_SIOCGIFADDR = 0x8915


def local_p3_qdisc():
    """(interface, p3.qdisc_stats) of the first interface with a p3 qdisc
    anywhere in its tree (parent 0 matches any: p3 under netem or mq
    counts), or None."""
    for _, name in socket.if_nameindex():
        try:
            return name, p3.qdisc_stats(name, parent=0)
        except p3.Error:
            continue
    return None


def free_levels(found, lossy=False):
    """How many levels the p3 qdisc found (local_p3_qdisc()) keeps above
    its default band.
    Untagged traffic (an upload, a checkpoint) goes to that band, where
    a job level would get only its DRR share of the band's link time
    beside the upload: with the qdisc's defaults (8 bands, default 7)
    the job takes levels 0..6.  With bounded loss the datagrams take the
    level after each (_mesh.dgram_level): 2 levels must stay above it."""
    default = found[1]['options'].get('default') if found else None
    if not default:
        # No qdisc, or untagged traffic in band 0, above everything: no
        # level can avoid it, so the job keeps them all.
        return DEFAULT_LEVELS
    return min(DEFAULT_LEVELS, default // STRIDE if lossy else default) or 1


def _interface_of(address):
    """The interface holding IPv4 @address, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as so:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack('256s', name.encode()[:15])
                got = fcntl.ioctl(so.fileno(), _SIOCGIFADDR, req)
            except OSError:
                continue
            if socket.inet_ntoa(got[20:24]) == address:
                return name
    return None


def link_bytes_per_s(found, host):
    """The rate of the link the job sends on, bytes a second, or None: the
    p3 qdisc's own rate if it paces, else the speed its interface (or the
    interface of this rank's address @host) reports."""
    if found and found[1]['options'].get('rate'):
        return float(found[1]['options']['rate'])
    name = found[0] if found else _interface_of(host)
    try:
        with open('/sys/class/net/%s/speed' % name) as f:
            mbit = int(f.read())
    except (OSError, TypeError, ValueError):
        return None
    return mbit * 125000.0 if mbit > 0 else None


def auto_slice(found, host):
    """A slice big enough that a message's CPU costs at most 5% of its
    time on the wire (p3.suggest_slice), within [p3.DEFAULT_SLICE,
    MAX_AUTO_SLICE]: on a fast link more, fewer messages win back the CPU
    a small model's step is short of, and on a slow one the wire sets
    the pace whatever the CPU."""
    rate = link_bytes_per_s(found, host)
    if not rate:
        return p3.DEFAULT_SLICE
    return max(p3.DEFAULT_SLICE,
               min(MAX_AUTO_SLICE, p3.suggest_slice(MESSAGE_CPU_S, 0, rate)))


def agreed_slice(store, key, rank, world, local):
    """Every rank plans the same layout, so all take the smallest slice
    any rank's link asks for."""
    return min(map(int, gathered(store, key, rank, world, str(local))))


def gathered(store, key, rank, world, value):
    """Every rank's value (a string) under key, in rank order, this
    rank's included (store.get is bounded by the store's timeout)."""
    store.set('%s/%d' % (key, rank), value)
    return [store.get('%s/%d' % (key, q)).decode() for q in range(world)]


def agreed_levels(store, key, rank, world, free):
    """Every rank plans the same layout, so all take the fewest levels any
    rank's host leaves free."""
    return min(map(int, gathered(store, key, rank, world, str(free))))


def same_plan(store, key, rank, world, plan):
    """Raise ValueError, on every rank alike, unless every rank computed
    the same plan (a string: the layout's digest and the options the
    exchange depends on).  The ranks never talk about the layout, so
    ranks given different arguments (order, slice_bytes, forward_order,
    sparsify, a different model) would otherwise exchange mismatched
    slices without an error."""
    plans = gathered(store, key, rank, world, plan)
    differ = [q for q in range(world) if plans[q] != plans[0]]
    if differ:
        raise ValueError(
            'p3.torch: rank%s %s planned a different exchange from rank 0 '
            '(%s against %s): every rank must pass the same model and the '
            'same DistributedOptimizer arguments (schedule, bands, '
            'slice_bytes, order, forward_order, sparsify, keep, explore, '
            'reliable_fraction)' % ('s' if len(differ) > 1 else '',
                                    ', '.join(map(str, differ)),
                                    plans[differ[0]], plans[0]))


def warn_if_no_qdisc(found, tolerant=None):
    """Say once when no interface has a p3 qdisc (found is
    local_p3_qdisc()'s answer): order then comes from
    libp3's in-band heap alone, and less urgent bulk shares the NIC.  With
    tolerant, the datagrams' levels, say too if the p3 qdisc found gives
    them no loss-tolerant bands."""
    if _warned:
        return
    _warned.append(True)
    if found is None:
        warnings.warn('p3.torch: no network interface has the p3 qdisc; '
                      'the kernel is not enforcing P3 order (tc qdisc add dev '
                      'DEV root p3)', RuntimeWarning, stacklevel=3)
        return
    name, st = found
    if tolerant and not all(
            b < len(st['bands']) and st['bands'][b]['deadline_us']
            for b in tolerant):
        warnings.warn(
            'p3.torch: loss_tolerance: the p3 qdisc on %s has no '
            'deadline on bands %s, where the datagrams go; they '
            'wait like reliable packets (tc class change dev %s '
            'classid H:K p3 deadline 5ms, K = band + 1 in hex; '
            'docs/torch.md)'
            % (name, ', '.join(map(str, tolerant)), name), RuntimeWarning,
            stacklevel=3)


def check_datagram_levels(bands):
    """Bounded loss's datagrams take the level after each level."""
    if dgram_level(bands - 1) > 62:
        raise ValueError('p3.torch: loss_tolerance needs bands <= 31 (each '
                         'level\'s datagrams take the level after it)')


def check_args(schedule, order, passes):
    """DistributedOptimizer's arguments that need no job, checked (a
    ValueError names the first one wrong); the wire form's are its own
    (_modes.py)."""
    if order is not None and (schedule != 'p3' or order not in p3.ORDERS):
        raise ValueError("p3.torch: order needs schedule='p3' and is one "
                         "of %s, not %r" % (', '.join(p3.ORDERS), order))
    if not isinstance(passes, int) or passes < 1:
        raise ValueError('p3.torch: backward_passes_per_step must be an '
                         'integer >= 1, not %r' % (passes,))
