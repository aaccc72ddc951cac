# SPDX-License-Identifier: GPL-2.0
"""What the link does over a training step: a thread samples this network
namespace's byte counters of one device (/proc/self/net/dev, read every
PERIOD_S) while the training loop marks each step's phases; save()
appends one JSON line per mode to a file for linkplot.py.

The marks of a step are its start, the end of its forward pass, the end
of its backward pass and the end of step() (p3.torch applies a layer's
averages in the next forward, so the pulls overlap that forward)."""
import json
import os
import threading
import time

# 1 ms: a step of the benchmark's models takes 30-400 ms; a sample costs
# the rank about 6 us of CPU (0.6% of a core).
PERIOD_S = 0.001


def read_bytes(dev, fd=None):
    """(received, sent) bytes of dev in this namespace; fd: an open
    /proc/self/net/dev to read again (a third of the cost of opening)."""
    if fd is None:
        with open('/proc/self/net/dev', 'rb') as f:
            text = f.read()
    else:
        text = os.pread(fd, 1 << 16, 0)
    for line in text.decode().splitlines():
        name, sep, rest = line.partition(':')
        if sep and name.strip() == dev:
            cols = rest.split()
            return int(cols[0]), int(cols[8])
    raise ValueError('linktrace: no device %r in this namespace' % dev)


class LinkTrace:
    def __init__(self, dev):
        self.dev = dev
        read_bytes(dev)             # a missing device fails here, not later
        self.samples, self.marks = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                         name='linktrace')
        self._thread.start()

    def _run(self):
        fd = os.open('/proc/self/net/dev', os.O_RDONLY)
        try:
            while not self._stop.wait(PERIOD_S):
                rx, tx = read_bytes(self.dev, fd)
                self.samples.append((time.monotonic(), rx, tx))
        finally:
            os.close(fd)

    def mark(self, *times):
        """One step's phase times (time.monotonic())."""
        self.marks.append(times)

    def save(self, path, **about):
        self._stop.set()
        self._thread.join()
        with open(path, 'a') as f:
            f.write(json.dumps(dict(about, dev=self.dev, period_s=PERIOD_S,
                                    samples=self.samples,
                                    marks=self.marks)) + '\n')
