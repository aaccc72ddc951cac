# SPDX-License-Identifier: LGPL-2.1-or-later
"""The job a process has joined: its rank, its size, the store the ranks
meet through, and the Gloo group that carries the one-off collectives
(parameter and buffer broadcasts); gradients go over libp3."""
import contextlib
import datetime
import inspect
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
    reaches MASTER_ADDR from).

    A script that started torch.distributed's default group first is
    joined: its store, and a Gloo group of p3's own beside it (bounded
    by timeout, whatever the script's group is).  Otherwise this starts
    the default group, with Gloo; a later dist.init_process_group() of
    the same job then joins it."""
    if _state:
        return
    td = datetime.timedelta(seconds=timeout)
    group, owned = None, not dist.is_initialized()
    if owned:
        store, r, n = next(dist.rendezvous('env://', timeout=td))
        dist.init_process_group('gloo', store=dist.PrefixStore('p3t/gloo', store),
                                rank=r, world_size=n, timeout=td)
        _join_later_init(r, n)
    else:
        store = dist.distributed_c10d._get_default_store()
        r, n = dist.get_rank(), dist.get_world_size()
        group = dist.new_group(backend='gloo', timeout=td)
    master = os.environ.get('MASTER_ADDR')
    if host is None and master is None:
        raise ValueError('p3.torch: init() needs host= (the address the '
                         'other ranks reach this one at) where MASTER_ADDR '
                         'is not set')
    _state.update(store=store, rank=r, size=n, timeout=timeout, meshes=0,
                  host=host or local_address(master),
                  optimizers=weakref.WeakSet(), group=group, owned=owned,
                  joined_by_script=False)
    # Horovod's local_rank() and local_size() are local calls: every
    # rank's place is gathered here, where every rank is.
    from ._collectives import places
    places()


_torch_init_process_group = dist.init_process_group


def _join_later_init(r, n):
    """A script's own dist.init_process_group() after init(), which made
    the default group: the same job on Gloo joins it (returns, and the
    group is then the script's to destroy), anything else raises naming
    the fix, where torch would only say the group exists."""
    signature = inspect.signature(_torch_init_process_group)

    def init_process_group(*args, **kwargs):
        if not (_state.get('owned') and dist.is_initialized()):
            return _torch_init_process_group(*args, **kwargs)
        asked = signature.bind(*args, **kwargs).arguments
        backend = str(asked.get('backend') or 'gloo')
        if 'nccl' not in backend and 'gloo' in backend and \
                asked.get('rank', -1) in (r, -1) and \
                asked.get('world_size', -1) in (n, -1):
            _state['joined_by_script'] = True
            return None
        raise RuntimeError(
            'p3.torch: p3.torch.init() started the default process group '
            '(Gloo, rank %d of %d): call dist.init_process_group(%r) before '
            'p3.torch.init(), which then joins it' % (r, n, backend))
    dist.init_process_group = init_process_group


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
    if _state.get('group') is not None:
        dist.destroy_process_group(_state['group'])
    elif (_state.get('owned') and not _state.get('joined_by_script')
          and dist.is_initialized()):
        dist.destroy_process_group()
    dist.init_process_group = _torch_init_process_group
    _state.clear()


def broadcast_parameters(state, root_rank=0):
    """Copy root_rank's tensors (a state_dict, or (name, tensor) pairs)
    to every rank, in place."""
    need()
    items = state.items() if hasattr(state, 'items') else state
    broadcast([t for _, t in sorted(items, key=lambda kv: kv[0])
               if torch.is_tensor(t)], root_rank)


@contextlib.contextmanager
def peer_errors(what):
    """Gloo's failures inside (a peer gone, or silent past init's
    timeout) as PeerError, as the exchange raises them; what names the
    call ('an all-reduce')."""
    try:
        yield
    except RuntimeError as e:
        raise PeerError('p3.torch: rank %d: %s failed: %s'
                        % (need()['rank'], what, e)) from e


def broadcast(tensors, root_rank=0):
    """root_rank's tensors to every rank, in place, one Gloo broadcast per
    dtype (bounded by init's timeout); a lost peer is a PeerError, as in
    the exchange."""
    st = need()
    by_dtype = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    with peer_errors('a broadcast'):
        for dtype, ts in by_dtype.items():
            # Gloo has no bfloat16; float32 holds each value exactly.
            wide = torch.float32 if dtype == torch.bfloat16 else dtype
            flat = torch.cat([t.data.reshape(-1).to(wide) for t in ts])
            dist.broadcast(flat, root_rank, group=st['group'])
            if st['rank'] == root_rank:
                continue
            at = 0
            for t in ts:
                t.data.copy_(flat[at:at + t.numel()].view(t.shape))
                at += t.numel()


def all_true(flags):
    """Elementwise AND of a bool tensor over the ranks (Gloo, bounded by
    init's timeout)."""
    mask = flags.to(torch.int32)
    with peer_errors('an all-reduce'):
        dist.all_reduce(mask, op=dist.ReduceOp.MIN, group=need()['group'])
    return mask.bool()
