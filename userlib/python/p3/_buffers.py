# SPDX-License-Identifier: LGPL-2.1-or-later
"""Python buffers handed to libp3 by pointer, held exported (so neither
resized nor freed) while the library may read or write them.
"""

import ctypes
from typing import Any

from ._libp3 import _cp, _int, _vp

# Any object with the buffer protocol (bytes, bytearray, memoryview,
# array, a numpy array, a CPU torch.Tensor's .numpy()), which typing
# cannot name before 3.12.
BufferLike = Any


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer (stable ABI since 3.11)."""
    _fields_ = [('buf', _vp), ('obj', _vp), ('len', ctypes.c_ssize_t),
                ('itemsize', ctypes.c_ssize_t), ('readonly', _int), ('ndim', _int),
                ('format', _cp), ('shape', _vp), ('strides', _vp),
                ('suboffsets', _vp), ('internal', _vp)]


_PyBUF_WRITABLE, _PyBUF_C_CONTIGUOUS = 0x0001, 0x0038
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), _int]
_get_buffer.restype = _int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


class _Buf:
    """A C pointer into the caller's memory, never a copy: any C-contiguous
    buffer-protocol object (bytes, bytearray, numpy arrays, mmap, ...), or a
    CPU torch.Tensor through the array that shares its storage.  The
    buffer stays exported until this is dropped, so that Python cannot
    resize or free it under the library."""

    def __init__(self, obj, writable=False):
        if hasattr(obj, 'data_ptr') and hasattr(obj, 'numpy'):
            obj = obj.detach().numpy()      # shares the tensor's storage
        self.obj = obj
        self.writable = writable
        self._view = _PyBuffer()
        flags = _PyBUF_C_CONTIGUOUS | (_PyBUF_WRITABLE if writable else 0)
        try:
            _get_buffer(obj, ctypes.byref(self._view), flags)
        except (BufferError, ValueError) as e:    # read-only, not contiguous
            raise ValueError('p3: %s buffer: %s' % (
                'receive' if writable else 'send', e)) from None
        self.nbytes = self._view.len
        self.ptr = self._view.buf if self.nbytes else None

    def __del__(self):
        if getattr(self, '_view', None) is not None and self._view.obj:
            _release_buffer(ctypes.byref(self._view))
            self._view = None
