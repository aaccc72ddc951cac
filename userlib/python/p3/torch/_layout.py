# SPDX-License-Identifier: LGPL-2.1-or-later
"""Who sends what: every gradient cut into slices, slices grouped into
messages, and every message owned (summed) by one rank.

Every rank builds the same layout from the same tensor sizes and
arguments; the ranks compare digest()s once (p3.torch._setup.same_plan) to
be sure they did.  Wire ids: slice s travels to its owner as tensor
id s (a push) and back to every rank as id NS + s (a pull).
"""
import collections
import hashlib

import p3

# MG-WFBP's cost model for merging small gradients: a message costs ALPHA
# seconds plus BETA per byte (1 Gbit/s).  Only the ratio matters here.
ALPHA = 1e-4
BETA = 8e-9

Slice = collections.namedtuple('Slice', 'tensor offset length level msg prio')


# The planner's order (p3.plan): the tensors after the largest first, if
# they hold at most a quarter of the bytes.  At VGG-19 that is fc7 and
# fc8, which in P3's order wait out fc6's transfer and end the iteration
# late (docs/libp3.md, "Planner"); most models have no such tail, and
# keep P3's order.
ORDER = 'tail-first'


class Layout:
    def __init__(self, sizes, world, schedule='p3', bands=8, slice_bytes=None,
                 itemsize=8, fwd=None, order=ORDER):
        """fwd[i]: when tensor i is first needed in the forward pass
        (default: i, the order of model.parameters()).  order: the
        planner's (p3.ORDERS)."""
        if schedule == 'p3':
            step = slice_bytes or p3.DEFAULT_SLICE
            # A slice must hold whole elements of any dtype.
            step = max(itemsize, step - step % itemsize)
            fwd = list(range(len(sizes))) if fwd is None else fwd
            tensors = [('t%d' % i, n, fwd[i]) for i, n in enumerate(sizes)]
            self.slices = [Slice(*s) for s in p3.plan(
                tensors, bands=bands, slice_bytes=step, alpha=ALPHA, beta=BETA,
                order=order)]
        elif schedule == 'fifo':
            # WFBP: whole tensors on one band, in the order backward makes
            # them (equal prio: the band's FIFO).
            self.slices = [Slice(i, 0, n, 0, i, 0) for i, n in enumerate(sizes)]
        else:
            raise ValueError("schedule must be 'p3' or 'fifo', not %r"
                             % (schedule,))
        self.schedule = schedule
        self.world = world
        self.ns = len(self.slices)
        self.msgs = collections.OrderedDict()
        for i, s in enumerate(self.slices):
            self.msgs.setdefault(s.msg, []).append(i)
        self.tensor_slices = [[] for _ in sizes]
        for i, s in enumerate(self.slices):
            self.tensor_slices[s.tensor].append(i)
        self.tensor_msgs = [sorted({self.slices[i].msg for i in sl})
                            for sl in self.tensor_slices]
        self.msg_tensors = {m: sorted({self.slices[i].tensor for i in sl})
                            for m, sl in self.msgs.items()}
        self.owner = self._balance()

    def _balance(self):
        """Greedy: each message, in plan order, to the least-loaded rank
        (ties to the lowest), so every rank sums about 1/world of it."""
        load = [0] * self.world
        owner = {}
        for m, sl in self.msgs.items():
            r = min(range(self.world), key=lambda q: (load[q], q))
            owner[m] = r
            load[r] += sum(self.slices[i].length for i in sl)
        return owner

    def digest(self):
        """A short hash of who sends what: equal on two ranks exactly when
        their layouts are."""
        owners = [self.owner[m] for m in self.msgs]
        text = repr((self.schedule, self.world, self.slices, owners))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def owned(self, rank):
        return [m for m in self.msgs if self.owner[m] == rank]
