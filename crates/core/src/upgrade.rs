//! Upgrading a network function in place: a new xnf moves the state the
//! old one left pinned to its own layouts and puts its own programs into
//! the stage slots, without a detach and without a moment an interface
//! runs no stage.
//!
//! [`Lifecycle::upgrade`] does, holding the function's lock:
//!
//! 1. **Stage** the new state beside the old, in `<NAME>-next/` (bpffs
//!    refuses names with a dot): every map whose layout is unchanged is
//!    the same map, pinned there too; the others are made anew by loading
//!    this build's program there.
//! 2. **Copy** the changed maps' entries ([`migrate`](crate::migrate));
//!    tables compiled from what was applied (`StageNf::REBUILT`) are
//!    compiled again into the new layout instead.
//! 3. **Swap** each interface's stage slot to this build's program on the
//!    staged maps: one update of the slot each; the old program runs until
//!    that update, the new one from it.
//! 4. **Catch up** with what the old programs wrote between the copy and
//!    their swap (new connections, counters), once no CPU can still be
//!    running them.
//! 5. **Exchange** the two folders in one `renameat2(RENAME_EXCHANGE)` and
//!    remove the old pins; the old maps go with the last program using them.
//!
//! Killed before a swap, the old programs never stopped and `-next` is
//! thrown away by the rerun; killed after a swap, the rerun sees a program
//! in a slot using a staged map and finishes from step 3 (the counters'
//! increase in between is lost; connections are caught up).
//!
//! A function whose layouts are this build's and whose interfaces run
//! this build's program (recorded per interface at every install, with the
//! program's id) is left alone: a restart of the same xnf changes nothing.

use std::collections::{BTreeMap, HashSet};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapHandle};
use xnf_netns::netlink::Link;

use crate::entry;
use crate::layout;
use crate::lifecycle::{Lifecycle, PinnedMaps, StageNf};
use crate::migrate::Migration;
use crate::state::{self, Builds};

/// What an upgrade did to one network function.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UpgradeReport {
    pub nf: &'static str,
    /// Maps moved to this build's layout.
    pub migrated: Vec<MigratedMap>,
    /// Maps made afresh: this build's new maps (nothing to copy) and the
    /// tables compiled again from what was applied (`StageNf::REBUILT`).
    pub fresh: Vec<String>,
    /// Interfaces whose stage now runs this build's program.
    pub swapped: Vec<String>,
    /// It finished an upgrade an earlier run left half done.
    pub resumed: bool,
}

/// One map moved to a new layout.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigratedMap {
    pub name: String,
    /// Entries copied before the swap.
    pub copied: usize,
    /// Entries the old programs wrote after the copy, caught up after it.
    pub caught_up: usize,
}

/// The run file recording which build each interface's program is.
const BUILDS: &str = "builds.json";

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.with_file_name(format!("{name}{suffix}"))
}

/// Map ids of the pins in `dir`, by name.
fn pinned_ids(dir: &Path) -> BTreeMap<String, u32> {
    let Ok(rd) = std::fs::read_dir(dir) else { return BTreeMap::new() };
    rd.flatten()
        .filter_map(|e| {
            let h = MapHandle::from_pinned_path(e.path()).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), h.info().ok()?.info.id))
        })
        .collect()
}

/// The ids of the maps program `id` uses.
fn prog_maps(id: u32) -> Vec<u32> {
    let mut ids = vec![0u32; 64];
    let Some(info) = entry::prog_by_id(id).and_then(|fd| entry::prog_info(fd.as_fd(), &mut ids)) else { return Vec::new() };
    ids.truncate((info.nr_map_ids as usize).min(64));
    ids
}

/// Exchanges two folders of bpffs in one step.
fn exchange(a: &Path, b: &Path) -> Result<()> {
    nix::fcntl::renameat2(nix::fcntl::AT_FDCWD, a, nix::fcntl::AT_FDCWD, b, nix::fcntl::RenameFlags::RENAME_EXCHANGE)
        .with_context(|| format!("exchanging {} and {} (renameat2 RENAME_EXCHANGE on bpffs)", a.display(), b.display()))
}

