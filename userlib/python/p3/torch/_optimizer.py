# SPDX-License-Identifier: LGPL-2.1-or-later
"""DistributedOptimizer: the wrapped optimizer's update, fed with gradients
averaged over the ranks by the exchange (_exchange.py).

To the rest of torch it is the optimizer it wraps: an instance of a
subclass of the wrapped optimizer's class (as Horovod's wrapper is), so
that learning-rate schedulers, GradScaler and isinstance accept it, and
sharing its param_groups and state, so that a schedule's learning rates
reach the update."""

import torch

import p3
import p3.dgram
from . import _job, _wire
from ._exchange import Exchange
from ._layout import ORDER, Layout
from ._malloc import keep_step_memory
from ._mesh import Mesh, dgram_level, make_room, sockets_needed
from ._order import forward_ranks
from ._reduction import Average, Compression, Reduction
from ._modes import LossTolerant, Sparsify, wire_options
from ._setup import (DEFAULT_LEVELS, agreed_levels, agreed_slice,
                     auto_slice, check_args, check_datagram_levels, free_levels,
                     local_p3_qdisc, same_plan, warn_if_no_qdisc)
from ._slimdp import SlimDP
from ._dlcp import BoundedLoss
from ._errors import PeerError, StepTimeout
from ._update import Updates, groups_of, named_params

_classes = {}


def _wrapper_class(base):
    """DistributedOptimizer's subclass that is also a subclass of base."""
    if base not in _classes:
        _classes[base] = type('Distributed' + base.__name__,
                              (DistributedOptimizer, base),
                              {'__module__': __name__})
    return _classes[base]


def _forwarded(name):
    """An attribute of the wrapped optimizer, read and written through:
    load_state_dict replaces the wrapped param_groups list, and the
    schedulers must see the new one."""
    return property(lambda self: getattr(self._opt, name),
                    lambda self, v: setattr(self._opt, name, v))


