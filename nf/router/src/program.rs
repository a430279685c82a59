//! The router program (`router.bpf.c`): loading it, and reading and
//! writing the maps all its instances share.

use xnf_core::features::{explain, Feature};
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramMut};

use xnf_core::maps::{as_bytes, delete_if_present, from_bytes, object_storage};
pub use xnf_core::fwd::Reason;
use xnf_core::xdp::Verdict;

use crate::skel::router::{types, RouterSkel, RouterSkelBuilder};

pub use types::xnf_router_stats as RawStats;

/// Interfaces (devmap entries, stats slots) one router can manage.
pub const MAX_IFACES: u32 = types::xnf_router_limits::XNF_ROUTER_MAX_IFACES.0;

/// `BPF_FIB_LOOKUP_DIRECT`: skip policy rules, look up the main table only.
const BPF_FIB_LOOKUP_DIRECT: u32 = 1;

/// Names of the maps shared by every router instance, as pinned.
pub const MAP_NAMES: [&str; 8] = ["tx_ports", "tx_ports_all", "skb_ports", "ifaces", "stats", "vlan_ingress", "vlan_egress", "locals"];

pub use xnf_core::sources::Rpf;

/// How a router instance is built; fixed at load time (read-only data, so
/// the verifier prunes what is off). Changing them means a new instance,
/// swapped in atomically through the link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterConfig {
    /// Skip policy routing rules (`BPF_FIB_LOOKUP_DIRECT`).
    pub fib_direct: bool,
    /// The interface's slot in the `ifaces` and `stats` maps.
    pub slot: u32,
    /// Attached in skb (generic) mode: redirects may go to every port,
    /// not only to those attached in driver mode.
    pub generic: bool,
}

/// One loaded router program instance.
pub struct RouterProgram {
    skel: RouterSkel<'static>,
}

impl RouterProgram {
    /// Loads an instance. With `pin_dir`, its maps are shared with every
    /// other instance through pins there (created by the first load).
    pub fn load(cfg: RouterConfig, pin_dir: Option<&Path>) -> Result<Self> {
        let mut open = RouterSkelBuilder::default()
            .open(object_storage())
            .context("opening the router BPF object")?;
        let ro = open.maps.rodata_data.as_deref_mut().context("router has no rodata")?;
        ro.fib_flags = if cfg.fib_direct { BPF_FIB_LOOKUP_DIRECT } else { 0 };
        ro.stats_slot = cfg.slot;
        ro.generic = cfg.generic as u8;
        if let Some(dir) = pin_dir {
            let m = &mut open.maps;
            for (map, name) in [
                &mut m.tx_ports,
                &mut m.tx_ports_all,
                &mut m.skb_ports,
                &mut m.ifaces,
                &mut m.stats,
                &mut m.vlan_ingress,
                &mut m.vlan_egress,
                &mut m.locals,
            ]
            .into_iter()
            .zip(MAP_NAMES)
            {
                map.set_pin_path(dir.join(name))
                    .with_context(|| format!("setting pin path for map {name}"))?;
            }
        }
        let skel = open
            .load()
            .context(
                "loading the router into the kernel failed (verifier or missing BPF support; \
                 run with RUST_LOG unset and check `dmesg`)",
            )
            .map_err(|e| explain(e, &[Feature::DevmapHash]))?;
        Ok(Self { skel })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_router
    }

    /// Handles on the instance's maps (the shared ones when pinned).
    pub fn maps(&self) -> Result<RouterMaps> {
        let m = &self.skel.maps;
        Ok(RouterMaps {
            tx_ports: MapHandle::try_from(&m.tx_ports)?,
            tx_ports_all: MapHandle::try_from(&m.tx_ports_all)?,
            skb_ports: MapHandle::try_from(&m.skb_ports)?,
            ifaces: MapHandle::try_from(&m.ifaces)?,
            stats: MapHandle::try_from(&m.stats)?,
            vlan_ingress: MapHandle::try_from(&m.vlan_ingress)?,
            vlan_egress: MapHandle::try_from(&m.vlan_egress)?,
            locals: MapHandle::try_from(&m.locals)?,
        })
    }
}

/// The router's shared maps.
pub struct RouterMaps {
    tx_ports: MapHandle,
    tx_ports_all: MapHandle,
    skb_ports: MapHandle,
    ifaces: MapHandle,
    stats: MapHandle,
    vlan_ingress: MapHandle,
    vlan_egress: MapHandle,
    locals: MapHandle,
}

/// An attached interface as the `ifaces` map holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IfaceEntry {
    pub ifindex: u32,
    pub mac: [u8; 6],
    /// Control-plane bits recording how it was attached (see `xnf`).
    pub flags: u16,
    /// The kernel's reverse-path filter on it (kept in step by the follower).
    pub rpf: Rpf,
}

