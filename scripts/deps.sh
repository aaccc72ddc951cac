#!/bin/bash
# deps.sh [PACKAGE...]: installs, with apt, whatever a fresh Debian 12
# machine lacks to build and test sch_p3 (and the PACKAGEs named, which
# scripts/check-debug.sh adds for the kernel build), and nothing else.
# Safe to run again: it only calls apt when a package is missing.
set -euo pipefail

# Every package with why it is needed: a fresh machine says what it
# fetches. Kernels: 6.1 is bookworm's own; 6.12 comes from
# bookworm-security. The meta-packages keep each image and its headers at
# the same version.
declare -A why=(
	[build-essential]="compilers for the module, plugin and libp3"
	[pkg-config]="finds libnl"
	[sparse]="make module C=2"
	[kmod]="modinfo, modprobe in the VM image"
	[xz-utils]="unpacks compressed modules"
	[zstd]="unpacks compressed modules"
	[linux-image-amd64]="the 6.1 kernel the VM tests boot"
	[linux-headers-amd64]="builds the module for 6.1"
	[linux-image-6.12-amd64]="the 6.12 kernel the VM tests boot"
	[linux-headers-6.12-amd64]="builds the module for 6.12"
	[qemu-system-x86]="the VM every kernel test runs in"
	[busybox-static]="the VM's userland"
	[iproute2]="tc and ip"
	[iperf3]="traffic in the VM tests"
	[ethtool]="offload settings in the VM tests"
	[nftables]="the fence for another user's senders in the VM tests"
	[libnl-3-dev]="libp3's netlink"
	[libnl-route-3-dev]="libp3's netlink"
	[clang]="libFuzzer targets of libp3's parsers"
	[libclang-rt-14-dev]="clang's libFuzzer and sanitizer runtimes (only recommended by clang)"
	[python3]="selftests, the binding"
	[python3-numpy]="benchmarks and the training emulation"
	[python3-matplotlib]="the demo's plots"
	[python3-torch]="p3.torch and real training"
	[python3-torchvision]="the torchvision models of bench/ddp and examples/ddp_train.py"
	[python3-sklearn]="the digits data set of the training example"
	[groff-base]="checks the man pages"
	[man-db]="checks the man pages"
)
# The list is the table's keys (one place to add a package), then the
# caller's.
packages=("${!why[@]}" "$@")

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing with apt (${#missing[@]} missing):" >&2
for p in "${missing[@]}"; do
	echo "deps:   $p (${why[$p]:-asked for by the caller})" >&2
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

# apt's machine-readable status (APT::Status-Fd), boiled down to a line
# each time a phase passes another tenth: minutes of silence otherwise.
progress() {
	local kind pkg pct desc step last_kind="" last=-1
	while IFS=: read -r kind pkg pct desc; do
		case $kind in
		dlstatus) step="downloading" ;;
		pmstatus) step="unpacking and configuring" ;;
		*) continue ;;
		esac
		pct=${pct%%.*}
		[ "$kind" = "$last_kind" ] || last=-1
		if [ $((pct / 10)) -gt "$last" ]; then
			last=$((pct / 10))
			last_kind=$kind
			echo "deps: $step: $pct% ($desc)" >&2
		fi
	done
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "deps: apt-get update" >&2
# apt is chatty; its own log is shown only when it fails.
if ! $sudo apt-get update -qq >"$log" 2>&1; then
	cat "$log" >&2
	echo "deps: apt-get update failed" >&2
	exit 1
fi
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
	-o APT::Status-Fd=3 --no-install-recommends "${missing[@]}" \
	3> >(progress) >"$log" 2>&1; then
	cat "$log" >&2
	echo "deps: apt-get install failed" >&2
	exit 1
fi
# The progress reader is a process substitution: let it print its last line.
wait
echo "deps: done" >&2
