//! The lb on the one lifecycle every network function shares
//! ([`xnf_core::lifecycle`]): the lb stage of interfaces' entry programs,
//! after the filter and before the forward stage. The services, tables and
//! connection table live in maps pinned under `/sys/fs/bpf/xnf/<netns>/lb/`,
//! shared by every interface's instance; they outlive the command and go
//! with the last interface.

use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use anyhow::Result;
use xnf_core::entry::Stage;
use xnf_core::lifecycle::{Lifecycle, StageNf, Target};
use xnf_core::xdp::XdpMode;
use xnf_netns::netlink::{self, Link};

use crate::config::Encap;
use crate::program::{addr_words, Counter, LbMaps, LbProgram, RawConfig};

/// The lb as a stage network function.
pub struct Lb;

impl StageNf for Lb {
    const NAME: &'static str = "lb";
    const TITLE: &'static str = "the lb";
    const COMMAND: &'static str = "xnf lb";
    const PROG_NAME: &'static str = "xnf_lb";
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

    /// The data plane may redirect to the port from before its first frame.
    fn enter(maps: &LbMaps, link: &Link, _: &()) -> Result<()> {
        maps.add_port(link.ifindex)
    }

    fn leave(maps: &LbMaps, ifindex: u32) -> Result<()> {
        maps.remove_port(ifindex)
    }

    /// The outer sources may be the interfaces' own addresses.
    fn settle(maps: &LbMaps) -> Result<()> {
        let encap = crate::apply::applied()?.map(|a| a.config.encap).unwrap_or_default();
        write_sources(maps, &encap)
    }

    fn counters(maps: &LbMaps) -> Result<Vec<(&'static str, u64)>> {
        let c = maps.counters()?;
        Ok(Counter::ALL.iter().map(|k| (k.name(), c[*k as usize])).collect())
    }
}

type Life = Lifecycle<Lb>;

/// The lb's state lock: attach, detach and apply hold it (before the
/// entry's lock, never after).
pub(crate) fn lock() -> Result<xnf_core::state::StateLock> {
    Life::lock()
}

/// The lb's pin folder in this network namespace.
pub fn pin_dir() -> Result<PathBuf> {
    Life::pin_dir()
}

/// The pinned maps, creating them (by loading an instance) when absent.
pub(crate) fn maps_or_create() -> Result<LbMaps> {
    Life::maps_or_create()
}

/// The pinned maps, or a message that the lb has no state here.
pub fn open_maps() -> Result<LbMaps> {
    Life::maps()?.ok_or_else(|| {
        anyhow::anyhow!("the lb has no services and no interfaces in this network namespace (`xnf lb apply FILE`, `xnf lb attach IFACE`)")
    })
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
