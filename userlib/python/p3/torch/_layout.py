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
        self.tensor_bytes = list(sizes)
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


Unit = collections.namedtuple('Unit', 'slices msg start end dtype level prio')


class Units:
    """What travels as one wire tensor, and is summed by one call: a run
    of a message's slices of one dtype, adjacent in the flat buffer
    (whole_messages), or each slice alone (Slim-DP and bounded loss have
    a wire form per slice).  A slice's own completion, expectation and
    sum cost the exchange's Python as much as a whole message's: with
    whole messages squeezenet1_1's 52 slices travel as 10 units.

    The flat buffer holds every tensor whole, in the order of their
    first slices in the plan, at an offset aligned to its element size
    (tensor_off[t] is tensor t's first byte): a message's slices, cut in
    order from adjacent tensors, are adjacent there too."""

    def __init__(self, layout, dtypes, whole_messages):
        first = {}
        for s, sl in enumerate(layout.slices):
            first.setdefault(sl.tensor, s)
        self.tensor_off, at = [0] * len(dtypes), 0
        for t in sorted(first, key=first.get):
            at += -at % dtypes[t].itemsize
            self.tensor_off[t] = at
            at += layout.tensor_bytes[t]
        self.nbytes = at
        self.units = []
        for m, slices in layout.msgs.items():
            for s in slices:
                sl = layout.slices[s]
                start = self.tensor_off[sl.tensor] + sl.offset
                last = self.units[-1] if self.units else None
                if (whole_messages and last and last.msg == m
                        and last.end == start
                        and last.dtype == dtypes[sl.tensor]):
                    self.units[-1] = last._replace(
                        slices=last.slices + [s], end=start + sl.length,
                        prio=min(last.prio, sl.prio))
                else:
                    self.units.append(Unit([s], m, start, start + sl.length,
                                           dtypes[sl.tensor], sl.level,
                                           sl.prio))
        self.n = len(self.units)
        self.of_msg = collections.defaultdict(list)
        self.tensors = []
        self.of_tensor = [[] for _ in dtypes]
        for u, unit in enumerate(self.units):
            self.of_msg[unit.msg].append(u)
            ts = sorted({layout.slices[s].tensor for s in unit.slices})
            self.tensors.append(ts)
            for t in ts:
                self.of_tensor[t].append(u)

    def span(self, u):
        """Unit u's bytes in a flat buffer: buf[units.span(u)]."""
        return slice(self.units[u].start, self.units[u].end)
