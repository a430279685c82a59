//! Keeping the neighbours the fast path sends to confirmed, as the
//! kernel's own output path does (`bpf/include/xnf/neigh_use.h` says why):
//! the user-space half, one for every NF that sends past that path (the
//! router's follower, the daemon for the chain's exit and the lb). It
//! follows which neighbour entries the kernel has made STALE. Once an
//! epoch that began after that has passed, a stamp in the entry's slot
//! means the NF sent to it, and the refresher tells the kernel so
//! (`RTM_NEWNEIGH` with `NTF_USE`): the entry moves to DELAY and the
//! kernel's own timers confirm it, probe it, or give it up.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use xnf_netns::netlink::{self, Batch, Neighbour};

use crate::maps::MappedArray;

/// How often the epoch moves on (and stamped STALE neighbours are handed
/// to the kernel): the kernel itself waits `delay_first_probe_time` (5 s
/// by default) before it probes a neighbour it sent to.
pub const TICK: Duration = Duration::from_millis(100);

/// How often the STALE entries are read again whole, whatever the
/// notifications said: a notification older than the first dump, or lost.
const RESEED: Duration = Duration::from_secs(10);

/// Slots of a `neigh_use` table (`XNF_NEIGH_USE_SLOTS`, checked against
/// the header by the router's build).
pub const NEIGH_SLOTS: u32 = 1 << NEIGH_SLOT_BITS;
pub const NEIGH_SLOT_BITS: u32 = 12;

/// A neighbour's slot (0..NEIGH_SLOTS): `xnf_neigh_use_slot` in neigh_use.h.
pub fn neigh_use_slot(ifindex: u32, mac: [u8; 6]) -> u32 {
    const M: [u64; 4] = [0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f, 0x1656_67b1_9e37_79f9, 0x27d4_eb2f_1656_67c5];
    let w = |i: usize| u16::from_ne_bytes([mac[i], mac[i + 1]]) as u64;
    let words = [ifindex as u64, w(0), w(2), w(4)];
    let h = words.iter().zip(M).fold(0u64, |h, (x, m)| h.wrapping_add(x.wrapping_mul(m)));
    let h = (h ^ (h >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h >> (64 - NEIGH_SLOT_BITS)) as u32
}

/// Where an NF keeps the epoch its frames stamp with.
pub trait Epoch {
    fn get(&self) -> Result<u32>;
    fn set(&self, epoch: u32) -> Result<()>;
}

/// The epoch in a one-entry array of its own (`neigh_epoch`, for programs
/// built with `XNF_NEIGH_OWN_EPOCH`).
pub struct OwnEpoch(pub MapHandle);

impl Epoch for OwnEpoch {
    fn get(&self) -> Result<u32> {
        let v = self.0.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).context("reading neigh_epoch")?;
        Ok(v.and_then(|v| v.try_into().ok()).map(u32::from_ne_bytes).unwrap_or(0))
    }

    fn set(&self, epoch: u32) -> Result<()> {
        self.0.update(&0u32.to_ne_bytes(), &epoch.to_ne_bytes(), MapFlags::ANY).context("writing neigh_epoch")
    }
}

/// The pinned neighbour table of a program built with
/// `XNF_NEIGH_OWN_EPOCH`: its `neigh_use` and `neigh_epoch`.
pub struct Table {
    pub stamps: MapHandle,
    pub epoch: MapHandle,
}

impl Table {
    /// Which maps these are: an NF removed and set up again has new ones.
    pub fn id(&self) -> Result<u32> {
        Ok(self.epoch.info().context("reading the map info of neigh_epoch")?.info.id)
    }

    /// The refresher on this table; `who` names it in log lines.
    pub fn refresher(self, who: &str) -> Result<Refresher> {
        Refresher::start(who, &self.stamps, Box::new(OwnEpoch(self.epoch)))
    }
}

/// The slots of `stamps` holding `epoch` (for tests: which neighbours the
/// frames of one epoch went to).
pub fn slots_stamped(stamps: &MapHandle, epoch: u32) -> Result<Vec<u32>> {
    let stamps = MappedArray::new(stamps, "a neighbour table")?;
    Ok((0..stamps.len()).filter(|&i| stamps.get::<u32>(i) == epoch).map(|i| i as u32).collect())
}

/// A STALE entry, and the epoch during which the follower learnt it.
struct Waiting {
    n: Neighbour,
    since: u32,
}

/// One NF's view of the STALE neighbours, and its table's epoch.
pub struct Refresher {
    /// Who logs: "xnf router follow", "xnf daemon: the lb".
    who: String,
    cell: Box<dyn Epoch>,
    stamps: MappedArray,
    epoch: u32,
    stale: HashMap<(u32, IpAddr), Waiting>,
    last_tick: Instant,
    last_seed: Instant,
    /// Handed to the kernel since the last log line, and the last one.
    told: (usize, Option<(IpAddr, u32)>),
    last_log: Option<Instant>,
}

