#!/usr/bin/env bash
# Builds the Debian packages of xnf from binaries cargo has built, with
# dpkg-deb alone (no cargo-deb, no debhelper: one tool the machine has):
#
#   target/deb/xnf_VERSION_ARCH.deb       xnf, xnf-cni, the systemd unit,
#       man pages, completions, /etc/xnf/xnf.toml (a conffile)
#   target/deb/xnf-lab_VERSION_ARCH.deb   xnf-lab and its man pages
#
#   scripts/deb.sh [--profile release|debug | --bin DIR] [--out DIR] [--man DIR] [--compress xz|gzip|none]
#
# --profile   which build's binaries (target/PROFILE/): `make deb` builds
#             the release one first; the package test uses the debug one
# --bin DIR   the binaries' folder itself (a CARGO_TARGET_DIR elsewhere)
# --man DIR   the pages `make man` wrote (target/man/man1); without it they
#             are written here by the packaged xnf (`xnf man`)
# --compress  dpkg-deb's compressor: xz (default, smallest), gzip -1 (fast)
#
# The binaries are stripped (the release profile keeps line tables), man
# pages gzip -9n, every file root-owned with the commit's time, so the same
# tree gives the same packages. Depends comes from dpkg-shlibdeps (dpkg-dev)
# when it is installed, else from a fixed list checked against the
# binaries' NEEDED entries. The maintainer scripts neither enable nor start
# the service.
set -euo pipefail

die() {
	echo "deb.sh: $*" >&2
	exit 1
}

profile=release bin='' out=target/deb man='' compress=xz
while [ $# -gt 0 ]; do
	case $1 in
	--profile) profile=${2:?--profile needs a value} && shift 2 ;;
	--bin) bin=${2:?--bin needs a value} && shift 2 ;;
	--out) out=${2:?--out needs a value} && shift 2 ;;
	--man) man=${2:?--man needs a value} && shift 2 ;;
	--compress) compress=${2:?--compress needs a value} && shift 2 ;;
	-h | --help)
		sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
case $compress in
xz) zflags=(-Zxz) ;;
gzip) zflags=(-Zgzip -z1) ;;
none) zflags=(-Znone) ;;
*) die "--compress: xz, gzip or none, not $compress" ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -z "$bin" ] || bin=$(cd "$bin" && pwd) || die "--bin: no folder $bin"
[ -z "$man" ] || man=$(cd "$man" && pwd) || die "--man: no folder $man"
cd "$root"

for tool in dpkg-deb dpkg strip readelf gzip; do
	command -v $tool >/dev/null || die "$tool is missing (Debian: dpkg, binutils, gzip)"
done
bin=${bin:-$root/target/$profile}
for b in xnf xnf-cni xnf-lab; do
	[ -x "$bin/$b" ] || die "$bin/$b is missing: build it first (make build; for --profile debug: cargo build --workspace)"
done

# The workspace's version, from [workspace.package] in Cargo.toml.
version=$(awk '/^\[/ { s = ($0 == "[workspace.package]") } s && /^version *=/ { gsub(/.*= *"|".*/, ""); print; exit }' Cargo.toml)
[ -n "$version" ] || die "no version in Cargo.toml's [workspace.package]"
arch=$(dpkg --print-architecture)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
maintainer="${DEBFULLNAME:-xnf developers} <${DEBEMAIL:-xnf@localhost}>"

umask 022
stage=$(mktemp -d "${TMPDIR:-/tmp}/xnf-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# libbpf is linked in (libbpf-sys builds it statically); the binaries need
# libelf, zlib, libgcc_s and libc at run time, nothing else.
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
for b in xnf xnf-cni xnf-lab; do
	if needed "$bin/$b" | grep -q libbpf; then die "$bin/$b links libbpf dynamically; the package expects it static (libbpf-sys)"; fi
done

# Depends: of `binaries...`, from dpkg-shlibdeps, else the fixed list.
depends() {
	if command -v dpkg-shlibdeps >/dev/null; then
		local d="$stage/shlibs" args=()
		mkdir -p "$d/debian"
		printf 'Source: xnf\n\nPackage: xnf\nArchitecture: any\n' >"$d/debian/control"
		for b; do args+=("-e$b"); done
		local deps
		deps=$(cd "$d" && dpkg-shlibdeps -O "${args[@]}" 2>"$d/stderr" | sed -n 's/^shlibs:Depends=//p') ||
			die "dpkg-shlibdeps failed: $(cat "$d/stderr")"
		[ -n "$deps" ] || die "dpkg-shlibdeps found no dependencies: $(cat "$d/stderr")"
		echo "$deps"
		return
	fi
	local lib
	for lib in $(for b; do needed "$b"; done | sort -u); do
		case $lib in
		libc.so.6 | libm.so.6 | ld-linux*.so.* | libpthread.so.0 | libdl.so.2) ;;
		libelf.so.1 | libz.so.1 | libgcc_s.so.1) ;;
		*) die "$lib is NEEDED and not in the fixed Depends list: install dpkg-dev (dpkg-shlibdeps)" ;;
		esac
	done
	echo "libc6, libelf1, libgcc-s1, zlib1g"
}

