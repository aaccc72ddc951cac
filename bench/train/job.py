# SPDX-License-Identifier: GPL-2.0
"""The emulated training job: scaling, sharding, slicing, and the ideal.

Scaling.  Under TCG the VM moves only a few MB/s through libp3 (framing,
CRC32C and two copies per byte, ~0.5 ms per message), so the job is shrunk
in time and bytes, never in structure (same layers, same order, same
compute-to-communication ratios).  Per model:

  time_scale T = EMU_COMPUTE_S / (the model's compute per iteration)
  byte_scale B = EMU_MODEL_BYTES / (the model's parameter bytes)
  emulated link rate   rate = gbps * 1e9 / 8 * B / T     (bytes/s)

where gbps is the real-equivalent link rate: every ratio of compute time
to communication time is the one the real model has on a real gbps link.
A slice is SLICE_BYTES emulated bytes (SLICE_BYTES / B real bytes).

Sharding.  `fifo` shards like MXNet's KVStore (the WFBP baseline P3
measured against): a layer of at least BIGARRAY_BOUND parameters is split
evenly across all servers, a smaller one goes whole to server
(layer % servers).  The sliced modes cut layers with libp3's planner and
deal the slices out round-robin, as P3 does.
"""
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "userlib", "python"))

EMU_COMPUTE_S = 3.0                 # emulated compute per iteration
EMU_MODEL_BYTES = 512 << 10         # emulated parameter bytes per model
SLICE_BYTES = 4096
# Above this share of the VM's CPU in a run, the emulator's own work per
# message (Python, framing, CRC under TCG) can set the pace instead of the
# link: on a slower host, one sweep saw compute-bound points take 3.6-3.9 s
# for 3.0 s of compute at 73-75%, and ResNet-50's kernel lead at 2 Gbit/s
# vanish at 81% and come back at 55% with --compute-s 6 (the lab notebook,
# `git show 216191b:docs/benchmarks.md`, "A second sweep, on a slower host").
CPU_BOUND = 0.65
BIGARRAY_BOUND = 1000000            # parameters, MXNet's default
# p3kernel's levels: bands 0..3, one socket each per peer; band 4 is left
# to untagged traffic (the default band).  Fewer sockets cost the VM less:
# where its CPU ran short, four were 0.6-3.4% faster than eight at
# VGG-19's network-bound points and never slower elsewhere beyond noise
# (commit 6cdd9f1; `git show 216191b:docs/benchmarks.md`, "A host thread
# per vCPU, and four bands"); with CPU to spare the two were level ("Why
# the kernel mode trails" there), and fifteen were slower than eight.
TRAIN_BANDS = 4
FRAME_HDR = 40                      # libp3's per-frame header
# TCP_NOTSENT_LOWAT of every socket (libp3's default is 16 KB): what a
# flow has written beyond the reach of user space
NOTSENT_LOWAT = 4096
# TCP payload per byte the shaper counts: 1448-byte segments (timestamps
# on) in 1514-byte frames; qdisc_pkt_len() counts the Ethernet header.
GOODPUT = 1448.0 / 1514.0

MODES = ("fifo", "slice", "p3user", "p3kernel", "ideal")
# How the sliced modes deal keys to servers: P3's round robin over all
# slices, or every layer split evenly over all servers (--shard).
SHARDS = ("round-robin", "even")
# How layers share the levels (--levels): libp3's planner in P3's order
# (equal runs of layers), no later than an equal run of bytes would put
# them (see Job._byte_levels), or the planner with order "tail-first": the
# layers after the largest one first, on level 0, if they hold at most a
# quarter of the bytes (docs/libp3.md, "Planner"; at VGG-19 fc7 and fc8,
# which in P3's order wait out fc6 and then end the iteration late; no
# other model of the sweep changes).  The kernel mode's default: p3.torch's.
LEVELS = ("count", "bytes", "tail")
DEFAULT_LEVELS = "tail"
MODES_MEASURED = MODES[:-1]
MODE_TITLES = {
    "fifo": "FIFO (WFBP)",
    "slice": "slicing only",
    "p3user": "P3 user space",
    "p3kernel": "P3 kernel (sch_p3)",
    "ideal": "ideal (analytic)",
}

Key = collections.namedtuple(
    "Key", "id layer server offset nbytes shard_off level prio")


def scales(profile, compute_s=None, model_bytes=None):
    """(time_scale, byte_scale) of a model."""
    c = EMU_COMPUTE_S if compute_s is None else compute_s
    m = EMU_MODEL_BYTES if model_bytes is None else model_bytes
    real_bytes = profile["params"] * profile.get("bytes_per_param", 4)
    return c / profile["iter_compute_s"], m / real_bytes


def emu_rate(gbps, byte_scale, time_scale):
    """Emulated link rate in bytes/s for a real-equivalent rate in Gbit/s."""
    return gbps * 1e9 / 8 * byte_scale / time_scale


def real_gbps(rate_Bps, byte_scale, time_scale):
    return rate_Bps * 8 / 1e9 * time_scale / byte_scale


