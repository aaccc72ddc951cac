# SPDX-License-Identifier: LGPL-2.1-or-later
"""p3: Python binding of libp3 (Priority-based Parameter Propagation).

Tag sockets for the sch_p3 qdisc, plan how gradients are sliced and
prioritised, move them over a multi-band channel, and control the qdisc.
The API is documented at the top of docs/libp3.md; every failure raises
p3.Error (an OSError).
"""

import builtins
import collections
import ctypes
import ctypes.util
import errno as _errno
import os
import threading
import time
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence, Union

__all__ = [
    'Error', 'TimeoutError', 'ConnectionError', 'PermissionError',
    'ClosedError', 'Tensor', 'Slice', 'Completion', 'Channel', 'Listener',
    'tag', 'tag_get', 'tag_config', 'plan', 'suggest_slice', 'now_ns',
    'qdisc_add', 'qdisc_change', 'qdisc_replace', 'qdisc_del', 'qdisc_stats',
    'DEFAULT_SLICE', 'MAX_BANDS',
]

DEFAULT_SLICE = 200000


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


# What the calls take: a socket or its descriptor; any object with the
# buffer protocol (bytes, bytearray, memoryview, array, a numpy array, a
# CPU torch.Tensor's .numpy()), which typing cannot name before 3.12; a
# qdisc handle as 'root', 'MAJ:' or 'MAJ:MIN' (hex), or the u32.
FdLike = Union[int, _HasFileno]
BufferLike = Any
HandleLike = Union[str, int]
Timeout = Optional[float]       # seconds; None blocks, 0 never blocks
MAX_BANDS = 64
ERRBASE = 0x3000

_METHODS = {None: 0, 'default': 0, 'dscp': 1, 'priority': 2, 'prio': 2,
            'mark': 3}
_METHOD_NAMES = {1: 'dscp', 2: 'priority', 3: 'mark'}


# ------------------------------------------------------------ the library

def _candidates():
    env = os.environ.get('P3_LIB')
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    # userlib/python/p3 -> <repo>/build/userlib/libp3.so
    yield os.path.join(here, '..', '..', '..', 'build', 'userlib', 'libp3.so')
    found = ctypes.util.find_library('p3')
    if found:
        yield found
    yield 'libp3.so.1'


def _load():
    last = None
    for path in _candidates():
        try:
            return ctypes.CDLL(path, use_errno=True)
        except OSError as e:
            last = e
    raise ImportError('p3: cannot load libp3.so (set P3_LIB): %s' % last)


_lib = _load()

_u8, _u32, _u64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64
_int, _uint, _size = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t
_vp, _cp = ctypes.c_void_p, ctypes.c_char_p


class _Tensor(ctypes.Structure):
    _fields_ = [('name', _cp), ('bytes', _u64), ('fwd', _u32)]


class _PlanOpts(ctypes.Structure):
    _fields_ = [('size', _u32), ('bands', _uint), ('slice_bytes', _u64),
                ('merge_bytes', _u64),
                ('alpha_s', ctypes.c_double),
                ('beta_s_per_byte', ctypes.c_double), ('order', _u64)]


class _Slice(ctypes.Structure):
    _fields_ = [('tensor', _u32), ('msg', _u32), ('offset', _u64),
                ('length', _u64), ('prio', _u32), ('level', _u8)]


class _ChanOpts(ctypes.Structure):
    _fields_ = [('size', _u32), ('bands', _uint), ('tag_method', _int),
                ('notsent_lowat', _int), ('chan_id', _u64),
                ('max_queued', _size), ('max_payload', _u32),
                ('timeout_ms', _int), ('progress', _int),
                ('peer_timeout_ms', _int), ('level_stride', _u64)]


class _BufRef(ctypes.Structure):
    _fields_ = [('data', _vp), ('len', _u64)]


class _Completion(ctypes.Structure):
    _fields_ = [('tensor', _u32), ('iter', _u64), ('bytes', _u64),
                ('t_first_ns', _u64), ('t_done_ns', _u64)]


class _QdiscOpts(ctypes.Structure):
    _fields_ = [('size', _u32), ('mask', _u32), ('bands', _u8), ('defband', _u8),
                ('tag', _u8),
                ('limit', _u32), ('memory', _u32), ('quantum', _u32),
                ('rate', _u64), ('buckets', _u32)]


