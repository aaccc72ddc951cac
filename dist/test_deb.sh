#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The Debian packages end to end (TAP): `make deb` builds them and lintian
# passes; `apt install ./*.deb` on this host makes DKMS build sch_p3 for
# every kernel with headers; p3ctl, pkg-config and a program linked against
# libp3 work here; in a VM booted on each of those kernels (vm-run
# --installed: nothing from the source tree) tc loads the DKMS module on
# demand and the binding tags through the installed libp3
# (dist/test_deb_guest.sh); `apt remove` leaves only the conffile,
# `apt purge` nothing. Needs root; installs and removes packages on this
# host, so it is for CI machines and VMs.
#   dist/test_deb.sh
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tap_name=deb
# shellcheck source=dist/tap.sh
. "$top/dist/tap.sh"
pkgs=(sch-p3-dkms libp3-1 libp3-dev python3-p3 p3-tools)
tmp=$(mktemp -d)
finish() {
	echo "1..$n"
	exit $failed
}
# Whatever happens, the host is left without the packages.
# dpkg, not apt: apt forgets a package from a local .deb once it is
# removed, and refuses to purge what it does not know.
cleanup() {
	dpkg --purge "${pkgs[@]}" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
	echo "ok 1 - deb: install test # SKIP needs root (it installs packages)"
	echo "1..1"
	exit 0
fi

make --no-print-directory -s -C "$top" deb >"$tmp/deb.log" 2>&1
rc=$?
diag <"$tmp/deb.log"
tap $rc "make deb: the five packages, lintian without errors or warnings"
[ $rc -eq 0 ] || finish
debs=()
for p in "${pkgs[@]}"; do debs+=("$top"/build/deb/"$p"_*.deb); done

kernels=$(cd /lib/modules && for k in *; do
	[ -e "$k/build/Makefile" ] && echo "$k"; done)
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" >"$tmp/apt.log" 2>&1
rc=$?
[ $rc -eq 0 ] || diag <"$tmp/apt.log"
tap $rc "apt install ./*.deb"
dkms status sch_p3 2>&1 | diag
bad=0
for k in $kernels; do
	ko=$(ls /lib/modules/"$k"/updates/dkms/sch_p3.ko* 2>/dev/null)
	modinfo -F name "$ko" 2>/dev/null | grep -qx sch_p3 || bad=1
	echo "# $k: ${ko:-no module}"
done
[ -n "$kernels" ] && [ $bad -eq 0 ]
tap $? "DKMS built sch_p3 for every kernel with headers ($(echo $kernels))"

p3ctl 2>&1 | head -1 | diag
[ "$(command -v p3ctl)" = /usr/bin/p3ctl ] && [ -x /usr/bin/p3torchrun ] &&
	man -w p3ctl >/dev/null 2>&1 && man -w tc-p3 >/dev/null 2>&1 &&
	man -w p3torchrun >/dev/null 2>&1 &&
	[ -f /lib/systemd/system/p3@.service ] && [ -f /etc/default/p3 ]
tap $? "p3ctl, p3torchrun, their man pages and tc-p3(8), p3@.service, /etc/default/p3"

# libp3-dev: a program built with pkg-config runs on libp3.so.1.
cat >"$tmp/v.c" <<'CEOF'
#include <p3.h>
#include <stdio.h>
int main(void) { puts(p3_version()); return 0; }
CEOF
cc -o "$tmp/v" "$tmp/v.c" $(pkg-config --cflags --libs libp3) 2>&1 | diag
out=$("$tmp/v" 2>&1)
echo "# p3_version(): $out; $(ldd "$tmp/v" | grep libp3)"
# /lib is /usr/lib on a merged /usr (Debian 12): ldconfig may name either.
lib=$(ldd "$tmp/v" | sed -n 's/.*libp3\.so\.1 => \([^ ]*\).*/\1/p')
[ "$out" = "$(pkg-config --modversion libp3)" ] &&
	[[ $(readlink -f "$lib") == /usr/lib/*/libp3.so.$(pkg-config --modversion libp3) ]]
tap $? "libp3-dev: cc \$(pkg-config --cflags --libs libp3) links libp3.so.1; p3_version() is the .pc's"

for k in $kernels; do
	"$top/selftests/vm-run" --installed --kernel "$k" --timeout 600 -- \
		dist/test_deb_guest.sh "$n" >"$tmp/guest.tap" 2>&1
	rc=$?
	cat "$tmp/guest.tap"
	n=$(grep -cE '^(not )?ok ' "$tmp/guest.tap" | awk -v n="$n" '{ print n + $1 }')
	grep -q '^not ok' "$tmp/guest.tap" && failed=1
	[ $rc -eq 0 ] || tap 1 "$k: the guest exited with status $rc"
done

# What the packages installed, to look for after removal.
for p in "${pkgs[@]}"; do dpkg -L "$p"; done | sort -u >"$tmp/files"
DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq "${pkgs[@]}" >"$tmp/apt.log" 2>&1
rc=$?
[ $rc -eq 0 ] || diag <"$tmp/apt.log"
# Directories (and /lib, a link to one on a merged /usr) are shared.
left=$(while read -r f; do
	[ ! -d "$f" ] && { [ -f "$f" ] || [ -L "$f" ]; } && echo "$f"; done <"$tmp/files")
left+=$(ls /lib/modules/*/updates/dkms/sch_p3.ko* /var/lib/dkms/sch_p3 2>/dev/null)
echo "# left after remove: $(echo $left)"
[ $rc -eq 0 ] && [ "$left" = /etc/default/p3 ]
tap $? "apt remove: every file and DKMS module gone, but the conffile /etc/default/p3"
dpkg --purge "${pkgs[@]}" >"$tmp/apt.log" 2>&1
rc=$?
[ $rc -eq 0 ] || diag <"$tmp/apt.log"
# dpkg -l's second letter is the state: n (not installed) is all a purge
# may leave (c would be config files).
[ $rc -eq 0 ] && [ ! -e /etc/default/p3 ] &&
	! dpkg -l "${pkgs[@]}" 2>/dev/null | grep -qE '^[a-z][a-mo-z] '
tap $? "apt purge: nothing left, not even the package records"
finish
