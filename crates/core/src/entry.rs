//! The entry program and its stages: how network functions share one
//! interface (`bpf/include/xnf/stage.h` says what each stage may return).
//!
//! Per interface, pinned under `/sys/fs/bpf/xnf/<netns>/entry/<ifindex>/`:
//! `stages` (the PROG_ARRAY) and `link-native` or `link-skb` (the entry
//! program's XDP link; its name records the mode). A network function
//! installs its stage with [`install`], which loads the stage program with
//! the interface's array, fills the slot and, for the first stage, attaches
//! the entry program; [`remove`] empties the slot and, with the last one,
//! detaches the entry and removes the pins. Both hold the `entry` state
//! lock: a network function takes its own lock first, never the reverse.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use crate::state::{self, StateLock};
use crate::xdp::{XdpLink, XdpMode};

mod skel {
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    include!(concat!(env!("OUT_DIR"), "/entry.skel.rs"));
}

/// A stage slot, in the order frames meet them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Filter,
    Lb,
    /// `xnf router` or `xnf chain` (one of them).
    Forward,
}

impl Stage {
    pub const ALL: [Stage; 3] = [Stage::Filter, Stage::Lb, Stage::Forward];

    fn slot(self) -> u32 {
        use skel::types::xnf_stage as S;
        match self {
            Stage::Filter => S::XNF_STAGE_FILTER.0,
            Stage::Lb => S::XNF_STAGE_LB.0,
            Stage::Forward => S::XNF_STAGE_FORWARD.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Stage::Filter => "filter",
            Stage::Lb => "lb",
            Stage::Forward => "forward",
        }
    }
}

const SLOTS: u32 = skel::types::xnf_stage::XNF_STAGES.0;
const _: () = assert!(SLOTS as usize == Stage::ALL.len());
const LOCK: &str = "entry";

fn dir(ifindex: u32) -> Result<PathBuf> {
    Ok(state::pin_dir("entry")?.join(ifindex.to_string()))
}

fn link_pin(dir: &Path, mode: XdpMode) -> PathBuf {
    dir.join(format!("link-{}", mode.name()))
}

/// The mode of the entry attached to the interface whose pins are in `dir`,
/// when its link is still attached to `ifindex`.
fn live_mode(dir: &Path, ifindex: u32) -> Option<XdpMode> {
    [XdpMode::Native, XdpMode::Skb].into_iter().find(|&m| XdpLink::open(&link_pin(dir, m)).and_then(|l| l.info()).is_ok_and(|(i, _)| i == ifindex))
}

/// Pins left by an interface that went away (its ifindex may be reused).
fn remove_stale(dir: &Path, ifindex: u32) {
    if dir.exists() && live_mode(dir, ifindex).is_none() {
        remove_pins(dir);
    }
}

fn remove_pins(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    state::remove_empty_dirs(dir);
}

fn create_stages() -> Result<MapHandle> {
    let opts = libbpf_sys::bpf_map_create_opts { sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _, ..Default::default() };
    MapHandle::create(MapType::ProgArray, Some("xnf_stages"), 4, 4, SLOTS, &opts).context("creating the stage array")
}

/// A loaded entry program, bound to one stage array.
struct EntryProgram {
    skel: skel::EntrySkel<'static>,
}

impl EntryProgram {
    fn load(stages: &MapHandle) -> Result<Self> {
        let mut open = skel::EntrySkelBuilder::default().open(crate::maps::object_storage()).context("opening the entry program")?;
        open.maps.xnf_stages.reuse_fd(stages.as_fd()).context("giving the entry program its stage array")?;
        Ok(Self { skel: open.load().context("loading the entry program")? })
    }
}

