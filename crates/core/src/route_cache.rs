//! Keeping a route cache (`bpf/include/xnf/fib_cache.h`) exact: the
//! user-space half, one for every NF whose program looks routes up through
//! it (the router's follower, the lb). Each NF has its own instance of the
//! cache's maps (`fib_ctl`, `fib_kgen`, `fib_cache`) and its own lease and
//! notification programs ([`Lease`]); the rules that keep the cache exact
//! are the same for all, so they live here once.
//!
//! Every rtnetlink notification bumps the kernel's generation as the
//! change is made (the NF's socket filter on the keeper's socket), every
//! batch of them the keeper's own once it has read them, and sets which
//! families step aside ([`FibShape`]); a lease renewed every [`RENEW`]
//! keeps the cache in use only while the keeper runs.

use std::borrow::Borrow;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use xnf_netns::netlink::{Batch, Events, FibShape, Shape};

use crate::abi::types;
use crate::maps::{as_bytes, from_bytes};

/// How often the lease is renewed; it lasts 256 jiffies (1.024 s at
/// HZ=250, 0.256 s at HZ=1000), so a few renewals may be late.
pub const RENEW: Duration = Duration::from_millis(100);

/// Slots of a route cache per CPU (`XNF_FIB_CACHE_SLOTS`): a loader sizes
/// the map to this times the possible CPUs.
pub const SLOTS: u32 = types::xnf_fib_cache_limits::XNF_FIB_CACHE_SLOTS.0;
/// `XNF_FIB_ASIDE_V4`, `XNF_FIB_ASIDE_V6`: bits of [`CacheCtl::aside`].
pub const ASIDE_V4: u32 = types::xnf_fib_cache_aside::XNF_FIB_ASIDE_V4.0;
pub const ASIDE_V6: u32 = types::xnf_fib_cache_aside::XNF_FIB_ASIDE_V6.0;

/// The route cache's step-aside bits for a routing shape.
pub fn aside_bits(shape: &Shape) -> u32 {
    (if shape.v4.is_some() { ASIDE_V4 } else { 0 }) | (if shape.v6.is_some() { ASIDE_V6 } else { 0 })
}

/// The route cache's control word (`struct xnf_fib_ctl`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheCtl {
    /// In jiffies; 0: never leased.
    pub lease_until: u64,
    pub gen: u32,
    /// `XNF_FIB_ASIDE_*` bits.
    pub aside: u32,
    /// What frames stamp their neighbour's slot with ([`crate::neigh`]).
    pub neigh_epoch: u32,
}

/// One instance of the route cache's control maps: `fib_ctl` (the control
/// word) and `fib_kgen` (the kernel's count of changes). Owned handles by
/// default (what a [`Keeper`] holds); `CacheMaps<&MapHandle>` borrows an
/// NF's own map set, so that reading the control word costs no handle.
pub struct CacheMaps<M = MapHandle> {
    pub fib_ctl: M,
    pub fib_kgen: M,
}

impl CacheMaps<&MapHandle> {
    /// Handles of its own on the same maps (duplicated descriptors).
    pub fn to_owned(&self) -> Result<CacheMaps> {
        let dup = |m: &MapHandle, name: &str| MapHandle::try_from(m).with_context(|| format!("duplicating the handle of {name}"));
        Ok(CacheMaps { fib_ctl: dup(self.fib_ctl, "fib_ctl")?, fib_kgen: dup(self.fib_kgen, "fib_kgen")? })
    }
}

impl<M: Borrow<MapHandle>> CacheMaps<M> {
    /// Which instance these maps are: the id of the control map, new with
    /// every set-up that found nothing pinned (a removal and a set-up give
    /// other maps under the same pins).
    pub fn id(&self) -> Result<u32> {
        Ok(self.fib_ctl.borrow().info().context("reading the route cache's map info")?.info.id)
    }

    /// The control word.
    pub fn ctl(&self) -> Result<CacheCtl> {
        let v = self.fib_ctl.borrow().lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?.context("the route cache's control map has no entry")?;
        let c: types::xnf_fib_ctl = from_bytes(&v);
        Ok(CacheCtl { lease_until: c.lease_until, gen: c.gen, aside: c.aside, neigh_epoch: c.neigh_epoch })
    }

    /// Writes the whole control word (the lease included: [`Self::set_ctl`]
    /// keeps it).
    pub fn write_ctl(&self, c: CacheCtl) -> Result<()> {
        let raw = types::xnf_fib_ctl { lease_until: c.lease_until, gen: c.gen, aside: c.aside, neigh_epoch: c.neigh_epoch, pad: 0 };
        self.fib_ctl.borrow().update(&0u32.to_ne_bytes(), as_bytes(&raw), MapFlags::ANY).context("writing the route cache's control map")
    }

    /// Writes the control word's generation and step-aside bits, keeping
    /// the lease (only the lease program writes that) and the neighbour
    /// epoch.
    pub fn set_ctl(&self, gen: u32, aside: u32) -> Result<()> {
        let c = self.ctl()?;
        self.write_ctl(CacheCtl { gen, aside, ..c })
    }

