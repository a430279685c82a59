//! Neighbour confirmation for the chain's exit and the lb, and the keeper of
//! the lb's route cache ([`spawn_lb_cache`]). Neighbours: the chain and the lb both send past
//! the kernel's output path, so nothing else moves a STALE neighbour they
//! send to towards a probe (`bpf/include/xnf/neigh_use.h`). Their
//! refreshers (`xnf_core::neigh`, the one the router's follower runs) share
//! one socket subscribed to neighbour events, in a thread of their own;
//! each second the daemon looks whether an NF was set up, set up anew
//! (other maps) or removed.

use std::time::{Duration, Instant};

use anyhow::Result;
use xnf_core::neigh::{Refresher, Table, TICK};
use xnf_netns::netlink::{group, Batch, Events};

use crate::log;

/// One NF's table, as last seen, and its refresher.
struct Nf {
    name: &'static str,
    table: fn() -> Result<Option<Table>>,
    running: Option<(u32, Refresher)>,
}

impl Nf {
    /// Follows the NF's maps: a refresher on the ones pinned now.
    fn reopen(&mut self) -> Result<()> {
        let Some(table) = (self.table)()? else {
            if self.running.take().is_some() {
                log("neighbours", &format!("nf={} state=stopped", self.name));
            }
            return Ok(());
        };
        let id = table.id()?;
        if self.running.as_ref().is_some_and(|(known, _)| *known == id) {
            return Ok(());
        }
        self.running = Some((id, table.refresher(&format!("xnf daemon: {}", self.name))?));
        log("neighbours", &format!("nf={} state=started", self.name));
        Ok(())
    }
}

/// Starts the thread; it runs as long as the daemon.
pub fn spawn() {
    let spawned = std::thread::Builder::new().name("xnf-neigh".into()).spawn(|| loop {
        // A failure (a lost socket, a dump refused) costs a second of
        // confirmation, not the rest of the daemon's life.
        if let Err(e) = run() {
            log("neighbours", &format!("state=restarting error={:?}", format!("{e:#}")));
        }
        std::thread::sleep(Duration::from_secs(1));
    });
    if let Err(e) = spawned {
        log("neighbours", &format!("state=failed error={:?}", e.to_string()));
    }
}

fn run() -> Result<()> {
    // Subscribed before any refresher reads the table: nothing is missed.
    let mut events = Events::subscribe(&[group::NEIGH])?;
    let mut nfs = [Nf { name: "chain", table: xnf_chain::neigh_table, running: None }, Nf { name: "lb", table: xnf_lb::neigh_table, running: None }];
    let mut last = None::<Instant>;
    loop {
        let batch = if events.wait(TICK)? { events.drain()? } else { Batch::default() };
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            last = Some(Instant::now());
            for nf in &mut nfs {
                // A removal racing the read: tried again in a second.
                if let Err(e) = nf.reopen() {
                    log("neighbours", &format!("nf={} result=error error={:?}", nf.name, format!("{e:#}")));
                }
            }
        }
        for (_, r) in nfs.iter_mut().filter_map(|n| n.running.as_mut()) {
            r.changed(&batch)?;
            r.tick()?;
        }
    }
}

/// Starts the thread that keeps the lb's route cache to its backends
/// (`xnf_lb::cache::keep`) whenever the lb is set up here: without it the
/// cache's lease lapses and the lb asks the kernel's FIB for every packet.
/// It runs as long as the daemon.
pub fn spawn_lb_cache() {
    static NEVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let spawned = std::thread::Builder::new().name("xnf-lb-cache".into()).spawn(|| loop {
        if xnf_lb::open_maps().is_ok() {
            log("lb-route-cache", "state=started");
            // Returns when the lb has no state left here.
            match xnf_lb::cache::keep(&NEVER) {
                Ok(()) => log("lb-route-cache", "state=stopped"),
                Err(e) => log("lb-route-cache", &format!("state=restarting error={:?}", format!("{e:#}"))),
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    });
    if let Err(e) = spawned {
        log("lb-route-cache", &format!("state=failed error={:?}", e.to_string()));
    }
}
