//! The compiled rule set (filter.h, "A compiled rule set"): the rules as
//! per-field tables of classes, so that a frame's first rule costs a lookup
//! per field the set uses, whatever the number of rules.
//!
//! A field's value lets each rule take the frame (it matches), not take
//! it (it does not), or be unsure (the frame does not show the field: a
//! later fragment's ports, an unknown protocol behind extension headers).
//! A rule takes the frame when no field says no and, if some field is
//! unsure, only if it stops the frame (drop, rate-limit, syn-cookie): the
//! fail-closed rule of `filter.bpf.c`, unchanged. So each value's class is
//! two sets of rules: `take` (matches, or unsure and stops) and `sure`
//! (matches); the data plane ANDs the `take` sets of the frame's classes
//! and takes the lowest rule, unsure when one of its classes lacks it in
//! `sure`. Equal classes are stored once.
//!
//! Prefixes and lists are not tables: a rule with one is in every class
//! of the other fields as far as its addresses go, and the data plane
//! checks the addresses of each candidate in order (`lazy`).

use std::collections::HashMap;

use anyhow::{ensure, Result};

use crate::program::{RawRule, RECORD};
use crate::skel::filter::types::{self, xnf_filter_field as F, xnf_filter_region as R, xnf_filter_table as T};

/// Words of 64 rules in a set of rules.
pub const WORDS: usize = types::xnf_filter_limits::XNF_FILTER_WORDS.0 as usize;
const MAX_CLASSES: usize = types::xnf_filter_limits::XNF_FILTER_MAX_CLASSES.0 as usize;
const SUMMARY_SHIFT: u32 = types::xnf_filter_ref::XNF_REF_SUMMARY_SHIFT.0;
const UNSURE: u32 = types::xnf_filter_ref::XNF_REF_UNSURE.0;

const _: () = assert!(WORDS * 64 == crate::rules::MAX_RULES);
const _: () = assert!(std::mem::size_of::<RawRule>() <= RECORD && std::mem::size_of::<types::xnf_filter_class>() == RECORD);

type Bits = [u64; WORDS];

/// What one field's value says of one rule.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Say {
    No,
    Yes,
    Unsure,
}

fn say(yes: bool) -> Say {
    if yes {
        Say::Yes
    } else {
        Say::No
    }
}

const L4_UNKNOWN: u32 = 4;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// One table: its first record, its entries, which rule field it is and
/// what a frame's value says of a rule that has it.
struct Field {
    table: u32,
    base: u32,
    entries: u32,
    flag: u32,
    judge: Judge,
}

/// A rule's range of a field (inclusive).
type Range = fn(&RawRule) -> (u16, u16);

/// How a field's value is judged: in a range of the rule's, the table's
/// last entry unknown (`true`: ports) or beyond every range (lengths); or
/// by a function of every value (its table has no runs to cut at).
enum Judge {
    Range(Range, bool),
    Value(fn(&RawRule, u32) -> Say),
}

impl Field {
    fn says(&self, r: &RawRule, v: u32) -> Say {
        match self.judge {
            Judge::Range(_, true) if v == self.entries - 1 => Say::Unsure,
            Judge::Range(range, _) => {
                let (lo, hi) = range(r);
                say((lo as u32..=hi as u32).contains(&v))
            }
            Judge::Value(f) => f(r, v),
        }
    }

    fn range(&self) -> Option<Range> {
        match self.judge {
            Judge::Range(range, _) => Some(range),
            Judge::Value(_) => None,
        }
    }
}

/// TCP flags and ICMP type are unknown at the last entry.
fn tcp(r: &RawRule, v: u32) -> Say {
    if v == 256 {
        return Say::Unsure;
    }
    let f = v as u8;
    say(f & r.tcp_set == r.tcp_set && f & r.tcp_clear == 0)
}

