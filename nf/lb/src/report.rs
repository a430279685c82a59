//! `xnf lb status` and `xnf lb stats`: tables for people, JSON for programs.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use xnf_core::entry;

use crate::attach::{applied, ids};
use crate::attach::{attached_links, open_maps, sources};
use crate::config::Config;
use crate::program::{BackendCounters, Counter, Counters, LbMaps, ServiceCounters, CT_ENTRIES};
use crate::tables::Ids;

#[derive(Serialize)]
struct IfaceRow {
    name: String,
    ifindex: u32,
    mode: &'static str,
    /// The stages on the interface, in the order frames meet them.
    stages: Vec<String>,
}

#[derive(Serialize)]
struct BackendRow {
    address: IpAddr,
    weight: u16,
    id: u32,
    /// Weight 0, or the whole service drained: no new flows, old ones stay.
    drained: bool,
}

#[derive(Serialize)]
struct ServiceRow {
    name: String,
    selector: String,
    mode: String,
    hash: String,
    table_size: u32,
    backends: Vec<BackendRow>,
}

#[derive(Serialize)]
struct Status {
    interfaces: Vec<IfaceRow>,
    services_from: Option<String>,
    services: Vec<ServiceRow>,
    /// Outer sources in use: the file's prefixes, else an interface's address.
    source_v4: Option<String>,
    source_v6: Option<String>,
    conntrack_entries: u64,
    conntrack_capacity: u32,
}

fn interfaces() -> Result<Vec<IfaceRow>> {
    Ok(attached_links()?
        .into_iter()
        .filter_map(|l| {
            let info = entry::info(l.ifindex)?;
            let stages = info.stages.iter().map(|(s, id, name)| format!("{}:{name}#{id}", s.name())).collect();
            Some(IfaceRow { name: l.name, ifindex: l.ifindex, mode: info.mode.name(), stages })
        })
        .collect())
}

fn service_rows(config: &Config, ids: &Ids) -> Vec<ServiceRow> {
    config
        .services
        .iter()
        .map(|s| ServiceRow {
            name: s.name.clone(),
            selector: s.selector(),
            mode: s.mode.to_string(),
            hash: s.hash.to_string(),
            table_size: s.table_size,
            backends: s
                .backends
                .iter()
                .map(|b| BackendRow {
                    address: b.address,
                    weight: b.weight,
                    id: ids.services.get(&s.name).and_then(|i| i.backends.get(&b.address)).map_or(u32::MAX, |k| k.id),
                    drained: s.drain || b.weight == 0,
                })
                .collect(),
        })
        .collect()
}

pub fn status(json: bool) -> Result<()> {
    let maps = open_maps()?;
    let a = applied()?;
    let config = a.as_ref().map(|a| a.config.clone()).unwrap_or_default();
    let src = sources(&config.encap)?;
    let v4 = (src.src4 != 0).then(|| match config.encap.source_v4 {
        Some(n) => n.to_string(),
        None => format!("{} (interface address)", std::net::Ipv4Addr::from(src.src4.to_ne_bytes())),
    });
    let v6 = (src.src6 != [0; 4]).then(|| match config.encap.source_v6 {
        Some(n) => n.to_string(),
        None => {
            let b: Vec<u8> = src.src6.iter().flat_map(|w| w.to_ne_bytes()).collect();
            format!("{} (interface address)", std::net::Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or_default()))
        }
    });
    let s = Status {
        interfaces: interfaces()?,
        services_from: a.as_ref().map(|a| a.origin.clone()),
        services: service_rows(&config, &ids()?),
        source_v4: v4,
        source_v6: v6,
        conntrack_entries: maps.conntrack_fill(),
        conntrack_capacity: CT_ENTRIES,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    if s.interfaces.is_empty() {
        println!("interfaces: none (`xnf lb attach IFACE`)");
    }
    for i in &s.interfaces {
        println!("{:<16} {:<7} {}", i.name, i.mode, i.stages.join(" -> "));
    }
    match &s.services_from {
        Some(o) => println!("services from {o}:"),
        None => println!("services: none applied (`xnf lb apply FILE`)"),
    }
    for r in &s.services {
        println!("  {:<16} {} {} {} table {}", r.name, r.selector, r.mode, r.hash, r.table_size);
        for b in &r.backends {
            println!("    {:<40} weight {:<5}{}", b.address.to_string(), b.weight, if b.drained { " drained" } else { "" });
        }
    }
    println!("outer source: IPv4 {}, IPv6 {}", s.source_v4.as_deref().unwrap_or("none"), s.source_v6.as_deref().unwrap_or("none"));
    println!("connection table: {} of {} entries", s.conntrack_entries, s.conntrack_capacity);
    Ok(())
}

#[derive(Clone, Serialize)]
pub struct ServiceStats {
    pub name: String,
    #[serde(flatten)]
    pub counters: ServiceCounters,
    pub backends: BTreeMap<IpAddr, BackendCounters>,
}

#[derive(Serialize)]
struct StatsOut {
    counters: BTreeMap<&'static str, u64>,
    services: Vec<ServiceStats>,
    conntrack_entries: u64,
    /// Entries made that are no longer there: evicted by the LRU (made
    /// minus present; nothing else removes entries).
    conntrack_evicted: u64,
}

