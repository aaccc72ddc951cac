# SPDX-License-Identifier: LGPL-2.1-or-later
"""The exchange's wire forms, one object each, so that the exchange
(_exchange.py, _reducer.py) has one path and no branch on the form:

  Dense         every element of a unit, pushed by reference from the
                flat buffer (the default)
  Sparse        Slim-DP: the elements every rank chose this step
                (_slimdp.py, _sparse.py's wire form), both ways
  BoundedLoss   DLCP: a push as datagrams plus its largest elements over
                the channel (_dlcp.py); averages as Dense's

Each is attached to one Exchange (attach()) and reads its state: the
mesh, the layout's units, the flat buffers.  Wire ids: pushes 0..nu-1,
averages nu..2nu-1 (nu = the unit count); bounded loss's asks from 2 ns
and resends from 3 ns (a unit a slice).
"""
import select
import threading
import time

import numpy as np

import p3

from . import _sparse
from ._errors import PeerError, StepTimeout


class Dense:
    """A unit's elements as the flat buffers hold them.  Pushes go by
    reference: libp3's engine thread writes them from the gradients' flat
    buffer, which only gradient() writes, and only once the last push of
    the unit is out.  Averages are copied into libp3's queue by the
    reducer: .grad shows them to the script and the wrapped optimizer
    (clipping edits them in place), so they may change while queued."""

    whole_messages = True       # a unit may span a message's slices
    counts_pushes_per_peer = True

    def attach(self, ex):
        self.ex = ex
        un = ex.units
        # A push as it arrives, in a buffer exported once (p3.Buffer) and
        # re-armed every step.
        self.recv = {}
        for m in ex.owned:
            for u in un.of_msg[m]:
                for q in ex.peers:
                    self.recv[(q, u)] = np.empty(self.recv_bytes(u), np.uint8)
        self._rx = {k: p3.Buffer(a, writable=True)
                    for k, a in self.recv.items()}
        self._plans = {}        # (peer, message, pull): its p3.Plan
        # Pushes in flight by reference, message: its owner (main
        # thread only: it sends them and waits in before_gradient).
        self._pushing = {}

    def recv_bytes(self, u):
        unit = self.ex.units.units[u]
        return unit.end - unit.start

    def pull_buffer(self, u):
        return self.ex._aflat[self.ex.units.span(u)]

    # ---------------------------------------------------------- receiving

    def expect_push(self, q, u, it):
        self.ex.mesh.rx[q].expect(u, self._rx[(q, u)], it)

    def expect_pull(self, u, owner, it, buf):
        self.ex.mesh.rx[owner].expect(self.ex.units.n + u, buf, it)

    def push_counts(self, q, u):
        """Unit u's push from rank q is in: whole."""
        return True

    def pull_arrived(self, u, owner):
        """Unit u's averages are in its buffer, as they will be read."""

    def other(self, q, c):
        """A completion of a wire id no dense exchange sends."""
        raise PeerError('p3.torch: rank %d sent an unknown tensor id %d'
                        % (q, c.tensor))

    # ------------------------------------------------------------ sending

    def before_gradient(self, i, deadline):
        """The main thread is about to write parameter i's gradient: no
        channel may still read its units."""
        if self._pushing:
            for m in self.ex.lay.tensor_msgs[i]:
                self._free_push(m, deadline)

    def after_gradient(self, i, it):
        """Parameter i's gradient is in the flat buffer, scaled."""

    def send(self, q, m, it, pull):
        """Message m to rank q: local gradients or averages; its bytes."""
        plan = self._plans.get((q, m, pull))
        if plan is None:
            plan = self._plans[(q, m, pull)] = self._plan(m, pull)
        if pull:
            self.ex.mesh.tx[q].send_prepared(plan, iteration=it,
                                             timeout=self.ex.timeout)
            return plan.bytes
        self._pushing[m] = q
        try:
            self.ex.mesh.tx[q].send_prepared(plan, iteration=it,
                                             timeout=self.ex.timeout,
                                             copy=False)
        except BaseException:
            del self._pushing[m]     # not queued: no completion will come
            raise
        return plan.bytes

    def _plan(self, m, pull):
        ex = self.ex
        un, slices, arrays = ex.units, [], {}
        for u in un.of_msg[m]:
            unit = un.units[u]
            wire = un.n + u if pull else u
            data = self._data(u, pull)
            slices.append(p3.Slice(wire, 0, data.nbytes, unit.level, m,
                                   unit.prio))
            arrays[wire] = data
        return p3.Plan(slices, arrays)

    def _data(self, u, pull):
        ex = self.ex
        return (ex._aflat if pull else ex._gflat)[ex.units.span(u)]

    def _sent(self, q, timeout):
        """Take the completions of the pushes sent rank q by reference,
        waiting up to timeout s for one if none is in.  (A sender's
        poll() with a timeout would wait for its whole queue; its
        descriptor turns readable at the first completion.)"""
        ex = self.ex
        ch = ex.mesh.tx[q]
        done = ch.poll(0)
        if not done and timeout > 0:
            # poll(), not select(): a rank of a large job holds more than
            # FD_SETSIZE descriptors.
            waiter = select.poll()
            waiter.register(ch.fileno(), select.POLLIN)
            waiter.poll(timeout * 1000)
            done = ch.poll(0)
        for c in done:
            self._pushing.pop(ex.units.units[c.tensor].msg, None)

    def _free_push(self, m, deadline):
        """Wait until no channel reads message m's pushed gradients: the
        last step's push is written (or its band failed)."""
        ex = self.ex
        while True:
            q = self._pushing.get(m)
            if q is None:
                return
            if q in ex.lost:
                raise ex.lost[q]
            left = deadline - time.monotonic()
            if left <= 0:
                ex.timed_out = True
                raise StepTimeout('p3.torch: rank %d waited %.0f s to send '
                                  'to rank %d' % (ex.rank, ex.timeout, q))
            try:
                self._sent(q, min(left, 0.5))
            except p3.Error as e:
                raise PeerError('p3.torch: rank %d cannot push to rank %d: %s'
                                % (ex.rank, q, e)) from e

    # ------------------------------------------------------------ summing

    def accumulator(self, u, out, sdt):
        """Where unit u's sum goes: its averages' buffer (out), or one of
        the summing type sdt where that is wider."""
        return out if sdt == out.dtype else np.empty(out.size, sdt)

    def part(self, r, u, dt):
        """Rank r's part of unit u, as summed."""
        ex = self.ex
        return (ex._gflat[ex.units.span(u)] if r == ex.rank
                else self.recv[(r, u)]).view(dt)

    def summed(self, u, acc, out):
        """Unit u's average is in acc (and out)."""

    # ------------------------------------------------ the reducer's loop

    def fds(self):
        """Descriptors beyond the channels' that the reducer waits on,
        and how often it must look regardless (None: never)."""
        return [], None

    def drain(self):
        """The reducer's look at fds(): (message, step) of each push
        that came whole."""
        return []

    def start(self, fail):
        """Threads of the form's own (fail(error) hands one's error to
        the main thread)."""

    def finish(self):
        """Send what the form's threads still hold, then stop them."""


