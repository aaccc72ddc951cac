# SPDX-License-Identifier: LGPL-2.1-or-later
"""p3.dgram: loss-tolerant delivery (DLCP) over UDP, libp3's datagram
transport (docs/libp3.md, "Datagrams").

    rx = p3.dgram.Receiver(chunk=1408)              # port rx.port
    rx.expect(tensor=7, buf=arr, iter=3, deadline=0.005)
    tx = p3.dgram.Sender('10.0.0.2', rx.port)
    tx.send(level=1, iter=3, tensor=7, data=arr)
    for c in rx.completions(timeout=1.0):           # Completion tuples
        if c.missing:
            ranges = rx.missing(c.tensor)           # fetch them reliably

A tensor completes when every chunk is in, or once `deadline` passes
without a datagram of it (after its latest one, or after finish()), with
what is missing zero-filled.
Each object belongs to one thread at a time.
"""
import collections
import ctypes

from ._buffers import _Buf
from ._clock import _ms
from ._closing import _Closing
from ._errors import _check
from ._libp3 import _P, _cp, _int, _proto, _size, _u32, _u64, _uint, _vp
from ._tagging import _method

__all__ = ['Sender', 'Receiver', 'Completion', 'DEFAULT_CHUNK']

DEFAULT_CHUNK = 1408


class _Opts(ctypes.Structure):
    _fields_ = [('size', _u32), ('bands', _uint), ('tag_method', _int),
                ('chunk', _u32), ('buf_bytes', _int), ('early_bytes', _u64)]


class _Completion(ctypes.Structure):
    _fields_ = [('tensor', _u32), ('iter', _u64), ('bytes', _u64),
                ('missing', _u64), ('t_first_ns', _u64), ('t_done_ns', _u64)]


class _Range(ctypes.Structure):
    _fields_ = [('offset', _u64), ('length', _u64)]


_STATS = ('sent', 'dropped_local', 'stored', 'duplicate', 'late', 'stale',
          'bad', 'waiting', 'overflow')


class _Stats(ctypes.Structure):
    _fields_ = [(n, _u64) for n in _STATS]


_opts_init = _proto('p3_dgram_opts_init', None, _P(_Opts))
_connect = _proto('p3_dgram_connect', _int, _cp, _cp, _P(_Opts), _P(_vp))
_bind = _proto('p3_dgram_bind', _int, _cp, _cp, _P(_Opts), _P(_vp))
_port = _proto('p3_dgram_port', _int, _vp)
_fd = _proto('p3_dgram_fd', _int, _vp)
_send = _proto('p3_dgram_send', _int, _vp, _uint, _u64, _u32, _u64, _vp, _u64,
               _int)
_expect = _proto('p3_dgram_expect', _int, _vp, _u32, _vp, _u64, _u64, _u64)
_finish = _proto('p3_dgram_finish', _int, _vp, _u32, _u64)
_poll = _proto('p3_dgram_poll', _int, _vp, _int)
_next = _proto('p3_dgram_next', _int, _vp, _P(_Completion))
_missing = _proto('p3_dgram_missing', _int, _vp, _u32, _P(_Range), _size)
_stats = _proto('p3_dgram_stats', None, _vp, _P(_Stats))
_close = _proto('p3_dgram_close', None, _vp)

Completion = collections.namedtuple(
    'Completion', 'tensor iter bytes missing t_first_ns t_done_ns')


def _opts(bands, method, chunk, buf_bytes, early_bytes):
    o = _Opts()
    _opts_init(ctypes.byref(o))
    o.bands = int(bands)
    o.tag_method = _method(method)
    o.chunk = int(chunk)
    o.buf_bytes = int(buf_bytes)
    o.early_bytes = int(early_bytes)
    return o


class _Endpoint(_Closing):
    def __init__(self):
        self._h = None

    def _handle(self):
        if not self._h:
            raise ValueError('p3.dgram: closed')
        return self._h

    def stats(self):
        """Datagrams by fate since this end was made, as a dict."""
        st = _Stats()
        _stats(self._handle(), ctypes.byref(st))
        return {n: getattr(st, n) for n in _STATS}

    def close(self):
        if self._h:
            _close(self._h)
            self._h = None


class Sender(_Endpoint):
    """Datagrams towards host:port, a socket per level, tagged for the p3
    qdisc on first use."""

    def __init__(self, host, port, bands=8, method=None, chunk=DEFAULT_CHUNK,
                 buf_bytes=4 << 20):
        super().__init__()
        h = _vp()
        o = _opts(bands, method, chunk, buf_bytes, 0)
        _check(_connect(str(host).encode(), str(port).encode(), ctypes.byref(o),
                        ctypes.byref(h)), 'dgram connect')
        self._h = h
        self.chunk = o.chunk

    def send(self, level, iter, tensor, data, offset=0, timeout=None):
        """Bytes of data (any buffer) as tensor's [offset, offset + len);
        offset a multiple of the chunk.  Returns the datagrams sent; one
        the local qdisc drops counts as sent (lost, as on the wire)."""
        b = _Buf(data)
        return _check(_send(self._handle(), level, iter, tensor, offset, b.ptr,
                            b.nbytes, _ms(timeout)), 'dgram send')


class Receiver(_Endpoint):
    """The receiving end, bound to host:port (port 0: any)."""

    def __init__(self, host=None, port=0, bands=8, chunk=DEFAULT_CHUNK,
                 buf_bytes=4 << 20, early_bytes=8 << 20):
        super().__init__()
        h = _vp()
        o = _opts(bands, None, chunk, buf_bytes, early_bytes)
        _check(_bind(host.encode() if host else None, str(port).encode(),
                     ctypes.byref(o), ctypes.byref(h)), 'dgram bind')
        self._h = h
        self.chunk = o.chunk
        self.port = _check(_port(h))
        self._bufs = {}

    def fileno(self):
        return _check(_fd(self._handle()))

    def expect(self, tensor, buf, iter, deadline=None):
        """buf (writable, kept alive here) receives tensor at iter; once
        deadline seconds pass without a datagram of it, it completes
        anyway."""
        b = _Buf(buf, writable=True)
        ns = 0 if deadline is None else max(1, int(deadline * 1e9))
        _check(_expect(self._handle(), tensor, b.ptr, b.nbytes, iter, ns),
               'dgram expect')
        self._bufs[tensor] = b

    def finish(self, tensor, after=0.0):
        """Complete tensor now (after=0), or wait for its datagrams at
        most after seconds from now, longer only while they keep coming."""
        _check(_finish(self._handle(), tensor, int(after * 1e9)), 'dgram finish')

    def poll(self, timeout=None):
        """Read datagrams until a completion is ready or timeout passes;
        returns how many are ready."""
        return _check(_poll(self._handle(), _ms(timeout)), 'dgram poll')

    def completions(self, timeout=0.0):
        """Poll once, then yield every ready Completion."""
        self.poll(timeout)
        c = _Completion()
        while _next(self._handle(), ctypes.byref(c)) == 1:
            yield Completion(c.tensor, c.iter, c.bytes, c.missing,
                             c.t_first_ns, c.t_done_ns)

    def missing(self, tensor):
        """[(offset, length)] of a completed tensor's zero-filled bytes."""
        n = _check(_missing(self._handle(), tensor, None, 0), 'dgram missing')
        r = (_Range * max(n, 1))()
        _check(_missing(self._handle(), tensor, r, n), 'dgram missing')
        return [(x.offset, x.length) for x in r[:n]]
