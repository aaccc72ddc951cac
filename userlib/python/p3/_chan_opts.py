# SPDX-License-Identifier: LGPL-2.1-or-later
"""p3_chan_opts from the keyword arguments that Channel.connect and
Listener share, checked where ctypes would wrap a value silently.
"""

import ctypes

from ._clock import _ms
from ._libp3 import _ChanOpts, _opts_init
from ._tagging import _method


def _opts(bands=8, method=None, chan_id=0, max_queued=64 << 20,
          max_payload=16 << 20, timeout=10.0, progress=True,
          peer_timeout=30.0, level_stride=1, checksum=True):
    o = _ChanOpts()
    _opts_init(ctypes.byref(o), ctypes.sizeof(o))
    o.bands = int(bands)
    o.tag_method = _method(method)
    o.chan_id = int(chan_id)
    o.max_queued = int(max_queued)
    o.max_payload = int(max_payload)
    o.timeout_ms = _ms(timeout)     # None: -1, no bound
    o.progress = 1 if progress else 0
    o.peer_timeout_ms = -1 if peer_timeout is None else max(1, _ms(peer_timeout))
    if not 0 < int(level_stride) < 1 << 32:
        # ctypes would wrap it silently; libp3 refuses 64 and up itself.
        raise ValueError('p3: level_stride must be a positive level count, '
                         'not %r' % (level_stride,))
    o.level_stride = int(level_stride)
    # A sender's frames: CRC32C over header and payload, or (False) over
    # the header only, the payload left to TCP's checksum.
    o.checksum = 0 if checksum else -1
    return o
