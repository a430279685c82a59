//! What the filter's packet table and fuzzer share: a filter loaded on its
//! own (no stage array, so "continue" is XDP_PASS), rule files applied the
//! way `xnf filter apply` does (parsed and checked by `rules.rs`, compiled
//! by `compile.rs`, each `[lists]` entry in a list slot of its own), and
//! every counter it keeps read at once.

#![allow(dead_code)] // each test binary uses its own part

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use ipnet::IpNet;
use xnf_filter::compile::rule_set;
use xnf_filter::program::{Counter, Counters, FilterMaps, FilterProgram, RuleCounters, MAX_RULES, RULE_DEFAULT};
use xnf_filter::rules::RuleSet;
use xnf_packet::{PacketBuilder, TcpFlags};
use xnf_testrun::{run_xdp, RunResult, XdpContext};

pub struct Filter {
    pub prog: FilterProgram,
    pub maps: FilterMaps,
}

/// Every counter: the global ones, and each rule slot's (the default's
/// included, at [`RULE_DEFAULT`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub counters: Counters,
    pub rules: Vec<RuleCounters>,
}

impl Snapshot {
    /// What moved since `before`.
    pub fn delta(&self, before: &Snapshot) -> Snapshot {
        let counters = std::array::from_fn(|i| self.counters[i] - before.counters[i]);
        let rules = self.rules.iter().zip(&before.rules).map(|(a, b)| sub(*a, *b)).collect();
        Snapshot { counters, rules }
    }

    /// Nothing moved.
    pub fn zero() -> Snapshot {
        Snapshot { counters: [0; Counter::ALL.len()], rules: vec![RuleCounters::default(); MAX_RULES as usize + 1] }
    }

    /// The counters that differ from `want`, by name, with both values.
    pub fn diff(&self, want: &Snapshot) -> Vec<String> {
        let mut out: Vec<String> = Counter::ALL
            .iter()
            .filter(|c| self.counters[**c as usize] != want.counters[**c as usize])
            .map(|c| format!("{} {} (want {})", c.name(), self.counters[*c as usize], want.counters[*c as usize]))
            .collect();
        for (slot, (got, w)) in self.rules.iter().zip(&want.rules).enumerate() {
            if got != w {
                out.push(format!("{} {} (want {})", slot_name(slot as u32), show(got), show(w)));
            }
        }
        out
    }
}

pub fn sub(a: RuleCounters, b: RuleCounters) -> RuleCounters {
    RuleCounters { packets: a.packets - b.packets, bytes: a.bytes - b.bytes, dropped: a.dropped - b.dropped }
}

pub fn add(a: RuleCounters, b: RuleCounters) -> RuleCounters {
    RuleCounters { packets: a.packets + b.packets, bytes: a.bytes + b.bytes, dropped: a.dropped + b.dropped }
}

pub fn show(r: &RuleCounters) -> String {
    format!("({} packets, {} bytes, {} dropped)", r.packets, r.bytes, r.dropped)
}

pub fn slot_name(slot: u32) -> String {
    if slot == RULE_DEFAULT {
        "default".into()
    } else {
        format!("rule #{slot}")
    }
}

impl Filter {
    /// A fresh instance: empty buckets and counters.
    pub fn load() -> Result<Filter> {
        let prog = FilterProgram::load(None, None).context("loading the filter (run as root)")?;
        let maps = prog.maps()?;
        Ok(Filter { prog, maps })
    }

    /// Makes rule file `text` live: each list it names gets a slot (in the
    /// order of their names) filled with `lists[name]` (none: an empty
    /// list). Returns the checked rule file.
    pub fn apply(&self, text: &str, lists: &BTreeMap<String, Vec<IpNet>>) -> Result<RuleSet> {
        self.apply_as(text, lists, None)
    }

    /// [`apply`](Self::apply), every list with its IPv4 bitmap
    /// (`Some(true)`), without (`Some(false)`), or as its size says.
    pub fn apply_as(&self, text: &str, lists: &BTreeMap<String, Vec<IpNet>>, bitmap: Option<bool>) -> Result<RuleSet> {
        let rs = RuleSet::parse(text, "t.toml")?;
        let mut slots = BTreeMap::new();
        for (slot, name) in rs.lists.keys().enumerate() {
            let nets = lists.get(name).map(Vec::as_slice).unwrap_or_default();
            match bitmap {
                Some(b) => self.maps.set_list_as(slot as u32, nets, b)?,
                None => self.maps.set_list(slot as u32, nets)?,
            }
            slots.insert(name.clone(), slot as u32);
        }
        self.maps.set_rules(&rule_set(&rs, &slots)?)?;
        Ok(rs)
    }

    pub fn run(&self, frame: &[u8]) -> Result<RunResult> {
        run_xdp(self.prog.prog(), frame, XdpContext::default())
    }

    /// Every counter, every rule slot's too (257 map reads: for tables).
    pub fn snapshot(&self) -> Result<Snapshot> {
        let rules = (0..=RULE_DEFAULT).map(|r| self.maps.rule_counters(r)).collect::<Result<_>>()?;
        Ok(Snapshot { counters: self.maps.counters()?, rules })
    }
}

/// A SYN as the syn-cookie action reads it.
pub struct Syn {
    pub client: std::net::IpAddr,
    pub server: std::net::IpAddr,
    pub client_port: u16,
    pub server_port: u16,
    pub seq: u32,
}

/// The SYN-ACK that answers `syn` with `cookie` and `mss`, by the contract
/// of `syncookie.h`, on `l2` (an Ethernet builder from server to client,
/// with the SYN's tag if it had one): a bare IP header (TTL 64; IPv4: DF,
/// ID 0), the ports swapped, the cookie, the SYN's sequence number plus
/// one, SYN+ACK, window 0, one MSS option. The packet table and the
/// fuzzer's model both expect this.
pub fn synack(l2: PacketBuilder, syn: &Syn, cookie: u32, mss: u16) -> Vec<u8> {
    let [hi, lo] = mss.to_be_bytes();
    let b = l2.ip(syn.server, syn.client).ttl(64);
    let b = if syn.server.is_ipv4() { b.ident(0).dont_frag(true) } else { b };
    b.tcp(syn.server_port, syn.client_port, TcpFlags::SYN | TcpFlags::ACK)
        .seq(cookie)
        .ack(syn.seq.wrapping_add(1))
        .window(0)
        .tcp_options(&[2, 4, hi, lo])
        .build()
}
