# SPDX-License-Identifier: LGPL-2.1-or-later
"""Plan: slices and the buffers they read, laid out for libp3 once, for
a sender that sends the same plan every step (Channel.send_prepared)."""

from typing import Iterable, Mapping, Sequence, Union

from ._buffers import BufferLike, _Buf
from ._libp3 import _BufRef, _Slice
from ._planner import Slice


class Plan:
    """A plan's slices and the buffers they read, checked and laid out for
    the library once; the buffers stay exported while the Plan lives, and
    what they hold when it is sent is what goes (the library copies it,
    or with copy=False reads it until each message's completion)."""

    def __init__(self, slices: Iterable[Slice],
                 arrays: Union[Mapping[int, BufferLike], Sequence[BufferLike]]):
        slices = list(slices)
        self.n = len(slices)
        self.bytes = sum(s.length for s in slices)
        self._bufs = bufs = {}
        self.cs = cs = (_Slice * max(1, self.n))()
        # Each message's first tensor: what its completion names when the
        # plan goes by reference (Channel.send_prepared(copy=False)).
        self.heads = [s.tensor for i, s in enumerate(slices)
                      if not i or s.msg != slices[i - 1].msg]
        for i, s in enumerate(slices):
            if s.tensor not in bufs:
                bufs[s.tensor] = _Buf(arrays[s.tensor])
            if s.offset + s.length > bufs[s.tensor].nbytes or s.length <= 0:
                raise ValueError('p3: slice %d is outside tensor %d'
                                 % (i, s.tensor))
            cs[i] = _Slice(s.tensor, s.msg, s.offset, s.length, s.prio,
                           s.level)
        self.refs = (_BufRef * (max(bufs, default=0) + 1))()
        for t, b in bufs.items():
            self.refs[t] = _BufRef(b.ptr, b.nbytes)
