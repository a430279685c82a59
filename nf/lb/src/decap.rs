//! `xnf lb decap`: the backends' half of xnf lb. `decap.bpf.c` strips the
//! outer header of what a balancer sent this host (IPv4-in-IPv4, IPv6-in-IPv6,
//! either inside the other, GUE to one UDP port) and hands the inner packet
//! on as if it had arrived that way; this module loads it, installs it as
//! the lb stage of interfaces' entry programs (as the filter is installed as
//! their filter stage), keeps its `locals` map and reads its counters.
//!
//! Why in XDP: this machine's kernel (and many others) has no ipip or fou
//! module, and where there is one its tunnel device is a second pass through
//! the stack. Only packets to one of this host's addresses are touched, so
//! a tunnel passing through (this host routing it) is forwarded untouched.
//!
//! State: `locals` and `stats` are pinned under
//! `/sys/fs/bpf/xnf/<netns>/lb-decap/`, shared by every interface's instance
//! and removed with the last interface. Each instance has its own GUE port
//! (read-only data fixed at load), read back from the kernel by `status`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramMut};
use serde::Serialize;
use xnf_core::entry::{self, Stage};
use xnf_core::lifecycle::{pin_maps, AttachReport, Lifecycle, PinnedMaps, StageNf, Target};
use xnf_core::maps::{delete_if_present, from_bytes, object_storage};
use xnf_core::xdp::XdpMode;
use xnf_netns::netlink::{self, Link};

use crate::skel::decap::{types, DecapSkel, DecapSkelBuilder};

/// The program's name as the kernel reports it (what the lb slot holds).
pub const PROG_NAME: &str = "xnf_lb_decap";

xnf_core::c_enum! {
    /// decap's counters (`enum xnf_decap_counter`).
    pub enum DecapCounter: types::xnf_decap_counter, max XNF_DECAP_COUNTERS {
        /// Every frame the stage saw.
        Rx = XNF_DECAP_RX => "rx",
        /// Not encapsulated for this host: on to the next stage (or the kernel), unchanged.
        Continue = XNF_DECAP_CONTINUE => "continue",
        /// An IPv4 packet stripped of its outer header (IPv4 or IPv6, protocol 4).
        Ipip = XNF_DECAP_IPIP => "ipip",
        /// An IPv6 packet stripped of its outer header (IPv6 or IPv4, protocol 41).
        Ip6ip6 = XNF_DECAP_IP6IP6 => "ip6ip6",
        /// An IP packet stripped of its outer IP and UDP headers (GUE variant 1).
        Gue = XNF_DECAP_GUE => "gue",
        /// An outer fragment to this host: passed whole to the kernel, which reassembles it.
        Fragment = XNF_DECAP_FRAGMENT => "fragment",
        /// Encapsulated for this host but no IP packet of the right version inside: passed unchanged.
        BadInner = XNF_DECAP_BAD_INNER => "bad-inner",
        /// The frame could not be shrunk: passed unchanged.
        Error = XNF_DECAP_ERROR => "error",
    }
}

impl DecapCounter {
    /// What the counter counts, for people.
    pub fn meaning(self) -> &'static str {
        match self {
            DecapCounter::Rx => "frames the stage saw",
            DecapCounter::Continue => "not encapsulated for this host: on to the next stage, unchanged",
            DecapCounter::Ipip => "IPv4 inside IPv4 or IPv6 (protocol 4), stripped",
            DecapCounter::Ip6ip6 => "IPv6 inside IPv6 or IPv4 (protocol 41), stripped",
            DecapCounter::Gue => "IP inside UDP to the GUE port, stripped",
            DecapCounter::Fragment => "outer fragments to this host, passed to the kernel to reassemble",
            DecapCounter::BadInner => "for this host but no IP packet of the right version inside, passed unchanged",
            DecapCounter::Error => "frames that could not be shrunk, passed unchanged",
        }
    }
}

