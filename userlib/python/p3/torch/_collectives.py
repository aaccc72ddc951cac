# SPDX-License-Identifier: LGPL-2.1-or-later
"""Horovod's collectives, with Horovod's names and meaning, over the Gloo
group init() starts, so that `import p3.torch as hvd` runs a Horovod
script: allreduce, allgather, broadcast (and their in-place forms), the
object forms, broadcast_optimizer_state, and the ranks' places on their
hosts.

Every call but the four place calls (local ones: init() gathers the
places) is a collective, made by every rank in the same order (name is
accepted and unused: Gloo matches calls by order).  Each is bounded by
init's timeout; a peer lost or silent past it is a PeerError.  The results are not differentiable (Horovod's
are)."""
import io
import json
import os
import pickle
import socket
import warnings
import zlib

import torch
import torch.distributed as dist

from . import _job
from ._job import peer_errors
from ._reduction import Adasum, Average, Max, Min, Product, Sum
from ._setup import gathered

# Average is a sum, scaled afterwards (as Horovod does).
_GLOO_OPS = {Average: dist.ReduceOp.SUM, Sum: dist.ReduceOp.SUM,
             Min: dist.ReduceOp.MIN, Max: dist.ReduceOp.MAX,
             Product: dist.ReduceOp.PRODUCT}


def _reduce_op(op, average):
    """Horovod's rules: op or the deprecated average, not both; Average
    by default."""
    if op is None:
        if average is None:
            return Average
        warnings.warn('p3.torch: allreduce(average=...) is deprecated (as '
                      'in Horovod): pass op=Average or op=Sum',
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    if average is not None:
        raise ValueError('p3.torch: allreduce: give op or average, not both')
    if op is Adasum:
        raise ValueError('p3.torch does not support Adasum: use op=Average')
    if op not in _GLOO_OPS:
        raise ValueError('p3.torch: allreduce: unknown op %r (Average, Sum, '
                         'Min, Max or Product)' % (op,))
    return op


def _scale(t, factor):
    """t *= factor in place; integers truncated toward zero, as Horovod's
    scaling casts them."""
    if factor == 1:
        return
    if t.is_floating_point() or t.is_complex():
        t.mul_(factor)
    else:
        t.copy_(t.double().mul_(factor))


def _wire(tensor):
    """tensor's values as Gloo takes them: contiguous, and bfloat16
    widened to float32 (torch 1.13's Gloo has no bfloat16; float32 holds
    each value exactly, and sums round once); tensor's own memory where
    it can be."""
    w = tensor.detach().contiguous()
    return w.float() if w.dtype == torch.bfloat16 else w


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0):
    """Reduce tensor over the ranks, in place, and return it: op (Average
    by default; Sum, Min, Max, Product) of each rank's tensor times
    prescale_factor, times postscale_factor.  average=True/False is
    Horovod's deprecated form of op=Average/Sum."""
    st = _job.need()
    op = _reduce_op(op, average)
    t = tensor.detach()
    w = _wire(t)
    _scale(w, prescale_factor)
    with peer_errors('an all-reduce'):
        dist.all_reduce(w, op=_GLOO_OPS[op], group=st['group'])
    _scale(w, postscale_factor / st['size'] if op is Average
           else postscale_factor)
    if w.dtype != t.dtype or w.data_ptr() != t.data_ptr():
        t.copy_(w)
    return tensor


def _copy(tensor):
    return tensor.detach().clone(memory_format=torch.contiguous_format)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0):
    """allreduce_ on a copy: tensor is left as it is."""
    _job.need()
    return allreduce_(_copy(tensor), average, name, op, prescale_factor,
                      postscale_factor)


def _check_root(root_rank):
    # Before Gloo, which would fail it as if a peer had.
    n = _job.need()['size']
    if not 0 <= root_rank < n:
        raise ValueError('p3.torch: root_rank %r is not a rank (0 to %d)'
                         % (root_rank, n - 1))


