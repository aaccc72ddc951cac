#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# TAP checks of the pip package (pyproject.toml, setup.py, MANIFEST.in),
# with real installs into fresh venvs of $PYTHON, torch from pip:
#   a. `pip wheel` of the source tree: a platform wheel holding p3/libp3.so;
#   b. that wheel in a venv beside torch: import p3.torch on the bundled
#      libp3, p3torchrun, and a two-rank job it launches (equal parameters);
#   c. `pip install` of the source tree into a second venv: the same import;
#   d. the sdist holds the C sources, and its wheel libp3.so;
#   e. without the bundled libp3 (and none on the system) import p3 fails
#      with an ImportError that says how to fix it.
# Needs PyPI (or pip's cache) for numpy and the build's setuptools.
#   dist/test_pip.sh    (PYTHON: default /usr/bin/python3; TORCH: the pin)
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
# Pinned: pip's unpinned torch is the CUDA build, gigabytes.
TORCH=${TORCH:-torch==2.13.0}
tap_name=pip
# shellcheck source=dist/tap.sh
. "$top/dist/tap.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Run everything from outside the tree, so that only the venv's p3 imports.
cd "$work" || exit 1
unset PYTHONPATH P3_LIB

step() { echo "# [$((SECONDS))s] $*"; }
# What a setuptools build could leave in the tree that git would see.
artefacts() {
	git -C "$top" ls-files --others --exclude-standard -- \
		userlib/python build dist '*.egg-info' 2>/dev/null | sort
}
before=$(artefacts)

# The checks every installed venv must pass: p3 from the venv, on the
# libp3.so beside it (the one mapped, not the source tree's), p3.torch.
cat >"$work/where.py" <<'EOF'
import os
import sys

import p3
import p3.torch

venv = sys.argv[1]
bundled = os.path.join(os.path.dirname(p3.__file__), 'libp3.so')
mapped = {line.split()[-1] for line in open('/proc/self/maps')
          if 'libp3' in line}
print('p3:', p3.__file__)
print('loaded:', p3._lib._name, 'mapped:', ' '.join(sorted(mapped)))
sys.exit(not (p3.__file__.startswith(venv + '/')
              and p3._lib._name == bundled and mapped == {bundled}))
EOF

# A tiny data-parallel job: each rank starts from its own seed (the
# broadcast makes them one) and trains on its own data.
cat >"$work/train.py" <<'EOF'
import sys

import torch
import p3
import p3.torch as p3t

torch.set_num_threads(1)
p3t.init()
rank = p3t.rank()
torch.manual_seed(rank)
model = torch.nn.Linear(16, 4)
p3t.broadcast_parameters(model.state_dict(), root_rank=0)
start = [p.detach().clone() for p in model.parameters()]
opt = p3t.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               model)
g = torch.Generator().manual_seed(100 + rank)
for _ in range(5):
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
opt.synchronize()
torch.save({'p3': p3.__file__, 'start': start,
            'final': [p.detach().clone() for p in model.parameters()]},
           '%s/rank%d.pt' % (sys.argv[1], rank))
p3t.shutdown()
EOF

cat >"$work/same.py" <<'EOF'
import sys

import torch

r = [torch.load('%s/rank%d.pt' % (sys.argv[1], i)) for i in (0, 1)]
print('ranks ran p3 from', {x['p3'] for x in r})
equal = all(torch.equal(a, b) for a, b in zip(r[0]['final'], r[1]['final']))
moved = not all(torch.equal(a, b) for a, b in zip(r[0]['start'], r[0]['final']))
print('final parameters bitwise equal:', equal, '; moved by training:', moved)
sys.exit(not (equal and moved and
              all(x['p3'].startswith(sys.argv[2] + '/') for x in r)))
EOF

wheel_ok() {	# wheel: p3/libp3.so in it, tagged for this platform
	"$PYTHON" - "$1" <<'EOF'
import sys
import zipfile

w = sys.argv[1]
names = zipfile.ZipFile(w).namelist()
wheel = [zipfile.ZipFile(w).read(n).decode() for n in names
         if n.endswith('.dist-info/WHEEL')][0]
print(w.rsplit('/', 1)[-1], '; p3/libp3.so:', 'p3/libp3.so' in names)
sys.exit(not ('p3/libp3.so' in names and not w.endswith('-any.whl')
              and 'Root-Is-Purelib: false' in wheel))
EOF
}

