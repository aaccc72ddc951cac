#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""p3ctl run on the host, where sch_p3 cannot load: which sockets its shim
tags and with what, children and accepted connections included, what
keeps its own tag, what is refused before the job starts, and (in a
network namespace, through a stock prio qdisc) that a program that is not
Python puts its packets on the wire with the level's DSCP.  The band a
tagged job reaches in sch_p3 is the VM's (selftests/p3_run.py).

  test_run.py P3CTL     (TAP; TAP_PREFIX names the build)
"""
import os
import shutil
import subprocess
import sys
import tempfile

P3CTL = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
PY = '/usr/bin/python3'
ENV = dict(os.environ, PYTHONPATH=os.path.join(TOP, 'userlib', 'python'),
           P3_LIB=os.path.join(TOP, 'build', 'userlib', 'libp3.so'))
ENV.pop('LD_PRELOAD', None)
PREFIX = os.environ.get('TAP_PREFIX', '') + 'run: '
n = failed = 0


def tap(ok, name, detail=''):
    global n, failed
    n += 1
    failed |= not ok
    print('%sok %d - %s%s' % ('' if ok else 'not ', n, PREFIX, name))
    for line in detail.splitlines() if not ok else ():
        print('#  ' + line)


def run(*argv, env=ENV, **kw):
    return subprocess.run((P3CTL, 'run') + argv, env=env, text=True,
                          capture_output=True, timeout=60, **kw)


def job(level, code, *opts, env=ENV):
    """What the Python job prints, under p3ctl run --level level."""
    return run(*opts, '--level', str(level), '--', PY, '-c', code, env=env)


# Each job prints the DSCP of the sockets it makes.
TOS = 'lambda s, l=0, n=1: s.getsockopt(l, n) >> 2'
KINDS = """
import socket
tos = %s
t4 = socket.socket()
u6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
print(tos(t4), tos(u6, socket.IPPROTO_IPV6, socket.IPV6_TCLASS), tos(u6))
""" % TOS
CHILDREN = """
import subprocess
subprocess.run(['bash', '-c', 'for i in 1 2; do %s -c "import socket; print(socket.socket().getsockopt(0, 1) >> 2)"; done'])
""" % PY
ACCEPT = """
import socket
tos = %s
l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()
c = socket.create_connection(l.getsockname()); a, _ = l.accept()
print(tos(l), tos(c), tos(a))
""" % TOS
OWN = """
import socket, p3
tos = %s
own = socket.socket(); own.setsockopt(0, 1, 46 << 2)
lib = socket.socket(); p3.tag(lib, 5)
unix = socket.socket(socket.AF_UNIX)
print(tos(own), tos(lib))
""" % TOS


PRIORITY = ('import socket; print(socket.socket().getsockopt(socket.SOL_SOCKET, '
            'socket.SO_PRIORITY))')
PRELOAD = 'import os; print(os.environ["LD_PRELOAD"].split(":")[0])'
# (An ASan p3ctl must be told that a library before its runtime is fine.)
OWN_PRELOAD = dict(ENV, LD_PRELOAD='libc.so.6', ASAN_OPTIONS=os.environ.get(
    'ASAN_OPTIONS', '') + ':verify_asan_link_order=0')
# level, the job, p3ctl run's options, its environment, what it must print
TAG_CASES = [
    (3, KINDS, (), ENV, '15 15 15',
     'level 3: TCP/IPv4 and dual-stack UDP/IPv6 (TCLASS and TOS) carry DSCP 15'),
    (0, CHILDREN, (), ENV, '3 3', "level 0: the job's children's children are tagged (DSCP 3)"),
    (2, ACCEPT, (), ENV, '11 11 11',
     'a listener, its client and the connection it accepts carry the level'),
    (1, OWN, (), ENV, '46 23',
     'a socket that sets its own TOS (EF) and one tagged through libp3 keep theirs'),
    (3, PRIORITY, ('--tag', 'priority'), ENV, '4',
     '--tag priority: SO_PRIORITY is the tag, level + 1'),
    (1, PRELOAD, (), OWN_PRELOAD, 'libc.so.6',
     "the job's own LD_PRELOAD is kept, first (a sanitizer's runtime must be)"),
]


def test_tags():
    for level, code, opts, env, want, name in TAG_CASES:
        r = job(level, code, *opts, env=env)
        tap(r.returncode == 0 and r.stdout.split() == want.split(), name, r.stdout + r.stderr)


def test_refusals():
    with tempfile.TemporaryDirectory() as d:
        ran = os.path.join(d, 'ran')
        cases = [
            ((), 'no --level'),
            (('--level', '64'), 'level 64'),
            (('--level', '31'), 'level 31 by DSCP (no code point left)'),
            (('--level', '-1'), 'level -1'),
            (('--level', 'x'), 'level x'),
            (('--level', '1', '--tag', 'pigeon'), 'an unknown --tag'),
        ]
        for opts, what in cases:
            r = run(*opts, '--', 'touch', ran)
            tap(r.returncode == 2 and not os.path.exists(ran) and 'p3ctl run:' in r.stderr,
                '%s: refused (exit 2) before the job runs' % what, r.stderr)
        nobody = shutil.which('setpriv')
        if nobody and os.geteuid() == 0:
            r = subprocess.run(['setpriv', '--reuid', '65534', '--regid', '65534',
                                '--clear-groups', P3CTL, 'run', '--level', '7', '--tag',
                                'priority', '--', 'touch', ran], env=ENV, text=True,
                               capture_output=True, timeout=60)
            tap(r.returncode == 2 and not os.path.exists(ran)
                and 'CAP_NET_ADMIN' in r.stderr,
                'unprivileged, SO_PRIORITY 8: refused before the job runs, naming '
                'the capability', r.stderr)
    r = run('--level', '1')
    tap(r.returncode == 2, 'no command: exit 2', r.stderr)
    r = run('--level', '1', '--', 'sh', '-c', 'exit 7')
    tap(r.returncode == 7, "the job's exit status is p3ctl run's", r.stderr)
    r = run('--level', '1', 'no-such-command-p3')
    tap(r.returncode == 127 and 'no-such-command-p3' in r.stderr,
        'a command that is not there: exit 127, named', r.stderr)
    r = run('--level', '1', '--', PY, '-c', 'import sys; print(sys.argv[1:])', '--level', '9')
    tap(r.returncode == 0 and "'--level', '9'" in r.stdout,
        "the job's own options are its own", r.stdout + r.stderr)
    if os.path.exists('/bin/busybox'):
        r = run('--level', '1', '--', '/bin/busybox', 'true')
        tap(r.returncode == 0 and 'statically linked' in r.stderr,
            'a static binary runs, with a warning that its sockets stay untagged',
            r.stderr)
    env = dict(ENV, LD_PRELOAD=os.path.join(os.path.dirname(P3CTL), 'libp3run.so'),
               P3_RUN_LEVEL='urgent')
    r = subprocess.run([PY, '-c', 'import socket; print(socket.socket().getsockopt(0, 1), '
                        'socket.socket().getsockopt(0, 1))'],
                       env=env, text=True, capture_output=True, timeout=60)
    tap(r.returncode == 0 and r.stdout.split() == ['0', '0']
        and r.stderr.count('libp3run:') == 1,
        'the shim under a level it cannot read: says so once, tags nothing',
        r.stdout + r.stderr)


def sh(*argv):
    return subprocess.run(argv, check=True, text=True, capture_output=True,
                          timeout=60).stdout


def test_wire():
    """In a namespace of its own: iperf3 under p3ctl run, through an htb
    on lo whose u32 filter sends DSCP 15 (level 3) to class 1:10 (this host's kernel
    has htb, not prio)."""
    if os.geteuid() != 0 or not shutil.which('iperf3'):
        print('ok %d - %siperf3 on the wire # SKIP needs root and iperf3' % (n + 1, PREFIX))
        return
    script = r"""
