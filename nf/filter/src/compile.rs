//! A checked rule file as the data plane's tables: the compiled set
//! (filter.h, "A compiled rule set": its header, its rules, each `@list`
//! named by the list slot the control plane gave it, and the classes of
//! [`crate::classes`]).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};

use xnf_core::class::prefix_words;

use crate::classes;
use crate::program::{FilterMaps, RawHeader, RawRule, MAX_RULES, RECORD, RECORDS};
use crate::rules::{Action, Addr, Rule, RuleSet};
use crate::skel::filter::types::{xnf_filter_field as F, xnf_filter_region as R};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use xnf_core::maps::{as_bytes, from_bytes};

/// Token buckets count billionths of a packet or byte.
const SCALE: u64 = 1_000_000_000;
use crate::rules::{MAX_BURST, MAX_RATE};

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// A 32-bit digest of a rule's meaning at its place: the same rule at the
/// same index keeps its token buckets across applies, any change gets
/// fresh ones (`bucket_gen`).
fn bucket_gen(index: usize, r: &Rule) -> u32 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    index.hash(&mut h);
    format!("{:?}", Rule { line: 0, ..r.clone() }).hash(&mut h);
    h.finish() as u32
}

/// Bucket size and fill time of one rate, scaled.
fn bucket(rate: u64, burst: u64) -> Result<(u64, u64)> {
    ensure!(rate <= MAX_RATE, "a rate of {rate} per second is beyond {MAX_RATE}");
    ensure!(burst <= MAX_BURST, "a burst of {burst} is beyond {MAX_BURST}");
    let size = burst * SCALE;
    Ok((size, size.div_ceil(rate)))
}

fn rule(index: usize, r: &Rule, slots: &BTreeMap<String, u32>) -> Result<RawRule> {
    let mut raw = RawRule { family: r.ipv6.map_or(0, |v6| if v6 { AF_INET6 } else { AF_INET }), ..Default::default() };
    let mut flags = 0u32;
    // Source and destination: a prefix in the rule, or a list's slot.
    let sides = [
        (&r.src, &mut raw.src, &mut raw.src_mask, &mut raw.src_list, F::XNF_F_SRC.0, F::XNF_F_SRC_LIST.0),
        (&r.dst, &mut raw.dst, &mut raw.dst_mask, &mut raw.dst_list, F::XNF_F_DST.0, F::XNF_F_DST_LIST.0),
    ];
    for (addr, net, mask, list, prefix_flag, list_flag) in sides {
        match addr {
            Some(Addr::Prefix(p)) => {
                (*net, *mask) = prefix_words(p);
                flags |= prefix_flag;
            }
            Some(Addr::List(name)) => {
                *list = slots.get(name).copied().with_context(|| format!("list @{name} has no slot"))? as u8;
                flags |= list_flag;
            }
            None => {}
        }
    }
    if let Some(p) = r.proto {
        raw.proto = p;
        flags |= F::XNF_F_PROTO.0;
    }
    if let Some((lo, hi)) = r.sport {
        (raw.sport_lo, raw.sport_hi) = (lo, hi);
        flags |= F::XNF_F_SPORT.0;
    }
    if let Some((lo, hi)) = r.dport {
        (raw.dport_lo, raw.dport_hi) = (lo, hi);
        flags |= F::XNF_F_DPORT.0;
    }
    if let Some(t) = r.tcp_flags {
        (raw.tcp_set, raw.tcp_clear) = (t.set, t.clear);
        flags |= F::XNF_F_TCP_FLAGS.0;
    }
    if let Some(t) = r.icmp_type {
        raw.icmp_type = t;
        flags |= F::XNF_F_ICMP_TYPE.0;
    }
    if let Some(v) = r.vlan {
        raw.vid = v;
        flags |= F::XNF_F_VLAN.0;
    }
    if let Some((lo, hi)) = r.length {
        (raw.len_lo, raw.len_hi) = (lo, hi);
        flags |= F::XNF_F_LENGTH.0;
    }
    raw.action = match r.action {
        Action::Drop => 0,
        Action::Pass => 1,
        Action::Count => 2,
        Action::RateLimit { pps, bps, burst } => {
            if let Some(pps) = pps {
                raw.pps = pps;
                (raw.burst_p, raw.fill_ns_p) = bucket(pps, burst)?;
                flags |= F::XNF_F_PPS.0;
            }
            if let Some(bps) = bps {
                // The burst is in packets when pps is given; the byte
                // bucket then holds one second's worth.
                let bytes = if pps.is_some() { bps } else { burst };
                raw.bps = bps;
                (raw.burst_b, raw.fill_ns_b) = bucket(bps, bytes)?;
                flags |= F::XNF_F_BPS.0;
            }
            raw.bucket_gen = bucket_gen(index, r);
            3
        }
        Action::SynCookie { mss } => {
            raw.mss = mss;
            4
        }
    };
    raw.flags = flags;
    Ok(raw)
}

