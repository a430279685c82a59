//! The router program (`router.bpf.c`): loading it, and reading and
//! writing the maps all its instances share.

use std::path::Path;
use xnf_core::features::{explain, Feature};

use anyhow::{ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramMut};

pub use xnf_core::fwd::Reason;
use xnf_core::lifecycle::{pin_maps, PinnedMaps};
use xnf_core::maps::{as_bytes, delete_if_present, from_bytes, object_storage};
use xnf_core::route_cache::CacheMaps;
use xnf_core::xdp::Verdict;

use crate::skel::router::{types, RouterSkel, RouterSkelBuilder};

pub use types::xnf_router_stats as RawStats;

/// Interfaces (devmap entries, stats slots) one router can manage.
pub const MAX_IFACES: u32 = types::xnf_router_limits::XNF_ROUTER_MAX_IFACES.0;

/// `BPF_FIB_LOOKUP_DIRECT`: skip policy rules, look up the main table only.
const BPF_FIB_LOOKUP_DIRECT: u32 = 1;

/// How an instance looks routes up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum FibMode {
    /// Full lookup: policy rules, then tables (what the kernel does).
    Full,
    /// Skip policy rules; main table only (`BPF_FIB_LOOKUP_DIRECT`, faster).
    Direct,
    /// Full lookups through a route cache kept exact by the kernel and the
    /// follower (the default of `xnf router attach`).
    #[default]
    Cache,
}

impl FibMode {
    pub fn name(self) -> &'static str {
        match self {
            FibMode::Full => "full",
            FibMode::Direct => "direct",
            FibMode::Cache => "cache",
        }
    }
}

pub use xnf_core::sources::Rpf;

/// The program's name as the kernel reports it: what the forward stage holds.
pub const PROG_NAME: &str = "xnf_router";

/// Slots of the `neigh_use` table, and a neighbour's slot: the shared
/// refresher's (`xnf_core::neigh`), checked against neigh_use.h here.
pub use xnf_core::neigh::{neigh_use_slot, NEIGH_SLOTS};
const _: () = assert!(types::xnf_neigh_use_limits::XNF_NEIGH_USE_SLOTS.0 == NEIGH_SLOTS);
const _: () = assert!(types::xnf_neigh_use_limits::XNF_NEIGH_USE_SLOT_BITS.0 == xnf_core::neigh::NEIGH_SLOT_BITS);

/// The route cache's control word and step-aside bits: the shared keeper's
/// (`xnf_core::route_cache`), checked against the router's own build of
/// fib_cache.h here.
pub use xnf_core::route_cache::{aside_bits, CacheCtl, ASIDE_V4, ASIDE_V6};
const _: () = assert!(types::xnf_fib_cache_aside::XNF_FIB_ASIDE_V4.0 == ASIDE_V4);
const _: () = assert!(types::xnf_fib_cache_aside::XNF_FIB_ASIDE_V6.0 == ASIDE_V6);
const _: () = assert!(std::mem::size_of::<types::xnf_fib_ctl>() == std::mem::size_of::<xnf_core::abi::types::xnf_fib_ctl>());

