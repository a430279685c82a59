//! One lifecycle for every network function that runs as a stage of the
//! entry program (filter, lb, lb decap, router): where its state lives,
//! the one lock that serialises changes to it, its pinned maps declared
//! once, and attach, detach, status, stats and state removal written once.
//!
//! A network function is a type implementing [`StageNf`]: its names, its
//! stage, its maps (a struct made by [`pinned_maps!`](crate::pinned_maps)),
//! how to load one instance, and hooks for what only it does (the router
//! reserves a slot before its instance is loaded; the lb lets the data
//! plane redirect to the port). [`Lifecycle`] does everything else, the
//! same way for all of them:
//!
//! - state: maps pinned under `/sys/fs/bpf/xnf/net-<inode>/<NAME>/`, run
//!   files under `/run/xnf/net-<inode>/<NAME>/`, both removed with the last
//!   interface; every change holds the `<NAME>` state lock (taken before
//!   the entry's, never after);
//! - attach: checked for every interface before anything changes, then all
//!   or nothing (an interface this call attached is detached again when a
//!   later one fails); an interface attached with other options gets a new
//!   instance in one update of its stage slot, counters kept;
//! - detach, status (interfaces, mode, program ids) and stats (named
//!   counters summed over CPUs).

use std::fmt::Debug;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapHandle};
use xnf_netns::netlink::{self, Link};

use crate::entry::{self, Stage};
use crate::layout::{self, Layout};
use crate::state::{self, StateLock};
use crate::xdp::XdpMode;

/// A set of maps shared by every instance of a program through pins, one
/// field per map, named as the map is in the BPF source. Made by
/// [`pinned_maps!`](crate::pinned_maps): the list is written once, and
/// each map is found by its name, never by its position in a list.
pub trait PinnedMaps: Sized {
    /// The maps' names, as in the BPF source and as pinned.
    const NAMES: &'static [&'static str];

    /// The struct from one handle per name.
    fn from_named(maps: &mut NamedMaps) -> Result<Self>;

    /// The layout this xnf expects of each map: its own object's
    /// ([`layout`](crate::layout)).
    fn layouts() -> Result<&'static [(String, Layout)]>;

    /// The layout expected of map `name`.
    fn layout_of(name: &str) -> Result<Layout> {
        let l = Self::layouts()?.iter().find(|(n, _)| n == name).map(|(_, l)| *l);
        l.with_context(|| format!("the program has no map named {name}: its declaration of shared maps is out of date"))
    }

    /// Opens the maps pinned in `dir`, each checked to have the layout
    /// this xnf expects before anything reads it.
    fn open_pinned(dir: &Path) -> Result<Self> {
        let mut named = NamedMaps::default();
        for name in Self::NAMES {
            let path = dir.join(name);
            if !path.exists() && dir.is_dir() {
                anyhow::bail!("{} has no map {name}: another version of xnf made it: `xnf upgrade` moves it to this one's", dir.display());
            }
            let h = MapHandle::from_pinned_path(&path).with_context(|| format!("opening pinned map {}", path.display()))?;
            layout::check(&path, &h, Self::layout_of(name)?)?;
            named.0.push((name.to_string(), h));
        }
        Self::from_named(&mut named)
    }

    /// The maps of a loaded object (the pinned ones when it was loaded
    /// with [`pin_maps`]).
    fn of_object(obj: &libbpf_rs::Object) -> Result<Self> {
        let mut named = NamedMaps::default();
        for m in obj.maps() {
            named.0.push((m.name().to_string_lossy().into_owned(), MapHandle::try_from(&m)?));
        }
        Self::from_named(&mut named)
    }
}

/// Map handles by name, for [`PinnedMaps::from_named`].
#[derive(Default)]
pub struct NamedMaps(Vec<(String, MapHandle)>);

impl NamedMaps {
    /// The handle of map `name`.
    pub fn take(&mut self, name: &str) -> Result<MapHandle> {
        let i = self.0.iter().position(|(n, _)| n == name).with_context(|| format!("the program has no map named {name}"))?;
        Ok(self.0.swap_remove(i).1)
    }
}

