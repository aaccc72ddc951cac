# SPDX-License-Identifier: LGPL-2.1-or-later
"""p3.torch: data-parallel PyTorch training with P3's gradient exchange.

    import p3.torch as p3t
    p3t.init()                      # RANK, WORLD_SIZE, MASTER_ADDR/PORT
    p3t.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = p3t.DistributedOptimizer(torch.optim.SGD(...), model)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30)
    for x, y in loader:
        opt.zero_grad(); loss(model(x), y).backward(); opt.step()
    opt.synchronize()

Every rank owns (sums) a share of the gradient slices, as co-located
BytePS servers do.  With schedule='p3', backward hooks push each slice the
moment its gradient exists, on libp3 bands by forward order (tagged for
the sch_p3 qdisc), each layer is updated as soon as its average is in, and
the next forward waits only for the layer it is about to run.  With
'fifo', whole tensors go in backward order on one band and step() waits
for all of them (WFBP, as DDP and Horovod do).  With
wire=Sparsify(), each slice carries only the elements Slim-DP picks
(_slimdp.py); with wire=LossTolerant(...), pushes go as datagrams with
bounded loss (_dlcp.py).  See docs/torch.md.

The modules, one job each: _job (init, the ranks, broadcasts), _optimizer
(DistributedOptimizer), _update (its hooks, step() and synchronize()),
_exchange (one step's pushes and waits), _reducer (the sums and pulls,
on the exchange's threads), _wire (the wire forms: dense, Slim-DP,
bounded loss), _modes (their options), _reduction (Horovod's op, predivide factor
and compression), _collectives (Horovod's collectives over Gloo), _flat (the flat gradient and average
buffers), _malloc (a step's memory kept in the process), _layout
(slices, units and their owners), _mesh (the channels), _setup (levels
and the ranks' agreement on one plan), _order (forward order), _slimdp
and _sparse (Slim-DP), _dlcp (bounded loss), _errors (what the exchange
raises), run (p3torchrun).
"""
from ._collectives import (allgather, allgather_object, allreduce, allreduce_,
                           broadcast, broadcast_, broadcast_object,
                           broadcast_optimizer_state, cross_rank, cross_size,
                           local_rank, local_size)
from ._errors import PeerError, StepTimeout
from ._layout import ORDER   # the planner's default order
from ._modes import LossTolerant, Sparsify
from ._job import (DEFAULT_TIMEOUT, NotInitializedError, broadcast_parameters,
                   init, rank, shutdown, size)
from ._optimizer import DistributedOptimizer
from ._order import forward_order
from ._reduction import Adasum, Average, Compression, Max, Min, Product, Sum

__all__ = ['init', 'rank', 'size', 'shutdown', 'broadcast_parameters',
           'DistributedOptimizer', 'forward_order', 'PeerError', 'StepTimeout',
           'NotInitializedError', 'DEFAULT_TIMEOUT', 'Compression', 'Average',
           'Sum', 'Adasum', 'Min', 'Max', 'Product', 'allreduce', 'allreduce_',
           'allgather', 'allgather_object', 'broadcast', 'broadcast_',
           'broadcast_object', 'broadcast_optimizer_state', 'local_rank',
           'local_size', 'cross_rank', 'cross_size', 'Sparsify',
           'LossTolerant']
