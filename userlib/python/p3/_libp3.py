# SPDX-License-Identifier: LGPL-2.1-or-later
"""libp3.so as ctypes sees it: found and loaded, its public structs
mirrored field by field (held to p3.h by test_python.py's LayoutTest),
and the prototype of every function the package calls.

The rest of the package speaks to C only through the names here; the
short type names (_u32, _vp, ...) keep the prototypes one line each.
"""

import ctypes
import ctypes.util
import os

MAX_BANDS = 64


def _candidates():
    """(path, what it is), in the order tried."""
    env = os.environ.get('P3_LIB')
    if env:
        yield env, 'P3_LIB'
    here = os.path.dirname(os.path.abspath(__file__))
    # pip's build puts it beside this file (setup.py).
    yield os.path.join(here, 'libp3.so'), 'built into the package'
    # userlib/python/p3 -> <repo>/build/userlib/libp3.so, only where this
    # is the source tree (a venv has no userlib/Makefile above it).
    if os.path.isfile(os.path.join(here, '..', '..', 'Makefile')):
        yield (os.path.normpath(os.path.join(here, '..', '..', '..', 'build',
                                             'userlib', 'libp3.so')),
               'the source tree\'s make')
    found = ctypes.util.find_library('p3')
    if found and found != 'libp3.so.1':
        yield found, 'the system\'s'
    yield 'libp3.so.1', 'the system\'s'


_FIX = '''To fix it, one of:
  pip: install make, a C compiler, pkg-config, libnl-3-dev and
       libnl-route-3-dev, then reinstall sch-p3 (its build puts libp3 in);
  Debian: apt install libp3-1;
  or set P3_LIB to the path of a libp3.so.'''


def _load():
    tried = []
    for path, what in _candidates():
        try:
            return ctypes.CDLL(path, use_errno=True)
        except OSError as e:
            # dlerror() names the path, or the library it needed that
            # failed (libnl): say the path once, then the reason.
            why = str(e)
            if why.startswith(path + ': '):
                why = why[len(path) + 2:]
            tried.append('  %s (%s): %s' % (path, what, why))
    raise ImportError('p3: cannot load libp3.so; tried:\n%s\n%s'
                      % ('\n'.join(tried), _FIX))


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
                ('peer_timeout_ms', _int), ('level_stride', _u64),
                ('checksum', _int)]


class _BufRef(ctypes.Structure):
    _fields_ = [('data', _vp), ('len', _u64)]


class _Completion(ctypes.Structure):
    _fields_ = [('tensor', _u32), ('iter', _u64), ('bytes', _u64),
                ('t_first_ns', _u64), ('t_done_ns', _u64)]


class _QdiscOpts(ctypes.Structure):
    _fields_ = [('size', _u32), ('mask', _u32), ('bands', _u8), ('defband', _u8),
                ('tag', _u8),
                ('limit', _u32), ('memory', _u32), ('quantum', _u32),
                ('rate', _u64), ('buckets', _u32), ('flows', _u32)]


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
                ('deadline_us', _u32 * MAX_BANDS), ('spilled', _u64)]


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
_level_dscp = _proto('p3_level_dscp', _int, _uint)
_dscp_level = _proto('p3_dscp_level', _int, _uint)
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
_send_plan_ref = _proto('p3_chan_send_plan_ref', _int, _vp, _P(_Slice), _size,
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
_next_batch = _proto('p3_chan_next_batch', _size, _vp, _P(_Completion), _size)
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
