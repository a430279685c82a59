//! xdp-tools' xdp-filter as the lab drives it: loaded on dut's ingress,
//! told what to drop, its drops read back, unloaded when dropped.
//!
//! Its commands run with only the network namespace switched
//! ([`peers::run_in_net`]): it keeps its maps pinned in bpffs between
//! commands, and under `ip netns exec` they would vanish.
//!
//! **Many entries.** `xdp-filter ip ADDR` and `xdp-filter port P` add one
//! entry per command (a process, a lock, a lookup and an update each):
//! thousands of addresses would take minutes. So the lab adds the first
//! entry with xdp-filter's own command, reads back what it wrote to check
//! that the layout below is the one this build of xdp-filter uses, and
//! writes the rest into the same pinned map in batches
//! (`BPF_MAP_UPDATE_BATCH`), holding the lock xdp-filter's commands take.
//! The maps stay xdp-filter's, as its source (xdp-tools 1.6.3) defines them:
//!
//! - `xdp-filter/common_kern_user.h`: the maps `filter_ports`,
//!   `filter_ipv4`; a value's low bits are flags (`MAP_FLAG_SRC` 1,
//!   `MAP_FLAG_DST` 2, `MAP_FLAG_TCP` 4, `MAP_FLAG_UDP` 8), above
//!   `COUNTER_SHIFT` (6) the entry's hit counter;
//! - `xdp-filter/xdpfilt_prog.h`: `filter_ports` a `PERCPU_ARRAY` of 65536
//!   `__u64` keyed by the port as the packet holds it (network order) in a
//!   `__u32`; `filter_ipv4` a `PERCPU_HASH` of at most 10000 `__u64` keyed
//!   by the address in network order (`__u32`); the program drops when
//!   `(value & mask) == mask` (`CHECK_MAP`);
//! - `xdp-filter/xdp-filter.c`: `map_set_flags` writes the same value,
//!   flags with the counter kept, to every possible CPU; `do_port` keys by
//!   `htons(port)`; `prog_lock_acquire` (lib/util/util.c) is a `flock` on
//!   the pin folder, bpffs + `/xdp-filter` (`get_bpf_root_dir`).

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use xnf_netns::Netns;

use crate::engine::peers;

/// Entries of xdp-filter's `filter_ipv4` (`max_entries` in xdpfilt_prog.h):
/// the most addresses it can drop by.
pub const IPV4_ENTRIES: u64 = 10_000;

/// Flags of a map value (common_kern_user.h).
const MAP_FLAG_SRC: u64 = 1 << 0;
const MAP_FLAG_DST: u64 = 1 << 1;
const MAP_FLAG_UDP: u64 = 1 << 3;

/// Entries written per `BPF_MAP_UPDATE_BATCH`.
const BATCH: usize = 8192;

/// Held by the lab run whose xdp-filter is loaded. xdp-filter keeps one pin
/// folder per host, its programs keyed by interface name alone, so every
/// namespace's `xnfin` is one to it: two lab runs at once (two experiments,
/// or tests) would unload or overwrite each other's. One at a time.
const LAB_LOCK: &str = "/run/xnf-lab-xdp-filter.lock";

/// xdp-filter's binary ([`peers::binary`]).
pub fn binary(given: Option<&Path>) -> Result<PathBuf> {
    peers::binary("xdp-filter", "--xdp-filter", given)
}

/// Runs xdp-filter in `ns`, failing with the last line it wrote to stderr.
fn run(bin: &Path, ns: &Netns, args: &[&str]) -> Result<()> {
    let out = peers::run_in_net(&ns.path(), bin, args)?;
    if !out.status.success() {
        bail!("xdp-filter {}: {}", args.join(" "), peers::last_line(&out.stderr));
    }
    Ok(())
}

/// xdp-filter's pin folder: bpffs (as `bpf_get_work_dir` in
/// lib/util/util.c finds it: /sys/fs/bpf, where xnf keeps bpffs too) and
/// `xdp-filter`. The lab runs in the host's mount namespace, as xdp-filter
/// does under `nsenter --net`.
fn pin_folder() -> PathBuf {
    Path::new("/sys/fs/bpf").join("xdp-filter")
}

/// xdp-filter loaded on one interface; dropping it unloads it.
pub struct XdpFilter<'a> {
    bin: PathBuf,
    ns: &'a Netns,
    dev: String,
    /// Its per-action counters (`xdp_stats_map`), which `xdp-filter
    /// status` prints.
    stats: Option<MapHandle>,
    /// [`LAB_LOCK`], released after the unload.
    _lock: File,
}