/// Declares a program's shared maps once: a struct with one `MapHandle`
/// field per map, named as in the BPF source, implementing [`PinnedMaps`].
///
/// `in` names the skeleton whose object defines them: the layouts
/// expected of the pins are its ([`layout`](crate::layout)).
///
/// ```ignore
/// xnf_core::pinned_maps! {
///     /// The filter's shared maps.
///     pub struct FilterMaps in crate::skel::FilterSkelBuilder { rule_sets, lists, stats }
/// }
/// ```
#[macro_export]
macro_rules! pinned_maps {
    ($(#[$meta:meta])* $vis:vis struct $name:ident in $skel:path { $($(#[$fmeta:meta])* $fvis:vis $field:ident),* $(,)? }) => {
        $(#[$meta])*
        $vis struct $name {
            // A map is shared because the data plane needs it; user space
            // may never read some of them.
            $($(#[$fmeta])* #[allow(dead_code)] $fvis $field: ::libbpf_rs::MapHandle,)*
        }
        impl $crate::lifecycle::PinnedMaps for $name {
            const NAMES: &'static [&'static str] = &[$(stringify!($field)),*];
            fn from_named(maps: &mut $crate::lifecycle::NamedMaps) -> ::anyhow::Result<Self> {
                Ok(Self { $($field: maps.take(stringify!($field))?,)* })
            }
            fn layouts() -> ::anyhow::Result<&'static [(String, $crate::layout::Layout)]> {
                static LAYOUTS: ::std::sync::OnceLock<Vec<(String, $crate::layout::Layout)>> = ::std::sync::OnceLock::new();
                if let Some(l) = LAYOUTS.get() {
                    return Ok(l);
                }
                let l = $crate::layout::of_skeleton::<$skel>(<Self as $crate::lifecycle::PinnedMaps>::NAMES)?;
                Ok(LAYOUTS.get_or_init(|| l))
            }
        }
        impl $name {
            /// Opens the maps pinned in `dir`.
            #[allow(dead_code)]
            pub fn open_pinned(dir: &::std::path::Path) -> ::anyhow::Result<Self> {
                <Self as $crate::lifecycle::PinnedMaps>::open_pinned(dir)
            }
        }
    };
}

/// Points the maps `M` declares, in a program being opened, at their pins
/// in `dir`: the first load creates and pins them, every later one reuses
/// them, each checked first to have this object's layout (libbpf itself
/// compares only type, sizes, entries and flags). A declared map the
/// program does not have is an error, not a silently unshared map.
pub fn pin_maps<M: PinnedMaps>(open: &mut libbpf_rs::OpenObject, dir: &Path) -> Result<()> {
    let layouts = layout::of_object(open, M::NAMES)?;
    for (name, want) in &layouts {
        let path = dir.join(name);
        if let Ok(h) = MapHandle::from_pinned_path(&path) {
            layout::check(&path, &h, *want)?;
        }
    }
    let mut found = 0;
    for mut map in open.maps_mut() {
        let name = map.name().to_string_lossy().into_owned();
        if M::NAMES.contains(&name.as_str()) {
            map.set_pin_path(dir.join(&name)).with_context(|| format!("setting the pin path of map {name}"))?;
            found += 1;
        }
    }
    if found != M::NAMES.len() {
        let have: Vec<String> = open.maps().map(|m| m.name().to_string_lossy().into_owned()).collect();
        let missing: Vec<&str> = M::NAMES.iter().copied().filter(|n| !have.iter().any(|h| h == n)).collect();
        bail!("the program has no map named {}: its declaration of shared maps is out of date", missing.join(", "));
    }
    Ok(())
}

/// Where an instance being loaded will run.
pub struct Target<'a, N: StageNf> {
    pub link: &'a Link,
    pub opts: &'a N::Options,
    /// The shared maps (pinned).
    pub maps: &'a N::Maps,
    /// The interface's stage array: the instance's "continue" reaches the
    /// stages after its own on this interface.
    pub stages: &'a MapHandle,
}

/// A network function that runs as a stage of the entry program.
pub trait StageNf: Sized + 'static {
    /// Its pin folder, run folder and state lock ("filter", "lb", ...).
    const NAME: &'static str;
    /// How messages call it ("the filter").
    const TITLE: &'static str;
    /// Its command, for hints ("xnf filter").
    const COMMAND: &'static str;
    /// Its program's name as the kernel reports it: what its slot holds.
    const PROG_NAME: &'static str;
    /// Which build its program is (the skeleton's `BUILD`): an upgrade
    /// replaces the programs of other builds.
    const BUILD: &'static str;
    const STAGE: Stage;
    /// Ends the message for an interface that is not Ethernet.
    const ETHERNET_WHY: &'static str;

    type Maps: PinnedMaps;
    /// A loaded instance, kept until its program is in the slot.
    type Instance;
    /// How one interface runs it (the router's route lookup, decap's GUE
    /// port); `()` when every interface runs the same instance.
    type Options: Clone + PartialEq + Debug + Default;

    /// Loads an instance on the maps pinned in `dir`, for `at`; `None`:
    /// the first load, that only creates the pins.
    fn load(dir: &Path, at: Option<&Target<'_, Self>>) -> Result<Self::Instance>;

    /// The program of an instance, for the stage slot.
    fn prog(instance: &Self::Instance) -> BorrowedFd<'_>;

    /// The options `ifindex` runs with (its stage holds this NF).
    fn options(_maps: &Self::Maps, _ifindex: u32) -> Result<Self::Options> {
        Ok(Self::Options::default())
    }

    /// Checks an interface before anything changes (beyond being Ethernet).
    fn check(_link: &Link) -> Result<()> {
        Ok(())
    }

    /// Fills the shared maps for `link` before its instance is loaded and
    /// its slot filled (no frame meets a half-made entry).
    fn enter(_maps: &Self::Maps, _link: &Link, _opts: &Self::Options) -> Result<()> {
        Ok(())
    }

    /// After `link`'s instance was replaced by one with `opts`.
    fn replaced(_maps: &Self::Maps, _link: &Link, _opts: &Self::Options) -> Result<()> {
        Ok(())
    }

    /// Undoes [`enter`](Self::enter) once the slot is empty (detach, or a
    /// failed attach).
    fn leave(_maps: &Self::Maps, _ifindex: u32) -> Result<()> {
        Ok(())
    }

    /// After an attach or detach that leaves interfaces attached: what
    /// depends on the set of them.
    fn settle(_maps: &Self::Maps) -> Result<()> {
        Ok(())
    }

    /// Warnings about the interfaces just attached (the result stands).
    fn warnings(_targets: &[Link], _links: &[Link], _mode: XdpMode, _opts: &Self::Options) -> Vec<String> {
        Vec::new()
    }

    /// State of its own to remove with the last interface, beyond its pin
    /// and run folders (the filter's nftables table).
    fn remove_more() -> Result<()> {
        Ok(())
    }

    /// Its counters summed over CPUs, named.
    fn counters(_maps: &Self::Maps) -> Result<Vec<(&'static str, u64)>> {
        Ok(Vec::new())
    }

    /// Maps an upgrade fills anew from the function's own record of what
    /// it applied ([`rebuild`](Self::rebuild)) instead of copying entries:
    /// tables compiled from a file, whose layout a new build changes.
    const REBUILT: &'static [&'static str] = &[];

    /// Fills the staged maps named in [`REBUILT`](Self::REBUILT) during an
    /// upgrade, before any interface runs them (the function's lock held).
    fn rebuild(_maps: &Self::Maps) -> Result<()> {
        Ok(())
    }
}

