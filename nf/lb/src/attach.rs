//! Attaching the lb to interfaces (as their lb stage) and detaching it.
//! The services, tables and connection table live in maps pinned under
//! `/sys/fs/bpf/xnf/<netns>/lb/`, shared by every interface's instance;
//! they outlive the command and go with the last interface.

use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use xnf_core::entry::{self, Stage};
use xnf_core::state::{self, StateLock};
use xnf_core::xdp::XdpMode;
use xnf_netns::netlink::{self, Link};

use crate::config::Encap;
use crate::program::{addr_words, LbMaps, LbProgram, RawConfig, MAP_NAMES};

/// The lb's state lock: attach, detach and apply hold it (before the
/// entry's lock, never after).
pub(crate) const LOCK: &str = "lb";
/// The program's name as the kernel reports it.
pub(crate) const PROG_NAME: &str = "xnf_lb";

/// The lb's pin folder in this network namespace.
pub fn pin_dir() -> Result<PathBuf> {
    state::pin_dir("lb")
}

/// The pinned maps, creating them (by loading an instance) when absent.
pub(crate) fn maps_or_create() -> Result<LbMaps> {
    state::ensure_bpffs()?;
    let dir = pin_dir()?;
    if !dir.join(MAP_NAMES[0]).exists() {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        LbProgram::load(Some(&dir), None)?;
    }
    LbMaps::open_pinned(&dir)
}

/// The pinned maps, or a message that the lb has no state here.
pub fn open_maps() -> Result<LbMaps> {
    let dir = pin_dir()?;
    if !dir.join(MAP_NAMES[0]).exists() {
        bail!("the lb has no services and no interfaces in this network namespace (`xnf lb apply FILE`, `xnf lb attach IFACE`)");
    }
    LbMaps::open_pinned(&dir)
}

/// Whether the lb is `ifindex`'s lb stage.
pub(crate) fn lb_stage(ifindex: u32) -> Option<u32> {
    entry::installed(ifindex, Stage::Lb, PROG_NAME)
}

/// The interfaces of this namespace with the lb attached.
pub fn attached_links() -> Result<Vec<Link>> {
    Ok(netlink::links()?.into_iter().filter(|l| lb_stage(l.ifindex).is_some()).collect())
}

/// Attaches the lb to `names`, after the filter and before the forward
/// stage. All or nothing: on error, interfaces attached by this call are
/// detached again.
pub fn attach(names: &[String], mode: XdpMode) -> Result<Vec<String>> {
    let _lock = StateLock::acquire(LOCK)?;
    let targets = entry::ethernet_links(names, "the lb works on Ethernet frames")?;
    for l in &targets {
        if lb_stage(l.ifindex).is_some() {
            bail!("the lb is already attached to {} (`xnf lb status`)", l.name);
        }
    }
    let maps = maps_or_create()?;
    let dir = pin_dir()?;
    let load = |stages: &libbpf_rs::MapHandle| LbProgram::load(Some(&dir), Some(stages));
    let (add, undo) = (|l: &Link| maps.add_port(l.ifindex), |l: &Link| drop(maps.remove_port(l.ifindex)));
    entry::install_each(&targets, mode, Stage::Lb, "the lb", load, |p| p.prog().as_fd(), add, undo)?;
    let encap = crate::apply::applied()?.map(|a| a.config.encap).unwrap_or_default();
    write_sources(&maps, &encap)?;
    Ok(targets.into_iter().map(|l| l.name).collect())
}

/// Detaches the lb from `names`; with no interface left, its services,
/// tables and connection table go too.
pub fn detach(names: &[String]) -> Result<()> {
    let _lock = StateLock::acquire(LOCK)?;
    let todo = entry::holding(names, Stage::Lb, PROG_NAME, |name| format!("the lb is not attached to {name} (`xnf lb status` lists where it is)"))?;
    let maps = open_maps()?;
    for ifindex in todo {
        entry::remove(ifindex, Stage::Lb)?;
        maps.remove_port(ifindex)?;
    }
    if attached_links()?.is_empty() {
        remove_state()?;
    } else {
        let encap = crate::apply::applied()?.map(|a| a.config.encap).unwrap_or_default();
        write_sources(&maps, &encap)?;
    }
    Ok(())
}

/// Removes the pinned maps and the run files.
fn remove_state() -> Result<()> {
    let dir = pin_dir()?;
    for name in MAP_NAMES {
        let _ = std::fs::remove_file(dir.join(name));
    }
    state::remove_empty_dirs(&dir);
    let _ = std::fs::remove_dir_all(crate::apply::run_dir()?);
    Ok(())
}

/// The outer source prefixes the data plane uses: the file's, else the
/// first address of that family on an lb interface (one address: no
/// spreading over receive queues, but packets that backends can answer
/// ICMP errors to).
pub(crate) fn sources(encap: &Encap) -> Result<RawConfig> {
    let mut c = RawConfig::default();
    let links: Vec<u32> = attached_links()?.iter().map(|l| l.ifindex).collect();
    let addrs = netlink::addresses()?;
    let own = |v6: bool| -> Option<IpAddr> {
        links.iter().find_map(|i| addrs.iter().find(|x| x.ifindex == *i && x.addr.is_ipv6() == v6 && !is_link_local(&x.addr)).map(|x| x.addr))
    };
    match encap.source_v4 {
        Some(n) => {
            c.src4 = addr_words(IpAddr::V4(n.network())).0[0];
            c.host4 = u32::from_be_bytes(n.hostmask().octets()).to_be();
        }
        None => {
            if let Some(a) = own(false) {
                c.src4 = addr_words(a).0[0];
            }
        }
    }
    match encap.source_v6 {
        Some(n) => {
            c.src6 = addr_words(IpAddr::V6(n.network())).0;
            let host = n.hostmask().octets();
            c.host6 = u32::from_be_bytes([host[12], host[13], host[14], host[15]]).to_be();
        }
        None => {
            if let Some(a) = own(true) {
                c.src6 = addr_words(a).0;
            }
        }
    }
    Ok(c)
}

fn is_link_local(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}

pub(crate) fn write_sources(maps: &LbMaps, encap: &Encap) -> Result<()> {
    maps.set_config(&sources(encap)?)
}
