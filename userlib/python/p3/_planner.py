# SPDX-License-Identifier: LGPL-2.1-or-later
"""The planner: how tensors are cut into slices and which level and
priority each slice is sent with (p3_plan), and the slice size to cut.
"""

import collections
import ctypes
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from ._errors import _check
from ._libp3 import _P, _PlanOpts, _Slice, _Tensor, _plan, _plan_free, \
    _size, _suggest

DEFAULT_SLICE = 200000

Tensor = collections.namedtuple('Tensor', 'name bytes fwd')
Slice = collections.namedtuple('Slice', 'tensor offset length level msg prio')


def _as_tensor(t):
    if isinstance(t, dict):
        return Tensor(t.get('name'), int(t['bytes']), int(t['fwd']))
    name, nbytes, fwd = t
    return Tensor(name, int(nbytes), int(fwd))


TensorLike = Union[Tensor, Sequence[Any], Mapping[str, Any]]


# p3_plan_opts.order (P3_ORDER_*), by name
ORDERS = {'forward': 0, 'tail-first': 1}


def plan(tensors: Iterable[TensorLike], bands: int = 8,
         slice_bytes: Optional[int] = None, alpha: float = 0.0,
         beta: float = 0.0, merge_bytes: Optional[int] = None,
         order: str = 'forward') -> list:
    """Slices (forward order) for tensors: (name, bytes, fwd) each.
    Their prio and level say when to send them: in the next forward
    pass's order, or with order='tail-first' the tensors needed after
    the largest one first, if they hold at most a quarter of the bytes
    (P3_ORDER_TAIL_FIRST in p3.h)."""
    if order not in ORDERS:
        raise ValueError('p3.plan: order must be one of %s, not %r'
                         % (', '.join(ORDERS), order))
    ts = [_as_tensor(t) for t in tensors]
    arr = (_Tensor * max(1, len(ts)))()
    names = []
    for i, t in enumerate(ts):
        name = None if t.name is None else str(t.name).encode()
        names.append(name)
        arr[i] = _Tensor(name, t.bytes, t.fwd)
    opts = _PlanOpts(ctypes.sizeof(_PlanOpts), int(bands), int(slice_bytes or 0),
                     int(merge_bytes or 0), float(alpha), float(beta),
                     ORDERS[order])
    out = _P(_Slice)()
    n = _size()
    _check(_plan(arr, len(ts), ctypes.byref(opts), ctypes.byref(out),
                 ctypes.byref(n)), 'plan')
    try:
        return [Slice(s.tensor, s.offset, s.length, s.level, s.msg, s.prio)
                for s in (out[i] for i in range(n.value))]
    finally:
        _plan_free(out)


def suggest_slice(alpha: float, beta: float, link_rate: float = 0.0,
                  max_overhead: float = 0.05) -> int:
    """Slice size (bytes) keeping per-slice overhead under max_overhead."""
    return int(_suggest(float(alpha), float(beta), float(link_rate),
                        float(max_overhead)))
