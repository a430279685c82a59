//! What the box runs now, read from the system, and how it differs from a
//! file: the basis of `xnf show` and `xnf diff`, and what an apply compares
//! before it changes anything.

use std::fmt::Write as _;

use anyhow::Result;
use xnf_core::lifecycle::Lifecycle;
use xnf_filter::Filter;
use xnf_lb::{Decap, Lb};
use xnf_router::{AttachOptions, Router};

use crate::file::{BoxConfig, Content};
use crate::stage::{self, Placement};
use crate::text;

/// What runs now.
pub struct Running {
    pub router: Placement<AttachOptions>,
    pub filter: Placement<()>,
    pub filter_rules: Option<xnf_filter::Applied>,
    pub lb: Placement<()>,
    pub lb_services: Option<xnf_lb::Applied>,
    pub decap: Placement<u16>,
    pub chains: xnf_chain::ChainFile,
    /// The AF_XDP applications `xnf daemon` supervises, as it records them.
    pub afxdp: Vec<crate::afxdp::Record>,
}

impl Running {
    pub fn read() -> Result<Running> {
        Ok(Running {
            router: stage::running::<Router>()?,
            filter: stage::running::<Filter>()?,
            filter_rules: if Lifecycle::<Filter>::maps()?.is_some() { xnf_filter::applied()? } else { None },
            lb: stage::running::<Lb>()?,
            lb_services: if Lifecycle::<Lb>::maps()?.is_some() { xnf_lb::applied()? } else { None },
            decap: stage::running::<Decap>()?,
            chains: xnf_chain::running()?,
            afxdp: crate::afxdp::records()?,
        })
    }

    /// As a box file that `xnf apply` converges to without a change.
    pub fn show(&self) -> Result<String> {
        let mut out = String::new();
        let list = |v: Vec<String>| format!("[{}]", v.iter().map(|i| format!("{i:?}")).collect::<Vec<_>>().join(", "));
        if let Some((d, notes)) = stage::as_deploy(&self.router) {
            out.push_str(&notes);
            let _ = write!(out, "[router]\ninterfaces = {}\nmode = \"{}\"\nfib = \"{}\"\n", list(d.interfaces), d.mode.name(), d.opts.fib.name());
            let _ = writeln!(out, "byte_counters = {}\n", !d.opts.no_bytes);
        }
        if let Some((d, notes)) = stage::as_deploy(&self.filter) {
            out.push_str(&notes);
            let _ = writeln!(out, "[filter]\ninterfaces = {}\nmode = \"{}\"\n", list(d.interfaces), d.mode.name());
            if let Some(a) = &self.filter_rules {
                out.push_str(&text::nest(&rules_with_lists(a)?, "filter.rules"));
                out.push('\n');
            }
        }
        if let Some((d, notes)) = stage::as_deploy(&self.lb) {
            out.push_str(&notes);
            let _ = writeln!(out, "[lb]\ninterfaces = {}\nmode = \"{}\"\n", list(d.interfaces), d.mode.name());
            if let Some(a) = &self.lb_services {
                out.push_str(&text::nest(&a.text, "lb.services"));
                out.push('\n');
            }
        }
        if let Some((d, notes)) = stage::as_deploy(&self.decap) {
            out.push_str(&notes);
            let _ = writeln!(out, "[decap]\ninterfaces = {}\nmode = \"{}\"\ngue_port = {}\n", list(d.interfaces), d.mode.name(), d.opts);
        }
        if self.chains != xnf_chain::ChainFile::default() {
            out.push_str(&toml::to_string(&self.chains)?);
        }
        if !self.afxdp.is_empty() {
            if !out.is_empty() && !out.ends_with("\n\n") {
                out.push('\n');
            }
            out.push_str(&crate::afxdp::show(&self.afxdp)?);
        }
        Ok(out)
    }

    /// What runs, one line per function (`xnf status`).
    pub fn summary(&self) -> Vec<String> {
        fn placed<O: stage::Describe>(p: &Placement<O>) -> String {
            let v: Vec<String> = p
                .iter()
                .map(|(i, (m, o))| {
                    let how = [m.name().to_string(), o.describe()].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join(", ");
                    format!("{i} ({how})")
                })
                .collect();
            if v.is_empty() {
                "not running".into()
            } else {
                v.join(", ")
            }
        }
        let mut out = vec![format!("router: {}", placed(&self.router))];
        let rules = self.filter_rules.as_ref().and_then(|a| xnf_filter::rules::RuleSet::parse(&a.text, &a.origin).ok()).map(|r| r.rules.len());
        out.push(format!("filter: {}{}", placed(&self.filter), rules.map(|n| format!("; {n} rules")).unwrap_or_default()));
        let services: Vec<String> = self.lb_services.iter().flat_map(|a| a.config.services.iter().map(|s| s.name.clone())).collect();
        let services = if services.is_empty() { String::new() } else { format!("; services {}", services.join(", ")) };
        out.push(format!("lb: {}{services}", placed(&self.lb)));
        out.push(format!("decap: {}", placed(&self.decap)));
        let chains: Vec<String> = self.chains.chain.iter().map(|c| format!("{} ({} -> {})", c.name, c.ingress, c.nfs.join(" -> "))).collect();
        out.push(format!("chains: {}", if chains.is_empty() { "none".to_string() } else { chains.join(", ") }));
        out.push(crate::afxdp::summary(&self.afxdp));
        out
    }

