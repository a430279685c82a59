//! The lb program (`lb.bpf.c`): loading it, and reading and writing the
//! maps all its instances share.

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType, ProgramMut};
use xnf_core::lifecycle::{pin_maps, PinnedMaps};
use xnf_core::maps::{as_bytes, delete_if_present, from_bytes, object_storage};

use crate::skel::lb::{types, LbSkel, LbSkelBuilder};

pub use types::xnf_lb_backend as RawBackend;
pub use types::xnf_lb_config as RawConfig;
pub use types::xnf_lb_flow as RawFlow;
pub use types::xnf_lb_service as RawService;
pub use types::xnf_lb_service_key as RawServiceKey;

pub const MAX_SERVICES: u32 = types::xnf_lb_limits::XNF_LB_MAX_SERVICES.0;
pub const TABLE_SLOTS: u32 = types::xnf_lb_limits::XNF_LB_TABLE_SLOTS.0;
pub const MAX_BACKEND_IDS: u32 = types::xnf_lb_limits::XNF_LB_MAX_BACKENDS.0;
pub const CT_ENTRIES: u32 = types::xnf_lb_limits::XNF_LB_CT_ENTRIES.0;
pub const QUOTE4: u32 = types::xnf_lb_limits::XNF_LB_QUOTE4.0;
pub const QUOTE6: u32 = types::xnf_lb_limits::XNF_LB_QUOTE6.0;
pub const OUTER_TTL: u8 = types::xnf_lb_limits::XNF_LB_OUTER_TTL.0 as u8;

const _: () = assert!(MAX_SERVICES as usize == crate::config::MAX_SERVICES);
const _: () = assert!(TABLE_SLOTS == 2 * MAX_SERVICES);
const _: () = assert!(MAX_BACKEND_IDS as usize == crate::config::MAX_TOTAL_BACKENDS);
const _: () = assert!(types::xnf_lb_limits::XNF_LB_NONE.0 == crate::maglev::NO_BACKEND);

xnf_core::c_enum! {
    /// The lb's counters (`enum xnf_lb_counter`).
    pub enum Counter: types::xnf_lb_counter, max XNF_LB_COUNTERS {
        Rx = XNF_LB_RX => "rx",
        Continue = XNF_LB_CONTINUE => "continue",
        Tx = XNF_LB_TX => "tx",
        Redirect = XNF_LB_REDIRECT => "redirect",
        Pass = XNF_LB_PASS => "pass",
        Drop = XNF_LB_DROP => "drop",
        CtHit = XNF_LB_CT_HIT => "ct-hit",
        CtMiss = XNF_LB_CT_MISS => "ct-miss",
        CtSyn = XNF_LB_CT_SYN => "ct-syn",
        CtStale = XNF_LB_CT_STALE => "ct-stale",
        IcmpRouted = XNF_LB_ICMP_ROUTED => "icmp-routed",
        IcmpSent = XNF_LB_ICMP_SENT => "icmp-sent",
        NonIp = XNF_LB_NON_IP => "non-ip",
        Malformed = XNF_LB_MALFORMED => "malformed",
        Qinq = XNF_LB_QINQ => "qinq",
        NotService = XNF_LB_NOT_SERVICE => "not-service",
        Fragment = XNF_LB_FRAGMENT => "fragment",
        IpOptions = XNF_LB_IP_OPTIONS => "ip-options",
        Ipv6Hbh = XNF_LB_IPV6_HBH => "ipv6-hbh",
        NoPorts = XNF_LB_NO_PORTS => "no-ports",
        Vlan = XNF_LB_VLAN => "vlan",
        IcmpOther = XNF_LB_ICMP_OTHER => "icmp-other",
        NoRoute = XNF_LB_NO_ROUTE => "no-route",
        FwdDisabled = XNF_LB_FWD_DISABLED => "fwd-disabled",
        NoNeigh = XNF_LB_NO_NEIGH => "no-neigh",
        NotManaged = XNF_LB_NOT_MANAGED => "not-managed",
        NoSource = XNF_LB_NO_SOURCE => "no-source",
        Error = XNF_LB_ERROR => "error",
        NoBackend = XNF_LB_NO_BACKEND => "no-backend",
        NotOurMac = XNF_LB_NOT_OUR_MAC => "not-our-mac",
        DsrNotOnlink = XNF_LB_DSR_NOT_ONLINK => "dsr-not-onlink",
        TooBig = XNF_LB_TOO_BIG => "too-big",
    }
}

/// The lb's counters summed over CPUs, indexed by [`Counter`].
pub type Counters = [u64; Counter::ALL.len()];
const _: () = assert!(std::mem::size_of::<types::xnf_lb_stats>() == 8 * Counter::ALL.len());

