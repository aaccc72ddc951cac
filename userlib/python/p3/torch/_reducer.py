# SPDX-License-Identifier: LGPL-2.1-or-later
"""The exchange's threads.  The reducer, woken by the channels'
descriptors, files what arrives, sums each owned message once every
rank's part is in (in rank order), sends the averages back, and marks
what is done for the main thread's waits (_exchange.py holds the state
they share).  With bounded loss, the pusher sends the pushes the
backward pass queued.

A peer whose channel fails (it closed, died, or its connection broke) is
lost, not the exchange: a rank that is done closes while the others may
still wait in the same last step for a third rank, and what it owed
them was delivered.  Data that arrived before the channel failed still
counts.
"""
import os
import selectors
import threading
import time

import numpy as np

import p3

from ._errors import PeerError


class Reducer:
    """Exchange's threads and their methods (a mixin: the state is
    Exchange's)."""

    def _start_threads(self):
        """The reducer, and the wire form's own threads (bounded loss's
        pusher sends the pushes the backward pass queued)."""
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._closing = False
        self._thread = threading.Thread(target=self._reducer, daemon=True,
                                        name='p3.torch reducer')
        self._thread.start()
        self.wire.start(self._fail)

    def _reducer(self):
        sel = selectors.DefaultSelector()
        try:
            for q, ch in self.mesh.rx.items():
                sel.register(ch.fileno(), selectors.EVENT_READ, q)
            sel.register(self._wake_r, selectors.EVENT_READ, None)
            fds, every = self.wire.fds()
            for fd in fds:
                sel.register(fd, selectors.EVENT_READ, 'wire')
            while not self._closing:
                for key, _ in sel.select(every):
                    if key.data is None:
                        os.read(self._wake_r, 4096)
                    elif key.data != 'wire':
                        if not self._drain(key.data):
                            sel.unregister(key.fd)
                for m, it in self.wire.drain():
                    self._pushed(m, it)
                with self.lock:
                    local, self._local = self._local, []
                for m, it in local:
                    self._reduce_if_complete(m, it)
        except p3.ClosedError:
            pass                    # close() ended us
        except Exception as e:
            self._fail(PeerError('p3.torch: rank %d lost its exchange with %s'
                                 % (self.rank, e)))
        finally:
            sel.close()

    def _fail(self, error):
        """A thread's error, handed to the main thread's next call."""
        with self.lock:
            if self.error is None:
                self.error = error
            self.cv.notify_all()

    def _lose(self, q, e):
        """Rank q's channel failed (e): a wait that needs q raises."""
        with self.lock:
            if q not in self.lost:
                self.lost[q] = PeerError(
                    'p3.torch: rank %d lost its exchange with rank %d: %s'
                    % (self.rank, q, e))
            self.cv.notify_all()

    def _send_to(self, q, send):
        """send() to rank q from the reducer; a failure loses q (ClosedError:
        close() ends the reducer)."""
        if q in self.lost:
            return              # gone: nothing it waits for can reach it
        try:
            send()
        except p3.ClosedError:
            raise
        except p3.Error as e:
            self._lose(q, e)

    def _drain(self, q):
        """File what rank q's channel has.  False once it has failed: q
        is lost, after what had arrived before is filed."""
        ch = self.mesh.rx[q]
        try:
            done = ch.poll(0)
        except p3.ClosedError:
            raise
        except p3.Error as e:
            # libp3 reports a connection's failure once, ahead of the
            # completions that came before it: take those too.
            done, err = [], e
            while True:
                try:
                    more = ch.poll(0)
                except p3.ClosedError:
                    raise
                except p3.Error:
                    break
                if not more:
                    break
                done += more
        else:
            err = None
        for c in done:
            self._arrived(q, c)
        if err is not None:
            self._lose(q, err)
        return err is None

    def _pushed(self, m, it, q=None):
        """A push of (a unit of) message m is in, whole (from rank q,
        where known: a bounded-loss push's datagrams do not say)."""
        with self.lock:
            self.push_left[m] -= 1
            if q is not None:
                self._pushes_from[(m, q)] += 1
        self._reduce_if_complete(m, it)

    def _arrived(self, q, c):
        # Wire ids: pushes 0..nu-1, averages nu..2nu-1, the wire form's
        # own beyond (_wire.py).
        nu, wire = self.units.n, self.wire
        if c.tensor < nu:
            if wire.push_counts(q, c.tensor):
                self._pushed(self.units.units[c.tensor].msg, c.iteration,
                             q if wire.counts_pushes_per_peer else None)
        elif c.tensor < 2 * nu:
            u = c.tensor - nu
            wire.pull_arrived(u, q)
            self._slices_done(self.units.units[u].slices)
        else:
            m = wire.other(q, c)
            if m is not None:
                self._pushed(m, c.iteration)

    def _reduce_if_complete(self, m, it):
        with self.lock:
            if self.push_left[m] or self.local_left[m]:
                return
            self.push_left[m] = len(self.units.of_msg[m]) * len(self.peers)
            self.local_left[m] = len(self.lay.msg_tensors[m])
            for q in self.peers:
                self._pushes_from[(m, q)] = 0
            self._reducing.add(m)   # owed to the peers until sent
        try:
            for u in self.units.of_msg[m]:
                self._sum(u)
            self._expect_pushes(m, it + 1)
            for q in self.peers:
                self._send_to(q, lambda: self._send(q, m, it, pull=True))
        except BaseException:
            with self.lock:
                self._reducing.discard(m)
            raise
        self._slices_done(self.lay.msgs[m], summed=m)

    def _sum(self, u):
        """Unit u's sum over the ranks, averaged as the reduction says,
        summed in rank order so that arrival order never changes a
        bit."""
        unit = self.units.units[u]
        dt = unit.dtype
        out = self._aflat[self.units.span(u)].view(dt)
        # float16 on the wire (Compression.fp16) is summed in float32.
        sdt = self.reduction.sum_dtype(dt)
        kw = {} if sdt == dt else {'dtype': sdt}
        acc = self.wire.accumulator(u, out, sdt)
        first = None
        for r in range(self.world):
            part = self.wire.part(r, u, dt)
            # Rank 0's part is held until rank 1's comes, so that the
            # first sum reads both where they are (no copy to acc first).
            if r == 0:
                first = part
            elif r == 1:
                np.add(first, part, out=acc, **kw)
            else:
                np.add(acc, part, out=acc, **kw)
        if self.world == 1:
            np.copyto(acc, first)
        self.reduction.finish(acc, self.world)
        if acc.dtype != dt:
            np.copyto(out, acc, casting='same_kind')
        self.wire.summed(u, acc, out)

    def _slices_done(self, slices, summed=None):
        """slices are averaged; summed: the owned message they are, which
        is then no longer being summed (in one step, so that a wait
        never finds it neither)."""
        with self.lock:
            self._reducing.discard(summed)
            for s in slices:
                t = self.lay.slices[s].tensor
                self.slice_done[s] = True
                self.tensor_left[t] -= 1
                # Steps finish in order (a step's slices need the last
                # step's updates), so every len(grad) tensors is a step.
                if not self.tensor_left[t]:
                    self._zeroed += 1
                    if self._zeroed % len(self.grad) == 0:
                        self.done_at.append(time.monotonic())
            self.cv.notify_all()

    def deliver_owed(self):
        """What this rank owes the others before it closes: the averages
        of the messages it owns whose local part is in, summed and sent
        once the pushes come (a peer may wait for them after this rank's
        last step, as a rank-0-only save after training does).  Bounded
        by the timeout; over at once when the exchange failed, a wait
        timed out (a silent peer stays silent), or a push it waits for
        is a lost peer's (one that closed cleanly had sent them all)."""
        deadline = time.monotonic() + self.timeout
        with self.cv:
            while not (self.error or self.timed_out):
                owed = [m for m in self.owned if self.local_left[m] == 0]
                if not (self._reducing or self._local or owed):
                    return
                if self.lost and (not self.wire.counts_pushes_per_peer or any(
                        q in self.lost for m in owed
                        for q in self._pushes_missing(m))):
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.cv.wait(left)

    def _pushes_missing(self, m):
        """The peers whose push of owned message m is not all in."""
        whole = len(self.units.of_msg[m])
        return [q for q in self.peers if self._pushes_from[(m, q)] < whole]

    def finish_pushes(self):
        """Send what the wire form's threads hold, then stop them."""
        self.wire.finish()

    def close(self):
        self.finish_pushes()
        self._closing = True
        os.write(self._wake_w, b'x')
        self._thread.join(self.timeout)
        os.close(self._wake_r)
        os.close(self._wake_w)