fn snapshot(maps: &LbMaps, config: &Config, ids: &Ids) -> Result<(Counters, Vec<ServiceStats>)> {
    let mut out = Vec::new();
    for s in &config.services {
        let Some(sid) = ids.services.get(&s.name) else { continue };
        let mut backends = BTreeMap::new();
        for (addr, b) in &sid.backends {
            backends.insert(*addr, maps.backend_counters(b.id)?);
        }
        out.push(ServiceStats { name: s.name.clone(), counters: maps.service_counters(sid.id)?, backends });
    }
    Ok((maps.counters()?, out))
}

/// Every service's and backend's counters now, and the connection
/// table's entries; none when the lb has no state here.
pub fn service_stats() -> Result<(Vec<ServiceStats>, u64)> {
    let Some(maps) = xnf_core::lifecycle::Lifecycle::<crate::Lb>::maps()? else { return Ok((Vec::new(), 0)) };
    let config = applied()?.map(|a| a.config).unwrap_or_default();
    Ok((snapshot(&maps, &config, &ids()?)?.1, maps.conntrack_fill()))
}

fn named(c: &Counters) -> BTreeMap<&'static str, u64> {
    Counter::ALL.iter().map(|k| (k.name(), c[*k as usize])).collect()
}

pub fn stats(json: bool, watch: Option<Duration>) -> Result<()> {
    let maps = open_maps()?;
    let config = applied()?.map(|a| a.config).unwrap_or_default();
    let ids = ids()?;
    let Some(interval) = watch else {
        let (c, services) = snapshot(&maps, &config, &ids)?;
        let fill = maps.conntrack_fill();
        let made = c[Counter::CtMiss as usize];
        let out = StatsOut { counters: named(&c), services, conntrack_entries: fill, conntrack_evicted: made.saturating_sub(fill) };
        if json {
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            print_stats(&out);
        }
        return Ok(());
    };
    let (mut prev_c, mut prev_s) = snapshot(&maps, &config, &ids)?;
    let mut t0 = Instant::now();
    loop {
        std::thread::sleep(interval);
        let (c, s) = snapshot(&maps, &config, &ids)?;
        let secs = t0.elapsed().as_secs_f64();
        t0 = Instant::now();
        let rate = |a: u64, b: u64| (a.saturating_sub(b) as f64 / secs).round() as u64;
        let counters: BTreeMap<&str, u64> = Counter::ALL.iter().map(|k| (k.name(), rate(c[*k as usize], prev_c[*k as usize]))).collect();
        let services: Vec<ServiceStats> = s
            .iter()
            .zip(&prev_s)
            .map(|(n, o)| ServiceStats {
                name: n.name.clone(),
                counters: ServiceCounters {
                    packets: rate(n.counters.packets, o.counters.packets),
                    bytes: rate(n.counters.bytes, o.counters.bytes),
                    flows: rate(n.counters.flows, o.counters.flows),
                    no_backend: rate(n.counters.no_backend, o.counters.no_backend),
                },
                backends: n
                    .backends
                    .iter()
                    .map(|(a, b)| {
                        let ob = o.backends.get(a).copied().unwrap_or_default();
                        (*a, BackendCounters { packets: rate(b.packets, ob.packets), bytes: rate(b.bytes, ob.bytes) })
                    })
                    .collect(),
            })
            .collect();
        if json {
            println!("{}", serde_json::to_string(&serde_json::json!({ "interval_s": secs, "per_second": counters, "services_per_second": services }))?);
        } else {
            println!(
                "{:>10} rx/s {:>10} tx/s {:>10} redirect/s {:>10} pass/s {:>10} drop/s {:>10} new flows/s",
                counters["rx"], counters["tx"], counters["redirect"], counters["pass"], counters["drop"], counters["ct-miss"]
            );
            for sv in services.iter().filter(|s| s.counters.packets > 0) {
                println!("    {:<16} {:>10} pkt/s {:>10} flows/s", sv.name, sv.counters.packets, sv.counters.flows);
            }
        }
        (prev_c, prev_s) = (c, s);
    }
}

fn print_stats(s: &StatsOut) {
    println!("{:<16} {:<40} {:>12} {:>14} {:>10} {:>10}", "SERVICE", "BACKEND", "PACKETS", "BYTES", "FLOWS", "NO-BACKEND");
    for sv in &s.services {
        let c = &sv.counters;
        println!("{:<16} {:<40} {:>12} {:>14} {:>10} {:>10}", sv.name, "(all)", c.packets, c.bytes, c.flows, c.no_backend);
        for (a, b) in &sv.backends {
            println!("{:<16} {:<40} {:>12} {:>14}", "", a.to_string(), b.packets, b.bytes);
        }
    }
    println!();
    for (k, v) in s.counters.iter().filter(|(_, v)| **v > 0) {
        println!("{k:<14} {v:>14}");
    }
    println!("connection table: {} entries, {} evicted", s.conntrack_entries, s.conntrack_evicted);
}
