//! The chain program (`chain.bpf.c`): loading it once, and the tables
//! every attachment of it shares (ports, classifier rules, NFs, devmap,
//! counters). The control plane in `xnf chain` keeps them in step with its
//! registry; the packet tests fill them directly.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use xnf_core::features::{explain, Feature};

use xnf_core::entry::Stage;
use xnf_core::lifecycle::{StageNf, Target};
use xnf_core::xdp::{open_pinned, pin_fd};

use anyhow::{ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, ProgramMut};

use xnf_core::class::Class;
pub use xnf_core::fwd::Reason;
use xnf_core::lifecycle::{pin_maps, PinnedMaps};
use xnf_core::maps::{as_bytes, delete_if_present, from_bytes, object_storage, percpu_sum, swap, zero_percpu, PercpuSums};
pub use xnf_core::sources::Rpf;

use crate::skel::chain::{types, ChainSkel, ChainSkelBuilder};

use types::xnf_chain_limits as limits;

pub const MAX_RULES: u32 = limits::XNF_CHAIN_MAX_RULES.0;
pub const MAX_CHAINS: u32 = limits::XNF_CHAIN_MAX_CHAINS.0;
pub const MAX_NFS: u32 = limits::XNF_CHAIN_MAX_NFS.0;
pub const MAX_INGRESS: u32 = limits::XNF_CHAIN_MAX_INGRESS.0;

/// Name of the pinned program.
pub const PROG_PIN: &str = "prog";

const PORT_INGRESS: u8 = types::xnf_chain_port_kind::XNF_PORT_INGRESS.0 as u8;
const PORT_NF: u8 = types::xnf_chain_port_kind::XNF_PORT_NF.0 as u8;

/// What an interface carrying the chain program is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// Classifies and steers; `slot` is its stats slot.
    Ingress { mac: [u8; 6], slot: u32 },
    /// Host end of NF `slot`'s veth; `rpf`: its reverse-path filter (the
    /// exit's source check).
    Nf { slot: u32, rpf: Rpf },
}

/// One class of traffic entering a chain, in classifier order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub ifindex: u32,
    /// Chain stats slot.
    pub chain: u32,
    /// Slot of the first NF; `None`: the chain is down and drops its class.
    pub first_nf: Option<u32>,
    pub class: Class,
    /// Drop frames that may be in the class but whose L4 header cannot be
    /// read (else they go into the NF like the class).
    pub unsure_drop: bool,
}

impl Rule {
    fn to_raw(&self) -> Result<types::xnf_chain_rule> {
        // The same C struct (xnf/classify.h) in this skeleton's types.
        let m: types::xnf_match = from_bytes(as_bytes(&self.class.to_raw()?));
        let flags = if self.unsure_drop { types::xnf_rule_flag::XNF_RULE_UNSURE_DROP.0 } else { 0 };
        Ok(types::xnf_chain_rule { ifindex: self.ifindex, chain: self.chain, first_nf: self.first_nf.map_or(0, |s| s + 1), flags, m })
    }
}

/// An NF as the data plane sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NfEntry {
    /// Host end of its veth.
    pub ifindex: u32,
    /// Slot of the NF its output goes to; `None`: routed out by the FIB.
    pub next: Option<u32>,
    pub host_mac: [u8; 6],
    pub nf_mac: [u8; 6],
}

xnf_core::c_enum! {
    /// What happened to frames arriving on an ingress (`enum xnf_ingress_reason`).
    pub enum IngressReason: types::xnf_ingress_reason, max XNF_IN_MAX {
        Steered = XNF_IN_STEERED => "steered",
        NoMatch = XNF_IN_NO_MATCH => "no-match",
        NotOurMac = XNF_IN_NOT_OUR_MAC => "not-our-mac",
        NonIp = XNF_IN_NON_IP => "non-ip",
        Malformed = XNF_IN_MALFORMED => "malformed",
        Qinq = XNF_IN_QINQ => "qinq",
        Down = XNF_IN_DOWN => "chain-down",
        NfGone = XNF_IN_NF_GONE => "nf-gone",
        UnsureSteered = XNF_IN_UNSURE_STEERED => "l4-unknown-steered",
        UnsureDropped = XNF_IN_UNSURE_DROPPED => "l4-unknown-dropped",
        Multicast = XNF_IN_MULTICAST => "broadcast-multicast",
    }
}