/// Installs stage `stage` on interface `ifindex` (`ifname` for messages):
/// `load` loads the stage program given the interface's stage array (to
/// reuse before load; see `reuse_stages`), and its program fills the slot,
/// replacing what was there in one update. The first stage attaches the
/// entry program in `mode`; later ones must ask for the same mode. Returns
/// what `load` returned (the caller keeps its maps).
pub fn install<P>(
    ifindex: u32,
    ifname: &str,
    mode: XdpMode,
    stage: Stage,
    load: impl FnOnce(&MapHandle) -> Result<P>,
    prog: impl Fn(&P) -> BorrowedFd<'_>,
) -> Result<P> {
    state::ensure_bpffs()?;
    let _lock = StateLock::acquire(LOCK)?;
    let dir = dir(ifindex)?;
    remove_stale(&dir, ifindex);
    if let Some(m) = live_mode(&dir, ifindex) {
        if m != mode {
            bail!(
                "{ifname} runs xnf in {} mode ({}); every network function on one interface shares the mode: \
                 use --mode {} or detach the others first",
                m.name(),
                describe(&dir)?,
                m.name()
            );
        }
        let stages = MapHandle::from_pinned_path(dir.join("stages")).context("opening the stage array")?;
        let p = load(&stages)?;
        fill(&stages, stage, prog(&p), ifname)?;
        return Ok(p);
    }
    // A fresh interface: stage first, then the entry that runs it.
    let stages = create_stages()?;
    let p = load(&stages)?;
    fill(&stages, stage, prog(&p), ifname)?;
    let entry = EntryProgram::load(&stages)?;
    let link = XdpLink::create(entry.skel.progs.xnf_entry.as_fd(), ifindex, ifname, mode)?;
    let pinned = std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating {}", dir.display()))
        .and_then(|_| crate::xdp::pin_fd(stages.as_fd(), &dir.join("stages")))
        .and_then(|_| link.pin(&link_pin(&dir, mode)))
        .and_then(|_| record_build(ifindex, &link));
    if let Err(e) = pinned {
        let _ = link.detach();
        remove_pins(&dir);
        return Err(e);
    }
    Ok(p)
}

/// The run file recording which build each interface's entry program is:
/// ifindex -> (program id, build).
const BUILDS: &str = "entry-builds.json";

fn record_build(ifindex: u32, link: &XdpLink) -> Result<()> {
    let (_, id) = link.info()?;
    state::update_json(&state::run_dir()?, BUILDS, |b: &mut state::Builds| {
        b.insert(ifindex, (id, skel::BUILD.to_string()));
    })
}

/// Puts this build's entry program on every interface of this network
/// namespace running another build's: one `BPF_LINK_UPDATE` each, the
/// stage array kept (the stages never stop). Returns the interfaces'
/// ifindexes it replaced.
pub fn upgrade() -> Result<Vec<u32>> {
    let _lock = StateLock::acquire(LOCK)?;
    let dir = state::run_dir()?;
    let builds: state::Builds = state::read_json(&dir, BUILDS).ok().flatten().unwrap_or_default();
    let mut done = Vec::new();
    for l in xnf_netns::netlink::links()? {
        let Some(i) = info(l.ifindex) else { continue };
        if builds.get(&l.ifindex).is_some_and(|(id, b)| *id == i.entry_prog_id && b == skel::BUILD) {
            continue;
        }
        let pins = self::dir(l.ifindex)?;
        let stages = MapHandle::from_pinned_path(pins.join("stages")).context("opening the stage array")?;
        let entry = EntryProgram::load(&stages)?;
        let link = XdpLink::open(&link_pin(&pins, i.mode))?;
        link.update(entry.skel.progs.xnf_entry.as_fd()).with_context(|| format!("replacing {}'s entry program", l.name))?;
        record_build(l.ifindex, &link)?;
        done.push(l.ifindex);
    }
    Ok(done)
}

/// The interfaces `names` where `prog_name` holds `stage`, as ifindexes,
/// for a network function's detach; `missing(name)` is the message for an
/// interface that does not have it.
pub fn holding(names: &[String], stage: Stage, prog_name: &str, missing: impl Fn(&str) -> String) -> Result<Vec<u32>> {
    let links = xnf_netns::netlink::links()?;
    names
        .iter()
        .map(|name| {
            let link = links.iter().find(|l| &l.name == name).with_context(|| format!("no interface named {name:?} in this network namespace"))?;
            match installed(link.ifindex, stage, prog_name) {
                Some(_) => Ok(link.ifindex),
                None => bail!("{}", missing(name)),
            }
        })
        .collect()
}

/// Puts `prog` into `stage`'s slot. A slot another network function holds
/// (a program of another name: the router's and the chain's both use the
/// forward stage) is refused, never replaced behind that function's back.
fn fill(stages: &MapHandle, stage: Stage, prog: BorrowedFd<'_>, ifname: &str) -> Result<()> {
    let raw = std::os::fd::AsRawFd::as_raw_fd(&prog) as u32;
    if let Some(held) = prog_id(stages, stage).and_then(prog_name) {
        let mine = fd_prog_name(prog).unwrap_or_default();
        if held != mine {
            bail!("{ifname}'s {} stage runs {held}; one network function per stage: detach it first", stage.name());
        }
    }
    stages.update(&stage.slot().to_ne_bytes(), &raw.to_ne_bytes(), MapFlags::ANY).with_context(|| format!("installing the {} stage", stage.name()))
}

