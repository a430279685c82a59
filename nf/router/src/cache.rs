//! Keeping the route cache (`bpf/include/xnf/fib_cache.h`) exact: the
//! follower's half. Every rtnetlink notification bumps the kernel's
//! generation as the change is made (a socket filter on the follower's
//! socket, `xnf_router_notify`), every batch of them the follower's own
//! once it has read them, and sets
//! which families step aside ([`FibShape`]); a lease renewed every
//! [`RENEW`] keeps the cache in use only while this runs.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use xnf_netns::netlink::{Batch, Events, FibShape, Shape};

use crate::program::{aside_bits, RouterMaps, RouterProgram, ASIDE_V4, ASIDE_V6};

/// How often the lease is renewed; it lasts 256 jiffies (1.024 s at
/// HZ=250, 0.256 s at HZ=1000), so a few renewals may be late.
pub const RENEW: Duration = Duration::from_millis(100);

/// The cache's keeper, owned by the follower.
pub struct Keeper {
    /// The lease program, loaded on the pinned maps (never attached).
    prog: RouterProgram,
    maps: RouterMaps,
    shape: FibShape,
    gen: u32,
}

impl Keeper {
    /// Takes over the cache pinned in `dir`: whatever it holds is of
    /// unknown age, so the generation moves on before the lease starts.
    /// The kernel's bump is attached to `events` first: from then on every
    /// change retires the entries as it is made.
    pub fn start(dir: &Path, events: &Events) -> Result<Self> {
        let prog = RouterProgram::load_lease(dir)?;
        events.attach_filter(prog.notify_filter())?;
        let maps = prog.maps()?;
        let gen = maps.cache_ctl()?.gen;
        // Both families aside until the FIB's shape is known.
        maps.set_cache_ctl(gen.wrapping_add(1), ASIDE_V4 | ASIDE_V6)?;
        let shape = FibShape::scan()?;
        let mut k = Keeper { prog, maps, shape, gen: gen.wrapping_add(1) };
        k.publish()?;
        k.prog.renew_lease()?;
        Ok(k)
    }

    /// Something changed (`batch` says what, as far as it knows): retire
    /// every entry now, then follow the FIB's shape.
    pub fn changed(&mut self, batch: &Batch) -> Result<()> {
        self.gen = self.gen.wrapping_add(1);
        // A family the batch may have made uncacheable (a rule, a multipath
        // route, lost notifications) steps aside with the bump, until the
        // shape is known again.
        let [v4, v6] = FibShape::touched(batch);
        let aside = aside_bits(&self.shape.shape()) | (if v4 { ASIDE_V4 } else { 0 }) | (if v6 { ASIDE_V6 } else { 0 });
        self.maps.set_cache_ctl(self.gen, aside)?;
        if self.shape.apply(batch)? {
            self.publish()?;
        }
        Ok(())
    }

    /// Writes the current generation and step-aside bits. A family that
    /// comes back from aside gets a new generation too: its entries were
    /// filled (if at all) before it stepped aside.
    fn publish(&mut self) -> Result<()> {
        let aside = aside_bits(&self.shape.shape());
        if aside != self.maps.cache_ctl()?.aside {
            self.gen = self.gen.wrapping_add(1);
        }
        self.maps.set_cache_ctl(self.gen, aside)
    }

    /// Which router's maps this keeps ([`RouterMaps::id`]).
    pub fn maps_id(&self) -> Result<u32> {
        self.maps.id()
    }

    pub fn renew(&self) -> Result<()> {
        self.prog.renew_lease()
    }

    /// Why each family steps aside, if it does.
    pub fn shape(&self) -> Shape {
        self.shape.shape()
    }

    /// Ends the lease: the data plane stops using the cache at once.
    pub fn stop(&self) -> Result<()> {
        self.maps.end_lease()
    }
}