// The counter arrays of the C structs hold one counter per value of their enums.
const _: () = assert!(std::mem::size_of::<types::xnf_ingress_stats>() == 8 * IngressReason::ALL.len());
const _: () = assert!(std::mem::size_of::<types::xnf_nf_stats>() == 8 * (5 + Reason::ALL.len()));

/// Counters of one ingress, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressStats {
    pub packets: [u64; IngressReason::ALL.len()],
}

impl IngressStats {
    pub fn get(&self, r: IngressReason) -> u64 {
        self.packets[r as usize]
    }
    /// Adds one CPU's counters.
    fn add(&mut self, r: &types::xnf_ingress_stats) {
        for (a, b) in self.packets.iter_mut().zip(r.packets) {
            *a += b;
        }
    }
}

/// Counters of one NF, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NfStats {
    pub in_packets: u64,
    pub in_bytes: u64,
    pub out_packets: u64,
    pub out_bytes: u64,
    /// Frames that could not be sent in (its port vanished): dropped.
    pub gone: u64,
    /// Frames leaving the chain after this NF, by router reason.
    pub exit: [u64; Reason::ALL.len()],
}

impl NfStats {
    /// Adds one CPU's counters.
    fn add(&mut self, r: &types::xnf_nf_stats) {
        self.in_packets += r.in_packets;
        self.in_bytes += r.in_bytes;
        self.out_packets += r.out_packets;
        self.out_bytes += r.out_bytes;
        self.gone += r.gone;
        for (a, b) in self.exit.iter_mut().zip(r.exit) {
            *a += b;
        }
    }
    pub fn exit(&self, r: Reason) -> u64 {
        self.exit[r as usize]
    }
    /// Frames that left after this NF for the kernel path (all but forwarded).
    pub fn exit_to_kernel(&self) -> u64 {
        self.exit.iter().sum::<u64>() - self.exit(Reason::Forwarded)
    }
}

/// Every counter of the first slots of each table, read at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub ingress: Vec<IngressStats>,
    /// (packets, bytes) per chain slot.
    pub chains: Vec<(u64, u64)>,
    pub nfs: Vec<NfStats>,
}

/// Reads the counters of the first slots of each table with one system
/// call per table ([`ChainMaps::counters`]), for readers that look often.
pub struct CounterReader {
    ingress: PercpuSums<types::xnf_ingress_stats>,
    chains: PercpuSums<types::xnf_chain_stats>,
    nfs: PercpuSums<types::xnf_nf_stats>,
}

impl CounterReader {
    /// For ingress slots `0..ingress`, chain slots `0..chains`, NF slots `0..nfs`.
    pub fn new(ingress: u32, chains: u32, nfs: u32) -> Result<Self> {
        Ok(CounterReader { ingress: PercpuSums::new(ingress)?, chains: PercpuSums::new(chains)?, nfs: PercpuSums::new(nfs)? })
    }
}

/// The chain program, loaded once; every port attaches this same program.
pub struct ChainProgram {
    skel: ChainSkel<'static>,
}

impl ChainProgram {
    /// Loads the program. With `pin_dir`, its maps are pinned there (or
    /// reused from there when an earlier load pinned them).
    pub fn load(pin_dir: Option<&Path>) -> Result<Self> {
        let mut open = ChainSkelBuilder::default().open(object_storage()).context("opening the chain BPF object")?;
        if let Some(dir) = pin_dir {
            pin_maps::<ChainMaps>(open.open_object_mut(), dir)?;
        }
        let skel = open
            .load()
            .context("loading the chain program into the kernel failed (verifier or missing BPF support; see `dmesg`)")
            .map_err(|e| explain(e, &[Feature::DevmapHash]))?;
        Ok(Self { skel })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_chain
    }

    pub fn maps(&self) -> Result<ChainMaps> {
        ChainMaps::of_object(self.skel.object())
    }
}

xnf_core::pinned_maps! {
    /// The chain's shared maps, as pinned.
    pub struct ChainMaps in ChainSkelBuilder {
        ports,
        rules,
        nfs,
        tx,
        ingress_stats,
        chain_stats,
        nf_stats,
        locals,
        locals_filter,
        /// Neighbours the program sends to, and the epoch it stamps with
        /// (neigh_use.h; the daemon keeps them confirmed).
        pub neigh_use,
        pub neigh_epoch,
    }
}