class DistributedOptimizer(Updates, torch.optim.Optimizer):
    """Wrap any torch.optim optimizer whose update is per parameter (SGD,
    Adam, AdamW, RMSprop, ...; not LBFGS).  The result is an instance of
    the wrapped optimizer's class too.

    By default every parameter that requires a gradient must get one in
    every step, as with DDP; find_unused_parameters=True (DDP's name)
    averages a missing gradient as zeros, and leaves a parameter that no
    rank gave a gradient un-updated, as DDP does.  Parameters with
    requires_grad=False are left alone.

    backward_passes_per_step=N (Horovod's name): gradients accumulate over
    N backward passes, and only the Nth sends them, as DDP's no_sync() on
    the first N - 1 does.

    synchronize() between backward and step() puts the averaged gradients
    in .grad (for clipping), and step() under skip_synchronize() applies
    them as they are then; a gradient changed without it makes step()
    raise.  After step(), synchronize() waits for the update (local).
    Every step copies rank 0's buffers (BatchNorm's running statistics)
    to every rank at the end of backward, unless broadcast_buffers=False.

    Horovod's names: named_parameters= (or second) in place of the
    model; compression (Compression.none, Compression.fp16: float16 on
    the wire, summed in float32); op (Average, Sum); and
    gradient_predivide_factor (Average only).

    bfloat16 parameters are summed in float32 (their bytes travel as
    float32), then rounded once.

    wire: the research wire forms, each with its options on its own
    object (_modes.py).  Sparsify(keep=0.1, explore=0.02, residual=True)
    sends, of each slice, the fraction keep of its most significant
    elements and a random fraction explore of the others (Slim-DP);
    LossTolerant(tolerance, deadline=0.005, reliable_fraction=0.01)
    pushes gradients with bounded loss (DLCP): each slice as datagrams
    on the level after its own (level L travels at 2 L, its datagrams at
    2 L + 1: give the odd bands a deadline in the qdisc), plus its
    largest elements over the reliable channel.  The older keyword
    arguments (sparsify='slimdp', keep, explore, residual;
    loss_tolerance, deadline, reliable_fraction) mean the same.

    slice_bytes: by default the smallest slice keeping a message's CPU
    within 5% of its time on the link (the local p3 qdisc's rate, else
    the interface's speed), at least p3.DEFAULT_SLICE; the ranks agree.

    bands: the job's levels.  By default 8, or fewer where a rank's host
    has a p3 qdisc whose default band (where untagged traffic goes) is 7
    or less (15 or less with loss_tolerance, whose datagrams take as
    many levels again), so that every level stays above that band.  The
    ranks agree on the fewest.

    order: the planner's (p3.plan).  By default 'tail-first': the
    parameters the forward pass needs after the largest one go first,
    on level 0, if they hold at most a quarter of the bytes (VGG-19's
    fc7 and fc8, and fc6's bias); 'forward' is P3's order throughout."""

    param_groups = _forwarded('param_groups')
    state = _forwarded('state')
    defaults = _forwarded('defaults')

    def __new__(cls, optimizer, *args, **kwargs):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError('p3.torch: DistributedOptimizer wraps a '
                            'torch.optim.Optimizer, not %s'
                            % type(optimizer).__name__)
        if isinstance(optimizer, DistributedOptimizer):
            raise ValueError('p3.torch: the optimizer is wrapped already')
        if cls is DistributedOptimizer:
            cls = _wrapper_class(type(optimizer))
        return object.__new__(cls)

    def __init__(self, optimizer, model=None, schedule='p3', bands=None,
                 slice_bytes=None, timeout=None, max_queued=None,
                 forward_order=None, order=None, wire=None,
                 backward_passes_per_step=1, find_unused_parameters=False,
                 broadcast_buffers=True, named_parameters=None,
                 compression=Compression.none, op=Average,
                 gradient_predivide_factor=1.0, **older):
        # The wrapped optimizer's __init__ is not run: its state is _opt's.
        self._opt = optimizer
        self._mesh = None
        if model is not None and not isinstance(model, torch.nn.Module):
            # Horovod's second argument: named_parameters.
            model, named_parameters = None, model
        named = named_params(optimizer, model, named_parameters)
        elsewhere = sorted({str(p.device) for _, p in named
                            if p.device.type != 'cpu'})
        if elsewhere:
            raise ValueError('p3.torch: the model has parameters on %s: '
                             'p3.torch exchanges CPU tensors only (GPU '
                             'tensors are not supported yet; docs/torch.md)'
                             % ', '.join(elsewhere))
        mode = wire_options(wire, older)
        sparse = mode if isinstance(mode, Sparsify) else None
        lossy = mode if isinstance(mode, LossTolerant) else None
        check_args(schedule, order, backward_passes_per_step)
        reduction = Reduction(op, gradient_predivide_factor, compression)
        if mode and not reduction.plain():
            raise ValueError('p3.torch: sparsify and loss_tolerance send '
                             'averages of their own wire form: not with '
                             'compression, op or gradient_predivide_factor')
        nbands = bands if schedule == 'p3' else 1
        if lossy:
            check_datagram_levels(nbands or DEFAULT_LEVELS)
        st = _job.need()
        self._schedule = schedule
        self._timeout = st['timeout'] if timeout is None else timeout
        self._passes_per_step = backward_passes_per_step
        self._find_unused = find_unused_parameters
        # Horovod broadcasts no buffers: without the model, neither does
        # this.
        self._buffers = (list(model.buffers()) if broadcast_buffers and
                         model is not None else [])
        self._params = [p for _, p in named if p.requires_grad]
        self._names = [n for n, p in named if p.requires_grad]
        # Watched at every step: one that starts to require a gradient
        # was never planned for.
        self._frozen = [(n, p) for n, p in named if not p.requires_grad]
        self._group_of = groups_of(optimizer, self._params)
        dtypes = reduction.dtypes(self._params)
        if mode and any(p.dtype == torch.bfloat16
                                       for p in self._params):
            raise ValueError('p3.torch: bfloat16 parameters cannot be '
                             'combined with sparsify or loss_tolerance')
        sizes = [p.numel() * d.itemsize for p, d in zip(self._params, dtypes)]
        # Taken once, before any store key: every rank counts the same.
        st['meshes'] += 1
        seq = st['meshes']
        # One look at this host's qdiscs serves the levels and the warning.
        found = local_p3_qdisc()
        if nbands is None:
            nbands = agreed_levels(st['store'], 'p3t/levels%d' % seq,
                                   st['rank'], st['size'],
                                   free_levels(found, bool(lossy)))
        self.levels = nbands
        if slice_bytes is None and schedule == 'p3':
            slice_bytes = agreed_slice(st['store'], 'p3t/slice%d' % seq,
                                       st['rank'], st['size'],
                                       auto_slice(found, st['host']))
        self.slice_bytes = slice_bytes
        self._layout = Layout(sizes, st['size'], schedule,
                              nbands, slice_bytes,
                              fwd=forward_ranks(self._params, forward_order),
                              order=order or ORDER)
        same_plan(st['store'], 'p3t/plan%d' % seq, st['rank'], st['size'],
                  # What both ends of a push size it by: the layout,
                  # Slim-DP's fractions, the reliable part's fraction.
                  repr((self._layout.digest(), mode and mode.key(),
                        reduction.key())))
        model_bytes = sum(sizes)
        # Datagrams of a whole step may come before their owner registers
        # them (it is still summing the last one): room for two.
        dgram = dict(bands=dgram_level(nbands - 1) + 1,
                     chunk=p3.dgram.DEFAULT_CHUNK,
                     buf_bytes=max(4 << 20, 2 * model_bytes),
                     early_bytes=2 * model_bytes + (8 << 20)) if lossy else None
        make_room(sockets_needed(st['size'], nbands, dgram))
        self._mesh = Mesh(st['store'], 'p3t/mesh%d' % seq, st['rank'],
                          st['size'], st['host'], nbands, self._timeout,
                          max_queued or 2 * model_bytes + (64 << 20), dgram)
        self._lossy = BoundedLoss(
            self._mesh, self._layout, st['rank'], dtypes, lossy.tolerance,
            lossy.deadline, lossy.reliable_fraction) if lossy else None
        form = (_wire.Sparse(SlimDP(self._layout, dtypes, sparse.keep,
                                    sparse.explore, sparse.residual))
                if sparse else _wire.BoundedLoss(self._lossy) if lossy
                else _wire.Dense())
        self._ex = Exchange(self._mesh, self._layout, st['rank'], st['size'],
                            self._params, self._timeout, reduction, form)
        n = len(self._params)
        self._step = 0
        self._passes = [0] * n      # backward passes each has had this step
        self._sent = {}             # pushed this step: (its .grad, version)
        self._ran = set()           # first forward: whose module ran
        self._reads = None          # and which were read before it did
        self._early = set()         # (once it is over)
        self._outside = []          # then: those whose module did not
        self._synced = False        # synchronize() put the averages in .grad
        self._skipping = False
        self._idle = set()          # no rank had a gradient: not updated
        self._unapplied = set()     # averaged for the last step, not applied
        self._step_options = []     # param_groups' options at that step()
        self._hooks = self._install_hooks(model, schedule)
        keep_step_memory()
        st['optimizers'].add(self)
        if schedule == 'p3':        # fifo asks nothing of the kernel
            warn_if_no_qdisc(found, [dgram_level(v) for v in range(nbands)]
                             if lossy else None)

    def zero_grad(self, set_to_none=None):
        """The wrapped optimizer's zero_grad, with its default (torch 1.13
        zeroes in place, as DDP's users expect; 2.0 sets None)."""
        if set_to_none is None:
            self._opt.zero_grad()
        else:
            self._opt.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group):
        raise ValueError('p3.torch: add every parameter group before '
                         'wrapping the optimizer (the exchange is planned '
                         'for the parameters it had then)')

    def state_dict(self):
        self._apply_pending()
        return self._opt.state_dict()

    def load_state_dict(self, state_dict):
        self._opt.load_state_dict(state_dict)

    # --------------------------------------------------------- counters

    def stats(self):
        """This rank's counters since it was made: bytes_sent, gradient
        payload bytes sent (bytes_pushed, its gradients to their owners,
        plus bytes_returned, the averages it owns to every other rank;
        the sparse wire form's headers and indices included, libp3's frame
        headers not); bytes_lost, bytes completed as zeros, and
        rerequests, ranges asked for again (both 0: every byte here is
        delivered reliably, but with loss_tolerance); iterations, the
        steps.  With loss_tolerance, bytes_pushed counts every
        datagram's payload, the reliable parts and the chunks sent again;
        bytes_lost and rerequests are this rank's as an owner: bytes it
        summed as zeros, and the requests for chunks it made."""
        pushed = self._ex.bytes_pushed + self._ex.bytes_resent
        returned = self._ex.bytes_returned
        lossy = self._lossy
        return {'bytes_sent': pushed + returned, 'bytes_pushed': pushed,
                'bytes_returned': returned,
                'bytes_lost': lossy.bytes_lost if lossy else 0,
                'rerequests': lossy.rerequests if lossy else 0,
                'iterations': self._step}

    @property
    def exchange_done(self):
        """time.monotonic() at which each step's gradients were all
        averaged (for measurements: bench/torch)."""
        return list(self._ex.done_at)

    def close(self):
        """Send what is queued, then close the channels (shutdown() does
        this for every optimizer)."""
        if self._mesh is None:
            return
        for h in self._hooks:
            h.remove()
        self._stop_reads()
        # The last step's update, as DDP leaves the model; and every
        # average this rank was sent is read: a socket closed on unread
        # data resets, and the peer may lose what it had not read yet.
        ex = self._ex
        if not (ex.timed_out or ex.lost or ex.error):
            try:
                self._apply_pending()
            except (PeerError, StepTimeout):
                pass            # a peer failed since: nothing to finish
        ex.finish_pushes()          # bounded loss: hands them to libp3
        ex.deliver_owed()           # the averages the peers may wait for
        try:
            for ch in self._mesh.tx.values():
                ch.flush(timeout=self._timeout)
        except p3.Error:
            pass                # a peer gone already: nothing to deliver to
        self._ex.close()
        self._mesh.close()
        self._mesh = None