/// Empties `stage`'s slot on `ifindex`; with no stage left, detaches the
/// entry program and removes its pins. Absent stages are not an error.
pub fn remove(ifindex: u32, stage: Stage) -> Result<()> {
    let _lock = StateLock::acquire(LOCK)?;
    let dir = dir(ifindex)?;
    let Ok(stages) = MapHandle::from_pinned_path(dir.join("stages")) else {
        remove_pins(&dir);
        return Ok(());
    };
    crate::maps::delete_if_present(&stages, &stage.slot().to_ne_bytes())?;
    if Stage::ALL.iter().any(|&s| prog_id(&stages, s).is_some()) {
        return Ok(());
    }
    for mode in [XdpMode::Native, XdpMode::Skb] {
        if let Ok(l) = XdpLink::open(&link_pin(&dir, mode)) {
            // Explicitly: a process holding the link open must not keep
            // the entry attached once the last stage is gone.
            let _ = l.detach();
        }
    }
    remove_pins(&dir);
    forget_build(ifindex)
}

/// Drops `ifindex`'s record of its entry program's build (detached).
fn forget_build(ifindex: u32) -> Result<()> {
    state::update_json(&state::run_dir()?, BUILDS, |b: &mut state::Builds| {
        b.remove(&ifindex);
    })
}

/// Empties `stage` on `ifindex` when `prog_name` holds it there, or when
/// the interface's entry is gone with its device (its ifindex may come
/// back as another interface, whose stages are not ours to touch).
pub fn remove_if_held_or_gone(ifindex: u32, stage: Stage, prog_name: &str) -> Result<()> {
    if installed(ifindex, stage, prog_name).is_some() || info(ifindex).is_none() {
        remove(ifindex, stage)?;
    }
    Ok(())
}

fn prog_id(stages: &MapHandle, stage: Stage) -> Option<u32> {
    // A PROG_ARRAY read from user space gives the program's id.
    let v = stages.lookup(&stage.slot().to_ne_bytes(), MapFlags::ANY).ok()??;
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

/// One interface's entry: its mode and the program id in each slot.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EntryInfo {
    pub ifindex: u32,
    pub mode: XdpMode,
    /// Id of the entry program attached to the interface.
    pub entry_prog_id: u32,
    /// `(stage, program id, program name)` of the stages present, in order.
    pub stages: Vec<(Stage, u32, String)>,
}

/// The entry of `ifindex` in this network namespace, if one is attached.
pub fn info(ifindex: u32) -> Option<EntryInfo> {
    let dir = dir(ifindex).ok()?;
    let mode = live_mode(&dir, ifindex)?;
    let (_, entry_prog_id) = XdpLink::open(&link_pin(&dir, mode)).and_then(|l| l.info()).ok()?;
    let stages = MapHandle::from_pinned_path(dir.join("stages")).ok()?;
    let present = Stage::ALL.iter().filter_map(|&s| prog_id(&stages, s).map(|id| (s, id, prog_name(id).unwrap_or_default()))).collect();
    Some(EntryInfo { ifindex, mode, entry_prog_id, stages: present })
}

/// The id of program `name` if it is in `stage`'s slot on `ifindex`.
pub fn installed(ifindex: u32, stage: Stage, name: &str) -> Option<u32> {
    info(ifindex)?.stages.into_iter().find(|(s, _, n)| *s == stage && n == name).map(|(_, id, _)| id)
}

/// The name of program `id`, by its id (not by walking every program).
fn prog_name(id: u32) -> Option<String> {
    fd_prog_name(prog_by_id(id)?.as_fd())
}

/// Program `id`, opened by its id.
pub(crate) fn prog_by_id(id: u32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: a new fd is ours to own.
    unsafe {
        let fd = libbpf_sys::bpf_prog_get_fd_by_id(id);
        (fd >= 0).then(|| std::os::fd::OwnedFd::from_raw_fd(fd))
    }
}

