#!/usr/bin/env bash
# Builds the peer tools `xnf lab` compares xnf against, into /opt/xnf/peers
# (or $XNF_PEERS), and prints where each binary is. Idempotent: a tool that
# is already built is only reported. Needs root (apt-get).
#
#   scripts/peers.sh            # builds what is missing
#   scripts/peers.sh --rebuild  # builds again from a fresh source tree
#
#   scripts/peers.sh --katran DIR  # Katran's data plane from a checkout
#
# Today that is two tools of xdp-tools: xdp-filter, the `xdp-filter`
# variant of `xnf lab filter`, and xdp-forward, the `xdp-forward` and
# `xdp-forward-direct` variants of `xnf lab router`; and, on request,
# Katran's balancer, the `katran` variant of `xnf lab lb`.
#
# Katran is in no package registry and its user space needs folly, which
# Debian does not ship: --katran DIR compiles only its XDP program,
# DIR/katran/lib/bpf/balancer.bpf.c, from a checkout the user gives
# (git clone https://github.com/facebookincubator/katran), as Katran's own
# katran/lib/Makefile-bpf does (clang to LLVM IR with -O2 -g -DDEBUG
# -D__KERNEL__, then llc -march=bpf), with none of its optional features
# (no -D of build_bpf_modules_opensource.sh: IPIP encapsulation, no GUE,
# no inline decapsulation) and two address defines of ours: the outer
# sources in 198.18.0.0/16 and 2001:db8::/64 (IPIP_V4_PREFIX,
# IPIP_V6_PREFIX1) instead of 172.16.0.0/16 and 100::/64, so the lab's
# packets stay in its test ranges. The lab loads it with a loader of its
# own (lab/src/experiments/lb/katran.rs). The commit and flags are written
# next to the object, and the lab puts them in its results.
#
# Which source, and why:
# * Debian 12's packaged xdp-tools 1.3.1 does not run on current kernels
#   (machine facts: a renamed tracepoint), and its source package cannot be
#   fetched from this machine's Debian mirror (the .dsc is there, its orig
#   tarball answers 404). So this takes the source package of Debian
#   unstable, xdp-tools 1.6.3, through `apt-get source` with a deb-src entry
#   added for it (source only: no binary package comes from unstable).
# * Debian's orig tarball lacks xdp-tools' libbpf submodule, and Debian 12's
#   libbpf 1.1 is too old for it; Debian trixie's libbpf source package
#   (1.5.0) is put where the submodule goes and built with it
#   (FORCE_SUBDIR_LIBBPF=1), linked statically, as upstream builds it.
# * 1.6.3 builds with Debian 12's gcc 12 and clang 14 unchanged (it still
#   uses -std=gnu11; the gnu2x change the machine facts warn about is later),
#   so no patch is applied. The build checks this anyway: it fails loudly.
# * Only libxdp and the tools above are built; PREFIX is this folder, so
#   the binaries find their BPF objects and libxdp's dispatcher in
#   $PEERS/lib/bpf (xdp-forward embeds its objects as skeletons).
#
# Running them: xdp-filter keeps its maps pinned in bpffs between commands.
# Under `ip netns exec` /sys is private to each command, so the pins vanish;
# the lab therefore runs it, and xdp-forward alike, with only the network
# namespace switched.
set -euo pipefail

PEERS=${XNF_PEERS:-/opt/xnf/peers}
XDP_TOOLS=xdp-tools/unstable   # 1.6.3-1 when written
LIBBPF=libbpf/trixie           # 1.5.0-3 when written
SOURCES=/etc/apt/sources.list.d/xnf-deb-src.sources

