#!/usr/bin/env bash
# The kernel matrix: runs xnf's test binaries inside Debian kernels booted
# under qemu, sharing this machine's root filesystem (virtme-ng).
#
#   scripts/kernels.sh setup          install qemu, virtme-ng and the kernels
#   scripts/kernels.sh list           the kernels the matrix runs
#   scripts/kernels.sh test [KERNEL] [BINARY...]
#                                     every test binary (or those named, e.g.
#                                     router-netns, router-vlan) in every
#                                     kernel (or KERNEL, e.g. 6.1)
#   scripts/kernels.sh lab KERNEL EXPERIMENT [OPTION...]
#                                     `xnf lab EXPERIMENT OPTION...` in
#                                     KERNEL's guest, e.g. lab 6.1 router
#                                     --vlan none,in,out,both (what needs
#                                     802.1Q); emulated: compare within the
#                                     run, never with the host
#
# Why software emulation: nested KVM does not boot a Debian kernel on the
# machines this project runs on (see the README's kernel section); TCG does,
# at roughly a tenth of the speed, which is fine for correctness and not
# for performance: emulation slows paths by different factors (the
# kernel's forwarding 2.5 times more than XDP's), so the lab stays on the
# host but for what only a guest's kernel has, compared within its run.
#
# The kernels are Debian's generic `linux-image-*-amd64-unsigned` (the
# `cloud` flavour lacks 9p, which the guest's root filesystem needs):
# the newest 6.1 (the oldest kernel xnf claims), and the newest kernel the
# package sources offer if that is another series. Each is unpacked under
# /opt/xnf/kernels/SERIES, not installed: the host's /boot, initramfs and
# module tree stay as they are, and virtme-ng finds the modules beside the
# image.
#
# Environment:
#   XNF_GUEST_FUZZ_FRAMES  frames per fuzzer in a guest (default 25000)
#   XNF_GUEST_MEMORY       guest memory (default 2G)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
opt=/opt/xnf
venv=$opt/venv
kdir=$opt/kernels
vng_version=1.42

die() { echo "xnf kernels: $*" >&2; exit 1; }

# --- setup -----------------------------------------------------------------

install_packages() {
	# qemu runs the guest; busybox-static builds virtme-ng's initramfs; kmod
	# loads the guest's modules (8021q, ip_vs, ipip) from the shared root.
	local pkgs=(qemu-system-x86 busybox-static kmod file python3-venv) missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return
	[ "$(id -u)" = 0 ] || die "missing packages: ${missing[*]}; run as root"
	echo "xnf kernels: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_vng() {
	[ -x "$venv/bin/vng" ] && "$venv/bin/vng" --version 2>/dev/null | grep -q "$vng_version" && return
	echo "xnf kernels: installing virtme-ng $vng_version in $venv"
	python3 -m venv "$venv" || die "python3 -m venv failed: apt-get install python3-venv"
	"$venv/bin/pip" install -q "virtme-ng==$vng_version" || die "pip could not install virtme-ng $vng_version"
}

# The newest generic amd64 image package of a series ("6.1") or of any series ("").
newest_package() {
	apt-cache search --names-only "^linux-image-${1}[0-9.]*-[0-9]+-amd64-unsigned$" 2>/dev/null |
		awk '{print $1}' | sort -V | tail -1
}

# Series of a package name: linux-image-6.1.0-50-amd64-unsigned -> 6.1
series_of() { sed -E 's/^linux-image-([0-9]+\.[0-9]+).*/\1/' <<<"$1"; }