class _BandStats(ctypes.Structure):
    _fields_ = [('packets', _u64), ('bytes', _u64), ('drops', _u32),
                ('overlimits', _u32), ('requeues', _u32), ('backlog', _u32),
                ('qlen', _u32)]


_XSTATS = ('flows', 'flows_active', 'flows_created', 'flows_gc',
           'preemptions', 'boosts', 'untagged', 'drops_limit', 'drops_memory',
           'drops_alloc', 'throttled')


class _XStats(ctypes.Structure):
    _fields_ = [(n, _u32 if i < 2 else _u64) for i, n in enumerate(_XSTATS)]


class _QdiscStats(ctypes.Structure):
    _fields_ = [('size', _u32), ('handle', _u32), ('parent', _u32),
                ('opts', _QdiscOpts),
                ('total', _BandStats), ('have_xstats', _int),
                ('xstats', _XStats), ('nbands', _uint),
                ('band', _BandStats * MAX_BANDS),
                ('drops_deadline', _u64), ('drops_tolerant', _u64),
                ('deadline_us', _u32 * MAX_BANDS)]


def _proto(name, res, *args):
    f = getattr(_lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_P = ctypes.POINTER
_strerror = _proto('p3_strerror', _cp, _int)
_last_extack = _proto('p3_last_extack', _cp)
_now_ns = _proto('p3_now_ns', _u64)
_tag_ex = _proto('p3_tag_ex', _int, _int, _uint, _int, _int)
_tag_get = _proto('p3_tag_get', _int, _int, _int)
_tag_config = _proto('p3_tag_config', _int, _int, _int)
_tag_method_name = _proto('p3_tag_method_name', _cp, _int)
_plan = _proto('p3_plan', _int, _P(_Tensor), _size, _P(_PlanOpts),
               _P(_P(_Slice)), _P(_size))
_plan_free = _proto('p3_plan_free', None, _P(_Slice))
_suggest = _proto('p3_plan_suggest_slice', _u64, ctypes.c_double,
                  ctypes.c_double, ctypes.c_double, ctypes.c_double)
_opts_init = _proto('p3_chan_opts_init_sized', None, _P(_ChanOpts), _size)
_connect = _proto('p3_chan_connect', _int, _cp, _cp, _P(_ChanOpts), _P(_vp))
_send = _proto('p3_chan_send', _int, _vp, _uint, _u32, _u64, _u32, _u64, _vp,
               _u64, _int)
_send_ref = _proto('p3_chan_send_ref', _int, _vp, _uint, _u32, _u64, _u32, _u64,
                   _vp, _u64, _int)
_send_plan = _proto('p3_chan_send_plan_bufs', _int, _vp, _P(_Slice), _size,
                    _P(_BufRef), _size, _u64, _int)
_queued = _proto('p3_chan_queued', _size, _vp)
_flush = _proto('p3_chan_flush', _int, _vp, _int)
_listen = _proto('p3_listen', _int, _cp, _cp, _P(_ChanOpts), _P(_vp))
_listener_port = _proto('p3_listener_port', _int, _vp)
_accept = _proto('p3_accept', _int, _vp, _int, _P(_vp))
_listener_close = _proto('p3_listener_close', None, _vp)
_expect = _proto('p3_chan_expect', _int, _vp, _u32, _vp, _u64, _u64)
_cancel = _proto('p3_chan_cancel', _int, _vp, _u32)
_poll = _proto('p3_chan_poll', _int, _vp, _int)
_next = _proto('p3_chan_next', _int, _vp, _P(_Completion))
_pending = _proto('p3_chan_pending', _size, _vp)
_band_status = _proto('p3_chan_band_status', _int, _vp, _uint)
_bands = _proto('p3_chan_bands', _uint, _vp)
_chan_id = _proto('p3_chan_id', _u64, _vp)
_close = _proto('p3_chan_close', None, _vp)
_shutdown = _proto('p3_chan_shutdown', None, _vp)
_chan_fd = _proto('p3_chan_fd', _int, _vp)
_qdisc_mod = {n: _proto('p3_qdisc_' + n, _int, _cp, _u32, _u32,
                        _P(_QdiscOpts))
              for n in ('add', 'change', 'replace')}
_qdisc_del = _proto('p3_qdisc_del', _int, _cp, _u32, _u32)
_qdisc_stats = _proto('p3_qdisc_stats', _int, _cp, _u32, _u32,
                      _P(_QdiscStats))


# ---------------------------------------------------------------- errors

class Error(OSError):
    """A libp3 failure.  errno is positive: an errno or a P3_E* code."""

    def __init__(self, err, what=None, extack=''):
        code = -err if err < 0 else err
        msg = _strerror(-code).decode(errors='replace')
        if what:
            msg = '%s: %s' % (what, msg)
        if extack:
            msg = '%s (kernel: %s)' % (msg, extack)
        super().__init__(code, msg)
        self.extack = extack


class TimeoutError(Error, builtins.TimeoutError):
    """A call's timeout ran out (ETIMEDOUT, or EAGAIN after waiting)."""


class ConnectionError(Error, builtins.ConnectionError):
    """The peer refused, reset or closed the connection, or left with
    tensors incomplete (P3_EINCOMPLETE)."""


class ClosedError(Error, ValueError):
    """The channel was closed, by this thread before the call or by
    another one during it (P3_ECLOSED); also a ValueError, as for a closed
    file."""


class PermissionError(Error, builtins.PermissionError):
    """Not allowed: EPERM, EACCES, or a tag that needs CAP_NET_ADMIN."""


def _error(err, what=None, extack=''):
    """The Error (or the subclass that also names the builtin kind) for a
    negative or positive errno or P3_E* code."""
    code = -err if err < 0 else err
    for cls, codes in _ERROR_KINDS:
        if code in codes:
            return cls(code, what, extack)
    return Error(code, what, extack)


def _check(rc, what=None, extack=False):
    if rc < 0:
        text = _last_extack().decode(errors='replace') if extack else ''
        raise _error(rc, what, text)
    return rc


# Library error codes by name, e.g. p3.ECSUM.
_CODES = {_n: ERRBASE + _i for _i, _n in enumerate((
    'EBADMAGIC', 'EVERSION', 'EBADFRAME', 'ETOOBIG', 'ELEVEL', 'ERANGE',
    'ECSUM', 'ETRUNC', 'EDUP', 'ESTALE', 'EHELLO', 'EINCOMPLETE',
    'ENEEDCAP_PRIO', 'ENEEDCAP_MARK', 'EDSCPRANGE', 'ETAGVERIFY', 'ENOTP3',
    'ENLPARSE', 'ECLOSED'))}
globals().update(_CODES)
__all__ += list(_CODES)

_ERROR_KINDS = (
    (TimeoutError, {_errno.ETIMEDOUT, _errno.EAGAIN}),
    (ConnectionError, {_errno.ECONNREFUSED, _errno.ECONNRESET,
                       _errno.ECONNABORTED, _errno.EPIPE, _errno.ENOTCONN,
                       _errno.EHOSTUNREACH, _errno.ENETUNREACH,
                       _CODES['EINCOMPLETE']}),
    (PermissionError, {_errno.EPERM, _errno.EACCES, _CODES['ENEEDCAP_PRIO'],
                       _CODES['ENEEDCAP_MARK']}),
    (ClosedError, {_CODES['ECLOSED']}),
)


def now_ns() -> int:
    """CLOCK_MONOTONIC in ns, the clock of Completion timestamps."""
    return _now_ns()


def _ms(timeout):
    if timeout is None:
        return -1
    return max(0, int(timeout * 1000 + 0.999))


# --------------------------------------------------------------- tagging

def _fd(sock_or_fd):
    return sock_or_fd if isinstance(sock_or_fd, int) else sock_or_fd.fileno()


def _method(method):
    if method not in _METHODS:
        raise ValueError('tag method must be dscp, priority or mark')
    return _METHODS[method]


_warned_netns = []


def _warn_lost_in_netns(method):
    """Once per process: priority and mark do not leave a container."""
    name = _tag_method_name(method).decode()
    if name not in ('priority', 'mark') or _warned_netns:
        return
    from . import netns
    dev = netns.leaves_by_veth()
    _warned_netns.append(dev)
    if dev:
        import warnings
        warnings.warn('p3.tag: tagging with %s, but the default route leaves '
                      'this namespace through veth %s: the kernel clears '
                      'the %s of packets that leave a network namespace, so '
                      "a qdisc outside never sees the tag; use 'dscp'"
                      % (name, dev, name), RuntimeWarning, stacklevel=3)


def tag(sock_or_fd: FdLike, level: int, method: Optional[str] = None,
        notsent_lowat: Optional[int] = None) -> None:
    """Tag a socket with level (written as tag level + 1), verified."""
    lowat = -1 if notsent_lowat is None else int(notsent_lowat)
    m = _method(method)
    _check(_tag_ex(_fd(sock_or_fd), int(level), m, lowat), 'tag')
    _warn_lost_in_netns(m)


def tag_get(sock_or_fd: FdLike, method: Optional[str] = None) -> Optional[int]:
    """The level a socket is tagged with, or None if untagged."""
    rc = _tag_get(_fd(sock_or_fd), _method(method))
    if rc == -_errno.ENOENT:
        return None
    return _check(rc, 'tag_get')


def tag_config(method: str = 'dscp', notsent_lowat: int = 16384) -> None:
    """Process-wide default method and TCP_NOTSENT_LOWAT (0: leave)."""
    if method in (None, 'default'):
        raise ValueError('tag_config needs dscp, priority or mark')
    _check(_tag_config(_method(method), int(notsent_lowat)), 'tag_config')


# --------------------------------------------------------------- planner

Tensor = collections.namedtuple('Tensor', 'name bytes fwd')
Slice = collections.namedtuple('Slice', 'tensor offset length level msg prio')
Completion = collections.namedtuple('Completion',
                                    'tensor iteration bytes t_first t_done')


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


# ---------------------------------------------------------------- buffers

class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer (stable ABI since 3.11)."""
    _fields_ = [('buf', _vp), ('obj', _vp), ('len', ctypes.c_ssize_t),
                ('itemsize', ctypes.c_ssize_t), ('readonly', _int), ('ndim', _int),
                ('format', _cp), ('shape', _vp), ('strides', _vp),
                ('suboffsets', _vp), ('internal', _vp)]


_PyBUF_WRITABLE, _PyBUF_C_CONTIGUOUS = 0x0001, 0x0038
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), _int]
_get_buffer.restype = _int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


class _Buf:
    """A C pointer into the caller's memory, never a copy: any C-contiguous
    buffer-protocol object (bytes, bytearray, numpy arrays, mmap, ...), or a
    CPU torch.Tensor through the array that shares its storage.  The
    buffer stays exported until this is dropped, so that Python cannot
    resize or free it under the library."""

    def __init__(self, obj, writable=False):
        if hasattr(obj, 'data_ptr') and hasattr(obj, 'numpy'):
            obj = obj.detach().numpy()      # shares the tensor's storage
        self.obj = obj
        self._view = _PyBuffer()
        flags = _PyBUF_C_CONTIGUOUS | (_PyBUF_WRITABLE if writable else 0)
        try:
            _get_buffer(obj, ctypes.byref(self._view), flags)
        except (BufferError, ValueError) as e:    # read-only, not contiguous
            raise ValueError('p3: %s buffer: %s' % (
                'receive' if writable else 'send', e)) from None
        self.nbytes = self._view.len
        self.ptr = self._view.buf if self.nbytes else None

    def __del__(self):
        if getattr(self, '_view', None) is not None and self._view.obj:
            _release_buffer(ctypes.byref(self._view))
            self._view = None


def _opts(bands=8, method=None, chan_id=0, max_queued=64 << 20,
          max_payload=16 << 20, timeout=10.0, progress=True,
          peer_timeout=30.0, level_stride=1):
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
    return o


# ---------------------------------------------------------------- channel

class _Closing:
    """An object with close(): a with-block closes it, and so does the
    garbage collector, quietly, if nothing did."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Channel(_Closing):
    """One end of a multi-band channel (Channel.connect or Listener.accept).

    Every method may be called from any thread.  close() from one thread
    ends the calls blocked in others: they raise ClosedError.  With
    progress=True (the default) a thread inside libp3 moves the data, so a
    sender may queue and go back to computing; fileno() then serves
    selectors and event loops.
    """

    def __init__(self, handle: int) -> None:
        self._h = handle
        self._bufs = {}
        self._sent_refs = {}    # (tensor, iteration): buffers the library reads
        self._mu = threading.Condition()
        self._users = 0

    @classmethod
    def connect(cls, host: str, port: Union[int, str], bands: int = 8,
                method: Optional[str] = None, chan_id: int = 0,
                max_queued: int = 64 << 20, max_payload: int = 16 << 20,
                timeout: Timeout = 10.0, progress: bool = True,
                peer_timeout: Timeout = 30.0,
                level_stride: int = 1) -> 'Channel':
        """Band b's sockets carry level b * level_stride (the Listener
        must use the same): 2 leaves every other level to datagrams."""
        o = _opts(bands, method, chan_id, max_queued, max_payload, timeout,
                  progress, peer_timeout, level_stride)
        h = _vp()
        _check(_connect(str(host).encode(), str(port).encode(),
                        ctypes.byref(o), ctypes.byref(h)), 'connect')
        return cls(h.value)

    def _call(self, fn, *args):
        """fn(handle, *args), the handle held open for the call's length:
        close() waits for it instead of freeing it under the call."""
        with self._mu:
            if not self._h:
                raise ClosedError(_CODES['ECLOSED'], 'channel is closed')
            self._users += 1
            h = self._h
        try:
            return fn(h, *args)
        finally:
            with self._mu:
                self._users -= 1
                if not self._users:
                    self._mu.notify_all()

    # sender
    def send(self, tensor: int, data: BufferLike, level: int,
             iteration: int = 0, offset: int = 0, prio: int = 0,
             timeout: Timeout = None, copy: bool = True) -> None:
        """Queue data as one message for tensor at offset.  The library
        copies it into its queue, so data may be reused on return; with
        copy=False it is written from data itself (p3_chan_send_ref), and
        the channel holds data until its completion is in, taken by
        poll(), wait_sent() or flush(): do not change it until then."""
        b = _Buf(data)
        if not b.nbytes:
            raise ValueError('p3: cannot send an empty buffer')
        key = (int(tensor), int(iteration))
        if copy:
            _check(self._call(_send, int(level), int(prio), key[1], key[0],
                              int(offset), b.ptr, b.nbytes, _ms(timeout)), 'send')
            return
        with self._mu:
            self._sent_refs.setdefault(key, []).append(b)
        try:
            _check(self._call(_send_ref, int(level), int(prio), key[1], key[0],
                              int(offset), b.ptr, b.nbytes, _ms(timeout)),
                   'send')
        except BaseException:
            self._unref(key)
            raise

    def _unref(self, key):
        with self._mu:
            refs = self._sent_refs.get(key)
            if refs:
                refs.pop()
                if not refs:
                    del self._sent_refs[key]

    @property
    def sending(self) -> int:
        """Buffers sent with copy=False that the library may still read."""
        with self._mu:
            return sum(len(v) for v in self._sent_refs.values())

    def wait_sent(self, timeout: Timeout = None) -> list:
        """Write until every copy=False buffer is released; returns their
        completions (bytes 0: not sent, its band failed)."""
        return self._poll_while(lambda: self.sending,
                                'wait_sent (%d buffers held)', timeout)

    def send_plan(self, slices: Iterable[Slice],
                  arrays: Union[Mapping[int, BufferLike], Sequence[BufferLike]],
                  iteration: int = 0, timeout: Timeout = None) -> None:
        """Queue a plan, all of it or (on an error) none of it; arrays[t]
        is tensor t; merged slices go together."""
        slices = list(slices)
        if not slices:
            return
        bufs = {}
        cs = (_Slice * len(slices))()
        for i, s in enumerate(slices):
            if s.tensor not in bufs:
                bufs[s.tensor] = _Buf(arrays[s.tensor])
            if s.offset + s.length > bufs[s.tensor].nbytes or s.length <= 0:
                raise ValueError('p3: slice %d is outside tensor %d'
                                 % (i, s.tensor))
            cs[i] = _Slice(s.tensor, s.msg, s.offset, s.length, s.prio,
                           s.level)
        refs = (_BufRef * (max(bufs) + 1))()
        for t, b in bufs.items():
            refs[t] = _BufRef(b.ptr, b.nbytes)
        _check(self._call(_send_plan, cs, len(slices), refs, len(refs),
                          int(iteration), _ms(timeout)), 'send_plan')

    @property
    def queued(self) -> int:
        return self._call(_queued)

    def flush(self, timeout: Timeout = None) -> None:
        """Write everything queued; copy=False buffers are released."""
        _check(self._call(_flush, _ms(timeout)), 'flush')
        for d in self._call(self._take):
            self._unref((d.tensor, d.iteration))

    # receiver
    def expect(self, tensor: int, array: BufferLike, iteration: int = 0) -> None:
        """Receive tensor (iteration) into array, a writable buffer."""
        b = _Buf(array, writable=True)
        if not b.nbytes:
            raise ValueError('p3: cannot receive into an empty buffer')
        key = (int(tensor), int(iteration))
        # Held until its completion is popped: the library writes into it.
        # Filed first, so that a completion racing in from the progress
        # thread always finds it.
        with self._mu:
            self._bufs.setdefault(key, collections.deque()).append(b)
        try:
            _check(self._call(_expect, key[0], b.ptr, b.nbytes, key[1]),
                   'expect')
        except BaseException:
            self._release(*key, newest=True)
            raise

    def cancel(self, tensor: int) -> None:
        """Forget tensor (registered or finished); its buffers are
        released.  A frame of it half read is discarded, later ones wait
        as for a tensor never registered."""
        _check(self._call(_cancel, int(tensor)), 'cancel')
        with self._mu:
            for key in [k for k in self._bufs if k[0] == int(tensor)]:
                del self._bufs[key]

    def _release(self, tensor, iteration, newest=False):
        with self._mu:
            q = self._bufs.get((tensor, iteration))
            if q:
                q.pop() if newest else q.popleft()
                if not q:
                    del self._bufs[(tensor, iteration)]

    def _take(self, h):
        done = []
        c = _Completion()
        while _next(h, ctypes.byref(c)) == 1:
            done.append(Completion(c.tensor, c.iter, c.bytes, c.t_first_ns,
                                   c.t_done_ns))
        return done

    def poll(self, timeout: Timeout = 0.0) -> list:
        """Move data (or, with progress, wait for it) up to timeout
        seconds; returns the completions that are ready."""
        _check(self._call(_poll, _ms(timeout)), 'poll')
        done = self._call(self._take)
        for d in done:
            # A sender's completions are its copy=False buffers'.
            if (d.tensor, d.iteration) in self._sent_refs:
                self._unref((d.tensor, d.iteration))
            else:
                self._release(d.tensor, d.iteration)
        return done

    def wait(self, timeout: Timeout = None) -> list:
        """Poll until nothing registered is pending; the completions.
        With nothing pending it returns [] at once; otherwise it polls
        at least once (timeout=0 takes what is ready).  On
        timeout, the completions it did take are on the error's
        .completions, so none is lost."""
        return self._poll_while(lambda: self.pending,
                                'wait (%d tensors pending)', timeout)

    def _poll_while(self, left_count, what, timeout):
        """Poll while left_count() is nonzero, for at most @timeout s; the
        completions.  On timeout they are on the error's .completions
        (@what, with the count left, is its message), so none is lost."""
        deadline = None if timeout is None else time.monotonic() + timeout
        done = []
        while left_count():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done += self.poll(0.5 if left is None else min(left, 0.5))
            if left_count() and deadline is not None and time.monotonic() >= deadline:
                err = _error(_errno.ETIMEDOUT, what % left_count())
                err.completions = done
                raise err
        return done

    def fileno(self) -> int:
        """A descriptor readable while poll() has something to return
        (progress channels only): for select, selectors and asyncio."""
        return _check(self._call(_chan_fd), 'fileno')

    @property
    def pending(self) -> int:
        """Tensors registered with expect() whose completion poll() or
        wait() has not yet returned: `while rx.pending: rx.poll(...)`
        misses none, even when the progress thread completes the last
        ones after a poll."""
        with self._mu:
            return sum(len(q) for q in self._bufs.values())

    @property
    def incomplete(self) -> int:
        """Registered tensors whose bytes have not all arrived (libp3's
        p3_chan_pending(); it drops before the completion is taken)."""
        return self._call(_pending)

    def band_status(self, band: int) -> int:
        return self._call(_band_status, int(band))

    @property
    def bands(self) -> int:
        return self._call(_bands)

    @property
    def chan_id(self) -> int:
        return self._call(_chan_id)

    def close(self) -> None:
        """Close every connection; data still queued is dropped (flush
        first on a sender).  Calls blocked in other threads raise
        ClosedError; close waits for them to leave."""
        with self._mu:
            h, self._h = self._h, None
            if not h:
                return
            _shutdown(h)
            while self._users:
                self._mu.wait()
            self._bufs.clear()
        _close(h)
        with self._mu:
            self._sent_refs.clear()     # closed: nothing reads them now


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


# ------------------------------------------------------------------ qdisc

_QOPTS = (('bands', 1 << 0), ('default', 1 << 1), ('tag', 1 << 2),
          ('limit', 1 << 3), ('memory', 1 << 4), ('quantum', 1 << 5),
          ('rate', 1 << 6), ('buckets', 1 << 7))


def _handle_id(h, default):
    if h is None:
        return default
    if isinstance(h, int):
        return h
    if h == 'root':
        return 0xffffffff
    major, _, minor = h.partition(':')
    if not _:
        raise ValueError('p3: handle must look like 10: or 1:2 or root')
    return (int(major, 16) << 16) | (int(minor, 16) if minor else 0)


def _handle_str(h):
    if h == 0xffffffff:
        return 'root'
    return '%x:%x' % (h >> 16, h & 0xffff) if h & 0xffff else '%x:' % (h >> 16)


def _qopts(kw):
    o = _QdiscOpts(size=ctypes.sizeof(_QdiscOpts))
    for name, bit in _QOPTS:
        v = kw.pop(name, None)
        if v is None:
            continue
        o.mask |= bit
        if name == 'tag':
            v = _method(v)
            if not v:
                raise ValueError('p3: tag must be dscp, priority or mark')
        setattr(o, 'defband' if name == 'default' else name, int(v))
    if kw:
        raise TypeError('p3: unknown qdisc option(s): %s' % ', '.join(kw))
    return o


def _qdisc_modify(op, dev, parent, handle, kw):
    o = _qopts(kw)
    _check(_qdisc_mod[op](dev.encode(), _handle_id(parent, 0xffffffff),
                          _handle_id(handle, 0), ctypes.byref(o)),
           'qdisc ' + op, extack=True)


def qdisc_add(dev: str, parent: HandleLike = 'root',
              handle: Optional[HandleLike] = None, **opts: Any) -> None:
    """Create a p3 qdisc; options: bands default tag limit memory quantum
    rate (bytes/s) buckets."""
    _qdisc_modify('add', dev, parent, handle, opts)


def qdisc_change(dev: str, parent: HandleLike = 'root',
                 handle: Optional[HandleLike] = None, **opts: Any) -> None:
    _qdisc_modify('change', dev, parent, handle, opts)


def qdisc_replace(dev: str, parent: HandleLike = 'root',
                  handle: Optional[HandleLike] = None, **opts: Any) -> None:
    _qdisc_modify('replace', dev, parent, handle, opts)


def qdisc_del(dev: str, parent: HandleLike = 'root',
              handle: Optional[HandleLike] = None) -> None:
    _check(_qdisc_del(dev.encode(), _handle_id(parent, 0xffffffff),
                      _handle_id(handle, 0)), 'qdisc del', extack=True)


def _band_dict(b):
    return {n: getattr(b, n) for n, _ in _BandStats._fields_}


def qdisc_stats(dev: str, parent: HandleLike = 'root',
                handle: Optional[HandleLike] = None) -> dict:
    """Options, totals, xstats and per-band statistics as a dict; a band's
    'deadline_us' is 0 if it is reliable."""
    st = _QdiscStats(size=ctypes.sizeof(_QdiscStats))
    _check(_qdisc_stats(dev.encode(), _handle_id(parent, 0xffffffff),
                        _handle_id(handle, 0), ctypes.byref(st)),
           'qdisc stats', extack=True)
    o = st.opts
    options = {}
    for name, bit in _QOPTS:
        if o.mask & bit:
            v = getattr(o, 'defband' if name == 'default' else name)
            options[name] = _METHOD_NAMES.get(v) if name == 'tag' else v
    return {
        'handle': _handle_str(st.handle),
        'parent': _handle_str(st.parent),
        'options': options,
        'total': _band_dict(st.total),
        'xstats': ({**{n: getattr(st.xstats, n) for n in _XSTATS},
                    'drops_deadline': st.drops_deadline,
                    'drops_tolerant': st.drops_tolerant}
                   if st.have_xstats else {}),
        'bands': [dict(_band_dict(st.band[i]), deadline_us=st.deadline_us[i])
                  for i in range(st.nbands)],
    }
