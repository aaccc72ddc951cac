#!/bin/bash
# deb-build.sh: `make deb`. Builds the Debian packages of debian/control
# with dpkg-buildpackage, on a copy of the tree in build/deb/ (so that the
# tree itself gets no debian/ build litter and a dirty build/ never ends up
# in a package), then runs lintian on them. The .debs, lintian's report
# (lintian.txt) and the sizes (sizes.txt) are left in build/deb/.
# Exit status: 0 when the packages are built and lintian reports neither
# errors nor warnings (overrides are in debian/*.lintian-overrides, each
# with its reason).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/deb
version=$(cd "$top" && dpkg-parsechangelog -SVersion 2>/dev/null ||
	sed -n '1s/.*(\(.*\)).*/\1/p' debian/changelog)
src=$out/sch-p3-$version

"$top/scripts/deps.sh" debhelper dh-dkms dh-python lintian

rm -rf "$out"
mkdir -p "$src"
echo "deb: copying the tree to $src"
tar -C "$top" --exclude=./build --exclude=./.git -cf - . | tar -C "$src" -xf -

echo "deb: dpkg-buildpackage (log: $out/build.log)"
if ! (cd "$src" && dpkg-buildpackage -us -uc -b) >"$out/build.log" 2>&1; then
	tail -40 "$out/build.log"
	echo "deb: dpkg-buildpackage failed" >&2
	exit 1
fi

cd "$out"
echo "deb: packages"
for f in *.deb; do
	printf '%-40s %8s bytes, %6s KiB installed\n' "$f" "$(stat -c %s "$f")" \
		"$(dpkg-deb -f "$f" Installed-Size)"
done | tee sizes.txt

echo "deb: lintian"
lintian --display-info --pedantic ./*.changes >lintian.txt 2>&1 || true
sed 's/^/  /' lintian.txt
if grep -qE '^[EW]: ' lintian.txt; then
	echo "deb: lintian reports errors or warnings" >&2
	exit 1
fi
echo "deb: lintian: no errors, no warnings ($(grep -cE '^[IP]: ' lintian.txt || true) info and pedantic notes)"
