#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""What one step's per-byte work costs here: run it natively and inside
the VM (selftests/vm-run -- bench/ddp/tcgcost.py) and divide, to tell the
CPU that only the emulator charges from what a real host pays too.

Each operation runs over a resnet18's worth of gradient bytes (44.7 MB,
float32), the way one p3.torch step touches them on a rank of two:
  memcpy     a copy (torch's copy_ of each gradient into its buffer)
  np.add     numpy's sum of two ranks' slices (the reducer)
  np.divide  the division by the number of ranks (the reducer)
  torch.add  torch's own add, what Gloo's and DDP's sums resemble
  crc32c     libp3's checksum of every frame (sender and receiver)
  python     a loop of 1,000,000 interpreted additions (the control for
             Python itself)
--bytes N runs each over N bytes instead: 200000, a unit of a
200 kB-slice plan, is what one call of the exchange handles.
Prints one line of seconds per operation (the best of --reps).
"""
import argparse
import ctypes
import json
import os
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.environ.get('P3_LIB', os.path.join(HERE, '..', '..', 'build',
                                            'userlib', 'libp3.so'))
NBYTES = 44726568           # resnet18's parameters, float32


def best(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--bytes', type=int, default=NBYTES)
    a = ap.parse_args()
    torch.set_num_threads(1)
    n = a.bytes // 4
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    y = np.random.default_rng(2).random(n, dtype=np.float32)
    out = np.empty_like(x)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    crc = ctypes.CDLL(LIB).p3_crc32c
    crc.restype = ctypes.c_uint32
    crc.argtypes = (ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t)

    def loop():
        s = 0
        for i in range(1000000):
            s += i
        return s

    res = {
        'memcpy': best(lambda: np.copyto(out, x), a.reps),
        'np.add': best(lambda: np.add(x, y, out=out), a.reps),
        'np.divide': best(lambda: np.divide(x, np.float32(2), out=out),
                          a.reps),
        'torch.add': best(lambda: torch.add(tx, ty, out=torch.from_numpy(out)),
                          a.reps),
        'crc32c': best(lambda: crc(0, x.ctypes.data, x.nbytes), a.reps),
        'python': best(loop, a.reps),
    }
    print(json.dumps({k: float('%.3g' % v) for k, v in res.items()}))


if __name__ == '__main__':
    main()
