//! `xnf filter status` and `xnf filter stats`: tables for people, JSON for
//! programs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use xnf_core::entry;
use xnf_core::features::Feature;

use crate::apply::{applied, pending_seconds, Applied};
use crate::attach::{attached_links, open_maps};
use crate::program::{Counter, Counters, FilterMaps, RuleCounters, RULE_DEFAULT};
use crate::rules::{Action, RuleSet};

#[derive(Serialize)]
struct IfaceRow {
    name: String,
    ifindex: u32,
    mode: &'static str,
    /// The stages on the interface, in the order frames meet them.
    stages: Vec<String>,
}

#[derive(Serialize)]
struct Status {
    interfaces: Vec<IfaceRow>,
    rules_from: Option<String>,
    rules: usize,
    default: &'static str,
    lists: BTreeMap<String, usize>,
    /// Seconds before an unconfirmed change is rolled back.
    pending_rollback_s: Option<u64>,
    /// Whether this kernel offers the helpers SYN cookies in XDP need.
    syncookie_helpers: bool,
    /// Whether it offers conntrack's lookup to XDP now (syn-cookie rules
    /// check segments against known connections with it).
    conntrack_lookup: bool,
    /// Whether the SYNPROXY table of syn-cookie rules is installed.
    synproxy_table: bool,
}

fn rule_set(a: &Option<Applied>) -> Option<RuleSet> {
    a.as_ref().and_then(|a| RuleSet::parse(&a.text, &a.origin).ok())
}

pub fn status(json: bool) -> Result<()> {
    let interfaces: Vec<IfaceRow> = attached_links()?
        .into_iter()
        .filter_map(|l| {
            let info = entry::info(l.ifindex)?;
            let stages = info.stages.iter().map(|(s, id, name)| format!("{}:{name}#{id}", s.name())).collect();
            Some(IfaceRow { name: l.name, ifindex: l.ifindex, mode: info.mode.name(), stages })
        })
        .collect();
    let a = applied()?;
    let rs = rule_set(&a);
    let s = Status {
        interfaces,
        rules_from: a.as_ref().map(|a| a.origin.clone()),
        rules: rs.as_ref().map_or(0, |r| r.rules.len()),
        default: if rs.as_ref().is_some_and(|r| r.default_drop) { "drop" } else { "pass" },
        lists: a.as_ref().map(|a| a.lists.iter().map(|(n, l)| (n.clone(), l.entries)).collect()).unwrap_or_default(),
        pending_rollback_s: pending_seconds()?,
        syncookie_helpers: Feature::SyncookieHelpers.probe().is_ok(),
        conntrack_lookup: crate::program::conntrack_lookup(),
        synproxy_table: crate::synproxy::present(),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    println!("{:<16} {:>7} {:<7} STAGES", "INTERFACE", "IFINDEX", "MODE");
    for i in &s.interfaces {
        println!("{:<16} {:>7} {:<7} {}", i.name, i.ifindex, i.mode, i.stages.join(" -> "));
    }
    match &s.rules_from {
        Some(f) => println!("\nrules: {} from {f}, default {}", s.rules, s.default),
        None => println!("\nrules: none applied (everything passes; `xnf filter apply FILE`)"),
    }
    for (n, e) in &s.lists {
        println!("list @{n}: {e} entries");
    }
    if let Some(left) = s.pending_rollback_s {
        println!("\nUNCONFIRMED: rolled back in {left} s unless `xnf filter confirm`");
    }
    Ok(())
}

/// One rule's counters, for JSON.
#[derive(Serialize, Clone)]
pub struct RuleRow {
    pub index: u32,
    pub name: String,
    pub action: String,
    #[serde(flatten)]
    pub counters: RuleCounters,
}

#[derive(Serialize)]
struct TopRow {
    source: String,
    /// Drops counted against it (a lower bound: see the README).
    drops: u64,
}

#[derive(Serialize)]
struct StatsOut {
    counters: BTreeMap<&'static str, u64>,
    rules: Vec<RuleRow>,
    top_sources: Vec<TopRow>,
}

fn action_name(a: &Action) -> String {
    match a {
        Action::Drop => "drop".into(),
        Action::Pass => "pass".into(),
        Action::Count => "count".into(),
        Action::RateLimit { pps, bps, .. } => {
            let mut parts = vec![];
            if let Some(p) = pps {
                parts.push(format!("{p} pps"));
            }
            if let Some(b) = bps {
                parts.push(format!("{b} B/s"));
            }
            format!("rate-limit {}", parts.join(" "))
        }
        Action::SynCookie { mss } => format!("syn-cookie mss {mss}"),
    }
}

fn snapshot(maps: &FilterMaps, rs: &Option<RuleSet>) -> Result<(Counters, Vec<RuleRow>)> {
    let mut rows = Vec::new();
    if let Some(rs) = rs {
        for (i, r) in rs.rules.iter().enumerate() {
            rows.push(RuleRow { index: i as u32, name: r.name.clone(), action: action_name(&r.action), counters: maps.rule_counters(i as u32)? });
        }
    }
    let default = if rs.as_ref().is_some_and(|r| r.default_drop) { "drop" } else { "pass" };
    rows.push(RuleRow { index: RULE_DEFAULT, name: "(default)".into(), action: default.into(), counters: maps.rule_counters(RULE_DEFAULT)? });
    Ok((maps.counters()?, rows))
}

/// Every rule's counters now, the default's last (`(default)`); none when
/// the filter has no state here.
pub fn rule_stats() -> Result<Vec<RuleRow>> {
    let Some(maps) = xnf_core::lifecycle::Lifecycle::<crate::Filter>::maps()? else { return Ok(Vec::new()) };
    Ok(snapshot(&maps, &rule_set(&applied()?))?.1)
}

fn named(c: &Counters) -> BTreeMap<&'static str, u64> {
    Counter::ALL.iter().map(|k| (k.name(), c[*k as usize])).collect()
}