/// What an attach did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttachReport {
    /// Interfaces that did not run it before.
    pub attached: Vec<String>,
    /// Interfaces whose instance was replaced by one with other options.
    pub replaced: Vec<String>,
    pub warnings: Vec<String>,
}

/// One interface running a network function.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Attached {
    pub name: String,
    pub ifindex: u32,
    pub mode: XdpMode,
    /// Id of its program in the stage slot.
    pub prog_id: u32,
    /// The stages on the interface, as "stage:program#id", in order.
    pub stages: Vec<String>,
}

/// Attach, detach, status, stats and state of network function `N`.
pub struct Lifecycle<N>(std::marker::PhantomData<N>);

impl<N: StageNf> Lifecycle<N> {
    /// Its pin folder in this network namespace.
    pub fn pin_dir() -> Result<PathBuf> {
        state::pin_dir(N::NAME)
    }

    /// Its run-file folder in this network namespace (not created).
    pub fn run_dir() -> Result<PathBuf> {
        Ok(state::run_dir()?.join(N::NAME))
    }

    /// Its state lock: every change to its state holds it.
    pub fn lock() -> Result<StateLock> {
        StateLock::acquire(N::NAME)
    }

    /// Whether it has state in `dir` (any of its maps pinned: a build
    /// with a map more finds the older one's state too).
    pub(crate) fn pinned(dir: &Path) -> bool {
        N::Maps::NAMES.iter().any(|n| dir.join(n).exists())
    }

    /// The pinned maps, if it has state in this network namespace.
    pub fn maps() -> Result<Option<N::Maps>> {
        let dir = Self::pin_dir()?;
        if !Self::pinned(&dir) {
            return Ok(None);
        }
        N::Maps::open_pinned(&dir).map(Some)
    }