/// Traffic of one service, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ServiceCounters {
    pub packets: u64,
    pub bytes: u64,
    /// Flows the table decided (new flows, SYNs, stale entries).
    pub flows: u64,
    pub no_backend: u64,
}

/// Traffic of one backend, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackendCounters {
    pub packets: u64,
    pub bytes: u64,
}

/// The address words the data plane keys on: network order, IPv4 in word 0.
pub fn addr_words(a: IpAddr) -> ([u32; 4], u8) {
    let mut w = [0u32; 4];
    match a {
        IpAddr::V4(v4) => {
            w[0] = u32::from_ne_bytes(v4.octets());
            (w, libc::AF_INET as u8)
        }
        IpAddr::V6(v6) => {
            for (i, c) in v6.octets().chunks(4).enumerate() {
                w[i] = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
            }
            (w, libc::AF_INET6 as u8)
        }
    }
}

/// An address as the `vips` (and decap's `locals`) map keys it.
pub fn addr_key(a: IpAddr) -> Vec<u8> {
    let (addr, family) = addr_words(a);
    as_bytes(&types::xnf_lb_addr { addr, family: u32::from(family) }).to_vec()
}

/// One loaded lb instance (one per interface: its "continue" reaches that
/// interface's later stages).
pub struct LbProgram {
    skel: LbSkel<'static>,
}

impl LbProgram {
    /// Loads an instance; with `pin_dir` its maps are shared through pins
    /// there, with `stages` it continues to that interface's later stages.
    pub fn load(pin_dir: Option<&Path>, stages: Option<&MapHandle>) -> Result<Self> {
        Self::load_with(pin_dir, stages, false)
    }

    /// The route cache's lease and notification programs alone, on the
    /// maps pinned in `dir` (for its keeper; never attached).
    pub fn load_lease(dir: &Path) -> Result<Self> {
        Self::load_with(Some(dir), None, true)
    }

    fn load_with(pin_dir: Option<&Path>, stages: Option<&MapHandle>, lease_only: bool) -> Result<Self> {
        let mut open = LbSkelBuilder::default().open(object_storage()).context("opening the lb BPF object")?;
        // The stage runs without them; the keeper without the stage.
        open.progs.xnf_lb.set_autoload(!lease_only);
        open.progs.xnf_lb_lease.set_autoload(lease_only);
        open.progs.xnf_lb_notify.set_autoload(lease_only);
        // One region of the route cache per possible CPU (fib_cache.h).
        let cpus = libbpf_rs::num_possible_cpus().context("counting the possible CPUs")? as u32;
        open.maps.fib_cache.set_max_entries(xnf_core::route_cache::SLOTS * cpus).context("sizing the route cache")?;
        if let Some(dir) = pin_dir {
            pin_maps::<LbMaps>(open.open_object_mut(), dir)?;
        }
        if let Some(s) = stages {
            xnf_core::entry::reuse_stages(&mut open.maps.xnf_stages, s)?;
        }
        let skel = open.load().context("loading the lb into the kernel failed (verifier or missing BPF support; see `dmesg`)")?;
        Ok(Self { skel })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_lb
    }

    /// Renews the route cache's lease (its program, by BPF_PROG_TEST_RUN:
    /// the lease is in jiffies, which user space cannot read).
    pub fn renew_lease(&self) -> Result<()> {
        xnf_core::route_cache::run_once(&self.skel.progs.xnf_lb_lease, "renewing the lb's route cache lease")
    }

    /// The notification filter (`xnf_lb_notify`) for the keeper's socket.
    pub fn notify_filter(&self) -> std::os::fd::BorrowedFd<'_> {
        self.skel.progs.xnf_lb_notify.as_fd()
    }

    pub fn maps(&self) -> Result<LbMaps> {
        LbMaps::of_object(self.skel.object())
    }
}

xnf_core::pinned_maps! {
    /// The maps shared by every lb instance, as pinned.
    pub struct LbMaps in LbSkelBuilder {
        services,
        vips,
        tables,
        backends,
        /// The connection table (tests empty it).
        pub conntrack,
        encap_cfg,
        stats,
        service_stats,
        backend_stats,
        tx_ports,
        /// Each lb interface's own MAC: frames to another are not balanced.
        own_macs,
        /// The control plane's generation and each CPU's cache of the
        /// answers of `services` and `own_macs` it validates (lb.bpf.c;
        /// tests put the generation back).
        pub lb_gen,
        svc_cache,
        /// Neighbours the program sends to, and the epoch it stamps with
        /// (neigh_use.h; the daemon keeps them confirmed).
        pub neigh_use,
        pub neigh_epoch,
        /// The route cache to the backends (fib_cache.h), its control word
        /// and the kernel's count of changes; kept by the daemon.
        pub fib_ctl,
        pub fib_kgen,
        pub fib_cache,
    }
}

