//! Keeping the neighbours the fast path sends to confirmed, as the
//! kernel's own output path does (`bpf/include/xnf/neigh_use.h` says why):
//! the follower's half. It follows which neighbour entries the kernel has
//! made STALE. Once an epoch that began after that has passed, a stamp in
//! the entry's slot means the router sent to it, and the follower tells the
//! kernel so (`RTM_NEWNEIGH` with `NTF_USE`): the entry moves to DELAY and
//! the kernel's own timers confirm it, probe it, or give it up.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use xnf_core::maps::MappedArray;
use xnf_netns::netlink::{self, Batch, Neighbour};

use crate::program::{neigh_use_slot, CacheCtl, RouterMaps};

/// How often the epoch moves on (and stamped STALE neighbours are handed
/// to the kernel): the kernel itself waits `delay_first_probe_time` (5 s
/// by default) before it probes a neighbour it sent to.
pub const TICK: Duration = Duration::from_millis(100);

/// How often the STALE entries are read again whole, whatever the
/// notifications said: a notification older than the first dump, or lost.
const RESEED: Duration = Duration::from_secs(10);

impl RouterMaps {
    /// The epoch frames stamp their neighbour's slot with (in `fib_ctl`).
    pub fn neigh_epoch(&self) -> Result<u32> {
        Ok(self.cache_ctl()?.neigh_epoch)
    }

    /// Begins an epoch, keeping the rest of the control word.
    pub fn set_neigh_epoch(&self, neigh_epoch: u32) -> Result<()> {
        let c = self.cache_ctl()?;
        self.write_cache_ctl(CacheCtl { neigh_epoch, ..c })
    }

    /// The slots holding `epoch` (for tests: which neighbours the frames
    /// of one epoch went to).
    pub fn neigh_slots_stamped(&self, epoch: u32) -> Result<Vec<u32>> {
        let stamps = MappedArray::new(self.neigh_use_map(), "the router's neighbour table")?;
        Ok((0..stamps.len()).filter(|&i| stamps.get::<u32>(i) == epoch).map(|i| i as u32).collect())
    }
}

/// A STALE entry, and the epoch during which the follower learnt it.
struct Waiting {
    n: Neighbour,
    since: u32,
}

/// The follower's view of the STALE neighbours, and the table's epoch.
pub struct Refresher {
    maps: RouterMaps,
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
    /// Starts with the STALE entries the kernel has now. The follower's
    /// socket is subscribed already, so no change after the dump is missed.
    pub fn start(maps: RouterMaps) -> Result<Self> {
        let stamps = MappedArray::new(maps.neigh_use_map(), "the router's neighbour table")?;
        let epoch = maps.neigh_epoch()?;
        let now = Instant::now();
        let mut r = Refresher { maps, stamps, epoch, stale: HashMap::new(), last_tick: now, last_seed: now, told: (0, None), last_log: None };
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
                Err(e) => eprintln!("xnf router follow: {e:#}"),
            }
        }
        self.epoch = epoch.wrapping_add(1);
        self.maps.set_neigh_epoch(self.epoch)?;
        self.log();
        Ok(())
    }

    /// One line at most every 10 s, and only when something was told.
    fn log(&mut self) {
        let due = self.last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
        if let (n @ 1.., Some((addr, ifindex)), true) = (self.told.0, self.told.1, due) {
            eprintln!("xnf router follow: handed {n} stale neighbour(s) the router sends to to the kernel to confirm (the last: {addr} on ifindex {ifindex})");
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
                assert!(s < crate::program::NEIGH_SLOTS, "slot {s}");
                seen.insert(s);
            }
        }
        // 2,048 neighbours into 4,096 slots: a uniform hash fills about
        // 1,610 (4,096 (1 - e^-0.5)); the multilinear sum alone, 1,209.
        assert!(seen.len() > 1_550, "{} distinct slots", seen.len());
    }
}
