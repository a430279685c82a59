//! The router's side of keeping its neighbours confirmed: its epoch lives
//! in `fib_ctl` beside the route cache's control word, and its follower
//! runs the shared refresher (`xnf_core::neigh`) on its `neigh_use` table.

use anyhow::Result;
use xnf_core::neigh::{Epoch, Refresher};

use crate::program::RouterMaps;

impl RouterMaps {
    /// The epoch frames stamp their neighbour's slot with (in `fib_ctl`).
    pub fn neigh_epoch(&self) -> Result<u32> {
        self.route_cache().get()
    }

    /// Begins an epoch, keeping the rest of the control word.
    pub fn set_neigh_epoch(&self, neigh_epoch: u32) -> Result<()> {
        self.route_cache().set(neigh_epoch)
    }

    /// The slots holding `epoch` (for tests: which neighbours the frames
    /// of one epoch went to).
    pub fn neigh_slots_stamped(&self, epoch: u32) -> Result<Vec<u32>> {
        xnf_core::neigh::slots_stamped(self.neigh_use_map(), epoch)
    }
}

impl Epoch for RouterMaps {
    fn get(&self) -> Result<u32> {
        self.neigh_epoch()
    }

    fn set(&self, epoch: u32) -> Result<()> {
        self.set_neigh_epoch(epoch)
    }
}

/// The refresher of the router whose maps are pinned in `dir`.
pub fn refresher(dir: &std::path::Path) -> Result<Refresher> {
    let maps = RouterMaps::open_pinned(dir)?;
    let stamps = RouterMaps::open_pinned(dir)?;
    Refresher::start("xnf router follow", stamps.neigh_use_map(), Box::new(maps))
}
