//! Synthetic route tables for the route-lookup experiments, installed in a
//! lab namespace through xnf-netns's batched rtnetlink.
//!
//! The prefixes follow the public BGP table's length mix (see
//! `xnf_netns::RouteSet`). An IPv4 table of a million prefixes cannot fit in
//! the lab's 198.18.0.0/15, so the table spans unicast space like a real
//! one; the experiment only ever sends to [`Installed::targets`], which lie
//! inside the lab range (in prefixes of the table), so no packet is ever
//! addressed outside it.

use std::net::IpAddr;

use anyhow::{anyhow, Context, Result};
use xnf_netns::{InstalledRoutes, Netns, RouteSet};

/// Seed of every synthetic table: the same count gives the same table, so
/// runs are comparable.
const SEED: u64 = 0x786e66;

fn synthetic_set(ipv6: bool, count: u64) -> Result<RouteSet> {
    let n = usize::try_from(count).context("route count too large")?;
    if ipv6 {
        RouteSet::synthetic_v6(n, SEED)
    } else {
        RouteSet::synthetic_v4(n, SEED)
    }
}

fn gateway(via: &str) -> Result<IpAddr> {
    via.parse()
        .map_err(|_| anyhow!("synthetic routes need `via` = a gateway address, got `{via}`"))
}

/// Installs `count` synthetic prefixes via `via` out of `dev`; they stay
/// until the namespace goes (topology files use this).
pub fn install_synthetic(ns: &Netns, ipv6: bool, count: u64, via: &str, dev: Option<&str>) -> Result<()> {
    let dev = dev.ok_or_else(|| anyhow!("synthetic routes need `dev` = the interface towards `via`"))?;
    let set = synthetic_set(ipv6, count)?;
    ns.install_routes(&set, gateway(via)?, dev)?;
    Ok(())
}

/// Synthetic routes removed again when dropped (the router experiment
/// installs a table per sweep point).
pub struct Installed<'a> {
    routes: InstalledRoutes<'a>,
}

impl<'a> Installed<'a> {
    pub fn synthetic(ns: &'a Netns, ipv6: bool, count: u64, via: &str, dev: &str) -> Result<Installed<'a>> {
        let set = synthetic_set(ipv6, count)?;
        let routes = InstalledRoutes::new(ns, set, gateway(via)?, dev)?;
        Ok(Installed { routes })
    }

    /// Seconds the batched install took.
    pub fn install_seconds(&self) -> f64 {
        self.routes.report().seconds
    }

    /// Up to `n` destinations in distinct installed prefixes, all inside
    /// the lab's address range. A small table has fewer prefixes there than
    /// a sweep has flows: then fewer are returned and the generator's flows
    /// repeat destinations (with distinct ports).
    pub fn targets(&self, n: usize) -> Result<Vec<IpAddr>> {
        let set = self.routes.routes();
        let mut want = n.max(1);
        loop {
            match set.lookup_targets(want) {
                Ok(t) => return Ok(t),
                Err(_) if want > 1 => want /= 2,
                Err(e) => return Err(e),
            }
        }
    }
}