class Job:
    """One configuration: model profile, mode, cluster size and link rate."""

    def __init__(self, profile, mode, workers=4, servers=4, gbps=10.0,
                 compute_s=None, model_bytes=None, slice_bytes=None,
                 train_bands=None, shard="round-robin", group_slices=0.0,
                 levels=DEFAULT_LEVELS):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode}")
        self.profile = profile
        self.mode = mode
        self.workers, self.servers = workers, servers
        self.gbps = gbps
        self.compute_s, self.model_bytes = compute_s, model_bytes
        self.time_scale, self.byte_scale = scales(profile, compute_s,
                                                  model_bytes)
        self.slice_bytes = slice_bytes or SLICE_BYTES
        self.train_bands = train_bands or TRAIN_BANDS
        if shard not in SHARDS:
            raise ValueError(f"unknown shard {shard}")
        self.shard = shard
        self.group_slices = group_slices
        if levels not in LEVELS:
            raise ValueError(f"unknown levels {levels}")
        # only the kernel mode has levels (a socket per band)
        self.levels = levels if mode == "p3kernel" else "count"
        self.rate = emu_rate(gbps, self.byte_scale, self.time_scale)
        layers = profile["layers"]
        self.fwd = [la["fwd_s"] * self.time_scale for la in layers]
        self.bwd = [la["bwd_s"] * self.time_scale for la in layers]
        bpp = profile.get("bytes_per_param", 4)
        self.layer_bytes = [max(4, round(la["params"] * bpp * self.byte_scale))
                            for la in layers]
        self.layer_params = [la["params"] for la in layers]
        self.keys = self._plan()
        self.shard_bytes = collections.Counter()
        for k in self.keys:
            self.shard_bytes[(k.layer, k.server)] += k.nbytes

    # ------------------------------------------------------------ plans
    @property
    def sliced(self):
        return self.mode != "fifo"

    @property
    def bands(self):
        """Sockets per peer connection."""
        return self.train_bands if self.mode == "p3kernel" else 1

    def _plan(self):
        return self._plan_slices() if self.sliced else self._plan_mxnet()

    def _plan_mxnet(self):
        keys = []
        for layer, nbytes in enumerate(self.layer_bytes):
            if self.layer_params[layer] >= BIGARRAY_BOUND:
                parts = self.servers
                servers = range(self.servers)
            else:
                parts = 1
                servers = [layer % self.servers]
            base, extra = divmod(nbytes, parts)
            off = 0
            for i, s in enumerate(servers):
                n = base + (1 if i < extra else 0)
                keys.append(Key(len(keys), layer, s, off, n, 0, 0, layer))
                off += n
        return self._shard_offsets(keys)

    def _plan_slices(self):
        import p3
        fwd = self._forward_ranks()
        tensors = [p3.Tensor(la["name"], n, fwd[i]) for i, (la, n) in
                   enumerate(zip(self.profile["layers"], self.layer_bytes))]
        slices = p3.plan(tensors, bands=self.train_bands,
                         slice_bytes=self.slice_bytes,
                         order="tail-first" if self.levels == "tail"
                         else "forward")
        if self.levels == "bytes":
            lv = self._byte_levels(slices)
            slices = [s._replace(level=lv[s.tensor]) for s in slices]
        if self.shard == "even":
            return self._shard_offsets(self._even_pieces(slices))
        keys = []
        for i, s in enumerate(slices):
            keys.append(Key(i, s.tensor, i % self.servers, s.offset, s.length,
                            0, s.level, s.prio))
        return self._shard_offsets(keys)

    def _forward_ranks(self):
        """Each layer's rank in the next forward pass.  With group_slices
        g, layers that pass needs within g slice times (at the link rate)
        of their group's first layer share its rank, so the planner puts
        them on one level: ordering them gains nothing."""
        if not self.group_slices:
            return list(range(len(self.fwd)))
        window = self.group_slices * (self.slice_bytes + FRAME_HDR) / self.rate
        ranks, start, t = [], None, 0.0
        for f in self.fwd:
            if start is None or t - start >= window:
                start = t
                ranks.append(ranks[-1] + 1 if ranks else 0)
            else:
                ranks.append(ranks[-1])
            t += f
        return ranks

    def _byte_levels(self, slices):
        """levels "bytes": each layer on the planner's level or, if lower,
        on the band its first byte falls in when the model's bytes, in
        forward order, are cut into train_bands equal runs.  Where a few
        layers hold most of the bytes, the bands then split them from the
        layers backward produces right beside them (VGG-19: fc7 and fc8 in
        band 3, fc6 with the conv layers in band 0, where the planner puts
        conv5_4 to fc8 in band 3), so that the qdisc, and not the moment
        each worker handed them over, decides which of them goes first.  An
        experiment: measured, it was no faster than the planner's levels
        at VGG-19 and 3.5-3.9% slower at ResNet-50 (`git show
        216191b:docs/benchmarks.md`, "Why one socket per peer loses")."""
        planned = {}
        for s in slices:
            planned.setdefault(s.tensor, s.level)
        total, before, lv = sum(self.layer_bytes), 0, {}
        for la, nbytes in enumerate(self.layer_bytes):
            lv[la] = min(planned[la], before * self.train_bands // total)
            before += nbytes
        return lv

    def _even_pieces(self, slices):
        """shard "even": every layer of at least 64 bytes per server cut
        into a multiple of `servers` pieces of equal size (within a byte;
        at most slice_bytes), piece i to server i % servers, so that every
        server carries the same share of every layer; smaller layers
        whole, to server (layer % servers).  Levels and prios are the
        planner's."""
        first = {}
        for s in slices:
            first.setdefault(s.tensor, s)
        keys, S = [], self.servers
        for la, nbytes in enumerate(self.layer_bytes):
            lv, prio = first[la].level, first[la].prio
            if nbytes < 64 * S:
                keys.append(Key(len(keys), la, la % S, 0, nbytes, 0, lv, prio))
                continue
            pieces = S * -(-nbytes // (S * self.slice_bytes))
            base, extra = divmod(nbytes, pieces)
            off = 0
            for i in range(pieces):
                n = base + (i < extra)
                keys.append(Key(len(keys), la, i % S, off, n, 0, lv, prio))
                off += n
        return keys

    @staticmethod
    def _shard_offsets(keys):
        """Place each key in its (layer, server) shard, the buffer a worker
        receives that server's part of the layer into."""
        fill = collections.Counter()
        out = []
        for k in sorted(keys, key=lambda k: (k.layer, k.offset)):
            out.append(k._replace(shard_off=fill[(k.layer, k.server)]))
            fill[(k.layer, k.server)] += k.nbytes
        return sorted(out, key=lambda k: k.id)

    def keys_of_layer(self):
        by = collections.defaultdict(list)
        for k in self.keys:
            by[k.layer].append(k)
        return by

    # ------------------------------------------------------------ ideal
    def link_bytes(self, keys=None):
        """Bytes a worker's and the busiest server's link carry per
        iteration, frame headers included."""
        keys = self.keys if keys is None else keys
        worker = sum(k.nbytes + FRAME_HDR for k in keys)
        per_server = collections.Counter()
        for k in keys:
            per_server[k.server] += self.workers * (k.nbytes + FRAME_HDR)
        return max([worker] + list(per_server.values()))

    def ideal(self):
        """The analytic ideal (perfect overlap) for this model, cluster and
        link rate, with P3's slicing and sharding:

          iter = max(C + d0 + k0/r, L/r + f_last + b_last + kL/r)

        C       compute per iteration (all forward and backward layers);
        d0      the first layer's synchronisation, which cannot overlap:
                its gradient exists only at the end of backward and the
                next forward needs it first; push and pull pipelined at
                slice granularity, d0 = max(bytes0 on either link)/r,
                and k0, the smallest of its keys, stored and forwarded
                by a server;
        L       bytes per iteration on the busiest link (every worker link
                carries the whole model once, each server link its shard
                for every worker);
        r       the link's TCP goodput (rate * 1448/1514);
        f_last, b_last
                the last layer's forward and backward: no gradient exists
                before b_last ends and every byte of the previous iteration
                must have arrived before f_last starts, so a link idles
                for at least that long each iteration;
        kL      the smallest key of the last layer, the first a server
                can hold whole: its link has nothing of the iteration to
                send before that (store-and-forward).
        """
        ref = self if self.sliced else Job(
            self.profile, "p3kernel", self.workers, self.servers, self.gbps,
            self.compute_s, self.model_bytes, self.slice_bytes,
            self.train_bands, self.shard, self.group_slices, self.levels)
        r = ref.rate * GOODPUT
        compute = sum(ref.fwd) + sum(ref.bwd)
        def smallest_key_s(layer):
            return (min(k.nbytes for k in ref.keys if k.layer == layer) +
                    FRAME_HDR) / r

        first = [k for k in ref.keys if k.layer == 0]
        d0 = ref.link_bytes(first) / r
        # a server can pass layer 0 on once one of its keys is in
        key0_s = smallest_key_s(0)
        link = ref.link_bytes() / r
        a = compute + d0 + key0_s
        b = link + ref.fwd[-1] + ref.bwd[-1] + smallest_key_s(len(ref.fwd) - 1)
        return {"iter_s": max(a, b), "compute_s": compute, "link_s": link,
                "first_layer_sync_s": d0, "bound": "compute" if a >= b
                else "network"}

    def samples_per_s(self, iter_s):
        """Real-equivalent throughput of the whole job."""
        return (self.workers * self.profile["batch"] /
                (iter_s / self.time_scale))

    def describe(self):
        return {"model": self.profile["model"], "mode": self.mode,
                "workers": self.workers, "servers": self.servers,
                "gbps": self.gbps, "rate_Bps": self.rate,
                "rate_mbit": self.rate * 8 / 1e6,
                "time_scale": self.time_scale, "byte_scale": self.byte_scale,
                "slice_bytes": self.slice_bytes, "keys": len(self.keys),
                "shard": self.shard, "group_slices": self.group_slices,
                "levels": self.levels,
                "model_bytes": sum(self.layer_bytes),
                "batch": self.profile["batch"]}
