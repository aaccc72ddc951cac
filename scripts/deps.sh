#!/bin/bash
# deps.sh [PACKAGE...]: installs, with apt, whatever a fresh Debian 12
# machine lacks to build and test sch_p3 (and the PACKAGEs named, which
# scripts/check-debug.sh adds for the kernel build), and nothing else.
# Safe to run again: it only calls apt when a package is missing.
set -euo pipefail

# Kernels: 6.1 is bookworm's own; 6.12 comes from bookworm-security. The
# meta-packages keep each image and its headers at the same version.
packages=(
	build-essential pkg-config sparse kmod xz-utils zstd
	linux-image-amd64 linux-headers-amd64
	linux-image-6.12-amd64 linux-headers-6.12-amd64
	qemu-system-x86 busybox-static
	iproute2 iperf3 ethtool
	libnl-3-dev libnl-route-3-dev
	clang
	python3 python3-numpy python3-matplotlib python3-torch python3-sklearn
	groff-base man-db
	"$@"
)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
log=$(mktemp)
# apt is chatty; its log is shown only when it fails.
if ! { $sudo apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
		--no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
	cat "$log" >&2
	echo "deps: apt-get failed" >&2
	exit 1
fi
rm -f "$log"
