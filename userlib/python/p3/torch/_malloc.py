# SPDX-License-Identifier: LGPL-2.1-or-later
"""Keep a step's memory in the process, as DDP's users already do.

glibc serves a block larger than its mmap threshold (128 KiB at start)
with a fresh mapping and unmaps it when it is freed, so every step's
temporaries above it (activations, autograd's buffers) fault their pages
in again, every step.  The threshold rises to the size of a mapped block
once one is freed (mallopt(3), M_MMAP_THRESHOLD; at most 32 MiB on a
64-bit host), and the heap then keeps twice that before trimming.  DDP
frees its first buckets when it rebuilds them after the first step, so
its users get the raised threshold by accident; p3.torch frees nothing
large, and a compute-bound squeezenet1_1 faulted 437 pages a step
against DDP's 0-6 (bench/ddp/rank.py's 'faults').  So p3.torch frees one
block of the largest size the threshold follows.
"""
import ctypes

# Within DEFAULT_MMAP_THRESHOLD_MAX on a 64-bit host: a block's chunk is
# its size plus a header, rounded up to a page, and glibc compares it with
# its flag bits set, so a mapping of exactly 32 MiB would not count.
_LARGEST = (32 << 20) - 2 * 4096


def glibc():
    """This process's C library with malloc() and free() declared, if it
    is glibc's (None elsewhere: its allocator is left alone)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return None
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def keep_step_memory():
    """Raise glibc's dynamic mmap threshold as far as it goes."""
    libc = glibc()
    if libc:
        # Never touched: the mapping costs no page; its unmapping is what
        # raises the threshold.
        libc.free(libc.malloc(_LARGEST))