    /// The pinned maps, or a message that it has no state here.
    pub fn open_maps() -> Result<N::Maps> {
        Self::maps()?.with_context(|| format!("{} has no state in this network namespace (`{} attach IFACE`)", N::TITLE, N::COMMAND))
    }

    /// The pinned maps, creating them (by loading an instance) when absent.
    pub fn maps_or_create() -> Result<N::Maps> {
        state::ensure_bpffs()?;
        let dir = Self::pin_dir()?;
        if !Self::pinned(&dir) {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            N::load(&dir, None)?;
        }
        N::Maps::open_pinned(&dir)
    }

    /// The id of its program if it is `ifindex`'s stage.
    pub fn stage_prog(ifindex: u32) -> Option<u32> {
        entry::installed(ifindex, N::STAGE, N::PROG_NAME)
    }

    /// The options `ifindex` runs it with (None: it does not).
    pub fn options_of(ifindex: u32) -> Result<Option<N::Options>> {
        if Self::stage_prog(ifindex).is_none() {
            return Ok(None);
        }
        N::options(&Self::open_maps()?, ifindex).map(Some)
    }

    /// The interfaces of this network namespace running it.
    pub fn attached_links() -> Result<Vec<Link>> {
        Ok(netlink::links()?.into_iter().filter(|l| Self::stage_prog(l.ifindex).is_some()).collect())
    }

    /// Attaches it to `names` in `mode` with `opts`: new interfaces get its
    /// stage, those running it with other options a new instance (the mode
    /// cannot change in place). Everything is checked before anything
    /// changes; all or nothing for new interfaces.
    pub fn attach(names: &[String], mode: XdpMode, opts: &N::Options) -> Result<AttachReport> {
        state::ensure_bpffs()?;
        let _lock = Self::lock()?;
        let links = netlink::links()?;
        let targets = entry::ethernet_links(names, N::ETHERNET_WHY)?;
        targets.iter().try_for_each(N::check)?;
        let mut replace = Vec::new();
        for l in &targets {
            if Self::stage_prog(l.ifindex).is_none() {
                continue;
            }
            if N::options(&Self::open_maps()?, l.ifindex)? == *opts {
                // Options of no size: there is nothing else to attach it with.
                let with = if std::mem::size_of::<N::Options>() == 0 { "" } else { " with these options" };
                bail!("{} is already attached to {}{with} (`{} status`)", N::TITLE, l.name, N::COMMAND);
            }
            let now = entry::info(l.ifindex).map(|i| i.mode);
            if now.is_some_and(|m| m != mode) {
                let m = now.map(|m| m.name()).unwrap_or_default();
                bail!("{} runs in {m} mode: changing the XDP mode cannot be atomic, `{} detach {}` first", l.name, N::COMMAND, l.name);
            }
            replace.push(l.ifindex);
        }
        let maps = Self::maps_or_create()?;
        let dir = Self::pin_dir()?;
        let mut report = AttachReport::default();
        for l in &targets {
            let r = if replace.contains(&l.ifindex) { Self::replace_one(&dir, &maps, l, mode, opts) } else { Self::add_one(&dir, &maps, l, mode, opts) };
            if let Err(e) = r {
                for name in &report.attached {
                    if let Some(done) = targets.iter().find(|t| &t.name == name) {
                        let _ = entry::remove(done.ifindex, N::STAGE);
                        let _ = N::leave(&maps, done.ifindex);
                    }
                }
                Self::settle_or_remove(&maps)?;
                return Err(e.context(format!("attaching {} to {}", N::TITLE, l.name)));
            }
            let names = if replace.contains(&l.ifindex) { &mut report.replaced } else { &mut report.attached };
            names.push(l.name.clone());
        }
        Self::settle_or_remove(&maps)?;
        report.warnings = N::warnings(&targets, &links, mode, opts);
        Ok(report)
    }

    /// Puts an instance into `link`'s stage slot, for a network function
    /// that writes its entries itself (the chain reconciles its tables
    /// from its registry first): no [`enter`](StageNf::enter), no lock.
    pub fn install_on(maps: &N::Maps, link: &Link, mode: XdpMode, opts: &N::Options) -> Result<()> {
        Self::install(&Self::pin_dir()?, maps, link, mode, opts)
    }

