//! `xnf filter apply`: converging the filter to a rule file, whole or not
//! at all, and the confirm-or-roll-back safety net.
//!
//! An apply reads and checks the file and every list it names, fills new
//! list slots for lists that changed (a list whose content is unchanged
//! keeps its slot), switches the rule set in one update, and only then
//! empties the slots nothing refers to any more. With `--confirm-within`,
//! the previous rules and their list slots stay as they were, a detached
//! `xnf filter rollback --after SECS` waits, and unless `xnf filter
//! confirm` comes first it switches back. Any later filter command that
//! finds the deadline passed rolls back first (the waiting process may
//! have been killed).
//!
//! Run files, in `/run/xnf/<netns>/filter/`: `applied.json` (the live
//! file's text, where it came from, its lists' slots and digests) and
//! `pending.json` (the change awaiting confirmation and what it replaced).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use xnf_core::state;

use crate::attach::{lock, maps_or_create};
use crate::compile::{rule_set, slots_used};
pub use crate::compile::{Applied, AppliedList};
use crate::prefixes::PrefixList;
use crate::program::{FilterMaps, MAX_LISTS};
use crate::rules::RuleSet;
use crate::synproxy;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Pending {
    /// What the change replaced (None: no rules before it).
    previous: Option<Applied>,
    /// Seconds since the epoch after which it is rolled back.
    deadline: u64,
}

/// What an apply did, for the caller to print.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    Applied { rules: usize, lists_loaded: Vec<String> },
}

fn run_dir() -> Result<PathBuf> {
    crate::attach::run_dir()
}

fn read_json<T: for<'de> Deserialize<'de>>(name: &str) -> Result<Option<T>> {
    state::read_json(&run_dir()?, name)
}

fn write_json<T: Serialize>(name: &str, v: &T) -> Result<()> {
    state::write_json(&run_dir()?, name, v)
}

