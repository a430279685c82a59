//! Attaching the router to interfaces, detaching it, and what is attached.
//! All state lives in bpffs (see [`xnf_core::state`]), so every command
//! works from a fresh process.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use xnf_core::entry::Stage;
use xnf_core::lifecycle::{Lifecycle, StageNf, Target};
use xnf_core::sources::Sources;
use xnf_core::state::StateLock;
use xnf_core::xdp::{veth_peer_warning, Verdict, XdpMode};
use xnf_netns::netlink::{self, Link};

pub use xnf_core::lifecycle::AttachReport;

use crate::program::{FibMode, IfaceEntry, Reason, RouterConfig, RouterMaps, RouterProgram, PROG_NAME};
use crate::tables;

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

impl Default for AttachOptions {
    /// What `xnf router attach` does without options.
    fn default() -> Self {
        AttachOptions { mode: XdpMode::Native, fib: FibMode::default(), no_bytes: false }
    }
}

/// The router as a stage network function: the forward stage of every
/// interface it routes between. Each interface has a slot in the shared
/// maps (its MAC, source check, counters), reserved before its instance is
/// loaded, since the slot is a constant of that instance.
pub struct Router;

impl StageNf for Router {
    const NAME: &'static str = "router";
    const TITLE: &'static str = "the router";
    const COMMAND: &'static str = "xnf router";
    const PROG_NAME: &'static str = PROG_NAME;
    const BUILD: &'static str = crate::skel::router::BUILD;
    const STAGE: Stage = Stage::Forward;
    const ETHERNET_WHY: &'static str = "the router rewrites Ethernet headers";
    type Maps = RouterMaps;
    type Instance = RouterProgram;
    /// The mode is among them: it is recorded in the slot with the rest.
    type Options = AttachOptions;

    fn load(dir: &Path, at: Option<&Target<'_, Self>>) -> Result<RouterProgram> {
        // Only the maps are wanted: the lease program makes them without
        // verifying the router (seconds on a busy machine).
        let Some(t) = at else { return RouterProgram::load_lease(dir) };
        let (slot, _) = find_slot(t.maps, t.link.ifindex).context("the router's slot for the interface is gone")?;
        let cfg = RouterConfig { fib: t.opts.fib, no_bytes: t.opts.no_bytes, slot, generic: t.opts.mode == XdpMode::Skb };
        RouterProgram::load(cfg, Some(dir))
    }

    fn prog(p: &RouterProgram) -> BorrowedFd<'_> {
        p.prog().as_fd()
    }

    fn options(maps: &RouterMaps, ifindex: u32) -> Result<AttachOptions> {
        let (_, e) = find_slot(maps, ifindex).context("the interface has no slot in the router's maps")?;
        Ok(AttachOptions::from_flags(e.flags))
    }

    fn check(link: &Link) -> Result<()> {
        if link.mac.is_none() {
            bail!("{} has no MAC address: the router rewrites Ethernet headers", link.name);
        }
        Ok(())
    }

    /// The slot, the source check and the port are in place before the
    /// first frame can arrive.
    fn enter(maps: &RouterMaps, link: &Link, opts: &AttachOptions) -> Result<()> {
        // A slot left by an attach that failed after `enter` is reused.
        let slot = match find_slot(maps, link.ifindex) {
            Some((slot, _)) => slot,
            None => maps.free_slot()?,
        };
        maps.set_iface(slot, iface_entry(maps, link, opts)?)?;
        maps.add_port(link.ifindex, opts.mode == XdpMode::Skb)
    }

    /// Same slot, same counters: only the program and the recorded options change.
    fn replaced(maps: &RouterMaps, link: &Link, opts: &AttachOptions) -> Result<()> {
        let (slot, _) = find_slot(maps, link.ifindex).context("the router's slot for the interface is gone")?;
        maps.update_iface(slot, iface_entry(maps, link, opts)?)
    }

    fn leave(maps: &RouterMaps, ifindex: u32) -> Result<()> {
        maps.forget_iface(ifindex)
    }

    /// VLANs, MACs and sources as the kernel has them now.
    fn settle(maps: &RouterMaps) -> Result<()> {
        tables::sync(maps).map(drop)
    }

    fn warnings(targets: &[Link], links: &[Link], _: XdpMode, opts: &AttachOptions) -> Vec<String> {
        warnings(targets, links, *opts)
    }

    fn counters(maps: &RouterMaps) -> Result<Vec<(&'static str, u64)>> {
        let mut total = crate::program::Stats::default();
        for (slot, _) in maps.ifaces()? {
            total = total.sum(&maps.stats(slot)?);
        }
        let verdicts = Verdict::ALL.iter().map(|v| (v.name(), total.packets(*v)));
        Ok(verdicts.chain(Reason::ALL.iter().map(|r| (r.name(), total.reason(*r)))).collect())
    }
}

type Life = Lifecycle<Router>;

/// The slot entry of `link` attached with `opts`, its source check read now.
fn iface_entry(maps: &RouterMaps, link: &Link, opts: &AttachOptions) -> Result<IfaceEntry> {
    let sources = Sources::read()?;
    maps.set_locals(&sources.locals())?;
    let rpf = sources.rpf(link.ifindex, &link.name)?;
    Ok(IfaceEntry { ifindex: link.ifindex, mac: link.mac.unwrap_or_default(), flags: opts.flags(), rpf })
}

/// The router's state lock: attach, detach and the follower's resyncs
/// each hold it, so that concurrent ones never pick the same slot.
pub fn lock() -> Result<StateLock> {
    Life::lock()
}

/// The router's pin folder in this network namespace.
pub fn pin_dir() -> Result<PathBuf> {
    Life::pin_dir()
}

/// The router's program in `ifindex`'s forward stage, if it is there.
fn router_stage(ifindex: u32) -> Option<u32> {
    Life::stage_prog(ifindex)
}

/// Opens the pinned maps, or says that nothing is attached.
pub fn open_maps() -> Result<(PathBuf, RouterMaps)> {
    let maps = Life::maps()?.context("the router is not attached to any interface in this network namespace (`xnf router attach IFACE`)")?;
    Ok((pin_dir()?, maps))
}

/// Attaches the router to `names`, or replaces the program of those already
/// attached when the options differ. All or nothing: on error, interfaces
/// attached by this call are detached again.
pub fn attach(names: &[String], opts: AttachOptions) -> Result<AttachReport> {
    Life::attach(names, opts.mode, &opts)
}

fn find_slot(maps: &RouterMaps, ifindex: u32) -> Option<(u32, IfaceEntry)> {
    maps.ifaces().ok()?.into_iter().find(|(_, e)| e.ifindex == ifindex)
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
    Life::detach(names)
}

/// With no interface in the maps, removes the router's state. The caller
/// holds the lock.
pub(crate) fn cleanup_if_unused(maps: &RouterMaps) -> Result<bool> {
    if !maps.ifaces()?.is_empty() {
        return Ok(false);
    }
    Life::remove_state()?;
    Ok(true)
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
}
