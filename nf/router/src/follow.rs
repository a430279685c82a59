//! Keeps the router's tables in step with the kernel's interfaces: VLAN
//! devices on attached ports, MAC changes, attached interfaces that
//! disappear, and the source check (local addresses, rp_filter). `sync`
//! runs once at attach; `xnf router follow` (started in the background by
//! `attach`) runs it again on every rtnetlink event for links, IPv4
//! addresses and IPv4 device settings, and once a second regardless. It
//! also keeps the route cache exact (`cache`) and the neighbours the
//! router sends to confirmed (`neigh`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Result;
use xnf_core::state;
use xnf_netns::netlink::{self, group, Batch, Events, Link, Shape};

use crate::attach::lock;
use crate::{cache, neigh};
use crate::program::{IfaceEntry, RouterMaps, Rpf, VlanEntry};
use xnf_core::sources::Sources;

/// The VLAN table the kernel's links call for: every 802.1Q device whose
/// parent is an attached interface, with its reverse-path filter.
pub fn wanted_vlans(links: &[Link], attached: &[u32], rpf: impl Fn(&Link) -> Result<Rpf>) -> Result<BTreeSet<VlanEntry>> {
    let mut out = BTreeSet::new();
    for l in links {
        let Some((parent, vid)) = l.vlan() else { continue };
        if attached.contains(&parent) {
            out.insert(VlanEntry { vlan_ifindex: l.ifindex, phys_ifindex: parent, vid, rpf: rpf(l)? });
        }
    }
    Ok(out)
}

/// What changed in one sync, for the follower's log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub vlans_added: Vec<VlanEntry>,
    pub vlans_removed: Vec<VlanEntry>,
    pub macs_updated: Vec<u32>,
    pub rpf_updated: Vec<u32>,
    pub ifaces_gone: Vec<u32>,
    pub locals_changed: bool,
}

impl SyncReport {
    pub fn is_empty(&self) -> bool {
        *self == SyncReport::default()
    }
}

/// Brings the maps in line with the current links.
pub fn sync(maps: &RouterMaps) -> Result<SyncReport> {
    let links = netlink::links()?;
    let sources = Sources::read()?;
    let mut report = SyncReport::default();
    let locals = sources.locals();
    if maps.locals() != locals {
        maps.set_locals(&locals)?;
        report.locals_changed = true;
    }
    let mut attached = Vec::new();
    for (slot, entry) in maps.ifaces()? {
        match links.iter().find(|l| l.ifindex == entry.ifindex) {
            None => {
                // The device is gone (and with it the kernel's link): drop our state.
                crate::attach::forget(maps, entry.ifindex)?;
                report.ifaces_gone.push(entry.ifindex);
            }
            Some(link) => {
                let mac = link.mac.unwrap_or(entry.mac);
                let rpf = sources.rpf(link.ifindex, &link.name)?;
                if mac != entry.mac || rpf != entry.rpf {
                    maps.update_iface(slot, IfaceEntry { mac, rpf, ..entry })?;
                    if mac != entry.mac {
                        report.macs_updated.push(entry.ifindex);
                    }
                    if rpf != entry.rpf {
                        report.rpf_updated.push(entry.ifindex);
                    }
                }
                attached.push(entry.ifindex);
            }
        }
    }
    let want = wanted_vlans(&links, &attached, |l| sources.rpf(l.ifindex, &l.name))?;
    let have: BTreeSet<VlanEntry> = maps.vlans()?.into_iter().collect();
    for v in have.difference(&want) {
        maps.del_vlan(*v)?;
        report.vlans_removed.push(*v);
    }
    for v in want.difference(&have) {
        maps.set_vlan(*v)?;
        report.vlans_added.push(*v);
    }
    Ok(report)
}

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

fn follow(dir: &std::path::Path, events: &mut Events, (mut keeper, mut neighbours): (cache::Keeper, neigh::Refresher)) -> Result<()> {
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
fn keepers(dir: &std::path::Path, events: &Events) -> Result<(cache::Keeper, neigh::Refresher)> {
    let keeper = cache::Keeper::start(dir, events)?;
    Ok((keeper, neigh::Refresher::start(RouterMaps::open_pinned(dir)?)?))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn vlan(ifindex: u32, parent: u32, vid: u16) -> Link {
        Link {
            ifindex,
            name: format!("v{vid}"),
            kind: Some("vlan".into()),
            vlan_id: Some(vid),
            parent: Some(parent),
            ethernet: true,
            ..Default::default()
        }
    }

    #[test]
    fn only_vlans_on_attached_parents_are_wanted() {
        let mut veth = vlan(9, 1, 0);
        veth.kind = Some("veth".into());
        let links = vec![vlan(10, 2, 100), vlan(11, 3, 200), vlan(12, 2, 300), veth];
        let strict_on_v300 = |l: &Link| Ok(if l.vlan_id == Some(300) { Rpf::Strict } else { Rpf::Off });
        let want = wanted_vlans(&links, &[2], strict_on_v300).unwrap();
        let got: Vec<_> = want.iter().map(|v| (v.vlan_ifindex, v.phys_ifindex, v.vid, v.rpf)).collect();
        assert_eq!(got, vec![(10, 2, 100, Rpf::Off), (12, 2, 300, Rpf::Strict)]);
        assert!(wanted_vlans(&links, &[], strict_on_v300).unwrap().is_empty());
    }
}