/// A VLAN device as the router's tables see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VlanEntry {
    /// The VLAN device (what the FIB returns as egress).
    pub vlan_ifindex: u32,
    /// Its physical parent, the attached interface.
    pub phys_ifindex: u32,
    pub vid: u16,
    /// The kernel's reverse-path filter on the VLAN device.
    pub rpf: Rpf,
}

// The C struct holds packets and bytes per verdict and packets per reason.
const _: () = assert!(std::mem::size_of::<RawStats>() == 8 * (2 * Verdict::ALL.len() + Reason::ALL.len()));

/// Per-interface counters summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub packets: [u64; Verdict::ALL.len()],
    pub bytes: [u64; Verdict::ALL.len()],
    pub reasons: [u64; Reason::ALL.len()],
}

impl Stats {
    pub fn packets(&self, v: Verdict) -> u64 {
        self.packets[v as usize]
    }
    pub fn bytes(&self, v: Verdict) -> u64 {
        self.bytes[v as usize]
    }
    pub fn reason(&self, r: Reason) -> u64 {
        self.reasons[r as usize]
    }
    pub fn total_packets(&self) -> u64 {
        self.packets.iter().sum()
    }
    /// Counts since `older` (counters only grow; a reset reads as zero).
    pub fn delta(&self, older: &Stats) -> Stats {
        let mut d = self.clone();
        for (a, b) in d.packets.iter_mut().zip(older.packets) {
            *a = a.saturating_sub(b);
        }
        for (a, b) in d.bytes.iter_mut().zip(older.bytes) {
            *a = a.saturating_sub(b);
        }
        for (a, b) in d.reasons.iter_mut().zip(older.reasons) {
            *a = a.saturating_sub(b);
        }
        d
    }

    /// Counts divided by `secs`, rounded.
    pub fn per_second(&self, secs: f64) -> Stats {
        let mut r = self.clone();
        let f = |v: &mut u64| *v = (*v as f64 / secs).round() as u64;
        r.packets.iter_mut().for_each(f);
        r.bytes.iter_mut().for_each(f);
        r.reasons.iter_mut().for_each(f);
        r
    }

    fn add(&mut self, raw: &RawStats) {
        for (a, b) in self.packets.iter_mut().zip(raw.packets) {
            *a += b;
        }
        for (a, b) in self.bytes.iter_mut().zip(raw.bytes) {
            *a += b;
        }
        for (a, b) in self.reasons.iter_mut().zip(raw.reasons) {
            *a += b;
        }
    }
}

impl RouterMaps {
    /// Opens the maps pinned in `dir`.
    pub fn open_pinned(dir: &Path) -> Result<Self> {
        let [tx_ports, tx_ports_all, skb_ports, ifaces, stats, vlan_ingress, vlan_egress, locals] = xnf_core::maps::open_pinned(dir, MAP_NAMES)?;
        Ok(Self { tx_ports, tx_ports_all, skb_ports, ifaces, stats, vlan_ingress, vlan_egress, locals })
    }

    /// Makes `ifindex` a redirect target: for every instance when it is
    /// attached in driver mode, for instances in skb mode only when it is
    /// attached in skb mode itself (see tx_ports in router.bpf.c).
    pub fn add_port(&self, ifindex: u32, skb_mode: bool) -> Result<()> {
        let k = ifindex.to_ne_bytes();
        let add = |map: &MapHandle| map.update(&k, &k, MapFlags::ANY).with_context(|| format!("adding ifindex {ifindex} to the router's ports"));
        add(&self.tx_ports_all)?;
        if skb_mode {
            delete_if_present(&self.tx_ports, &k)?;
            add(&self.skb_ports)
        } else {
            delete_if_present(&self.skb_ports, &k)?;
            add(&self.tx_ports)
        }
    }

    pub fn del_port(&self, ifindex: u32) -> Result<()> {
        let k = ifindex.to_ne_bytes();
        for map in [&self.tx_ports, &self.tx_ports_all, &self.skb_ports] {
            delete_if_present(map, &k)?;
        }
        Ok(())
    }

    /// Fills an interface's slot and zeroes its counters.
    pub fn set_iface(&self, slot: u32, e: IfaceEntry) -> Result<()> {
        self.update_iface(slot, e)?;
        self.reset_stats(slot)
    }

    /// Rewrites an interface's slot (a MAC change), keeping its counters.
    pub fn update_iface(&self, slot: u32, e: IfaceEntry) -> Result<()> {
        let entry = types::xnf_router_iface { mac: e.mac, flags: e.flags, ifindex: e.ifindex, rpf: e.rpf as u8, ..Default::default() };
        self.ifaces
            .update(&slot.to_ne_bytes(), as_bytes(&entry), MapFlags::ANY)
            .context("writing the router's interface table")
    }