impl ChainMaps {
    pub fn set_port(&self, ifindex: u32, port: Port) -> Result<()> {
        let raw = match port {
            Port::Ingress { mac, slot } => types::xnf_chain_port { kind: PORT_INGRESS, mac, slot, ..Default::default() },
            Port::Nf { slot, rpf } => types::xnf_chain_port { kind: PORT_NF, rpf: rpf as u8, slot, ..Default::default() },
        };
        self.ports.update(&ifindex.to_ne_bytes(), as_bytes(&raw), MapFlags::ANY).context("writing the chain's port table")
    }

    pub fn del_port(&self, ifindex: u32) -> Result<()> {
        delete_if_present(&self.ports, &ifindex.to_ne_bytes())
    }

    /// Every port, by ifindex.
    pub fn ports(&self) -> Result<Vec<(u32, Port)>> {
        let mut out = Vec::new();
        for k in self.ports.keys() {
            let ifindex = u32::from_ne_bytes(k[..4].try_into()?);
            if let Some(v) = self.ports.lookup(&k, MapFlags::ANY)? {
                let p: types::xnf_chain_port = from_bytes(&v);
                let port = if p.kind == PORT_NF {
                    Port::Nf { slot: p.slot, rpf: Rpf::from_u32(p.rpf.into()).unwrap_or_default() }
                } else {
                    Port::Ingress { mac: p.mac, slot: p.slot }
                };
                out.push((ifindex, port));
            }
        }
        out.sort_by_key(|(i, _)| *i);
        Ok(out)
    }

    /// Replaces the whole rule list at once (a new table swapped in, see
    /// [`xnf_core::maps::swap`]): packets see the old rules or the new.
    pub fn set_rules(&self, rules: &[Rule]) -> Result<()> {
        ensure!(rules.len() <= MAX_RULES as usize, "{} rules; the chain classifier holds {MAX_RULES}", rules.len());
        let raw = rules.iter().map(|r| Ok(as_bytes(&r.to_raw()?).to_vec())).collect::<Result<Vec<_>>>()?;
        swap::replace(&self.rules, std::mem::size_of::<types::xnf_chain_rule>() as u32, MAX_RULES, &raw).context("writing the chain rules")
    }