/// decap's counters summed over CPUs, indexed by [`DecapCounter`].
pub type DecapCounters = [u64; DecapCounter::ALL.len()];
const _: () = assert!(std::mem::size_of::<types::xnf_decap_stats>() == 8 * DecapCounter::ALL.len());

/// One loaded decap instance (one per interface: its "continue" reaches
/// that interface's later stages, and its GUE port is its own).
pub struct DecapProgram {
    skel: DecapSkel<'static>,
}

impl DecapProgram {
    /// Loads an instance that passes what it does not strip to the kernel
    /// (no stage array). With `pin_dir`, its maps are shared through pins
    /// there. `gue_port` 0: no GUE.
    pub fn load(pin_dir: Option<&Path>, gue_port: u16) -> Result<Self> {
        Self::load_stage(pin_dir, gue_port, None)
    }

    /// [`load`](Self::load), continuing to an interface's later stages
    /// when given its `stages` array.
    pub fn load_stage(pin_dir: Option<&Path>, gue_port: u16, stages: Option<&MapHandle>) -> Result<Self> {
        let mut open = DecapSkelBuilder::default().open(object_storage()).context("opening the decap BPF object")?;
        let ro = open.maps.rodata_data.as_deref_mut().context("decap has no rodata")?;
        ro.gue_port = gue_port.to_be();
        if let Some(dir) = pin_dir {
            pin_maps::<DecapMaps>(open.open_object_mut(), dir)?;
        }
        if let Some(s) = stages {
            entry::reuse_stages(&mut open.maps.xnf_stages, s)?;
        }
        let skel = open.load().context("loading decap into the kernel failed (verifier or missing BPF support; see `dmesg`)")?;
        Ok(Self { skel })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_lb_decap
    }

    pub fn maps(&self) -> Result<DecapMaps> {
        DecapMaps::of_object(self.skel.object())
    }

    /// The GUE port this instance runs with, as the kernel holds it.
    pub fn gue_port(&self) -> Result<u16> {
        loaded_gue_port(self.prog().as_fd())
    }
}

xnf_core::pinned_maps! {
    /// The maps every decap instance shares, as pinned.
    pub struct DecapMaps in DecapSkelBuilder { locals, stats }
}

/// An address as `locals` keys it (`struct xnf_lb_addr`, as the lb's `vips`).
fn local_key(a: IpAddr) -> Vec<u8> {
    crate::program::addr_key(a)
}

/// The address a `locals` key holds, if it is one.
fn key_addr(k: &[u8]) -> Option<IpAddr> {
    let k: types::xnf_lb_addr = from_bytes(k);
    let bytes: Vec<u8> = k.addr.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match k.family as i32 {
        libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))),
        libc::AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?))),
        _ => None,
    }
}

/// What a rewrite of `locals` changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LocalsChange {
    pub added: Vec<IpAddr>,
    pub removed: Vec<IpAddr>,
    /// Addresses in the map afterwards.
    pub total: usize,
}

impl DecapMaps {
    /// The addresses decap strips packets for.
    pub fn locals(&self) -> BTreeSet<IpAddr> {
        self.locals.keys().filter_map(|k| key_addr(&k)).collect()
    }

    /// Makes `locals` hold exactly `want`: new addresses first, then the
    /// gone ones removed, so an address present before and after is never
    /// missing in between.
    pub fn set_locals(&self, want: &BTreeSet<IpAddr>) -> Result<LocalsChange> {
        let max = self.locals.max_entries() as usize;
        if want.len() > max {
            let n = want.len();
            bail!("this network namespace has {n} addresses and decap's locals map holds {max}: remove some, or raise its size in decap.bpf.c");
        }
        let have = self.locals();
        let added: Vec<IpAddr> = want.difference(&have).copied().collect();
        let removed: Vec<IpAddr> = have.difference(want).copied().collect();
        for a in &added {
            self.locals.update(&local_key(*a), &1u32.to_ne_bytes(), MapFlags::ANY).with_context(|| format!("adding {a} to decap's local addresses"))?;
        }
        for a in &removed {
            delete_if_present(&self.locals, &local_key(*a))?;
        }
        Ok(LocalsChange { added, removed, total: want.len() })
    }