impl LbMaps {
    pub fn set_config(&self, c: &RawConfig) -> Result<()> {
        self.encap_cfg.update(&0u32.to_ne_bytes(), as_bytes(c), MapFlags::ANY).context("writing the outer source prefixes")
    }

    pub fn set_backend(&self, id: u32, b: &RawBackend) -> Result<()> {
        self.backends.update(&id.to_ne_bytes(), as_bytes(b), MapFlags::ANY).context("writing a backend record")
    }

    pub fn backend(&self, id: u32) -> Result<RawBackend> {
        Ok(self.backends.lookup(&id.to_ne_bytes(), MapFlags::ANY)?.map(|v| from_bytes(&v)).unwrap_or_default())
    }

    /// Fills table slot `slot` with a new table of backend ids.
    pub fn set_table(&self, slot: u32, entries: &[u32]) -> Result<()> {
        // The flags must equal the template's (BPF_F_INNER_MAP: sizes may differ).
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            map_flags: libbpf_sys::BPF_F_INNER_MAP,
            ..Default::default()
        };
        let n = entries.len() as u32;
        let inner = MapHandle::create(MapType::Array, Some("xnf_lb_table"), 4, 4, n, &opts).context("creating a Maglev table for the data plane")?;
        let keys: Vec<u8> = (0..n).flat_map(|i| i.to_ne_bytes()).collect();
        let values: Vec<u8> = entries.iter().flat_map(|e| e.to_ne_bytes()).collect();
        const CHUNK: usize = 65536;
        for (k, v) in keys.chunks(4 * CHUNK).zip(values.chunks(4 * CHUNK)) {
            inner
                .update_batch(k, v, (k.len() / 4) as u32, MapFlags::ANY, MapFlags::ANY)
                .or_else(|_| k.chunks(4).zip(v.chunks(4)).try_for_each(|(kk, vv)| inner.update(kk, vv, MapFlags::ANY)))
                .context("filling a Maglev table")?;
        }
        let fd = inner.as_fd().as_raw_fd() as u32;
        self.tables.update(&slot.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY).context("installing a Maglev table")
    }

    /// The backend ids table slot `slot` holds, read back whole from the
    /// kernel; `None` when the slot is empty or could not be read whole.
    pub fn table(&self, slot: u32) -> Result<Option<Vec<u32>>> {
        let Some(id) = self.tables.lookup(&slot.to_ne_bytes(), MapFlags::ANY)? else { return Ok(None) };
        let id = u32::from_ne_bytes(id[..4].try_into().context("a table slot's map id")?);
        let inner = MapHandle::from_map_id(id).context("opening a Maglev table")?;
        let mut entries = vec![0u32; inner.max_entries() as usize];
        let mut read = 0;
        for (k, v) in inner.lookup_batch(65536, MapFlags::ANY, MapFlags::ANY)? {
            let (Ok(k), Ok(v)) = (<[u8; 4]>::try_from(&k[..]), <[u8; 4]>::try_from(&v[..])) else { return Ok(None) };
            let Some(e) = entries.get_mut(u32::from_ne_bytes(k) as usize) else { return Ok(None) };
            *e = u32::from_ne_bytes(v);
            read += 1;
        }
        Ok((read == entries.len()).then_some(entries))
    }

    pub fn clear_table(&self, slot: u32) -> Result<()> {
        delete_if_present(&self.tables, &slot.to_ne_bytes())
    }

    pub fn set_service(&self, key: &RawServiceKey, s: &RawService) -> Result<()> {
        self.services.update(as_bytes(key), as_bytes(s), MapFlags::ANY).context("writing a service")?;
        self.move_on()
    }

    pub fn delete_service(&self, key: &RawServiceKey) -> Result<()> {
        delete_if_present(&self.services, as_bytes(key))?;
        self.move_on()
    }

    /// Moves the generation on after a write of `services` or `own_macs`:
    /// every CPU's service cache slot filled before it stops matching
    /// (lb.bpf.c). After the write, so that a frame that sees the new
    /// generation finds the new record. One writer: the lb's lock.
    fn move_on(&self) -> Result<()> {
        let gen = self.lb_gen.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?.and_then(|v| v.try_into().ok()).map(u64::from_ne_bytes).unwrap_or(0);
        self.lb_gen.update(&0u32.to_ne_bytes(), &(gen + 1).to_ne_bytes(), MapFlags::ANY).context("moving the lb's generation on")
    }

    pub fn service(&self, key: &RawServiceKey) -> Result<Option<RawService>> {
        Ok(self.services.lookup(as_bytes(key), MapFlags::ANY)?.map(|v| from_bytes(&v)))
    }

    /// Every service key the data plane holds.
    pub fn service_keys(&self) -> Vec<RawServiceKey> {
        self.services.keys().map(|k| from_bytes(&k)).collect()
    }

    pub fn add_vip(&self, a: IpAddr) -> Result<()> {
        self.vips.update(&addr_key(a), &1u32.to_ne_bytes(), MapFlags::ANY).context("writing a VIP")
    }

    pub fn vip_keys(&self) -> Vec<Vec<u8>> {
        self.vips.keys().collect()
    }

    pub fn delete_vip_key(&self, k: &[u8]) -> Result<()> {
        delete_if_present(&self.vips, k)
    }

    pub fn counters(&self) -> Result<Counters> {
        xnf_core::maps::sum_percpu(&self.stats, 0)
    }

    pub fn service_counters(&self, id: u32) -> Result<ServiceCounters> {
        let [packets, bytes, flows, no_backend] = xnf_core::maps::sum_percpu::<4>(&self.service_stats, id)?;
        Ok(ServiceCounters { packets, bytes, flows, no_backend })
    }

    pub fn backend_counters(&self, id: u32) -> Result<BackendCounters> {
        let [packets, bytes] = xnf_core::maps::sum_percpu::<2>(&self.backend_stats, id)?;
        Ok(BackendCounters { packets, bytes })
    }

    pub fn reset_service_counters(&self, id: u32) -> Result<()> {
        xnf_core::maps::zero_percpu::<types::xnf_lb_service_stats>(&self.service_stats, id)
    }

    pub fn reset_backend_counters(&self, id: u32) -> Result<()> {
        xnf_core::maps::zero_percpu::<types::xnf_lb_backend_stats>(&self.backend_stats, id)
    }

    /// Entries in the connection table (a walk over its keys).
    pub fn conntrack_fill(&self) -> u64 {
        self.conntrack.keys().count() as u64
    }

    /// The backend id a flow's connection-table entry names, if it has one.
    pub fn conntrack_entry(&self, flow: &RawFlow) -> Result<Option<(u32, u32)>> {
        Ok(self.conntrack.lookup(as_bytes(flow), MapFlags::ANY)?.map(|v| {
            let e: types::xnf_lb_flow_backend = from_bytes(&v);
            (e.id, e.gen)
        }))
    }

    /// Lets the data plane redirect to `ifindex`.
    pub fn add_port(&self, ifindex: u32) -> Result<()> {
        self.tx_ports.update(&ifindex.to_ne_bytes(), &ifindex.to_ne_bytes(), MapFlags::ANY).context("adding an egress port")
    }

    pub fn remove_port(&self, ifindex: u32) -> Result<()> {
        delete_if_present(&self.tx_ports, &ifindex.to_ne_bytes())
    }

    /// Makes `mac` the MAC whose frames the lb balances on `ifindex`.
    pub fn set_own_mac(&self, ifindex: u32, mac: [u8; 6]) -> Result<()> {
        let v = types::xnf_lb_mac { addr: mac, pad: 0 };
        self.own_macs.update(&ifindex.to_ne_bytes(), as_bytes(&v), MapFlags::ANY).context("writing an lb interface's MAC")?;
        self.move_on()
    }

    pub fn remove_own_mac(&self, ifindex: u32) -> Result<()> {
        delete_if_present(&self.own_macs, &ifindex.to_ne_bytes())?;
        self.move_on()
    }

    /// The interfaces and MACs the data plane takes frames for.
    pub fn own_macs(&self) -> Result<Vec<(u32, [u8; 6])>> {
        let mut v = Vec::new();
        for k in self.own_macs.keys() {
            let Some(m) = self.own_macs.lookup(&k, MapFlags::ANY)? else { continue };
            let m: types::xnf_lb_mac = from_bytes(&m);
            v.push((u32::from_ne_bytes(k[..4].try_into().context("an ifindex")?), m.addr));
        }
        Ok(v)
    }
}

/// The connection-table key of a flow.
pub fn raw_flow(f: &crate::flow::Flow) -> RawFlow {
    let (src, family) = addr_words(f.src);
    let (dst, _) = addr_words(f.dst);
    RawFlow { src, dst, sport: f.sport, dport: f.dport, family, proto: f.proto.number(), pad: 0 }
}
