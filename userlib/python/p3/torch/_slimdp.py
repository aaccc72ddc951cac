# SPDX-License-Identifier: LGPL-2.1-or-later
"""Slim-DP (Sun et al., 2017): what part of each gradient slice a rank
sends, and what it keeps for later.

Slim-DP's observation is that a network is redundant: most parameters
matter little at any moment, so sending only the significant ones (by a
measure that combines a parameter's magnitude and its gradient) saves
most of the traffic.  A parameter insignificant now may become
significant later, so a small random set of the others is explored each
step as well.

Here, per slice of n elements and per step:

- significance s_j = |w_j| / mean|w| + |g_j| / mean|g|, where w is the
  parameter and g_j the last average gradient applied to element j: in
  the last step if it was sent then, else in the latest step it was
  (each term over the slice, divided by its mean so that neither unit
  dominates; a term whose mean is 0 counts 0).  Only the sent elements'
  averages are known, and taking the others as 0 left them to the
  explored set alone, however large their residual grew;
- the ceil(keep * n) most significant elements are kept, and
  ceil(explore * n) of the others (at most all of them) are explored,
  drawn from a generator keyed by (step, slice);
- what a rank does not send stays in its residual and is added to its
  next gradient (error feedback), so no gradient is ever lost, only late.

w and the applied average are bitwise the same on every rank, and so is
the generator, so every rank picks the same elements without a word
exchanged: the owner's sum and its reply are sparse on that same set,
and an index set that differs (ranks out of step) is caught, not summed.
"""
import math

import numpy as np

from . import _sparse

# The explored set's generator: keyed by this, the step and the slice, so
# that every rank, in every run, draws the same elements.
EXPLORE_KEY = 0x53444d50          # 'SDMP'


def check_args(keep, explore):
    """keep, explore as floats, or ValueError saying what is wrong."""
    for name, v in (('keep', keep), ('explore', explore)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) \
                or not math.isfinite(v):
            raise ValueError('p3.torch: %s must be a number, not %r'
                             % (name, v))
    if not 0 < keep <= 1:
        raise ValueError('p3.torch: keep must be in (0, 1] (the fraction of '
                         'each slice sent as significant), not %r' % keep)
    if not 0 <= explore < 1:
        raise ValueError('p3.torch: explore must be in [0, 1) (the fraction '
                         'of each slice explored at random), not %r' % explore)
    if keep + explore > 1:
        raise ValueError('p3.torch: keep + explore must be at most 1, not '
                         '%r + %r' % (keep, explore))
    return float(keep), float(explore)


def counts(n, keep, explore):
    """(kept, explored) elements of an n-element slice: at least one kept,
    so that no slice is ever empty on the wire."""
    k = min(n, max(1, math.ceil(keep * n)))
    return k, min(n - k, math.ceil(explore * n))


def _scaled(x):
    a = np.abs(x, dtype=np.float64)
    m = a.mean()
    return a / m if m > 0 else np.zeros_like(a)


class SlimDP:
    """Per slice: its place in its tensor, its element count, the set of
    elements sent in the current step; per tensor: the residual."""

    def __init__(self, layout, dtypes, keep, explore, residual=True):
        self.keep, self.explore = check_args(keep, explore)
        self.residual = residual
        self.dtypes = dtypes
        self.geom = []          # per slice: (tensor, first element, n)
        self.count = []         # per slice: elements sent
        for sl in layout.slices:
            size = np.dtype(dtypes[sl.tensor]).itemsize
            n = sl.length // size
            self.geom.append((sl.tensor, sl.offset // size, n))
            self.count.append(sum(counts(n, self.keep, self.explore)))
        self.tensor_slices = layout.tensor_slices
        self.idx = [None] * len(self.geom)
        self.res = {}           # tensor -> residual (float, like the gradient)
        self.known = {}         # tensor -> |last average applied| per element

    def wire_bytes(self, s):
        t, _, n = self.geom[s]
        return _sparse.wire_bytes(self.count[s], n, self.dtypes[t])

    def _last_known(self, t, gbar):
        """|g| of every element of tensor t, as of the latest step that
        sent it: gbar (the last step's average) where the last step's
        choice sent it, the value known before elsewhere."""
        known = self.known.get(t)
        if known is None:
            known = self.known[t] = np.abs(gbar, dtype=np.float64)
            return known
        for s in self.tensor_slices[t]:
            if self.idx[s] is not None:
                at = self.geom[s][1] + self.idx[s]
                known[at] = np.abs(gbar[at])
        return known

    def select(self, t, w, gbar, it):
        """Choose step it's elements of tensor t's slices from its
        parameter w and last applied average gbar (flat numpy arrays)."""
        known = self._last_known(t, gbar)
        for s in self.tensor_slices[t]:
            _, a, n = self.geom[s]
            k, e = counts(n, self.keep, self.explore)
            score = _scaled(w[a:a + n]) + _scaled(known[a:a + n])
            if k < n:
                core = np.argpartition(-score, k - 1)[:k]
            else:
                core = np.arange(n)
            if e:
                rest = np.ones(n, bool)
                rest[core] = False
                others = np.flatnonzero(rest)
                rng = np.random.Generator(np.random.PCG64([EXPLORE_KEY, it, s]))
                core = np.concatenate(
                    [core, others[rng.choice(others.size, e, replace=False)]])
            self.idx[s] = np.sort(core)

    def feedback(self, t, g):
        """Error feedback on tensor t's flat gradient g (numpy, in place):
        add what was not sent before, keep what will not be sent now."""
        if not self.residual:
            return
        r = self.res.get(t)
        if r is None:
            r = self.res[t] = np.zeros_like(g)
        else:
            g += r
        r[:] = g
        for s in self.tensor_slices[t]:
            r[self.geom[s][1] + self.idx[s]] = 0

    def values(self, s, flat):
        """Slice s's chosen elements of its tensor's flat array."""
        return flat[self.geom[s][1] + self.idx[s]]

    def encode(self, s, vals, out):
        """vals, slice s's chosen elements (values()), on the wire, into
        out."""
        if not np.all(np.isfinite(vals)):
            raise FloatingPointError(
                'p3.torch: non-finite gradient in tensor %d (slim-dp sends '
                'only finite values)' % self.geom[s][0])
        return _sparse.encode(self.idx[s], vals, self.geom[s][2], out)

    def decode(self, s, buf):
        """The values of a peer's sparse slice s, checked element by
        element against this rank's own choice."""
        t, _, n = self.geom[s]
        idx, vals = _sparse.decode(buf, n, self.dtypes[t], self.count[s])
        if not np.array_equal(idx, self.idx[s]):
            raise _sparse.SparseFrameError(
                'slice %d carries other elements than this rank chose (ranks '
                'out of step)' % s)
        return vals

    def scatter(self, s, vals, out):
        """out (slice s's dense view): vals at the chosen elements, 0
        elsewhere."""
        out.fill(0)
        out[self.idx[s]] = vals
