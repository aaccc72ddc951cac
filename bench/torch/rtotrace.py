# SPDX-License-Identifier: GPL-2.0
"""When each TCP retransmission timer of the kernel was armed and when it
fired, from two probe events on the guest's tracefs (one kernel for both
network namespaces, so one rank traces both hosts).

The netstat and tcp_info counters (tcpdiag.py) say how many timeouts
fired and how long recovery took after them, but not how long a flow
sat waiting for the timer before it fired, which is when a step can
have its links and CPUs idle at once.  The kernel (re)starts the timer
in tcp_rearm_rto(), on every acknowledgement that advances and on
sending into an empty flight (a tail loss probe ends in it too), and
it fires in tcp_retransmit_timer(); a timer that fires again re-arms
itself, backed off, without tcp_rearm_rto().  So a socket waited from
its last arm or its last firing, whichever came later, to each firing.
After a loss probe or a reordering timer, tcp_rearm_rto() counts the
timeout from the oldest unacknowledged segment's departure instead, so
such a wait began before its arm: waits are undercounted, never
overcounted.

The probes read the socket's fields through BTF (Linux 6.6+, with
CONFIG_PROBE_EVENTS_BTF_ARGS), and the trace clock is CLOCK_MONOTONIC,
Python's time.monotonic().
"""
import os
import re
import subprocess

TRACEFS = '/sys/kernel/tracing'
GROUP = 'p3rto'
# saddr is the socket's own address: which host (namespace) it is on.
ARGS = ('sk=$arg1 saddr=sk->__sk_common.skc_rcv_saddr:x32 '
        'lport=sk->__sk_common.skc_num')
PROBES = {'arm': 'tcp_rearm_rto', 'fire': 'tcp_retransmit_timer'}
BUFFER_KB = 98304       # per CPU: a 26-step run's acks at 10 Mbit/s fit
LINE = re.compile(r'\s(\d+\.\d+): (arm|fire): \(\S+\) sk=(0x[0-9a-f]+) '
                  r'saddr=0x([0-9a-f]+) lport=(\d+)')


def _write(name, text, append=False):
    # os.open, not open(): Python's append mode seeks to the end, which
    # tracefs refuses (EINVAL); O_TRUNC on dynamic_events would remove
    # every probe of every tool.
    fd = os.open(os.path.join(TRACEFS, name),
                 os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
    try:
        os.write(fd, (text + '\n').encode())
    finally:
        os.close(fd)


def start():
    """Install the probes (again, if a run before left them), empty the
    buffer and start recording."""
    if not os.path.isdir(os.path.join(TRACEFS, 'events')):
        subprocess.run(['mount', '-t', 'tracefs', 'nodev', TRACEFS],
                       check=True)
    stop()
    _write('trace_clock', 'mono')
    _write('buffer_size_kb', str(BUFFER_KB))
    for event, func in PROBES.items():
        _write('dynamic_events', 'f:%s/%s %s %s' % (GROUP, event, func, ARGS),
               append=True)
    _write('trace', '')
    _write('events/%s/enable' % GROUP, '1')


def stop():
    """Stop recording and remove the probes, and with them what the
    buffer holds of them (tracefs can no longer print those events)."""
    enable = os.path.join(TRACEFS, 'events', GROUP, 'enable')
    if os.path.exists(enable):
        _write('events/%s/enable' % GROUP, '0')
        for event in PROBES:
            _write('dynamic_events', '-:%s/%s' % (GROUP, event), append=True)


def overruns():
    """Events the ring buffer lost (overwritten) since start()."""
    lost = 0
    for cpu in os.listdir(os.path.join(TRACEFS, 'per_cpu')):
        with open(os.path.join(TRACEFS, 'per_cpu', cpu, 'stats')) as f:
            lost += sum(int(line.split()[1]) for line in f
                        if line.startswith('overrun:'))
    return lost


def waits(hosts):
    """Stop, and return every timer wait that ended in a firing:
    [{'host', 'lport', 'from', 'to', 'again'}], 'again' when the wait
    began at the same socket's previous firing (a backed-off timer).
    hosts maps an address as the kernel stores it (network order, read
    as a little-endian u32 by the probe) to the host's index; sockets of
    other addresses (loopback) are left out."""
    _write('events/%s/enable' % GROUP, '0')
    since = {}          # socket: (time its timer last started, by a firing?)
    out = []
    with open(os.path.join(TRACEFS, 'trace')) as f:
        for line in f:
            m = LINE.search(line)
            if not m:
                continue
            t, event, sk = float(m.group(1)), m.group(2), m.group(3)
            host = hosts.get(int(m.group(4), 16))
            if host is None:
                continue
            if event == 'fire' and sk in since:
                t0, again = since[sk]
                out.append({'host': host, 'lport': int(m.group(5)),
                            'from': t0, 'to': t, 'again': again})
            since[sk] = (t, event == 'fire')
    stop()
    return out


def address_key(dotted):
    """The probe's saddr value for an IPv4 address 'a.b.c.d'."""
    return int.from_bytes(bytes(int(x) for x in dotted.split('.')), 'little')