/// How a router instance is built; fixed at load time (read-only data, so
/// the verifier prunes what is off). Changing them means a new instance,
/// swapped in atomically through the link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterConfig {
    /// How routes are looked up.
    pub fib: FibMode,
    /// Keep no byte counters (packets and reasons only): a few cycles less.
    pub no_bytes: bool,
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
        Self::load_with(cfg, pin_dir, false)
    }

    /// Loads only the lease program on the maps pinned in `dir`: what the
    /// follower needs, without verifying the router (which takes seconds
    /// on a busy machine). [`RouterProgram::prog`] must not be used.
    pub fn load_lease(dir: &Path) -> Result<Self> {
        Self::load_with(RouterConfig::default(), Some(dir), true)
    }

    fn load_with(cfg: RouterConfig, pin_dir: Option<&Path>, lease_only: bool) -> Result<Self> {
        let mut open = RouterSkelBuilder::default().open(object_storage()).context("opening the router BPF object")?;
        if lease_only {
            open.progs.xnf_router.set_autoload(false);
        }
        let ro = open.maps.rodata_data.as_deref_mut().context("router has no rodata")?;
        ro.fib_flags = if cfg.fib == FibMode::Direct { BPF_FIB_LOOKUP_DIRECT } else { 0 };
        ro.fib_cached = (cfg.fib == FibMode::Cache) as u8;
        ro.count_bytes = (!cfg.no_bytes) as u8;
        ro.stats_slot = cfg.slot;
        ro.generic = cfg.generic as u8;
        // One region of the route cache per possible CPU (fib_cache.h).
        let cpus = libbpf_rs::num_possible_cpus().context("counting the possible CPUs")? as u32;
        open.maps.fib_cache.set_max_entries(CACHE_SLOTS * cpus).context("sizing the route cache")?;
        if let Some(dir) = pin_dir {
            pin_maps::<RouterMaps>(open.open_object_mut(), dir)?;
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

    /// Renews the route cache's lease (see fib_cache.h): the cache is used
    /// for the next 256 jiffies.
    pub fn renew_lease(&self) -> Result<()> {
        xnf_core::route_cache::run_once(&self.skel.progs.xnf_router_lease, "renewing the route cache's lease")
    }

    /// Runs the kernel's bump (`xnf_router_notify`) once, as a notification
    /// would: for tests of the data plane's side.
    pub fn kernel_bump(&self) -> Result<()> {
        xnf_core::route_cache::run_once(&self.skel.progs.xnf_router_notify, "running the route cache's notification filter")
    }

    /// The notification filter (`xnf_router_notify`), for
    /// [`xnf_netns::netlink::Events::attach_filter`].
    pub fn notify_filter(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.skel.progs.xnf_router_notify.as_fd()
    }

    /// Handles on the instance's maps (the shared ones when pinned).
    pub fn maps(&self) -> Result<RouterMaps> {
        RouterMaps::of_object(self.skel.object())
    }
}

xnf_core::pinned_maps! {
    /// The maps shared by every router instance, as pinned.
    pub struct RouterMaps in RouterSkelBuilder {
        tx_ports,
        tx_ports_all,
        skb_ports,
        ifaces,
        stats,
        vlan_ingress,
        vlan_egress,
        locals,
        locals_filter,
        fib_ctl,
        fib_kgen,
        fib_cache,
        neigh_use,
    }
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
const _: () = assert!(std::mem::size_of::<RawStats>() == 8 * (2 * Verdict::ALL.len() + Reason::ALL.len() + CacheOutcome::ALL.len()));

/// How a lookup went through the route cache (`enum xnf_fib_cache_outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Answered from the cache.
    Hit = 0,
    /// Asked the kernel's FIB (and cached a success).
    Miss = 1,
    /// The cache was not used: no follower lease, or the family steps aside.
    Bypass = 2,
}

impl CacheOutcome {
    pub const ALL: [CacheOutcome; 3] = [CacheOutcome::Hit, CacheOutcome::Miss, CacheOutcome::Bypass];
    pub fn name(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Bypass => "bypass",
        }
    }
}
const _: () = assert!(CacheOutcome::ALL.len() == types::xnf_fib_cache_outcome::XNF_FC_MAX.0 as usize);

/// Per-interface counters summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub packets: [u64; Verdict::ALL.len()],
    pub bytes: [u64; Verdict::ALL.len()],
    pub reasons: [u64; Reason::ALL.len()],
    /// Route cache lookups per [`CacheOutcome`] (cache mode only).
    pub cache: [u64; CacheOutcome::ALL.len()],
}

impl Stats {
    pub fn cache(&self, o: CacheOutcome) -> u64 {
        self.cache[o as usize]
    }
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
        for (a, b) in d.cache.iter_mut().zip(older.cache) {
            *a = a.saturating_sub(b);
        }
        d
    }

    /// The counts of both.
    pub fn sum(&self, other: &Stats) -> Stats {
        let mut s = self.clone();
        for (a, b) in s.packets.iter_mut().zip(other.packets) {
            *a += b;
        }
        for (a, b) in s.bytes.iter_mut().zip(other.bytes) {
            *a += b;
        }
        for (a, b) in s.reasons.iter_mut().zip(other.reasons) {
            *a += b;
        }
        for (a, b) in s.cache.iter_mut().zip(other.cache) {
            *a += b;
        }
        s
    }

    /// Counts divided by `secs`, rounded.
    pub fn per_second(&self, secs: f64) -> Stats {
        let mut r = self.clone();
        let f = |v: &mut u64| *v = (*v as f64 / secs).round() as u64;
        r.packets.iter_mut().for_each(f);
        r.bytes.iter_mut().for_each(f);
        r.reasons.iter_mut().for_each(f);
        r.cache.iter_mut().for_each(f);
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
        for (a, b) in self.cache.iter_mut().zip(raw.cache) {
            *a += b;
        }
    }
}

