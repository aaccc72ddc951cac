# SPDX-License-Identifier: LGPL-2.1-or-later
"""One step's gradient exchange: push every slice to its owner, sum it there
in rank order, pull the average back.

The main thread hands in gradients (backward hooks) and takes finished
tensors; a reducer thread, woken by the channels' descriptors, files what
arrives, sums what is complete and sends the results.  Buffers are
registered one step ahead only when the step that used them is over, so
a peer can never overwrite data still being read (libp3 holds a frame for
an unregistered tensor until it is registered).

With a sparsifier (Slim-DP, _slimdp.py), a slice travels as the elements
every rank chose for this step (_sparse.py's wire form) both ways: the
owner sums those elements and returns their average, zero elsewhere.

With bounded loss (DLCP, _dlcp.py), a push travels as datagrams plus its
largest elements over the channel; the owner sums it once both parts
(and any chunks it had to ask for again) are in.

A peer whose channel fails (it closed, died, or its connection broke) is
lost, not the exchange: a rank that is done closes while the others may
still wait in the same last step for a third rank, and what it owed
them was delivered.  A wait raises for a lost peer only while something
it waits for still needs that peer: the averages of a message the peer
owns, or the pushes of one this rank owns.  Data that arrived before
the channel failed still counts.
"""
import os
import selectors
import threading
import time

import numpy as np
import torch

import p3

from . import _sparse


class PeerError(ConnectionError):
    """A peer left, broke its connection or sent something wrong."""


class StepTimeout(TimeoutError):
    """A step's gradients did not arrive within the timeout."""


_NP = {torch.float32: np.float32, torch.float64: np.float64,
       torch.float16: np.float16}
# numpy has no bfloat16: such gradients travel and are summed as float32,
# which also keeps the sum from rounding at every rank's addition.
_WIRE = {torch.bfloat16: torch.float32}


def wire_dtype(dtype):
    """The torch dtype a parameter's gradient travels and is summed in."""
    return _WIRE.get(dtype, dtype)


def np_dtypes(params):
    """The numpy dtype each parameter's gradient travels in; TypeError for
    one p3.torch cannot sum."""
    for p in params:
        if wire_dtype(p.dtype) not in _NP:
            raise TypeError('p3.torch: %s parameters are not supported'
                            % p.dtype)
    return [np.dtype(_NP[wire_dtype(p.dtype)]) for p in params]


