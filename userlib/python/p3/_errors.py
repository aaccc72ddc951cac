# SPDX-License-Identifier: LGPL-2.1-or-later
"""p3.Error and its subclasses, and the check that turns a libp3 return
code into one: each subclass also derives from the builtin exception of
its kind, so `except TimeoutError` catches a p3 timeout as well.
"""

import builtins
import errno as _errno

from ._libp3 import _last_extack, _strerror

ERRBASE = 0x3000


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
