//! `xnf router follow`, started in the background by `attach`: keeps the
//! router's tables in step with the kernel ([`tables::sync`] on every
//! rtnetlink event for links, addresses and device settings, and once a
//! second regardless), the route cache exact (`cache`) and the neighbours
//! the router sends to confirmed (`neigh`).

use std::time::{Duration, Instant};

use anyhow::Result;
use xnf_core::state;
use xnf_netns::netlink::{group, Batch, Events, Shape};

use crate::attach::lock;
use crate::program::RouterMaps;
use crate::tables::sync;
use crate::{cache, neigh};

/// Runs until the router is detached from every interface.
pub fn run() -> Result<()> {
    // Subscribed before the first sync: nothing that changes after it is missed.
    let mut events = Events::subscribe(&group::FORWARDING)?;
    let dir = crate::attach::pin_dir()?;
    if !register()? {
        eprintln!("xnf router follow: another follower runs in this network namespace, exiting");
        return Ok(());
    }
    eprintln!("xnf router follow: following link, address, route, rule, neighbour and setting events for {}", dir.display());
    let keepers = {
        let _lock = lock()?;
        if xnf_core::lifecycle::Lifecycle::<crate::attach::Router>::maps()?.is_none() {
            eprintln!("xnf router follow: router detached, exiting");
            return Ok(());
        }
        keepers(&dir, &events)?
    };
    say_shape(&keepers.0.shape(), None);
    let result = follow(&dir, &mut events, keepers);
    if let Err(e) = &result {
        eprintln!("xnf router follow: {e:#}");
    }
    result
}

fn follow(dir: &std::path::Path, events: &mut Events, (mut keeper, mut neighbours): (cache::Keeper, xnf_core::neigh::Refresher)) -> Result<()> {
    let mut resync = true;
    let mut last_sync = Instant::now();
    loop {
        // The kernel's bump (the filter on this socket) has retired the
        // cache's entries already; what the batch holds is followed here
        // (another bump, families stepping aside).
        let batch = if events.wait(cache::RENEW)? { events.drain()? } else { Batch::default() };
        if !batch.is_empty() {
            // The cache first: its step-aside bits follow the FIB's shape
            // only once the follower has read the change.
            let before = keeper.shape();
            if let Err(e) = keeper.changed(&batch) {
                let _ = keeper.stop();
                return Err(e.context("following a change for the route cache (cache stopped)"));
            }
            say_shape(&keeper.shape(), Some(&before));
            neighbours.changed(&batch)?;
            // Links, addresses and settings feed the router's own tables
            // (VLANs, MACs, attached links, local addresses, rp_filter).
            resync |= batch.overflowed || batch.has_link_or_address_change();
        }
        keeper.renew()?;
        neighbours.tick()?;
        if !resync && last_sync.elapsed() < Duration::from_secs(1) {
            continue;
        }
        // Each resync under the router's lock: an attach or detach in
        // between must not see half of it, nor it half of theirs. Once a
        // second regardless, so a detach by another process ends us promptly.
        let _lock = lock()?;
        let Ok(maps) = RouterMaps::open_pinned(dir) else {
            eprintln!("xnf router follow: router detached, exiting");
            return Ok(());
        };
        // Detached and attached again before this noticed (within a
        // second): the pins hold another router's maps, and a follower on
        // the old ones would lease and confirm nothing the data plane uses
        // (an attach starts no follower while this one runs).
        if maps.id()? != keeper.maps_id()? {
            eprintln!("xnf router follow: the router was attached anew: following its new maps");
            (keeper, neighbours) = keepers(dir, events)?;
        }
        let report = sync(&maps)?;
        if !report.is_empty() {
            eprintln!("xnf router follow: {report:?}");
        }
        if crate::attach::cleanup_if_unused(&maps)? {
            eprintln!("xnf router follow: no interface left, exiting");
            return Ok(());
        }
        (resync, last_sync) = (false, Instant::now());
    }
}

/// The route cache's keeper and the neighbour refresher, on the maps
/// pinned in `dir` now.
fn keepers(dir: &std::path::Path, events: &Events) -> Result<(cache::Keeper, xnf_core::neigh::Refresher)> {
    let keeper = cache::start(dir, events)?;
    Ok((keeper, neigh::refresher(dir)?))
}

/// Logs when a family starts or stops stepping aside from the cache.
fn say_shape(now: &Shape, before: Option<&Shape>) {
    for (family, n, b) in [("IPv4", &now.v4, before.map(|b| &b.v4)), ("IPv6", &now.v6, before.map(|b| &b.v6))] {
        if b == Some(n) {
            continue;
        }
        match n {
            Some(why) => eprintln!("xnf router follow: route cache: {family} lookups step aside ({why})"),
            None => eprintln!("xnf router follow: route cache: {family} lookups are cached"),
        }
    }
}

/// Makes this process the namespace's follower, unless another live one is.
fn register() -> Result<bool> {
    let _lock = lock()?;
    let me = std::process::id() as i32;
    if running_pid().is_some_and(|pid| pid != me) {
        return Ok(false);
    }
    std::fs::write(pid_file()?, me.to_string())?;
    Ok(true)
}

fn pid_file() -> Result<std::path::PathBuf> {
    Ok(state::run_dir()?.join("router-follow.pid"))
}

/// Pid of the running follower of this namespace, if any.
pub fn running_pid() -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(pid_file().ok()?).ok()?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let alive = String::from_utf8_lossy(&cmdline).contains("follow");
    alive.then_some(pid)
}

/// Starts `xnf router follow` in the background unless one runs already.
/// The child inherits this process's network namespace.
pub fn spawn() -> Result<Option<i32>> {
    // Under the lock, so that two attaches at once start one follower.
    let _lock = lock()?;
    if running_pid().is_some() {
        return Ok(None);
    }
    let pid = xnf_core::runtime::spawn_detached(&["router", "follow"], &state::run_dir()?.join("router-follow.log"))? as i32;
    std::fs::write(pid_file()?, pid.to_string())?;
    Ok(Some(pid))
}
