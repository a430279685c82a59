//! Reaching into an NF's network namespace: finding it (by name, path or
//! container), running code there, and preparing the NF's end of the veth.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{bail, ensure, Context, Result};

use crate::model::NfSpec;
use xnf_netns::netlink;

/// The namespace file of an NF spec: `/run/netns/NAME`, a path, or the
/// network namespace of a running Docker/Podman container.
pub fn resolve(spec: &NfSpec) -> Result<PathBuf> {
    match (&spec.netns, &spec.container) {
        (Some(_), Some(_)) => bail!("NF {}: give --netns or --container, not both", spec.name),
        (None, None) => bail!("NF {}: say where it lives: --netns NAME|PATH or --container NAME", spec.name),
        (Some(ns), None) => {
            let path = if ns.contains('/') { PathBuf::from(ns) } else { PathBuf::from("/run/netns").join(ns) };
            ensure!(reachable(&path).exists(), "NF {}: network namespace {ns:?} not found ({} does not exist; see `ip netns`)", spec.name, path.display());
            Ok(path)
        }
        (None, Some(c)) => container_netns(&spec.name, c),
    }
}

/// `/proc/PID/ns/net` of a running container, asking docker, then podman.
fn container_netns(nf: &str, container: &str) -> Result<PathBuf> {
    let mut tried = Vec::new();
    for engine in ["docker", "podman"] {
        let out = match Command::new(engine).args(["inspect", "--format", "{{.State.Pid}}", container]).output() {
            Ok(o) => o,
            Err(_) => continue, // not installed
        };
        tried.push(engine);
        if !out.status.success() {
            continue;
        }
        let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
        ensure!(pid != 0, "NF {nf}: container {container:?} is not running ({engine} reports no PID)");
        return Ok(PathBuf::from(format!("/proc/{pid}/ns/net")));
    }
    if tried.is_empty() {
        bail!("NF {nf}: --container needs docker or podman, and neither is installed; give the namespace with --netns /proc/PID/ns/net");
    }
    bail!("NF {nf}: no running container named {container:?} ({} know none)", tried.join(" and "))
}

/// A namespace path that means something else in this process's mount
/// namespace than where it was given, and the path that reaches it here.
static ALIAS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();

/// Keeps `path` (a network namespace file as a container runtime named it,
/// opened as `file` before this process changed its mount namespace)
/// reachable after the change. Why: a runtime in a mount namespace of its
/// own (`ip netns exec`, a sandboxed kubelet) bind-mounts the pod's
/// namespace at a path that in the host's mount namespace, which xnf-cni
/// joins to reach bpffs, is an empty file (setns: EINVAL) or missing. The
/// registry keeps the runtime's path; this process reaches the namespace
/// through the open descriptor, kept for the process's life.
pub fn keep_reachable(path: &Path, file: std::fs::File) {
    use std::os::fd::IntoRawFd;
    let same = std::fs::metadata(path).is_ok_and(|m| file.metadata().is_ok_and(|f| (f.dev(), f.ino()) == (m.dev(), m.ino())));
    if !same {
        let via = PathBuf::from(format!("/proc/self/fd/{}", file.into_raw_fd()));
        let _ = ALIAS.set((path.to_path_buf(), via));
    }
}

/// The path through which this process reaches the namespace file `path`.
pub fn reachable(path: &Path) -> &Path {
    match ALIAS.get() {
        Some((given, via)) if given == path => via,
        _ => path,
    }
}

/// Inode of a namespace file: identifies the namespace itself.
pub fn inode(path: &std::path::Path) -> Result<u64> {
    Ok(std::fs::metadata(reachable(path)).with_context(|| format!("reading {}", path.display()))?.ino())
}

/// Inode of the network namespace this process is in.
pub fn own_inode() -> Result<u64> {
    inode(std::path::Path::new("/proc/thread-self/ns/net"))
}

/// Runs `f` in the network namespace at `path` (see [`xnf_netns::run_in`]).
pub fn run_in<T: Send>(path: &std::path::Path, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    xnf_netns::run_in(reachable(path), f)?
}

/// Turns off TX checksum offload and TX VLAN offload on `ifname` (in this
/// thread's namespace). With them on, a veth hands XDP frames whose
/// checksums are still to be filled in and whose VLAN tag sits outside the
/// frame; redirected onwards, those would leave with bad checksums and
/// without their tag (the container-NF thesis §4.1.4 does the same with ethtool).
pub use xnf_netns::ethtool::offloads_off;

/// Writes a sysctl of this thread's network namespace (`net/...` path).
pub fn sysctl(key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{key}");
    std::fs::write(&path, value).with_context(|| format!("setting {key} = {value}"))
}

/// The gateway an NF's Linux stack routes through with `forward`: an
/// on-link label whose neighbour entry is the host end's MAC. No packet
/// ever carries it, and the host needs no address of its own.
pub const GATEWAY_V4: &str = "169.254.0.1";
pub const GATEWAY_V6: &str = "fe80::1";

