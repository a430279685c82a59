#!/usr/bin/env bash
# Installs the system packages xnf needs on Debian/Ubuntu (as root), and
# mounts bpffs. Quiet and quick when everything is already there.
set -euo pipefail

pkgs=(clang llvm libelf-dev zlib1g-dev pkg-config iproute2 ethtool make gcc linux-libc-dev chromium nftables iperf3 podman containernetworking-plugins runc busybox-static bird2)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "xnf: missing packages: ${missing[*]}; run as root (or apt-get install them)" >&2
    exit 1
  fi
  echo "xnf: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "xnf: cargo is in ~/.cargo/bin but not on PATH; the Makefile adds it" >&2
  else
    echo "xnf: no Rust toolchain: install it with rustup (https://rustup.rs), then rerun" >&2
    exit 1
  fi
fi

# bpffs: where xnf pins its links and maps so they outlive the process.
if [ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" != "bpf_fs" ]; then
  mkdir -p /sys/fs/bpf
  mount -t bpf bpf /sys/fs/bpf
  echo "xnf: mounted bpffs at /sys/fs/bpf"
fi
