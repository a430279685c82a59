#!/usr/bin/env bash
# make demo-containers: two network functions in real podman containers and
# a chain through them. Podman (CNI backend, a private storage and
# configuration root under a temporary folder) runs in the namespace
# xnfdemo-dut, between xnfdemo-gen and xnfdemo-sink; the containers join a
# network of the real `ptp` plugin with `xnf-cni` chained after it, so each
# becomes an NF; `xnf chain create` steers gen's UDP to sink through both
# containers' Linux stacks; iperf3 sends it; `xnf chain stats` shows the
# per-hop counts. Everything is removed on exit, Ctrl-C included.
set -euo pipefail

BIN=${BIN:-target/release}
XNF="$BIN/xnf"
[ -x "$XNF" ] && [ -x "$BIN/xnf-cni" ] || { echo "demo-containers: build first (make build)" >&2; exit 1; }
XNF=$(realpath "$XNF")
T=$(mktemp -d /tmp/xnf-demo-containers.XXXXXX)
export CONTAINERS_CONF=$T/containers.conf CONTAINERS_STORAGE_CONF=$T/storage.conf
pm() { nsenter --net=/run/netns/xnfdemo-dut podman "$@"; }
x() { "$XNF" --netns xnfdemo-dut "$@"; }

cleanup() {
  set +e
  pm rm --all --force --time 0 >/dev/null 2>&1
  x chain delete demo >/dev/null 2>&1
  for n in gen dut sink; do ip netns del xnfdemo-$n 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT INT TERM

echo "== topology: xnfdemo-gen -- xnfdemo-dut -- xnfdemo-sink (198.18.0.0/24, 198.18.1.0/24)"
for n in gen dut sink; do ip netns add xnfdemo-$n; done
ip -n xnfdemo-dut link add xnfd-gen type veth peer name xnfg0 netns xnfdemo-gen
ip -n xnfdemo-dut link add xnfd-sink type veth peer name xnfs0 netns xnfdemo-sink
ip -n xnfdemo-gen addr add 198.18.0.1/24 dev xnfg0; ip -n xnfdemo-gen link set xnfg0 up
ip -n xnfdemo-gen route add default via 198.18.0.2
ip -n xnfdemo-dut addr add 198.18.0.2/24 dev xnfd-gen; ip -n xnfdemo-dut link set xnfd-gen up
ip -n xnfdemo-dut addr add 198.18.1.1/24 dev xnfd-sink; ip -n xnfdemo-dut link set xnfd-sink up
ip -n xnfdemo-sink addr add 198.18.1.2/24 dev xnfs0; ip -n xnfdemo-sink link set xnfs0 up
ip -n xnfdemo-sink route add default via 198.18.1.1
ip netns exec xnfdemo-gen ethtool -K xnfg0 tx off >/dev/null
"$XNF" --netns xnfdemo-sink pass attach xnfs0 >/dev/null   # redirected frames need XDP on the receiving veth
ip netns exec xnfdemo-dut sysctl -qw net.ipv4.ip_forward=1

echo "== podman: private root in $T, CNI backend, network xnfdemo = ptp + xnf-cni"
mkdir -p "$T/bin" "$T/net.d" "$T/ipam" "$T/img/bin"
ln -s "$(realpath "$BIN/xnf-cni")" "$T/bin/xnf-cni"
nproc_max=$(ulimit -Hu); [ "$nproc_max" = unlimited ] || [ "$nproc_max" -gt 32768 ] && nproc_max=32768
cat > "$T/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=$nproc_max:$nproc_max"]
[network]
network_backend = "cni"
cni_plugin_dirs = ["$T/bin", "/usr/lib/cni"]
network_config_dir = "$T/net.d"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$T/events.log"
tmp_dir = "$T/tmp"
EOF
printf '[storage]\ndriver = "vfs"\ngraphroot = "%s/root"\nrunroot = "%s/runroot"\n' "$T" "$T" > "$T/storage.conf"
cat > "$T/net.d/xnfdemo.conflist" <<EOF
{ "cniVersion": "1.0.0", "name": "xnfdemo", "plugins": [
  { "type": "ptp", "ipMasq": false,
    "ipam": { "type": "host-local", "subnet": "198.18.64.0/24", "dataDir": "$T/ipam", "routes": [{ "dst": "0.0.0.0/0" }] } },
  { "type": "xnf-cni", "function": "pass", "forward": true } ] }
EOF
cp /bin/busybox "$T/img/bin/busybox"
for a in sh sleep ip cat; do ln -s busybox "$T/img/bin/$a"; done
tar -C "$T/img" -cf "$T/busybox.tar" .
pm import --quiet "$T/busybox.tar" localhost/xnf-busybox >/dev/null

echo "== two NF containers: xnf-fw and xnf-ids"
for c in xnf-fw xnf-ids; do pm run -d --name $c --network xnfdemo localhost/xnf-busybox sleep 3600 >/dev/null; done
x chain create demo --ingress xnfd-gen --egress xnfd-sink --match dst=198.18.1.2/32,proto=udp --nf xnf-fw --nf xnf-ids
x chain list

echo "== traffic: iperf3 UDP gen -> sink, 5 s at 200 Mbit/s"
ip netns exec xnfdemo-sink iperf3 -s -1 -D -B 198.18.1.2 >/dev/null
sleep 0.5
ip netns exec xnfdemo-gen iperf3 -u -c 198.18.1.2 -b 200M -t 5 -l 1200 | tail -4
echo "== per-hop counts"
x chain stats
