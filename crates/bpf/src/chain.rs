//! The chain program (`bpf/chain.bpf.c`): loading it once, and the tables
//! every attachment of it shares (ports, classifier rules, NFs, devmap,
//! counters). The control plane in `xnf chain` keeps them in step with its
//! registry; the packet tests fill them directly.

use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use std::str::FromStr;

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramMut};

use crate::pod::{as_bytes, from_bytes, object_storage};
use crate::router::Reason;
use crate::skel::chain::{types, ChainSkel, ChainSkelBuilder};

pub const MAX_RULES: u32 = 64;
pub const MAX_CHAINS: u32 = 64;
pub const MAX_NFS: u32 = 256;
pub const MAX_INGRESS: u32 = 64;

/// Names of the shared maps, as pinned.
pub const MAP_NAMES: [&str; 8] = ["ports", "rules", "ctl", "nfs", "tx", "ingress_stats", "chain_stats", "nf_stats"];
/// Name of the pinned program.
pub const PROG_PIN: &str = "prog";

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

const M_VLAN: u16 = 1 << 0;
const M_PROTO: u16 = 1 << 1;
const M_SPORT: u16 = 1 << 2;
const M_DPORT: u16 = 1 << 3;
const M_SRC: u16 = 1 << 4;
const M_DST: u16 = 1 << 5;

/// An IPv4 or IPv6 prefix such as `198.18.0.0/15`; host bits must be zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl IpPrefix {
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// Network and mask as four network-order words (IPv4 in word 0).
    fn words(&self) -> ([u32; 4], [u32; 4]) {
        let (bytes, bits): ([u8; 16], u32) = match self.addr {
            IpAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                (b, 32)
            }
            IpAddr::V6(a) => (a.octets(), 128),
        };
        let mut mask = [0u8; 16];
        for (i, m) in mask.iter_mut().enumerate().take((bits / 8) as usize) {
            let bit = (i as u32) * 8;
            let n = (self.len as u32).saturating_sub(bit).min(8);
            *m = if n == 0 { 0 } else { 0xffu8 << (8 - n) };
        }
        let w = |b: &[u8; 16], i: usize| u32::from_ne_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
        let mut net = [0u32; 4];
        let mut msk = [0u32; 4];
        for i in 0..4 {
            msk[i] = w(&mask, i);
            net[i] = w(&bytes, i) & msk[i];
        }
        (net, msk)
    }

    /// True if `ip` lies inside the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (net, mask) = self.words();
        let other = IpPrefix { addr: ip, len: if ip.is_ipv4() { 32 } else { 128 } };
        if other.is_ipv4() != self.is_ipv4() {
            return false;
        }
        let (a, _) = other.words();
        (0..4).all(|i| a[i] & mask[i] == net[i])
    }
}

impl FromStr for IpPrefix {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().with_context(|| format!("{s:?} is not an IP prefix (like 198.18.0.0/15 or 2001:db8::/32)"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            Some(l) => l.parse::<u8>().ok().filter(|l| *l <= max).with_context(|| format!("{s:?}: prefix length must be 0..={max}"))?,
            None => max,
        };
        let p = IpPrefix { addr, len };
        let (net, _) = p.words();
        let host_bits = IpPrefix { addr, len: max };
        ensure!(host_bits.words().0 == net, "{s:?} has host bits set (did you mean the network address?)");
        Ok(p)
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// What an interface carrying the chain program is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// Classifies and steers; `slot` is its stats slot.
    Ingress { mac: [u8; 6], slot: u32 },
    /// Host end of NF `slot`'s veth.
    Nf { slot: u32 },
}

/// One class of traffic entering a chain. Fields left `None` match anything;
/// without `vid` only untagged frames match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub ifindex: u32,
    /// Chain stats slot.
    pub chain: u32,
    /// Slot of the first NF; `None`: the chain is down and drops its class.
    pub first_nf: Option<u32>,
    pub vid: Option<u16>,
    /// Only IPv4 (`Some(false)`) or only IPv6 (`Some(true)`).
    pub ipv6: Option<bool>,
    pub proto: Option<u8>,
    pub sport: Option<(u16, u16)>,
    pub dport: Option<(u16, u16)>,
    pub src: Option<IpPrefix>,
    pub dst: Option<IpPrefix>,
}