class Sparse(Dense):
    """Slim-DP: of each slice, the elements every rank chose this step,
    both ways, copied into their wire form (_sparse.py); a unit is a
    slice."""

    whole_messages = False

    def __init__(self, slim):
        self.slim = slim

    def attach(self, ex):
        # Each slice's outgoing wire form (pushed by the main thread if
        # another rank owns it, returned by the reducer if this one does:
        # never both) and, for others' slices, the reply.
        wire = [self.slim.wire_bytes(s) for s in range(ex.lay.ns)]
        self._out = [np.empty(n, np.uint8) for n in wire]
        self._reply = {s: np.empty(n, np.uint8) for s, n in enumerate(wire)
                       if ex.lay.owner[ex.lay.slices[s].msg] != ex.rank}
        super().attach(ex)

    def recv_bytes(self, u):
        return self.slim.wire_bytes(u)

    def pull_buffer(self, u):
        return self._reply[u]

    def after_gradient(self, i, it):
        # The parameter and the average hold the last step's update here
        # (the forward that led here applied it), the same bits on every
        # rank: so is the choice.
        ex = self.ex
        self.slim.select(i, ex.params[i].detach().reshape(-1).numpy(),
                         ex.avg[i].numpy(), it)
        self.slim.feedback(i, ex.grad[i].numpy())

    def send(self, q, m, it, pull):
        # The size follows the step's choice: a plan a send, copied.
        plan = self._plan(m, pull)
        self.ex.mesh.tx[q].send_prepared(plan, iteration=it,
                                         timeout=self.ex.timeout)
        return plan.bytes

    def _data(self, u, pull):
        if pull:        # encoded once, by summed(), for every peer
            return self._out[u]
        t = self.ex.lay.slices[u].tensor
        return self.slim.encode(u, self.slim.values(u, self.ex.grad[t].numpy()),
                                self._out[u])

    def pull_arrived(self, u, owner):
        ex = self.ex
        unit = ex.units.units[u]
        vals = self._decode(u, self._reply[u], owner)
        self.slim.scatter(u, vals, ex._aflat[ex.units.span(u)]
                          .view(unit.dtype))

    def accumulator(self, u, out, sdt):
        return np.empty(self.slim.count[u], out.dtype)

    def part(self, r, u, dt):
        ex = self.ex
        if r == ex.rank:
            t = ex.lay.slices[u].tensor
            return self.slim.values(u, ex.grad[t].numpy())
        return self._decode(u, self.recv[(r, u)], r)

    def summed(self, u, acc, out):
        self.slim.scatter(u, acc, out)
        self.slim.encode(u, acc, self._out[u])

    def _decode(self, s, buf, q):
        try:
            return self.slim.decode(s, buf)
        except ValueError as e:
            raise PeerError('p3.torch: rank %d sent a bad sparse slice %d: %s'
                            % (q, s, e)) from e


