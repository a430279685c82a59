//! `xnf router status` and `xnf router stats`: tables for people, JSON for
//! programs.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use xnf_core::xdp::Verdict;
use xnf_netns::netlink;

use crate::attach::{attached, open_maps, Attached};
use crate::program::{CacheOutcome, Reason, Stats};

#[derive(Serialize)]
struct Status {
    interfaces: Vec<Attached>,
    vlans: Vec<VlanRow>,
    follower_pid: Option<i32>,
    route_cache: CacheStatus,
}

/// The route cache as `status` shows it.
#[derive(Serialize)]
struct CacheStatus {
    /// The follower's lease is current: instances with `--fib cache` use it.
    leased: bool,
    generation: u32,
    /// Changes the kernel has notified (the follower's filter counts them).
    kernel_generation: u64,
    entries: usize,
    ipv4_cached: bool,
    ipv6_cached: bool,
}

#[derive(Serialize)]
struct VlanRow {
    vlan: String,
    vlan_ifindex: u32,
    parent: String,
    vid: u16,
    rpf: &'static str,
}

pub fn status(json: bool) -> Result<()> {
    let interfaces = attached()?;
    let (_, maps) = open_maps()?;
    let links = netlink::links()?;
    let name = |i: u32| links.iter().find(|l| l.ifindex == i).map(|l| l.name.clone()).unwrap_or(i.to_string());
    let vlans = maps
        .vlans()?
        .into_iter()
        .map(|v| VlanRow { vlan: name(v.vlan_ifindex), vlan_ifindex: v.vlan_ifindex, parent: name(v.phys_ifindex), vid: v.vid, rpf: v.rpf.name() })
        .collect();
    let ctl = maps.cache_ctl()?;
    let route_cache = CacheStatus {
        // The lease is in jiffies, which only BPF reads: a follower that
        // runs renews it every 100 ms; none runs, none is current.
        leased: crate::follow::running_pid().is_some() && ctl.lease_until > 0,
        generation: ctl.gen,
        kernel_generation: maps.kernel_gen()?,
        entries: maps.cache_len()?,
        ipv4_cached: ctl.aside & crate::program::ASIDE_V4 == 0,
        ipv6_cached: ctl.aside & crate::program::ASIDE_V6 == 0,
    };
    let s = Status { interfaces, vlans, follower_pid: crate::follow::running_pid(), route_cache };
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    println!("{:<16} {:>7} {:>4} {:<7} {:<7} {:<7} {:>7}", "INTERFACE", "IFINDEX", "SLOT", "MODE", "FIB", "RPF", "PROG");
    for a in &s.interfaces {
        let prog = a.prog_id.map(|p| p.to_string()).unwrap_or("-".into());
        println!("{:<16} {:>7} {:>4} {:<7} {:<7} {:<7} {:>7}", a.name, a.ifindex, a.slot, a.mode.name(), a.fib, a.rpf, prog);
    }
    if !s.vlans.is_empty() {
        println!("\n{:<16} {:<16} {:>5} {:<7}", "VLAN DEVICE", "PARENT", "VID", "RPF");
        for v in &s.vlans {
            println!("{:<16} {:<16} {:>5} {:<7}", v.vlan, v.parent, v.vid, v.rpf);
        }
    }
    match s.follower_pid {
        Some(pid) => println!("\nfollower: running (pid {pid})"),
        None => println!("\nfollower: not running (VLAN, MAC, address and rp_filter changes are not followed, the route cache is unused; `xnf router follow`)"),
    }
    if s.interfaces.iter().any(|a| a.fib == "cache") {
        let c = &s.route_cache;
        let fam = |on: bool| if on { "cached" } else { "aside (policy rules or multipath routes: see the follower's log)" };
        println!(
            "route cache: {}, generation {}, {} entries; IPv4 {}, IPv6 {}",
            if c.leased { "in use" } else { "unused (no follower)" },
            c.generation,
            c.entries,
            fam(c.ipv4_cached),
            fam(c.ipv6_cached)
        );
    }
    Ok(())
}

/// Counters of one interface, keyed by names for JSON.
#[derive(Serialize, Clone)]
struct IfaceStats {
    interface: String,
    packets: BTreeMap<&'static str, u64>,
    bytes: BTreeMap<&'static str, u64>,
    reasons: BTreeMap<&'static str, u64>,
    /// Route cache lookups per outcome (hit, miss, bypass).
    route_cache: BTreeMap<&'static str, u64>,
}

