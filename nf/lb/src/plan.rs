//! Plans: what a new service file does to flows, before anything changes
//! (`xnf lb plan FILE`).
//!
//! A flow that is not pinned by the data plane's connection table (a new
//! one, a TCP SYN, or one whose entry aged out) goes to the backend of its
//! hash's table entry. A change of backends moves some entries: those of
//! removed or drained backends must move; the others that move anyway are
//! the *collateral*, which Maglev keeps small and a larger table keeps
//! smaller (the figures: removing 10 of 1,000 backends moves about
//! 2.3 % of the other backends' entries with M = 65,537, 0.6 % with
//! M = 655,373; the tests pin 2.483 % and 0.586 % here). Everything here
//! is a share of the hash space, that is of the flows that would be placed
//! afresh.

use std::collections::BTreeMap;
use std::net::IpAddr;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::config::{Config, Service};
use crate::maglev::{self, NO_BACKEND};

/// A built table with the backends its entries point to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    backends: Vec<(IpAddr, u32)>,
    entries: Vec<u32>,
}

/// One backend's part of a table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Share {
    pub address: IpAddr,
    pub weight: u32,
    pub entries: u32,
    /// `entries / size`.
    pub share: f64,
    /// What its weight asks for: `weight / Σ weights`.
    pub ideal: f64,
}

/// How far shares are from their weights' ideal, over backends with a
/// weight: `entries / ideal entries` at its largest and smallest (the
/// paper's imbalance is `max - 1`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Balance {
    pub max: f64,
    pub min: f64,
}

/// What a change does to the hash space; every field is a share of it (0-1).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Disruption {
    /// Flows that would go to another backend than before.
    pub moved: f64,
    /// Flows whose backend before still takes new flows after.
    pub kept: f64,
    /// Of `kept`, those that move anyway: moved but not removed.
    pub collateral: f64,
    /// Entry by entry (same table size and same hashing), or the expected
    /// values when flows land on other entries (a new table size, other
    /// hash fields or another VIP, protocol or port).
    pub exact: bool,
}

impl Disruption {
    /// Collateral as a share of the flows whose backend stays: the number
    /// the Maglev paper and the issue quote.
    pub fn collateral_of_kept(&self) -> f64 {
        if self.kept > 0.0 {
            self.collateral / self.kept
        } else {
            0.0
        }
    }
}

impl Table {
    /// Builds the Maglev table of `size` entries over backends (address,
    /// weight); the address is the backend's key.
    pub fn build(backends: &[(IpAddr, u32)], size: u32) -> Result<Table> {
        let keyed: Vec<(Vec<u8>, u32)> = backends.iter().map(|&(a, w)| (maglev::addr_key(a), w)).collect();
        Ok(Table { backends: backends.to_vec(), entries: maglev::build(&keyed, size)? })
    }

    /// The table of a checked service (drained: every entry empty).
    pub fn of(service: &Service) -> Result<Table> {
        Table::build(&service.weights(), service.table_size).with_context(|| format!("service {}", service.name))
    }

    pub fn size(&self) -> u32 {
        self.entries.len() as u32
    }

    /// Per entry, an index into [`Table::backends`] or [`NO_BACKEND`].
    pub fn entries(&self) -> &[u32] {
        &self.entries
    }

    pub fn backends(&self) -> &[(IpAddr, u32)] {
        &self.backends
    }

    /// The backend of entry `e`, if any.
    pub fn owner(&self, e: usize) -> Option<IpAddr> {
        self.entries.get(e).and_then(|&i| self.backends.get(i as usize)).map(|b| b.0)
    }

    /// Entries per backend, in [`Table::backends`] order.
    fn counts(&self) -> Vec<u32> {
        let mut c = vec![0; self.backends.len()];
        self.entries.iter().filter(|&&i| i != NO_BACKEND).for_each(|&i| c[i as usize] += 1);
        c
    }

    /// Each backend's share and what its weight asks for.
    pub fn shares(&self) -> Vec<Share> {
        let total: f64 = self.backends.iter().map(|b| f64::from(b.1)).sum();
        let size = f64::from(self.size());
        let ideal = |w: u32| if total > 0.0 { f64::from(w) / total } else { 0.0 };
        let counts = self.counts();
        self.backends
            .iter()
            .zip(counts)
            .map(|(&(address, weight), entries)| Share { address, weight, entries, share: f64::from(entries) / size, ideal: ideal(weight) })
            .collect()
    }

    /// Shares against their ideal, if any backend has a weight.
    pub fn balance(&self) -> Option<Balance> {
        let ratios = self.shares().into_iter().filter(|s| s.weight > 0).map(|s| s.share / s.ideal);
        ratios.fold(None, |b: Option<Balance>, r| Some(b.map_or(Balance { max: r, min: r }, |b| Balance { max: b.max.max(r), min: b.min.min(r) })))
    }

    /// Share of the hash space per backend address (`None`: no backend).
    fn space(&self) -> BTreeMap<Option<IpAddr>, f64> {
        let mut m = BTreeMap::new();
        let size = f64::from(self.size());
        for (i, c) in self.counts().into_iter().enumerate() {
            *m.entry(Some(self.backends[i].0)).or_default() += f64::from(c) / size;
        }
        let empty = self.entries.iter().filter(|&&i| i == NO_BACKEND).count();
        *m.entry(None).or_default() += empty as f64 / size;
        m
    }

    /// Whether `a` takes new flows in this table's configuration.
    fn serves(&self, a: IpAddr) -> bool {
        self.backends.iter().any(|b| b.0 == a && b.1 > 0)
    }
}