/// What the kernel says of the program open as `fd`; the ids of the maps
/// it uses go into `map_ids` (as many as fit; `nr_map_ids` says how many).
pub(crate) fn prog_info(fd: BorrowedFd<'_>, map_ids: &mut [u32]) -> Option<libbpf_sys::bpf_prog_info> {
    let mut info = libbpf_sys::bpf_prog_info { nr_map_ids: map_ids.len() as u32, map_ids: map_ids.as_mut_ptr() as u64, ..Default::default() };
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: a valid fd; info is plain data of the size given, pointing
    // at a buffer of nr_map_ids ids.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut info, &mut len) };
    (rc == 0).then_some(info)
}

/// The name the kernel gives the program open as `fd`.
fn fd_prog_name(fd: BorrowedFd<'_>) -> Option<String> {
    let info = prog_info(fd, &mut [])?;
    let name: Vec<u8> = info.name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    Some(String::from_utf8_lossy(&name).into_owned())
}

/// "filter + router"-style summary of the stages in `dir`, for messages.
fn describe(dir: &Path) -> Result<String> {
    let stages = MapHandle::from_pinned_path(dir.join("stages")).context("opening the stage array")?;
    let names: Vec<String> = Stage::ALL.iter().filter_map(|&s| prog_id(&stages, s).map(|id| prog_name(id).unwrap_or_else(|| s.name().into()))).collect();
    Ok(if names.is_empty() { "no stages".into() } else { names.join(" + ") })
}

/// Gives a stage program being opened the interface's stage array, so that
/// its "continue" tail-calls the stages after it on this interface.
pub fn reuse_stages(map: &mut libbpf_rs::OpenMapMut<'_>, stages: &MapHandle) -> Result<()> {
    map.reuse_fd(stages.as_fd()).context("giving a stage its interface's stage array")
}

/// The interfaces `names` of this network namespace, checked for a network
/// function that parses Ethernet frames: present, each named once, Ethernet
/// and not the loopback; `why` ends the message of one that is not.
pub fn ethernet_links(names: &[String], why: &str) -> Result<Vec<xnf_netns::netlink::Link>> {
    let links = xnf_netns::netlink::links()?;
    let mut out: Vec<xnf_netns::netlink::Link> = Vec::new();
    for name in names {
        let link = links.iter().find(|l| &l.name == name).with_context(|| format!("no interface named {name:?} in this network namespace (see `ip link`)"))?;
        if out.iter().any(|l| &l.name == name) {
            bail!("{name} is named twice");
        }
        if link.loopback {
            bail!("{name} is the loopback interface, not an Ethernet interface: {why}");
        }
        if !link.ethernet {
            bail!("{name} is not an Ethernet interface: {why}");
        }
        out.push(link.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::pin_maps;

    crate::pinned_maps! {
        struct Stages in skel::EntrySkelBuilder { xnf_stages }
    }
    crate::pinned_maps! {
        struct Stale in skel::EntrySkelBuilder { xnf_stages, xnf_gone }
    }

    fn open() -> skel::OpenEntrySkel<'static> {
        let storage = Box::leak(Box::new(std::mem::MaybeUninit::uninit()));
        skel::EntrySkelBuilder::default().open(storage).expect("opening the entry object (no kernel needed)")
    }

    #[test]
    fn declared_maps_are_pinned_by_name_and_a_stale_declaration_is_refused() {
        let mut o = open();
        pin_maps::<Stages>(o.open_object_mut(), Path::new("/sys/fs/bpf/xnf-test")).unwrap();
        use libbpf_rs::AsRawLibbpf;
        // SAFETY: a valid map of an open object; libbpf returns its own string.
        let pin = unsafe { std::ffi::CStr::from_ptr(libbpf_sys::bpf_map__pin_path(o.maps.xnf_stages.as_libbpf_object().as_ptr())) };
        assert_eq!(pin.to_str().unwrap(), "/sys/fs/bpf/xnf-test/xnf_stages");
        let mut o = open();
        let err = pin_maps::<Stale>(o.open_object_mut(), Path::new("/sys/fs/bpf/xnf-test")).unwrap_err().to_string();
        assert_eq!(err, "the program has no map named xnf_gone: its declaration of shared maps is out of date");
        assert_eq!(<Stale as crate::lifecycle::PinnedMaps>::NAMES, ["xnf_stages", "xnf_gone"]);
    }
}
