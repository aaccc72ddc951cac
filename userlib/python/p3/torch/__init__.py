# SPDX-License-Identifier: LGPL-2.1-or-later
"""p3.torch: data-parallel PyTorch training with P3's gradient exchange.

    import p3.torch as p3t
    p3t.init()                      # RANK, WORLD_SIZE, MASTER_ADDR/PORT
    p3t.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = p3t.DistributedOptimizer(torch.optim.SGD(...), model)
    for x, y in loader:
        opt.zero_grad(); loss(model(x), y).backward(); opt.step()
    opt.synchronize()

Every rank owns (sums) a share of the gradient slices, as co-located
BytePS servers do.  With schedule='p3', backward hooks push each slice the
moment its gradient exists, on libp3 bands by forward order (tagged for
the sch_p3 qdisc), each layer is updated as soon as its average is in, and
the next forward waits only for the layer it is about to run.  With
'fifo', whole tensors go in backward order on one band and step() waits
for all of them (WFBP, as DDP and Horovod do).  With sparsify='slimdp',
each slice carries only the elements Slim-DP picks (_slimdp.py).  See
docs/torch.md.
"""
import datetime
import os
import socket
import time
import warnings
import weakref

import torch
import torch.distributed as dist

import p3
import p3.dgram
from ._dlcp import BoundedLoss, check_args as _check_dlcp
from ._exchange import Exchange, PeerError, StepTimeout, np_dtypes
from ._layout import ORDER, Layout
from ._mesh import STRIDE, Mesh, dgram_level, local_address
from ._slimdp import SlimDP, check_args as _check_slimdp

__all__ = ['init', 'rank', 'size', 'shutdown', 'broadcast_parameters',
           'DistributedOptimizer', 'forward_order', 'PeerError', 'StepTimeout',
           'NotInitializedError']

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
        # Gloo carries the one-off broadcasts; gradients go over libp3.
        dist.init_process_group('gloo', store=dist.PrefixStore('p3t/gloo', store),
                                rank=r, world_size=n, timeout=td)
    _state.update(store=store, rank=r, size=n, timeout=timeout, meshes=0,
                  host=host or local_address(os.environ['MASTER_ADDR']),
                  optimizers=weakref.WeakSet())


def _need():
    if not _state:
        raise NotInitializedError('p3.torch: call p3.torch.init() first')
    return _state


def rank():
    return _need()['rank']


def size():
    return _need()['size']


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
    _need()
    items = state.items() if hasattr(state, 'items') else state
    for _, t in sorted(items, key=lambda kv: kv[0]):
        if torch.is_tensor(t):
            dist.broadcast(t.data, root_rank)


DEFAULT_LEVELS = 8
_warned = []


def _local_p3_qdisc():
    """(interface, p3.qdisc_stats) of the first interface with a p3 qdisc
    anywhere in its tree (parent 0 matches any: p3 under netem or mq
    counts), or None."""
    for _, name in socket.if_nameindex():
        try:
            return name, p3.qdisc_stats(name, parent=0)
        except p3.Error:
            continue
    return None


