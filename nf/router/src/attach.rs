//! Attaching the router to interfaces, detaching it, and what is attached.
//! All state lives in bpffs (see [`xnf_core::state`]), so every command
//! works from a fresh process.

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use xnf_core::entry::{self, Stage};
use xnf_core::state::{self, StateLock};
use xnf_core::xdp::{veth_peer_warning, XdpMode};
use xnf_netns::netlink::{self, Link};

use crate::follow;
use crate::program::{FibMode, IfaceEntry, RouterConfig, RouterMaps, RouterProgram, MAP_NAMES};
use xnf_core::sources::Sources;

/// `IfaceEntry::flags` bits: how an interface was attached.
const FLAG_FIB_DIRECT: u16 = 1 << 0;
const FLAG_SKB_MODE: u16 = 1 << 1;
const FLAG_FIB_CACHE: u16 = 1 << 2;
const FLAG_NO_BYTES: u16 = 1 << 3;

/// Options of `xnf router attach`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachOptions {
    pub mode: XdpMode,
    pub fib: FibMode,
    /// No byte counters (packets and reasons only).
    pub no_bytes: bool,
}

impl AttachOptions {
    fn flags(self) -> u16 {
        let fib = match self.fib {
            FibMode::Full => 0,
            FibMode::Direct => FLAG_FIB_DIRECT,
            FibMode::Cache => FLAG_FIB_CACHE,
        };
        fib | (if self.mode == XdpMode::Skb { FLAG_SKB_MODE } else { 0 }) | (if self.no_bytes { FLAG_NO_BYTES } else { 0 })
    }

    fn from_flags(flags: u16) -> Self {
        let fib = if flags & FLAG_FIB_DIRECT != 0 {
            FibMode::Direct
        } else if flags & FLAG_FIB_CACHE != 0 {
            FibMode::Cache
        } else {
            FibMode::Full
        };
        AttachOptions { mode: if flags & FLAG_SKB_MODE != 0 { XdpMode::Skb } else { XdpMode::Native }, fib, no_bytes: flags & FLAG_NO_BYTES != 0 }
    }
}

/// The name of the router's state lock: attach, detach and the follower's
/// resyncs each hold it, so that concurrent ones never pick the same slot.
pub const LOCK: &str = "router";

/// The router's pin folder in this network namespace.
pub fn pin_dir() -> Result<PathBuf> {
    state::pin_dir("router")
}

/// The router's program in `ifindex`'s forward stage, if it is there.
fn router_stage(ifindex: u32) -> Option<u32> {
    entry::installed(ifindex, Stage::Forward, "xnf_router")
}

/// Opens the pinned maps, or says that nothing is attached.
pub fn open_maps() -> Result<(PathBuf, RouterMaps)> {
    let dir = pin_dir()?;
    if !dir.join(MAP_NAMES[0]).exists() {
        bail!("the router is not attached to any interface in this network namespace (`xnf router attach IFACE`)");
    }
    let maps = RouterMaps::open_pinned(&dir)?;
    Ok((dir, maps))
}

/// Resolves names to links, rejecting what cannot be routed through.
fn resolve(names: &[String], links: &[Link]) -> Result<Vec<Link>> {
    let mut seen = HashSet::new();
    names
        .iter()
        .map(|name| {
            if !seen.insert(name) {
                bail!("{name} is named twice");
            }
            let link = links
                .iter()
                .find(|l| &l.name == name)
                .with_context(|| format!("no interface named {name:?} in this network namespace (see `ip link`)"))?;
            if link.loopback {
                bail!("{name} is a loopback interface: it cannot forward packets");
            }
            if !link.ethernet || link.mac.is_none() {
                bail!("{name} is not an Ethernet interface: the router rewrites Ethernet headers");
            }
            Ok(link.clone())
        })
        .collect()
}

/// What `attach` did, for the caller to print.
#[derive(Debug, Default)]
pub struct AttachReport {
    pub attached: Vec<String>,
    pub replaced: Vec<String>,
    pub warnings: Vec<String>,
}