set -e
ip link set lo up
tc qdisc add dev lo root handle 1: htb default 20 r2q 100000
tc class add dev lo parent 1: classid 1:10 htb rate 10gbit
tc class add dev lo parent 1: classid 1:20 htb rate 10gbit
tc filter add dev lo parent 1: protocol ip u32 match ip dsfield 0x3c 0xfc flowid 1:10
iperf3 -s -1 -B 127.0.0.1 >/dev/null & srv=$!
sleep 0.5
"$P3CTL" run --level 3 -- iperf3 -c 127.0.0.1 -n 4M >/dev/null
wait $srv
tc -s class show dev lo
"""
    r = subprocess.run(['unshare', '-n', 'bash', '-c', script], text=True,
                       capture_output=True, timeout=120, env=dict(ENV, P3CTL=P3CTL))
    sent = {}
    cls = None
    for line in r.stdout.splitlines():
        w = line.split()
        if w[:2] == ['class', 'htb']:
            cls = w[2]
        elif w[:1] == ['Sent'] and cls:
            sent[cls] = int(w[1])
    # iperf3 may end the test before the last of its socket's bytes left.
    tap(r.returncode == 0 and sent.get('1:10', 0) >= 2 << 20
        and sent.get('1:20', 1 << 30) * 100 < sent.get('1:10', 0),
        'iperf3 under --level 3: its data leaves with DSCP 15, the ACKs back '
        'untagged (class 1:10 %d bytes, 1:20 %d)' % (sent.get('1:10', 0), sent.get('1:20', 0)),
        r.stdout + r.stderr)


test_tags()
test_refusals()
test_wire()
print('1..%d' % n)
sys.exit(1 if failed else 0)
