//! Attaching the filter to interfaces (as their first stage) and detaching
//! it. The rules and lists live in maps pinned under
//! `/sys/fs/bpf/xnf/<netns>/filter/`, shared by every interface's instance;
//! they outlive the command and go with the last interface.

use std::os::fd::AsFd;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use xnf_core::entry::{self, Stage};
use xnf_core::state::{self, StateLock};
use xnf_core::xdp::XdpMode;
use xnf_netns::netlink::{self, Link};

use crate::program::{FilterMaps, FilterProgram, MAP_NAMES};

/// The filter's state lock: attach, detach, apply, confirm and rollback
/// each hold it (before the entry's lock, never after).
pub(crate) const LOCK: &str = "filter";
/// The program's name as the kernel reports it.
pub(crate) const PROG_NAME: &str = "xnf_filter";

/// The filter's pin folder in this network namespace.
pub fn pin_dir() -> Result<PathBuf> {
    state::pin_dir("filter")
}

/// The pinned maps, creating them (by loading an instance) when absent.
pub(crate) fn maps_or_create() -> Result<FilterMaps> {
    state::ensure_bpffs()?;
    let dir = pin_dir()?;
    if !dir.join(MAP_NAMES[0]).exists() {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        FilterProgram::load(Some(&dir), None)?;
    }
    FilterMaps::open_pinned(&dir)
}

/// The pinned maps, or a message that the filter has no state here.
pub fn open_maps() -> Result<FilterMaps> {
    let dir = pin_dir()?;
    if !dir.join(MAP_NAMES[0]).exists() {
        bail!("the filter has no rules and no interfaces in this network namespace (`xnf filter apply FILE`, `xnf filter attach IFACE`)");
    }
    FilterMaps::open_pinned(&dir)
}

/// Whether the filter is `ifindex`'s filter stage.
pub(crate) fn filter_stage(ifindex: u32) -> Option<u32> {
    entry::installed(ifindex, Stage::Filter, PROG_NAME)
}

/// The interfaces of this namespace with the filter attached.
pub fn attached_links() -> Result<Vec<Link>> {
    Ok(netlink::links()?.into_iter().filter(|l| filter_stage(l.ifindex).is_some()).collect())
}

/// Attaches the filter in front of whatever else runs on `names`. All or
/// nothing: on error, interfaces attached by this call are detached again.
pub fn attach(names: &[String], mode: XdpMode) -> Result<Vec<String>> {
    let _lock = StateLock::acquire(LOCK)?;
    let targets = entry::ethernet_links(names, "the filter parses Ethernet frames")?;
    for l in &targets {
        if filter_stage(l.ifindex).is_some() {
            bail!("the filter is already attached to {} (`xnf filter status`)", l.name);
        }
    }
    maps_or_create()?;
    let dir = pin_dir()?;
    let load = |stages: &libbpf_rs::MapHandle| FilterProgram::load(Some(&dir), Some(stages));
    entry::install_each(&targets, mode, Stage::Filter, "the filter", load, |p| p.prog().as_fd(), |_| Ok(()), |_| ())?;
    Ok(targets.into_iter().map(|l| l.name).collect())
}

/// Detaches the filter from `names`; with no interface left, its rules,
/// lists and counters go too.
pub fn detach(names: &[String]) -> Result<()> {
    let _lock = StateLock::acquire(LOCK)?;
    let todo = entry::holding(names, Stage::Filter, PROG_NAME, |name| format!("the filter is not attached to {name} (`xnf filter status` lists where it is)"))?;
    for ifindex in todo {
        entry::remove(ifindex, Stage::Filter)?;
    }
    if attached_links()?.is_empty() {
        remove_state()?;
    }
    Ok(())
}

/// Removes the pinned maps and the run files (rules, pending change).
fn remove_state() -> Result<()> {
    crate::synproxy::remove()?;
    let dir = pin_dir()?;
    for name in MAP_NAMES {
        let _ = std::fs::remove_file(dir.join(name));
    }
    state::remove_empty_dirs(&dir);
    let run = crate::apply::run_dir()?;
    let _ = std::fs::remove_dir_all(run);
    Ok(())
}