/// Takes [`LAB_LOCK`], waiting (and saying so) while another run holds it.
fn lab_lock() -> Result<File> {
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(LAB_LOCK).with_context(|| format!("opening {LAB_LOCK}"))?;
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        eprintln!("xnf lab: waiting for another xnf lab run to unload xdp-filter (one pin folder per host: one run at a time)");
        // SAFETY: as above.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        ensure!(rc == 0, "locking {LAB_LOCK}: {}", std::io::Error::last_os_error());
    }
    Ok(f)
}

impl<'a> XdpFilter<'a> {
    /// `xdp-filter load DEV --mode native --features FEATURES` in `ns`.
    pub fn load(bin: PathBuf, ns: &'a Netns, dev: &str, features: &str) -> Result<XdpFilter<'a>> {
        let lock = lab_lock()?;
        let mut x = XdpFilter { bin, ns, dev: dev.to_string(), stats: None, _lock: lock };
        // Unloaded by the drop if the load fails half-way (an attached program without pins).
        run(&x.bin, ns, &["load", dev, "--mode", "native", "--features", features])?;
        let path = pin_folder().join("xdp_stats_map");
        let stats = MapHandle::from_pinned_path(&path).with_context(|| format!("opening xdp-filter's counters {}", path.display()))?;
        // xdp_stats_kern.h: a PERCPU_ARRAY keyed by XDP action, of struct
        // xdp_stats_record { __u64 packets; __u64 bytes; }.
        let (t, k, v) = (stats.map_type(), stats.key_size(), stats.value_size());
        ensure!(t == MapType::PercpuArray && k == 4 && v == 16, "xdp-filter's xdp_stats_map is a {t:?}, key {k} and value {v} bytes: not xdp-tools 1.6.3's");
        x.stats = Some(stats);
        Ok(x)
    }

    /// Drops UDP to each of `ports` (the first by `xdp-filter port P
    /// --proto udp`, the rest written beside it, after the command has
    /// released its lock; see the module).
    pub fn udp_ports(&self, ports: &[u16]) -> Result<()> {
        let Some((first, rest)) = ports.split_first() else { return Ok(()) };
        run(&self.bin, self.ns, &["port", &first.to_string(), "--proto", "udp"])?;
        // do_port: key htons(port) in a __u32.
        let key = |p: u16| u32::from(p.to_be()).to_ne_bytes();
        let map = PinnedMap::open("filter_ports", MapType::PercpuArray, 65_536)?;
        map.check_written(&key(*first), MAP_FLAG_DST | MAP_FLAG_UDP, &format!("port {first}"))?;
        map.write(rest.iter().map(|p| key(*p)), MAP_FLAG_DST | MAP_FLAG_UDP)
    }

    /// Drops frames from each of `addrs` (src mode: the first by
    /// `xdp-filter ip ADDR --mode src`, the rest written beside it; see the
    /// module). Refuses a map that held entries before (another
    /// xdp-filter on this host shares it) or is too small for them.
    pub fn src_addresses(&self, addrs: &[Ipv4Addr]) -> Result<()> {
        let Some((first, rest)) = addrs.split_first() else { return Ok(()) };
        {
            // Closed (and unlocked) before xdp-filter's command takes the lock.
            let map = PinnedMap::open("filter_ipv4", MapType::PercpuHash, 0)?;
            let held = map.count()?;
            ensure!(
                held == 0,
                "xdp-filter's filter_ipv4 already holds {held} addresses (another xdp-filter on this host, or one a killed run left): `xdp-filter unload --all` first"
            );
            let room = map.handle.max_entries();
            ensure!(
                addrs.len() <= room as usize,
                "xdp-filter's filter_ipv4 holds at most {room} addresses, not {}: use a smaller --blocklist with xdp-filter-ip",
                addrs.len()
            );
        }
        run(&self.bin, self.ns, &["ip", &first.to_string(), "--mode", "src"])?;
        let map = PinnedMap::open("filter_ipv4", MapType::PercpuHash, 0)?;
        map.check_written(&first.octets(), MAP_FLAG_SRC, &format!("address {first}"))?;
        map.write(rest.iter().map(Ipv4Addr::octets), MAP_FLAG_SRC)?;
        let now = map.count()?;
        ensure!(now == addrs.len(), "xdp-filter's filter_ipv4 holds {now} addresses after writing {}", addrs.len());
        Ok(())
    }

    /// Its XDP_DROP count, as `xdp-filter status` sums it, read from its
    /// counters directly: `status` also reads and prints every filtered
    /// address (10,000 of them take it over a second of CPU), which would
    /// run inside the measured interval.
    pub fn drops(&self) -> Result<u64> {
        let stats = self.stats.as_ref().context("xdp-filter is not loaded")?;
        let key = 1u32.to_ne_bytes(); // XDP_DROP
        let per_cpu = stats.lookup_percpu(&key, MapFlags::ANY)?.context("xdp-filter's xdp_stats_map has no XDP_DROP entry")?;
        Ok(per_cpu.iter().map(|v| v.get(..8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_ne_bytes)).sum())
    }
}

impl Drop for XdpFilter<'_> {
    /// Unloads it; if xdp-filter cannot (it lost track of its program),
    /// detaches whatever XDP program the interface has, which the next
    /// variant's attach would otherwise find there.
    fn drop(&mut self) {
        if let Err(e) = run(&self.bin, self.ns, &["unload", &self.dev]) {
            let off = peers::run_in_net(&self.ns.path(), "ip", &["link", "set", "dev", &self.dev, "xdp", "off"]);
            let detached = off.as_ref().is_ok_and(|o| o.status.success());
            eprintln!("xnf lab: {e:#}{}", if detached { " (its XDP program detached with ip link)" } else { "" });
        }
    }
}