    pub fn counters(&self) -> Result<DecapCounters> {
        xnf_core::maps::sum_percpu(&self.stats, 0)
    }
}

/// The map ids of the program open as `prog`.
fn prog_map_ids(prog: BorrowedFd<'_>) -> Result<Vec<u32>> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: a valid fd; info is plain data of the size given.
    if unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) } != 0 {
        return Err(std::io::Error::last_os_error()).context("reading a program's info");
    }
    let mut ids = vec![0u32; info.nr_map_ids as usize];
    let mut info = libbpf_sys::bpf_prog_info { nr_map_ids: ids.len() as u32, map_ids: ids.as_mut_ptr() as u64, ..Default::default() };
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: as above; map_ids points at room for nr_map_ids ids.
    if unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) } != 0 {
        return Err(std::io::Error::last_os_error()).context("reading a program's map ids");
    }
    ids.truncate(info.nr_map_ids as usize);
    Ok(ids)
}

/// The GUE port the decap program open as `prog` runs with: read back from
/// its read-only data, so it is what the kernel runs, not what was asked.
fn loaded_gue_port(prog: BorrowedFd<'_>) -> Result<u16> {
    for id in prog_map_ids(prog)? {
        let Ok(map) = MapHandle::from_map_id(id) else { continue };
        if !map.name().to_string_lossy().ends_with(".rodata") {
            continue;
        }
        let v = map.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?.context("decap's read-only data is empty")?;
        let off = std::mem::offset_of!(types::rodata, gue_port);
        let b = v.get(off..off + 2).context("decap's read-only data is shorter than this xnf's: a program of another build")?;
        return Ok(u16::from_be_bytes([b[0], b[1]]));
    }
    bail!("the program has no read-only data: not this build's decap")
}

/// The GUE port of the program with id `id` (a decap stage).
fn prog_gue_port(id: u32) -> Result<u16> {
    // SAFETY: plain syscall; a new fd is ours to own.
    let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("opening program {id}"));
    }
    // SAFETY: a new fd nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    loaded_gue_port(fd.as_fd())
}

/// decap as a stage network function: the lb stage of a backend's
/// interfaces, each instance with its own GUE port (its options: a new
/// port replaces the instance in one update).
pub struct Decap;

impl StageNf for Decap {
    const NAME: &'static str = "lb-decap";
    const TITLE: &'static str = "decap";
    const COMMAND: &'static str = "xnf lb decap";
    const PROG_NAME: &'static str = PROG_NAME;
    const BUILD: &'static str = crate::skel::decap::BUILD;
    const STAGE: Stage = Stage::Lb;
    const ETHERNET_WHY: &'static str = "decap parses Ethernet frames (balancers reach backends over Ethernet)";
    type Maps = DecapMaps;
    type Instance = DecapProgram;
    /// The GUE port (0: no GUE).
    type Options = u16;

    fn load(dir: &Path, at: Option<&Target<'_, Self>>) -> Result<DecapProgram> {
        DecapProgram::load_stage(Some(dir), at.map_or(0, |t| *t.opts), at.map(|t| t.stages))
    }

    fn prog(p: &DecapProgram) -> BorrowedFd<'_> {
        p.prog().as_fd()
    }

    fn options(_: &DecapMaps, ifindex: u32) -> Result<u16> {
        let id = Life::stage_prog(ifindex).context("decap is not this interface's lb stage")?;
        prog_gue_port(id)
    }

    /// The addresses before the interface runs it: no frame meets an empty map.
    fn enter(maps: &DecapMaps, _: &Link, _: &u16) -> Result<()> {
        maps.set_locals(&own_addresses()?).map(drop)
    }

    fn counters(maps: &DecapMaps) -> Result<Vec<(&'static str, u64)>> {
        let c = maps.counters()?;
        Ok(DecapCounter::ALL.iter().map(|k| (k.name(), c[*k as usize])).collect())
    }
}