    /// Empties a slot (ifindex 0 marks it free).
    pub fn clear_iface(&self, slot: u32) -> Result<()> {
        let entry = types::xnf_router_iface::default();
        self.ifaces
            .update(&slot.to_ne_bytes(), as_bytes(&entry), MapFlags::ANY)
            .context("clearing the router's interface table")
    }

    /// `(slot, entry)` of every used slot.
    pub fn ifaces(&self) -> Result<Vec<(u32, IfaceEntry)>> {
        let mut out = Vec::new();
        for slot in 0..MAX_IFACES {
            if let Some(v) = self.ifaces.lookup(&slot.to_ne_bytes(), MapFlags::ANY)? {
                let e: types::xnf_router_iface = from_bytes(&v);
                if e.ifindex != 0 {
                    let rpf = Rpf::from_u32(e.rpf.into()).unwrap_or(Rpf::Off);
                    out.push((slot, IfaceEntry { ifindex: e.ifindex, mac: e.mac, flags: e.flags, rpf }));
                }
            }
        }
        Ok(out)
    }

    /// A free slot, or an error when all are used.
    pub fn free_slot(&self) -> Result<u32> {
        let used: Vec<u32> = self.ifaces()?.into_iter().map(|(s, _)| s).collect();
        (0..MAX_IFACES)
            .find(|s| !used.contains(s))
            .with_context(|| format!("the router manages {MAX_IFACES} interfaces already; detach some first"))
    }

    pub fn stats(&self, slot: u32) -> Result<Stats> {
        let mut sum = Stats::default();
        if let Some(per_cpu) = self.stats.lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)? {
            for v in per_cpu {
                sum.add(&from_bytes::<RawStats>(&v));
            }
        }
        Ok(sum)
    }

    fn reset_stats(&self, slot: u32) -> Result<()> {
        let ncpu = libbpf_rs::num_possible_cpus()?;
        let zero = vec![vec![0u8; std::mem::size_of::<RawStats>()]; ncpu];
        self.stats
            .update_percpu(&slot.to_ne_bytes(), &zero, MapFlags::ANY)
            .context("zeroing the router's counters")
    }

    /// Adds or replaces a VLAN device in both directions' tables.
    pub fn set_vlan(&self, v: VlanEntry) -> Result<()> {
        let key = types::xnf_vlan_key { ifindex: v.phys_ifindex, vid: v.vid, pad: 0 };
        let egress = types::xnf_vlan_egress { phys_ifindex: v.phys_ifindex, vid: v.vid, pad: 0 };
        let ingress = types::xnf_vlan_ingress { ifindex: v.vlan_ifindex, rpf: v.rpf as u8, ..Default::default() };
        self.vlan_ingress
            .update(as_bytes(&key), as_bytes(&ingress), MapFlags::ANY)
            .context("writing the VLAN ingress table")?;
        self.vlan_egress
            .update(&v.vlan_ifindex.to_ne_bytes(), as_bytes(&egress), MapFlags::ANY)
            .context("writing the VLAN egress table")
    }

    pub fn del_vlan(&self, v: VlanEntry) -> Result<()> {
        let key = types::xnf_vlan_key { ifindex: v.phys_ifindex, vid: v.vid, pad: 0 };
        delete_if_present(&self.vlan_ingress, as_bytes(&key))?;
        delete_if_present(&self.vlan_egress, &v.vlan_ifindex.to_ne_bytes())
    }

    /// Every VLAN device in the egress table.
    pub fn vlans(&self) -> Result<Vec<VlanEntry>> {
        let mut out = Vec::new();
        for k in self.vlan_egress.keys() {
            if let Some(v) = self.vlan_egress.lookup(&k, MapFlags::ANY)? {
                let e: types::xnf_vlan_egress = from_bytes(&v);
                let vlan_ifindex = u32::from_ne_bytes(k[..4].try_into()?);
                let key = types::xnf_vlan_key { ifindex: e.phys_ifindex, vid: e.vid, pad: 0 };
                let rpf = match self.vlan_ingress.lookup(as_bytes(&key), MapFlags::ANY)? {
                    Some(i) => Rpf::from_u32(from_bytes::<types::xnf_vlan_ingress>(&i).rpf.into()).unwrap_or(Rpf::Off),
                    None => Rpf::Off,
                };
                out.push(VlanEntry { vlan_ifindex, phys_ifindex: e.phys_ifindex, vid: e.vid, rpf });
            }
        }
        out.sort();
        Ok(out)
    }

    /// Makes the source check's table of local and broadcast addresses
    /// exactly `want`.
    pub fn set_locals(&self, want: &std::collections::BTreeSet<std::net::Ipv4Addr>) -> Result<()> {
        xnf_core::sources::write_locals(&self.locals, want)
    }

    /// The addresses in the source check's table.
    pub fn locals(&self) -> std::collections::BTreeSet<std::net::Ipv4Addr> {
        xnf_core::sources::read_locals(&self.locals)
    }
}
