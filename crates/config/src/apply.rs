//! `xnf apply FILE`: the box converged to its file, all or nothing across
//! network functions. Additions and changes come first — the filter, the
//! lb, decap, the chains, the router — each step leaving its undo; only
//! when all worked are interfaces detached that the file no longer names.
//! When a step fails, the undos run last first and the box is as it was:
//! the filter's previous rules come back from its own pending change (its
//! list slots kept), the lb's services with the ids and generations they
//! had (so connection-table entries match again), interfaces with their
//! options. With `--confirm-within`, the previous state is kept
//! (`/run/xnf/<netns>/box/pending.json`) until `xnf confirm`, and `xnf
//! rollback` — or a detached `xnf rollback --after SECS`, or any later box
//! command past the deadline — puts it back.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use xnf_core::state::{self, StateLock};
use xnf_filter::Filter;
use xnf_lb::{Decap, Lb};
use xnf_router::Router;

use crate::boxstate::Running;
use crate::file::BoxConfig;
use crate::stage;
use crate::undo::Undo;

/// The filter's own window while a box apply runs: its rules stay pending
/// (their previous ones restorable) until the box commits or undoes; past
/// the box's own deadline, so that the box's rollback comes first.
fn filter_window(confirm_within: Option<Duration>) -> Duration {
    confirm_within.unwrap_or_default() + Duration::from_secs(3600)
}

/// A box change awaiting `xnf confirm`.
#[derive(Serialize, Deserialize)]
struct Pending {
    /// The box before, as `xnf show` printed it.
    previous: String,
    /// The lb's services before, exactly.
    lb: xnf_lb::Snapshot,
    /// Whether the filter holds a pending change of its own.
    filter_pending: bool,
    /// Seconds since the epoch after which it is rolled back.
    deadline: u64,
}

fn run_dir() -> Result<std::path::PathBuf> {
    Ok(state::run_dir()?.join("box"))
}