    /// What `xnf daemon` does to its AF_XDP applications for `want`, one
    /// line each (`xnf diff`, `status`; not an apply's own changes).
    pub fn afxdp_changes(&self, want: &BoxConfig) -> Vec<String> {
        crate::afxdp::changes(&self.afxdp, &want.afxdp)
    }

    /// What converging to `want` changes, one line each; nothing changes.
    pub fn diff(&self, want: &BoxConfig) -> Result<Vec<String>> {
        let mut out = stage::changes("filter", &self.filter, &stage::wanted(want.filter.as_ref().map(|(d, _)| d)));
        if let Some((_, c)) = &want.filter {
            out.extend(filter_rules_change(self.filter_rules.as_ref(), c)?);
        }
        out.extend(stage::changes("lb", &self.lb, &stage::wanted(want.lb.as_ref().map(|(d, _)| d))));
        if let Some((_, c)) = &want.lb {
            out.extend(lb_services_change(self.lb_services.as_ref(), c)?);
        }
        out.extend(stage::changes("decap", &self.decap, &stage::wanted(want.decap.as_ref())));
        out.extend(xnf_chain::changes(&want.chains)?);
        out.extend(stage::changes("router", &self.router, &stage::wanted(want.router.as_ref())));
        Ok(out)
    }
}

/// The applied rule file with each list's path as the filter resolved it
/// (a relative path meant the folder of the file it came from).
fn rules_with_lists(a: &xnf_filter::Applied) -> Result<String> {
    if a.lists.is_empty() {
        return Ok(a.text.clone());
    }
    let mut t: toml::Table = a.text.parse()?;
    if let Some(toml::Value::Table(lists)) = t.get_mut("lists") {
        for (name, l) in &a.lists {
            lists.insert(name.clone(), toml::Value::String(l.path.clone()));
        }
    }
    Ok(toml::to_string(&t)?)
}

/// The rules as compared: without the lines they stand on.
fn unlined(mut rs: xnf_filter::rules::RuleSet) -> xnf_filter::rules::RuleSet {
    rs.rules.iter_mut().for_each(|r| r.line = 0);
    rs
}

/// "filter: rules ..." when the file's rules or lists differ from the live ones.
fn filter_rules_change(live: Option<&xnf_filter::Applied>, want: &Content) -> Result<Option<String>> {
    let new = unlined(xnf_filter::rules::RuleSet::parse(&want.text, &want.origin)?);
    let Some(live) = live else {
        return Ok(Some(format!("filter: rules: {} rules, default {}", new.rules.len(), if new.default_drop { "drop" } else { "pass" })));
    };
    let old = unlined(xnf_filter::rules::RuleSet::parse(&live.text, &live.origin)?);
    let mut lists_changed = Vec::new();
    for (name, p) in &new.lists {
        let list = xnf_filter::prefixes::PrefixList::load(&want.base.join(p))?;
        if live.lists.get(name).is_none_or(|l| l.digest != xnf_filter::list_digest(&list)) {
            lists_changed.push(name.clone());
        }
    }
    let rules_changed = old.rules != new.rules || old.default_drop != new.default_drop;
    Ok(match (rules_changed, lists_changed.is_empty()) {
        (false, true) => None,
        (true, _) => Some(format!("filter: rules changed ({} rules)", new.rules.len())),
        (false, false) => Some(format!("filter: lists reloaded: {}", lists_changed.join(", "))),
    })
}

fn unlined_lb(mut c: xnf_lb::Config) -> xnf_lb::Config {
    for s in &mut c.services {
        s.line = 0;
        s.backends.iter_mut().for_each(|b| b.line = 0);
    }
    c
}

/// "lb: service ..." for each service the file adds, removes or changes,
/// with the share of flows that move.
fn lb_services_change(live: Option<&xnf_lb::Applied>, want: &Content) -> Result<Vec<String>> {
    let (new, _) = xnf_lb::Config::parse(&want.text, &want.origin)?;
    let old = live.map(|a| a.config.clone()).unwrap_or_default();
    if unlined_lb(old.clone()) == unlined_lb(new.clone()) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    if old.encap != new.encap {
        out.push("lb: encap changed".to_string());
    }
    for p in xnf_lb::plan(&old, &new)? {
        let what = match p.change {
            xnf_lb::Change::Added => "added".to_string(),
            xnf_lb::Change::Removed => "removed".to_string(),
            xnf_lb::Change::Unchanged => continue,
            xnf_lb::Change::Changed => match &p.disruption {
                Some(d) => format!("changed, {:.1} % of flows to another backend", 100.0 * d.moved),
                None => "changed".to_string(),
            },
        };
        out.push(format!("lb: service {}: {what}", p.name));
    }
    Ok(out)
}