/// Attaches the router to `names`, or replaces the program of those already
/// attached when the options differ. All or nothing: on error, interfaces
/// attached by this call are detached again.
pub fn attach(names: &[String], opts: AttachOptions) -> Result<AttachReport> {
    state::ensure_bpffs()?;
    let _lock = StateLock::acquire(LOCK)?;
    let links = netlink::links()?;
    let targets = resolve(names, &links)?;
    let dir = pin_dir()?;
    let existing = if dir.join(MAP_NAMES[0]).exists() { Some(RouterMaps::open_pinned(&dir)?) } else { None };

    // Refuse before changing anything.
    for link in &targets {
        let Some(entry) = existing.as_ref().and_then(|m| find_slot(m, link.ifindex)).map(|(_, e)| e) else {
            continue;
        };
        let old = AttachOptions::from_flags(entry.flags);
        if old == opts {
            bail!(
                "{} is already attached to the router with these options (detach it first, or give other --fib or --no-byte-counters to replace the program)",
                link.name
            );
        }
        if old.mode != opts.mode {
            bail!(
                "{} is attached in {} mode; changing the XDP mode cannot be atomic: `xnf router detach {}` first",
                link.name,
                old.mode.name(),
                link.name
            );
        }
    }

    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut report = AttachReport::default();
    for link in &targets {
        match attach_one(&dir, link, opts) {
            Ok(Outcome::New) => report.attached.push(link.name.clone()),
            Ok(Outcome::Replaced) => report.replaced.push(link.name.clone()),
            Err(e) => {
                // Undo what this command attached; replaced programs stay.
                if !report.attached.is_empty() {
                    let _ = detach(&report.attached);
                }
                cleanup_if_unused(&dir);
                return Err(e);
            }
        }
    }

    let maps = RouterMaps::open_pinned(&dir)?;
    follow::sync(&maps)?;
    report.warnings = warnings(&targets, &links, opts);
    Ok(report)
}

fn find_slot(maps: &RouterMaps, ifindex: u32) -> Option<(u32, IfaceEntry)> {
    maps.ifaces().ok()?.into_iter().find(|(_, e)| e.ifindex == ifindex)
}

/// What `attach_one` did.
enum Outcome {
    New,
    Replaced,
}

fn attach_one(dir: &Path, link: &Link, opts: AttachOptions) -> Result<Outcome> {
    let pinned = if dir.join(MAP_NAMES[0]).exists() { Some(RouterMaps::open_pinned(dir)?) } else { None };
    let current = pinned.as_ref().and_then(|m| find_slot(m, link.ifindex));
    let slot = match (&current, &pinned) {
        (Some((slot, _)), _) => *slot,
        (None, Some(m)) => m.free_slot()?,
        (None, None) => 0,
    };
    let cfg = RouterConfig { fib: opts.fib, no_bytes: opts.no_bytes, slot, generic: opts.mode == XdpMode::Skb };
    let prog = RouterProgram::load(cfg, Some(dir))?;
    let maps = prog.maps()?;
    // The source check is in place before the first frame can arrive.
    let sources = Sources::read()?;
    maps.set_locals(&sources.locals())?;
    let rpf = sources.rpf(link.ifindex, &link.name)?;
    let entry = IfaceEntry { ifindex: link.ifindex, mac: link.mac.unwrap_or_default(), flags: opts.flags(), rpf };
    let install = |prog: RouterProgram| entry::install(link.ifindex, &link.name, opts.mode, Stage::Forward, |_| Ok(prog), |p| p.prog().as_fd());

    if current.is_some() && router_stage(link.ifindex).is_some() {
        // Same slot, same counters: only the program changes, in one
        // update of the forward stage's slot.
        install(prog)?;
        maps.update_iface(slot, entry)?;
        return Ok(Outcome::Replaced);
    }
    maps.set_iface(slot, entry)?;
    maps.add_port(link.ifindex, opts.mode == XdpMode::Skb)?;
    if let Err(e) = install(prog) {
        maps.del_port(link.ifindex)?;
        maps.clear_iface(slot)?;
        return Err(e);
    }
    Ok(Outcome::New)
}

fn forwarding_enabled(family: &str, ifname: &str) -> Option<bool> {
    let path = format!("/proc/sys/net/{family}/conf/{ifname}/forwarding");
    std::fs::read_to_string(path).ok().map(|s| s.trim() != "0")
}

fn warnings(targets: &[Link], links: &[Link], opts: AttachOptions) -> Vec<String> {
    let mut w = Vec::new();
    for link in targets {
        for family in ["ipv4", "ipv6"] {
            if forwarding_enabled(family, &link.name) == Some(false) {
                w.push(format!(
                    "{family} forwarding is disabled on {}: the FIB lookup fails by design and its {family} traffic \
                     stays on the kernel path (sysctl net.{family}.conf.{}.forwarding=1)",
                    link.name, link.name
                ));
            }
        }
        if link.is_veth() && opts.mode == XdpMode::Native {
            w.extend(veth_peer_warning(link, links));
        }
    }
    w
}