fn icmp(r: &RawRule, v: u32) -> Say {
    if v == 256 {
        return Say::Unsure;
    }
    say(v == r.icmp_type as u32)
}

/// 4096: untagged (a priority tag is VID 0, which no rule has).
fn vlan(r: &RawRule, v: u32) -> Say {
    say(v == r.vid as u32)
}

const FIELDS: [Field; 6] = [
    Field {
        table: T::XNF_FT_SPORT.0,
        base: R::XNF_FR_SPORT.0,
        entries: 65537,
        flag: F::XNF_F_SPORT.0,
        judge: Judge::Range(|r| (r.sport_lo, r.sport_hi), true),
    },
    Field {
        table: T::XNF_FT_DPORT.0,
        base: R::XNF_FR_DPORT.0,
        entries: 65537,
        flag: F::XNF_F_DPORT.0,
        judge: Judge::Range(|r| (r.dport_lo, r.dport_hi), true),
    },
    Field { table: T::XNF_FT_TCP.0, base: R::XNF_FR_TCP.0, entries: 257, flag: F::XNF_F_TCP_FLAGS.0, judge: Judge::Value(tcp) },
    Field { table: T::XNF_FT_ICMP.0, base: R::XNF_FR_ICMP.0, entries: 257, flag: F::XNF_F_ICMP_TYPE.0, judge: Judge::Value(icmp) },
    Field { table: T::XNF_FT_VLAN.0, base: R::XNF_FR_VLAN.0, entries: 4097, flag: F::XNF_F_VLAN.0, judge: Judge::Value(vlan) },
    Field { table: T::XNF_FT_LEN.0, base: R::XNF_FR_LEN.0, entries: 65537, flag: F::XNF_F_LENGTH.0, judge: Judge::Range(|r| (r.len_lo, r.len_hi), false) },
];

/// The kind table's entry: family, L4 state (parse.h's `enum xnf_l4`) and
/// protocol, as `frame_refs` in filter.bpf.c indexes it.
fn kind(r: &RawRule, v: u32) -> Say {
    let family = if v >> 11 == 1 { AF_INET6 } else { AF_INET };
    if r.family != 0 && r.family != family {
        return Say::No;
    }
    if r.flags & F::XNF_F_PROTO.0 == 0 {
        return Say::Yes;
    }
    if (v >> 8) & 7 == L4_UNKNOWN {
        return Say::Unsure;
    }
    say(v & 0xff == r.proto as u32)
}

/// Whether a rule stops what it takes (and so takes what it cannot tell).
fn stops(r: &RawRule) -> bool {
    !matches!(r.action, 1 | 2) // pass, count
}

/// The classes met so far, each with its reference.
struct Classes {
    ids: HashMap<(Bits, Bits), u32>,
    list: Vec<(Bits, Bits)>,
}

impl Classes {
    fn new() -> Classes {
        let empty = ([0; WORDS], [0; WORDS]);
        Classes { ids: HashMap::from([(empty, 0)]), list: vec![empty] }
    }

    /// The reference of class (`take`, `sure`) (filter.h, `enum xnf_filter_ref`).
    fn reference(&mut self, take: Bits, sure: Bits) -> Result<u32> {
        let next = self.list.len() as u32;
        let id = *self.ids.entry((take, sure)).or_insert(next);
        if id == next {
            ensure!(
                self.list.len() < MAX_CLASSES,
                "the rules' fields make more than {MAX_CLASSES} distinct classes of rules: use fewer distinct port or length ranges"
            );
            self.list.push((take, sure));
        }
        let summary = (0..WORDS).filter(|&w| take[w] != 0).fold(0u32, |s, w| s | 1 << w);
        Ok(id | summary << SUMMARY_SHIFT | if take != sure { UNSURE } else { 0 })
    }
}

