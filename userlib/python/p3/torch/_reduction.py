# SPDX-License-Identifier: LGPL-2.1-or-later
"""How the ranks' gradients combine, in Horovod's terms: the op (Average
or Sum), gradient_predivide_factor, and the compression (the dtype a
gradient travels in).  The exchange asks it three things: the wire dtype
of each parameter, what to do to a local gradient before it is pushed,
and what to do to a sum before it is returned."""
import numpy as np
import torch

from ._flat import np_dtypes


class _Compressor:
    """A gradient's dtype on the wire (Horovod's Compression.X)."""

    def __init__(self, name, wire):
        self.name, self._wire = name, wire

    def wire(self, dtype):
        return self._wire.get(dtype, dtype)

    def __repr__(self):
        return 'Compression.' + self.name


class Compression:
    """none: each gradient travels in its own dtype (bfloat16 as float32);
    fp16: every floating-point gradient travels as float16 (float32's
    half the bytes), and is summed in float32 by its owner (Horovod sums
    in float16)."""
    none = _Compressor('none', {})
    fp16 = _Compressor('fp16', {torch.float32: torch.float16,
                                torch.float64: torch.float16})


class Op:
    """A reduction's name (Horovod's hvd.Average, hvd.Sum, ...)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


Average, Sum, Adasum, Min, Max, Product = (
    Op(n) for n in ('Average', 'Sum', 'Adasum', 'Min', 'Max', 'Product'))


class Reduction:
    """op: Average or Sum; predivide: Horovod's gradient_predivide_factor
    (each gradient divided by it before the sum, the average multiplied
    by it after; Average only)."""

    def __init__(self, op, predivide, compression):
        if op is Adasum:
            raise ValueError('p3.torch: op=Adasum is not supported (its '
                             'pairwise reduction is not a sum); use '
                             'op=Average')
        if op not in (Average, Sum):
            raise ValueError('p3.torch: a gradient op is Average or Sum, '
                             'not %r' % (op,))
        if not isinstance(compression, _Compressor):
            raise ValueError('p3.torch: compression is Compression.none or '
                             'Compression.fp16, not %r' % (compression,))
        if predivide != 1.0 and op is not Average:
            raise ValueError('p3.torch: gradient_predivide_factor needs '
                             'op=Average')
        if not predivide > 0:
            raise ValueError('p3.torch: gradient_predivide_factor must be '
                             'positive, not %r' % (predivide,))
        self.op, self.predivide, self.compression = op, predivide, compression

    def dtypes(self, params):
        """The numpy dtype each parameter's gradient travels in."""
        return np_dtypes(params, self.compression.wire)

    def plain(self):
        """The default: each gradient in its dtype, averaged."""
        return self.key() == ('Average', 1.0, 'none')

    def key(self):
        """What every rank must agree on."""
        return (self.op.name, self.predivide, self.compression.name)

    def scale_local(self, grad):
        """A local gradient in its wire buffer, before anyone reads it."""
        if self.predivide != 1.0:
            grad.mul_(1.0 / self.predivide)

    def sum_dtype(self, dt):
        """The dtype the owner sums a unit of dtype dt in."""
        if self.compression is Compression.fp16 and dt == np.float16:
            return np.dtype(np.float32)
        return dt

    def finish(self, acc, world):
        """The sum over world ranks, in place: the value every rank gets."""
        if self.op is Average and world > 1:
            np.divide(acc, acc.dtype.type(world), out=acc)
        if self.predivide != 1.0:
            np.multiply(acc, acc.dtype.type(self.predivide), out=acc)
