#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The guest half of dist/test_deb.sh, run by `vm-run --installed`: only what
# the Debian packages installed on the host is used (no TC_LIB_DIR, no
# build/bin, no repo module). TAP, numbered from $1 + 1.
set -uo pipefail
n=${1:-0}
kver=$(uname -r)
multiarch=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_config_var("MULTIARCH"))')
tap() {	# status name
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - deb $kver: $2"
	else echo "not ok $n - deb $kver: $2"; fi
}
diag() { sed 's/^/# /'; }

ip link set lo up
# tc must find the plugin where p3-tools put it, and the kernel must load
# the module DKMS built, on demand.
! lsmod | grep -q '^sch_p3 ' && tc qdisc add dev lo root handle 1: p3
tap $? "tc qdisc add dev lo root p3 loads the module on demand"
path=$(modinfo -n sch_p3 2>&1)
echo "# modinfo -n sch_p3: $path"
lsmod | grep -q '^sch_p3 ' && [[ $path == /lib/modules/$kver/updates/dkms/sch_p3.ko* ]]
tap $? "the module loaded is DKMS's, in /lib/modules/$kver/updates/dkms"
out=$(tc qdisc show dev lo)
echo "$out" | diag
[[ $out == *"qdisc p3 1: root"*"bands 8"*"tag dscp"* ]]
tap $? "tc shows the qdisc through /usr/lib/$multiarch/tc/q_p3.so"

out=$(command -v p3ctl; p3ctl show lo 2>&1)
echo "$out" | diag
[[ $out == /usr/bin/p3ctl*"qdisc p3 1:"*"bands 8"* ]]
tap $? "/usr/bin/p3ctl show lo"

# From /, so that nothing of the source tree can be imported: the
# binding, tagging through the installed libp3, counted in band 0.
(cd / && /usr/bin/python3 - <<'PYEOF'
import json, os, socket, subprocess, sys
import p3, p3.torch
lib = [l.split()[-1] for l in open('/proc/self/maps') if 'libp3.so' in l]
print('# p3 from', p3.__file__, 'libp3 from', sorted(set(lib)))
ok = p3.__file__.startswith('/usr/lib/python3/dist-packages/') and lib and \
    all(l.startswith('/usr/lib/') and '/libp3.so.1' in l for l in lib)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
p3.tag(s, 0)
for _ in range(20):
    s.sendto(b'x' * 200, ('127.0.0.1', 9))
st = json.loads(subprocess.check_output(['p3ctl', '--json', 'stat', 'lo']))
band = [b['packets'] for b in st['bands']]
print('# band packets after 20 datagrams at level 0:', band)
sys.exit(0 if ok and band[0] >= 20 else 1)
PYEOF
)
tap $? "import p3 (the package's, on libp3.so.1), p3.tag level 0: 20 datagrams in band 0"

p3ctl del lo && ! tc qdisc show dev lo | grep -q p3
tap $? "p3ctl del lo"
echo "# guest tests: $n"