/// The table of one field over values `0..entries`: what each value says
/// of each rule that has the field (`flag`; those without it: yes),
/// evaluated once per run of values where no rule's answer changes.
fn table(classes: &mut Classes, rules: &[RawRule], entries: u32, flag: u32, says: &dyn Fn(&RawRule, u32) -> Say, cuts: &[u32]) -> Result<Vec<u32>> {
    let mut out = vec![0u32; entries as usize];
    for (i, &from) in cuts.iter().enumerate() {
        let to = cuts.get(i + 1).copied().unwrap_or(entries);
        let (mut take, mut sure) = ([0u64; WORDS], [0u64; WORDS]);
        for (r, rule) in rules.iter().enumerate() {
            let s = if flag == 0 || rule.flags & flag != 0 { says(rule, from) } else { Say::Yes };
            let (w, bit) = (r / 64, 1u64 << (r % 64));
            match s {
                Say::Yes => {
                    take[w] |= bit;
                    sure[w] |= bit;
                }
                Say::Unsure if stops(rule) => take[w] |= bit,
                _ => {}
            }
        }
        let reference = classes.reference(take, sure)?;
        out[from as usize..to as usize].fill(reference);
    }
    Ok(out)
}

/// The values where a range field's answer may change: 0, each range's
/// start and end + 1, and the last entry (unknown, or beyond every range).
fn cuts(rules: &[RawRule], flag: u32, entries: u32, ranges: Option<Range>) -> Vec<u32> {
    let Some(range) = ranges else { return (0..entries).collect() };
    let mut v = vec![0, entries - 1];
    for r in rules.iter().filter(|r| r.flags & flag != 0) {
        let (lo, hi) = range(r);
        v.extend([lo as u32, hi as u32 + 1]);
    }
    v.sort_unstable();
    v.dedup();
    v.retain(|&c| c < entries);
    v
}

/// What the data plane's tables hold for `rules`: the tables the set uses
/// (`enum xnf_filter_table`), whether a rule has addresses, and the
/// records (index, bytes) of the classes and tables, zero records left out.
pub struct Tables {
    pub tables: u32,
    pub lazy: bool,
    pub records: Vec<(u32, Vec<u8>)>,
}