impl Rule {
    fn to_raw(&self) -> Result<types::xnf_chain_rule> {
        Ok(types::xnf_chain_rule {
            ifindex: self.ifindex,
            chain: self.chain,
            first_nf: self.first_nf.map_or(0, |s| s + 1),
            m: self.match_raw()?,
        })
    }

    /// The class part of the rule as `struct xnf_match` (`bpf/include/classify.h`),
    /// which the AF_XDP selector shares.
    pub fn match_raw(&self) -> Result<types::xnf_match> {
        let mut r = types::xnf_match::default();
        let mut family = self.ipv6.map(|v6| if v6 { AF_INET6 } else { AF_INET });
        for p in [self.src, self.dst].into_iter().flatten() {
            let f = if p.is_ipv4() { AF_INET } else { AF_INET6 };
            ensure!(family.is_none_or(|x| x == f), "a rule cannot match IPv4 and IPv6 prefixes at once");
            family = Some(f);
        }
        r.family = family.unwrap_or(0);
        if let Some(v) = self.vid {
            ensure!((1..4095).contains(&v), "VLAN ID {v} is not 1..4094");
            r.flags |= M_VLAN;
            r.vid = v;
        }
        if let Some(p) = self.proto {
            r.flags |= M_PROTO;
            r.proto = p;
        }
        if let Some((lo, hi)) = self.sport {
            ensure!(lo <= hi, "source port range {lo}-{hi} is empty");
            r.flags |= M_SPORT;
            (r.sport_lo, r.sport_hi) = (lo, hi);
        }
        if let Some((lo, hi)) = self.dport {
            ensure!(lo <= hi, "destination port range {lo}-{hi} is empty");
            r.flags |= M_DPORT;
            (r.dport_lo, r.dport_hi) = (lo, hi);
        }
        if let Some(p) = self.src {
            r.flags |= M_SRC;
            (r.src, r.src_mask) = p.words();
        }
        if let Some(p) = self.dst {
            r.flags |= M_DST;
            (r.dst, r.dst_mask) = p.words();
        }
        Ok(r)
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

/// What happened to frames arriving on an ingress; mirrors `enum xnf_ingress_reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IngressReason {
    Steered = 0,
    NoMatch,
    NotOurMac,
    NonIp,
    Malformed,
    Qinq,
    Down,
    NfGone,
}

impl IngressReason {
    pub const ALL: [IngressReason; 8] =
        [Self::Steered, Self::NoMatch, Self::NotOurMac, Self::NonIp, Self::Malformed, Self::Qinq, Self::Down, Self::NfGone];

    pub fn name(self) -> &'static str {
        match self {
            Self::Steered => "steered",
            Self::NoMatch => "no-match",
            Self::NotOurMac => "not-our-mac",
            Self::NonIp => "non-ip",
            Self::Malformed => "malformed",
            Self::Qinq => "qinq",
            Self::Down => "chain-down",
            Self::NfGone => "nf-gone",
        }
    }
}

/// Counters of one ingress, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressStats {
    pub packets: [u64; 8],
}

impl IngressStats {
    pub fn get(&self, r: IngressReason) -> u64 {
        self.packets[r as usize]
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
    pub exit: [u64; 19],
}

impl NfStats {
    pub fn exit(&self, r: Reason) -> u64 {
        self.exit[r as usize]
    }
    /// Frames that left after this NF for the kernel path (all but forwarded).
    pub fn exit_to_kernel(&self) -> u64 {
        self.exit.iter().sum::<u64>() - self.exit(Reason::Forwarded)
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
            let m = &mut open.maps;
            for (map, name) in [
                &mut m.ports,
                &mut m.rules,
                &mut m.ctl,
                &mut m.nfs,
                &mut m.tx,
                &mut m.ingress_stats,
                &mut m.chain_stats,
                &mut m.nf_stats,
            ]
            .into_iter()
            .zip(MAP_NAMES)
            {
                map.set_pin_path(dir.join(name)).with_context(|| format!("setting pin path for map {name}"))?;
            }
        }
        let skel = open.load().context("loading the chain program into the kernel failed (verifier or missing BPF support; see `dmesg`)")?;
        Ok(Self { skel })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_chain
    }

