//! `xnf chain list` and `xnf chain stats`: tables for people, JSON for
//! programs. Stats follow each chain hop by hop: what matched at the
//! ingress, what went into and came out of every NF (the difference is
//! what the NF dropped, or answered itself), and how frames left: routed
//! in XDP, or handed to the kernel, and why.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use crate::program::{IngressReason, NfStats};
use anyhow::Result;
use serde::Serialize;
use xnf_core::fwd::Reason;

use crate::dataplane::{self, present};
use crate::registry::{Locked, Registry};
use xnf_netns::netlink;

#[derive(Serialize)]
struct NfRow {
    name: String,
    netns: String,
    ifname: String,
    port: String,
    function: &'static str,
    origin: String,
    state: &'static str,
    chains: Vec<String>,
}

#[derive(Serialize)]
struct ChainRow {
    name: String,
    ingress: String,
    egress: Vec<String>,
    priority: u32,
    matches: Vec<String>,
    nfs: Vec<String>,
    state: &'static str,
}

#[derive(Serialize)]
struct Listing {
    nfs: Vec<NfRow>,
    chains: Vec<ChainRow>,
}

fn listing(reg: &Registry) -> Result<Listing> {
    let links = netlink::links()?;
    let nfs = reg
        .nfs
        .values()
        .map(|n| NfRow {
            name: n.spec.name.clone(),
            netns: n.spec.container.clone().map(|c| format!("container {c}")).unwrap_or_else(|| n.netns_path.display().to_string()),
            ifname: n.spec.ifname.clone(),
            port: n.host_ifname.clone(),
            function: n.spec.function.name(),
            origin: format!("{:?}", n.origin).to_lowercase(),
            state: if present(n, &links) { "up" } else { "gone" },
            chains: reg.chains_with(&n.spec.name),
        })
        .collect();
    let chains = reg
        .chains
        .values()
        .map(|c| {
            let up = links.iter().any(|l| l.name == c.spec.ingress) && c.spec.nfs.iter().all(|n| reg.nfs.get(n).is_some_and(|nf| present(nf, &links)));
            ChainRow {
                name: c.spec.name.clone(),
                ingress: c.spec.ingress.clone(),
                egress: c.spec.egress.clone(),
                priority: c.spec.priority,
                matches: c.spec.matches.iter().map(|m| m.to_string()).collect(),
                nfs: c.spec.nfs.clone(),
                state: if up { "up" } else { "down" },
            }
        })
        .collect();
    Ok(Listing { nfs, chains })
}

pub fn list(json: bool) -> Result<()> {
    let l = listing(&Locked::open()?.reg)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&l)?);
        return Ok(());
    }
    if l.nfs.is_empty() && l.chains.is_empty() {
        println!("no NFs and no chains in this network namespace (`xnf nf create`, `xnf chain create`, `xnf apply`)");
        return Ok(());
    }
    println!("{:<12} {:<28} {:<8} {:<16} {:<8} {:<6} {:<5} CHAINS", "NF", "NETNS", "IFNAME", "PORT", "FUNCTION", "ORIGIN", "STATE");
    for n in &l.nfs {
        println!(
            "{:<12} {:<28} {:<8} {:<16} {:<8} {:<6} {:<5} {}",
            n.name,
            n.netns,
            n.ifname,
            n.port,
            n.function,
            n.origin,
            n.state,
            if n.chains.is_empty() { "-".into() } else { n.chains.join(",") }
        );
    }
    println!("\n{:<16} {:<16} {:>4} {:<5} PATH / MATCH", "CHAIN", "INGRESS", "PRIO", "STATE");
    for c in &l.chains {
        println!("{:<16} {:<16} {:>4} {:<5} {} -> route out", c.name, c.ingress, c.priority, c.state, c.nfs.join(" -> "));
        for m in &c.matches {
            println!("{:<44} match {m}", "");
        }
    }
    Ok(())
}

#[derive(Serialize, Clone, Default)]
pub struct HopStats {
    pub nf: String,
    pub in_packets: u64,
    pub out_packets: u64,
    /// in - out: what the NF dropped (or kept); negative would be answers it made.
    pub dropped_by_nf: i64,
    /// Sent nowhere: the NF's port vanished.
    pub gone: u64,
    /// Other chains go through this NF too: its counts are theirs as well.
    pub shared: bool,
}

#[derive(Serialize, Clone, Default)]
pub struct ChainStats {
    pub name: String,
    pub matched: u64,
    pub hops: Vec<HopStats>,
    /// After the last NF: routed in XDP.
    pub routed: u64,
    /// After the last NF: handed to the kernel, by reason.
    pub to_kernel: BTreeMap<String, u64>,
    pub dropped_at_exit: u64,
}

#[derive(Serialize, Clone, Default)]
pub struct Snapshot {
    pub chains: Vec<ChainStats>,
    /// Per ingress: what the classifier did with its frames.
    pub ingresses: BTreeMap<String, BTreeMap<String, u64>>,
}

fn exit_of(s: &NfStats) -> (u64, BTreeMap<String, u64>, u64) {
    let mut k = BTreeMap::new();
    for r in Reason::ALL {
        let v = s.exit(r);
        if v > 0 && r != Reason::Forwarded && r != Reason::Blackhole {
            k.insert(r.name().to_string(), v);
        }
    }
    (s.exit(Reason::Forwarded), k, s.exit(Reason::Blackhole))
}

