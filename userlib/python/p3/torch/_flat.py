# SPDX-License-Identifier: LGPL-2.1-or-later
"""The exchange's memory: the dtype each gradient travels and is summed
in, and one flat buffer for a whole model, each parameter a view of it
at its place in the plan (_layout.Units), so that a message's slices are
adjacent and travel as one."""
import numpy as np
import torch

_NP = {torch.float32: np.float32, torch.float64: np.float64,
       torch.float16: np.float16}
# numpy has no bfloat16: such gradients travel and are summed as float32,
# which also keeps the sum from rounding at every rank's addition.
_WIRE = {torch.bfloat16: torch.float32}


def wire_dtype(dtype, compress=None):
    """The torch dtype a parameter's gradient travels and is summed in;
    compress: a further map of dtypes (_reduction.Compression's)."""
    dtype = _WIRE.get(dtype, dtype)
    return compress(dtype) if compress else dtype


def np_dtypes(params, compress=None):
    """The numpy dtype each parameter's gradient travels in; TypeError for
    one p3.torch cannot sum."""
    for p in params:
        if wire_dtype(p.dtype) not in _NP:
            raise TypeError('p3.torch: %s parameters are not supported'
                            % p.dtype)
    return [np.dtype(_NP[wire_dtype(p.dtype, compress)]) for p in params]


def flat(units, params, dtypes):
    """A zeroed buffer of units.nbytes bytes; each parameter's part of it
    as a flat tensor of its wire dtype; and as bytes."""
    buf = np.zeros(units.nbytes, np.uint8)
    parts = [buf[off:off + p.numel() * dt.itemsize]
             for p, dt, off in zip(params, dtypes, units.tensor_off)]
    return buf, [torch.from_numpy(b.view(dt))
                 for b, dt in zip(parts, dtypes)], parts