    /// Empties its stage slot on `ifindex` (the counterpart of
    /// [`install_on`](Self::install_on)).
    pub fn remove_from(ifindex: u32) -> Result<()> {
        entry::remove(ifindex, N::STAGE)
    }

    pub(crate) fn install(dir: &Path, maps: &N::Maps, link: &Link, mode: XdpMode, opts: &N::Options) -> Result<()> {
        let load = |stages: &MapHandle| N::load(dir, Some(&Target { link, opts, maps, stages }));
        let instance = entry::install(link.ifindex, &link.name, mode, N::STAGE, load, |i| N::prog(i))?;
        Self::record_build(link.ifindex, N::prog(&instance))
    }

    fn add_one(dir: &Path, maps: &N::Maps, link: &Link, mode: XdpMode, opts: &N::Options) -> Result<()> {
        N::enter(maps, link, opts)?;
        Self::install(dir, maps, link, mode, opts).inspect_err(|_| {
            let _ = N::leave(maps, link.ifindex);
        })
    }

    /// A new instance into the slot, in one update: the interface never
    /// runs without one, and its entries and counters stay.
    fn replace_one(dir: &Path, maps: &N::Maps, link: &Link, mode: XdpMode, opts: &N::Options) -> Result<()> {
        Self::install(dir, maps, link, mode, opts)?;
        N::replaced(maps, link, opts)
    }

    /// Moves it on `iface` to another XDP mode, its state kept: the entry
    /// is attached again in `mode` (an XDP link cannot change its mode),
    /// so traffic takes the kernel's path for that moment. A detach and an
    /// attach would remove the state in between when `iface` is its last
    /// interface — the filter's rules, the lb's connections.
    pub fn remode(iface: &str, mode: XdpMode, opts: &N::Options) -> Result<()> {
        let _lock = Self::lock()?;
        let (dir, maps) = (Self::pin_dir()?, Self::open_maps()?);
        let link = netlink::link_by_name(iface)?;
        entry::remove(link.ifindex, N::STAGE)?;
        N::leave(&maps, link.ifindex)?;
        Self::add_one(&dir, &maps, &link, mode, opts)
    }

    /// Detaches it from `names`; with no interface left, its state goes too.
    pub fn detach(names: &[String]) -> Result<()> {
        let _lock = Self::lock()?;
        let missing = |name: &str| format!("{} is not attached to {name} (`{} status` lists where it is)", N::TITLE, N::COMMAND);
        let todo = entry::holding(names, N::STAGE, N::PROG_NAME, missing)?;
        let maps = Self::open_maps()?;
        for ifindex in todo {
            entry::remove(ifindex, N::STAGE)?;
            N::leave(&maps, ifindex)?;
        }
        Self::settle_or_remove(&maps)
    }

    /// Removes one interface that went away (the kernel detached it with
    /// the device): its stage pins and its entries. Holds no lock: for a
    /// caller that holds it.
    pub fn forget_locked(maps: &N::Maps, ifindex: u32) -> Result<()> {
        entry::remove_if_held_or_gone(ifindex, N::STAGE, N::PROG_NAME)?;
        N::leave(maps, ifindex)
    }

    fn settle_or_remove(maps: &N::Maps) -> Result<()> {
        if Self::attached_links()?.is_empty() {
            Self::remove_state()
        } else {
            N::settle(maps)
        }
    }

    /// Removes its pins and run files (no interface runs it any more).
    pub fn remove_state() -> Result<()> {
        N::remove_more()?;
        let dir = Self::pin_dir()?;
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        state::remove_empty_dirs(&dir);
        let _ = std::fs::remove_dir_all(Self::run_dir()?);
        Ok(())
    }

    /// The interfaces running it, with their stages.
    pub fn status() -> Result<Vec<Attached>> {
        let mut out = Vec::new();
        for l in netlink::links()? {
            let Some(info) = entry::info(l.ifindex) else { continue };
            let Some(&(_, prog_id, _)) = info.stages.iter().find(|(s, _, n)| *s == N::STAGE && n == N::PROG_NAME) else { continue };
            let stages = info.stages.iter().map(|(s, id, name)| format!("{}:{name}#{id}", s.name())).collect();
            out.push(Attached { name: l.name, ifindex: l.ifindex, mode: info.mode, prog_id, stages });
        }
        Ok(out)
    }

    /// Its counters, named (zeros when it has no state here).
    pub fn stats() -> Result<Vec<(&'static str, u64)>> {
        match Self::maps()? {
            Some(m) => N::counters(&m),
            None => Ok(Vec::new()),
        }
    }
}