    /// The ifindex, chain slot and first NF (slot + 1, 0 = down) of every live rule.
    pub fn live_rules(&self) -> Result<Vec<(u32, u32, u32)>> {
        let mut out = Vec::new();
        let Some(table) = swap::current(&self.rules)? else { return Ok(out) };
        for i in 0..MAX_RULES {
            let v = table.lookup(&i.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
            let r: types::xnf_chain_rule = from_bytes(&v);
            if r.ifindex == 0 {
                break;
            }
            out.push((r.ifindex, r.chain, r.first_nf));
        }
        Ok(out)
    }

    pub fn set_nf(&self, slot: u32, e: NfEntry) -> Result<()> {
        ensure!(slot < MAX_NFS, "NF slot {slot} out of range");
        let raw = types::xnf_chain_nf { ifindex: e.ifindex, next: e.next.map_or(0, |s| s + 1), host_mac: e.host_mac, nf_mac: e.nf_mac };
        self.nfs.update(&slot.to_ne_bytes(), as_bytes(&raw), MapFlags::ANY).context("writing the NF table")
    }

    pub fn clear_nf(&self, slot: u32) -> Result<()> {
        self.nfs.update(&slot.to_ne_bytes(), as_bytes(&types::xnf_chain_nf::default()), MapFlags::ANY).context("clearing the NF table")
    }

    pub fn nf(&self, slot: u32) -> Result<NfEntry> {
        let v = self.nfs.lookup(&slot.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
        let r: types::xnf_chain_nf = from_bytes(&v);
        Ok(NfEntry { ifindex: r.ifindex, next: r.next.checked_sub(1), host_mac: r.host_mac, nf_mac: r.nf_mac })
    }

    /// Makes `ifindex` a redirect target (an NF port or an egress).
    pub fn add_tx(&self, ifindex: u32) -> Result<()> {
        self.tx.update(&ifindex.to_ne_bytes(), &ifindex.to_ne_bytes(), MapFlags::ANY).with_context(|| format!("adding ifindex {ifindex} to the chain's devmap"))
    }

    pub fn del_tx(&self, ifindex: u32) -> Result<()> {
        delete_if_present(&self.tx, &ifindex.to_ne_bytes())
    }

    pub fn tx_ports(&self) -> Result<Vec<u32>> {
        let mut v: Vec<u32> = self.tx.keys().map(|k| u32::from_ne_bytes(k[..4].try_into().unwrap())).collect();
        v.sort();
        Ok(v)
    }

    pub fn ingress_stats(&self, slot: u32) -> Result<IngressStats> {
        let mut s = IngressStats::default();
        percpu_sum::<types::xnf_ingress_stats>(&self.ingress_stats, slot, |r| s.add(r))?;
        Ok(s)
    }

    /// (packets, bytes) that matched chain `slot`.
    pub fn chain_stats(&self, slot: u32) -> Result<(u64, u64)> {
        let mut s = (0, 0);
        percpu_sum::<types::xnf_chain_stats>(&self.chain_stats, slot, |r| {
            s.0 += r.packets;
            s.1 += r.bytes;
        })?;
        Ok(s)
    }

    pub fn nf_stats(&self, slot: u32) -> Result<NfStats> {
        let mut s = NfStats::default();
        percpu_sum::<types::xnf_nf_stats>(&self.nf_stats, slot, |r| s.add(r))?;
        Ok(s)
    }

    /// The counters of the slots `reader` was made for.
    pub fn counters(&self, reader: &mut CounterReader) -> Result<Counters> {
        let ingress = reader.ingress.read(&self.ingress_stats)?.iter().map(|r| IngressStats { packets: r.packets }).collect();
        let chains = reader.chains.read(&self.chain_stats)?.iter().map(|r| (r.packets, r.bytes)).collect();
        let nfs = reader
            .nfs
            .read(&self.nf_stats)?
            .iter()
            .map(|r| NfStats { in_packets: r.in_packets, in_bytes: r.in_bytes, out_packets: r.out_packets, out_bytes: r.out_bytes, gone: r.gone, exit: r.exit })
            .collect();
        Ok(Counters { ingress, chains, nfs })
    }

    /// Zeroes the counters of a slot about to be reused.
    pub fn reset_ingress_stats(&self, slot: u32) -> Result<()> {
        zero_percpu::<types::xnf_ingress_stats>(&self.ingress_stats, slot)
    }
    pub fn reset_chain_stats(&self, slot: u32) -> Result<()> {
        zero_percpu::<types::xnf_chain_stats>(&self.chain_stats, slot)
    }
    pub fn reset_nf_stats(&self, slot: u32) -> Result<()> {
        zero_percpu::<types::xnf_nf_stats>(&self.nf_stats, slot)
    }

    /// Makes the exit's table of local and broadcast addresses exactly `want`.
    pub fn set_locals(&self, want: &std::collections::BTreeSet<std::net::Ipv4Addr>) -> Result<()> {
        xnf_core::sources::write_locals(&self.locals, &self.locals_filter, want)
    }
}

/// What the tables must hold, as the control plane derives it from the
/// registry (`dataplane::plan`).
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub ports: BTreeMap<u32, Port>,
    pub tx: BTreeSet<u32>,
    pub nfs: BTreeMap<u32, NfEntry>,
    pub rules: Vec<Rule>,
    pub warnings: Vec<String>,
}

/// The chain as a stage network function: one program, pinned with its
/// maps, is the forward stage of every port; which ports, and their
/// entries, [`sync`] derives from the registry.
pub struct Chain;

impl StageNf for Chain {
    const NAME: &'static str = "chain";
    const TITLE: &'static str = "the chain";
    const COMMAND: &'static str = "xnf chain";
    const PROG_NAME: &'static str = "xnf_chain";
    const BUILD: &'static str = crate::skel::chain::BUILD;
    const STAGE: Stage = Stage::Forward;
    const ETHERNET_WHY: &'static str = "the chain steers Ethernet frames";
    type Maps = ChainMaps;
    /// The pinned program, shared by every port.
    type Instance = OwnedFd;
    type Options = ();

    fn load(dir: &Path, at: Option<&Target<'_, Self>>) -> Result<OwnedFd> {
        let pin = dir.join(PROG_PIN);
        if at.is_some() && pin.exists() {
            return open_pinned(&pin);
        }
        let prog = ChainProgram::load(Some(dir))?;
        pin_fd(prog.prog().as_fd(), &pin)?;
        open_pinned(&pin)
    }

    fn prog(p: &OwnedFd) -> BorrowedFd<'_> {
        p.as_fd()
    }
}