install_kernel() {
	local pkg=$1 series ver dir
	series=$(series_of "$pkg")
	ver=$(sed -E 's/^linux-image-(.*)-unsigned$/\1/' <<<"$pkg")
	dir=$kdir/$series
	[ -f "$dir/boot/vmlinuz-$ver" ] && [ -f "$dir/lib/modules/$ver/modules.dep" ] && return
	echo "xnf kernels: fetching $pkg into $dir"
	local tmp
	tmp=$(mktemp -d)
	(cd "$tmp" && apt-get download -qq "$pkg" >/dev/null 2>&1) || { rm -rf "$tmp"; die "apt-get download $pkg failed"; }
	rm -rf "$dir"
	mkdir -p "$dir"
	dpkg-deb -x "$tmp"/*.deb "$dir"
	rm -rf "$tmp"
	depmod -b "$dir" "$ver"
}

setup() {
	install_packages
	install_vng
	local pkgs=() p newest
	p=$(newest_package "6.1.")
	[ -n "$p" ] || { apt-get update -qq; p=$(newest_package "6.1."); }
	[ -n "$p" ] || die "no linux-image-6.1.*-amd64-unsigned in the package sources (Debian 12 has it)"
	pkgs+=("$p")
	newest=$(newest_package "")
	if [ -n "$newest" ] && [ "$(series_of "$newest")" != "6.1" ]; then pkgs+=("$newest"); fi
	for p in "${pkgs[@]}"; do install_kernel "$p"; done
}

kernels() {
	local d
	for d in "$kdir"/*/boot/vmlinuz-*; do
		[ -e "$d" ] || continue
		d=${d#"$kdir"/}
		echo "${d%%/*}"
	done | sort -V
}

image_of() { ls "$kdir/$1"/boot/vmlinuz-* 2>/dev/null | head -1 || true; }

# --- test ------------------------------------------------------------------

# Test binaries of the workspace: "name<TAB>executable<TAB>package dir".
# The name is the crate's name for unit tests and package-target for
# integration tests (router-netns, lab-fuzz_gen, ...).
test_binaries() {
	cd "$root"
	{
		cargo test --workspace --no-run --message-format=json 2>/dev/null
		local t
		for t in "${guest_only[@]}"; do
			cargo test -p "${t% *}" --test "${t#* }" --no-run --message-format=json 2>/dev/null
		done
	} | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    t = m["target"]
    pkg = os.path.dirname(m["manifest_path"])
    short = os.path.basename(pkg)
    name = short if t["kind"] == ["lib"] else short + "-" + t["name"]
    print(name, m["executable"], pkg, sep="\t")
' | sort -u
}

# Test targets with `test = false` that need what only the guests' kernels
# have (package and target): built and run here only.
guest_only=("xnf-router vlan")

# Binaries the guests leave to the host, each with why.
skip_reason() {
	case $1 in
	lab-report_render | profile-flame_render) echo "renders HTML/SVG in Chromium: no kernel code" ;;
	# The one lab run that needs the guest: the only kernel here with
	# 802.1Q; it asserts what arrived, never a rate (emulated timing).
	lab-lab_router_vlan) return 1 ;;
	lab-lab_*) echo "runs lab experiments, which measure and stay on the host (the lab's BPF programs are tested in the guest by lab, lab-packets and lab-fuzz_*)" ;;
	# Kept under CI's 40 minutes: software emulation runs these at a tenth
	# of the host's speed, and what they test of the kernel is tested in
	# the guest by other binaries.
	chain-cni) echo "the CNI protocol (user space); the chain's data path is tested in the guest by chain-netns, chain-packets and chain-fuzz" ;;
	chain-podman) echo "a real container runtime (podman, runc, CNI plugins) needs the host's cgroups and storage; what it drives in the kernel is tested in the guest by chain-netns and chain-packets" ;;
	lb-netns) echo "5 min under emulation; the lb's BPF is tested in the guest by lb-packets, lb-fuzz, lb-decap and lb-decap_netns, veth XDP by every other *-netns" ;;
	# About 4 min each under emulation (248 and 251 s); both passed there
	# (scripts/kernels.sh test 6.1 chain-netns filter-netns, 2026-11-28).
	chain-netns) echo "4 min under emulation; the chain's BPF is tested in the guest by chain-packets and chain-fuzz, veth XDP and redirects by router-netns and afxdp-netns" ;;
	filter-netns) echo "4 min under emulation; the filter's BPF is tested in the guest by filter, filter-packets and filter-fuzz, veth XDP by router-netns and afxdp-netns" ;;
	netns) echo "the topology library's own tests; every *-netns binary in the guest builds its topologies with it" ;;
	xnf-deb | xnf-deploy) echo "the Debian package, the unit and the manifests (dpkg in a throwaway root, schemas): no kernel code" ;;
	xnf-docs | xnf-lab) echo "man pages, completions and how xnf runs xnf-lab: no kernel code" ;;
	testrun-layout) echo "the source tree's import graph: no kernel code" ;;
	# 5 min together under emulation: the box's file and the daemon drive
	# the functions through their public API; what each does in the kernel
	# is tested in the guest by its own *-netns, *-packets and *-fuzz (both
	# pass there: scripts/kernels.sh test 6.1 config-netns daemon-netns).
	config-netns | daemon-netns) echo "the box's apply and the daemon over the functions' API; each function's kernel side is tested in the guest by its own binaries" ;;
	# 329 s under emulation; passes there (scripts/kernels.sh test 6.1
	# config-upgrade, 2026-11-27): renameat2 RENAME_EXCHANGE on bpffs,
	# BPF_LINK_UPDATE and the stage swaps on Linux 6.1.
	config-upgrade) echo "upgrades through the functions' API; its kernel side (bpffs RENAME_EXCHANGE, link and stage updates) passed in the 6.1 guest when written, and each function's in its own binaries" ;;
	*) return 1 ;;
	esac
}

