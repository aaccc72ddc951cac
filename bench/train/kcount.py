# SPDX-License-Identifier: GPL-2.0
"""Exact kernel event counts over a window (emulate.py --count-events).

Guest CPU time is no measure of work under TCG: the guest's clock is the
host's, so a task is charged the time its vCPU thread waited for a host
core (`git show 216191b:docs/benchmarks.md`, "A host thread per vCPU, and
four bands").
Counts are exact whatever the host does: every system call by thread and
kind, context switches, softirqs by vector, hrtimer expiries by handler,
and calls of the functions that do the per-packet and per-socket work.
They come from tracefs hist triggers, which count in the kernel and are
read only at the window's ends.  Tracing costs the guest CPU, so a run's
timings with counts on are not comparable to one without.
"""
import collections
import os
import re
import subprocess

TRACEFS = "/sys/kernel/tracing"
GROUP = "p3count"
# Entry probes; a function that is missing (another kernel, a module not
# loaded) is skipped, and the record says which were counted.
PROBES = ("tcp_sendmsg", "tcp_recvmsg", "tcp_poll", "tcp_write_xmit",
          "__tcp_transmit_skb", "tcp_v4_rcv", "tcp_ack", "tcp_send_ack",
          "tcp_tsq_handler", "tcp_delack_timer_handler", "__qdisc_run",
          "p3_enqueue", "p3_dequeue", "tbf_enqueue", "tbf_dequeue")
# (event, hist keys): the thread name keys every count that has no better
# key, so that the record shows who did the work.
EVENTS = (("raw_syscalls/sys_enter", "common_pid.execname,id.syscall"),
          ("sched/sched_switch", "common_pid.execname"),
          ("irq/softirq_entry", "vec"),
          ("timer/hrtimer_expire_entry", "function.sym"),
          ("net/net_dev_xmit", "common_pid.execname"))
SIZE = 8192                         # hist entries (threads x syscalls)
SOFTIRQS = ("HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL",
            "TASKLET", "SCHED", "HRTIMER", "RCU")     # by vector number


def _probe(fn):
    """The (event, hist keys) of the entry probe on @fn."""
    return (f"{GROUP}/{fn}", "common_pid.execname")


def _trigger(keys):
    return f"hist:keys={keys}:vals=hitcount:size={SIZE}"


def _write(path, text):
    """One write(2) of a tracefs command.  Not open(path, "a"): Python
    seeks to the end of a file it appends to, and kprobe_events refuses
    the seek (EINVAL)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (text + "\n").encode())
    finally:
        os.close(fd)


PID = re.compile(r"common_pid: (\S+)\s+\[\s*(\d+)\]")


def _key(raw, names=None):
    """A hist key without pids and addresses, so that the threads of one
    name add up: "common_pid: w-main [ 351], id: sys_poll [ 7]" ->
    "w-sender sys_poll" when @names says thread 351 is w-sender now (the
    hist's execname is the name the kernel saw first, and the emulator
    names its threads after they start)."""
    m = PID.search(raw)
    if m and names and m.group(2) in names:
        raw = raw[:m.start(1)] + names[m.group(2)] + raw[m.end(1):]
    raw = re.sub(r"\[\s*[0-9a-fx]+\]", "", raw)
    raw = re.sub(r"\b(common_pid|id|function|vec):\s*", "", raw)
    key = " ".join(raw.replace(",", " ").split())
    # softirq vectors are the only keys that are bare numbers
    if key.isdigit() and int(key) < len(SOFTIRQS):
        key = SOFTIRQS[int(key)]
    return key


class EventCounts:
    """Counts from construction until close(); snapshot() reads them.
    Tracing state is shared by the whole guest, so setup clears what an
    earlier, killed run may have left, and a failed setup undoes itself."""

    def __init__(self, log=None):
        self.log = log or (lambda msg: None)
        self.events, self.names = [], {}
        if not os.path.isdir(os.path.join(TRACEFS, "events")):
            subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS],
                           check=True)
        # The qdiscs' functions exist once their modules are loaded.
        for mod in ("sch_tbf", "sch_p3"):
            subprocess.run(["modprobe", "-q", mod], check=False)
        self._clear([_probe(fn) for fn in PROBES] + list(EVENTS),
                    quiet=True)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self):
        kp = os.path.join(TRACEFS, "kprobe_events")
        for fn in PROBES:
            try:
                _write(kp, f"p:{GROUP}/{fn} {fn}")
            except OSError as e:
                self.log(f"count-events: no probe on {fn} ({e.strerror})")
                continue
            self.events.append(_probe(fn))
        self.events += list(EVENTS)
        for ev, keys in self.events:
            _write(self._path(ev, "trigger"), _trigger(keys))

    @staticmethod
    def _path(ev, name):
        return os.path.join(TRACEFS, "events", ev, name)

    def snapshot(self):
        """{event: {raw hist key: count}} since construction.  Each
        thread's name as it is now goes to self.names."""
        out, seen = {}, set()
        for ev, _ in self.events:
            c = collections.Counter()
            with open(self._path(ev, "hist")) as f:
                for line in f:
                    m = re.match(r"\{ (.*) \} hitcount:\s+(\d+)", line)
                    if not m:
                        continue
                    c[m.group(1)] += int(m.group(2))
                    pid = PID.search(m.group(1))
                    if pid and pid.group(2) not in seen:
                        seen.add(pid.group(2))
                        self._name(pid.group(2))
            out[ev.split("/")[-1]] = c
        return out

    def _name(self, pid):
        try:
            with open(f"/proc/{pid}/comm") as f:
                self.names[pid] = f.read().strip()
        except OSError:
            pass            # gone: the last name seen, or the hist's

    def _clear(self, events, quiet=False):
        for ev, keys in events:
            try:
                _write(self._path(ev, "trigger"), "!" + _trigger(keys))
            except OSError as e:
                if not quiet:
                    self.log(f"count-events: {ev}: trigger stays "
                             f"({e.strerror})")
        for ev, _ in events:
            if ev.startswith(GROUP + "/"):
                try:
                    _write(os.path.join(TRACEFS, "kprobe_events"),
                           "-:" + ev)
                except OSError as e:
                    if not quiet:
                        self.log(f"count-events: {ev}: probe stays "
                                 f"({e.strerror})")

    def close(self):
        self._clear(self.events)
        self.events = []


def per_iteration(a, b, iterations, names=None):
    """(b - a) / iterations, per event: the total and each key, with
    threads named by @names (pid -> name).  Differences are taken per
    thread before threads of one name are added up."""
    out = {}
    for ev in b:
        d = collections.Counter()
        for raw, v in b[ev].items():
            diff = v - a.get(ev, {}).get(raw, 0)
            if diff:
                d[_key(raw, names)] += diff / iterations
        d = {k: round(v, 1) for k, v in d.items() if round(v, 1)}
        out[ev] = {"total": round(sum(d.values()), 1), "by": d}
    return out
