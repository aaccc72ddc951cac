#!/bin/bash
# kmod-build.sh KVER OUTDIR [KBUILD-ARGS...]: builds sch_p3.ko for kernel
# KVER into OUTDIR, e.g. with W=1 or C=2. KVER is a release under
# /lib/modules, or a path: the kernel's build tree itself (the debug
# kernel's, which is not installed).
#
# kbuild writes objects next to the sources of an external module, so each
# kernel gets its own tree of links to the sources; that keeps the 6.1 and
# 6.12 objects apart and the source folders clean.
set -euo pipefail
kver=$1
out=$(mkdir -p "$2" && cd "$2" && pwd)	# kbuild needs M= absolute
shift 2
top=$(cd "$(dirname "$0")/.." && pwd)
case $kver in
*/*) kdir=$kver ;;
*) kdir=/lib/modules/$kver/build ;;
esac
[ -d "$kdir" ] || { echo "kmod-build: no headers for $kver in $kdir" >&2; exit 1; }

tree=$out/tree
mkdir -p "$tree/kmod"
ln -sfn "$top/include" "$tree/include"
ln -sf "$top/Kbuild" "$tree/Kbuild"
for f in "$top"/kmod/Kbuild "$top"/kmod/*.[ch]; do
	ln -sf "$f" "$tree/kmod/"
done
make --no-print-directory -C "$kdir" M="$tree" "$@" modules
cp "$tree/kmod/sch_p3.ko" "$out/sch_p3.ko"
