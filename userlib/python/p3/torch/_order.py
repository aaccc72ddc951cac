# SPDX-License-Identifier: LGPL-2.1-or-later
"""The order a model's forward pass runs its parameters in, which sets
their levels (the first layers the most urgent)."""
import torch


def forward_ranks(params, order):
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