/// One of xdp-filter's pinned maps, held under its lock.
struct PinnedMap {
    handle: MapHandle,
    name: &'static str,
    cpus: usize,
    /// xdp-filter's lock (a `flock` on its pin folder), released on drop.
    _lock: File,
}

impl PinnedMap {
    /// Opens map `name`, checking its type and its key and value sizes
    /// (and its entries, unless `entries` is 0) against xdp-filter's source.
    fn open(name: &'static str, ty: MapType, entries: u32) -> Result<PinnedMap> {
        let folder = pin_folder();
        let lock = File::open(&folder).with_context(|| format!("opening xdp-filter's pin folder {}", folder.display()))?;
        // SAFETY: flock on a file descriptor we own.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        ensure!(rc == 0, "locking {} as xdp-filter does: {}", folder.display(), std::io::Error::last_os_error());
        let path = folder.join(name);
        let handle = MapHandle::from_pinned_path(&path)
            .with_context(|| format!("opening xdp-filter's map {}: was it loaded with the feature that makes it?", path.display()))?;
        let (t, k, v, n) = (handle.map_type(), handle.key_size(), handle.value_size(), handle.max_entries());
        ensure!(
            t == ty && k == 4 && v == 8 && (entries == 0 || n == entries),
            "xdp-filter's {name} is a {t:?} of {n} entries, key {k} and value {v} bytes: not the {ty:?} of xdp-tools 1.6.3 this lab writes (see xdpfilt_prog.h)"
        );
        Ok(PinnedMap { handle, name, cpus: libbpf_rs::num_possible_cpus()?, _lock: lock })
    }

    /// Checks that the entry at `key`, just added by xdp-filter's own
    /// command, holds `flags` on every CPU (its counter still 0): the
    /// value layout [`write`](Self::write) uses.
    fn check_written(&self, key: &[u8], flags: u64, what: &str) -> Result<()> {
        let per_cpu =
            self.handle.lookup_percpu(key, MapFlags::ANY)?.with_context(|| format!("xdp-filter added {what}, but {} has no entry for it", self.name))?;
        let want = flags.to_ne_bytes();
        ensure!(
            per_cpu.iter().all(|v| v.as_slice() == want),
            "xdp-filter wrote {what} to {} as {per_cpu:?}, not as flags {flags} per CPU: this lab's layout (common_kern_user.h of xdp-tools 1.6.3) does not match this xdp-filter",
            self.name
        );
        Ok(())
    }

    /// Writes `flags` (counter 0) for every CPU at every key, in batches,
    /// as `map_set_flags` writes a new entry.
    fn write(&self, keys: impl Iterator<Item = [u8; 4]>, flags: u64) -> Result<()> {
        let keys: Vec<[u8; 4]> = keys.collect();
        let value: Vec<u8> = (0..self.cpus).flat_map(|_| flags.to_ne_bytes()).collect();
        for chunk in keys.chunks(BATCH) {
            let k: Vec<u8> = chunk.concat();
            let v: Vec<u8> = value.repeat(chunk.len());
            let mut count = u32::try_from(chunk.len())?;
            let opts = libbpf_sys::bpf_map_batch_opts { sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _, ..Default::default() };
            // SAFETY: `k` holds `count` keys of 4 bytes and `v` `count`
            // values of 8 bytes for each possible CPU, as a per-CPU
            // map's batch update reads them; both live across the call.
            let rc = unsafe { libbpf_sys::bpf_map_update_batch(self.handle.as_fd().as_raw_fd(), k.as_ptr().cast(), v.as_ptr().cast(), &mut count, &opts) };
            ensure!(rc == 0, "writing {} entries to xdp-filter's {}: {}", chunk.len(), self.name, std::io::Error::from_raw_os_error(-rc));
        }
        Ok(())
    }

    /// Entries in the map.
    fn count(&self) -> Result<usize> {
        Ok(self.handle.keys().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_xdp_filter_says_how_to_build_it() {
        let e = binary(Some(Path::new("/nonexistent/xdp-filter"))).unwrap_err().to_string();
        assert!(e.contains("scripts/peers.sh") && !e.contains('\n'), "{e}");
    }
}
