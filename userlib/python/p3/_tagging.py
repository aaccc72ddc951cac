# SPDX-License-Identifier: LGPL-2.1-or-later
"""Tagging sockets with a level for the sch_p3 qdisc (p3_tag_ex and
friends), and the tag method names that channels and qdiscs take too.
"""

import errno as _errno
from typing import Optional, Protocol, Union

from ._errors import _check
from ._libp3 import (_dscp_level, _level_dscp, _tag_config, _tag_ex, _tag_get,
                     _tag_method_name)


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


# What the calls take: a socket or its descriptor.
FdLike = Union[int, _HasFileno]

_METHODS = {None: 0, 'default': 0, 'dscp': 1, 'priority': 2, 'prio': 2,
            'mark': 3}
_METHOD_NAMES = {1: 'dscp', 2: 'priority', 3: 'mark'}


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
    """Tag a socket with level (by DSCP its code point, level_dscp(level);
    by priority or mark tag level + 1), verified."""
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


def level_dscp(level: int) -> int:
    """The DSCP code point that tags level (0..30) by method dscp."""
    return _check(_level_dscp(int(level)), 'level_dscp')


def dscp_level(dscp: int) -> Optional[int]:
    """The level a DSCP code point tags, or None (untagged)."""
    rc = _dscp_level(int(dscp))
    return None if rc < 0 else rc


def tag_config(method: str = 'dscp', notsent_lowat: int = 16384) -> None:
    """Process-wide default method and TCP_NOTSENT_LOWAT (0: leave)."""
    if method in (None, 'default'):
        raise ValueError('tag_config needs dscp, priority or mark')
    _check(_tag_config(_method(method), int(notsent_lowat)), 'tag_config')
