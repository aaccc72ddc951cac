# SPDX-License-Identifier: LGPL-2.1-or-later
"""How a DistributedOptimizer updates the model: a backward hook hands
each gradient to the exchange (_exchange.py) once its last pass is in,
and, under schedule 'p3', a forward pre-hook applies a layer's averaged
update just before the layer runs, so that the next forward starts
while deeper layers' averages are still on the wire.  The wrapped
optimizer is shown only the parameters it updates, with the options
they had at step().  step(), synchronize() and skip_synchronize() are
here too: the calls a training loop makes."""
import contextlib
import importlib
import itertools
import time
import weakref

import torch
from torch.nn.modules.module import (register_module_forward_hook,
                                      register_module_forward_pre_hook)
from torch.overrides import TorchFunctionMode

from . import _job


def _dynamo():
    """torch.compile's TorchDynamo, or None (torch 1.13 has none)."""
    try:
        return importlib.import_module('torch._dynamo')
    except ImportError:
        return None


def _not_compiled(hook):
    """hook, run as Python each time under torch.compile: traced, its
    wait and update (side effects on state outside the graph) would be
    fixed at the first call, and the next forward would not wait for
    its layer.  Each such hook breaks the compiled graph in two."""
    # torch.compiler.disable from 2.1; 2.0 has only dynamo's own.
    disable = getattr(getattr(torch, 'compiler', None), 'disable', None)
    if disable is None and _dynamo() is not None:
        disable = _dynamo().disable
    return disable(hook) if disable else hook


def _compiled_graphs_see_hooks():
    """Make torch.compile check a module's hooks before it reuses a graph:
    by default it does not, and a graph compiled before the forward
    pre-hooks existed (this model's, or another model's of the same
    code) runs without them, so that the forward neither waits for nor
    applies its layer's update (seen: every rank waiting for averages
    until StepTimeout).  A graph keeps the guards it was compiled with:
    this runs on import, before a script compiles anything."""
    if _dynamo() is not None:
        _dynamo().config.skip_nnmodule_hook_guards = False


_compiled_graphs_see_hooks()


def named_params(optimizer, model, named_parameters):
    """(name, parameter) pairs the optimizer is to average: the model's,
    else named_parameters (Horovod's), else the optimizer's own, each
    once."""
    if model is not None:
        named = list(model.named_parameters())
    elif named_parameters is not None:
        named = list(named_parameters)
    else:
        named = [('param.%d' % k, p) for k, p in enumerate(
            p for g in optimizer.param_groups for p in g['params'])]
    seen, out = set(), []
    for n, p in named:
        if not isinstance(p, torch.Tensor):
            raise TypeError('p3.torch: named_parameters holds (name, '
                            'tensor) pairs, not %r' % ((n, p),))
        if p not in seen:
            seen.add(p)
            out.append((n, p))
    return out


def groups_of(optimizer, params):
    """Each parameter's group in optimizer (None: it is in none, and is
    averaged but not updated); ValueError for a parameter of optimizer's
    that is not among params (those that require a gradient)."""
    index = set(params)
    group_of = {}
    for k, g in enumerate(optimizer.param_groups):
        for p in g['params']:
            if p.requires_grad and p not in index:
                raise ValueError('p3.torch: the optimizer holds a parameter '
                                 'that is not in the model (or '
                                 'named_parameters)')
            group_of[p] = k
    return [group_of.get(p) for p in params]


class _FirstReads(TorchFunctionMode):
    """The first forward's reads of the parameters: one read before its
    own module's pre-hook ran (by another module, or by the root's own
    forward) is noted in early.  Entered by the first pre-hook (the
    root's), left when that module returns, or at step() if it raised."""

    def __init__(self, index, ran, root):
        super().__init__()
        self.index, self.ran, self.root = index, ran, root
        self.early = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in itertools.chain(args, kwargs.values()):
            for t in a if isinstance(a, (list, tuple)) else (a,):
                if isinstance(t, torch.Tensor):
                    i = self.index.get(t)
                    if i is not None and i not in self.ran:
                        self.early.add(i)
        return func(*args, **kwargs)