class BoundedLoss(Dense):
    """DLCP: a push as datagrams plus its largest elements over the
    channel, sent by the form's pusher thread (_dlcp.py); averages as
    Dense's; a unit is a slice.  A push's datagrams do not say
    their sender, so pushes are not counted per peer."""

    whole_messages = False
    counts_pushes_per_peer = False

    def __init__(self, lossy):
        self.lossy = lossy
        self._thread = None

    def recv_bytes(self, u):
        return self.lossy.reliable_bytes(u)

    def expect_push(self, q, u, it):
        self.lossy.expect_push(q, u, it, self.recv[(q, u)])

    def expect_pull(self, u, owner, it, buf):
        super().expect_pull(u, owner, it, buf)
        self.lossy.expect_asks(u, it)

    def push_counts(self, q, u):
        return self.lossy.on_reliable(q, u)

    def other(self, q, c):
        """Chunks this rank asked for again (whole: the message), or the
        owner asking for some."""
        ex, ns = self.ex, self.ex.lay.ns
        if c.tensor >= 3 * ns:
            s = c.tensor - 3 * ns
            return ex.lay.slices[s].msg if self.lossy.on_resend(q, s) else None

        def answer():
            ex.bytes_resent += self.lossy.answer_ask(
                c.tensor - 2 * ns, c.iteration, ex._gbytes, ex.timeout)
        try:
            ex._send_to(q, answer)
        except ValueError as e:
            raise PeerError('p3.torch: rank %d: %s' % (q, e)) from e
        return None

    def send(self, q, m, it, pull):
        if pull:
            return super().send(q, m, it, pull)
        return self.lossy.push(q, m, it, self.ex._gbytes, self.ex.timeout)

    def part(self, r, u, dt):
        if r == self.ex.rank:
            return super().part(r, u, dt)
        return self.lossy.part(r, u, self.recv[(r, u)], self._decode(r))

    def _decode(self, q):
        """_sparse.decode, a bad payload from rank q a PeerError."""
        def decode(buf, n, dt, count):
            try:
                return _sparse.decode(buf, n, dt, count)
            except ValueError as e:
                raise PeerError('p3.torch: rank %d sent a bad reliable part: '
                                '%s' % (q, e)) from e
        return decode

    def fds(self):
        # Datagram parts also complete at their deadlines, which only a
        # poll notices: look at least twice per deadline.
        return ([self.ex.mesh.dg_rx.fileno()],
                max(0.001, self.lossy.deadline / 2))

    def drain(self):
        ex, whole = self.ex, []
        for c in ex.mesh.dg_rx.completions(0):
            w = self.lossy.on_datagrams(c, c.iter, ex.timeout)
            if w:
                whole.append((ex.lay.slices[w[1]].msg, c.iter))
        return whole

    def start(self, fail):
        def run():
            try:
                self.lossy.run_pusher()
            except p3.ClosedError:
                pass                    # close() ended us
            except p3.Error as e:
                fail(PeerError('p3.torch: rank %d cannot push: %s'
                               % (self.ex.rank, e)))
            except Exception as e:      # pragma: no cover - a bug, surfaced
                fail(e)
        self._thread = threading.Thread(target=run, daemon=True,
                                        name='p3.torch pusher')
        self._thread.start()

    def finish(self):
        self.lossy.close()
        self._thread.join(self.ex.timeout)
