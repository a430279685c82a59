//! The lb's route cache to its backends (`bpf/include/xnf/fib_cache.h`):
//! kept exact by the keeper every route cache shares
//! (`xnf_core::route_cache`), run here by whoever keeps the lb — the daemon
//! (`xnf daemon`), or the lab while it measures. Without a keeper the lease
//! lapses within 256 jiffies and every packet asks `bpf_fib_lookup`, as
//! before the cache: nothing stale is ever used, only nothing is saved.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use xnf_core::route_cache::{CacheMaps, Keeper, Lease, RENEW};
use xnf_netns::netlink::{group, Batch, Events};

use crate::attach::Life;
use crate::program::{LbMaps, LbProgram};

impl Lease for LbProgram {
    fn renew(&self) -> Result<()> {
        self.renew_lease()
    }

    fn notify_filter(&self) -> std::os::fd::BorrowedFd<'_> {
        LbProgram::notify_filter(self)
    }
}

/// The keeper of the lb's cache in this namespace, on its maps pinned now;
/// None when the lb has no state here.
fn start(events: &Events) -> Result<Option<Keeper<LbProgram>>> {
    let Some(maps) = Life::maps()? else { return Ok(None) };
    let lease = LbProgram::load_lease(&Life::pin_dir()?)?;
    Ok(Some(Keeper::start(lease, cache_maps(&maps)?, events)?))
}

fn cache_maps(maps: &LbMaps) -> Result<CacheMaps> {
    CacheMaps { fib_ctl: &maps.fib_ctl, fib_kgen: &maps.fib_kgen }.to_owned()
}

/// Keeps the lb's route cache in the calling thread's network namespace
/// until `stop` is set or the lb has no state left here: follows every
/// routing change (the kernel retires entries as it makes one, through
/// the notification filter), renews the lease every [`RENEW`], and takes
/// the new maps when the lb is set up anew. Ends the lease on the way out.
pub fn keep(stop: &AtomicBool) -> Result<()> {
    // Subscribed before the keeper starts: nothing after it is missed.
    let mut events = Events::subscribe(&group::FORWARDING)?;
    let Some(mut keeper) = start(&events)? else { return Ok(()) };
    let mut checked = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let batch = if events.wait(RENEW)? { events.drain()? } else { Batch::default() };
        if !batch.is_empty() {
            if let Err(e) = keeper.changed(&batch) {
                let _ = keeper.stop();
                return Err(e.context("following a change for the lb's route cache (cache stopped)"));
            }
        }
        keeper.renew()?;
        // Once a second: the lb removed, or set up anew on other maps.
        if checked.elapsed() >= std::time::Duration::from_secs(1) {
            checked = std::time::Instant::now();
            match Life::maps()? {
                None => return Ok(()),
                Some(m) if route_cache_id(&m)? != keeper.maps_id()? => match start(&events)? {
                    Some(k) => keeper = k,
                    None => return Ok(()),
                },
                Some(_) => {}
            }
        }
    }
    keeper.stop()
}

fn route_cache_id(maps: &LbMaps) -> Result<u32> {
    CacheMaps { fib_ctl: &maps.fib_ctl, fib_kgen: &maps.fib_kgen }.id()
}
