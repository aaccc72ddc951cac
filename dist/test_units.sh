#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# TAP checks of dist/: systemd-analyze verify on p3@.service (the template
# and two instances), that the unit and dist/default/p3 name the same
# variables and files, that `make dist-install` writes both where the unit
# looks, and that p3ctl's parser takes the default file's examples.
#   dist/test_units.sh [P3CTL]   (P3CTL: default build/userlib/p3ctl)
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
unit=$top/dist/systemd/p3@.service
defaults=$top/dist/default/p3
P3CTL=$(realpath -m "${1:-$top/build/userlib/p3ctl}")
tap_name=units
# shellcheck source=dist/tap.sh
. "$top/dist/tap.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# systemd-analyze verify works on unit files alone, offline, but says that
# an Exec binary which is not installed "is not executable". The shipped
# unit may say exactly that of /usr/bin/p3ctl and /sbin/modprobe (a build
# host or container may have neither), nothing else; a copy whose binaries
# exist must pass clean.
if ! command -v systemd-analyze >/dev/null; then
	skip "systemd-analyze verify p3@.service" "systemd-analyze is not installed"
else
	# A template is verified as instance "i"; an escaped dash must make a
	# valid device unit name too.
	for inst in "" eth0 'br\x2dlan'; do
		f=$tmp/p3@$inst.service
		cp "$unit" "$f"
		out=$(cd "$tmp" && systemd-analyze verify --man=no "$f" 2>&1)
		rest=$out
		for bin in /usr/bin/p3ctl /sbin/modprobe; do
			[ -x $bin ] ||
				rest=$(echo "$rest" | grep -v ": Command $bin is not executable: ")
		done
		echo "$out" | diag
		[ -z "$rest" ]
		tap $? "systemd-analyze verify p3@$inst.service: nothing but a missing p3ctl or modprobe"
		rm -f "$f"
	done
	exe=$P3CTL
	[ -x "$exe" ] || exe=/bin/true
	modprobe=/sbin/modprobe
	[ -x $modprobe ] || modprobe=/bin/true
	sed -e "s|/usr/bin/p3ctl|$exe|" -e "s|/sbin/modprobe|$modprobe|" "$unit" \
		>"$tmp/p3@eth0.service"
	out=$(cd "$tmp" && systemd-analyze verify --man=no "$tmp/p3@eth0.service" 2>&1)
	rc=$?
	echo "$out" | diag
	[ $rc -eq 0 ] && [ -z "$out" ]
	tap $? "systemd-analyze verify passes clean with p3ctl at $exe, modprobe at $modprobe"
	rm -f "$tmp/p3@eth0.service"
fi

# The variables the Exec lines use are the ones the default file sets
# (commented out or not), both ways.
used=$(grep -E '^Exec' "$unit" | grep -oE '\$\{?[A-Za-z_][A-Za-z0-9_]*' |
	tr -d '${' | sort -u)
set_=$(grep -oE '^#?[A-Za-z_][A-Za-z0-9_]*=' "$defaults" | tr -d '#=' | sort -u)
echo "# unit uses: $(echo $used); default file sets: $(echo $set_)"
[ -n "$used" ] && [ "$used" = "$set_" ]
tap $? "the unit's Exec lines and dist/default/p3 name the same variables"

grep -qx 'EnvironmentFile=-/etc/default/p3' "$unit" &&
	grep -qx 'EnvironmentFile=-/etc/default/p3-%I' "$unit" &&
	grep -q '/etc/default/p3-IFACE' "$defaults"
tap $? "the unit reads /etc/default/p3, then /etc/default/p3-IFACE, as the default file says"

# The device the unit binds to is the one it starts with and the one that
# pulls it in; p3ctl gets the unescaped name.
grep -qx 'BindsTo=sys-subsystem-net-devices-%i.device' "$unit" &&
	grep -qx 'After=sys-subsystem-net-devices-%i.device' "$unit" &&
	grep -qx 'WantedBy=sys-subsystem-net-devices-%i.device' "$unit" &&
	! grep -E '^Exec' "$unit" | grep -q '%i'
tap $? "BindsTo, After and WantedBy the device unit (%i); p3ctl gets %I"

# make dist-install: the unit where systemd looks, p3ctl's path as
# installed, and an existing /etc/default/p3 kept.
d=$tmp/root
if make --no-print-directory -s -C "$top" dist-install DESTDIR="$d" PREFIX=/usr/local \
	>"$tmp/log" 2>&1; then
	grep -qx 'ExecStart=/usr/local/bin/p3ctl replace %I $P3_OPTS' \
		"$d/lib/systemd/system/p3@.service" &&
		cmp -s "$defaults" "$d/etc/default/p3"
	tap $? "make dist-install: /lib/systemd/system/p3@.service (PREFIX's p3ctl), /etc/default/p3"
	echo 'P3_OPTS="bands 4"' >"$d/etc/default/p3"
	make --no-print-directory -s -C "$top" dist-install DESTDIR="$d" PREFIX=/usr \
		>"$tmp/log" 2>&1 &&
		grep -qx 'P3_OPTS="bands 4"' "$d/etc/default/p3" &&
		grep -qx 'ExecStart=/usr/bin/p3ctl replace %I $P3_OPTS' \
			"$d/lib/systemd/system/p3@.service"
	tap $? "make dist-install again (PREFIX=/usr): an edited /etc/default/p3 is kept"
else
	diag <"$tmp/log"
	tap 1 "make dist-install"
fi

# Every example in the default file is valid p3ctl syntax: a bad option
# is a usage error (exit 2); in a fresh namespace anything else fails
# later, at netlink, or succeeds there, out of the host's way.
if [ ! -x "$P3CTL" ]; then
	skip "p3ctl takes the default file's examples" "no $P3CTL (make userlib)"
elif ! unshare -n true 2>/dev/null; then
	skip "p3ctl takes the default file's examples" "cannot create a network namespace"
else
	bad=0
	while IFS= read -r line; do
		opts=${line#*=}
		opts=${opts#\"}
		opts=${opts%\"}
		# shellcheck disable=SC2086 # split as systemd splits $P3_OPTS
		unshare -n "$P3CTL" replace lo $opts >/dev/null 2>"$tmp/err"
		rc=$?
		echo "# p3ctl replace lo $opts: exit $rc"
		[ $rc -ne 2 ] || { bad=1; diag <"$tmp/err"; }
	done < <(grep -E '^#?P3_OPTS=' "$defaults")
	grep -qE '^#?P3_OPTS=' "$defaults" && [ $bad -eq 0 ]
	tap $? "p3ctl takes every P3_OPTS example of dist/default/p3"
fi

echo "1..$n"
exit $failed
