//! Keeping the route cache (`bpf/include/xnf/fib_cache.h`) exact: the
//! follower's half. The keeper itself is the one every NF with a route
//! cache shares ([`xnf_core::route_cache::Keeper`]); the router gives it
//! its lease programs (`xnf_router_lease`, `xnf_router_notify`) and its
//! pinned `fib_ctl` and `fib_kgen`.

use std::os::fd::BorrowedFd;
use std::path::Path;

use anyhow::Result;
use xnf_core::route_cache::{self, Lease};
use xnf_netns::netlink::Events;

use crate::program::RouterProgram;

pub use route_cache::RENEW;

/// The router's route cache keeper, owned by the follower.
pub type Keeper = route_cache::Keeper<RouterProgram>;

impl Lease for RouterProgram {
    fn renew(&self) -> Result<()> {
        self.renew_lease()
    }

    fn notify_filter(&self) -> BorrowedFd<'_> {
        RouterProgram::notify_filter(self)
    }
}

/// Takes over the cache pinned in `dir` ([`route_cache::Keeper::start`]),
/// with only the lease programs loaded (never attached).
pub fn start(dir: &Path, events: &Events) -> Result<Keeper> {
    let prog = RouterProgram::load_lease(dir)?;
    let maps = prog.maps()?.into_route_cache();
    Keeper::start(prog, maps, events)
}