say() { echo "peers.sh: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (it installs build dependencies with apt-get)"

# Installs the Debian packages named that are not installed yet.
install_missing() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# Katran's balancer from the checkout in $1, into $PEERS/katran.
build_katran() {
    local dir=$1 out="$PEERS/katran"
    local src="$dir/katran/lib/bpf/balancer.bpf.c"
    [ -f "$src" ] || die "--katran $dir: no katran/lib/bpf/balancer.bpf.c there (give the root of a Katran checkout)"
    install_missing clang llvm linux-libc-dev
    local flags=(-I"$dir" -I"$dir/katran/lib/linux_includes" -DDEBUG -D__KERNEL__
        -DIPIP_V4_PREFIX=4806 -DIPIP_V6_PREFIX1=0xb80d0120
        -Wno-unused-value -Wno-pointer-sign -Wno-compare-distinct-pointer-types -O2 -emit-llvm -c -g)
    mkdir -p "$out"
    say "building Katran's balancer from $dir"
    clang "${flags[@]}" "$src" -o "$out/balancer.ll" || die "clang failed on $src"
    llc -march=bpf -filetype=obj -o "$out/balancer.bpf.o" "$out/balancer.ll" || die "llc failed on $out/balancer.ll"
    rm -f "$out/balancer.ll"
    local commit
    commit=$(git -C "$dir" rev-parse HEAD 2>/dev/null || echo "unknown (not a git checkout)")
    printf 'commit %s\nflags %s\n' "$commit" "${flags[*]/#-I*/}" >"$out/BUILD"
    echo "katran: $out/balancer.bpf.o (commit $commit)"
}

rebuild=0
case "${1:-}" in
    --rebuild) rebuild=1 ;;
    --katran)
        [ -n "${2:-}" ] || die "--katran DIR: give the root of a Katran checkout"
        build_katran "$(realpath "$2")"
        exit 0 ;;
    "") ;;
    *) die "unknown argument $1 (usage: scripts/peers.sh [--rebuild | --katran DIR])" ;;
esac

TOOLS=(xdp-filter xdp-forward)

# What is left to build: every tool with --rebuild, else the missing ones.
todo=()
for t in "${TOOLS[@]}"; do
    if [ -x "$PEERS/sbin/$t" ] && [ "$rebuild" -eq 0 ]; then
        echo "$t: $PEERS/sbin/$t"
    else
        todo+=("$t")
    fi
done
[ "${#todo[@]}" -gt 0 ] || exit 0

# Build dependencies (Debian 12 names); apt-get skips what is installed.
# bpftool: xdp-forward embeds its BPF objects as skeletons (`bpftool gen
# skeleton`); without it configure only says so and make fails later.
install_missing clang llvm gcc make m4 pkg-config libelf-dev zlib1g-dev libpcap-dev dpkg-dev bpftool

# Source entries for trixie and unstable (deb-src only), once.
if ! [ -f "$SOURCES" ]; then
    say "adding $SOURCES (deb-src of bookworm, trixie, unstable)"
    cat >"$SOURCES" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm trixie unstable
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -qq
elif ! apt-cache showsrc "${XDP_TOOLS%/*}" 2>/dev/null | grep -q '^Version: 1\.6'; then
    apt-get update -qq
fi

src="$PEERS/src"
mkdir -p "$src"
cd "$src"
if [ "$rebuild" -eq 1 ]; then
    rm -rf xdp-tools-* libbpf-*
fi
if ! ls -d xdp-tools-*/ >/dev/null 2>&1; then
    say "fetching $XDP_TOOLS"
    apt-get source -qq "$XDP_TOOLS" >/dev/null 2>&1 || die "apt-get source $XDP_TOOLS failed: check the deb-src entry in $SOURCES and the network"
fi
if ! ls -d libbpf-*/ >/dev/null 2>&1; then
    say "fetching $LIBBPF"
    apt-get source -qq "$LIBBPF" >/dev/null 2>&1 || die "apt-get source $LIBBPF failed: check the deb-src entry in $SOURCES and the network"
fi
tools=$(ls -d "$src"/xdp-tools-*/ | head -n1)
libbpf=$(ls -d "$src"/libbpf-*/ | head -n1)

# libbpf where the submodule would be.
if ! [ -f "$tools/lib/libbpf/src/libbpf.c" ]; then
    mkdir -p "$tools/lib/libbpf"
    cp -a "$libbpf"/. "$tools/lib/libbpf/"
fi

cd "$tools"
export PREFIX="$PEERS" FORCE_SUBDIR_LIBBPF=1
# clang -target bpf does not search the multiarch include dir (asm/types.h).
export BPF_CFLAGS="-I/usr/include/$(gcc -print-multiarch)"
log="$PEERS/build.log"
# Every step checked by hand: set -e does not apply inside a function
# called on the left of ||.
build() {
    ./configure || return
    grep -q '^BPFTOOL:=.' config.mk || { echo "peers.sh: configure found no bpftool with skeleton support (install bpftool)"; return 1; }
    make -j"$(nproc)" -C lib || return
    for t in "${todo[@]}"; do make -j"$(nproc)" -C "$t" || return; done
    make -C lib/libxdp install || return
    for t in "${todo[@]}"; do make -C "$t" install || return; done
}
say "building libxdp and ${todo[*]} (log: $log)"
build >"$log" 2>&1 || die "build failed: see the end of $log"

for t in "${todo[@]}"; do
    [ -x "$PEERS/sbin/$t" ] || die "built, but $PEERS/sbin/$t is missing: see $log"
    echo "$t: $PEERS/sbin/$t"
done
