# SPDX-License-Identifier: LGPL-2.1-or-later
"""Bounded-loss pushes (DLCP, Wang et al., 2020): a gradient slice may
arrive with a small part missing, so it need not wait for the last lost
or late packet.

A rank pushes each slice to its owner in two parts:

- the whole slice as datagrams (libp3's p3.dgram), on the level right
  after the slice's own (_mesh.dgram_level), a band the qdisc may drop at
  a deadline (tc class change ... deadline);
- its largest-magnitude elements (a fraction, at least one) over the
  reliable channel, in _sparse.py's form, after the datagrams.

The owner completes the datagram part when it is whole, or once no
datagram of it came for `deadline` seconds (twice that after the
reliable part, if none had come by then), with the missing chunks
zero-filled; the reliable part's elements then overwrite theirs, so the
largest ones are never lost.  If more than `loss_tolerance` of the slice's bytes are missing,
the owner asks the pusher for exactly the missing chunks over the
reliable channel (a bitmap of chunks) and the pusher sends them back, so
that no slice is ever summed with more lost than the bound.

A push is queued, not sent, by the backward pass: a pusher thread
(run_pusher) sends the queued pushes most urgent first.  A datagram
socket's send buffer holds a few hundred kB, so sending a big layer's
datagrams from the backward hook would stall backward until the link had
drained the rest, and keep the next layers' more urgent pushes waiting
behind it; the reliable channel queues instead, and so must this.

Only pushes are loss-tolerant: a rank that missed part of an average
would apply another update than the others, and the replicas drift.

Wire ids, pusher to owner: s the reliable part (as a dense push), 3 NS + s
the chunks sent again; owner to pusher: 2 NS + s the chunks asked for;
on the owner's datagram receiver: q NS + s, slice s from rank q.
"""
import errno
import heapq
import math
import threading

import numpy as np

import p3

from . import _sparse
from ._mesh import dgram_level


def check_args(loss_tolerance, deadline, reliable_fraction):
    """The arguments as floats; ValueError naming the one that is wrong."""
    for name, v, ok in (
            ('loss_tolerance', loss_tolerance, lambda x: 0 <= x < 1),
            ('deadline', deadline, lambda x: 0 < x <= 10),
            ('reliable_fraction', reliable_fraction, lambda x: 0 < x <= 1)):
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError('p3.torch: %s must be a number, not %r'
                             % (name, v)) from None
        if not (math.isfinite(f) and ok(f)):
            raise ValueError('p3.torch: %s %r is out of range (loss_tolerance '
                             '0 <= x < 1, deadline 0 < x <= 10 s, '
                             'reliable_fraction 0 < x <= 1)' % (name, v))
    return float(loss_tolerance), float(deadline), float(reliable_fraction)


def largest(vals, k):
    """The indices, in order, of the k largest-magnitude elements of the
    flat array vals (all of them if k >= its size)."""
    n = vals.size
    if k >= n:
        return np.arange(n)
    return np.sort(np.argpartition(np.abs(vals), n - k)[n - k:])


def chunks_of(length, chunk):
    """[(offset, length)] of the datagram chunks of a slice."""
    return [(o, min(chunk, length - o)) for o in range(0, length, chunk)]