# Man pages: the given folder's, or written now by the packaged binaries.
if [ -z "$man" ]; then
	man=$stage/man
	"$bin/xnf" man --out "$man" >/dev/null
fi
ls "$man"/xnf.1 "$man"/xnf-lab.1 >/dev/null 2>&1 || die "$man has no xnf.1 and xnf-lab.1 (make man)"

# install MODE SRC DST: a file into the package tree.
put() { install -D -m "$1" "$2" "$3"; }
# A stripped copy of a binary.
put_bin() {
	mkdir -p "$(dirname "$2")"
	strip --remove-section=.comment --remove-section=.note -o "$2" "$1"
	chmod 0755 "$2"
}
# put_man TREE PAGES...: man pages into the package tree, gzip -9n.
put_man() {
	local tree=$1 page
	shift
	mkdir -p "$tree/usr/share/man/man1"
	for page in "$@"; do
		gzip -9n <"$page" >"$tree/usr/share/man/man1/$(basename "$page").gz"
		chmod 0644 "$tree/usr/share/man/man1/$(basename "$page").gz"
	done
}
copyright() {
	mkdir -p "$1/usr/share/doc/$2"
	cat >"$1/usr/share/doc/$2/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: xnf

Files: *
Copyright: @YEAR@ the xnf authors
License: GPL-2.0-only or MIT

License: GPL-2.0-only
 This program is free software; you can redistribute it and/or modify it
 under the terms of the GNU General Public License version 2 as published
 by the Free Software Foundation.
 .
 On Debian systems, the full text of the GNU General Public License
 version 2 can be found in the file /usr/share/common-licenses/GPL-2.

License: MIT
 Permission is hereby granted, free of charge, to any person obtaining a
 copy of this software and associated documentation files (the
 "Software"), to deal in the Software without restriction, including
 without limitation the rights to use, copy, modify, merge, publish,
 distribute, sublicense, and/or sell copies of the Software, and to permit
 persons to whom the Software is furnished to do so, subject to the
 following conditions:
 .
 The above copyright notice and this permission notice shall be included
 in all copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS
 OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF
 MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN
 NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
 DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
 OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE
 USE OR OTHER DEALINGS IN THE SOFTWARE.
EOF
	sed -i "s/@YEAR@/$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)/" "$1/usr/share/doc/$2/copyright"
	chmod 0644 "$1/usr/share/doc/$2/copyright"
	# A native package's changelog: this version, from this commit.
	local commit
	commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
	printf '%s (%s) unstable; urgency=medium\n\n  * Built by scripts/deb.sh from commit %s.\n\n -- %s  %s\n' \
		"$2" "$version" "$commit" "$maintainer" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")" | gzip -9n >"$1/usr/share/doc/$2/changelog.gz"
	chmod 0644 "$1/usr/share/doc/$2/changelog.gz"
}
# build TREE: md5sums, Installed-Size, times, then the .deb.
build() {
	local tree=$1 name=$2
	(cd "$tree" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$tree/DEBIAN/md5sums"
	chmod 0644 "$tree/DEBIAN/md5sums"
	local size
	size=$(du -sk --apparent-size --exclude=DEBIAN "$tree" | cut -f1)
	sed -i "s/@SIZE@/$size/" "$tree/DEBIAN/control"
	find "$tree" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	dpkg-deb --root-owner-group "${zflags[@]}" --build "$tree" "$out/${name}_${version}_${arch}.deb" >/dev/null
	echo "$out/${name}_${version}_${arch}.deb"
}

# --- xnf ---
t=$stage/xnf
put_bin "$bin/xnf" "$t/usr/bin/xnf"
put_bin "$bin/xnf-cni" "$t/usr/bin/xnf-cni"
put 0644 deploy/systemd/xnf.service "$t/usr/lib/systemd/system/xnf.service"
put 0644 deploy/xnf.toml "$t/etc/xnf/xnf.toml"
mkdir -p "$t/usr/share/bash-completion/completions" "$t/usr/share/zsh/vendor-completions" "$t/usr/share/fish/vendor_completions.d"
"$bin/xnf" completions bash >"$t/usr/share/bash-completion/completions/xnf"
"$bin/xnf" completions zsh >"$t/usr/share/zsh/vendor-completions/_xnf"
"$bin/xnf" completions fish >"$t/usr/share/fish/vendor_completions.d/xnf.fish"
mapfile -t pages < <(find "$man" -maxdepth 1 -name 'xnf*.1' ! -name 'xnf-lab.1' ! -name 'xnf-lab-*.1' | LC_ALL=C sort)
put_man "$t" "${pages[@]}"
copyright "$t" xnf
mkdir -p "$t/DEBIAN"
xnf_depends=$(depends "$bin/xnf" "$bin/xnf-cni")
echo /etc/xnf/xnf.toml >"$t/DEBIAN/conffiles"
cat >"$t/DEBIAN/control" <<EOF
Package: xnf
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: @SIZE@
Depends: $xnf_depends
Recommends: iproute2
Suggests: nftables, xnf-lab
Section: net
Priority: optional
Description: network functions in XDP: router, filter, load balancer, chains
 xnf runs network functions at the driver hook (XDP): IPv4/IPv6 forwarding
 on the kernel's FIB, a DDoS filter and firewall, a Layer-4 load balancer,
 and chains that steer traffic through network functions in containers.
 One file says what a box runs (/etc/xnf/xnf.toml: xnf check, diff, apply).
 .
 The xnf service (xnf daemon) applies that file and keeps it applied, and
 serves Prometheus metrics; it is installed neither enabled nor started.
 Stopping it detaches nothing: programs and maps are pinned in bpffs.
 Also the CNI plugin xnf-cni. Needs Linux 6.1 or newer.
EOF
cat >"$t/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# Tells a running systemd about the unit. Neither enables nor starts the
# service: /etc/xnf/xnf.toml is an example until it names this box's
# interfaces (then: systemctl enable --now xnf).
#
# On an upgrade ($2: the version replaced), what runs moves to the new
# build in place (`xnf upgrade`: maps of a changed layout copied, each
# stage swapped in one update, never a detach): a running daemon is
# restarted and does it first; otherwise this script does it, in the
# host's network namespace and in every named one (ip netns).
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = configure ] && [ -n "$2" ] && [ -d /sys/fs/bpf/xnf ]; then
	if [ -d /run/systemd/system ] && systemctl --quiet is-active xnf.service; then
		deb-systemd-invoke restart xnf.service || echo "xnf: restarting xnf.service failed; the old programs run on: see journalctl -u xnf" >&2
	else
		xnf upgrade || echo "xnf: the upgrade of what runs failed; the old programs run on: run xnf upgrade" >&2
	fi
	for ns in /run/netns/*; do
		[ -e "$ns" ] || continue
		xnf --netns "${ns##*/}" upgrade >/dev/null || echo "xnf: the upgrade in network namespace ${ns##*/} failed: run xnf --netns ${ns##*/} upgrade" >&2
	done
fi
exit 0
EOF
cat >"$t/DEBIAN/prerm" <<'EOF'
#!/bin/sh
# On removal, stops the daemon if it runs: that detaches nothing (programs
# and maps stay pinned in bpffs and keep forwarding). On upgrade, nothing:
# the old daemon runs until postinst restarts it with the new binary.
# deb-systemd-invoke (init-system-helpers) honours policy-rc.d.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	deb-systemd-invoke stop xnf.service >/dev/null 2>&1 || true
fi
exit 0
EOF
cat >"$t/DEBIAN/postrm" <<'EOF'
#!/bin/sh
# On purge, forgets that an operator enabled the service (dpkg removes the
# conffile itself). What runs is left alone: the pins under /sys/fs/bpf/xnf
# and the run files under /run/xnf are the data plane's, and removing them
# would detach it (`xnf apply` of an empty file takes everything away).
set -e
if [ "$1" = purge ]; then
	rm -f /etc/systemd/system/multi-user.target.wants/xnf.service
fi
if [ "$1" = remove ] || [ "$1" = purge ]; then
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
	fi
fi
exit 0
EOF
chmod 0755 "$t/DEBIAN/postinst" "$t/DEBIAN/prerm" "$t/DEBIAN/postrm"
chmod 0644 "$t/DEBIAN/conffiles" "$t/DEBIAN/control"
build "$t" xnf

# --- xnf-lab ---
t=$stage/xnf-lab
put_bin "$bin/xnf-lab" "$t/usr/bin/xnf-lab"
mapfile -t pages < <(find "$man" -maxdepth 1 \( -name 'xnf-lab.1' -o -name 'xnf-lab-*.1' \) | LC_ALL=C sort)
put_man "$t" "${pages[@]}"
copyright "$t" xnf-lab
mkdir -p "$t/DEBIAN"
lab_depends=$(depends "$bin/xnf-lab")
cat >"$t/DEBIAN/control" <<EOF
Package: xnf-lab
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: @SIZE@
Depends: xnf (= $version), $lab_depends
Recommends: iproute2, ethtool
Section: net
Priority: optional
Description: xnf lab: XDP network functions measured against Linux
 Topologies in network namespaces, an in-kernel traffic generator, and
 experiments that measure each xnf network function against the Linux
 stack doing the same job, with JSON/CSV results and an HTML report.
 The xnf command's lab subcommand runs it.
EOF
chmod 0644 "$t/DEBIAN/control"
build "$t" xnf-lab