/// A compiled rule set: what an apply swaps in one update.
#[derive(Clone)]
pub struct Compiled {
    pub header: RawHeader,
    pub rules: Vec<RawRule>,
    /// Every record but the header's (index, bytes); empty when read back.
    pub records: Vec<(u32, Vec<u8>)>,
}

impl Compiled {
    /// Every record, the header's first.
    pub fn all_records(&self) -> impl Iterator<Item = (u32, Vec<u8>)> + '_ {
        let header = std::iter::once((0, record(as_bytes(&self.header))));
        header.chain(self.records.iter().cloned())
    }

    /// Whether two compiled sets are the same (their digests are).
    pub fn same(&self, other: &Compiled) -> bool {
        as_bytes(&self.header) == as_bytes(&other.header)
    }
}

/// `bytes` as one record.
fn record(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v.resize(RECORD, 0);
    v
}

/// The data plane's rule set for `rs`, each list named by its slot.
pub fn rule_set(rs: &RuleSet, slots: &BTreeMap<String, u32>) -> Result<Compiled> {
    let rules: Vec<RawRule> =
        rs.rules.iter().enumerate().map(|(i, r)| rule(i, r, slots).with_context(|| format!("line {}: {}", r.line, r.name))).collect::<Result<_>>()?;
    let t = classes::tables(&rules)?;
    let mut records: Vec<(u32, Vec<u8>)> = rules.iter().enumerate().map(|(i, r)| (R::XNF_FR_RULES.0 + i as u32, record(as_bytes(r)))).collect();
    records.extend(t.records);
    // FNV-1a over every record: stable across runs, unlike std's hasher.
    let digest = records
        .iter()
        .flat_map(|(i, b)| i.to_ne_bytes().into_iter().chain(b.iter().copied()))
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    // TCP flags and ICMP types are read from the frame only for a set
    // whose rules look at them (a syn-cookie rule reads the flags).
    let extras = rs.rules.iter().any(|r| r.tcp_flags.is_some() || r.icmp_type.is_some() || matches!(r.action, Action::SynCookie { .. }));
    let header = RawHeader {
        nrules: rules.len() as u32,
        tables: t.tables,
        default_drop: rs.default_drop as u8,
        lazy: t.lazy as u8,
        extras: extras as u8,
        digest,
        ..Default::default()
    };
    Ok(Compiled { header, rules, records })
}

/// A list as applied: its slot and a digest of its content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedList {
    pub slot: u32,
    pub digest: u64,
    pub entries: usize,
    pub path: String,
}

/// What is live: enough to rebuild its rule set without reading any file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub origin: String,
    pub text: String,
    pub lists: BTreeMap<String, AppliedList>,
}

/// The compiled set of what was applied, its lists in their slots.
pub fn rule_set_of(a: &Applied) -> Result<Compiled> {
    let rs = RuleSet::parse(&a.text, &a.origin)?;
    let slots = a.lists.iter().map(|(n, l)| (n.clone(), l.slot)).collect();
    rule_set(&rs, &slots)
}

/// The live compiled set, in the maps every instance shares.
impl FilterMaps {
    /// Makes `set` the live rule set, in one update.
    pub fn set_rules(&self, set: &Compiled) -> Result<()> {
        let records: Vec<(u32, Vec<u8>)> = set.all_records().collect();
        xnf_core::maps::swap::replace_at(self.rule_sets(), RECORD as u32, RECORDS, &records).map_err(|e| match self.live_table() {
            Err(stale) => stale,
            Ok(_) => e,
        })
    }

    /// The live compiled set's table, refused in one line when another
    /// build of xnf made it with another layout (the kernel keeps no type
    /// of a map-in-map's inner tables: their sizes tell).
    fn live_table(&self) -> Result<Option<MapHandle>> {
        let table = xnf_core::maps::swap::current(self.rule_sets())?;
        if let Some(t) = &table {
            anyhow::ensure!(
                t.value_size() == RECORD as u32 && t.max_entries() == RECORDS,
                "the filter's rule set was written by another build of xnf (records of {} bytes, {} of them): run `xnf upgrade`",
                t.value_size(),
                t.max_entries()
            );
        }
        Ok(table)
    }

