//! Where a stage network function runs — interfaces, mode, options — read
//! from the system, compared with the file and converged, the same way for
//! the router, the filter, the lb and decap: through the one lifecycle
//! ([`xnf_core::lifecycle`]).

use std::collections::BTreeMap;

use anyhow::Result;
use xnf_core::lifecycle::{Lifecycle, StageNf};
use xnf_core::xdp::XdpMode;

use crate::file::Deploy;
use crate::undo::Undo;

/// Options as a diff line names them.
pub trait Describe {
    fn describe(&self) -> String;
}

impl Describe for () {
    fn describe(&self) -> String {
        String::new()
    }
}

impl Describe for u16 {
    fn describe(&self) -> String {
        if *self == 0 {
            "no GUE".into()
        } else {
            format!("GUE port {self}")
        }
    }
}

impl Describe for xnf_router::AttachOptions {
    fn describe(&self) -> String {
        format!("fib {}{}", self.fib.name(), if self.no_bytes { ", no byte counters" } else { "" })
    }
}

/// A mode and options as diff and show say them ("native, fib cache").
fn how<O: Describe>(m: &XdpMode, o: &O) -> String {
    [m.name().to_string(), o.describe()].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join(", ")
}

/// Interface → (mode, options) where `N` runs.
pub type Placement<O> = BTreeMap<String, (XdpMode, O)>;

/// Where `N` runs now.
pub fn running<N: StageNf>() -> Result<Placement<N::Options>> {
    let mut out = Placement::new();
    for a in Lifecycle::<N>::status()? {
        if let Some(o) = Lifecycle::<N>::options_of(a.ifindex)? {
            out.insert(a.name, (a.mode, o));
        }
    }
    Ok(out)
}

/// Where the file says `N` runs.
pub fn wanted<O: Clone>(d: Option<&Deploy<O>>) -> Placement<O> {
    d.map(|d| d.interfaces.iter().map(|i| (i.clone(), (d.mode, d.opts.clone()))).collect()).unwrap_or_default()
}

/// The file's placement as a section: one mode and options for all, when
/// the running interfaces share them (else those of the first), and one
/// comment line for each interface that runs with others (attached by
/// hand): a section cannot say them, and an apply of it gives that
/// interface the section's.
pub fn as_deploy<O: Clone + PartialEq + Describe>(p: &Placement<O>) -> Option<(Deploy<O>, String)> {
    let (_, (mode, opts)) = p.iter().next()?;
    let notes = p
        .iter()
        .filter(|(_, (m, o))| m != mode || o != opts)
        .map(|(i, (m, o))| format!("# {i} runs {}: one section has one mode and options, and an apply of it gives {i} these\n", how(m, o)))
        .collect();
    Some((Deploy { interfaces: p.keys().cloned().collect(), mode: *mode, opts: opts.clone() }, notes))
}

/// What going from `now` to `want` does, one line each (`name: ...`).
pub fn changes<O: PartialEq + Describe>(name: &str, now: &Placement<O>, want: &Placement<O>) -> Vec<String> {
    let mut out = Vec::new();
    for (i, (m, o)) in want {
        match now.get(i) {
            None => out.push(format!("{name}: attach {i} ({})", how(m, o))),
            Some((nm, no)) if nm != m || no != o => out.push(format!("{name}: {i}: {} -> {}", how(nm, no), how(m, o))),
            Some(_) => {}
        }
    }
    out.extend(now.keys().filter(|i| !want.contains_key(*i)).map(|i| format!("{name}: detach {i}")));
    out
}

/// Attaches `N` where `want` has it and `now` does not, and replaces the
/// instance where the options differ (a new mode: attached again in it,
/// state kept): the additions of an apply. Each step's undo goes to `undo`.
pub fn add<N: StageNf>(now: &Placement<N::Options>, want: &Placement<N::Options>, undo: &mut Undo) -> Result<()> {
    for (i, (m, o)) in want {
        match now.get(i) {
            Some((nm, no)) if nm == m && no == o => continue,
            Some((nm, no)) if nm != m => {
                Lifecycle::<N>::remode(i, *m, o)?;
                undo.push(reattach::<N>(i, *nm, no.clone()));
                continue;
            }
            Some((nm, no)) => {
                Lifecycle::<N>::attach(std::slice::from_ref(i), *m, o)?;
                undo.push(reattach::<N>(i, *nm, no.clone()));
                continue;
            }
            None => {}
        }
        Lifecycle::<N>::attach(std::slice::from_ref(i), *m, o)?;
        let name = i.clone();
        undo.push(Box::new(move || Lifecycle::<N>::detach(&[name])));
    }
    Ok(())
}

/// Detaches `N` where `now` has it and `want` does not: the removals of an
/// apply, after every addition worked.
pub fn remove<N: StageNf>(now: &Placement<N::Options>, want: &Placement<N::Options>, undo: &mut Undo) -> Result<()> {
    for (i, (m, o)) in now {
        if !want.contains_key(i) {
            Lifecycle::<N>::detach(std::slice::from_ref(i))?;
            undo.push(reattach::<N>(i, *m, o.clone()));
        }
    }
    Ok(())
}

/// An undo that puts `N` back on `iface` as it was (moved back to its
/// mode, state kept, when it runs there in another).
fn reattach<N: StageNf>(iface: &str, mode: XdpMode, opts: N::Options) -> Box<dyn FnOnce() -> Result<()>> {
    let iface = iface.to_string();
    Box::new(move || {
        let names = [iface];
        if let Some(idx) = xnf_netns::netlink::links()?.iter().find(|l| l.name == names[0]).map(|l| l.ifindex) {
            let same_mode = xnf_core::entry::info(idx).is_none_or(|i| i.mode == mode);
            if Lifecycle::<N>::stage_prog(idx).is_some() && !same_mode {
                return Lifecycle::<N>::remode(&names[0], mode, &opts);
            }
            if Lifecycle::<N>::options_of(idx)?.as_ref() == Some(&opts) {
                return Ok(());
            }
        }
        Lifecycle::<N>::attach(&names, mode, &opts).map(drop)
    })
}