type Life = Lifecycle<Decap>;

/// decap's pin folder in this network namespace.
pub fn pin_dir() -> Result<PathBuf> {
    Life::pin_dir()
}

fn open_maps() -> Result<DecapMaps> {
    Life::maps()?.context("decap is attached to no interface in this network namespace (`xnf lb decap attach IFACE`)")
}

/// The interfaces of this namespace with decap attached.
pub fn attached_links() -> Result<Vec<Link>> {
    Life::attached_links()
}

/// Every IPv4 and IPv6 address of this network namespace now, as netlink
/// reports them (loopback and link-local ones included: a packet to any of
/// them is to this host).
fn own_addresses() -> Result<BTreeSet<IpAddr>> {
    Ok(netlink::addresses().context("listing this network namespace's addresses")?.into_iter().map(|a| a.addr).collect())
}

/// Attaches decap as the lb stage of `names`, each instance stripping GUE
/// sent to `gue_port` (0: no GUE), after filling `locals` with every address
/// of this network namespace. Addresses are read now: one added later is not
/// decap's until `refresh` (or a detach and attach). All or nothing: on
/// error, interfaces attached by this call are detached again. An
/// interface running decap with another GUE port gets the new one in one
/// update of its lb stage.
pub fn attach(names: &[String], mode: XdpMode, gue_port: u16) -> Result<AttachReport> {
    Life::attach(names, mode, &gue_port)
}

/// Detaches decap from `names`; with no interface left, its addresses and
/// counters go too.
pub fn detach(names: &[String]) -> Result<()> {
    Life::detach(names)
}

/// Rewrites `locals` from this network namespace's addresses now: after an
/// address was added or removed (decap reads them at attach only).
pub fn refresh() -> Result<LocalsChange> {
    let _lock = Life::lock()?;
    let maps = open_maps()?;
    maps.set_locals(&own_addresses()?)
}

/// decap's counters summed over CPUs (and over interfaces: they share them).
pub fn counters() -> Result<DecapCounters> {
    open_maps()?.counters()
}

/// One interface with decap.
#[derive(Clone, Debug, Serialize)]
pub struct DecapIface {
    pub name: String,
    pub ifindex: u32,
    pub mode: &'static str,
    /// Id of its decap program.
    pub prog_id: u32,
    /// The GUE port that program runs with (0: no GUE); None when it could not be read.
    pub gue_port: Option<u16>,
    /// The stages on the interface, in the order frames meet them.
    pub stages: Vec<String>,
}

/// What `xnf lb decap status` shows.
#[derive(Clone, Debug, Serialize)]
pub struct DecapStatus {
    pub interfaces: Vec<DecapIface>,
    /// The addresses decap strips packets for.
    pub locals: Vec<IpAddr>,
    /// Addresses of this namespace added since: not decap's until `xnf lb decap refresh`.
    pub missing: Vec<IpAddr>,
    /// Addresses decap still strips for that this namespace no longer has.
    pub stale: Vec<IpAddr>,
    pub counters: BTreeMap<&'static str, u64>,
}

/// The interfaces with decap, each instance's GUE port, the local
/// addresses against this namespace's now, and the counters.
pub fn status() -> Result<DecapStatus> {
    let interfaces: Vec<DecapIface> = Life::status()?
        .into_iter()
        .map(|a| DecapIface {
            gue_port: prog_gue_port(a.prog_id).ok(),
            name: a.name,
            ifindex: a.ifindex,
            mode: a.mode.name(),
            prog_id: a.prog_id,
            stages: a.stages,
        })
        .collect();
    let (locals, counters) = match Life::maps()? {
        Some(m) => (m.locals(), m.counters()?),
        None => (BTreeSet::new(), [0; DecapCounter::ALL.len()]),
    };
    let (missing, stale) = if interfaces.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let now = own_addresses()?;
        (now.difference(&locals).copied().collect(), locals.difference(&now).copied().collect())
    };
    Ok(DecapStatus {
        interfaces,
        locals: locals.into_iter().collect(),
        missing,
        stale,
        counters: DecapCounter::ALL.iter().map(|c| (c.name(), counters[*c as usize])).collect(),
    })
}

