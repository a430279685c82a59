//! `xnf lb apply`: converging the data plane to a service file.
//!
//! The file is read and checked whole first; an error changes nothing.
//! Then every step leaves a data plane that works:
//!
//! 1. ids are allocated and written down (`ids.json`) before any map
//!    changes: a service keeps its id (its counters) by name, a backend its
//!    id and generation by service and address; a new backend gets an id no
//!    live record holds and a generation never used before, so no
//!    connection-table entry made for an earlier holder can match it;
//! 2. the outer source prefixes, the backend records and the VIPs are
//!    written (nothing refers to new records yet);
//! 3. each service's table is built into its idle slot, and the service
//!    record is pointed at it in one update: a packet sees the old table or
//!    the new one. A service whose record and live table (read back from
//!    the kernel) already are what the file says is left as it is;
//! 4. only then go services, VIPs, tables and backend records that the
//!    file no longer has. A removed backend's record is freed (generation
//!    0), so its flows' entries stop matching and their packets take the
//!    table; a drained backend (weight 0) keeps its record and its flows.
//!
//! Before anything changes, a dsr backend must be on-link here (see
//! [`check_dsr_onlink`]). Every apply also rereads the lb interfaces' MACs.
//!
//! Every apply converges from whatever the maps hold (every key is
//! checked against the file), so an apply killed half-way is repaired by
//! the next one. Run files, in `/run/xnf/<netns>/lb/`: `applied.json` (the
//! live file's text and origin) and `ids.json`.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use xnf_core::state;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use xnf_netns::netlink::{self, RouteGet};

use crate::attach::{applied, ids, lock, maps_or_create, run_dir, sources, write_own_macs, AppliedFile};
use crate::config::{Config, Mode};
use crate::plan::{plan, ServicePlan, Table};
use crate::tables::{allocate, converge};

/// What an apply did, for the caller to print.
pub struct Outcome {
    pub warnings: Vec<String>,
    /// Per service, what moved (against the file applied before).
    pub plans: Vec<ServicePlan>,
}

fn write_json<T: Serialize>(name: &str, v: &T) -> Result<()> {
    state::write_json(&run_dir()?, name, v)
}

/// Applies a service file from disk.
pub fn apply_file(path: &Path) -> Result<Outcome> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    apply_text(&text, &path.display().to_string())
}

/// Applies a service file's text; `origin` names it in errors.
pub fn apply_text(text: &str, origin: &str) -> Result<Outcome> {
    let (config, warnings) = Config::parse(text, origin)?;
    let tables = config.services.iter().map(Table::of).collect::<Result<Vec<_>>>()?;
    check_dsr_onlink(&config, origin)?;
    let _lock = lock()?;
    let old = applied()?.map(|a| a.config).unwrap_or_default();
    let plans = plan(&old, &config)?;
    let maps = maps_or_create()?;
    let ids = allocate(&ids()?, &config)?;
    write_json("ids.json", &ids)?;
    converge(&maps, &config, &tables, &ids, &sources(&config.encap)?)?;
    write_own_macs(&maps)?;
    write_json("applied.json", &AppliedFile { origin: origin.to_owned(), text: text.to_owned() })?;
    Ok(Outcome { warnings, plans })
}

/// Refuses dsr backends that this namespace routes to through a gateway,
/// one line each: dsr sends the frame unchanged (to the VIP) to the
/// backend's MAC, so the backend must sit on a segment of this host; a
/// router in between would get a frame addressed to the VIP. The kernel's
/// output route is asked (the data plane's lookup, from the ingress, gives
/// the same next hop unless policy rules differ by interface: it then
/// leaves such frames to the kernel, `dsr-not-onlink`). No route at all is
/// not refused: an interface may come up later (`no-route` until then).
pub fn check_dsr_onlink(config: &Config, origin: &str) -> Result<()> {
    let mut errs = Vec::new();
    for s in config.services.iter().filter(|s| s.mode == Mode::Dsr) {
        for b in &s.backends {
            let any = if b.address.is_ipv4() { IpAddr::V4(Ipv4Addr::UNSPECIFIED) } else { IpAddr::V6(Ipv6Addr::UNSPECIFIED) };
            // No input interface: the kernel's output route.
            let route = netlink::route_get(any, b.address, 0).with_context(|| format!("asking the kernel for the route to dsr backend {}", b.address))?;
            if let RouteGet::Unicast { gateway: Some(gw), .. } = route {
                errs.push(format!(
                    "{origin}: line {}: {}/{}: address: not on-link here (the route to it goes via {gw}): dsr sends the frame to the VIP unchanged to the backend's MAC, so the backend must sit on a segment of this host; put it on one, or use mode = \"ipip\" or \"gue\"",
                    b.line, s.name, b.address
                ));
            }
        }
    }
    xnf_core::files::all_faults(errs.into_iter().map(anyhow::Error::msg).collect())
}

/// What `restore` needs to put the lb's services back exactly: the live
/// file and the ids its services and backends hold.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub applied: Option<AppliedFile>,
    pub ids: crate::tables::Ids,
}

/// The live services, as [`restore`] takes them.
pub fn snapshot() -> Result<Snapshot> {
    let applied = applied()?.map(|a| AppliedFile { origin: a.origin, text: a.text });
    Ok(Snapshot { applied, ids: ids()? })
}

/// Puts the services of `s` back, with the ids they had: every backend
/// record with its generation, so connection-table entries made before
/// match again (an apply of the same file would hand out new generations
/// to backends it had removed meanwhile).
pub fn restore(s: &Snapshot) -> Result<()> {
    let _lock = lock()?;
    let maps = maps_or_create()?;
    let (text, origin) = s.applied.as_ref().map_or(("", "(no services)"), |a| (a.text.as_str(), a.origin.as_str()));
    let (config, _) = Config::parse(text, origin)?;
    let tables = config.services.iter().map(Table::of).collect::<Result<Vec<_>>>()?;
    write_json("ids.json", &s.ids)?;
    converge(&maps, &config, &tables, &s.ids, &sources(&config.encap)?)?;
    match &s.applied {
        Some(a) => write_json("applied.json", a),
        None => match std::fs::remove_file(run_dir()?.join("applied.json")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        },
    }
}