def broadcast_(tensor, root_rank, name=None):
    """root_rank's tensor into tensor on every rank, in place; returns
    it."""
    _check_root(root_rank)
    _job.broadcast([tensor], root_rank)
    return tensor


def broadcast(tensor, root_rank, name=None):
    """root_rank's tensor, as a new tensor on every rank."""
    _job.need()
    return broadcast_(_copy(tensor), root_rank)


def _gather(tensor):
    """Every rank's tensor, in rank order; their first dimensions may
    differ, the rest and the dtype may not."""
    st = _job.need()
    if tensor.dim() == 0:
        raise ValueError('p3.torch: allgather concatenates along the first '
                         'dimension: a 0-dimensional tensor has none')
    kind = (tuple(tensor.shape[1:]), str(tensor.dtype))
    head = torch.tensor([tensor.shape[0],
                         zlib.crc32(repr(kind).encode())], dtype=torch.int64)
    heads = [torch.empty_like(head) for _ in range(st['size'])]
    with peer_errors('an all-gather'):
        dist.all_gather(heads, head, group=st['group'])
    rows = [int(h[0]) for h in heads]
    other = [q for q, h in enumerate(heads) if int(h[1]) != int(head[1])]
    # Every rank sees the same heads, so all raise together.
    if other:
        raise ValueError('p3.torch: allgather: ranks %s hold a dtype or '
                         'trailing shape other than rank %d\'s %s %s'
                         % (other, st['rank'], kind[1], list(kind[0])))
    most = max(rows)
    # Gloo gathers equal sizes: the shorter are padded to the longest.
    w = _wire(tensor)
    if w.shape[0] < most:
        w = torch.cat([w, w.new_zeros((most - w.shape[0],) + w.shape[1:])])
    parts = [torch.empty_like(w) for _ in rows]
    if most:
        with peer_errors('an all-gather'):
            dist.all_gather(parts, w, group=st['group'])
    return [p[:k].to(tensor.dtype) for p, k in zip(parts, rows)]


def allgather(tensor, name=None):
    """Every rank's tensor concatenated along the first dimension, in rank
    order (a new tensor); the ranks' first dimensions may differ."""
    return torch.cat(_gather(tensor))


class _Pickler(pickle.Pickler):
    """Pickles an object with its tensors left out, into tensors, for
    Gloo to carry as they are; each in its place is (index, shape,
    dtype).  A tensor met twice is sent once."""

    def __init__(self, f, tensors):
        super().__init__(f, pickle.HIGHEST_PROTOCOL)
        self.tensors = tensors
        self.seen = {}

    def persistent_id(self, obj):
        if not torch.is_tensor(obj):
            return None
        if id(obj) not in self.seen:
            self.seen[id(obj)] = (len(self.tensors), tuple(obj.shape),
                                  obj.dtype)
            self.tensors.append(obj.detach().contiguous())
        return self.seen[id(obj)]


class _Unpickler(pickle.Unpickler):
    """_Pickler's object back, with empty tensors in the places of the
    ones left out (tensors, by index), for a broadcast to fill."""

    def __init__(self, f, tensors):
        super().__init__(f)
        self.tensors = tensors

    def persistent_load(self, pid):
        # Met in the order _Pickler numbered them.
        i, shape, dtype = pid
        if i == len(self.tensors):
            self.tensors.append(torch.empty(shape, dtype=dtype))
        return self.tensors[i]