fn addr_list(a: &[IpAddr]) -> String {
    a.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
}

/// The status as text.
pub fn render_status(s: &DecapStatus) -> String {
    let mut out = String::new();
    if s.interfaces.is_empty() {
        out.push_str("decap is attached to no interface in this network namespace (`xnf lb decap attach IFACE`)\n");
        return out;
    }
    let _ = writeln!(out, "{:<16} {:>7} {:<7} {:<6} STAGES", "INTERFACE", "IFINDEX", "MODE", "GUE");
    for i in &s.interfaces {
        let gue = match i.gue_port {
            Some(0) => "off".to_string(),
            Some(p) => p.to_string(),
            None => "?".to_string(),
        };
        let _ = writeln!(out, "{:<16} {:>7} {:<7} {:<6} {}", i.name, i.ifindex, i.mode, gue, i.stages.join(" -> "));
    }
    let _ = writeln!(out, "\nlocal addresses ({}): {}", s.locals.len(), addr_list(&s.locals));
    if !s.missing.is_empty() {
        let _ = writeln!(out, "not yet decap's (added since; `xnf lb decap refresh`): {}", addr_list(&s.missing));
    }
    if !s.stale.is_empty() {
        let _ = writeln!(out, "gone from this host, still decap's (`xnf lb decap refresh`): {}", addr_list(&s.stale));
    }
    out.push('\n');
    for c in DecapCounter::ALL {
        let _ = writeln!(out, "{:<10} {:>14}  {}", c.name(), s.counters[c.name()], c.meaning());
    }
    out
}

#[derive(Subcommand)]
pub enum DecapCommand {
    /// Strip what balancers encapsulated for this host (IPIP, IPv6-in-IPv6, GUE) on these interfaces, as their lb stage.
    Attach {
        #[arg(required = true, value_name = "IFACE")]
        ifaces: Vec<String>,
        /// XDP mode: native (in the driver) or skb (generic, any device, slow).
        #[arg(long, value_enum, default_value = "native")]
        mode: XdpMode,
        /// UDP port GUE arrives on (the services' gue_port); 0: no GUE.
        #[arg(long, value_name = "PORT", default_value_t = crate::config::DEFAULT_GUE_PORT)]
        gue_port: u16,
    },
    /// Detach decap; with the last interface, its addresses and counters go too.
    Detach {
        #[arg(required = true, value_name = "IFACE")]
        ifaces: Vec<String>,
    },
    /// Re-read this host's addresses into decap (it reads them at attach only): after adding or removing one.
    Refresh,
    /// Interfaces with decap and their GUE ports, the local addresses, the counters.
    Status {
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: DecapCommand) -> Result<()> {
    match cmd {
        DecapCommand::Attach { ifaces, mode, gue_port } => {
            let gue = if gue_port == 0 { "no GUE".to_string() } else { format!("GUE on UDP port {gue_port}") };
            let report = attach(&ifaces, mode, gue_port)?;
            for name in &report.attached {
                println!("attached decap to {name} ({gue})");
            }
            for name in &report.replaced {
                println!("decap on {name} now runs with {gue}");
            }
            let n = open_maps()?.locals().len();
            println!("{n} local addresses (an address added later needs `xnf lb decap refresh`)");
            Ok(())
        }
        DecapCommand::Detach { ifaces } => {
            detach(&ifaces)?;
            for name in &ifaces {
                println!("detached decap from {name}");
            }
            Ok(())
        }
        DecapCommand::Refresh => {
            let c = refresh()?;
            if c.added.is_empty() && c.removed.is_empty() {
                println!("local addresses unchanged ({})", c.total);
            } else {
                println!("local addresses: {} (added: {}; removed: {})", c.total, or_none(&c.added), or_none(&c.removed));
            }
            Ok(())
        }
        DecapCommand::Status { json } => {
            let s = status()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", render_status(&s));
            }
            Ok(())
        }
    }
}

