# SPDX-License-Identifier: LGPL-2.1-or-later
"""One step's gradient exchange: push every slice to its owner, sum it there
in rank order, pull the average back.

The main thread hands in gradients (backward hooks) and takes finished
tensors; the reducer thread (_reducer.py) files what arrives, sums what
is complete and sends the results.  Buffers are registered one step
ahead only when the step that used them is over, so a peer can never
overwrite data still being read (libp3 holds a frame for an
unregistered tensor until it is registered).  A message's slices are
adjacent in the flat buffers (_flat.py), and travel, are registered and
are summed as one unit (_layout.Units).

How a unit travels, is registered and is summed is its wire form's
(_wire.py): dense by reference, Slim-DP's chosen elements, or bounded
loss's datagrams plus their largest elements.

A wait raises for a lost peer only while something it waits for still
needs that peer: the averages of a message the peer owns, or the pushes
of one this rank owns.
"""
import collections
import os
import threading
import time

import p3

from ._errors import PeerError, StepTimeout
from ._flat import flat
from ._layout import Units
from ._reducer import Reducer


class Exchange(Reducer):
    def __init__(self, mesh, layout, rank, world, params, timeout,
                 reduction, wire):
        """wire: the wire form (_wire.py: Dense, Sparse, BoundedLoss)."""
        self.mesh, self.lay = mesh, layout
        self.rank, self.world, self.timeout = rank, world, timeout
        self.peers = sorted(mesh.tx)
        self.reduction = reduction
        dtypes = reduction.dtypes(params)
        self.params = params
        self.units = un = Units(layout, dtypes,
                                whole_messages=wire.whole_messages)
        # Local gradients, and averages (at 0 first: Slim-DP's first
        # choice reads them as the last step's).
        self._gflat, self.grad, self._gbytes = flat(un, params, dtypes)
        self._aflat, self.avg, self._abytes = flat(un, params, dtypes)
        self._gshaped = [g.view(p.shape) for g, p in zip(self.grad, params)]
        self.avg_shaped = [a.view(p.shape) for a, p in zip(self.avg, params)]
        self.owned = set(layout.owned(rank))
        self.wire = wire
        wire.attach(self)
        # Where each unit another rank owns receives its averages,
        # exported once (p3.Buffer) and re-armed every step.
        self._pull_bufs = {
            u: p3.Buffer(wire.pull_buffer(u), writable=True)
            for u in range(un.n) if layout.owner[un.units[u].msg] != rank}
        # Gradient payload bytes sent, one counter per writer: pushed (or
        # queued for the pusher) by the main thread, averages returned and
        # chunks sent again by the reducer.
        self.bytes_pushed = 0
        self.bytes_returned = 0
        self.bytes_resent = 0
        # Taken as a bare Lock (entered from C: a Condition's with-block
        # runs Python), several times per message; cv waits on it.
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.error = None           # the exchange's own failure: always raised
        self.lost = {}              # peer: its PeerError (its channel failed)
        self.slice_done = [False] * layout.ns   # averaged, this step
        self._local = []            # owned messages whose local part is in
        self._reducing = set()      # owned messages being summed and sent
        # Units of each owned message in from each peer, this step.
        self._pushes_from = collections.Counter()
        self.timed_out = False      # a wait raised StepTimeout
        self._reset_counts()
        # Main thread only: per unit another rank owns, its tensors not yet
        # applied this step (its averages' buffer is still being read).
        self._apply_left = [len(ts) for ts in un.tensors]
        self.seen = [False] * len(params)   # gradient in, this step
        self.done_at = []           # when each step's last tensor was in
        self._zeroed = 0
        for m in layout.msgs:
            self._expect_pushes(m, 0)
        for u in range(un.n):
            self._expect_pull(u, 0)
        self._start_threads()

    # ------------------------------------------------------------ counts

    def _reset_counts(self):
        lay = self.lay
        self.local_left = {m: len(t) for m, t in lay.msg_tensors.items()}
        self.push_left = {m: len(self.units.of_msg[m]) * len(self.peers)
                          for m in self.owned}
        self.tensor_left = [len(sl) for sl in lay.tensor_slices]

    def _expect_pushes(self, m, it):
        if m not in self.owned:
            return
        for u in self.units.of_msg[m]:
            for q in self.peers:
                self.wire.expect_push(q, u, it)

    def _expect_pull(self, u, it):
        """Unit u's averages for step it, if another rank owns it."""
        owner = self.lay.owner[self.units.units[u].msg]
        if owner != self.rank:
            self.wire.expect_pull(u, owner, it, self._pull_bufs[u])

    def _send(self, q, m, it, pull):
        """Message m to rank q: local gradients (push) or averages (pull)."""
        n = self.wire.send(q, m, it, pull)
        if pull:
            self.bytes_returned += n
        else:
            self.bytes_pushed += n

    # --------------------------------------------------- the main thread

    def gradient(self, i, grad, it):
        """Backward produced parameter i's gradient for step it."""
        self.wire.before_gradient(i, time.monotonic() + self.timeout)
        self._gshaped[i].copy_(grad)
        self.reduction.scale_local(self._gshaped[i])
        self.wire.after_gradient(i, it)
        pushes, local = [], False
        with self.lock:
            self._raise()
            if self.lost:           # a backward hook runs once per tensor
                self._raise_lost(self.lay.owner[m]
                                 for m in self.lay.tensor_msgs[i])
            self.seen[i] = True
            for m in self.lay.tensor_msgs[i]:
                self.local_left[m] -= 1
                if self.local_left[m]:
                    continue
                if self.lay.owner[m] == self.rank:
                    # The reducer resets the count when it has summed.
                    # While pushes are due it sums on the last one; else
                    # it is woken, once for what queues before it looks
                    # (a wake-up costs the GIL a round trip).
                    if self.push_left[m]:
                        continue
                    local = local or not self._local
                    self._local.append((m, it))
                else:
                    self.local_left[m] = len(self.lay.msg_tensors[m])
                    pushes.append(m)
        if local:
            os.write(self._wake_w, b'x')
        for m in pushes:
            try:
                self._send(self.lay.owner[m], m, it, pull=False)
            except p3.Error as e:
                raise PeerError('p3.torch: rank %d cannot push to rank %d: %s'
                                % (self.rank, self.lay.owner[m], e)) from e

    def end_step(self):
        """Backward is over: the parameters it produced no gradient for
        (their slices could never be complete)."""
        with self.lock:
            missing = [i for i, seen in enumerate(self.seen) if not seen]
            self.seen = [False] * len(self.seen)
            self.timed_out = False      # a step past a caught StepTimeout
            return missing

    def wait(self, indices, deadline):
        """Block until tensors indices are averaged; raise on a peer's
        failure or at the deadline (time.monotonic())."""
        with self.lock:
            while True:
                # Data that arrived counts even if its sender left since.
                if all(self.tensor_left[i] == 0 for i in indices):
                    return
                self._raise()
                if self.lost:
                    self._raise_lost(self._needs(indices))
                left = deadline - time.monotonic()
                if left <= 0:
                    self.timed_out = True   # deliver_owed() waits no more
                    raise StepTimeout(
                        'p3.torch: rank %d waited %.0f s for %d gradients'
                        % (self.rank, self.timeout,
                           sum(1 for i in indices if self.tensor_left[i])))
                self.cv.wait(left)

    def done_now(self):
        """The tensors averaged already.  A peer's failure is not raised
        here: the next wait() that needs that peer raises it."""
        with self.lock:
            return [i for i, n in enumerate(self.tensor_left) if n == 0]

    def recycle(self, indices, it):
        """Tensors indices were applied for step it: take step it + 1's
        (a unit's averages once all its tensors are applied)."""
        with self.lock:
            for i in indices:
                self.tensor_left[i] = len(self.lay.tensor_slices[i])
                for s in self.lay.tensor_slices[i]:
                    self.slice_done[s] = False
        un = self.units
        for i in indices:
            for u in un.of_tensor[i]:
                self._apply_left[u] -= 1
                if not self._apply_left[u]:
                    self._apply_left[u] = len(un.tensors[u])
                    self._expect_pull(u, it + 1)

    def _raise(self):
        if self.error is not None:
            raise self.error

    def _raise_lost(self, peers):
        """The error of the peer lost first among peers, if one is (a
        rank that raised for a lost peer and left is lost after it)."""
        need = set(peers)
        for q, e in self.lost.items():
            if q in need:
                raise e

    def _needs(self, indices):
        """The peers the slices of tensors indices not yet averaged this
        step wait for: each one's owner, and for the ones this rank owns
        and is not summing yet, every peer (their pushes).  Under lock."""
        for i in indices:
            if not self.tensor_left[i]:
                continue
            for s in self.lay.tensor_slices[i]:
                if self.slice_done[s]:
                    continue
                m = self.lay.slices[s].msg
                owner = self.lay.owner[m]
                if owner != self.rank:
                    yield owner
                elif m not in self._reducing:   # else every push is in
                    yield from self.peers