fn remove_json(name: &str) -> Result<()> {
    match std::fs::remove_file(run_dir()?.join(name)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// The live rules, if any were applied.
pub fn applied() -> Result<Option<Applied>> {
    read_json("applied.json")
}

/// Seconds left before a pending change is rolled back, if one is.
pub fn pending_seconds() -> Result<Option<u64>> {
    Ok(read_json::<Pending>("pending.json")?.map(|p| p.deadline.saturating_sub(now())))
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A digest of a list's content: an apply reloads a list whose digest
/// changed, and keeps the slot of one whose did not.
pub fn list_digest(list: &PrefixList) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    list.v4.hash(&mut h);
    list.v6.hash(&mut h);
    h.finish()
}

/// A list path as the file gives it, relative to the file's folder.
fn list_path(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// Applies the rule file at `path`.
pub fn apply_file(path: &Path, confirm_within: Option<Duration>) -> Result<Outcome> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    apply(&text, &path.display().to_string(), &base, confirm_within)
}

/// Applies a rule file's text (`origin` names it in messages; list paths
/// are absolute).
pub fn apply_text(text: &str, origin: &str) -> Result<Outcome> {
    apply(text, origin, Path::new("/"), None)
}

/// Applies a rule file's text whose list paths are relative to `base`,
/// as a pending change with `confirm_within` (see the module's doc).
pub fn apply_text_in(text: &str, origin: &str, base: &Path, confirm_within: Option<Duration>) -> Result<Outcome> {
    apply(text, origin, base, confirm_within)
}

fn apply(text: &str, origin: &str, base: &Path, confirm_within: Option<Duration>) -> Result<Outcome> {
    // Everything is read and checked before anything changes.
    let rs = RuleSet::parse(text, origin)?;
    let mut lists = BTreeMap::new();
    for (name, p) in &rs.lists {
        let path = list_path(base, p);
        let list = PrefixList::load(&path).with_context(|| format!("{origin}: [lists]: {name}"))?;
        lists.insert(name.clone(), (path, list));
    }
    let _lock = lock()?;
    roll_back_if_overdue()?;
    if let Some(s) = pending_seconds()? {
        bail!("a change awaits confirmation ({s} s left): `xnf filter confirm` it, or `xnf filter rollback`, first");
    }
    let maps = maps_or_create()?;
    let current = applied()?;
    let live = maps.rules()?;

    // Slots: unchanged lists keep theirs, the others get free ones.
    let mut busy: Vec<u32> = live.as_ref().map(slots_used).unwrap_or_default();
    busy.extend(current.iter().flat_map(|a| a.lists.values().map(|l| l.slot)));
    let mut new_lists = BTreeMap::new();
    let mut to_fill = Vec::new();
    for (name, (path, list)) in &lists {
        let d = list_digest(list);
        let keep = current.as_ref().and_then(|a| a.lists.get(name)).filter(|l| l.digest == d && maps.list_ready(l.slot, list.v4.len()));
        let slot = match keep {
            Some(l) => l.slot,
            None => {
                // Free slots never run out: a file names at most half of them.
                let s = (0..MAX_LISTS).find(|s| !busy.contains(s)).context("no free list slot")?;
                busy.push(s);
                to_fill.push((name.clone(), s));
                s
            }
        };
        new_lists.insert(name.clone(), AppliedList { slot, digest: d, entries: list.len(), path: path.display().to_string() });
    }
    let slots: BTreeMap<String, u32> = new_lists.iter().map(|(n, l)| (n.clone(), l.slot)).collect();
    let set = rule_set(&rs, &slots).with_context(|| origin.to_string())?;
    let next = Applied { origin: origin.to_string(), text: text.to_string(), lists: new_lists };
    if to_fill.is_empty() && live.as_ref().is_some_and(|l| l.same(&set)) {
        // The kernel's side is put right even so (a flushed ruleset).
        synproxy::converge(&rs)?;
        if current.as_ref() != Some(&next) {
            write_json("applied.json", &next)?;
        }
        return Ok(Outcome::Unchanged);
    }
    // SYNPROXY before rules that send it cookie ACKs (synproxy.rs).
    let old = current.as_ref().and_then(|a| RuleSet::parse(&a.text, &a.origin).ok());
    if synproxy::wanted(&rs) {
        if let Err(e) = synproxy::converge(&rs) {
            restore_synproxy(old.as_ref());
            return Err(e);
        }
    }

    for (i, (name, slot)) in to_fill.iter().enumerate() {
        let nets = lists[name].1.nets();
        if let Err(e) = maps.set_list(*slot, &nets) {
            for (_, s) in &to_fill[..=i] {
                let _ = maps.clear_list(*s);
            }
            restore_synproxy(old.as_ref());
            return Err(e.context(format!("{origin}: [lists]: {name}")));
        }
    }
    if let Err(e) = maps.set_rules(&set) {
        for (_, s) in &to_fill {
            let _ = maps.clear_list(*s);
        }
        restore_synproxy(old.as_ref());
        return Err(e);
    }
    reset_changed_counters(&maps, old.as_ref(), &rs)?;
    write_json("applied.json", &next)?;
    if !synproxy::wanted(&rs) {
        synproxy::converge(&rs)?;
    }
    match confirm_within {
        Some(d) => {
            write_json("pending.json", &Pending { previous: current, deadline: now() + d.as_secs().max(1) })?;
        }
        None => clear_unused_slots(&maps, &next)?,
    }
    Ok(Outcome::Applied { rules: rs.rules.len(), lists_loaded: to_fill.into_iter().map(|(n, _)| n).collect() })
}

/// Puts the kernel's side back as the live rules need it, after a failed
/// apply (best effort: the apply's own error is the one to report).
fn restore_synproxy(live: Option<&RuleSet>) {
    if let Err(e) = live.map_or_else(synproxy::remove, synproxy::converge) {
        eprintln!("xnf: putting the SYNPROXY table back: {e:#}");
    }
}

/// Zeroes the counters of rules that are not what they were at their
/// index (a list reload keeps them: the rule is the same, its list grew).
fn reset_changed_counters(maps: &FilterMaps, old: Option<&RuleSet>, new: &RuleSet) -> Result<()> {
    let same = |a: &crate::rules::Rule, b: &crate::rules::Rule| crate::rules::Rule { line: 0, ..a.clone() } == crate::rules::Rule { line: 0, ..b.clone() };
    let changed = (0..new.rules.len()).filter(|&i| !old.and_then(|o| o.rules.get(i)).is_some_and(|o| same(o, &new.rules[i])));
    let default_changed = old.is_none_or(|o| o.default_drop != new.default_drop);
    maps.reset_rule_counters(changed.map(|i| i as u32).chain(default_changed.then_some(crate::program::RULE_DEFAULT)))
}

/// Empties the list slots the live rules do not name.
fn clear_unused_slots(maps: &FilterMaps, live: &Applied) -> Result<()> {
    let keep: Vec<u32> = live.lists.values().map(|l| l.slot).collect();
    for s in (0..MAX_LISTS).filter(|s| !keep.contains(s)) {
        maps.clear_list(s)?;
    }
    Ok(())
}

/// Keeps the pending change: the previous rules' lists are let go.
pub fn confirm() -> Result<()> {
    let _lock = lock()?;
    roll_back_if_overdue()?;
    if read_json::<Pending>("pending.json")?.is_none() {
        bail!("no change awaits confirmation (`xnf filter status`)");
    }
    let maps = crate::attach::open_maps()?;
    if let Some(a) = applied()? {
        clear_unused_slots(&maps, &a)?;
    }
    remove_json("pending.json")
}

/// Switches back to the rules a pending change replaced. Returns false
/// when no change was pending.
pub fn rollback() -> Result<bool> {
    let _lock = lock()?;
    roll_back_locked()
}

fn roll_back_locked() -> Result<bool> {
    let Some(p) = read_json::<Pending>("pending.json")? else { return Ok(false) };
    let maps = crate::attach::open_maps()?;
    match &p.previous {
        Some(prev) => {
            let rs = RuleSet::parse(&prev.text, &prev.origin)?;
            let slots = prev.lists.iter().map(|(n, l)| (n.clone(), l.slot)).collect();
            let set = rule_set(&rs, &slots)?;
            if synproxy::wanted(&rs) {
                synproxy::converge(&rs)?;
            }
            maps.set_rules(&set)?;
            if !synproxy::wanted(&rs) {
                synproxy::converge(&rs)?;
            }
            let now = applied()?.and_then(|a| RuleSet::parse(&a.text, &a.origin).ok());
            reset_changed_counters(&maps, now.as_ref(), &rs)?;
            write_json("applied.json", prev)?;
            clear_unused_slots(&maps, prev)?;
        }
        None => {
            maps.clear_rules()?;
            synproxy::remove()?;
            remove_json("applied.json")?;
            clear_unused_slots(&maps, &Applied { origin: String::new(), text: String::new(), lists: BTreeMap::new() })?;
        }
    }
    remove_json("pending.json")?;
    Ok(true)
}

/// Rolls back a pending change whose deadline has passed (its waiting
/// process may have been killed). Called with the lock held.
fn roll_back_if_overdue() -> Result<()> {
    if let Some(p) = read_json::<Pending>("pending.json")? {
        if now() >= p.deadline && roll_back_locked()? {
            eprintln!("xnf: a change was not confirmed in time and has been rolled back");
        }
    }
    Ok(())
}

/// `xnf filter rollback --after SECS`: waits, then rolls back the pending
/// change unless it was confirmed (or replaced) meanwhile.
pub fn rollback_after(secs: u64) -> Result<bool> {
    let deadline = read_json::<Pending>("pending.json")?.map(|p| p.deadline);
    std::thread::sleep(Duration::from_secs(secs));
    let _lock = lock()?;
    match read_json::<Pending>("pending.json")? {
        Some(p) if Some(p.deadline) == deadline => roll_back_locked(),
        _ => Ok(false),
    }
}