impl IfaceStats {
    fn new(interface: String, s: &Stats) -> Self {
        let verdicts = |a: &[u64; 5]| Verdict::ALL.iter().map(|v| (v.name(), a[*v as usize])).collect();
        IfaceStats {
            interface,
            packets: verdicts(&s.packets),
            bytes: verdicts(&s.bytes),
            reasons: Reason::ALL.iter().map(|r| (r.name(), s.reason(*r))).collect(),
            route_cache: CacheOutcome::ALL.iter().map(|o| (o.name(), s.cache(*o))).collect(),
        }
    }
}

/// Every attached interface's counters now, by name.
pub fn interface_stats() -> Result<Vec<(String, Stats)>> {
    snapshot()
}

fn snapshot() -> Result<Vec<(String, Stats)>> {
    let (_, maps) = open_maps()?;
    attached()?.into_iter().map(|a| Ok((a.name, maps.stats(a.slot)?))).collect()
}

pub fn stats(json: bool, watch: Option<Duration>) -> Result<()> {
    let Some(interval) = watch else {
        let rows: Vec<IfaceStats> = snapshot()?.iter().map(|(n, s)| IfaceStats::new(n.clone(), s)).collect();
        if json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            print_totals(&rows);
        }
        return Ok(());
    };
    let mut prev = snapshot()?;
    let mut t0 = Instant::now();
    loop {
        std::thread::sleep(interval);
        let now = snapshot()?;
        let secs = t0.elapsed().as_secs_f64();
        t0 = Instant::now();
        let rates: Vec<(String, Stats)> = now
            .iter()
            .map(|(name, s)| {
                let old = prev.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone()).unwrap_or_default();
                (name.clone(), s.delta(&old))
            })
            .collect();
        if json {
            let rows: Vec<IfaceStats> = rates.iter().map(|(n, s)| IfaceStats::new(n.clone(), &s.per_second(secs))).collect();
            println!("{}", serde_json::to_string(&serde_json::json!({ "interval_s": secs, "rates": rows }))?);
        } else {
            print_rates(&rates, secs);
        }
        std::io::stdout().flush()?;
        prev = now;
    }
}

fn print_totals(rows: &[IfaceStats]) {
    for r in rows {
        println!("{}:", r.interface);
        if r.packets.values().all(|p| *p == 0) {
            println!("  no packets yet");
        }
        for v in Verdict::ALL {
            let p = r.packets[v.name()];
            if p > 0 {
                println!("  {:<10} {:>14} pkts {:>16} bytes", v.name(), p, r.bytes[v.name()]);
            }
        }
        let reasons: Vec<String> = r.reasons.iter().filter(|(k, v)| **v > 0 && **k != "forwarded").map(|(k, v)| format!("{k}={v}")).collect();
        if !reasons.is_empty() {
            println!("  slow path: {}", reasons.join(" "));
        }
        if r.route_cache.values().any(|v| *v > 0) {
            let c: Vec<String> = r.route_cache.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("  route cache: {}", c.join(" "));
        }
    }
}

fn print_rates(rates: &[(String, Stats)], secs: f64) {
    // Clear the screen and home the cursor: a live view like `top`.
    print!("\x1b[2J\x1b[H");
    println!("xnf router stats — packets per second over {secs:.1} s (Ctrl-C to stop)\n");
    println!("{:<16} {:>12} {:>12} {:>12} {:>10}  WHY PASS / DROP", "INTERFACE", "REDIRECT", "PASS", "DROP", "Mbit/s");
    for (name, s) in rates {
        let pps = |v: Verdict| s.packets(v) as f64 / secs;
        let mbit = s.bytes.iter().sum::<u64>() as f64 * 8.0 / secs / 1e6;
        let why: Vec<String> =
            Reason::ALL[1..].iter().filter(|r| s.reason(**r) > 0).map(|r| format!("{} {:.0}", r.name(), s.reason(*r) as f64 / secs)).collect();
        println!(
            "{:<16} {:>12.0} {:>12.0} {:>12.0} {:>10.1}  {}",
            name,
            pps(Verdict::Redirect),
            pps(Verdict::Pass),
            pps(Verdict::Drop) + pps(Verdict::Aborted),
            mbit,
            why.join(", ")
        );
    }
}