class Exchange:
    def __init__(self, mesh, layout, rank, world, params, timeout,
                 sparse=None, lossy=None):
        self.mesh, self.lay = mesh, layout
        self.rank, self.world, self.timeout = rank, world, timeout
        self.peers = sorted(mesh.tx)
        np_dtypes(params)
        self.sparse = sparse
        self.lossy = lossy
        self.params = params
        # Flat local gradients and averages, one per parameter (averages
        # start at 0: Slim-DP's first choice reads them as the last step's).
        self.grad = [torch.empty(p.numel(), dtype=wire_dtype(p.dtype))
                     for p in params]
        self.avg = [torch.zeros(p.numel(), dtype=wire_dtype(p.dtype))
                    for p in params]
        self._gbytes = [g.numpy().view(np.uint8) for g in self.grad]
        self._abytes = [a.numpy().view(np.uint8) for a in self.avg]
        self.owned = set(layout.owned(rank))
        wire = [sparse.wire_bytes(s) if sparse else sl.length
                for s, sl in enumerate(layout.slices)]
        # A push as it arrives: dense, sparse, or a bounded-loss push's
        # reliable part (its datagrams land in lossy's buffers).
        push_wire = [lossy.reliable_bytes(s) if lossy else wire[s]
                     for s in range(layout.ns)]
        self.recv = {}
        for m in self.owned:
            for s in layout.msgs[m]:
                for q in self.peers:
                    self.recv[(q, s)] = np.empty(push_wire[s], np.uint8)
        # Sparse only: each slice's outgoing wire form (pushed by the main
        # thread if another rank owns it, returned by the reducer if this
        # one does: never both) and, for others' slices, the reply.
        self._out = [np.empty(n, np.uint8) for n in wire] if sparse else None
        self._reply = {s: np.empty(wire[s], np.uint8)
                       for s in range(layout.ns)
                       if sparse and layout.owner[layout.slices[s].msg] != rank}
        # Gradient payload bytes sent, one counter per writer: pushed (or
        # queued for the pusher) by the main thread, averages returned and
        # chunks sent again by the reducer.
        self.bytes_pushed = 0
        self.bytes_returned = 0
        self._plans = {}            # (peer, message, pull): its p3.Plan
        self.bytes_resent = 0
        self.cv = threading.Condition()
        self.error = None           # the exchange's own failure: always raised
        self.lost = {}              # peer: its PeerError (its channel failed)
        self.slice_done = [False] * layout.ns   # averaged, this step
        self._local = []            # owned messages whose local part is in
        self._reset_counts()
        self.seen = [False] * len(params)   # gradient in, this step
        self.done_at = []           # when each step's last tensor was in
        self._zeroed = 0
        for m in layout.msgs:
            self._expect_pushes(m, 0)
        for i in range(len(params)):
            self._expect_pulls(i, 0)
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._closing = False
        self._thread = threading.Thread(target=self._reducer, daemon=True,
                                        name='p3.torch reducer')
        self._thread.start()
        self._pusher = None
        if lossy:
            self._pusher = threading.Thread(target=self._run_pusher,
                                            daemon=True,
                                            name='p3.torch pusher')
            self._pusher.start()

    # ------------------------------------------------------------ counts

    def _reset_counts(self):
        lay = self.lay
        self.local_left = {m: len(t) for m, t in lay.msg_tensors.items()}
        self.push_left = {m: len(lay.msgs[m]) * len(self.peers)
                          for m in self.owned}
        self.tensor_left = [len(sl) for sl in lay.tensor_slices]

    def _slice_view(self, buf, s):
        sl = self.lay.slices[s]
        return buf[sl.offset:sl.offset + sl.length]

    def _expect_pushes(self, m, it):
        if m not in self.owned:
            return
        for s in self.lay.msgs[m]:
            for q in self.peers:
                if self.lossy:
                    self.lossy.expect_push(q, s, it, self.recv[(q, s)])
                else:
                    self.mesh.rx[q].expect(s, self.recv[(q, s)], it)

    def _expect_pulls(self, i, it):
        for s in self.lay.tensor_slices[i]:
            owner = self.lay.owner[self.lay.slices[s].msg]
            if owner != self.rank:
                buf = (self._reply[s] if self.sparse
                       else self._slice_view(self._abytes[i], s))
                self.mesh.rx[owner].expect(self.lay.ns + s, buf, it)
                if self.lossy:
                    self.lossy.expect_asks(s, it)

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
        self.mesh.tx[q].send_prepared(plan, iteration=it,
                                      timeout=self.timeout)
        if pull:
            self.bytes_returned += plan.bytes
        else:
            self.bytes_pushed += plan.bytes

    def _plan(self, m, pull):
        lay, slices, arrays = self.lay, [], {}
        for s in lay.msgs[m]:
            sl = lay.slices[s]
            wire = lay.ns + s if pull else s
            if self.sparse:
                # A reply was encoded once, by _sum, for every peer.
                data = self._out[s] if pull else self.sparse.encode(
                    s, self.sparse.values(s, self.grad[sl.tensor].numpy()),
                    self._out[s])
            else:
                src = (self._abytes if pull else self._gbytes)[sl.tensor]
                data = self._slice_view(src, s)
            slices.append(p3.Slice(wire, 0, data.nbytes, sl.level, m, sl.prio))
            arrays[wire] = data
        return p3.Plan(slices, arrays)

    # --------------------------------------------------- the main thread

    def gradient(self, i, grad, it):
        """Backward produced parameter i's gradient for step it."""
        self.grad[i].copy_(grad.reshape(-1))
        if self.sparse:
            # The parameter and the average hold the last step's update
            # here (the forward that led here applied it), the same bits
            # on every rank: so is the choice.
            self.sparse.select(i, self.params[i].detach().reshape(-1).numpy(),
                               self.avg[i].numpy(), it)
            self.sparse.feedback(i, self.grad[i].numpy())
        pushes, local = [], False
        with self.cv:
            self._raise()
            self._raise_lost(self.lay.owner[m]
                             for m in self.lay.tensor_msgs[i])
            self.seen[i] = True
            for m in self.lay.tensor_msgs[i]:
                self.local_left[m] -= 1
                if self.local_left[m]:
                    continue
                if self.lay.owner[m] == self.rank:
                    # The reducer resets the count when it has summed.
                    # It is woken once for what queues before it looks
                    # (a wake-up costs the GIL a round trip).
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
        with self.cv:
            missing = [i for i, seen in enumerate(self.seen) if not seen]
            self.seen = [False] * len(self.seen)
            return missing

    def wait(self, indices, deadline):
        """Block until tensors indices are averaged; raise on a peer's
        failure or at the deadline (time.monotonic())."""
        with self.cv:
            while True:
                # Data that arrived counts even if its sender left since.
                if all(self.tensor_left[i] == 0 for i in indices):
                    return
                self._raise()
                if self.lost:
                    self._raise_lost(self._needs(indices))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StepTimeout(
                        'p3.torch: rank %d waited %.0f s for %d gradients'
                        % (self.rank, self.timeout,
                           sum(1 for i in indices if self.tensor_left[i])))
                self.cv.wait(left)

    def done_now(self):
        """The tensors averaged already.  A peer's failure is not raised
        here: the next wait() that needs that peer raises it."""
        with self.cv:
            return [i for i, n in enumerate(self.tensor_left) if n == 0]

    def recycle(self, indices, it):
        """Tensors indices were applied for step it: take step it + 1's."""
        with self.cv:
            for i in indices:
                self.tensor_left[i] = len(self.lay.tensor_slices[i])
                for s in self.lay.tensor_slices[i]:
                    self.slice_done[s] = False
        for i in indices:
            self._expect_pulls(i, it + 1)

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
        every peer (their pushes).  Under cv."""
        for i in indices:
            if not self.tensor_left[i]:
                continue
            for s in self.lay.tensor_slices[i]:
                if self.slice_done[s]:
                    continue
                owner = self.lay.owner[self.lay.slices[s].msg]
                if owner != self.rank:
                    yield owner
                else:
                    yield from self.peers

    # ------------------------------------------------- the reducer thread

    def _reducer(self):
        sel = selectors.DefaultSelector()
        try:
            for q, ch in self.mesh.rx.items():
                sel.register(ch.fileno(), selectors.EVENT_READ, q)
            sel.register(self._wake_r, selectors.EVENT_READ, None)
            # Datagram parts also complete at their deadlines, which only
            # a poll notices: look at least twice per deadline.
            every = None
            if self.lossy:
                sel.register(self.mesh.dg_rx.fileno(), selectors.EVENT_READ,
                             'dgram')
                every = max(0.001, self.lossy.deadline / 2)
            while not self._closing:
                for key, _ in sel.select(every):
                    if key.data is None:
                        os.read(self._wake_r, 4096)
                    elif key.data != 'dgram':
                        if not self._drain(key.data):
                            sel.unregister(key.fd)
                if self.lossy:
                    self._drain_datagrams()
                with self.cv:
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
        with self.cv:
            if self.error is None:
                self.error = error
            self.cv.notify_all()

    def _lose(self, q, e):
        """Rank q's channel failed (e): a wait that needs q raises."""
        with self.cv:
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

    # -------------------------------------------------- the pusher thread

    def _run_pusher(self):
        try:
            self.lossy.run_pusher()
        except p3.ClosedError:
            pass                    # close() ended us
        except p3.Error as e:
            self._fail(PeerError('p3.torch: rank %d cannot push: %s'
                                 % (self.rank, e)))
        except Exception as e:      # pragma: no cover - a bug, surfaced
            self._fail(e)

    def finish_pushes(self):
        """Send what is queued for the pusher, then stop it."""
        if self._pusher:
            self.lossy.close()
            self._pusher.join(self.timeout)

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

    def _drain_datagrams(self):
        for c in self.mesh.dg_rx.completions(0):
            whole = self.lossy.on_datagrams(c, c.iter, self.timeout)
            if whole:
                self._pushed(self.lay.slices[whole[1]].msg, c.iter)

    def _pushed(self, m, it):
        """A push of message m is in, whole."""
        with self.cv:
            self.push_left[m] -= 1
        self._reduce_if_complete(m, it)

    def _arrived(self, q, c):
        ns = self.lay.ns
        if c.tensor < ns:
            if not self.lossy or self.lossy.on_reliable(q, c.tensor):
                self._pushed(self.lay.slices[c.tensor].msg, c.iteration)
        elif c.tensor >= 3 * ns:        # chunks this rank asked for again
            if self.lossy.on_resend(q, c.tensor - 3 * ns):
                self._pushed(self.lay.slices[c.tensor - 3 * ns].msg,
                             c.iteration)
        elif c.tensor >= 2 * ns:        # the owner asks for chunks again
            def answer():
                self.bytes_resent += self.lossy.answer_ask(
                    c.tensor - 2 * ns, c.iteration, self._gbytes, self.timeout)
            try:
                self._send_to(q, answer)
            except ValueError as e:
                raise PeerError('p3.torch: rank %d: %s' % (q, e)) from e
        else:
            s = c.tensor - self.lay.ns
            if self.sparse:
                t = self.lay.slices[s].tensor
                vals = self._decode(s, self._reply[s],
                                    self.lay.owner[self.lay.slices[s].msg])
                self.sparse.scatter(s, vals,
                                    self._slice_view(self._abytes[t], s)
                                    .view(_NP[self.grad[t].dtype]))
            self._slices_done([s])

    def _reduce_if_complete(self, m, it):
        with self.cv:
            if self.push_left[m] or self.local_left[m]:
                return
            self.push_left[m] = len(self.lay.msgs[m]) * len(self.peers)
            self.local_left[m] = len(self.lay.msg_tensors[m])
        for s in self.lay.msgs[m]:
            self._sum(s)
        self._expect_pushes(m, it + 1)
        for q in self.peers:
            self._send_to(q, lambda: self._send(q, m, it, pull=True))
        self._slices_done(self.lay.msgs[m])

    def _sum(self, s):
        """The average of slice s over the ranks, summed in rank order so
        that arrival order never changes a bit."""
        t = self.lay.slices[s].tensor
        dt = _NP[self.grad[t].dtype]
        out = self._slice_view(self._abytes[t], s).view(dt)
        acc = np.empty(self.sparse.count[s], dt) if self.sparse else out
        for r in range(self.world):
            if self.sparse:
                part = (self.sparse.values(s, self.grad[t].numpy())
                        if r == self.rank
                        else self._decode(s, self.recv[(r, s)], r))
            elif self.lossy and r != self.rank:
                part = self.lossy.part(r, s, self.recv[(r, s)],
                                       self._decode_reliable(r))
            else:
                part = (self._slice_view(self._gbytes[t], s) if r == self.rank
                        else self.recv[(r, s)]).view(dt)
            if r == 0:
                np.copyto(acc, part)
            else:
                np.add(acc, part, out=acc)
        np.divide(acc, dt(self.world), out=acc)
        if self.sparse:
            self.sparse.scatter(s, acc, out)
            self.sparse.encode(s, acc, self._out[s])

    def _decode_reliable(self, q):
        """_sparse.decode, a bad payload from rank q a PeerError."""
        def decode(buf, n, dt, count):
            try:
                return _sparse.decode(buf, n, dt, count)
            except ValueError as e:
                raise PeerError('p3.torch: rank %d sent a bad reliable part: '
                                '%s' % (q, e)) from e
        return decode

    def _decode(self, s, buf, q):
        try:
            return self.sparse.decode(s, buf)
        except ValueError as e:
            raise PeerError('p3.torch: rank %d sent a bad sparse slice %d: %s'
                            % (q, s, e)) from e

    def _slices_done(self, slices):
        with self.cv:
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

    def close(self):
        self.finish_pushes()
        self._closing = True
        os.write(self._wake_w, b'x')
        self._thread.join(self.timeout)
        os.close(self._wake_r)
        os.close(self._wake_w)
