# SPDX-License-Identifier: LGPL-2.1-or-later
"""Channel: one end of a multi-band channel, sending tensors (copied or
by reference) and plans, or receiving them into registered buffers and
handing back their completions.
"""

import collections
import ctypes
import errno as _errno
import threading
import time
from typing import Iterable, Mapping, Optional, Sequence, Union

from ._buffers import BufferLike, _Buf
from ._chan_opts import _opts
from ._clock import Timeout, _ms
from ._closing import _Closing
from ._errors import ClosedError, _CODES, _check, _error
from ._libp3 import _Completion, _band_status, _bands, _cancel, _chan_fd, _chan_id, _close, _connect, _expect, _flush, _next_batch, \
    _pending, _poll, _queued, _send, _send_plan, _send_plan_ref, _send_ref, _shutdown, _vp
from ._plan import Plan
from ._planner import Slice

Completion = collections.namedtuple('Completion',
                                    'tensor iteration bytes t_first t_done')


class Channel(_Closing):
    """One end of a multi-band channel (Channel.connect or Listener.accept).

    Every method may be called from any thread.  close() from one thread
    ends the calls blocked in others: they raise ClosedError.  With
    progress=True (the default) libp3's engine (one thread for the
    process's channels) moves the data, so a sender may queue and go back
    to computing; fileno() then serves selectors and event loops.
    """

    def __init__(self, handle: int) -> None:
        self._h = handle
        self._bufs = {}
        self._sent_refs = {}    # (tensor, iteration): buffers the library reads
        # Every call takes _lock twice (_call): a bare Lock, entered from
        # C, where a Condition's with-block runs Python; _mu is only for
        # close() to wait on the calls still inside.
        self._lock = threading.Lock()
        self._mu = threading.Condition(self._lock)
        self._users = 0

    @classmethod
    def connect(cls, host: str, port: Union[int, str], bands: int = 8,
                method: Optional[str] = None, chan_id: int = 0,
                max_queued: int = 64 << 20, max_payload: int = 16 << 20,
                timeout: Timeout = 10.0, progress: bool = True,
                peer_timeout: Timeout = 30.0,
                level_stride: int = 1, checksum: bool = True) -> 'Channel':
        """Band b's sockets carry level b * level_stride (the Listener
        must use the same): 2 leaves every other level to datagrams.
        checksum=False: each frame's CRC32C covers its header only, the
        payload left to TCP's checksum (the receiver needs libp3 1.4)."""
        o = _opts(bands, method, chan_id, max_queued, max_payload, timeout,
                  progress, peer_timeout, level_stride, checksum)
        h = _vp()
        _check(_connect(str(host).encode(), str(port).encode(),
                        ctypes.byref(o), ctypes.byref(h)), 'connect')
        return cls(h.value)

    def _call(self, fn, *args):
        """fn(handle, *args), the handle held open for the call's length:
        close() waits for it instead of freeing it under the call."""
        with self._lock:
            h = self._h
            if not h:
                raise ClosedError(_CODES['ECLOSED'], 'channel is closed')
            self._users += 1
        try:
            return fn(h, *args)
        finally:
            with self._lock:
                self._users -= 1
                # Only a close() in progress (it cleared _h) waits.
                if not self._users and self._h is None:
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
        self._send_held('send', [key], b, _send_ref, int(level), int(prio),
                        key[1], key[0], int(offset), b.ptr, b.nbytes,
                        _ms(timeout))

    def _send_held(self, what, keys, held, fn, *args):
        """fn(handle, *args), a by-reference send (what names it in an
        error) whose completions name keys: held (what keeps the memory
        exported) is kept under each until its completion is taken, or
        dropped if the send fails."""
        with self._lock:
            for k in keys:
                self._sent_refs.setdefault(k, []).append(held)
        try:
            _check(self._call(fn, *args), what)
        except BaseException:
            with self._lock:
                for k in keys:
                    self._unref_locked(k)
            raise

    def _unref(self, key):
        with self._lock:
            self._unref_locked(key)

    def _unref_locked(self, key):
        refs = self._sent_refs.get(key)
        if refs:
            refs.pop()
            if not refs:
                del self._sent_refs[key]

    @property
    def sending(self) -> int:
        """Buffers sent with copy=False that the library may still read."""
        with self._lock:
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
        plan = Plan(slices, arrays)
        if plan.n:
            self.send_prepared(plan, iteration, timeout)

    def send_prepared(self, plan: 'Plan', iteration: int = 0,
                      timeout: Timeout = None, copy: bool = True) -> None:
        """send_plan() of a Plan built once: a plan sent every step from
        the same buffers costs one call, not a walk of its slices.  With
        copy=False its buffers are written from where they are (by the
        progress engine's thread, if the channel has one): each message
        holds them until its completion (tensor: the message's first,
        plan.heads), taken by poll(), wait_sent() or flush()."""
        if copy:
            _check(self._call(_send_plan, plan.cs, plan.n, plan.refs,
                              len(plan.refs), int(iteration), _ms(timeout)),
                   'send_plan')
            return
        self._send_held('send_plan',
                        [(t, int(iteration)) for t in plan.heads], plan,
                        _send_plan_ref, plan.cs, plan.n, plan.refs,
                        len(plan.refs), int(iteration), _ms(timeout))

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
        """Receive tensor (iteration) into array, a writable buffer, or a
        p3.Buffer(array, writable=True) exported once for every step's
        expect() of the same memory."""
        b = (array if isinstance(array, _Buf) and array.writable
             else _Buf(array, writable=True))
        if not b.nbytes:
            raise ValueError('p3: cannot receive into an empty buffer')
        key = (int(tensor), int(iteration))
        # Held until its completion is popped: the library writes into it.
        # Filed first, so that a completion racing in from the progress
        # thread always finds it.
        with self._lock:
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
        with self._lock:
            for key in [k for k in self._bufs if k[0] == int(tensor)]:
                del self._bufs[key]

    def _release(self, tensor, iteration, newest=False):
        with self._lock:
            self._release_locked((tensor, iteration), newest)

    def _release_locked(self, key, newest=False):
        q = self._bufs.get(key)
        if q:
            q.pop() if newest else q.popleft()
            if not q:
                del self._bufs[key]

    _BATCH = 64

    def _take(self, h):
        """Every completion ready, _BATCH to a call into libp3."""
        done = []
        batch = (_Completion * self._BATCH)()
        while True:
            n = _next_batch(h, batch, self._BATCH)
            done += [Completion(c.tensor, c.iter, c.bytes, c.t_first_ns,
                                c.t_done_ns) for c in batch[:n]]
            if n < self._BATCH:
                return done

    def poll(self, timeout: Timeout = 0.0) -> list:
        """Move data (or, with progress, wait for it) up to timeout
        seconds; returns the completions that are ready."""
        _check(self._call(_poll, _ms(timeout)), 'poll')
        done = self._call(self._take)
        if done:
            with self._lock:
                for d in done:
                    key = (d.tensor, d.iteration)
                    # A sender's completions are its copy=False buffers'.
                    if key in self._sent_refs:
                        self._unref_locked(key)
                    else:
                        self._release_locked(key)
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
        misses none, even when the progress engine completes the last
        ones after a poll."""
        with self._lock:
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