def _free_levels(found, lossy=False):
    """How many levels the p3 qdisc found (_local_p3_qdisc()) keeps above
    its default band.
    Untagged traffic (an upload, a checkpoint) goes to that band, where
    a job level would get only its DRR share of the band's link time
    beside the upload: with the qdisc's defaults (8 bands, default 7)
    the job takes levels 0..6.  With bounded loss the datagrams take the
    level after each (_mesh.dgram_level): 2 levels must stay above it."""
    default = found[1]['options'].get('default') if found else None
    if not default:
        # No qdisc, or untagged traffic in band 0, above everything: no
        # level can avoid it, so the job keeps them all.
        return DEFAULT_LEVELS
    return min(DEFAULT_LEVELS, default // STRIDE if lossy else default) or 1


def _gathered(store, key, rank, world, value):
    """Every rank's value (a string) under key, in rank order, this
    rank's included (store.get is bounded by the store's timeout)."""
    store.set('%s/%d' % (key, rank), value)
    return [store.get('%s/%d' % (key, q)).decode() for q in range(world)]


def _agreed_levels(store, key, rank, world, free):
    """Every rank plans the same layout, so all take the fewest levels any
    rank's host leaves free."""
    return min(map(int, _gathered(store, key, rank, world, str(free))))


def _same_plan(store, key, rank, world, plan):
    """Raise ValueError, on every rank alike, unless every rank computed
    the same plan (a string: the layout's digest and the options the
    exchange depends on).  The ranks never talk about the layout, so
    ranks given different arguments (order, slice_bytes, forward_order,
    sparsify, a different model) would otherwise exchange mismatched
    slices without an error."""
    plans = _gathered(store, key, rank, world, plan)
    differ = [q for q in range(world) if plans[q] != plans[0]]
    if differ:
        raise ValueError(
            'p3.torch: rank%s %s planned a different exchange from rank 0 '
            '(%s against %s): every rank must pass the same model and the '
            'same DistributedOptimizer arguments (schedule, bands, '
            'slice_bytes, order, forward_order, sparsify, keep, explore, '
            'reliable_fraction)' % ('s' if len(differ) > 1 else '',
                                    ', '.join(map(str, differ)),
                                    plans[differ[0]], plans[0]))


def _warn_if_no_qdisc(found, tolerant=None):
    """Say once when no interface has a p3 qdisc (found is
    _local_p3_qdisc()'s answer): order then comes from
    libp3's in-band heap alone, and less urgent bulk shares the NIC.  With
    tolerant, the datagrams' levels, say too if the p3 qdisc found gives
    them no loss-tolerant bands."""
    if _warned:
        return
    _warned.append(True)
    if found is None:
        warnings.warn('p3.torch: no network interface has the p3 qdisc; '
                      'the kernel is not enforcing P3 order (tc qdisc add dev '
                      'DEV root p3)', RuntimeWarning, stacklevel=3)
        return
    name, st = found
    if tolerant and not all(
            b < len(st['bands']) and st['bands'][b]['deadline_us']
            for b in tolerant):
        warnings.warn(
            'p3.torch: loss_tolerance: the p3 qdisc on %s has no '
            'deadline on bands %s, where the datagrams go; they '
            'wait like reliable packets (tc class change dev %s '
            'classid H:K p3 deadline 5ms, K = band + 1 in hex; '
            'docs/torch.md)'
            % (name, ', '.join(map(str, tolerant)), name), RuntimeWarning,
            stacklevel=3)


def _bounded_loss_args(loss_tolerance, deadline, reliable_fraction,
                       sparsify, bands):
    """(loss_tolerance, deadline, reliable_fraction) checked, with the
    defaults, or None without loss_tolerance; ValueError otherwise."""
    if loss_tolerance is None:
        if deadline is not None or reliable_fraction is not None:
            raise ValueError('p3.torch: deadline and reliable_fraction need '
                             'loss_tolerance')
        return None
    if sparsify:
        raise ValueError('p3.torch: loss_tolerance and sparsify cannot be '
                         'combined')
    if dgram_level(bands - 1) > 62:
        raise ValueError('p3.torch: loss_tolerance needs bands <= 31 (each '
                         'level\'s datagrams take the level after it)')
    return _check_dlcp(loss_tolerance, 0.005 if deadline is None else deadline,
                       0.01 if reliable_fraction is None else reliable_fraction)


def _forward_ranks(params, order):
    """fwd of each of params: its place in order (forward_order()'s
    list), those missing from it after, in params' order."""
    if order is None:
        return None
    place = {}
    for p in list(order) + list(params):
        place.setdefault(p, len(place))
    return [place[p] for p in params]


def forward_order(model, *inputs, **kwargs):
    """The model's parameters in the order one forward pass on inputs
    first runs their modules (without autograd; the model's mode as it
    is); parameters it never reaches follow in registration order.  Pass
    it to DistributedOptimizer where modules are registered in another
    order than they run, so that levels follow the real forward pass."""
    order, seen = [], set()

    def pre_hook(module, _inputs):
        for p in module.parameters(recurse=False):
            if p not in seen:
                seen.add(p)
                order.append(p)

    hooks = [m.register_forward_pre_hook(pre_hook) for m in model.modules()]
    try:
        with torch.no_grad():
            model(*inputs, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    return order + [p for p in model.parameters() if p not in seen]


class DistributedOptimizer:
    """Wrap any torch.optim optimizer whose update is per parameter (SGD,
    Adam, AdamW, RMSprop, ...; not LBFGS).  Every parameter that requires
    a gradient must get one in every step, as with DDP.

    sparsify='slimdp' sends, of each slice, the fraction keep (default 0.1)
    of its most significant elements and a random fraction explore
    (default 0.02) of the others; the rest stays in this rank's residual
    for later steps (residual=False drops it, for comparison only).

    loss_tolerance (e.g. 0.01) pushes gradients with bounded loss (DLCP):
    each slice as datagrams on the level after its own (level L travels
    at 2 L, its datagrams at 2 L + 1: give the odd bands a deadline in
    the qdisc), plus its largest elements, the fraction
    reliable_fraction (default 0.01), over the reliable channel.  A
    slice's datagrams complete once none came for deadline seconds
    (default 0.005); above loss_tolerance of its bytes missing, the
    missing chunks are fetched again, reliably.

    bands: the job's levels.  By default 8, or fewer where a rank's host
    has a p3 qdisc whose default band (where untagged traffic goes) is 7
    or less (15 or less with loss_tolerance, whose datagrams take as
    many levels again), so that every level stays above that band.  The
    ranks agree on the fewest.

    order: the planner's (p3.plan).  By default 'tail-first': the
    parameters the forward pass needs after the largest one go first,
    on level 0, if they hold at most a quarter of the bytes (VGG-19's
    fc7 and fc8, and fc6's bias); 'forward' is P3's order throughout."""

    def __init__(self, optimizer, model, schedule='p3', bands=None,
                 slice_bytes=None, timeout=None, max_queued=None,
                 forward_order=None, sparsify=None, keep=None, explore=None,
                 residual=True, loss_tolerance=None, deadline=None,
                 reliable_fraction=None, order=None):
        if sparsify not in (None, 'slimdp'):
            raise ValueError("p3.torch: sparsify must be None or 'slimdp', "
                             "not %r" % (sparsify,))
        if sparsify is None and (keep is not None or explore is not None):
            raise ValueError("p3.torch: keep and explore need "
                             "sparsify='slimdp'")
        if order is not None and (schedule != 'p3' or order not in p3.ORDERS):
            raise ValueError("p3.torch: order needs schedule='p3' and is one "
                             "of %s, not %r" % (', '.join(p3.ORDERS), order))
        if sparsify:
            keep, explore = _check_slimdp(0.1 if keep is None else keep,
                                          0.02 if explore is None else explore)
        nbands = bands if schedule == 'p3' else 1
        lossy = _bounded_loss_args(loss_tolerance, deadline, reliable_fraction,
                                   sparsify, nbands or DEFAULT_LEVELS)
        st = _need()
        self._opt = optimizer
        self._schedule = schedule
        self._timeout = st['timeout'] if timeout is None else timeout
        self._params = [p for p in model.parameters() if p.requires_grad]
        names = {p: n for n, p in model.named_parameters()}
        self._names = [names[p] for p in self._params]
        index = {p: i for i, p in enumerate(self._params)}
        for g in optimizer.param_groups:
            for p in g['params']:
                if p.requires_grad and p not in index:
                    raise ValueError('p3.torch: the optimizer holds a parameter '
                                     'that is not in the model')
        sizes = [p.numel() * p.element_size() for p in self._params]
        # Taken once, before any store key: every rank counts the same.
        st['meshes'] += 1
        seq = st['meshes']
        # One look at this host's qdiscs serves the levels and the warning.
        found = _local_p3_qdisc()
        if nbands is None:
            nbands = _agreed_levels(st['store'], 'p3t/levels%d' % seq,
                                    st['rank'], st['size'],
                                    _free_levels(found, bool(lossy)))
        self.levels = nbands
        self._layout = Layout(sizes, st['size'], schedule,
                              nbands, slice_bytes,
                              fwd=_forward_ranks(self._params, forward_order),
                              order=order or ORDER)
        _same_plan(st['store'], 'p3t/plan%d' % seq, st['rank'], st['size'],
                   # What both ends of a push size it by: the layout,
                   # Slim-DP's fractions, the reliable part's fraction.
                   repr((self._layout.digest(), sparsify, keep, explore,
                         lossy and lossy[2])))
        sparse = SlimDP(self._layout, np_dtypes(self._params), keep, explore,
                        residual) if sparsify else None
        model_bytes = sum(sizes)
        # Datagrams of a whole step may come before their owner registers
        # them (it is still summing the last one): room for two.
        dgram = dict(bands=dgram_level(nbands - 1) + 1,
                     chunk=p3.dgram.DEFAULT_CHUNK,
                     buf_bytes=max(4 << 20, 2 * model_bytes),
                     early_bytes=2 * model_bytes + (8 << 20)) if lossy else None
        self._mesh = Mesh(st['store'], 'p3t/mesh%d' % seq, st['rank'],
                          st['size'], st['host'], nbands, self._timeout,
                          max_queued or 2 * model_bytes + (64 << 20), dgram)
        self._lossy = BoundedLoss(self._mesh, self._layout, st['rank'],
                                  np_dtypes(self._params),
                                  *lossy) if lossy else None
        self._ex = Exchange(self._mesh, self._layout, st['rank'], st['size'],
                            self._params, self._timeout, sparse, self._lossy)
        self._step = 0
        self._unapplied = set()     # averaged for the last step, not applied
        self._hooks = []
        for i, p in enumerate(self._params):
            # Horovod's trick: the AccumulateGrad node's hook runs once p.grad
            # holds this backward's gradient (torch 1.13 has no
            # post-accumulate hook on the tensor).
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append((acc, acc.register_hook(self._make_hook(i))))
        if schedule == 'p3':
            for m in model.modules():
                own = [index[p] for p in m.parameters(recurse=False) if p in index]
                if own:
                    self._hooks.append(
                        (m, m.register_forward_pre_hook(self._make_pre_hook(own))))
        st['optimizers'].add(self)
        if schedule == 'p3':        # fifo asks nothing of the kernel
            _warn_if_no_qdisc(found, [dgram_level(v) for v in range(nbands)]
                              if lossy else None)

    def _make_hook(self, i):
        def hook(*_):
            self._ex.gradient(i, self._params[i].grad, self._step)
        return hook

    def _make_pre_hook(self, own):
        def pre_hook(module, inputs):
            pending = [i for i in own if i in self._unapplied]
            if pending:
                self._apply(pending, wait=True)
        return pre_hook

    def _deadline(self):
        return time.monotonic() + self._timeout

    def _apply(self, indices, wait):
        """Update parameters indices with their averaged gradients, through
        the wrapped optimizer (parameters without a gradient are skipped
        by every torch.optim update, so the others are untouched)."""
        if wait:
            self._ex.wait(indices, self._deadline())
        chosen = set(indices)
        saved = [p.grad for p in self._params]
        for i, p in enumerate(self._params):
            p.grad = self._ex.avg[i].view_as(p) if i in chosen else None
        with torch.no_grad():
            self._opt.step()
        for i, p in enumerate(self._params):
            p.grad = None if i in chosen else saved[i]
        self._unapplied -= chosen
        self._ex.recycle(indices, self._step - 1)

    def step(self, closure=None):
        if closure is not None:
            raise ValueError('p3.torch: step(closure) is not supported')
        missing = self._ex.end_step()
        if missing:
            raise RuntimeError('p3.torch: no gradient for %s in this step (every '
                               'parameter needs one)'
                               % ', '.join(self._names[i] for i in missing[:5]))
        self._step += 1
        self._unapplied = set(range(len(self._params)))
        if self._schedule == 'fifo':
            self._apply(sorted(self._unapplied), wait=True)
        else:
            ready = [i for i in self._ex.done_now() if i in self._unapplied]
            if ready:
                self._apply(ready, wait=False)

    def synchronize(self):
        """Wait until every parameter holds the last step's update."""
        if self._unapplied:
            self._apply(sorted(self._unapplied), wait=True)

    def zero_grad(self, set_to_none=True):
        self._opt.zero_grad(set_to_none=set_to_none)

    def stats(self):
        """This rank's counters since it was made: bytes_sent, gradient
        payload bytes sent (bytes_pushed, its gradients to their owners,
        plus bytes_returned, the averages it owns to every other rank;
        the sparse wire form's headers and indices included, libp3's frame
        headers not); bytes_lost, bytes completed as zeros, and
        rerequests, ranges asked for again (both 0: every byte here is
        delivered reliably, but with loss_tolerance); iterations, the
        step() calls.  With loss_tolerance, bytes_pushed counts every
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

    @property
    def param_groups(self):
        return self._opt.param_groups

    def state_dict(self):
        return self._opt.state_dict()

    def load_state_dict(self, sd):
        self._opt.load_state_dict(sd)

    def close(self):
        """Send what is queued, then close the channels (shutdown() does
        this for every optimizer)."""
        if self._mesh is None:
            return
        for _, h in self._hooks:
            h.remove()
        self._ex.finish_pushes()    # bounded loss: hands them to libp3
        try:
            for ch in self._mesh.tx.values():
                ch.flush(timeout=self._timeout)
        except p3.Error:
            pass                # a peer gone already: nothing to deliver to
        self._ex.close()
        self._mesh.close()
        self._mesh = None