class Updates:
    """DistributedOptimizer's hooks and update (a mixin: the state is the
    optimizer's)."""

    def _install_hooks(self, model, schedule):
        """The hooks on model (their handles): a backward one on every
        parameter's gradient, with 'p3' a forward pre-hook on every module
        that holds parameters, and one on model's state_dict()."""
        index = self._index = {p: i for i, p in enumerate(self._params)}
        if hasattr(torch.Tensor, 'register_post_accumulate_grad_hook'):
            # torch >= 2.1: the hook runs once p.grad holds this backward's
            # gradient, on the tensor itself.
            hooks = [p.register_post_accumulate_grad_hook(self._make_hook(i))
                     for i, p in enumerate(self._params)]
        else:
            # Horovod's trick on 1.13: a hook on the AccumulateGrad node.
            # The nodes are kept: one no longer referenced is made anew,
            # without the hook.
            self._accumulators = [p.expand_as(p).grad_fn.next_functions[0][0]
                                  for p in self._params]
            hooks = [acc.register_hook(self._make_hook(i))
                     for i, acc in enumerate(self._accumulators)]
        if model is None:
            # Horovod's named_parameters: the modules are found as they
            # run, by a hook on every module's forward.
            if schedule == 'p3':
                hooks.append(register_module_forward_pre_hook(
                    _not_compiled(self._make_finding_hook(index, hooks))))
                hooks.append(register_module_forward_hook(
                    _not_compiled(self._end_first_forward)))
            return hooks
        if schedule == 'p3':
            for m in model.modules():
                own = [index[p] for p in m.parameters(recurse=False)
                       if p in index]
                # The root's hook runs first in every forward.
                if own or m is model:
                    hooks.append(m.register_forward_pre_hook(
                        _not_compiled(self._make_pre_hook(own))))
            hooks.append(model.register_forward_hook(
                _not_compiled(self._end_first_forward)))
        hooks.append(model._register_state_dict_hook(self._on_state_dict))
        return hooks

    def _end_first_forward(self, module, inputs, output):
        """The module that began the first forward's watch (_FirstReads)
        has returned: the watch ends, as the modes entered inside that
        forward have ended."""
        if self._reads is not None and module is self._reads.root:
            self._early |= self._stop_reads()

    def _on_state_dict(self, *_):
        """A checkpoint taken between step() and the next forward holds
        the update p3 would otherwise apply layer by layer in that
        forward (the values are the parameters' own storage)."""
        self._apply_pending()
    # ------------------------------------------------------------ hooks

    def _make_hook(self, i):
        def hook(*_):
            self._passes[i] += 1
            if self._passes[i] == self._passes_per_step:
                grad = self._params[i].grad
                self._ex.gradient(i, grad, self._step)
                # What was sent: a later edit (clipping, unscaling) is
                # seen at step() by the tensor or its version.
                self._sent[i] = (grad, grad._version)
            elif self._passes[i] > self._passes_per_step:
                raise RuntimeError(
                    'p3.torch: %s got more than backward_passes_per_step=%d '
                    'gradients before step()'
                    % (self._names[i], self._passes_per_step))
        return hook

    def _make_finding_hook(self, index, hooks):
        """A forward pre-hook for every module: each gets _make_pre_hook's
        work for the parameters of index it holds (the first module to
        run, for none), and one holding some a state_dict hook, the first
        time it runs."""
        of = weakref.WeakKeyDictionary()

        def pre_hook(module, inputs):
            hook = of.get(module)
            if hook is None:
                own = [index[p] for p in module.parameters(recurse=False)
                       if p in index]
                hook = of[module] = self._make_pre_hook(own)
                if own:
                    hooks.append(module._register_state_dict_hook(
                        self._on_state_dict))
            hook(module, inputs)
        return pre_hook

    def _make_pre_hook(self, own):
        def pre_hook(module, inputs):
            if self._ran is not None:       # the first forward
                if self._reads is None:
                    self._reads = _FirstReads(self._index, self._ran,
                                              module)
                    self._reads.__enter__()
                self._ran.update(own)
            # A parameter read in the first forward before its module ran,
            # or whose module did not run, may be read anywhere
            # (F.linear(x, self.head.weight)): it is updated at the first
            # module, every step alike, whenever its average came.
            pending = [i for i in own + self._outside
                       if i in self._unapplied]
            if pending:
                # With this module's update, every other one averaged
                # already: one step of the wrapped optimizer for many
                # layers (each call costs a walk of its groups).
                ready = set(self._ex.done_now()) & self._unapplied
                self._apply(sorted(ready.union(pending)), wait=True)
        return pre_hook

    # ------------------------------------------------------- the update

    def _deadline(self):
        return time.monotonic() + self._timeout

    def _average(self, i):
        """Parameter i's averaged gradient, in the parameter's dtype (a
        view of the averages, unless it travelled in another dtype)."""
        return self._ex.avg_shaped[i].to(self._params[i].dtype)

    def _apply(self, indices, wait):
        """Update parameters indices with their averaged gradients, through
        the wrapped optimizer shown those parameters alone: a step over
        every parameter for each layer would walk the whole model once a
        layer (a small model's step is mostly that walk)."""
        if wait:
            self._ex.wait(indices, self._deadline())
        shown = [[] for _ in self.param_groups]
        # Each .grad is put back after the update: the next backward then
        # accumulates into memory the process holds already, as under DDP
        # (a fresh gradient each step costs page faults for its size: on
        # a paravirtualized host, a quarter of a small model's step).
        kept = [self._params[i].grad for i in indices]
        for i in indices:
            p = self._params[i]
            # One no rank had a gradient for keeps the caller's .grad
            # (None, or zeros after zero_grad(set_to_none=False)), as DDP
            # leaves it.
            if i not in self._idle:
                p.grad = self._average(i)
            if self._group_of[i] is not None:
                shown[self._group_of[i]].append(p)
        with torch.no_grad(), self._as_at_step(shown):
            self._opt.step()
        for i, grad in zip(indices, kept):
            self._params[i].grad = grad
        self._unapplied.difference_update(indices)
        self._ex.recycle(indices, self._step - 1)

    @contextlib.contextmanager
    def _as_at_step(self, shown):
        """The param_groups holding only the parameters shown, with the
        learning rates (and every other option) they had at step(): p3
        applies a layer's update in the next forward, after a scheduler
        has moved them on."""
        groups = self.param_groups
        now = [dict(g) for g in groups]
        for k, g in enumerate(groups):
            if k < len(self._step_options):
                g.update(self._step_options[k])
            g['params'] = shown[k]
        try:
            yield
        finally:
            for g, was in zip(groups, now):
                g.update(was)

    def _apply_pending(self):
        """Apply what the last step averaged and no forward has applied."""
        if self._unapplied:
            self._apply(sorted(self._unapplied), wait=True)

    def _end_backward(self):
        """This step's backward passes are over: send what they did not
        (gradients accumulated over fewer passes, and with
        find_unused_parameters zeros for the parameters that got none),
        and begin the next step's exchange."""
        self._apply_pending()       # parameters the last forward never ran
        if self._ran is not None:   # the first forward is over
            early = self._early | self._stop_reads()
            self._outside = sorted(early.union(
                i for i in range(len(self._params)) if i not in self._ran))
            self._ran = None
        self._check_sent()
        absent = [i for i, k in enumerate(self._passes) if k == 0]
        if absent and not self._find_unused:
            raise RuntimeError(
                'p3.torch: no gradient for %s in this step (every parameter '
                'needs one; pass find_unused_parameters=True to average a '
                'missing gradient as zeros)'
                % ', '.join(self._names[i] for i in absent[:5]))
        for i, k in enumerate(self._passes):
            if k < self._passes_per_step:
                p = self._params[i]
                self._ex.gradient(i, torch.zeros_like(p) if k == 0 else p.grad,
                                  self._step)
        missing = self._ex.end_step()
        assert not missing, missing
        if self._find_unused:
            flags = torch.zeros(len(self._params), dtype=torch.bool)
            flags[absent] = True
            idle = _job.all_true(flags)
            self._idle = {i for i in absent if idle[i]}
        # Rank 0's buffers (BatchNorm's statistics) to every rank once a
        # step, a point every rank passes, as DDP does at every forward.
        _job.broadcast(self._buffers, 0)
        self._passes = [0] * len(self._params)
        self._step += 1

    def _stop_reads(self):
        """The parameters the first forward read early (none if it did
        not watch)."""
        reads, self._reads = self._reads, None
        if reads is None:
            return set()
        reads.__exit__(None, None, None)
        return reads.early

    def _check_sent(self):
        """Raise, naming the fix, where this step's gradients are not
        what backward pushed (the averages step() applies would not carry
        the change), or a frozen parameter began to require one."""
        edited = [self._names[i] for i, (g, v) in self._sent.items()
                  if self._params[i].grad is not g or g._version != v]
        self._sent = {}
        if edited:
            raise RuntimeError(
                'p3.torch: the gradients of %s changed after backward sent '
                'them (clipping, GradScaler.unscale_, masking?): step() '
                'applies the average of what was sent.  Call '
                'opt.synchronize() after backward, change the averaged '
                'gradients, then step() under opt.skip_synchronize()'
                % ', '.join(edited[:5]))
        thawed = [n for n, p in self._frozen if p.requires_grad]
        if thawed:
            raise RuntimeError(
                'p3.torch: %s did not require a gradient when the '
                'optimizer was wrapped, and does now: the exchange is '
                'planned at wrapping.  close() this optimizer and wrap '
                'the optimizer anew after changing requires_grad'
                % ', '.join(thawed[:5]))

    def step(self, closure=None):
        if closure is not None:
            raise ValueError('p3.torch: step(closure) is not supported: '
                             'compute the loss and call backward() before '
                             'step() (LBFGS, which needs a closure, cannot '
                             'be wrapped)')
        if self._synced:            # the averages are in .grad already
            self._synced = False
            with torch.no_grad():
                self._opt.step()
            return
        if self._skipping:
            raise RuntimeError('p3.torch: step() under skip_synchronize() '
                               'needs synchronize() after the backward pass')
        self._end_backward()
        self._step_options = [{k: v for k, v in g.items() if k != 'params'}
                              for g in self.param_groups]
        self._unapplied = set(range(len(self._params)))
        if self._schedule == 'fifo':
            self._apply(sorted(self._unapplied), wait=True)
        else:
            ready = [i for i in self._ex.done_now() if i in self._unapplied]
            if ready:
                self._apply(ready, wait=False)

    def synchronize(self):
        """Finish the exchange in flight.  Between backward and step():
        wait for this step's averages and put them in each parameter's
        .grad, for step() to apply as they are then (clip them first,
        under skip_synchronize() as Horovod's users do); every rank calls
        it there.  After step(): wait until every parameter holds that
        step's update, which needs nothing of the other ranks once their
        averages are in (a rank-0-only save may call it)."""
        if any(self._passes):     # between backward and step()
            self._end_backward()
            every = range(len(self._params))
            self._ex.wait(every, self._deadline())
            for i, p in enumerate(self._params):
                if i in self._idle:
                    continue
                if p.grad is None:
                    p.grad = self._average(i).clone()
                else:
                    p.grad.copy_(self._ex.avg_shaped[i])
            self._ex.recycle(every, self._step - 1)
            self._synced = True
        else:
            self._apply_pending()

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside applies the gradients synchronize() averaged, as
        they are (Horovod's name)."""
        self._skipping = True
        try:
            yield
        finally:
            self._skipping = False