    pub fn maps(&self) -> Result<ChainMaps> {
        let m = &self.skel.maps;
        Ok(ChainMaps {
            ports: MapHandle::try_from(&m.ports)?,
            rules: MapHandle::try_from(&m.rules)?,
            ctl: MapHandle::try_from(&m.ctl)?,
            nfs: MapHandle::try_from(&m.nfs)?,
            tx: MapHandle::try_from(&m.tx)?,
            ingress_stats: MapHandle::try_from(&m.ingress_stats)?,
            chain_stats: MapHandle::try_from(&m.chain_stats)?,
            nf_stats: MapHandle::try_from(&m.nf_stats)?,
        })
    }
}

/// The chain's shared maps.
pub struct ChainMaps {
    ports: MapHandle,
    rules: MapHandle,
    ctl: MapHandle,
    nfs: MapHandle,
    tx: MapHandle,
    ingress_stats: MapHandle,
    chain_stats: MapHandle,
    nf_stats: MapHandle,
}

fn delete_if_present(map: &MapHandle, key: &[u8]) -> Result<()> {
    match map.delete(key) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).context("deleting a map entry"),
    }
}

fn percpu_sum<T: Copy + Default>(map: &MapHandle, slot: u32, mut add: impl FnMut(&T)) -> Result<()> {
    if let Some(per_cpu) = map.lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)? {
        for v in per_cpu {
            add(&from_bytes::<T>(&v));
        }
    }
    Ok(())
}

fn zero_percpu<T>(map: &MapHandle, slot: u32) -> Result<()> {
    let ncpu = libbpf_rs::num_possible_cpus()?;
    let zero = vec![vec![0u8; std::mem::size_of::<T>()]; ncpu];
    map.update_percpu(&slot.to_ne_bytes(), &zero, MapFlags::ANY).context("zeroing counters")
}

impl ChainMaps {
    pub fn open_pinned(dir: &Path) -> Result<Self> {
        let open = |name: &str| {
            let path = dir.join(name);
            MapHandle::from_pinned_path(&path).with_context(|| format!("opening pinned map {}", path.display()))
        };
        Ok(Self {
            ports: open("ports")?,
            rules: open("rules")?,
            ctl: open("ctl")?,
            nfs: open("nfs")?,
            tx: open("tx")?,
            ingress_stats: open("ingress_stats")?,
            chain_stats: open("chain_stats")?,
            nf_stats: open("nf_stats")?,
        })
    }

