#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Host-side contention monitor for the benchmark run.sh scripts.

  hostmon.py OUT.json          (runs until SIGTERM)

Every 2 s it reads /proc/stat and the CPU time of every qemu-system
process, and records how many cores everything *else* on the host used
(compilers, other tests) and how many guests ran.  The report prints the
mean and the worst interval, so a reader can tell a clean run from one
that shared the 2-core host.
"""
import json
import os
import signal
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    return sum(v) - v[3] - v[4]


def qemu_jiffies():
    total, n = 0, 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if not f.read().startswith("qemu-system"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])      # utime + stime
        n += 1
    return total, n


def summary(path):
    """One sentence on the host's contention during the run, or ''."""
    try:
        with open(path) as f:
            samples = json.load(f)
    except (OSError, ValueError):
        return ""
    if not samples:
        return ""
    other = [s["other_cores"] for s in samples]
    guests = max(s["guests"] for s in samples)
    return (f"Host contention during the run (bench/preempt/hostmon.py): "
            f"processes other than the guest used {sum(other) / len(other):.2f}"
            f" of 2 cores on average, {max(other):.2f} in the worst 2-s "
            f"interval; at most {guests} guest(s) ran at once.")


def main():
    out = sys.argv[1]
    samples = []
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    b0, (q0, _), t0 = busy_jiffies(), qemu_jiffies(), time.monotonic()
    while not stop:
        time.sleep(2)
        b1, (q1, n), t1 = busy_jiffies(), qemu_jiffies(), time.monotonic()
        # A guest that exits between readings makes q go down: skip it.
        if q1 >= q0:
            other = max(0, (b1 - b0) - (q1 - q0)) / HZ / (t1 - t0)
            samples.append({"t": round(t1, 1), "other_cores":
                            round(other, 3), "guests": n})
        b0, q0, t0 = b1, q1, t1
    with open(out, "w") as f:
        json.dump(samples, f)


if __name__ == "__main__":
    sys.exit(main())