fn or_none(a: &[IpAddr]) -> String {
    if a.is_empty() {
        "none".into()
    } else {
        addr_list(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `xnf lb decap` as the lead's `LbCmd` nests it.
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: DecapCommand,
    }

    fn parse(args: &[&str]) -> std::result::Result<DecapCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("decap").chain(args.iter().copied())).map(|c| c.cmd)
    }

    #[test]
    fn attach_takes_interfaces_a_mode_and_a_gue_port_defaulting_to_the_services() {
        let Ok(DecapCommand::Attach { ifaces, mode, gue_port }) = parse(&["attach", "eth0", "eth1"]) else { panic!("attach eth0 eth1") };
        assert_eq!((ifaces, mode, gue_port), (vec!["eth0".to_string(), "eth1".to_string()], XdpMode::Native, crate::config::DEFAULT_GUE_PORT));
        let skb = parse(&["attach", "eth0", "--mode", "skb", "--gue-port", "0"]);
        let Ok(DecapCommand::Attach { mode, gue_port, .. }) = skb else { panic!("--mode skb --gue-port 0") };
        assert_eq!((mode, gue_port), (XdpMode::Skb, 0));
        for bad in [&["attach"][..], &["attach", "eth0", "--gue-port", "65536"], &["attach", "eth0", "--mode", "offload"], &["detach"]] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(matches!(parse(&["status", "--json"]), Ok(DecapCommand::Status { json: true })));
        assert!(matches!(parse(&["refresh"]), Ok(DecapCommand::Refresh)));
    }

    #[test]
    fn locals_keys_read_back_as_the_addresses_written() {
        for a in ["198.18.1.2", "2001:db8:1::2", "::1", "127.0.0.1", "fe80::1"] {
            let a: IpAddr = a.parse().unwrap();
            assert_eq!(key_addr(&local_key(a)), Some(a));
        }
        assert_eq!(key_addr(&[0u8; 20]), None, "family 0 is no address");
    }

    #[test]
    fn status_text_shows_gue_ports_and_addresses_decap_lacks() {
        let mut counters: BTreeMap<&'static str, u64> = DecapCounter::ALL.iter().map(|c| (c.name(), 0)).collect();
        counters.insert("ipip", 7);
        let iface = |name: &str, gue_port| DecapIface {
            name: name.into(),
            ifindex: 2,
            mode: "native",
            prog_id: 41,
            gue_port,
            stages: vec!["lb:xnf_lb_decap#41".into(), "forward:xnf_router#40".into()],
        };
        let s = DecapStatus {
            interfaces: vec![iface("eth0", Some(6080)), iface("eth1", Some(0)), iface("eth2", None)],
            locals: vec!["198.18.1.2".parse().unwrap()],
            missing: vec!["198.18.1.3".parse().unwrap()],
            stale: vec![],
            counters,
        };
        let text = render_status(&s);
        assert!(text.contains("eth0                   2 native  6080   lb:xnf_lb_decap#41 -> forward:xnf_router#40\n"), "{text}");
        assert!(text.contains("eth1                   2 native  off    "), "{text}");
        assert!(text.contains("eth2                   2 native  ?      "), "{text}");
        assert!(text.contains("local addresses (1): 198.18.1.2\nnot yet decap's (added since; `xnf lb decap refresh`): 198.18.1.3\n"), "{text}");
        assert!(!text.contains("gone from this host"), "{text}");
        assert!(text.contains("\nipip                    7  IPv4 inside"), "{text}");
        let none = DecapStatus { interfaces: vec![], locals: vec![], missing: vec![], stale: vec![], counters: BTreeMap::new() };
        assert!(render_status(&none).starts_with("decap is attached to no interface"));
    }
}