class BoundedLoss:
    """One rank's side of every bounded-loss push, as pusher and owner."""

    def __init__(self, mesh, layout, rank, dtypes, loss_tolerance, deadline,
                 reliable_fraction):
        self.tol, self.deadline, self.frac = check_args(
            loss_tolerance, deadline, reliable_fraction)
        self.mesh, self.lay, self.rank = mesh, layout, rank
        self.ns = layout.ns
        self.chunk = mesh.dg_rx.chunk
        self.dtypes = dtypes
        self.geom = []          # per slice: (dtype, n elements, reliable count)
        for sl in layout.slices:
            dt = np.dtype(dtypes[sl.tensor])
            n = sl.length // dt.itemsize
            self.geom.append((dt, n, min(n, max(1, math.ceil(self.frac * n)))))
        self.owned = [s for s in range(self.ns)
                      if layout.owner[layout.slices[s].msg] == rank]
        peers = sorted(mesh.tx)
        # Owner: per (pusher, slice), the dense datagram part and its state.
        self.dense = {(q, s): np.empty(layout.slices[s].length, np.uint8)
                      for q in peers for s in self.owned}
        self.state = {}
        self._resend = {}
        self._ask = {}
        # Pusher: the reliable part of each slice it pushes, and where the
        # owner's requests for chunks land.
        self.out = {s: np.empty(self.reliable_bytes(s), np.uint8)
                    for s in range(self.ns) if s not in self.owned}
        self.asked = {s: np.empty(self._bitmap_bytes(s), np.uint8)
                      for s in self.out}
        self.rerequests = 0
        self.bytes_lost = 0
        # Pushes queued for the pusher thread: (level, prio, seq, job).
        self._queue = []
        self._seq = 0
        self._closing = False
        self._cv = threading.Condition()

    # ------------------------------------------------------------ sizes

    def reliable_bytes(self, s):
        dt, n, k = self.geom[s]
        return _sparse.wire_bytes(k, n, dt)

    def _bitmap_bytes(self, s):
        return (len(chunks_of(self.lay.slices[s].length, self.chunk)) + 7) // 8

    # --------------------------------------------------------- the pusher

    def push(self, o, m, it, grad_bytes, timeout):
        """Queue message m's push to its owner o for the pusher thread,
        its reliable parts chosen and encoded now (a non-finite gradient
        raises FloatingPointError here, in the backward pass).  Returns
        the payload bytes the push will send."""
        lay, dgrams, slices, arrays = self.lay, [], [], {}
        for s in lay.msgs[m]:
            sl = lay.slices[s]
            data = grad_bytes[sl.tensor][sl.offset:sl.offset + sl.length]
            dgrams.append((dgram_level(sl.level), self.rank * self.ns + s,
                           data))
            dt, n, k = self.geom[s]
            vals = data.view(dt)
            idx = largest(vals, k)
            if not np.all(np.isfinite(vals[idx])):
                raise FloatingPointError('p3.torch: non-finite gradient in '
                                         'tensor %d' % sl.tensor)
            _sparse.encode(idx, vals[idx], n, self.out[s])
            slices.append(p3.Slice(s, 0, self.out[s].nbytes, sl.level, m,
                                   sl.prio))
            arrays[s] = self.out[s]
        first = slices[0]
        with self._cv:
            if self._closing:
                raise ValueError('p3.torch: push after close')
            # seq orders equal priorities as queued and is never equal,
            # so the job itself is never compared.
            heapq.heappush(self._queue, (first.level, first.prio, self._seq,
                                         (o, it, dgrams, slices, arrays,
                                          timeout)))
            self._seq += 1
            self._cv.notify()
        return sum(d.nbytes for _, _, d in dgrams) + sum(x.length
                                                        for x in slices)

    def run_pusher(self):
        """The pusher thread's loop: the queued pushes, most urgent level
        first, then in the order queued; after close(), what is still
        queued, then return.  Raises what a send raised."""
        while True:
            with self._cv:
                while not self._queue and not self._closing:
                    self._cv.wait()
                if not self._queue:
                    return
                o, it, dgrams, slices, arrays, timeout = \
                    heapq.heappop(self._queue)[3]
            # The datagrams first: the owner's wait for them starts at the
            # reliable part (on_reliable).
            for level, wire, data in dgrams:
                self.mesh.dg_tx[o].send(level, it, wire, data,
                                        timeout=timeout)
            self.mesh.tx[o].send_plan(slices, arrays, iteration=it,
                                      timeout=timeout)

    def close(self):
        """No more pushes: run_pusher returns once the queue is empty."""
        with self._cv:
            self._closing = True
            self._cv.notify()

    def expect_asks(self, s, it):
        """Where owner's request for slice s's chunks of step it lands."""
        o = self.lay.owner[self.lay.slices[s].msg]
        ch = self.mesh.rx[o]
        try:
            ch.cancel(2 * self.ns + s)  # last step's, never asked
        except p3.Error as e:
            if e.errno != errno.ENOENT:     # the first step has none
                raise
        ch.expect(2 * self.ns + s, self.asked[s], it)

    def answer_ask(self, s, it, grad_bytes, timeout):
        """Send the chunks of slice s the owner asked for.  Returns the
        bytes sent."""
        sl = self.lay.slices[s]
        o = self.lay.owner[sl.msg]
        want = self._chunks_in(s, self.asked[s])
        if not want:
            raise ValueError('rank %d asked for no chunk of slice %d'
                             % (o, s))
        data = grad_bytes[sl.tensor][sl.offset:sl.offset + sl.length]
        packed = np.concatenate([data[a:a + n] for a, n in want])
        self.mesh.tx[o].send(3 * self.ns + s, packed, level=sl.level,
                             iteration=it, timeout=timeout)
        return packed.nbytes

    def _chunks_in(self, s, bitmap):
        """The chunks a bitmap names; ValueError for bits past the end."""
        chunks = chunks_of(self.lay.slices[s].length, self.chunk)
        bits = np.unpackbits(bitmap, bitorder='little')
        if bits[len(chunks):].any():
            raise ValueError('chunk bitmap of slice %d names chunks past its '
                             'end' % s)
        return [c for c, b in zip(chunks, bits) if b]

    # ---------------------------------------------------------- the owner

    def expect_push(self, q, s, it, sparse_buf):
        """Register both parts of rank q's push of slice s for step it."""
        self.state[(q, s)] = {'reliable': False, 'dgram': False,
                              'resend': False}
        self.mesh.rx[q].expect(s, sparse_buf, it)
        self.mesh.dg_rx.expect(q * self.ns + s, self.dense[(q, s)], it,
                               deadline=self.deadline)

    def on_reliable(self, q, s):
        """The reliable part is in, so the datagrams were sent.  It
        travels in a more urgent band and may overtake them, and they may
        wait up to the qdisc's deadline behind it: if none has come, wait
        twice the deadline for them (each one that comes waits longer).
        Returns True once the push is whole."""
        self.state[(q, s)]['reliable'] = True
        self.mesh.dg_rx.finish(q * self.ns + s, after=2 * self.deadline)
        return self._whole(q, s)

    def on_datagrams(self, c, it, timeout):
        """A datagram part completed; asks for its missing chunks if they
        break the bound.  Returns (q, s) if that made a push whole."""
        q, s = divmod(c.tensor, self.ns)
        st = self.state[(q, s)]
        st['dgram'] = True
        if c.missing > self.tol * c.bytes:
            ranges = self.mesh.dg_rx.missing(c.tensor)
            self._ask_for(q, s, ranges, it, timeout)
            return None
        self.bytes_lost += c.missing
        return (q, s) if self._whole(q, s) else None

    def _ask_for(self, q, s, ranges, it, timeout):
        bitmap = np.zeros(self._bitmap_bytes(s) * 8, np.uint8)
        size = 0
        for off, n in ranges:
            bitmap[off // self.chunk:(off + n + self.chunk - 1) // self.chunk] = 1
            size += n
        self.state[(q, s)]['resend'] = True
        self._resend[(q, s)] = (np.empty(size, np.uint8), ranges)
        self.mesh.rx[q].expect(3 * self.ns + s, self._resend[(q, s)][0], it)
        ask = self._ask.setdefault(s, np.empty(self._bitmap_bytes(s),
                                               np.uint8))
        ask[:] = np.packbits(bitmap, bitorder='little')
        self.mesh.tx[q].send(2 * self.ns + s, ask,
                             level=self.lay.slices[s].level, iteration=it,
                             timeout=timeout)
        self.rerequests += 1

    def on_resend(self, q, s):
        """The chunks asked for are in: fill them in.  Returns True once
        the push is whole."""
        packed, ranges = self._resend.pop((q, s))
        at = 0
        for off, n in ranges:
            self.dense[(q, s)][off:off + n] = packed[at:at + n]
            at += n
        self.state[(q, s)]['resend'] = False
        return self._whole(q, s)

    def _whole(self, q, s):
        st = self.state[(q, s)]
        return st['reliable'] and st['dgram'] and not st['resend']

    def part(self, q, s, sparse_buf, decode):
        """Rank q's slice s as summed: the datagrams with the reliable
        elements written over them."""
        dt, n, k = self.geom[s]
        dense = self.dense[(q, s)].view(dt)
        idx, vals = decode(sparse_buf, n, dt, k)
        dense[idx] = vals
        return dense
