#!/bin/bash
# build.sh [--print-dir | --install-deps]: builds the debug guest kernel (KASAN, lockdep,
# kmemleak, UBSAN, debug objects, fault injection) from Debian's
# linux-source-6.1, once per machine, and prints the directory holding it:
#
#   DIR/vmlinuz                      the bzImage vm-run boots
#   DIR/vmlinux                      the same kernel as an ELF, for symbols
#   DIR/root/lib/modules/RELEASE     modules_install output (modules.* and
#                                    the few =m modules); its build/ link
#                                    points at DIR/src, the built tree that
#                                    `make -C DIR/src M=...` needs
#   DIR/release                      `make kernelrelease`
#   DIR/build.log, DIR/build-seconds
#
# DIR is $P3_DEBUG_KERNEL_CACHE (default /var/cache/sch_p3/debug-kernel)
# plus a hash of the options in the config fragment next to this script
# (its comments do not count), the source package's version and the
# compiler's: a change to any of them builds a new kernel, anything else
# reuses the cached one. --print-dir prints DIR and
# exits 1 when no finished build is there, without building.
# --install-deps installs what the build needs beyond `make deps`, with
# scripts/deps.sh, and builds nothing.
#
# The machine has two cores shared with running guests, so the build runs
# at nice 19 with -j2; the minimal configuration (see config) builds in
# about 5 minutes, defconfig with the same debug options took 23.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
fragment=$here/config
tarball=/usr/src/linux-source-6.1.tar.xz
cache=${P3_DEBUG_KERNEL_CACHE:-/var/cache/sch_p3/debug-kernel}

die() { echo "debug-kernel: $*" >&2; exit 1; }

if [ "${1:-}" = --install-deps ]; then
	exec "$here/../../scripts/deps.sh" linux-source-6.1 flex bison bc libelf-dev
fi

if ! srcver=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null); then
	# Nothing can have been built from it: no directory to print.
	[ "${1:-}" = --print-dir ] && exit 1
	die "linux-source-6.1 is not installed ($0 --install-deps installs it)"
fi
key=$( { grep -E '^(CONFIG_|# CONFIG_)' "$fragment"; echo "$srcver"; gcc --version | head -n1; } |
	sha256sum | cut -c1-16)
dir=$cache/$key

if [ "${1:-}" = --print-dir ]; then
	echo "$dir"
	[ -f "$dir/ok" ]
	exit
fi
if [ -f "$dir/ok" ]; then
	echo "$dir"
	exit 0
fi
[ -f "$tarball" ] || die "$tarball is missing"
for t in flex bison bc; do
	command -v $t >/dev/null || die "$t is missing ($0 --install-deps installs it)"
done
[ -f /usr/include/gelf.h ] || die "libelf-dev is missing (objtool needs it; $0 --install-deps)"

mkdir -p "$cache"
# One build at a time; a second caller waits and then finds it done.
exec 8>"$cache/.lock"
flock 8
if [ -f "$dir/ok" ]; then
	echo "$dir"
	exit 0
fi

rm -rf "$dir"
mkdir -p "$dir"
log=$dir/build.log
start=$(date +%s)
echo "debug-kernel: building in $dir (log: $log)" >&2

build() {
	tar -xf "$tarball" -C "$dir"
	mv "$dir/linux-source-6.1" "$dir/src"
	cd "$dir/src"
	# The fragment is the whole configuration: every option it does not
	# name is off unless something it names needs it.
	make allnoconfig KCONFIG_ALLCONFIG="$fragment"

	# Kconfig silently drops what a missing dependency forbids: every
	# line of the fragment must have survived.
	bad=0
	while IFS= read -r line; do
		[[ $line =~ ^CONFIG_ || $line =~ ^#\ CONFIG_.*is\ not\ set$ ]] || continue
		if [[ $line == "# "* ]]; then
			name=${line#\# }
			name=${name%% *}
			grep -q "^$name=" .config || continue
		else
			grep -qxF "$line" .config && continue
		fi
		echo "debug-kernel: not in the final .config: $line" >&2
		bad=1
	done <"$fragment"
	[ $bad -eq 0 ]

	nice -n 19 make -j2 bzImage vmlinux modules
	nice -n 19 make -j2 modules_install INSTALL_MOD_PATH="$dir/root" INSTALL_MOD_STRIP=1
	make -s kernelrelease >"$dir/release"
	cp vmlinux "$dir/vmlinux"
	cp arch/x86/boot/bzImage "$dir/vmlinuz"
}

# Not `build || ...`: that would turn off set -e inside build.
set +e
(set -e; build) >"$log" 2>&1
rc=$?
set -e
if [ $rc -ne 0 ]; then
	tail -n 30 "$log" >&2
	die "build failed; log: $log"
fi
echo $(($(date +%s) - start)) >"$dir/build-seconds"
touch "$dir/ok"
echo "debug-kernel: built $(cat "$dir/release") in $(cat "$dir/build-seconds") s" >&2
echo "$dir"
