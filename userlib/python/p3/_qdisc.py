# SPDX-License-Identifier: LGPL-2.1-or-later
"""Control of the sch_p3 qdisc over netlink: add, change, replace and
delete it, and read its options and statistics as a dict.
"""

import ctypes
from typing import Any, Optional, Union

from ._errors import _check
from ._libp3 import _BandStats, _QdiscOpts, _QdiscStats, _XSTATS, \
    _qdisc_del, _qdisc_mod, _qdisc_stats
from ._tagging import _METHOD_NAMES, _method

# A qdisc handle as 'root', 'MAJ:' or 'MAJ:MIN' (hex), or the u32.
HandleLike = Union[str, int]

_QOPTS = (('bands', 1 << 0), ('default', 1 << 1), ('tag', 1 << 2),
          ('limit', 1 << 3), ('memory', 1 << 4), ('quantum', 1 << 5),
          ('rate', 1 << 6), ('buckets', 1 << 7), ('flows', 1 << 8))


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
    rate (bytes/s) buckets flows."""
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
                    'drops_tolerant': st.drops_tolerant,
                    'spilled': st.spilled}
                   if st.have_xstats else {}),
        'bands': [dict(_band_dict(st.band[i]), deadline_us=st.deadline_us[i])
                  for i in range(st.nbands)],
    }