impl Refresher {
    /// Starts with the STALE entries the kernel has now, on the table
    /// `stamps` and the epoch in `cell`. The caller's socket is subscribed
    /// already, so no change after the dump is missed.
    pub fn start(who: &str, stamps: &MapHandle, cell: Box<dyn Epoch>) -> Result<Self> {
        let stamps = MappedArray::new(stamps, &format!("the neighbour table of {who}"))?;
        let epoch = cell.get()?;
        let now = Instant::now();
        let (stale, told) = (HashMap::new(), (0, None));
        let mut r = Refresher { who: who.into(), cell, stamps, epoch, stale, last_tick: now, last_seed: now, told, last_log: None };
        r.reseed()?;
        Ok(r)
    }

    /// Reads the STALE entries whole. One waiting already keeps its epoch.
    fn reseed(&mut self) -> Result<()> {
        let mut fresh = HashMap::new();
        for n in netlink::neighbours().context("reading the neighbour table")? {
            if let Some(key) = wanted(&n) {
                let since = match self.stale.remove(&key) {
                    Some(w) if w.n.mac == n.mac => w.since,
                    _ => self.epoch,
                };
                fresh.insert(key, Waiting { n, since });
            }
        }
        self.stale = fresh;
        self.last_seed = Instant::now();
        Ok(())
    }

    /// Follows the neighbour notifications of a batch.
    pub fn changed(&mut self, batch: &Batch) -> Result<()> {
        if batch.overflowed {
            return self.reseed();
        }
        for (n, deleted) in batch.neighbours() {
            let key = (n.ifindex, n.addr);
            match wanted(&n) {
                Some(_) if !deleted => {
                    if self.stale.get(&key).is_none_or(|w| w.n.mac != n.mac) {
                        self.stale.insert(key, Waiting { n, since: self.epoch });
                    }
                }
                _ => {
                    self.stale.remove(&key);
                }
            }
        }
        Ok(())
    }

    /// At most once per [`TICK`]: hands the kernel every STALE neighbour
    /// stamped during the epoch that ends now, if that epoch began after
    /// the follower learnt it was STALE, then begins the next epoch.
    pub fn tick(&mut self) -> Result<()> {
        if self.last_seed.elapsed() >= RESEED {
            self.reseed()?;
        }
        if self.last_tick.elapsed() < TICK || self.stale.is_empty() {
            return Ok(());
        }
        self.last_tick = Instant::now();
        let epoch = self.epoch;
        let used: Vec<(u32, IpAddr)> = self
            .stale
            .iter()
            .filter(|(_, w)| w.since != epoch && w.n.mac.is_some_and(|mac| self.stamps.get::<u32>(neigh_use_slot(w.n.ifindex, mac) as usize) == epoch))
            .map(|(k, _)| *k)
            .collect();
        for key in used {
            let w = self.stale.remove(&key).expect("a key just listed");
            match netlink::use_neighbour(&w.n) {
                Ok(true) => self.told = (self.told.0 + 1, Some((key.1, key.0))),
                Ok(false) => {} // gone meanwhile: nothing to confirm
                // Not fatal to the follower: the next STALE notification
                // (or the next reseed) tries again.
                Err(e) => eprintln!("{}: {e:#}", self.who),
            }
        }
        self.epoch = epoch.wrapping_add(1);
        self.cell.set(self.epoch)?;
        self.log();
        Ok(())
    }

    /// One line at most every 10 s, and only when something was told.
    fn log(&mut self) {
        let due = self.last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
        if let (n @ 1.., Some((addr, ifindex)), true) = (self.told.0, self.told.1, due) {
            eprintln!("{}: handed {n} stale neighbour(s) it sends to to the kernel to confirm (the last: {addr} on ifindex {ifindex})", self.who);
            (self.told, self.last_log) = ((0, None), Some(Instant::now()));
        }
    }
}

/// The key of an entry to follow: STALE, with a MAC, and not one the
/// kernel keeps confirmed itself (`managed`).
fn wanted(n: &Neighbour) -> Option<(u32, IpAddr)> {
    (n.stale && n.mac.is_some() && !n.managed()).then_some((n.ifindex, n.addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_stay_in_range_and_spread() {
        let mut seen = std::collections::BTreeSet::new();
        for ifindex in 1..=8u32 {
            for last in 0..=255u8 {
                let s = neigh_use_slot(ifindex, [0x02, 0, 0, 0, 0x10, last]);
                assert!(s < NEIGH_SLOTS, "slot {s}");
                seen.insert(s);
            }
        }
        // 2,048 neighbours into 4,096 slots: a uniform hash fills about
        // 1,610 (4,096 (1 - e^-0.5)); the multilinear sum alone, 1,209.
        assert!(seen.len() > 1_550, "{} distinct slots", seen.len());
    }
}