/// Makes the NF's Linux stack forward: forwarding on, reverse-path filter
/// off on its port, default routes back through the host end.
fn forward_back(ifname: &str, host_mac: [u8; 6]) -> Result<()> {
    sysctl("net/ipv4/ip_forward", "1")?;
    sysctl("net/ipv6/conf/all/forwarding", "1")?;
    sysctl("net/ipv4/conf/all/rp_filter", "0")?;
    sysctl(&format!("net/ipv4/conf/{ifname}/rp_filter"), "0")?;
    // The NF forwards out of the interface a packet came in by. With ICMP
    // redirects on there, the kernel's source check leaves its fast path
    // to find out whether to send one: a reverse FIB lookup per packet
    // (5–8 ns per NF and packet in `xnf lab chain`). On when `all` or the
    // device says so: both off.
    sysctl("net/ipv4/conf/all/send_redirects", "0")?;
    sysctl(&format!("net/ipv4/conf/{ifname}/send_redirects"), "0")?;
    let mac = host_mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
    for args in [
        vec!["neigh", "replace", GATEWAY_V4, "lladdr", &mac, "nud", "permanent", "dev", ifname],
        // A host route to the label first: in a namespace without any
        // address the main table does not exist and an onlink gateway is refused.
        vec!["route", "replace", GATEWAY_V4, "dev", ifname, "scope", "link"],
        vec!["route", "replace", "default", "via", GATEWAY_V4, "dev", ifname],
        vec!["-6", "neigh", "replace", GATEWAY_V6, "lladdr", &mac, "nud", "permanent", "dev", ifname],
        vec!["-6", "route", "replace", "default", "via", GATEWAY_V6, "dev", ifname],
    ] {
        let out = Command::new("ip").args(&args).output().context("running ip (iproute2 is needed for --forward)")?;
        ensure!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The XPS mask of TX queue `q` of `queues` on a machine of `ncpu` CPUs:
/// CPU c transmits on queue c mod queues. In sysfs's format: hex words of
/// 32 CPUs, most significant first, comma separated.
pub fn xps_mask(q: usize, queues: usize, ncpu: usize) -> String {
    let mut words = vec![0u32; ncpu.div_ceil(32).max(1)];
    for c in (0..ncpu).filter(|c| c % queues == q) {
        words[c / 32] |= 1 << (c % 32);
    }
    words.iter().rev().map(|w| format!("{w:x}")).collect::<Vec<_>>().join(",")
}

/// Makes `ifname` (in this thread's network namespace) transmit on the TX
/// queue of the CPU it runs on (XPS). Why: a veth hands what its kernel
/// transmits to the peer's RX queue of the same number, and the peer's
/// NAPI for that queue runs where it was first scheduled. Without XPS the
/// kernel picks the queue by flow hash, so one flow from two CPUs lands on
/// one peer queue whose 256-frame ring one CPU drains while the other
/// overruns it (measured: 34-72 % lost inside a Linux-stack NF at 2
/// queues). With it, a frame stays on the CPU and queue it came in on.
///
/// XPS is only settable in sysfs, and sysfs shows the namespace of whoever
/// mounted it: the thread takes a private mount namespace and mounts a
/// sysfs of its own network namespace there (the thread is thrown away).
pub fn xps_per_cpu(ifname: &str) -> Result<()> {
    use nix::mount::{mount, MsFlags};
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).context("a private mount namespace for sysfs (XPS)")?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>).context("making / private (XPS)")?;
    mount(Some("sysfs"), "/sys", Some("sysfs"), MsFlags::empty(), None::<&str>).context("mounting sysfs of the NF's namespace (XPS)")?;
    let dir = format!("/sys/class/net/{ifname}/queues");
    let queues =
        std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))?.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("tx-")).count();
    if queues <= 1 {
        return Ok(());
    }
    for q in 0..queues {
        let f = format!("{dir}/tx-{q}/xps_cpus");
        std::fs::write(&f, xps_mask(q, queues, ncpu)).with_context(|| format!("writing {f}"))?;
    }
    Ok(())
}

/// Prepares the NF's end (in its namespace): up, offloads off, transmit
/// queue by CPU (XPS, when `xps`: a veth xnf made has it already), and
/// with `forward` the routes back. Returns its (ifindex, MAC).
pub fn prepare_nf_end(path: &std::path::Path, ifname: &str, forward: bool, host_mac: [u8; 6], xps: bool) -> Result<(u32, [u8; 6])> {
    let ifname = ifname.to_string();
    run_in(path, move || {
        let link = netlink::link_by_name(&ifname)?;
        let mac = link.mac.with_context(|| format!("{ifname} has no MAC address: it is not an Ethernet veth"))?;
        netlink::set_up(link.ifindex, &ifname)?;
        offloads_off(&ifname)?;
        if xps {
            xps_per_cpu(&ifname)?;
        }
        if forward {
            forward_back(&ifname, host_mac)?;
        }
        Ok((link.ifindex, mac))
    })
}

/// The NF's end as it is now: (ifindex, MAC, peer ifindex in the host, XDP program id).
pub type NfEndInfo = (u32, [u8; 6], Option<u32>, Option<u32>);

pub fn nf_end(path: &std::path::Path, ifname: &str) -> Result<NfEndInfo> {
    let ifname = ifname.to_string();
    run_in(path, move || {
        let l = netlink::link_by_name(&ifname)?;
        ensure!(l.is_veth(), "{ifname} is not a veth: xnf joins NFs to the host with veth pairs");
        Ok((l.ifindex, l.mac.unwrap_or_default(), l.parent, l.xdp_prog_id))
    })
}

#[cfg(test)]
mod tests {
    use super::xps_mask;

    #[test]
    fn xps_masks_map_each_cpu_to_one_queue() {
        assert_eq!(xps_mask(0, 2, 2), "1");
        assert_eq!(xps_mask(1, 2, 2), "2");
        assert_eq!(xps_mask(0, 2, 4), "5");
        assert_eq!(xps_mask(1, 3, 4), "2");
        assert_eq!(xps_mask(0, 1, 40), "ff,ffffffff");
        assert_eq!(xps_mask(33, 34, 40), "2,0");
    }
}