install() {	# venv package: torch first, as a user must, then package
	local log=$work/install-${1##*/}.log
	"$1/bin/pip" install -q "$TORCH" >"$log" 2>&1 &&
		"$1/bin/pip" install -q "$2" >>"$log" 2>&1 ||
		{ tail -20 "$log" | diag; return 1; }
}

# a. The wheel, built by a fresh venv's pip (in its isolated build env).
step "venv 1; pip wheel --no-deps of $top"
v1=$work/v1
"$PYTHON" -m venv "$v1"
"$v1/bin/pip" wheel -q --no-deps -w "$work/W" "$top" >"$work/wheel.log" 2>&1
rc=$?
[ $rc -eq 0 ] || tail -20 "$work/wheel.log" | diag
whl=$(ls "$work"/W/sch_p3-*.whl 2>/dev/null | head -1)
[ $rc -eq 0 ] && [ -n "$whl" ] && wheel_ok "$whl" 2>&1 | diag
tap $? "pip wheel of the source tree: a platform-tagged wheel holding p3/libp3.so"

# b. torch first (the package leaves it to the user), then the wheel.
step "venv 1: pip install $TORCH, then the wheel"
install "$v1" "${whl:-no-wheel}"
tap $? "pip install $TORCH, then the wheel (numpy from its dependencies)"

"$v1/bin/python" "$work/where.py" "$v1" 2>&1 | diag
tap $? "wheel: import p3.torch from the venv, on the bundled p3/libp3.so (no PYTHONPATH, no P3_LIB)"

out=$("$v1/bin/p3torchrun" --help 2>&1)
rc=$?
echo "$out" | head -1 | diag
[ $rc -eq 0 ] && echo "$out" | grep -q -- --nproc[-_]per[-_]node
tap $? "wheel: the venv's bin/p3torchrun --help"

step "venv 1: a two-rank job through p3torchrun"
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 180 "$v1/bin/p3torchrun" --nproc_per_node 2 --master_port "$port" \
	"$work/train.py" "$work" >"$work/job.log" 2>&1
rc=$?
[ $rc -eq 0 ] || tail -30 "$work/job.log" | diag
[ $rc -eq 0 ] && "$v1/bin/python" "$work/same.py" "$work" "$v1" 2>&1 | diag
tap $? "wheel: p3torchrun --nproc_per_node 2 trains nn.Linear with DistributedOptimizer; both ranks end bitwise equal"

# c. The source tree itself, into a second fresh venv.
step "venv 2: pip install $TORCH, then pip install $top"
v2=$work/v2
"$PYTHON" -m venv "$v2"
install "$v2" "$top"
tap $? "pip install of the source tree (after $TORCH)"
"$v2/bin/python" "$work/where.py" "$v2" 2>&1 | diag
tap $? "source tree: import p3.torch from the venv, on the bundled p3/libp3.so"
[ -x "$v2/bin/p3torchrun" ] && "$v2/bin/p3torchrun" --help >/dev/null 2>&1
tap $? "source tree: the venv's bin/p3torchrun --help"

# d. The sdist through setuptools' own PEP 517 hook (the build pip runs),
# then a wheel built from it alone: MANIFEST.in brought the C sources.
step "venv 2: the sdist, and a wheel from it"
sd=$("$v2/bin/pip" install -q 'setuptools>=77' >"$work/st.log" 2>&1 &&
	cd "$top" && "$v2/bin/python" -c 'import sys
from setuptools import build_meta
print(build_meta.build_sdist(sys.argv[1]))' "$work/S" 2>"$work/sdist.log" | tail -1)
[ -n "$sd" ] || tail -20 "$work"/st.log "$work"/sdist.log | diag
want=$(cd "$top" && ls userlib/src/*.[ch] userlib/include/p3.h userlib/Makefile \
	userlib/libp3.map include/uapi/linux/pkt_sched_p3.h)
have=$(tar -tzf "$work/S/${sd:-none}" 2>/dev/null | sed 's|^[^/]*/||')
lack=$(comm -23 <(echo "$want" | sort) <(echo "$have" | sort))
[ -n "$lack" ] && echo "missing: $lack" | diag
[ -n "$sd" ] && [ -z "$lack" ]
tap $? "sdist ${sd:-(none)} holds libp3's sources, headers, Makefile and version script"
"$v2/bin/pip" wheel -q --no-deps -w "$work/W2" "$work/S/${sd:-none}" >"$work/wheel2.log" 2>&1 &&
	wheel_ok "$(ls "$work"/W2/sch_p3-*.whl)" 2>&1 | diag
tap $? "a wheel built from the sdist alone holds p3/libp3.so"

# e. Last, as it breaks venv 1: no bundled library and none elsewhere.
step "venv 1 without p3/libp3.so"
if ldconfig -p 2>/dev/null | grep -q 'libp3\.so'; then
	skip "without the bundled libp3, import p3 says how to fix it" \
		"the system has a libp3 ($(ldconfig -p | grep -m1 'libp3\.so' | sed 's/.*=> //')), which p3 would load"
else
	rm -f "$("$v1/bin/python" -c 'import importlib.util, os
print(os.path.join(os.path.dirname(importlib.util.find_spec("p3").origin), "libp3.so"))')"
	out=$("$v1/bin/python" -c 'import p3' 2>&1)
	rc=$?
	echo "$out" | sed -n '/^ImportError/,$p' | diag
	[ $rc -ne 0 ] && echo "$out" | grep -q 'ImportError: p3: cannot load libp3.so' &&
		echo "$out" | grep -q libnl && echo "$out" | grep -q P3_LIB
	tap $? "without the bundled libp3, import p3 is an ImportError naming the fixes (libnl, libp3-1, P3_LIB)"
fi

after=$(artefacts)
new=$(comm -13 <(echo "$before") <(echo "$after"))
[ -n "$new" ] && echo "$new" | diag
[ -z "$new" ]
tap $? "the builds left nothing in the tree that git would see"

step "done"
echo "1..$n"
exit $failed