fn remove_pins(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Test builds only: dies by SIGKILL at `point` when `XNF_UPGRADE_DIE_AT`
/// names it, as an upgrade killed there would (the interrupted-upgrade
/// tests).
fn die_at(point: &str) {
    if std::env::var("XNF_UPGRADE_DIE_AT").is_ok_and(|p| p == point) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

impl<N: StageNf> Lifecycle<N> {
    /// Records that `ifindex`'s slot holds `prog`, of this build.
    pub(crate) fn record_build(ifindex: u32, prog: std::os::fd::BorrowedFd<'_>) -> Result<()> {
        let Some(info) = entry::prog_info(prog, &mut []) else { return Ok(()) };
        state::update_json(&Self::run_dir()?, BUILDS, |b: &mut Builds| {
            b.insert(ifindex, (info.id, N::BUILD.to_string()));
        })
    }

    /// Whether `ifindex`'s slot runs this build's program.
    fn current(builds: &Builds, ifindex: u32) -> bool {
        let running = Self::stage_prog(ifindex);
        builds.get(&ifindex).is_some_and(|(id, b)| Some(*id) == running && b == N::BUILD)
    }

    /// The maps whose layout is not this build's, and those this build
    /// has that were not pinned (made afresh, nothing to copy).
    fn changed(dir: &Path) -> Result<(Vec<&'static str>, Vec<&'static str>)> {
        let (mut changed, mut new) = (Vec::new(), Vec::new());
        for name in N::Maps::NAMES {
            let path = dir.join(name);
            if !path.exists() {
                new.push(*name);
                continue;
            }
            let h = MapHandle::from_pinned_path(&path).with_context(|| format!("opening pinned map {}", path.display()))?;
            if layout::of_map(&h)? != N::Maps::layout_of(name)? {
                changed.push(*name);
            }
        }
        Ok((changed, new))
    }

    /// Whether a slot runs a program on a map staged in `next` (a map that
    /// is not also the old state's): an earlier upgrade swapped it.
    fn staged_in_use(dir: &Path, next: &Path, links: &[Link]) -> bool {
        let old: HashSet<u32> = pinned_ids(dir).into_values().collect();
        let staged: HashSet<u32> = pinned_ids(next).into_values().filter(|id| !old.contains(id)).collect();
        links.iter().filter_map(|l| Self::stage_prog(l.ifindex)).any(|p| prog_maps(p).iter().any(|m| staged.contains(m)))
    }

    /// The old state's maps of unchanged layout, pinned in `next` too; the
    /// changed ones made there by loading this build's program.
    fn stage(dir: &Path, next: &Path, changed: &[&str]) -> Result<()> {
        std::fs::create_dir_all(next).with_context(|| format!("creating {}", next.display()))?;
        for name in N::Maps::NAMES.iter().filter(|n| !changed.contains(n)) {
            let h = MapHandle::from_pinned_path(dir.join(name)).with_context(|| format!("opening pinned map {name}"))?;
            crate::xdp::pin_fd(h.as_fd(), &next.join(name))?;
        }
        N::load(next, None).map(drop).context("loading this build's program on the staged maps")
    }

    /// Stages the new state in `next` (unless an earlier run did) and
    /// copies the changed maps into it: the migrations, to catch up after
    /// the swap, with what each copied, and the staged maps.
    #[allow(clippy::type_complexity)]
    fn stage_and_copy(dir: &Path, next: &Path, (changed, new): (&[&str], &[&str]), resumed: bool) -> Result<(Vec<(Migration, usize)>, N::Maps)> {
        if !resumed {
            Self::stage(dir, next, &[changed, new].concat())?;
        }
        let mut migrations = Vec::new();
        for name in changed.iter().filter(|n| !N::REBUILT.contains(n)) {
            let open = |d: &Path| MapHandle::from_pinned_path(d.join(name)).with_context(|| format!("opening map {name} in {}", d.display()));
            let mut m = Migration::new(name, open(dir)?, open(next)?)?;
            let copied = if resumed { 0 } else { m.copy()? };
            migrations.push((m, copied));
        }
        let maps = N::Maps::open_pinned(next)?;
        if changed.iter().chain(new).any(|n| N::REBUILT.contains(n)) {
            N::rebuild(&maps).context("filling the staged tables from what was applied")?;
        }
        Ok((migrations, maps))
    }

    /// Upgrades its state and programs in this network namespace to this
    /// build's; `None` when they are this build's already (or it has no
    /// state here).
    pub fn upgrade() -> Result<Option<UpgradeReport>> {
        let _lock = Self::lock()?;
        let dir = Self::pin_dir()?;
        let next = sibling(&dir, "-next");
        if !Self::pinned(&dir) {
            return Ok(None);
        }
        let links = Self::attached_links()?;
        let (changed, new) = Self::changed(&dir)?;
        let resumed = next.exists() && Self::staged_in_use(&dir, &next, &links);
        if next.exists() && !resumed {
            // Left by an upgrade killed before its first swap (or after its
            // exchange): nothing runs on it.
            remove_pins(&next);
        }
        let builds: Builds = state::read_json(&Self::run_dir()?, BUILDS).ok().flatten().unwrap_or_default();
        if changed.is_empty() && new.is_empty() && !resumed && links.iter().all(|l| Self::current(&builds, l.ifindex)) {
            return Ok(None);
        }
        // Tables compiled from what was applied are compiled anew by every
        // build: staged fresh, never shared with the old programs.
        let changed: Vec<&str> =
            changed.into_iter().chain(N::REBUILT.iter().copied().filter(|n| !new.contains(n))).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        let staged = Self::stage_and_copy(&dir, &next, (&changed, &new), resumed);
        if staged.is_err() && !resumed {
            // Nothing runs on it: the old programs never stopped.
            remove_pins(&next);
        }
        let (migrations, maps) = staged?;
        die_at("copied");
        let fresh = new.iter().chain(changed.iter().filter(|n| N::REBUILT.contains(n))).map(|n| n.to_string()).collect();
        let mut report = UpgradeReport { nf: N::NAME, resumed, fresh, ..Default::default() };
        for (i, l) in links.iter().enumerate() {
            let mode = entry::info(l.ifindex).map(|i| i.mode).with_context(|| format!("{} lost its entry program during the upgrade", l.name))?;
            let opts = N::options(&maps, l.ifindex)?;
            Self::install(&next, &maps, l, mode, &opts).with_context(|| format!("swapping {}'s program to this build", l.name))?;
            N::replaced(&maps, l, &opts)?;
            report.swapped.push(l.name.clone());
            if i == 0 {
                die_at("swapped");
            }
        }
        // An XDP program runs within one NAPI poll: by now no CPU is still
        // in an old one that read its slot before the swap.
        std::thread::sleep(std::time::Duration::from_millis(20));
        for (mut m, copied) in migrations {
            let caught_up = m.catch_up()?;
            report.migrated.push(MigratedMap { name: m.name.clone(), copied, caught_up });
        }
        exchange(&dir, &next)?;
        remove_pins(&next);
        N::settle(&maps)?;
        Ok(Some(report))
    }
}
