# SPDX-License-Identifier: LGPL-2.1-or-later
"""libp3 channels between every pair of ranks: this rank sends to rank q on
tx[q] and receives from it on rx[q].  Addresses are exchanged through the
torch.distributed store; every channel has progress (libp3's one engine
thread serves them all).  With
datagrams (bounded-loss pushes), a rank also has one datagram receiver,
dg_rx, for every peer, and a datagram sender dg_tx[q] to each.

With datagrams the levels interleave: reliable level l travels at tag
level 2 l (the channels' level_stride), its datagrams at 2 l + 1
(dgram_level), so that the qdisc sends each level's datagrams right after
its reliable packets and before any later layer's.  With the datagrams on
levels L..2 L - 1 instead, the first layers' datagrams waited behind every
later layer's reliable traffic, and the next forward pass behind them."""
import os
import random
import resource
import socket

import p3
import p3.dgram

# A channel id is (mesh nonce << 16) | (sender rank + 1): the listener can
# tell a peer of this mesh from a stray or stale connection.
RANK_BITS = 16


# With datagrams, reliable level l is tagged STRIDE * l and its datagrams
# the level after it.
STRIDE = 2


# What a datagram sender's socket may hold (SO_SNDBUF; the kernel doubles
# it to 64 kB of buffers, about 28 datagrams).  What it holds sits in the
# qdisc, where it expires if more urgent bands keep the link longer than
# the deadline; the rest waits in the pusher, which sends the most urgent
# push first.  At 10 Mbit/s with a 0.5 s deadline, 32 kB instead of the
# 426 kB that wmem_max allows cut the deadline drops from 10,614 to 1,219
# a run (docs/benchmarks.md).  libp3's loop refills it from C, so it
# keeps a 1 Gbit/s link fed too (half of it is 0.16 ms there).
DGRAM_SEND_BUF = 32 << 10


def dgram_level(level):
    """The tag level of reliable level level's datagrams."""
    return STRIDE * level + 1


# Descriptors left free beside the mesh's, for the rest of the program
# (checkpoints, data loaders, Gloo's own connections).
SPARE_FDS = 64


def sockets_needed(world, levels, dgram):
    """The sockets a rank's mesh holds: a channel of one socket per level
    to and from each peer, 2 (N - 1) L, and the listener; with datagrams
    also a sender socket per level to each peer (opened on first use) and
    one receiver."""
    n = 2 * (world - 1) * levels + 1
    return n + (world - 1) * levels + 1 if dgram else n


def make_room(needed):
    """Raise this process's soft limit of open files (as `ulimit -n`
    would, up to the hard limit) so that needed more descriptors fit:
    64 ranks at 8 levels need 1,009, past the usual soft limit of 1,024
    with Gloo's.  ValueError, before any connection, if the hard limit is
    too low."""
    want = len(os.listdir('/proc/self/fd')) + needed + SPARE_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            raise ValueError(
                'p3.torch: this rank needs %d sockets for its peers (a '
                'socket per level each way) and may open %d files in all '
                '(hard limit): '
                'raise it (ulimit -Hn %d, LimitNOFILE=) or pass fewer bands'
                % (needed, hard, want))
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def local_address(master_addr):
    """The address this host reaches master_addr from: connecting a UDP
    socket picks the route's source and sends nothing."""
    info = socket.getaddrinfo(master_addr, 9, type=socket.SOCK_DGRAM)[0]
    with socket.socket(info[0], socket.SOCK_DGRAM) as s:
        s.connect(info[4])
        return s.getsockname()[0]


class Mesh:
    def __init__(self, store, key, rank, world, host, bands, timeout,
                 max_queued, dgram=None):
        """dgram: None, or the p3.dgram.Receiver arguments (bands, chunk,
        buf_bytes, early_bytes) of this rank's datagram receiver."""
        self.rank = rank
        self.tx, self.rx = {}, {}
        # TCP checks every segment, as Gloo, NCCL and MPI rely on: a
        # frame's CRC32C covers its header only, unless P3_CHECKSUM=1
        # asks for the payload too (one more pass over every byte on
        # each side).
        checksum = os.environ.get('P3_CHECKSUM', '0') == '1'
        self.dg_tx, self.dg_rx = {}, None
        stride = STRIDE if dgram else 1
        # A peer that vanishes without a FIN fails its channel after
        # timeout (TCP user timeout, keepalive), like every other wait.
        self._lst = p3.Listener(host=host, port=0, timeout=timeout,
                                peer_timeout=timeout, level_stride=stride)
        try:
            if dgram:
                self.dg_rx = p3.dgram.Receiver(host, 0, **dgram)
            if rank == 0:
                store.set(key + '/nonce', str(random.getrandbits(40)))
            nonce = int(store.get(key + '/nonce'))
            store.set('%s/addr/%d' % (key, rank), '%s %d %d' % (
                host, self._lst.port, self.dg_rx.port if dgram else 0))
            for q in range(world):
                if q == rank:
                    continue
                addr, port, dgport = store.get(
                    '%s/addr/%d' % (key, q)).decode().split()
                if dgram:
                    self.dg_tx[q] = p3.dgram.Sender(
                        addr, dgport, bands=dgram['bands'],
                        chunk=dgram['chunk'], buf_bytes=DGRAM_SEND_BUF)
                self.tx[q] = p3.Channel.connect(
                    addr, port, bands=bands, timeout=timeout,
                    peer_timeout=timeout, max_queued=max_queued,
                    chan_id=(nonce << RANK_BITS) | (rank + 1),
                    level_stride=stride, checksum=checksum)
            while len(self.rx) < world - 1:
                ch = self._lst.accept(timeout=timeout)
                q = (ch.chan_id & ((1 << RANK_BITS) - 1)) - 1
                if ch.chan_id >> RANK_BITS != nonce or q in self.rx \
                        or not 0 <= q < world or q == rank:
                    ch.close()          # not one of this mesh's peers
                    continue
                self.rx[q] = ch
        except BaseException:
            self.close()
            raise

    def close(self):
        for ch in (list(self.tx.values()) + list(self.rx.values()) +
                   list(self.dg_tx.values()) + [self.dg_rx]):
            if ch is not None:
                ch.close()
        self.tx, self.rx, self.dg_tx, self.dg_rx = {}, {}, {}, None
        self._lst.close()
