# SPDX-License-Identifier: LGPL-2.1-or-later
"""The receiving side's door: a Listener accepts channels, one sender
with all of its bands at a time.
"""

import ctypes
import errno as _errno
import time
from typing import Optional, Union

from ._chan_opts import _opts
from ._channel import Channel
from ._clock import Timeout, _ms
from ._closing import _Closing
from ._errors import Error, _check
from ._libp3 import _accept, _listen, _listener_close, _listener_port, _vp


class Listener(_Closing):
    """Accepts channels: every band of a sender connects and says hello."""

    def __init__(self, host: Optional[str] = '127.0.0.1',
                 port: Union[int, str] = 0, max_payload: int = 16 << 20,
                 timeout: Timeout = 10.0, progress: bool = True,
                 peer_timeout: Timeout = 30.0, level_stride: int = 1) -> None:
        o = _opts(max_payload=max_payload, timeout=timeout, progress=progress,
                  peer_timeout=peer_timeout, level_stride=level_stride)
        h = _vp()
        _check(_listen(None if host is None else str(host).encode(),
                       str(port).encode(), ctypes.byref(o), ctypes.byref(h)),
               'listen')
        self._h = h
        self.port = _check(_listener_port(self._h), 'listen')
        self.last_error = None

    def accept(self, timeout: Timeout = None, strict: bool = False) -> Channel:
        """Next complete channel.  A connection that is no p3 sender (it
        closes first, or does not start with the frame magic) is closed
        silently; one with a bad p3 hello is closed too, and strict=True
        raises its error, otherwise it is kept in last_error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            h = _vp()
            rc = _accept(self._h, -1 if left is None else _ms(max(0, left)),
                         ctypes.byref(h))
            if rc == 0:
                return Channel(h.value)
            if rc == -_errno.ETIMEDOUT or strict:
                _check(rc, 'accept')
            self.last_error = Error(rc, 'accept')

    def close(self) -> None:
        if self._h:
            _listener_close(self._h)
            self._h = None