impl RouterMaps {
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

    /// Removes an interface from the tables: its port, slot and VLANs.
    pub fn forget_iface(&self, ifindex: u32) -> Result<()> {
        self.del_port(ifindex)?;
        if let Some((slot, _)) = self.ifaces()?.into_iter().find(|(_, e)| e.ifindex == ifindex) {
            self.clear_iface(slot)?;
        }
        for v in self.vlans()? {
            if v.phys_ifindex == ifindex {
                self.del_vlan(v)?;
            }
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
        self.ifaces.update(&slot.to_ne_bytes(), as_bytes(&entry), MapFlags::ANY).context("writing the router's interface table")
    }

    /// Empties a slot (ifindex 0 marks it free).
    pub fn clear_iface(&self, slot: u32) -> Result<()> {
        let entry = types::xnf_router_iface::default();
        self.ifaces.update(&slot.to_ne_bytes(), as_bytes(&entry), MapFlags::ANY).context("clearing the router's interface table")
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
        (0..MAX_IFACES).find(|s| !used.contains(s)).with_context(|| format!("the router manages {MAX_IFACES} interfaces already; detach some first"))
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
        self.stats.update_percpu(&slot.to_ne_bytes(), &zero, MapFlags::ANY).context("zeroing the router's counters")
    }

    /// Adds or replaces a VLAN device in both directions' tables.
    pub fn set_vlan(&self, v: VlanEntry) -> Result<()> {
        let key = types::xnf_vlan_key { ifindex: v.phys_ifindex, vid: v.vid, pad: 0 };
        let egress = types::xnf_vlan_egress { phys_ifindex: v.phys_ifindex, vid: v.vid, pad: 0 };
        let ingress = types::xnf_vlan_ingress { ifindex: v.vlan_ifindex, rpf: v.rpf as u8, ..Default::default() };
        self.vlan_ingress.update(as_bytes(&key), as_bytes(&ingress), MapFlags::ANY).context("writing the VLAN ingress table")?;
        self.vlan_egress.update(&v.vlan_ifindex.to_ne_bytes(), as_bytes(&egress), MapFlags::ANY).context("writing the VLAN egress table")
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
        xnf_core::sources::write_locals(&self.locals, &self.locals_filter, want)
    }

    /// The addresses in the source check's table.
    pub fn locals(&self) -> std::collections::BTreeSet<std::net::Ipv4Addr> {
        xnf_core::sources::read_locals(&self.locals)
    }

    /// Which router these maps are: the id of its control map, new with
    /// every attach that found no router pinned (a detach and an attach
    /// give other maps under the same pins).
    pub fn id(&self) -> Result<u32> {
        self.route_cache().id()
    }

    /// The route cache's control maps, borrowed: what the thin methods
    /// below read and write through.
    pub fn route_cache(&self) -> CacheMaps<&MapHandle> {
        CacheMaps { fib_ctl: &self.fib_ctl, fib_kgen: &self.fib_kgen }
    }

    /// The route cache's control maps, for its keeper.
    pub fn into_route_cache(self) -> CacheMaps {
        CacheMaps { fib_ctl: self.fib_ctl, fib_kgen: self.fib_kgen }
    }

    /// The table of neighbours the fast path sends to (neigh_use.h).
    pub(crate) fn neigh_use_map(&self) -> &MapHandle {
        &self.neigh_use
    }

    /// The route cache's control word ([`CacheMaps::ctl`]).
    pub fn cache_ctl(&self) -> Result<CacheCtl> {
        self.route_cache().ctl()
    }

    /// The kernel's count of changes ([`CacheMaps::kernel_gen`]).
    pub fn kernel_gen(&self) -> Result<u64> {
        self.route_cache().kernel_gen()
    }

    /// Writes the control word's generation and step-aside bits
    /// ([`CacheMaps::set_ctl`]).
    pub fn set_cache_ctl(&self, gen: u32, aside: u32) -> Result<()> {
        self.route_cache().set_ctl(gen, aside)
    }

    /// Ends the lease at once ([`CacheMaps::end_lease`]).
    pub fn end_lease(&self) -> Result<()> {
        self.route_cache().end_lease()
    }

    /// Filled slots of the route cache, over every CPU's region (of any
    /// generation; a destination cached by two CPUs fills two).
    pub fn cache_len(&self) -> Result<usize> {
        Ok(self.cache_slots()?.iter().filter(|s| s.seq != 0).count())
    }

    /// The route cache as it is: every slot of every CPU's region, read
    /// through a read-only mapping of the array (one copy, no syscall per
    /// slot).
    fn cache_slots(&self) -> Result<Vec<types::xnf_fib_cache_slot>> {
        let slots = xnf_core::maps::MappedArray::new(&self.fib_cache, "the route cache")?;
        let size = std::mem::size_of::<types::xnf_fib_cache_slot>();
        ensure!(slots.value_size() == size, "the route cache's slots are {} bytes, not {size}", slots.value_size());
        Ok((0..slots.len()).map(|i| slots.get(i)).collect())
    }

    /// The cached entry for a destination, if any (of any generation), in
    /// the region of the first CPU that has one.
    pub fn cache_entry(&self, ingress: u32, dst: std::net::IpAddr, tos: u8) -> Result<Option<CacheEntry>> {
        let key = cache_key(ingress, dst, tos);
        let slots = self.fib_cache.info().context("reading the route cache's map info")?.info.max_entries;
        // The key's slot in each CPU's region: one lookup per CPU.
        for idx in (cache_slot(&key)..slots).step_by(CACHE_SLOTS as usize) {
            let Some(v) = self.fib_cache.lookup(&idx.to_ne_bytes(), MapFlags::ANY)? else { continue };
            let s: types::xnf_fib_cache_slot = from_bytes(&v);
            if s.seq != 0 && s.seq.is_multiple_of(2) && as_bytes(&s.key) == as_bytes(&key) {
                return Ok(Some(CacheEntry { gen: s.e.gen, ifindex: s.e.ifindex, mtu: s.e.mtu, dmac: s.e.dmac, smac: s.e.smac }));
            }
        }
        Ok(None)
    }
}

/// Slots of one CPU's region of the route cache.
pub const CACHE_SLOTS: u32 = types::xnf_fib_cache_limits::XNF_FIB_CACHE_SLOTS.0;
const CACHE_SLOT_BITS: u32 = types::xnf_fib_cache_limits::XNF_FIB_CACHE_SLOT_BITS.0;
const _: () = assert!(1 << CACHE_SLOT_BITS == CACHE_SLOTS);

/// The route cache's key of a lookup, as `fib_lookup_cached` builds it.
fn cache_key(ingress: u32, dst: std::net::IpAddr, tos: u8) -> types::xnf_fib_cache_key {
    let mut key = types::xnf_fib_cache_key { ifindex: ingress, ..Default::default() };
    match dst {
        std::net::IpAddr::V4(a) => {
            key.family = libc::AF_INET as u8;
            key.tos = tos & 0xfc;
            key.dst[0] = u32::from_ne_bytes(a.octets());
        }
        std::net::IpAddr::V6(a) => {
            key.family = libc::AF_INET6 as u8;
            for (w, c) in key.dst.iter_mut().zip(a.octets().chunks_exact(4)) {
                *w = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
    }
    key
}

/// A key's slot in a CPU's region: `fib_cache_slot` in fib_cache.h.
fn cache_slot(k: &types::xnf_fib_cache_key) -> u32 {
    const M: [u64; 6] =
        [0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f, 0x1656_67b1_9e37_79f9, 0x27d4_eb2f_1656_67c5, 0x85eb_ca77_c2b2_ae63, 0xff51_afd7_ed55_8ccd];
    let words = [k.dst[0], k.dst[1], k.dst[2], k.dst[3], k.ifindex, k.tos as u32];
    let h = words.iter().zip(M).fold(0u64, |h, (w, m)| h.wrapping_add((*w as u64).wrapping_mul(m)));
    (h >> (64 - CACHE_SLOT_BITS)) as u32
}

/// A destination's slot in a CPU's region of the route cache (for models
/// of the cache: two keys on one slot evict each other).
pub fn cache_slot_of(ingress: u32, dst: std::net::IpAddr, tos: u8) -> u32 {
    cache_slot(&cache_key(ingress, dst, tos))
}

/// One route cache entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    pub gen: u32,
    pub ifindex: u32,
    pub mtu: u16,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
}
