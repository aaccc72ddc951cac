# SPDX-License-Identifier: LGPL-2.1-or-later
"""The job a process has joined: its rank, its size, the store the ranks
meet through, and the Gloo group that carries the one-off collectives
(parameter and buffer broadcasts); gradients go over libp3."""
import datetime
import os
import weakref

import torch
import torch.distributed as dist

from ._errors import PeerError
from ._mesh import local_address

DEFAULT_TIMEOUT = 30.0


class NotInitializedError(RuntimeError):
    """p3.torch.init() has not run (or shutdown() has)."""


_state = {}


def init(timeout=DEFAULT_TIMEOUT, host=None):
    """Join the job: rendezvous through torch.distributed's store at
    MASTER_ADDR:MASTER_PORT (as torchrun sets them, or by hand with RANK
    and WORLD_SIZE).  timeout bounds every wait for a peer, in seconds.
    host: the address peers reach this rank at (default: the one this host
    reaches MASTER_ADDR from)."""
    if _state:
        return
    td = datetime.timedelta(seconds=timeout)
    store, r, n = next(dist.rendezvous('env://', timeout=td))
    if not dist.is_initialized():
        dist.init_process_group('gloo', store=dist.PrefixStore('p3t/gloo', store),
                                rank=r, world_size=n, timeout=td)
    _state.update(store=store, rank=r, size=n, timeout=timeout, meshes=0,
                  host=host or local_address(os.environ['MASTER_ADDR']),
                  optimizers=weakref.WeakSet())


def need():
    if not _state:
        raise NotInitializedError('p3.torch: call p3.torch.init() first')
    return _state


def rank():
    return need()['rank']


def size():
    return need()['size']


def shutdown():
    """Close every optimizer's channels and leave the process group."""
    for opt in list(_state.get('optimizers', ())):
        opt.close()
    if _state and dist.is_initialized():
        dist.destroy_process_group()
    _state.clear()


def broadcast_parameters(state, root_rank=0):
    """Copy root_rank's tensors (a state_dict, or (name, tensor) pairs)
    to every rank, in place."""
    need()
    items = state.items() if hasattr(state, 'items') else state
    broadcast([t for _, t in sorted(items, key=lambda kv: kv[0])
               if torch.is_tensor(t)], root_rank)


def broadcast(tensors, root_rank=0):
    """root_rank's tensors to every rank, in place, over Gloo (bounded by
    init's timeout); a lost peer is a PeerError, as in the exchange."""
    try:
        for t in tensors:
            if t.dtype == torch.bfloat16:
                # Gloo has no bfloat16; float32 holds each value exactly.
                wide = t.data.float()
                dist.broadcast(wide, root_rank)
                t.data.copy_(wide)
            else:
                dist.broadcast(t.data, root_rank)
    except RuntimeError as e:
        raise PeerError('p3.torch: rank %d: a broadcast failed: %s'
                        % (_state['rank'], e)) from e


def all_true(flags):
    """Elementwise AND of a bool tensor over the ranks (Gloo, bounded by
    init's timeout)."""
    mask = flags.to(torch.int32)
    try:
        dist.all_reduce(mask, op=dist.ReduceOp.MIN)
    except RuntimeError as e:
        raise PeerError('p3.torch: rank %d: an all-reduce failed: %s'
                        % (_state['rank'], e)) from e
    return mask.bool()
