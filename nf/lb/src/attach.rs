//! The lb on the one lifecycle every network function shares
//! ([`xnf_core::lifecycle`]): the lb stage of interfaces' entry programs,
//! after the filter and before the forward stage. The services, tables and
//! connection table live in maps pinned under `/sys/fs/bpf/xnf/<netns>/lb/`,
//! shared by every interface's instance; they outlive the command and go
//! with the last interface.

use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use anyhow::Result;
use xnf_core::entry::Stage;
use xnf_core::lifecycle::{Lifecycle, StageNf, Target};
use xnf_core::xdp::XdpMode;
use xnf_netns::netlink::{self, Link};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use xnf_core::state;

use crate::config::{Config, Encap};
use crate::program::{addr_words, Counter, LbMaps, LbProgram, RawConfig};
use crate::tables::file_sources;

/// The lb as a stage network function.
pub struct Lb;

impl StageNf for Lb {
    const NAME: &'static str = "lb";
    const TITLE: &'static str = "the lb";
    const COMMAND: &'static str = "xnf lb";
    const PROG_NAME: &'static str = "xnf_lb";
    const BUILD: &'static str = crate::skel::lb::BUILD;
    const STAGE: Stage = Stage::Lb;
    const ETHERNET_WHY: &'static str = "the lb works on Ethernet frames";
    type Maps = LbMaps;
    type Instance = LbProgram;
    type Options = ();

    fn load(dir: &Path, at: Option<&Target<'_, Self>>) -> Result<LbProgram> {
        LbProgram::load(Some(dir), at.map(|t| t.stages))
    }

    fn prog(p: &LbProgram) -> BorrowedFd<'_> {
        p.prog().as_fd()
    }

    /// The data plane may redirect to the port, and takes the frames sent
    /// to its MAC, from before its first frame.
    fn enter(maps: &LbMaps, link: &Link, _: &()) -> Result<()> {
        maps.set_own_mac(link.ifindex, own_mac(link)?)?;
        maps.add_port(link.ifindex)
    }

    fn leave(maps: &LbMaps, ifindex: u32) -> Result<()> {
        maps.remove_port(ifindex)?;
        maps.remove_own_mac(ifindex)
    }

    /// A new instance keeps the interface's entries; its MAC is read again.
    fn replaced(maps: &LbMaps, link: &Link, _: &()) -> Result<()> {
        maps.set_own_mac(link.ifindex, own_mac(link)?)
    }

    /// The outer sources may be the interfaces' own addresses; the MACs
    /// are read again (one may have changed since its attach).
    fn settle(maps: &LbMaps) -> Result<()> {
        let encap = applied()?.map(|a| a.config.encap).unwrap_or_default();
        write_sources(maps, &encap)?;
        write_own_macs(maps)
    }

    fn counters(maps: &LbMaps) -> Result<Vec<(&'static str, u64)>> {
        let c = maps.counters()?;
        Ok(Counter::ALL.iter().map(|k| (k.name(), c[*k as usize])).collect())
    }

    /// Made afresh from the interfaces by every upgrade, so that an upgrade
    /// from a build without the map never runs a program on an empty one;
    /// and each CPU's service cache, empty: nothing an older build's
    /// programs filled it with is taken for the new build's records.
    const REBUILT: &'static [&'static str] = &["own_macs", "svc_cache"];

    fn rebuild(maps: &LbMaps) -> Result<()> {
        write_own_macs(maps)
    }
}

/// The MAC of an interface the lb attaches to (every Ethernet device has one).
fn own_mac(link: &Link) -> Result<[u8; 6]> {
    link.mac.with_context(|| format!("{} has no MAC address: the lb takes only frames sent to its interface's MAC", link.name))
}

/// Rewrites `own_macs` from the attached interfaces as they are now: a MAC
/// changed since the attach is taken, a detached interface's entry goes.
pub(crate) fn write_own_macs(maps: &LbMaps) -> Result<()> {
    let links = attached_links()?;
    for l in &links {
        maps.set_own_mac(l.ifindex, own_mac(l)?)?;
    }
    for (ifindex, _) in maps.own_macs()? {
        if !links.iter().any(|l| l.ifindex == ifindex) {
            maps.remove_own_mac(ifindex)?;
        }
    }
    Ok(())
}