/// What going from `old` to `new` does when flows keep their hash: entry by
/// entry if both tables have the same size, else [`rehashed`].
pub fn disruption(old: &Table, new: &Table) -> Disruption {
    if old.size() != new.size() {
        return rehashed(old, new);
    }
    let index: BTreeMap<IpAddr, u32> = new.backends.iter().enumerate().map(|(i, b)| (b.0, i as u32)).collect();
    // Per old backend: its index in the new table, and whether it serves.
    let remap: Vec<u32> = old.backends.iter().map(|b| index.get(&b.0).copied().unwrap_or(NO_BACKEND)).collect();
    let stays: Vec<bool> = old.backends.iter().map(|b| new.serves(b.0)).collect();
    let (mut moved, mut kept, mut collateral) = (0u64, 0u64, 0u64);
    for (&o, &n) in old.entries.iter().zip(&new.entries) {
        let (same, stay) = if o == NO_BACKEND { (n == NO_BACKEND, false) } else { (remap[o as usize] == n, stays[o as usize]) };
        moved += u64::from(!same);
        kept += u64::from(stay);
        collateral += u64::from(stay && !same);
    }
    let size = f64::from(old.size());
    Disruption { moved: moved as f64 / size, kept: kept as f64 / size, collateral: collateral as f64 / size, exact: true }
}

/// What going from `old` to `new` does when flows land on unrelated
/// entries: a flow stays on backend `b` with probability
/// `share_old(b) · share_new(b)` (the two entries are independent for a
/// uniform hash), so these are expected values.
pub fn rehashed(old: &Table, new: &Table) -> Disruption {
    let (before, after) = (old.space(), new.space());
    let mut same = 0.0;
    let mut kept = 0.0;
    let mut kept_same = 0.0;
    for (a, s) in &before {
        let both = s * after.get(a).copied().unwrap_or(0.0);
        same += both;
        if a.is_some_and(|a| new.serves(a)) {
            kept += s;
            kept_same += both;
        }
    }
    Disruption { moved: 1.0 - same, kept, collateral: kept - kept_same, exact: false }
}

/// How a service differs between two files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Added,
    Removed,
    Changed,
    Unchanged,
}

/// One service's plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServicePlan {
    pub name: String,
    pub change: Change,
    /// What differs, one line each (`backend 198.18.1.3: added, weight 1`).
    pub notes: Vec<String>,
    /// For a service in both files.
    pub disruption: Option<Disruption>,
    /// The new table's shares (none for a removed service).
    pub shares: Vec<Share>,
    pub balance: Option<Balance>,
}

/// The plan from `old` to `new`, services matched by name: the new file's
/// services in its order, then those it removes.
pub fn plan(old: &Config, new: &Config) -> Result<Vec<ServicePlan>> {
    let mut plans = Vec::with_capacity(new.services.len());
    for s in &new.services {
        let table = Table::of(s)?;
        let (change, notes, disruption) = match old.service(&s.name) {
            None => (Change::Added, vec![format!("takes {}", s.selector())], None),
            Some(o) => {
                let notes = differences(o, s);
                let d = if notes.is_empty() { disruption(&table, &table) } else { compare(o, s, &table)? };
                (if notes.is_empty() { Change::Unchanged } else { Change::Changed }, notes, Some(d))
            }
        };
        plans.push(ServicePlan { name: s.name.clone(), change, notes, disruption, shares: table.shares(), balance: table.balance() });
    }
    for o in old.services.iter().filter(|o| new.service(&o.name).is_none()) {
        let notes = vec![format!("no longer takes {}", o.selector())];
        plans.push(ServicePlan { name: o.name.clone(), change: Change::Removed, notes, disruption: None, shares: Vec::new(), balance: None });
    }
    Ok(plans)
}

/// Disruption of a service in both files: flows keep their entries only if
/// they hash the same way to the same selector.
fn compare(old: &Service, new: &Service, table: &Table) -> Result<Disruption> {
    let before = Table::of(old)?;
    let same_hashing = old.hash == new.hash && (old.vip, old.proto, old.port) == (new.vip, new.proto, new.port);
    Ok(if same_hashing { disruption(&before, table) } else { rehashed(&before, table) })
}

/// What differs between two versions of a service, one line each.
fn differences(old: &Service, new: &Service) -> Vec<String> {
    let mut notes = Vec::new();
    let mut field = |what: &str, was: String, is: String| {
        if was != is {
            notes.push(format!("{what} {is} (was {was})"));
        }
    };
    field("takes", old.selector(), new.selector());
    field("hash", old.hash.to_string(), new.hash.to_string());
    field("mode", old.mode.to_string(), new.mode.to_string());
    field("table_size", old.table_size.to_string(), new.table_size.to_string());
    field("drain", old.drain.to_string(), new.drain.to_string());
    let before: BTreeMap<IpAddr, _> = old.backends.iter().map(|b| (b.address, b)).collect();
    for b in &new.backends {
        match before.get(&b.address) {
            None => notes.push(format!("backend {}: added, weight {}", b.address, b.weight)),
            Some(o) if o.weight != b.weight => notes.push(format!("backend {}: weight {} (was {})", b.address, b.weight, o.weight)),
            Some(o) if o.mac != b.mac => notes.push(format!("backend {}: mac changed", b.address)),
            Some(_) => {}
        }
    }
    for o in old.backends.iter().filter(|o| !new.backends.iter().any(|b| b.address == o.address)) {
        notes.push(format!("backend {}: removed", o.address));
    }
    notes
}

#[cfg(test)]
mod tests;