# The guest's first lines: bpffs and tracefs, which virtme-ng leaves out.
guest_mounts() {
	cat <<'EOF'
[ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" = bpf_fs ] || mount -t bpf bpf /sys/fs/bpf
[ "$(stat -f -c %T /sys/kernel/tracing 2>/dev/null)" = tracefs ] || mount -t tracefs nodev /sys/kernel/tracing
EOF
}

# Writes the script the guest runs: every binary in its package's folder
# (as cargo runs it), its output and time into the log, and a summary.
guest_script() {
	local series=$1 out=$2 list=$3
	cat <<EOF
#!/bin/bash
set -u
exec >"$out/test.log" 2>&1
kernel=\$(uname -r)
echo "xnf kernels: Linux \$kernel (guest $series), \$(nproc) CPUs"
$(guest_mounts)
export XNF_FUZZ_FRAMES=\${XNF_FUZZ_FRAMES:-${XNF_GUEST_FUZZ_FRAMES:-25000}}
export XNF_GUEST=$series
limit=${XNF_GUEST_TIMEOUT:-600}
failed=()
total=0
start=\$(date +%s)
while IFS=\$'\t' read -r name exe pkg; do
	total=\$((total + 1))
	echo "=== \$name (Linux \$kernel)"
	t0=\$(date +%s)
	if (cd "\$pkg" && CARGO_MANIFEST_DIR="\$pkg" timeout -k 10 \$limit "\$exe" --test-threads=2); then
		echo "=== \$name passed in \$((\$(date +%s) - t0)) s"
	else
		echo "=== \$name FAILED on Linux \$kernel in \$((\$(date +%s) - t0)) s"
		failed+=("\$name")
	fi
done <"$list"
echo "xnf kernels: Linux \$kernel: \$((total - \${#failed[@]}))/\$total test binaries passed in \$((\$(date +%s) - start)) s"
if [ \${#failed[@]} -gt 0 ]; then
	echo "xnf kernels: FAILED on Linux \$kernel: \${failed[*]}"
	echo 1 >"$out/rc"
else
	echo 0 >"$out/rc"
fi
EOF
}

run_kernel() {
	local series=$1 list=$2 img out
	img=$(image_of "$series")
	[ -n "$img" ] || die "kernel $series is not set up: run scripts/kernels.sh setup"
	out=$root/target/kernels/$series
	rm -rf "$out"
	mkdir -p "$out"
	cp "$list" "$out/binaries"
	guest_script "$series" "$out" "$out/binaries" >"$out/run.sh"
	chmod +x "$out/run.sh"
	boot "$img" "$out" || return 1
	[ "$(cat "$out/rc")" = 0 ]
}

# Boots IMG running OUT/run.sh, which writes its log to OUT/test.log
# (streamed here as it grows) and its status to OUT/rc; fails when the
# guest ends without a status.
boot() {
	local img=$1 out=$2 tailer
	: >"$out/test.log"
	echo "xnf kernels: booting $(basename "$img") under qemu (software emulation)"
	tail -n +1 -f "$out/test.log" &
	tailer=$!
	# --verbose puts the guest console on our stdout; the script's own
	# output goes to test.log (streamed above), the console to console.log.
	# The checkout is shared read-only except target/, where the guest
	# writes its log and result.
	PATH=$venv/bin:$PATH vng --run "$img" --disable-kvm --cpus 2 --memory "${XNF_GUEST_MEMORY:-2G}" \
		--rwdir "$root/target" --cwd "$root" --verbose --append "loglevel=4" \
		--exec "$out/run.sh" >"$out/console.log" 2>&1 || true
	sleep 0.2
	kill "$tailer" 2>/dev/null || true
	wait "$tailer" 2>/dev/null || true
	if [ ! -f "$out/rc" ]; then
		echo "xnf kernels: the guest of $(basename "$img") ended without a result; its console:" >&2
		tail -40 "$out/console.log" >&2
		return 1
	fi
}

# --- lab -------------------------------------------------------------------

# `xnf lab ARGS...` in SERIES's guest, for what only the guests' kernels
# have (802.1Q for --vlan). Software emulation runs every path at a small
# fraction of its speed, and not the same fraction (the lab's results say
# so in a note): the numbers compare points and variants of the one run.
lab_kernel() {
	local series=${1:-} img out a file prev=
	[ -n "$series" ] && [ $# -ge 2 ] || die "usage: scripts/kernels.sh lab KERNEL EXPERIMENT [OPTION...], e.g. lab 6.1 router --vlan none,in,out,both"
	shift
	[ -x "$venv/bin/vng" ] || die "virtme-ng is not set up: run scripts/kernels.sh setup"
	img=$(image_of "$series")
	[ -n "$img" ] || die "kernel $series is not set up: run scripts/kernels.sh setup (set up here: $(kernels | xargs))"
	cd "$root"
	# The guest writes only under target/: a result file elsewhere would
	# vanish with it.
	for a in "$@"; do
		case $prev:$a in
		--json:* | --csv:*) file=$a ;;
		*:--json=* | *:--csv=*) file=${a#*=} ;;
		*) file= ;;
		esac
		case ${file:+$(realpath -m "$file")} in
		"" | "$root"/target/*) ;;
		*) die "$file: the guest writes only under $root/target; put the --json or --csv file there" ;;
		esac
		prev=$a
	done
	cargo build --release -q -p xnf -p xnf-lab
	out=$root/target/kernels/$series-lab
	rm -rf "$out"
	mkdir -p "$out"
	{
		echo '#!/bin/bash'
		printf 'exec >%q 2>&1\n' "$out/test.log"
		guest_mounts
		printf 'cd %q\n' "$root"
		printf '%q ' "$root/target/release/xnf" lab "$@"
		printf '\necho $? >%q\n' "$out/rc"
	} >"$out/run.sh"
	chmod +x "$out/run.sh"
	boot "$img" "$out" || return 1
	return "$(cat "$out/rc")"
}

test_kernels() {
	local want=${1:-} names=("${@:2}") status=0
	[ -x "$venv/bin/vng" ] || die "virtme-ng is not set up: run scripts/kernels.sh setup"
	list=$(mktemp)
	trap 'rm -f "$list"' EXIT
	cd "$root"
	cargo build --workspace --all-targets -q
	while IFS=$'\t' read -r name exe pkg; do
		if [ ${#names[@]} -gt 0 ]; then
			printf '%s\n' "${names[@]}" | grep -qx "$name" || continue
		elif why=$(skip_reason "$name"); then
			echo "xnf kernels: $name runs on the host only: $why" >&2
			continue
		fi
		printf '%s\t%s\t%s\n' "$name" "$exe" "$pkg"
	done < <(test_binaries) >"$list"
	[ -s "$list" ] || die "no test binary matches ${names[*]}"
	local ks
	ks=$(kernels)
	[ -n "$ks" ] || die "no kernel is set up: run scripts/kernels.sh setup"
	for k in $ks; do
		[ -z "$want" ] || [ "$want" = all ] || [ "$want" = "$k" ] || continue
		run_kernel "$k" "$list" || status=1
	done
	return $status
}

case ${1:-} in
setup) setup ;;
list) kernels ;;
test) shift; test_kernels "$@" ;;
lab) shift; lab_kernel "$@" ;;
*) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
