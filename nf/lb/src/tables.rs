//! Writing a checked service file into an lb instance's maps: the ids its
//! services and backends get ([`allocate`]) and the records, VIPs and
//! Maglev tables that make the data plane do what it says ([`converge`]).
//! `apply` does it to the pinned maps; tests and the fuzzer to an
//! instance of their own.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::config::{Config, Encap, Mode, Service};
use crate::maglev::NO_BACKEND;
use crate::plan::Table;
use crate::program::{addr_key, addr_words, LbMaps, RawBackend, RawConfig, RawService, RawServiceKey, MAX_BACKEND_IDS, MAX_SERVICES, TABLE_SLOTS};

/// A backend's id and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendId {
    pub id: u32,
    pub gen: u32,
}

/// Ids of one service and its backends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceIds {
    pub id: u32,
    pub backends: BTreeMap<IpAddr, BackendId>,
}

/// Every id handed out, by service name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ids {
    /// The next generation to hand out (never 0: 0 is a free record).
    pub next_gen: u32,
    pub services: BTreeMap<String, ServiceIds>,
}

/// The outer source prefixes the file gives (zero where it gives none:
/// [`converge`]'s caller fills those from the interfaces).
pub fn file_sources(encap: &Encap) -> RawConfig {
    let mut c = RawConfig::default();
    if let Some(n) = encap.source_v4 {
        c.src4 = addr_words(IpAddr::V4(n.network())).0[0];
        c.host4 = u32::from_be_bytes(n.hostmask().octets()).to_be();
    }
    if let Some(n) = encap.source_v6 {
        c.src6 = addr_words(IpAddr::V6(n.network())).0;
        let host = n.hostmask().octets();
        c.host6 = u32::from_be_bytes([host[12], host[13], host[14], host[15]]).to_be();
    }
    c
}

/// Ids for `config`: kept where the service (by name) and backend (by
/// address) were there before, new ones otherwise.
pub fn allocate(old: &Ids, config: &Config) -> Result<Ids> {
    let mut next_gen = old.next_gen.max(1);
    let kept = |name: &str| old.services.get(name);
    let mut service_ids: BTreeSet<u32> = config.services.iter().filter_map(|s| kept(&s.name)).map(|s| s.id).collect();
    // Ids of every record the old file had stay taken during this apply:
    // their records are freed only at its end.
    let mut backend_ids: BTreeSet<u32> = old.services.values().flat_map(|s| s.backends.values().map(|b| b.id)).collect();
    let next_free = |taken: &mut BTreeSet<u32>, max: u32, what: &str| -> Result<u32> {
        let id = (0..max).find(|i| !taken.contains(i)).with_context(|| format!("no free {what} id (at most {max})"))?;
        taken.insert(id);
        Ok(id)
    };
    let mut out = Ids::default();
    for s in &config.services {
        let prev = kept(&s.name);
        let id = match prev {
            Some(p) => p.id,
            None => next_free(&mut service_ids, MAX_SERVICES, "service")?,
        };
        let mut backends = BTreeMap::new();
        for b in &s.backends {
            let bid = match prev.and_then(|p| p.backends.get(&b.address)) {
                Some(k) => *k,
                None => {
                    let id = next_free(&mut backend_ids, MAX_BACKEND_IDS, "backend")?;
                    let gen = next_gen;
                    next_gen = next_gen.checked_add(1).context("backend generations exhausted: remove the lb state (`xnf lb detach`) and start over")?;
                    BackendId { id, gen }
                }
            };
            backends.insert(b.address, bid);
        }
        out.services.insert(s.name.clone(), ServiceIds { id, backends });
    }
    out.next_gen = next_gen;
    Ok(out)
}

/// The data plane's key of a service.
pub fn service_key(s: &Service) -> RawServiceKey {
    let (vip, family) = addr_words(s.vip);
    RawServiceKey { vip, port: s.port.unwrap_or(0), family, proto: s.proto.number() }
}

fn backend_record(b: &crate::config::Backend, gen: u32) -> RawBackend {
    let (addr, family) = addr_words(b.address);
    RawBackend { addr, gen, family, has_mac: b.mac.is_some() as u8, mac: b.mac.unwrap_or_default() }
}

