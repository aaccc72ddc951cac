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

With Slim-DP (_slimdp.py), a slice travels as the elements every rank
chose for this step (_sparse.py's wire form) both ways: the owner sums
those and returns their average, zero elsewhere.  With bounded loss
(DLCP, _dlcp.py), a push travels as datagrams plus its largest elements
over the channel; the owner sums it once both parts (and any chunks it
had to ask for again) are in.

A wait raises for a lost peer only while something it waits for still
needs that peer: the averages of a message the peer owns, or the pushes
of one this rank owns.
"""
import collections
import os
import threading
import time

import numpy as np

import p3

from ._errors import PeerError, StepTimeout
from ._flat import flat
from ._layout import Units
from ._reducer import Reducer


class Exchange(Reducer):
    def __init__(self, mesh, layout, rank, world, params, timeout,
                 reduction, sparse=None, lossy=None):
        self.mesh, self.lay = mesh, layout
        self.rank, self.world, self.timeout = rank, world, timeout
        self.peers = sorted(mesh.tx)
        self.reduction = reduction
        dtypes = reduction.dtypes(params)
        self.sparse = sparse
        self.lossy = lossy
        self.params = params
        self.units = un = Units(layout, dtypes,
                                whole_messages=not (sparse or lossy))
        # Local gradients, and averages (at 0 first: Slim-DP's first
        # choice reads them as the last step's).
        self._gflat, self.grad, self._gbytes = flat(un, params, dtypes)
        self._aflat, self.avg, self._abytes = flat(un, params, dtypes)
        self._gshaped = [g.view(p.shape) for g, p in zip(self.grad, params)]
        self.avg_shaped = [a.view(p.shape) for a, p in zip(self.avg, params)]
        self.owned = set(layout.owned(rank))
        # A push as it arrives: dense, sparse, or a bounded-loss push's
        # reliable part (its datagrams land in lossy's buffers); with
        # either, a unit is a slice.
        self.recv = {}
        for m in self.owned:
            for u in un.of_msg[m]:
                n = (lossy.reliable_bytes(u) if lossy else
                     sparse.wire_bytes(u) if sparse else
                     un.units[u].end - un.units[u].start)
                for q in self.peers:
                    self.recv[(q, u)] = np.empty(n, np.uint8)
        # Each receive buffer exported once (p3.Buffer), re-armed every
        # step by expect(): not exported and released again a step.
        self._rx_bufs = {k: p3.Buffer(a, writable=True)
                         for k, a in self.recv.items()}
        # Sparse only: each slice's outgoing wire form (pushed by the main
        # thread if another rank owns it, returned by the reducer if this
        # one does: never both) and, for others' slices, the reply.
        wire = ([sparse.wire_bytes(s) for s in range(layout.ns)]
                if sparse else [])
        self._out = [np.empty(n, np.uint8) for n in wire]
        self._reply = {s: np.empty(n, np.uint8) for s, n in enumerate(wire)
                       if layout.owner[layout.slices[s].msg] != rank}
        # Gradient payload bytes sent, one counter per writer: pushed (or
        # queued for the pusher) by the main thread, averages returned and
        # chunks sent again by the reducer.
        self.bytes_pushed = 0
        self.bytes_returned = 0
        self._plans = {}            # (peer, message, pull): its p3.Plan
        # Dense messages go by reference: libp3's engine thread writes
        # them from the flat buffers, and each is written again only once
        # its send's completion is in.  Pushes: message: the peer whose
        # channel may still read its gradients (set by the main thread,
        # which waits in _free_push); averages: (peer, message) (set by
        # the reducer, which waits in _free_pulls).  Either thread takes
        # the completions it finds (_sent); dict operations are atomic.
        self._pushing = {}
        self._pulling = set()
        self._by_ref = not (sparse or lossy)
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
        self._pull_bufs = {u: p3.Buffer(self._aflat[un.span(u)], writable=True)
                           for u in range(un.n)
                           if layout.owner[un.units[u].msg] != rank}
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
                if self.lossy:
                    self.lossy.expect_push(q, u, it, self.recv[(q, u)])
                else:
                    self.mesh.rx[q].expect(u, self._rx_bufs[(q, u)], it)

    def _expect_pull(self, u, it):
        """Unit u's averages for step it, if another rank owns it."""
        unit = self.units.units[u]
        owner = self.lay.owner[unit.msg]
        if owner == self.rank:
            return
        buf = (self._reply[u] if self.sparse else self._pull_bufs[u])
        self.mesh.rx[owner].expect(self.units.n + u, buf, it)
        if self.lossy:
            self.lossy.expect_asks(u, it)

    def _send(self, q, m, it, pull):
        """Message m to rank q: local gradients (push) or averages (pull)."""
        if self.lossy and not pull:
            self.bytes_pushed += self.lossy.push(q, m, it, self._gbytes,
                                                 self.timeout)
            return
        # A dense message reads the same buffers every step: its plan is
        # built once.  A sparse one's size follows the step's choice.
        plan = None if self.sparse else self._plans.get((q, m, pull))
        if plan is None:
            plan = self._plan(m, pull)
            if not self.sparse:
                self._plans[(q, m, pull)] = plan
        if self._by_ref:
            if pull:
                self._pulling.add((q, m))
            else:
                self._pushing[m] = q
        self.mesh.tx[q].send_prepared(plan, iteration=it,
                                      timeout=self.timeout,
                                      copy=not self._by_ref)
        if pull:
            self.bytes_returned += plan.bytes
        else:
            self.bytes_pushed += plan.bytes

    def _plan(self, m, pull):
        un, slices, arrays = self.units, [], {}
        for u in un.of_msg[m]:
            unit = un.units[u]
            wire = un.n + u if pull else u
            if self.sparse:             # a unit is a slice
                # A reply was encoded once, by _sum, for every peer.
                t = self.lay.slices[u].tensor
                data = self._out[u] if pull else self.sparse.encode(
                    u, self.sparse.values(u, self.grad[t].numpy()),
                    self._out[u])
            else:
                flat = self._aflat if pull else self._gflat
                data = flat[un.span(u)]
            slices.append(p3.Slice(wire, 0, data.nbytes, unit.level, m,
                                   unit.prio))
            arrays[wire] = data
        return p3.Plan(slices, arrays)

    # --------------------------------------------------- the main thread

    def _sent(self, q, timeout):
        """Take the completions of what this rank sent rank q by
        reference, waiting up to timeout s for one."""
        nu = self.units.n
        for c in self.mesh.tx[q].poll(timeout):
            if c.tensor < nu:
                self._pushing.pop(self.units.units[c.tensor].msg, None)
            else:
                self._pulling.discard((q, self.units.units[c.tensor - nu].msg))

    def _free_push(self, m, deadline):
        """Wait until no channel reads message m's pushed gradients: the
        last step's push by reference is written (or its band failed)."""
        while True:
            q = self._pushing.get(m)
            if q is None:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                raise StepTimeout('p3.torch: rank %d waited %.0f s to send '
                                  'to rank %d' % (self.rank, self.timeout, q))
            try:
                self._sent(q, min(left, 0.5))
            except p3.Error as e:
                raise PeerError('p3.torch: rank %d cannot push to rank %d: %s'
                                % (self.rank, q, e)) from e

    def gradient(self, i, grad, it):
        """Backward produced parameter i's gradient for step it."""
        if self._pushing:
            deadline = time.monotonic() + self.timeout
            for m in self.lay.tensor_msgs[i]:
                self._free_push(m, deadline)
        self._gshaped[i].copy_(grad)
        self.reduction.scale_local(self._gshaped[i])
        if self.sparse:
            # The parameter and the average hold the last step's update
            # here (the forward that led here applied it), the same bits
            # on every rank: so is the choice.
            self.sparse.select(i, self.params[i].detach().reshape(-1).numpy(),
                               self.avg[i].numpy(), it)
            self.sparse.feedback(i, self.grad[i].numpy())
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