pub(crate) type Life = Lifecycle<Lb>;

/// What is live.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AppliedFile {
    pub origin: String,
    pub text: String,
}

/// The live file, checked again (it was when applied).
pub struct Applied {
    pub origin: String,
    pub text: String,
    pub config: Config,
}

/// The lb's run files (`applied.json`, `ids.json`).
pub(crate) fn run_dir() -> Result<std::path::PathBuf> {
    Life::run_dir()
}

/// The live file, if one was applied.
pub fn applied() -> Result<Option<Applied>> {
    let Some(a) = state::read_json::<AppliedFile>(&run_dir()?, "applied.json")? else { return Ok(None) };
    let (config, _) = Config::parse(&a.text, &a.origin).context("the applied service file no longer checks (was xnf upgraded?)")?;
    Ok(Some(Applied { origin: a.origin, text: a.text, config }))
}

/// The ids handed out so far.
pub(crate) fn ids() -> Result<crate::tables::Ids> {
    Ok(state::read_json(&run_dir()?, "ids.json")?.unwrap_or_default())
}

/// The lb's state lock: attach, detach and apply hold it (before the
/// entry's lock, never after).
pub(crate) fn lock() -> Result<xnf_core::state::StateLock> {
    Life::lock()
}

/// An lb instance on this namespace's pinned maps, in no interface's
/// stage: for running frames through the live tables with
/// `BPF_PROG_TEST_RUN` (what the lab's disruption experiment does).
pub fn pinned_program() -> Result<LbProgram> {
    LbProgram::load(Some(&Life::pin_dir()?), None)
}

/// The lb's counters, summed over CPUs and interfaces.
pub fn counters() -> Result<crate::program::Counters> {
    open_maps()?.counters()
}

/// The neighbour table of the lb (the neighbours it sends to, for the
/// daemon to keep confirmed); None when it has no state here.
pub fn neigh_table() -> Result<Option<xnf_core::neigh::Table>> {
    Ok(Life::maps()?.map(|m| xnf_core::neigh::Table { stamps: m.neigh_use, epoch: m.neigh_epoch }))
}

/// The pinned maps, creating them (by loading an instance) when absent.
pub(crate) fn maps_or_create() -> Result<LbMaps> {
    Life::maps_or_create()
}

/// The pinned maps, or a message that the lb has no state here.
pub fn open_maps() -> Result<LbMaps> {
    Life::maps()?
        .ok_or_else(|| anyhow::anyhow!("the lb has no services and no interfaces in this network namespace (`xnf lb apply FILE`, `xnf lb attach IFACE`)"))
}

/// The interfaces of this namespace with the lb attached.
pub fn attached_links() -> Result<Vec<Link>> {
    Life::attached_links()
}

/// Attaches the lb to `names`. All or nothing: on error, interfaces
/// attached by this call are detached again.
pub fn attach(names: &[String], mode: XdpMode) -> Result<Vec<String>> {
    Ok(Life::attach(names, mode, &())?.attached)
}

/// Detaches the lb from `names`; with no interface left, its services,
/// tables and connection table go too.
pub fn detach(names: &[String]) -> Result<()> {
    Life::detach(names)
}

/// The outer source prefixes the data plane uses: the file's, else the
/// first address of that family on an lb interface (one address: no
/// spreading over receive queues, but packets that backends can answer
/// ICMP errors to).
pub(crate) fn sources(encap: &Encap) -> Result<RawConfig> {
    let mut c = file_sources(encap);
    let links: Vec<u32> = attached_links()?.iter().map(|l| l.ifindex).collect();
    let addrs = netlink::addresses()?;
    let own = |v6: bool| -> Option<IpAddr> {
        links.iter().find_map(|i| addrs.iter().find(|x| x.ifindex == *i && x.addr.is_ipv6() == v6 && !is_link_local(&x.addr)).map(|x| x.addr))
    };
    if encap.source_v4.is_none() {
        if let Some(a) = own(false) {
            c.src4 = addr_words(a).0[0];
        }
    }
    if encap.source_v6.is_none() {
        if let Some(a) = own(true) {
            c.src6 = addr_words(a).0;
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
