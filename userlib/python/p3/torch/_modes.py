# SPDX-License-Identifier: LGPL-2.1-or-later
"""The research wire forms' options, each on an object of its own that
DistributedOptimizer takes as wire=, so that its constructor holds what
every job sets:

    DistributedOptimizer(opt, model, wire=p3.torch.Sparsify(keep=0.1))
    DistributedOptimizer(opt, model, wire=p3.torch.LossTolerant(0.01))

The older keyword arguments (sparsify='slimdp', keep, explore, residual;
loss_tolerance, deadline, reliable_fraction) are still taken, and mean
the same (wire_options()).
"""
from ._dlcp import check_args as check_dlcp
from ._slimdp import check_args as check_slimdp


class Sparsify:
    """Slim-DP: of each slice, the fraction keep of its most significant
    elements and a random fraction explore of the others; the rest stays
    in this rank's residual for later steps (residual=False drops it,
    for comparison only)."""

    def __init__(self, keep=0.1, explore=0.02, residual=True):
        self.keep, self.explore = check_slimdp(keep, explore)
        self.residual = bool(residual)

    def key(self):
        """What both ends of a push size it by: the ranks must agree."""
        return ('slimdp', self.keep, self.explore)


class LossTolerant:
    """Bounded loss (DLCP): each slice pushed as datagrams on the level
    after its own, plus its largest elements, the fraction
    reliable_fraction, over the channel; its datagrams complete once none
    came for deadline seconds, and above tolerance of its bytes missing
    the missing chunks are fetched again, reliably."""

    def __init__(self, tolerance, deadline=0.005, reliable_fraction=0.01):
        self.tolerance, self.deadline, self.reliable_fraction = check_dlcp(
            tolerance, deadline, reliable_fraction)

    def key(self):
        return ('dlcp', self.reliable_fraction)


OLDER = ('sparsify', 'keep', 'explore', 'residual', 'loss_tolerance',
         'deadline', 'reliable_fraction')


def wire_options(wire, older):
    """wire=, or what the older keyword arguments (a dict) say: a
    Sparsify, a LossTolerant or None (dense).  TypeError for another
    keyword; ValueError for a wrong value or both forms at once."""
    unknown = sorted(set(older) - set(OLDER))
    if unknown:
        raise TypeError('p3.torch: DistributedOptimizer got an unexpected '
                        'keyword argument %r' % unknown[0])
    if wire is not None:
        if not isinstance(wire, (Sparsify, LossTolerant)):
            raise ValueError('p3.torch: wire must be p3.torch.Sparsify(...) '
                             'or p3.torch.LossTolerant(...), not %r' % (wire,))
        if older:
            raise ValueError('p3.torch: wire= replaces %s: give one or the '
                             'other' % ', '.join(sorted(older)))
        return wire
    get = older.get
    sparsify, tol = get('sparsify'), get('loss_tolerance')
    if sparsify not in (None, 'slimdp'):
        raise ValueError("p3.torch: sparsify must be None or 'slimdp', "
                         "not %r" % (sparsify,))
    if sparsify is None and (get('keep') is not None or
                             get('explore') is not None):
        raise ValueError("p3.torch: keep and explore need sparsify='slimdp'")
    if tol is None and (get('deadline') is not None or
                        get('reliable_fraction') is not None):
        raise ValueError('p3.torch: deadline and reliable_fraction need '
                         'loss_tolerance')
    if sparsify and tol is not None:
        raise ValueError('p3.torch: loss_tolerance and sparsify cannot be '
                         'combined')
    given = {k: v for k, v in older.items() if v is not None}
    if sparsify:
        return Sparsify(given.get('keep', 0.1), given.get('explore', 0.02),
                        given.get('residual', True))
    if tol is not None:
        return LossTolerant(tol, given.get('deadline', 0.005),
                            given.get('reliable_fraction', 0.01))
    return None
