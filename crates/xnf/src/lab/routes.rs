//! Synthetic route tables for the route-lookup experiments, installed in a
//! lab namespace through xnf-netns's netlink batching.

use anyhow::{bail, Result};
use xnf_netns::Netns;

/// Installs `count` synthetic prefixes (realistic length mix) via `via`.
pub fn install_synthetic(_ns: &Netns, _ipv6: bool, _count: u64, _via: &str, _dev: Option<&str>) -> Result<()> {
    bail!("synthetic routes: not built yet")
}