    /// The live rule set's header and rules, if one was applied.
    pub fn rules(&self) -> Result<Option<Compiled>> {
        let Some(table) = self.live_table()? else { return Ok(None) };
        let read = |i: u32| table.lookup(&i.to_ne_bytes(), MapFlags::ANY).map_err(anyhow::Error::from).and_then(|v| v.context("a record of the live rule set"));
        let header = from_bytes::<RawHeader>(&read(0)?);
        let n = header.nrules.min(MAX_RULES);
        let rules = (0..n).map(|i| read(R::XNF_FR_RULES.0 + i).map(|v| from_bytes::<RawRule>(&v))).collect::<Result<_>>()?;
        Ok(Some(Compiled { header, rules, records: Vec::new() }))
    }
}

/// The list slots a live rule set refers to.
pub fn slots_used(set: &Compiled) -> Vec<u32> {
    let mut v: Vec<u32> = set
        .rules
        .iter()
        .flat_map(|r| {
            let src = (r.flags & F::XNF_F_SRC_LIST.0 != 0).then_some(r.src_list as u32);
            let dst = (r.flags & F::XNF_F_DST_LIST.0 != 0).then_some(r.dst_list as u32);
            src.into_iter().chain(dst)
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_become_network_order_words() {
        let text = "[[rule]]\nsrc = \"198.18.0.0/15\"\naction = \"drop\"\n[[rule]]\ndst = \"2001:db8::/33\"\naction = \"drop\"\n";
        let set = rule_set(&RuleSet::parse(text, "t.toml").unwrap(), &BTreeMap::new()).unwrap();
        let (a, m) = (set.rules[0].src, set.rules[0].src_mask);
        assert_eq!(a[0].to_ne_bytes(), [198, 18, 0, 0]);
        assert_eq!(m[0].to_ne_bytes(), [255, 254, 0, 0]);
        assert_eq!(&a[1..], &[0, 0, 0]);
        let (a, m) = (set.rules[1].dst, set.rules[1].dst_mask);
        assert_eq!(a[0].to_ne_bytes(), [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(m[1].to_ne_bytes(), [0x80, 0, 0, 0]);
        assert_eq!(set.rules[0].flags & F::XNF_F_SRC.0, F::XNF_F_SRC.0);
        assert_eq!(set.rules[1].flags & F::XNF_F_DST.0, F::XNF_F_DST.0);
    }

    #[test]
    fn rate_rules_get_scaled_buckets_and_stable_generations() {
        let text = "[[rule]]\nproto = \"tcp\"\ntcp_flags = \"SYN,!ACK\"\naction = \"rate-limit\"\npps = 100\nburst = 10\n\
                    [[rule]]\naction = \"rate-limit\"\nbps = 1000\n";
        let rs = RuleSet::parse(text, "t.toml").unwrap();
        let set = rule_set(&rs, &BTreeMap::new()).unwrap();
        let r = &set.rules[0];
        assert_eq!((r.pps, r.burst_p, r.fill_ns_p), (100, 10 * SCALE, 100_000_000));
        assert_eq!(r.flags & (F::XNF_F_PPS.0 | F::XNF_F_BPS.0), F::XNF_F_PPS.0);
        let r1 = &set.rules[1];
        assert_eq!((r1.bps, r1.burst_b, r1.fill_ns_b), (1000, 1000 * SCALE, SCALE));
        // The same file again keeps the buckets; a changed rate does not.
        assert_eq!(rule_set(&rs, &BTreeMap::new()).unwrap().rules[0].bucket_gen, r.bucket_gen);
        let rs2 = RuleSet::parse(&text.replace("pps = 100", "pps = 101"), "t.toml").unwrap();
        assert_ne!(rule_set(&rs2, &BTreeMap::new()).unwrap().rules[0].bucket_gen, r.bucket_gen);
    }

    #[test]
    fn lists_are_named_by_slot_and_reported_as_used() {
        let text = "[lists]\nbad = \"/x\"\n[[rule]]\nsrc = \"@bad\"\naction = \"drop\"\n[[rule]]\ndst = \"@bad\"\naction = \"drop\"\n";
        let rs = RuleSet::parse(text, "t.toml").unwrap();
        assert!(rule_set(&rs, &BTreeMap::new()).is_err());
        let set = rule_set(&rs, &BTreeMap::from([("bad".to_string(), 5)])).unwrap();
        assert_eq!(slots_used(&set), vec![5]);
        assert_eq!(set.header.nrules, 2);
    }

    #[test]
    fn absurd_rates_are_refused() {
        let text = "[[rule]]\naction = \"rate-limit\"\npps = 1\nburst = 100000000000\n";
        let err = RuleSet::parse(text, "t.toml").unwrap_err().to_string();
        assert!(err.contains("line 1: rule 1: burst: 100000000000 is beyond"), "{err}");
        let err = RuleSet::parse("[[rule]]\naction = \"rate-limit\"\npps = 100\nbps = 10000000000\n", "t.toml").unwrap_err().to_string();
        assert!(err.contains("line 1: rule 1: bps: with pps"), "{err}");
    }
}