pub fn tables(rules: &[RawRule]) -> Result<Tables> {
    let mut classes = Classes::new();
    let mut refs: Vec<(u32, Vec<u32>)> = vec![(R::XNF_FR_KIND.0, table(&mut classes, rules, 4096, 0, &kind, &cuts(rules, 0, 4096, None))?)];
    let mut used = 0;
    for f in &FIELDS {
        if rules.iter().any(|r| r.flags & f.flag != 0) {
            used |= f.table;
            refs.push((f.base, table(&mut classes, rules, f.entries, f.flag, &|r, v| f.says(r, v), &cuts(rules, f.flag, f.entries, f.range()))?));
        }
    }
    let addresses = F::XNF_F_SRC.0 | F::XNF_F_DST.0 | F::XNF_F_SRC_LIST.0 | F::XNF_F_DST_LIST.0;
    let mut records = Vec::new();
    for (i, (take, sure)) in classes.list.iter().enumerate() {
        let bytes: Vec<u8> = take.iter().chain(sure).flat_map(|w| w.to_ne_bytes()).collect();
        records.push((R::XNF_FR_CLASSES.0 + i as u32, bytes));
    }
    for (base, table) in refs {
        for (i, chunk) in table.chunks(64).enumerate() {
            if chunk.iter().any(|&r| r != 0) {
                let mut bytes: Vec<u8> = chunk.iter().flat_map(|r| r.to_ne_bytes()).collect();
                bytes.resize(RECORD, 0);
                records.push((base + i as u32, bytes));
            }
        }
    }
    Ok(Tables { tables: used, lazy: rules.iter().any(|r| r.flags & addresses != 0), records })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_dport(lo: u16, hi: u16, action: u8) -> RawRule {
        RawRule { flags: F::XNF_F_PROTO.0 | F::XNF_F_DPORT.0, proto: 17, dport_lo: lo, dport_hi: hi, action, ..Default::default() }
    }

    fn class_of(t: &Tables, base: u32, v: u32) -> u32 {
        let rec = t.records.iter().find(|(i, _)| *i == base + v / 64);
        rec.map_or(0, |(_, b)| u32::from_ne_bytes(b[(v % 64) as usize * 4..][..4].try_into().unwrap()))
    }

    #[test]
    fn equal_answers_share_a_class_and_ranges_split_at_their_ends() {
        let rules = [udp_dport(9, 9, 0), udp_dport(100, 200, 0)];
        let t = tables(&rules).unwrap();
        assert_eq!(t.tables, T::XNF_FT_DPORT.0);
        assert!(!t.lazy);
        let d = |v| class_of(&t, R::XNF_FR_DPORT.0, v);
        assert_eq!(d(9) >> SUMMARY_SHIFT & 0xffff, 1, "rule 0 is in word 0");
        assert_eq!(d(8), d(10));
        assert_eq!(d(8) & 0xfff, 0, "no rule takes port 8: the empty class");
        assert_eq!(d(100), d(200));
        assert_ne!(d(100), d(9));
        assert_eq!(d(201), d(8));
        // Ports unknown: both rules drop, so both take it, neither surely.
        assert_ne!(d(65536) & UNSURE, 0);
    }

    #[test]
    fn an_unsure_field_lets_only_stopping_rules_take() {
        let rules = [udp_dport(53, 53, 1), udp_dport(53, 53, 0)];
        let t = tables(&rules).unwrap();
        let unknown = class_of(&t, R::XNF_FR_DPORT.0, 65536);
        let id = (unknown & 0xfff) as usize;
        let rec = &t.records.iter().find(|(i, _)| *i == R::XNF_FR_CLASSES.0 + id as u32).unwrap().1;
        let take = u64::from_ne_bytes(rec[..8].try_into().unwrap());
        let sure = u64::from_ne_bytes(rec[WORDS * 8..][..8].try_into().unwrap());
        assert_eq!((take, sure), (0b10, 0), "the pass rule does not take it, the drop rule does");
    }

    #[test]
    fn the_kind_table_keys_family_l4_state_and_protocol() {
        let mut r = udp_dport(1, 1, 0);
        r.family = AF_INET6;
        let t = tables(&[r]).unwrap();
        let k = |fam: u32, l4: u32, proto: u32| class_of(&t, R::XNF_FR_KIND.0, fam << 11 | l4 << 8 | proto);
        assert_eq!(k(0, 0, 17) & 0xfff, 0, "IPv4: not this rule's");
        assert_ne!(k(1, 0, 17) & 0xfff, 0);
        assert_eq!(k(1, 0, 6) & 0xfff, 0);
        assert_ne!(k(1, L4_UNKNOWN, 0) & UNSURE, 0, "protocol unknown: unsure");
    }

    #[test]
    fn too_many_classes_are_refused_in_one_line() {
        // A thousand rules of disjoint ranges: a class each, and one for the gaps.
        let disjoint: Vec<RawRule> = (0..1024).map(|i| udp_dport(i * 3, i * 3 + 1, 0)).collect();
        assert!(tables(&disjoint).is_ok());
        // Sliding windows of three widths on three fields: some 2,000 sets of
        // rules each.
        let windows: Vec<RawRule> = (0..1024)
            .map(|i| RawRule {
                flags: F::XNF_F_PROTO.0 | F::XNF_F_SPORT.0 | F::XNF_F_DPORT.0 | F::XNF_F_LENGTH.0,
                sport_lo: i * 2,
                sport_hi: i * 2 + 100,
                len_lo: i * 4,
                len_hi: i * 4 + 10,
                ..udp_dport(i, i + 1024, 0)
            })
            .collect();
        let e = tables(&windows).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("more than 4096 distinct classes"), "{e}");
    }
}
