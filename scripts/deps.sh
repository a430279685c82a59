#!/usr/bin/env bash
# Installs the Debian packages one `make` target needs (as root), and mounts
# bpffs. Quiet and quick when everything is already there. Each target
# installs only its own packages: a new user's `make demo` does not wait
# for a browser or a container runtime it never starts.
#
#   scripts/deps.sh build        compile xnf (clang for the BPF objects, libelf)
#   scripts/deps.sh demo         build + what `make demo`'s lab run uses
#   scripts/deps.sh containers   demo + podman and the CNI plugins
#   scripts/deps.sh test         everything a test of `make test` uses
#
# The peer tools (xdp-filter, xdp-forward) are built by scripts/peers.sh
# and the guest kernels set up by scripts/kernels.sh setup, each with its
# own packages; `make test` runs both.
set -euo pipefail

build=(clang llvm libelf-dev zlib1g-dev pkg-config make gcc linux-libc-dev)
# The lab's topology and the router's attach: ip (iproute2), and ethtool
# for the veths' offloads (machine facts: checksums, GRO).
demo=("${build[@]}" iproute2 ethtool)
# podman with its CNI backend, runc, the real ptp/bridge plugins, and
# busybox-static as a container image that needs no registry.
containers=("${demo[@]}" podman containernetworking-plugins runc busybox-static)
# Everything else a test runs: nftables (filter, lb and lab variants),
# iperf3 (lab stack), BIRD 2 (lab bgp), chromium (report screenshots).
test=("${containers[@]}" nftables iperf3 bird2 chromium
	# The packaging tests: systemd-analyze verify of the unit (systemd), man
	# in the package's throwaway root (man-db), the DaemonSet checked against
	# the Kubernetes API's models (python3-kubernetes, python3-yaml).
	systemd man-db python3-kubernetes python3-yaml
	# promtool, which judges xnf daemon's /metrics (in prometheus).
	prometheus
	# The lab across hosts: ssh, and sshd in the namespaces that stand in
	# for the hosts (Debian also starts its own sshd where systemd runs).
	openssh-client openssh-server)

group=${1:-}
case $group in
build) pkgs=("${build[@]}") lean=1 ;;
demo) pkgs=("${demo[@]}") lean=1 ;;
containers) pkgs=("${containers[@]}") lean=0 ;;
test) pkgs=("${test[@]}") lean=0 ;;
*)
	echo "usage: scripts/deps.sh build|demo|containers|test" >&2
	exit 2
	;;
esac

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "xnf: missing packages: ${missing[*]}; run as root (or apt-get install them)" >&2
		exit 1
	fi
	echo "xnf: installing for $group: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# The build and the demo need no package's recommendations (clang's
	# would bring a Python and a debugger); podman's are part of it working.
	flags=(-y -qq)
	[ "$lean" = 1 ] && flags+=(--no-install-recommends)
	apt-get install "${flags[@]}" "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
	if [ -x "$HOME/.cargo/bin/cargo" ]; then
		echo "xnf: cargo is in ~/.cargo/bin but not on PATH; the Makefile adds it" >&2
	else
		echo "xnf: no Rust toolchain: install it with rustup (https://rustup.rs), then rerun" >&2
		exit 1
	fi
fi

# The tests check the tree's formatting: rustfmt, a rustup component the
# default profile has and the minimal one does not.
if [ "$group" = test ] && ! cargo fmt --version >/dev/null 2>&1; then
	echo "xnf: adding rustfmt to the Rust toolchain (make test checks the formatting)"
	rustup component add rustfmt
fi

# bpffs: where xnf pins its links and maps so they outlive the process.
if [ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" != "bpf_fs" ]; then
	mkdir -p /sys/fs/bpf
	mount -t bpf bpf /sys/fs/bpf
	echo "xnf: mounted bpffs at /sys/fs/bpf"
fi
