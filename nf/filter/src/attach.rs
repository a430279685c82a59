//! The filter on the one lifecycle every network function shares
//! ([`xnf_core::lifecycle`]): the first stage of interfaces' entry
//! programs. The rules and lists live in maps pinned under
//! `/sys/fs/bpf/xnf/<netns>/filter/`, shared by every interface's instance;
//! they outlive the command and go with the last interface.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use anyhow::Result;
use xnf_core::entry::Stage;
use xnf_core::lifecycle::{Lifecycle, StageNf, Target};
use xnf_core::xdp::XdpMode;
use xnf_netns::netlink::Link;

use crate::program::{Counter, FilterMaps, FilterProgram};

/// The filter as a stage network function.
pub struct Filter;

impl StageNf for Filter {
    const NAME: &'static str = "filter";
    const TITLE: &'static str = "the filter";
    const COMMAND: &'static str = "xnf filter";
    const PROG_NAME: &'static str = "xnf_filter";
    const BUILD: &'static str = crate::skel::filter::BUILD;
    const STAGE: Stage = Stage::Filter;
    const ETHERNET_WHY: &'static str = "the filter parses Ethernet frames";
    type Maps = FilterMaps;
    type Instance = FilterProgram;
    type Options = ();

    fn load(dir: &Path, at: Option<&Target<'_, Self>>) -> Result<FilterProgram> {
        FilterProgram::load(Some(dir), at.map(|t| t.stages))
    }

    fn prog(p: &FilterProgram) -> BorrowedFd<'_> {
        p.prog().as_fd()
    }

    /// The syn-cookie action's nftables table goes with the filter.
    fn remove_more() -> Result<()> {
        crate::synproxy::remove()
    }

    fn counters(maps: &FilterMaps) -> Result<Vec<(&'static str, u64)>> {
        let c = maps.counters()?;
        Ok(Counter::ALL.iter().map(|k| (k.name(), c[*k as usize])).collect())
    }

    /// The compiled rule set is compiled again from the applied file: a
    /// build with another layout of it never copies the old one.
    const REBUILT: &'static [&'static str] = &["rule_sets"];

    /// The caller holds the lock; the staged maps' list slots are the live ones.
    fn rebuild(maps: &FilterMaps) -> Result<()> {
        let applied: Option<crate::compile::Applied> = xnf_core::state::read_json(&run_dir()?, "applied.json")?;
        applied.map_or(Ok(()), |a| maps.set_rules(&crate::compile::rule_set_of(&a)?))
    }
}

type Life = Lifecycle<Filter>;

/// The filter's state lock: attach, detach, apply, confirm and rollback
/// each hold it (before the entry's lock, never after).
pub(crate) fn lock() -> Result<xnf_core::state::StateLock> {
    Life::lock()
}

/// The filter's run files (rules applied, pending change).
pub(crate) fn run_dir() -> Result<std::path::PathBuf> {
    Life::run_dir()
}

/// The pinned maps, creating them (by loading an instance) when absent.
pub(crate) fn maps_or_create() -> Result<FilterMaps> {
    Life::maps_or_create()
}

/// The pinned maps, or a message that the filter has no state here.
pub fn open_maps() -> Result<FilterMaps> {
    Life::maps()?.ok_or_else(|| {
        anyhow::anyhow!("the filter has no rules and no interfaces in this network namespace (`xnf filter apply FILE`, `xnf filter attach IFACE`)")
    })
}

/// The interfaces of this namespace with the filter attached.
pub fn attached_links() -> Result<Vec<Link>> {
    Life::attached_links()
}

/// Attaches the filter in front of whatever else runs on `names`. All or
/// nothing: on error, interfaces attached by this call are detached again.
pub fn attach(names: &[String], mode: XdpMode) -> Result<Vec<String>> {
    Ok(Life::attach(names, mode, &())?.attached)
}

/// Detaches the filter from `names`; with no interface left, its rules,
/// lists and counters go too.
pub fn detach(names: &[String]) -> Result<()> {
    Life::detach(names)
}