pub fn stats(json: bool, top: usize, watch: Option<Duration>) -> Result<()> {
    let maps = open_maps()?;
    let rs = rule_set(&applied()?);
    let Some(interval) = watch else {
        let (c, rules) = snapshot(&maps, &rs)?;
        let top_sources = maps.top_sources(top)?.into_iter().map(|(ip, n)| TopRow { source: ip.to_string(), drops: n }).collect();
        let out = StatsOut { counters: named(&c), rules, top_sources };
        if json {
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            print_stats(&out);
        }
        return Ok(());
    };
    let (mut prev_c, mut prev_r) = snapshot(&maps, &rs)?;
    let mut t0 = Instant::now();
    loop {
        std::thread::sleep(interval);
        let (c, r) = snapshot(&maps, &rs)?;
        let secs = t0.elapsed().as_secs_f64();
        t0 = Instant::now();
        let rate = |a: u64, b: u64| (a.saturating_sub(b) as f64 / secs).round() as u64;
        let counters: BTreeMap<&str, u64> = Counter::ALL.iter().map(|k| (k.name(), rate(c[*k as usize], prev_c[*k as usize]))).collect();
        let rules: Vec<RuleRow> = r
            .iter()
            .zip(&prev_r)
            .map(|(n, o)| RuleRow {
                counters: RuleCounters {
                    packets: rate(n.counters.packets, o.counters.packets),
                    bytes: rate(n.counters.bytes, o.counters.bytes),
                    dropped: rate(n.counters.dropped, o.counters.dropped),
                },
                ..n.clone()
            })
            .collect();
        if json {
            println!("{}", serde_json::to_string(&serde_json::json!({ "interval_s": secs, "per_second": counters, "rules_per_second": rules }))?);
        } else {
            println!("{:>10.0} rx/s {:>10.0} drop/s {:>10.0} pass/s", counters["rx"] as f64, counters["drop"] as f64, counters["pass"] as f64);
            for row in rules.iter().filter(|r| r.counters.packets > 0) {
                println!("    {:<24} {:>10} pkt/s {:>10} drop/s", row.name, row.counters.packets, row.counters.dropped);
            }
        }
        (prev_c, prev_r) = (c, r);
    }
}

fn print_stats(s: &StatsOut) {
    println!("{:<4} {:<24} {:<22} {:>12} {:>14} {:>12}", "#", "RULE", "ACTION", "PACKETS", "BYTES", "DROPPED");
    for r in &s.rules {
        let idx = if r.index == RULE_DEFAULT { "-".to_string() } else { (r.index + 1).to_string() };
        println!("{:<4} {:<24} {:<22} {:>12} {:>14} {:>12}", idx, r.name, r.action, r.counters.packets, r.counters.bytes, r.counters.dropped);
    }
    println!();
    for (k, v) in s.counters.iter().filter(|(_, v)| **v > 0) {
        println!("{k:<14} {v:>14}");
    }
    if !s.top_sources.is_empty() {
        println!("\ntop dropped sources (at least this many drops):");
        for t in &s.top_sources {
            println!("  {:<40} {}", t.source, t.drops);
        }
    }
}