def _bytes(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _broadcast(obj, root_rank, tensors_apart):
    """root_rank's obj, pickled, on every rank (root_rank's own obj
    there).  tensors_apart: its tensors travel as tensors beside the
    pickle, not inside it (no copy into bytes, none out)."""
    _check_root(root_rank)
    root = _job.need()['rank'] == root_rank
    tensors = []
    if root:
        f = io.BytesIO()
        if tensors_apart:
            _Pickler(f, tensors).dump(obj)
        else:
            pickle.dump(obj, f, pickle.HIGHEST_PROTOCOL)
        data = _bytes(f.getbuffer())
    length = torch.tensor([data.numel() if root else 0], dtype=torch.int64)
    _job.broadcast([length], root_rank)
    if not root:
        data = torch.empty(int(length), dtype=torch.uint8)
    _job.broadcast([data], root_rank)
    if root:
        _job.broadcast(tensors, root_rank)
        return obj
    f = io.BytesIO(data.numpy().tobytes())
    obj = _Unpickler(f, tensors).load() if tensors_apart else pickle.load(f)
    _job.broadcast(tensors, root_rank)
    return obj


def broadcast_object(obj, root_rank=0, name=None):
    """root_rank's obj (anything picklable) on every rank: returns it."""
    return _broadcast(obj, root_rank, tensors_apart=False)


def allgather_object(obj, name=None):
    """Every rank's obj (anything picklable), a list in rank order."""
    _job.need()
    data = _bytes(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))
    return [pickle.loads(p.numpy().tobytes()) for p in _gather(data)]


def broadcast_optimizer_state(optimizer, root_rank):
    """root_rank's optimizer state (param_groups' options, as the learning
    rate, and the per-parameter state tensors) loaded into optimizer on
    every rank, whatever state the others had or lacked.  optimizer: a
    torch.optim optimizer or a DistributedOptimizer; the ranks' must hold
    the same parameter groups, of the same sizes."""
    st = _job.need()
    # On every rank: a DistributedOptimizer's state_dict() first applies
    # the update its last step left to the next forward, which would
    # otherwise land on root_rank's state afterwards.
    state = optimizer.state_dict()
    state = _broadcast(state, root_rank, tensors_apart=True)
    if st['rank'] != root_rank:
        optimizer.load_state_dict(state)


def _env_int(name):
    v = os.environ.get(name)
    return None if v is None else int(v)


def places():
    """The job's state, holding every rank's local rank and hostname
    (local_ranks, hosts, in rank order), worked out once per job through
    the store, by init() (every rank is there): a rank's local rank is
    torchrun's LOCAL_RANK where it has one, else its place by rank among
    the ranks on its host."""
    st = _job.need()
    if 'local_ranks' not in st:
        me = json.dumps([_env_int('LOCAL_RANK'), socket.gethostname()])
        with peer_errors('finding the ranks\' hosts'):
            ranks = [json.loads(v) for v in gathered(
                st['store'], 'p3t/place', st['rank'], st['size'], me)]
        st['local_ranks'] = [
            local if local is not None else
            sum(host == h for _, h in ranks[:q])
            for q, (local, host) in enumerate(ranks)]
        st['hosts'] = [h for _, h in ranks]
    return st


def local_rank():
    """This rank's place among the ranks on its host: torchrun's
    LOCAL_RANK, else worked out from the ranks' hostnames at init()."""
    st = _job.need()
    mine = _env_int('LOCAL_RANK')
    return mine if mine is not None else places()['local_ranks'][st['rank']]


def local_size():
    """The number of ranks on this rank's host: torchrun's
    LOCAL_WORLD_SIZE, else worked out from the ranks' hostnames at
    init()."""
    st = _job.need()
    n = _env_int('LOCAL_WORLD_SIZE')
    if n is not None:
        return n
    hosts = places()['hosts']
    return hosts.count(hosts[st['rank']])


def cross_rank():
    """Horovod's: this rank's place, by rank, among the ranks with its
    local rank (the host's, in a job with the same ranks per host)."""
    st = places()
    locals_ = st['local_ranks']
    return locals_[:st['rank']].count(locals_[st['rank']])


def cross_size():
    """Horovod's: the number of ranks with this rank's local rank (the
    number of hosts, in a job with the same ranks per host)."""
    st = places()
    return st['local_ranks'].count(st['local_ranks'][st['rank']])