fn mode_of(m: Mode) -> (u8, u16) {
    match m {
        Mode::Ipip => (0, 0),
        Mode::Gue { port } => (1, port),
        Mode::Dsr => (2, 0),
    }
}

/// Makes the maps hold `config` (ids from [`allocate`], outer sources
/// from [`file_sources`] or the interfaces') and nothing else.
pub fn converge(maps: &LbMaps, config: &Config, tables: &[Table], ids: &Ids, sources: &RawConfig) -> Result<()> {
    maps.set_config(sources)?;
    let live_backends: BTreeMap<u32, u32> = ids.services.values().flat_map(|s| s.backends.values().map(|b| (b.id, b.gen))).collect();
    for s in &config.services {
        let sid = &ids.services[&s.name];
        for b in &s.backends {
            let k = sid.backends[&b.address];
            if maps.backend(k.id)?.gen != k.gen {
                // A new holder of this id: its counters start at 0.
                maps.reset_backend_counters(k.id)?;
            }
            maps.set_backend(k.id, &backend_record(b, k.gen))?;
        }
    }
    for s in &config.services {
        maps.add_vip(s.vip)?;
    }
    let mut live_slots = BTreeSet::new();
    let mut live_keys = Vec::new();
    for (s, table) in config.services.iter().zip(tables) {
        let sid = &ids.services[&s.name];
        let key = service_key(s);
        let current = maps.service(&key)?;
        if current.is_none_or(|c| c.id != sid.id) {
            maps.reset_service_counters(sid.id)?;
        }
        let live = current.filter(|c| c.slot / 2 == sid.id);
        let id_of = |i: u32| if i == NO_BACKEND { NO_BACKEND } else { sid.backends[&table.backends()[i as usize].0].id };
        let entries: Vec<u32> = table.entries().iter().map(|&i| id_of(i)).collect();
        let (mode, gue_port) = mode_of(s.mode);
        let mut rec = RawService {
            slot: live.map_or(2 * sid.id, |c| c.slot),
            table_size: s.table_size,
            id: sid.id,
            gue_port: gue_port.to_be(),
            mode,
            hash3: (s.hash == crate::config::HashFields::ThreeTuple) as u8,
        };
        live_keys.push(xnf_core::maps::as_bytes(&key).to_vec());
        // A service the file does not change keeps its live table: a
        // swap costs two RCU grace periods (the kernel waits for one after
        // each update or delete of a map of maps, 10-40 ms here), and an
        // apply of a file with one change among hundreds of services would
        // pay them all. (Linux 6.1 waits after a lookup too: the read
        // costs one there.)
        if live.is_some_and(|c| xnf_core::maps::as_bytes(&c) == xnf_core::maps::as_bytes(&rec)) && maps.table(rec.slot)?.is_some_and(|t| t == entries) {
            live_slots.insert(rec.slot);
            continue;
        }
        // Else the new table goes into the idle one of the two slots.
        rec.slot = 2 * sid.id + live.map_or(0, |c| 1 - c.slot % 2);
        maps.set_table(rec.slot, &entries)?;
        maps.set_service(&key, &rec)?;
        live_slots.insert(rec.slot);
    }
    for k in maps.service_keys() {
        if !live_keys.contains(&xnf_core::maps::as_bytes(&k).to_vec()) {
            maps.delete_service(&k)?;
        }
    }
    let vips: BTreeSet<Vec<u8>> = config.services.iter().map(|s| addr_key(s.vip)).collect();
    for k in maps.vip_keys() {
        if !vips.contains(&k) {
            maps.delete_vip_key(&k)?;
        }
    }
    for slot in (0..TABLE_SLOTS).filter(|s| !live_slots.contains(s)) {
        maps.clear_table(slot)?;
    }
    for id in 0..MAX_BACKEND_IDS {
        if !live_backends.contains_key(&id) && maps.backend(id)?.gen != 0 {
            maps.set_backend(id, &RawBackend::default())?;
        }
    }
    Ok(())
}