/// Detaches the router from `names`; with nothing left, removes all its state.
pub fn detach(names: &[String]) -> Result<()> {
    let _lock = StateLock::acquire(LOCK)?;
    let (dir, maps) = open_maps()?;
    let links = netlink::links()?;
    let mut todo = Vec::new();
    for name in names {
        let link = links
            .iter()
            .find(|l| &l.name == name)
            .with_context(|| format!("no interface named {name:?} in this network namespace"))?;
        let (slot, _) = find_slot(&maps, link.ifindex)
            .filter(|_| router_stage(link.ifindex).is_some())
            .with_context(|| format!("{name} is not attached to the router (`xnf router status` lists what is)"))?;
        todo.push((slot, link.ifindex));
    }
    for (slot, ifindex) in todo {
        forget(&maps, slot, ifindex)?;
    }
    cleanup_if_unused(&dir);
    Ok(())
}

/// Removes one interface from the router: link, devmap entry, slot, VLANs.
pub(crate) fn forget(maps: &RouterMaps, slot: u32, ifindex: u32) -> Result<()> {
    // Ours, or stale pins of an interface that went away.
    if router_stage(ifindex).is_some() || entry::info(ifindex).is_none() {
        entry::remove(ifindex, Stage::Forward)?;
    }
    maps.del_port(ifindex)?;
    maps.clear_iface(slot)?;
    for v in maps.vlans()? {
        if v.phys_ifindex == ifindex {
            maps.del_vlan(v)?;
        }
    }
    Ok(())
}

/// With no interface attached, unpins the maps and removes the folder.
pub(crate) fn cleanup_if_unused(dir: &Path) -> bool {
    let in_use = RouterMaps::open_pinned(dir).ok().map(|m| m.ifaces().map(|v| !v.is_empty()).unwrap_or(true));
    if in_use == Some(true) {
        return false;
    }
    for name in MAP_NAMES {
        let _ = std::fs::remove_file(dir.join(name));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    state::remove_empty_dirs(dir);
    true
}

/// An attached interface as `status` reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Attached {
    pub name: String,
    pub ifindex: u32,
    pub slot: u32,
    /// The MAC in its slot: frames to any other are left to the kernel.
    pub mac: String,
    pub mode: XdpMode,
    pub fib: &'static str,
    /// Byte counters kept.
    pub byte_counters: bool,
    /// The kernel's reverse-path filter on it, as the router applies it.
    pub rpf: &'static str,
    pub prog_id: Option<u32>,
}

/// The attached interfaces, in slot order.
pub fn attached() -> Result<Vec<Attached>> {
    let (_, maps) = open_maps()?;
    let links = netlink::links()?;
    maps.ifaces()?
        .into_iter()
        .map(|(slot, e)| {
            let opts = AttachOptions::from_flags(e.flags);
            let name = links.iter().find(|l| l.ifindex == e.ifindex).map(|l| l.name.clone());
            let prog_id = router_stage(e.ifindex);
            Ok(Attached {
                name: name.unwrap_or_else(|| format!("(gone, ifindex {})", e.ifindex)),
                ifindex: e.ifindex,
                slot,
                mac: e.mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"),
                mode: opts.mode,
                fib: opts.fib.name(),
                byte_counters: !opts.no_bytes,
                rpf: e.rpf.name(),
                prog_id,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_options_round_trip_through_flags() {
        for mode in [XdpMode::Native, XdpMode::Skb] {
            for fib in [FibMode::Full, FibMode::Direct, FibMode::Cache] {
                for no_bytes in [false, true] {
                    let o = AttachOptions { mode, fib, no_bytes };
                    assert_eq!(AttachOptions::from_flags(o.flags()), o);
                }
            }
        }
    }

    fn link(name: &str, ifindex: u32) -> Link {
        Link { name: name.into(), ifindex, ethernet: true, mac: Some([2, 0, 0, 0, 0, 1]), ..Default::default() }
    }

    #[test]
    fn resolve_rejects_what_cannot_route() {
        let mut lo = link("lo", 1);
        lo.loopback = true;
        lo.ethernet = false;
        let links = vec![lo, link("eth0", 2)];
        assert!(resolve(&["eth0".into()], &links).is_ok());
        let err = |n: &[&str]| {
            let names: Vec<String> = n.iter().map(|s| s.to_string()).collect();
            resolve(&names, &links).unwrap_err().to_string()
        };
        assert!(err(&["lo"]).contains("loopback"));
        assert!(err(&["nope"]).contains("no interface named"));
        assert!(err(&["eth0", "eth0"]).contains("twice"));
    }
}
