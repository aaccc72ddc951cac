#!/bin/bash
# torch-venv.sh [DIR]: makes (once) the virtual environment in which
# make check runs the p3.torch suites under pip's torch 2.x, as a user
# installs it: Debian's python3 -m venv, then pip install of
# userlib/tests/torch2-requirements.txt.  DIR defaults to
# build/venv-torch2; it is made anew when the requirements change.
# Prints DIR/bin/python on success.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$top/build/venv-torch2}
req=$top/userlib/tests/torch2-requirements.txt
stamp=$dir/.requirements

if ! cmp -s "$req" "$stamp" 2>/dev/null; then
	rm -rf "$dir"
	echo "torch-venv: making $dir" >&2
	/usr/bin/python3 -m venv "$dir"
	echo "torch-venv: pip install -r ${req#"$top"/}" >&2
	# pip's warnings about the machine's extra indexes are not ours.
	"$dir/bin/pip" install -q -r "$req" 2>&1 | grep -v '^WARNING: Location' >&2 || true
	# A failed install (grep hid pip's status) shows here.
	"$dir/bin/python" -c 'import torch, numpy, sklearn' >&2
	cp "$req" "$stamp"
fi
echo "$dir/bin/python"