    pub fn set_port(&self, ifindex: u32, port: Port) -> Result<()> {
        let raw = match port {
            Port::Ingress { mac, slot } => types::xnf_chain_port { kind: 1, mac, slot, ..Default::default() },
            Port::Nf { slot } => types::xnf_chain_port { kind: 2, slot, ..Default::default() },
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
                out.push((ifindex, if p.kind == 2 { Port::Nf { slot: p.slot } } else { Port::Ingress { mac: p.mac, slot: p.slot } }));
            }
        }
        out.sort_by_key(|(i, _)| *i);
        Ok(out)
    }

    /// Replaces the whole rule list at once: writes the copy not in use,
    /// then makes it the live one.
    pub fn set_rules(&self, rules: &[Rule]) -> Result<()> {
        ensure!(rules.len() <= MAX_RULES as usize, "{} rules; the chain classifier holds {MAX_RULES}", rules.len());
        let zero = 0u32.to_ne_bytes();
        let active = self.active()?;
        let base = if active == 0 { MAX_RULES } else { 0 };
        for i in 0..MAX_RULES {
            let raw = match rules.get(i as usize) {
                Some(r) => r.to_raw()?,
                None => types::xnf_chain_rule::default(),
            };
            self.rules.update(&(base + i).to_ne_bytes(), as_bytes(&raw), MapFlags::ANY).context("writing chain rules")?;
        }
        let ctl = types::xnf_chain_ctl { active: (base != 0) as u32 };
        self.ctl.update(&zero, as_bytes(&ctl), MapFlags::ANY).context("switching chain rules")
    }

    fn active(&self) -> Result<u32> {
        let v = self.ctl.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
        Ok(from_bytes::<types::xnf_chain_ctl>(&v).active)
    }

    /// The ifindex, chain slot and first NF (slot + 1, 0 = down) of every live rule.
    pub fn live_rules(&self) -> Result<Vec<(u32, u32, u32)>> {
        let base = if self.active()? == 0 { 0 } else { MAX_RULES };
        let mut out = Vec::new();
        for i in 0..MAX_RULES {
            let v = self.rules.lookup(&(base + i).to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
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
        self.nfs
            .update(&slot.to_ne_bytes(), as_bytes(&types::xnf_chain_nf::default()), MapFlags::ANY)
            .context("clearing the NF table")
    }

    pub fn nf(&self, slot: u32) -> Result<NfEntry> {
        let v = self.nfs.lookup(&slot.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
        let r: types::xnf_chain_nf = from_bytes(&v);
        Ok(NfEntry { ifindex: r.ifindex, next: r.next.checked_sub(1), host_mac: r.host_mac, nf_mac: r.nf_mac })
    }

    /// Makes `ifindex` a redirect target (an NF port or an egress).
    pub fn add_tx(&self, ifindex: u32) -> Result<()> {
        self.tx
            .update(&ifindex.to_ne_bytes(), &ifindex.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("adding ifindex {ifindex} to the chain's devmap"))
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
        percpu_sum::<types::xnf_ingress_stats>(&self.ingress_stats, slot, |r| {
            for (a, b) in s.packets.iter_mut().zip(r.packets) {
                *a += b;
            }
        })?;
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
        percpu_sum::<types::xnf_nf_stats>(&self.nf_stats, slot, |r| {
            s.in_packets += r.in_packets;
            s.in_bytes += r.in_bytes;
            s.out_packets += r.out_packets;
            s.out_bytes += r.out_bytes;
            s.gone += r.gone;
            for (a, b) in s.exit.iter_mut().zip(r.exit) {
                *a += b;
            }
        })?;
        Ok(s)
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
}

/// Parses `N` or `LO-HI` as an inclusive port range.
pub fn parse_port_range(s: &str) -> Result<(u16, u16)> {
    let p = |x: &str| x.trim().parse::<u16>().with_context(|| format!("{s:?} is not a port or port range (like 53 or 1024-2047)"));
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (p(a)?, p(b)?),
        None => {
            let v = p(s)?;
            (v, v)
        }
    };
    if lo > hi {
        bail!("port range {s:?} is empty (low end above high end)");
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_mask() {
        let p: IpPrefix = "198.18.0.0/15".parse().unwrap();
        assert!(p.contains("198.19.255.1".parse().unwrap()));
        assert!(!p.contains("198.20.0.1".parse().unwrap()));
        assert!(!p.contains("2001:db8::1".parse().unwrap()));
        let p6: IpPrefix = "2001:db8:1::/48".parse().unwrap();
        assert!(p6.contains("2001:db8:1:ffff::1".parse().unwrap()));
        assert!(!p6.contains("2001:db8:2::1".parse().unwrap()));
        let host: IpPrefix = "198.18.0.7".parse().unwrap();
        assert_eq!(host.len, 32);
        assert!("198.18.0.1/15".parse::<IpPrefix>().unwrap_err().to_string().contains("host bits"));
        assert!("198.18.0.0/33".parse::<IpPrefix>().is_err());
        assert!("nonsense".parse::<IpPrefix>().is_err());
        let odd: IpPrefix = "2001:db8:8000::/33".parse().unwrap();
        assert!(odd.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!odd.contains("2001:db8:7fff::1".parse().unwrap()));
    }

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("53").unwrap(), (53, 53));
        assert_eq!(parse_port_range("1024-2047").unwrap(), (1024, 2047));
        assert!(parse_port_range("9-1").is_err());
        assert!(parse_port_range("70000").is_err());
    }

    #[test]
    fn rule_refuses_mixed_families() {
        let r = Rule { src: Some("198.18.0.0/15".parse().unwrap()), dst: Some("2001:db8::/32".parse().unwrap()), ..Default::default() };
        assert!(r.to_raw().is_err());
        let r = Rule { vid: Some(4095), ..Default::default() };
        assert!(r.to_raw().is_err());
    }

    #[test]
    fn ingress_reasons_match_the_c_enum() {
        assert_eq!(IngressReason::ALL.len(), types::xnf_ingress_stats::default().packets.len());
        assert_eq!(NfStats::default().exit.len(), types::xnf_nf_stats::default().exit.len());
        for (i, r) in IngressReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }
}