fn lock() -> Result<StateLock> {
    StateLock::acquire("box")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn pending() -> Result<Option<Pending>> {
    state::read_json(&run_dir()?, "pending.json")
}

fn clear_pending() -> Result<()> {
    match std::fs::remove_file(run_dir()?.join("pending.json")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// What `xnf diff FILE` prints: what an apply changes, and what `xnf
/// daemon` does to the AF_XDP applications.
pub fn diff(want: &BoxConfig) -> Result<Vec<String>> {
    let running = Running::read()?;
    let mut out = running.diff(want)?;
    out.extend(running.afxdp_changes(want));
    Ok(out)
}

/// What `xnf status` prints: what runs, and how the file at `path`
/// differs from it (or why the file does not check).
pub fn status(path: &Path) -> Result<Vec<String>> {
    let running = Running::read()?;
    let mut out = vec!["running:".to_string()];
    out.extend(running.summary().into_iter().map(|l| format!("  {l}")));
    match crate::file::load(path) {
        Ok(want) => {
            let mut diff = running.diff(&want)?;
            diff.extend(running.afxdp_changes(&want));
            if diff.is_empty() {
                out.push(format!("{}: the box runs it", path.display()));
            } else {
                out.push(format!("{}: differs (`xnf apply` would):", path.display()));
                out.extend(diff.into_iter().map(|l| format!("  {l}")));
            }
        }
        Err(errors) => {
            out.push(format!("{}: does not check ({} error(s); `xnf check`)", path.display(), errors.len()));
        }
    }
    if let Some(s) = pending_seconds()? {
        out.push(format!("pending: a change rolls back in {s} s unless `xnf confirm`"));
    }
    Ok(out)
}

/// What `xnf show` prints.
pub fn show() -> Result<String> {
    Running::read()?.show()
}

/// How an apply runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApplyOptions {
    /// Roll back by itself after this unless confirmed.
    pub confirm_within: Option<Duration>,
    /// The caller follows the router itself (`xnf daemon`): start no
    /// `xnf router follow` process.
    pub own_follower: bool,
    /// Interfaces the file names that do not exist (yet) are left out, with
    /// a warning, instead of failing the apply: `xnf daemon` applies again
    /// when one appears.
    pub wait_for_interfaces: bool,
}

/// `want` with only the interfaces that exist now; a warning for each other.
fn present_only(want: &BoxConfig, warnings: &mut Vec<String>) -> Result<BoxConfig> {
    let links: Vec<String> = xnf_netns::netlink::links()?.into_iter().map(|l| l.name).collect();
    let mut w = want.clone();
    let mut keep = |name: &str, ifaces: &mut Vec<String>| {
        ifaces.retain(|i| {
            let here = links.contains(i);
            if !here {
                warnings.push(format!("{name}: {i} does not exist (yet): attached when it appears"));
            }
            here
        })
    };
    if let Some(d) = &mut w.router {
        keep("router", &mut d.interfaces);
    }
    if let Some((d, _)) = &mut w.filter {
        keep("filter", &mut d.interfaces);
    }
    if let Some((d, _)) = &mut w.lb {
        keep("lb", &mut d.interfaces);
    }
    if let Some(d) = &mut w.decap {
        keep("decap", &mut d.interfaces);
    }
    Ok(w)
}

/// The interfaces `want` names, in any section.
pub fn interfaces(want: &BoxConfig) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    out.extend(want.router.iter().flat_map(|d| d.interfaces.iter().cloned()));
    out.extend(want.filter.iter().flat_map(|(d, _)| d.interfaces.iter().cloned()));
    out.extend(want.lb.iter().flat_map(|(d, _)| d.interfaces.iter().cloned()));
    out.extend(want.decap.iter().flat_map(|d| d.interfaces.iter().cloned()));
    out
}

/// Converges the box to `want`; returns what changed, one line each
/// (`nothing to change` when nothing did) and warnings.
pub fn apply(want: &BoxConfig, opts: ApplyOptions) -> Result<(Vec<String>, Vec<String>)> {
    let confirm_within = opts.confirm_within;
    let _lock = lock()?;
    roll_back_if_overdue()?;
    if let Some(p) = pending()? {
        bail!("a change awaits confirmation ({} s left): `xnf confirm` it, or `xnf rollback`, first", p.deadline.saturating_sub(now()));
    }
    let mut warnings = Vec::new();
    let present;
    let want = if opts.wait_for_interfaces {
        present = present_only(want, &mut warnings)?;
        &present
    } else {
        want
    };
    let before = Running::read()?;
    let previous = before.show()?;
    let lb_before = xnf_lb::snapshot()?;
    // The filter reloads a list whose file changed: the diff read them all.
    let mut lines = before.diff(want)?;
    let mut undo = Undo::default();
    let mut filter_pending = false;
    let r = converge(want, &before, &lb_before, filter_window(confirm_within), opts.own_follower, &mut undo, &mut warnings, &mut filter_pending);
    if let Err(e) = r {
        let failed = undo.run();
        if failed.is_empty() {
            return Err(e.context("nothing was changed: every step done was undone"));
        }
        bail!("{e:#}; undoing the steps done failed too: {}", failed.join("; "));
    }
    match confirm_within {
        Some(d) => {
            let p = Pending { previous, lb: lb_before, filter_pending, deadline: now() + d.as_secs().max(1) };
            state::write_json(&run_dir()?, "pending.json", &p)?;
        }
        None if filter_pending => xnf_filter::confirm()?,
        None => {}
    }
    if lines.is_empty() {
        lines.push("nothing to change".into());
    }
    Ok((lines, warnings))
}

/// The steps of an apply, each leaving its undo.
#[allow(clippy::too_many_arguments)]
fn converge(
    want: &BoxConfig,
    before: &Running,
    lb_before: &xnf_lb::Snapshot,
    filter_window: Duration,
    own_follower: bool,
    undo: &mut Undo,
    warnings: &mut Vec<String>,
    filter_pending: &mut bool,
) -> Result<()> {
    let filter = stage::wanted(want.filter.as_ref().map(|(d, _)| d));
    stage::add::<Filter>(&before.filter, &filter, undo)?;
    if let Some((_, c)) = &want.filter {
        if let xnf_filter::Outcome::Applied { .. } = xnf_filter::apply_text_in(&c.text, &c.origin, &c.base, Some(filter_window))? {
            *filter_pending = true;
            undo.push(Box::new(|| xnf_filter::rollback().map(drop)));
        }
    }
    let lb = stage::wanted(want.lb.as_ref().map(|(d, _)| d));
    stage::add::<Lb>(&before.lb, &lb, undo)?;
    if let Some((_, c)) = &want.lb {
        xnf_lb::apply_text(&c.text, &c.origin)?;
        let snap = lb_before.clone();
        undo.push(Box::new(move || xnf_lb::restore(&snap)));
    }
    let decap = stage::wanted(want.decap.as_ref());
    stage::add::<Decap>(&before.decap, &decap, undo)?;
    let (changed, w) = xnf_chain::apply_file(&want.chains)?;
    warnings.extend(w);
    if changed.iter().any(|c| c != "nothing to change") {
        let old = before.chains.clone();
        undo.push(Box::new(move || xnf_chain::apply_file(&old).map(drop)));
    }
    let router = stage::wanted(want.router.as_ref());
    stage::add::<Router>(&before.router, &router, undo)?;
    if !router.is_empty() && !own_follower {
        // The route cache's lease, VLANs and neighbours (an exit alone when one runs).
        xnf_router::spawn_follower()?;
    }
    // Only now what the file no longer has.
    stage::remove::<Router>(&before.router, &router, undo)?;
    stage::remove::<Decap>(&before.decap, &decap, undo)?;
    stage::remove::<Lb>(&before.lb, &lb, undo)?;
    stage::remove::<Filter>(&before.filter, &filter, undo)?;
    Ok(())
}

/// Keeps the pending change.
pub fn confirm() -> Result<()> {
    let _lock = lock()?;
    roll_back_if_overdue()?;
    let p = pending()?.context("no change awaits confirmation (`xnf status`)")?;
    if p.filter_pending {
        xnf_filter::confirm()?;
    }
    clear_pending()
}

/// Puts back the box a pending change replaced; false when none was pending.
pub fn rollback() -> Result<bool> {
    let _lock = lock()?;
    roll_back_locked()
}

fn roll_back_locked() -> Result<bool> {
    let Some(p) = pending()? else { return Ok(false) };
    let prev = crate::file::parse(&p.previous, "the box before the pending change", Path::new("/"))
        .map_err(|e| anyhow::anyhow!("the saved previous state does not check: {}", e.join("; ")))?;
    let now = Running::read()?;
    // Attachments back first (a detached interface returns with its
    // options), then the contents exactly: the filter's own rollback, the
    // lb's services with their ids, the chains. (Nothing to undo here: a
    // failure leaves the change pending, and the rollback can run again.)
    let mut undo = Undo::default();
    stage::add::<Filter>(&now.filter, &stage::wanted(prev.filter.as_ref().map(|(d, _)| d)), &mut undo)?;
    stage::add::<Lb>(&now.lb, &stage::wanted(prev.lb.as_ref().map(|(d, _)| d)), &mut undo)?;
    stage::add::<Decap>(&now.decap, &stage::wanted(prev.decap.as_ref()), &mut undo)?;
    stage::add::<Router>(&now.router, &stage::wanted(prev.router.as_ref()), &mut undo)?;
    if p.filter_pending {
        xnf_filter::rollback()?;
    }
    if prev.lb.is_some() || p.lb.applied.is_some() {
        xnf_lb::restore(&p.lb)?;
    }
    xnf_chain::apply_file(&prev.chains)?;
    stage::remove::<Router>(&now.router, &stage::wanted(prev.router.as_ref()), &mut undo)?;
    stage::remove::<Decap>(&now.decap, &stage::wanted(prev.decap.as_ref()), &mut undo)?;
    stage::remove::<Lb>(&now.lb, &stage::wanted(prev.lb.as_ref().map(|(d, _)| d)), &mut undo)?;
    stage::remove::<Filter>(&now.filter, &stage::wanted(prev.filter.as_ref().map(|(d, _)| d)), &mut undo)?;
    clear_pending()?;
    Ok(true)
}

/// Rolls back a pending change whose deadline passed (its waiting process
/// may have been killed). Called with the lock held.
fn roll_back_if_overdue() -> Result<()> {
    if pending()?.is_some_and(|p| now() >= p.deadline) && roll_back_locked()? {
        eprintln!("xnf: a box change was not confirmed in time and has been rolled back");
    }
    Ok(())
}

/// `xnf rollback --after SECS`: waits, then rolls back the pending change
/// unless it was confirmed (or replaced) meanwhile.
pub fn rollback_after(secs: u64) -> Result<bool> {
    let deadline = pending()?.map(|p| p.deadline);
    std::thread::sleep(Duration::from_secs(secs));
    let _lock = lock()?;
    match pending()? {
        Some(p) if Some(p.deadline) == deadline => roll_back_locked(),
        _ => Ok(false),
    }
}

/// Seconds left before the pending change is rolled back, if one is.
pub fn pending_seconds() -> Result<Option<u64>> {
    Ok(pending()?.map(|p| p.deadline.saturating_sub(now())))
}