    /// Ends the lease at once: the cache is not used until renewed. The
    /// generation moves on too, so that nothing filled under the old lease
    /// is trusted under the next.
    pub fn end_lease(&self) -> Result<()> {
        let c = self.ctl()?;
        self.write_ctl(CacheCtl { lease_until: 0, gen: c.gen.wrapping_add(1), ..c })
    }

    /// The kernel's count of changes (`fib_kgen`: bumped by the NF's
    /// notification filter as each change is made).
    pub fn kernel_gen(&self) -> Result<u64> {
        let v = self.fib_kgen.borrow().lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?.context("the route cache's kernel generation map has no entry")?;
        Ok(u64::from_ne_bytes(v[..8].try_into()?))
    }
}

/// The neighbour epoch of an NF that keeps it in `fib_ctl` beside the
/// route cache's control word (the router).
impl<M: Borrow<MapHandle>> crate::neigh::Epoch for CacheMaps<M> {
    fn get(&self) -> Result<u32> {
        Ok(self.ctl()?.neigh_epoch)
    }

    fn set(&self, neigh_epoch: u32) -> Result<()> {
        let c = self.ctl()?;
        self.write_ctl(CacheCtl { neigh_epoch, ..c })
    }
}

/// Runs an NF's lease or notification program once by BPF_PROG_TEST_RUN
/// (the lease is in jiffies, which user space cannot read; a bump run by
/// hand stands for a notification in tests).
pub fn run_once(prog: &libbpf_rs::ProgramMut<'_>, what: &str) -> Result<()> {
    let frame = [0u8; 64];
    let input = libbpf_rs::ProgramInput { data_in: Some(&frame), repeat: 1, ..Default::default() };
    prog.test_run(input).with_context(|| format!("{what} (BPF_PROG_TEST_RUN)"))?;
    Ok(())
}

/// What an NF's lease programs give the keeper: both are loaded on the
/// NF's own cache maps (never attached to an interface).
pub trait Lease {
    /// Renews the lease (runs the NF's program that calls
    /// `fib_cache_renew`, through BPF_PROG_TEST_RUN: the lease is in
    /// jiffies, which user space cannot read): the cache is used for the
    /// next 256 jiffies.
    fn renew(&self) -> Result<()>;

    /// The NF's notification filter (a socket filter that calls
    /// `fib_cache_kernel_bump`), for [`Events::attach_filter`].
    fn notify_filter(&self) -> BorrowedFd<'_>;
}

/// A route cache's keeper, owned by the process that follows the kernel's
/// changes for the NF.
pub struct Keeper<L: Lease> {
    /// The lease programs, loaded on the cache's maps.
    lease: L,
    maps: CacheMaps,
    shape: FibShape,
    gen: u32,
}

impl<L: Lease> Keeper<L> {
    /// Takes over the cache whose maps are `maps`: whatever it holds is of
    /// unknown age, so the generation moves on before the lease starts.
    /// The kernel's bump is attached to `events` first: from then on every
    /// change retires the entries as it is made.
    pub fn start(lease: L, maps: CacheMaps, events: &Events) -> Result<Self> {
        events.attach_filter(lease.notify_filter())?;
        let gen = maps.ctl()?.gen;
        // Both families aside until the FIB's shape is known.
        maps.set_ctl(gen.wrapping_add(1), ASIDE_V4 | ASIDE_V6)?;
        let shape = FibShape::scan()?;
        let mut k = Keeper { lease, maps, shape, gen: gen.wrapping_add(1) };
        k.publish()?;
        k.lease.renew()?;
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
        self.maps.set_ctl(self.gen, aside)?;
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
        if aside != self.maps.ctl()?.aside {
            self.gen = self.gen.wrapping_add(1);
        }
        self.maps.set_ctl(self.gen, aside)
    }

    /// Which instance of the cache's maps this keeps ([`CacheMaps::id`]).
    pub fn maps_id(&self) -> Result<u32> {
        self.maps.id()
    }

    /// Renews the lease; due every [`RENEW`].
    pub fn renew(&self) -> Result<()> {
        self.lease.renew()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aside_bits_follow_the_shape() {
        let why = || Some("a policy rule".to_string());
        assert_eq!(aside_bits(&Shape::default()), 0);
        assert_eq!(aside_bits(&Shape { v4: why(), v6: None }), ASIDE_V4);
        assert_eq!(aside_bits(&Shape { v4: None, v6: why() }), ASIDE_V6);
        assert_eq!(aside_bits(&Shape { v4: why(), v6: why() }), ASIDE_V4 | ASIDE_V6);
        assert_eq!(ASIDE_V4 & ASIDE_V6, 0, "one bit per family");
    }

    #[test]
    fn the_control_word_mirrors_the_header() {
        // lease_until, gen, aside, neigh_epoch, pad (fib_cache.h).
        assert_eq!(std::mem::size_of::<types::xnf_fib_ctl>(), 24);
    }
}
