# SPDX-License-Identifier: GPL-2.0
"""Where named Python threads spend their time: a sampling profiler for
bench/torch (--sample), light enough to run under TCG.

Every PERIOD seconds a thread of its own takes sys._current_frames() and,
for each thread sampled, charges the CPU time that thread used since the
last sample (its own clock, pthread_getcpuclockid) to where it is now:
the innermost frame in p3 or bench code (the line that called into
numpy, ctypes or the standard library), with that innermost frame's
function.  A thread blocked in C (a send waiting for room) uses no CPU,
so it is charged nothing.  Taking a sample needs the GIL, so a thread
running Python is caught at its next switch interval (5 ms), and the
CPU of an interval goes to where it ended: a profile, not an exact
account.
"""
import collections
import os
import sys
import threading
import time

PERIOD = 0.05     # under TCG a sample costs about 1 ms of CPU
OURS = ('p3', 'bench')


def _ours(path):
    parts = path.split(os.sep)
    return any(p in OURS for p in parts[-4:-1])


class Sampler:
    def __init__(self, names):
        self.names = set(names)
        self.counts = {n: collections.Counter() for n in self.names}
        self.last = {}      # thread ident: its CPU clock at the last sample
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name='sampler')
        self.thread.start()

    def _run(self):
        while not self.stop.wait(PERIOD):
            ids = {t.ident: t.name for t in threading.enumerate()
                   if t.name in self.names}
            for ident, frame in sys._current_frames().items():
                if ident not in ids:
                    continue
                try:
                    cpu = time.clock_gettime(time.pthread_getcpuclockid(ident))
                except OSError:         # it ended meanwhile
                    continue
                used = cpu - self.last.get(ident, cpu)
                self.last[ident] = cpu
                self.counts[ids[ident]][self._where(frame)] += used

    @staticmethod
    def _where(frame):
        top = (os.path.basename(frame.f_code.co_filename),
               frame.f_code.co_name)
        f = frame
        while f is not None and not _ours(f.f_code.co_filename):
            f = f.f_back
        if f is None:
            return '%s:%s' % top
        # f_lineno is None while a frame is being set up or torn down.
        here = '%s:%s:%d' % (os.path.basename(f.f_code.co_filename),
                             f.f_code.co_name, f.f_lineno or 0)
        return here if f is frame else '%s > %s:%s' % (here, *top)

    def close(self):
        """{thread: [(where, CPU seconds)], most first}."""
        self.stop.set()
        self.thread.join(10)
        return {n: c.most_common() for n, c in self.counts.items()}
