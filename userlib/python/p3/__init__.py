# SPDX-License-Identifier: LGPL-2.1-or-later
"""p3: Python binding of libp3 (Priority-based Parameter Propagation).

Tag sockets for the sch_p3 qdisc, plan how gradients are sliced and
prioritised, move them over a multi-band channel, and control the qdisc.
The API is documented at the top of docs/libp3.md; every failure raises
p3.Error (an OSError).

The package is split by concern, each module private (import its names
from p3):

    _libp3      libp3.so loaded; its structs and function prototypes
    _errors     p3.Error, its subclasses, the E* codes, return-code checks
    _clock      now_ns() and timeouts in libp3's milliseconds
    _tagging    tag(), tag_get(), tag_config(), level_dscp(), the tag method names
    _planner    plan(), suggest_slice(), Tensor and Slice
    _buffers    Python buffers held exported while libp3 uses them
    _closing    close() on with-block exit and on collection
    _chan_opts  p3_chan_opts from keyword arguments
    _channel    Channel and its Completion records
    _plan       Plan (a plan laid out once, sent often)
    _listener   Listener
    _qdisc      qdisc_add/change/replace/del and qdisc_stats()

dgram (datagrams) and netns (network namespaces) are public submodules.
"""

# Loaded first: without libp3.so the import fails here, with its reason.
from ._libp3 import MAX_BANDS, _lib
# The ctypes mirrors, for the tests that hold them to p3.h.
from ._libp3 import _BandStats, _BufRef, _ChanOpts, _Completion, \
    _PlanOpts, _QdiscOpts, _QdiscStats, _Slice, _Tensor, _XStats
from ._errors import ERRBASE, ClosedError, ConnectionError, Error, \
    PermissionError, TimeoutError, _CODES, _check, _error
from ._clock import Timeout, now_ns
from ._tagging import FdLike, dscp_level, level_dscp, tag, tag_config, tag_get
from ._planner import DEFAULT_SLICE, ORDERS, Slice, Tensor, TensorLike, \
    plan, suggest_slice
from ._buffers import BufferLike, _Buf
from ._buffers import _Buf as Buffer
from ._chan_opts import _opts
from ._channel import Channel, Completion
from ._plan import Plan
from ._listener import Listener
from ._qdisc import HandleLike, qdisc_add, qdisc_change, qdisc_del, \
    qdisc_replace, qdisc_stats

__all__ = [
    'Error', 'TimeoutError', 'ConnectionError', 'PermissionError',
    'ClosedError', 'Tensor', 'Slice', 'Completion', 'Channel', 'Plan',
    'Listener', 'Buffer',
    'tag', 'tag_get', 'tag_config', 'level_dscp', 'dscp_level', 'plan', 'suggest_slice', 'now_ns',
    'qdisc_add', 'qdisc_change', 'qdisc_replace', 'qdisc_del', 'qdisc_stats',
    'DEFAULT_SLICE', 'MAX_BANDS',
]

# Library error codes by name, e.g. p3.ECSUM.
globals().update(_CODES)
__all__ += list(_CODES)
