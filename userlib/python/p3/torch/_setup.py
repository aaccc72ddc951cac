# SPDX-License-Identifier: LGPL-2.1-or-later
"""What a DistributedOptimizer settles before any gradient moves: the
levels this host's p3 qdisc leaves the job, the ranks' agreement on
those levels and on one plan, and the bounded-loss arguments."""
import socket
import warnings

import p3
from ._dlcp import check_args as check_dlcp
from ._mesh import STRIDE, dgram_level


DEFAULT_LEVELS = 8
_warned = []


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


def bounded_loss_args(loss_tolerance, deadline, reliable_fraction,
                       sparsify, bands):
    """(loss_tolerance, deadline, reliable_fraction) checked, with the
    defaults, or None without loss_tolerance; ValueError otherwise."""
    if loss_tolerance is None:
        if deadline is not None or reliable_fraction is not None:
            raise ValueError('p3.torch: deadline and reliable_fraction need '
                             'loss_tolerance')
        return None
    if sparsify:
        raise ValueError('p3.torch: loss_tolerance and sparsify cannot be '
                         'combined')
    if dgram_level(bands - 1) > 62:
        raise ValueError('p3.torch: loss_tolerance needs bands <= 31 (each '
                         'level\'s datagrams take the level after it)')
    return check_dlcp(loss_tolerance, 0.005 if deadline is None else deadline,
                       0.01 if reliable_fraction is None else reliable_fraction)
