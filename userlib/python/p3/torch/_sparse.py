# SPDX-License-Identifier: LGPL-2.1-or-later
"""The wire form of a sparse slice: some elements of a dense slice, as
values and their indices.  libp3 carries it as an opaque payload (its
frame header and CRC32C cover it like any other); this module gives the
payload its meaning, and its decoder trusts nothing in it.

Layout, little-endian, every field fixed by (n, dtype, count):

    0  magic   2 bytes  b'SP'
    2  iwidth  u8       index width in bytes: 2 if n <= 65536, else 4
    3  dtype   u8       1 float16, 2 float32, 3 float64
    4  count   u32      elements carried, 1..n
    8  values  count x dtype
       indices count x iwidth, strictly increasing, each < n

Values come first so that they are aligned for every dtype (the header is
8 bytes).  The index width is the narrowest that can address the slice,
so most slices (P3's default slice is 50k float32) pay 2 bytes an index.
"""
import numpy as np

MAGIC = b'SP'
HEADER = 8
_DTYPE_CODE = {np.dtype(np.float16): 1, np.dtype(np.float32): 2,
               np.dtype(np.float64): 3}


class SparseFrameError(ValueError):
    """A sparse payload that is not what its receiver expects."""


def index_width(n):
    return 2 if n <= 1 << 16 else 4


def _index_dtype(n):
    return np.dtype('<u2') if index_width(n) == 2 else np.dtype('<u4')


def wire_bytes(count, n, dtype):
    """Bytes of a sparse slice of count elements of an n-element slice."""
    return HEADER + count * (index_width(n) + np.dtype(dtype).itemsize)


def encode(idx, vals, n, out):
    """Write vals at the sorted indices idx of an n-element slice into out
    (a uint8 array of exactly wire_bytes(len(idx), n, vals.dtype))."""
    dt = np.dtype(vals.dtype)
    count = len(idx)
    if out.nbytes != wire_bytes(count, n, dt):
        raise ValueError('p3.torch: sparse buffer of %d bytes for %d elements'
                         % (out.nbytes, count))
    out[0:2] = np.frombuffer(MAGIC, np.uint8)
    out[2] = index_width(n)
    out[3] = _DTYPE_CODE[dt]
    out[4:8].view('<u4')[0] = count
    vend = HEADER + count * dt.itemsize
    out[HEADER:vend].view(dt.newbyteorder('<'))[:] = vals
    out[vend:].view(_index_dtype(n))[:] = idx
    return out


def decode(buf, n, dtype, count=None):
    """(indices, values) of a sparse payload for an n-element slice of
    dtype, count elements if given.  Raises SparseFrameError on anything
    else: wrong magic, index width or dtype, a count out of 1..n or not
    the one expected, a length that does not match the count, an index
    out of range, unsorted or repeated, and a value that is not finite
    (NaN or infinity: p3.torch sends none, see docs/torch.md)."""
    b = np.frombuffer(buf, np.uint8)
    dt = np.dtype(dtype)
    if b.nbytes < HEADER:
        raise SparseFrameError('sparse slice of %d bytes, shorter than its '
                               'header' % b.nbytes)
    if b[:2].tobytes() != MAGIC:
        raise SparseFrameError('not a sparse slice (magic %r)'
                               % b[:2].tobytes())
    if b[2] != index_width(n):
        raise SparseFrameError('index width %d for a slice of %d elements '
                               '(want %d)' % (b[2], n, index_width(n)))
    if b[3] != _DTYPE_CODE[dt]:
        raise SparseFrameError('value type %d, want %d (%s)'
                               % (b[3], _DTYPE_CODE[dt], dt))
    got = int(b[4:8].view('<u4')[0])
    if not 1 <= got <= n or (count is not None and got != count):
        raise SparseFrameError('count %d, want %s' % (
            got, count if count is not None else '1..%d' % n))
    if b.nbytes != wire_bytes(got, n, dt):
        raise SparseFrameError('%d bytes for %d elements (want %d)'
                               % (b.nbytes, got, wire_bytes(got, n, dt)))
    vend = HEADER + got * dt.itemsize
    vals = b[HEADER:vend].view(dt.newbyteorder('<')).astype(dt)
    idx = b[vend:].view(_index_dtype(n)).astype(np.int64)
    if got > 1 and not np.all(idx[1:] > idx[:-1]):
        raise SparseFrameError('indices not strictly increasing')
    if idx[-1] >= n:        # sorted: the last is the largest
        raise SparseFrameError('index %d out of range (slice of %d)'
                               % (idx[-1], n))
    if not np.all(np.isfinite(vals)):
        raise SparseFrameError('non-finite value at index %d'
                               % idx[~np.isfinite(vals)][0])
    return idx, vals