/// Reads every counter of every chain now.
pub fn snapshot(reg: &Registry) -> Result<Snapshot> {
    let Some(maps) = dataplane::open_maps()? else { return Ok(Snapshot::default()) };
    let mut snap = Snapshot::default();
    for c in reg.chains.values() {
        let mut cs = ChainStats { name: c.spec.name.clone(), matched: maps.chain_stats(c.slot)?.0, ..Default::default() };
        for n in &c.spec.nfs {
            let Some(nf) = reg.nfs.get(n) else { continue };
            let s = maps.nf_stats(nf.slot)?;
            cs.hops.push(HopStats {
                nf: n.clone(),
                in_packets: s.in_packets,
                out_packets: s.out_packets,
                dropped_by_nf: s.in_packets as i64 - s.out_packets as i64,
                gone: s.gone,
                shared: reg.chains_with(n).len() > 1,
            });
        }
        if let Some(last) = c.spec.nfs.last().and_then(|n| reg.nfs.get(n)) {
            (cs.routed, cs.to_kernel, cs.dropped_at_exit) = exit_of(&maps.nf_stats(last.slot)?);
        }
        snap.chains.push(cs);
    }
    let links = netlink::links()?;
    let mut ingresses: Vec<&str> = reg.chains.values().map(|c| c.spec.ingress.as_str()).collect();
    ingresses.sort();
    ingresses.dedup();
    for (slot, name) in ingresses.iter().enumerate() {
        if !links.iter().any(|l| l.name == *name) {
            continue;
        }
        let s = maps.ingress_stats(slot as u32)?;
        let m = IngressReason::ALL.iter().map(|r| (r.name().to_string(), s.get(*r))).collect();
        snap.ingresses.insert(name.to_string(), m);
    }
    Ok(snap)
}

fn delta(now: &Snapshot, before: &Snapshot) -> Snapshot {
    let mut d = now.clone();
    for c in &mut d.chains {
        let Some(b) = before.chains.iter().find(|x| x.name == c.name) else { continue };
        c.matched = c.matched.saturating_sub(b.matched);
        c.routed = c.routed.saturating_sub(b.routed);
        c.dropped_at_exit = c.dropped_at_exit.saturating_sub(b.dropped_at_exit);
        for (k, v) in c.to_kernel.iter_mut() {
            *v = v.saturating_sub(*b.to_kernel.get(k).unwrap_or(&0));
        }
        for (h, bh) in c.hops.iter_mut().zip(&b.hops) {
            h.in_packets = h.in_packets.saturating_sub(bh.in_packets);
            h.out_packets = h.out_packets.saturating_sub(bh.out_packets);
            h.gone = h.gone.saturating_sub(bh.gone);
            h.dropped_by_nf = h.in_packets as i64 - h.out_packets as i64;
        }
    }
    for (name, m) in d.ingresses.iter_mut() {
        if let Some(b) = before.ingresses.get(name) {
            for (k, v) in m.iter_mut() {
                *v = v.saturating_sub(*b.get(k).unwrap_or(&0));
            }
        }
    }
    d
}

fn print(s: &Snapshot, unit: &str) {
    if s.chains.is_empty() {
        println!("no chains in this network namespace");
    }
    for c in &s.chains {
        println!("chain {}: {} {unit} matched", c.name, c.matched);
        println!("  {:>3} {:<12} {:>12} {:>12} {:>12} {:>8}", "hop", "nf", "in", "out", "dropped-by-nf", "gone");
        for (i, h) in c.hops.iter().enumerate() {
            let mark = if h.shared { " (shared: counts of every chain through it)" } else { "" };
            println!("  {:>3} {:<12} {:>12} {:>12} {:>12} {:>8}{mark}", i + 1, h.nf, h.in_packets, h.out_packets, h.dropped_by_nf, h.gone);
        }
        let kernel: Vec<String> = c.to_kernel.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "  exit: routed in XDP {}, to the kernel {}{}, dropped (blackhole) {}",
            c.routed,
            c.to_kernel.values().sum::<u64>(),
            if kernel.is_empty() { String::new() } else { format!(" ({})", kernel.join(", ")) },
            c.dropped_at_exit
        );
    }
    for (name, m) in &s.ingresses {
        let parts: Vec<String> = m.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k} {v}")).collect();
        println!("ingress {name}: {}", if parts.is_empty() { "nothing".into() } else { parts.join(", ") });
    }
}

pub fn stats(json: bool, watch: Option<Duration>) -> Result<()> {
    let reg = Locked::open()?.reg;
    anyhow::ensure!(!reg.chains.is_empty(), "no chains in this network namespace (`xnf chain create ...`)");
    let Some(period) = watch else {
        let s = snapshot(&reg)?;
        if json {
            println!("{}", serde_json::to_string_pretty(&s)?);
        } else {
            print(&s, "packets");
        }
        return Ok(());
    };
    let mut before = snapshot(&reg)?;
    let mut t0 = Instant::now();
    loop {
        std::thread::sleep(period);
        let now = snapshot(&reg)?;
        let secs = t0.elapsed().as_secs_f64();
        t0 = Instant::now();
        let mut d = delta(&now, &before);
        let per_sec = |v: &mut u64| *v = (*v as f64 / secs).round() as u64;
        for c in &mut d.chains {
            per_sec(&mut c.matched);
            per_sec(&mut c.routed);
            c.to_kernel.values_mut().for_each(per_sec);
            for h in &mut c.hops {
                per_sec(&mut h.in_packets);
                per_sec(&mut h.out_packets);
                h.dropped_by_nf = h.in_packets as i64 - h.out_packets as i64;
            }
        }
        if json {
            println!("{}", serde_json::to_string(&d)?);
        } else {
            println!("--- per second, over {secs:.1} s");
            print(&d, "pps");
        }
        std::io::stdout().flush()?;
        before = now;
    }
}
