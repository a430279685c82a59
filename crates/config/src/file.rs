//! The box file: one section per network function, each checked by that
//! function's own checker, every error collected (file, line, field), none
//! of it touching the system.
//!
//! ```toml
//! [router]                 # xnf router attach
//! interfaces = ["eth0", "eth1"]
//! fib = "cache"            # cache | full | direct
//!
//! [filter]                 # xnf filter attach + apply
//! interfaces = ["eth0"]
//! rules_file = "/etc/xnf/filter.toml"   # or the rule file pasted as [filter.rules]
//!
//! [lb]                     # xnf lb attach + apply
//! interfaces = ["eth1"]
//! [[lb.services.service]]  # the service file pasted (or services_file = PATH)
//! name = "web"
//!
//! [decap]                  # xnf lb decap attach
//! interfaces = ["eth2"]
//!
//! [[nf]]                   # xnf apply's chain file, as it is
//! [[chain]]
//!
//! [[afxdp]]                # xnf afxdp run, under xnf daemon (crate::afxdp)
//! name = "echo7"
//! ```
//!
//! A section left out is a network function that does not run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use xnf_core::xdp::XdpMode;
use xnf_router::AttachOptions;

use crate::text;

/// Where a network function's own file comes from: its text as its
/// checker reads it, the name errors give, the folder its paths are in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    pub text: String,
    pub origin: String,
    pub base: PathBuf,
}

/// Where a stage network function runs and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deploy<O> {
    pub interfaces: Vec<String>,
    pub mode: XdpMode,
    pub opts: O,
}

/// A checked box file: what the box runs.
#[derive(Clone, Debug, Default)]
pub struct BoxConfig {
    pub router: Option<Deploy<AttachOptions>>,
    pub filter: Option<(Deploy<()>, Content)>,
    pub lb: Option<(Deploy<()>, Content)>,
    /// The GUE port is decap's option.
    pub decap: Option<Deploy<u16>>,
    pub chains: xnf_chain::ChainFile,
    /// `xnf daemon`'s own settings (no network function).
    pub daemon: DaemonSettings,
    /// AF_XDP applications: processes `xnf daemon` supervises.
    pub afxdp: Vec<crate::afxdp::App>,
}

/// Where `xnf daemon` serves `/metrics`, `/healthz` and `/readyz`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9460";

/// `[daemon]`: the daemon's own settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonSettings {
    pub listen: std::net::SocketAddr,
}

impl Default for DaemonSettings {
    fn default() -> Self {
        DaemonSettings { listen: DEFAULT_LISTEN.parse().expect("the default address") }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    listen: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouter {
    interfaces: Vec<String>,
    mode: Option<String>,
    fib: Option<String>,
    byte_counters: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    interfaces: Vec<String>,
    mode: Option<String>,
    /// The filter's rule file, by path.
    rules_file: Option<String>,
    /// The lb's service file, by path.
    services_file: Option<String>,
    /// decap's GUE port.
    gue_port: Option<u16>,
}

/// The top-level tables a box file may have.
const SECTIONS: [&str; 8] = ["router", "filter", "lb", "decap", "nf", "chain", "daemon", "afxdp"];

/// Reads and checks the box file at `path`.
pub fn load(path: &Path) -> Result<BoxConfig, Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| vec![format!("reading {}: {e}", path.display())])?;
    parse(&text, &path.display().to_string(), path.parent().unwrap_or(Path::new("/")))
}

/// Checks a box file's text; every error, one line each. `base` is the
/// folder relative paths in it are in.
pub fn parse(text: &str, origin: &str, base: &Path) -> Result<BoxConfig, Vec<String>> {
    let doc: toml::Table = text.parse().map_err(|e| vec![text::toml_error(origin, text, &e)])?;
    let mut errors: Vec<String> = doc
        .keys()
        .filter(|k| !SECTIONS.contains(&k.as_str()))
        .map(|k| format!("{origin}: [{k}]: not a section of the box file (it has {})", SECTIONS.join(", ")))
        .collect();
    let mut cfg = BoxConfig::default();
    let mut keep = |r: Result<(), String>| {
        if let Err(e) = r {
            errors.push(e);
        }
    };
    keep(router(text, origin).map(|r| cfg.router = r));
    keep(stage(text, origin, base, "filter", "rules").map(|r| cfg.filter = r));
    keep(stage(text, origin, base, "lb", "services").map(|r| cfg.lb = r));
    keep(decap(text, origin).map(|r| cfg.decap = r));
    keep(chains(text, origin).map(|c| cfg.chains = c));
    keep(daemon(text, origin).map(|d| cfg.daemon = d));
    match crate::afxdp::parse(text, origin) {
        Ok(a) => cfg.afxdp = a,
        Err(e) => errors.extend(e),
    }
    // A function's checker names each fault on a line of its own.
    let mut keep_all = |r: anyhow::Result<()>| {
        if let Err(e) = r {
            errors.extend(format!("{e:#}").lines().map(String::from));
        }
    };
    if let Some((_, c)) = &cfg.filter {
        keep_all(check_rules(c));
    }
    if let Some((_, c)) = &cfg.lb {
        keep_all(xnf_lb::Config::parse(&c.text, &c.origin).map(drop));
    }
    errors.extend(conflicts(&cfg, origin));
    if errors.is_empty() {
        Ok(cfg)
    } else {
        Err(errors)
    }
}

/// Table `name` alone, deserialized; None when the file has no such table.
fn section<T: for<'de> Deserialize<'de>>(text: &str, origin: &str, name: &str) -> Result<Option<T>, String> {
    let Some(t) = text::table(text, name) else { return Ok(None) };
    let mut doc: BTreeMap<String, T> = toml::from_str(&t).map_err(|e| format!("{} [{name}]", text::toml_error(origin, &t, &e)))?;
    Ok(doc.remove(name))
}

fn mode(origin: &str, name: &str, m: Option<&str>) -> Result<XdpMode, String> {
    match m {
        None | Some("native") => Ok(XdpMode::Native),
        Some("skb") => Ok(XdpMode::Skb),
        Some(o) => Err(format!("{origin}: [{name}] mode: {o:?} is not native or skb")),
    }
}

fn interfaces(origin: &str, name: &str, list: Vec<String>) -> Result<Vec<String>, String> {
    let mut seen = std::collections::BTreeSet::new();
    for i in &list {
        if i.is_empty() || i.len() > 15 || i.contains(['/', ' ']) {
            return Err(format!("{origin}: [{name}] interfaces: {i:?} is not an interface name"));
        }
        if !seen.insert(i) {
            return Err(format!("{origin}: [{name}] interfaces: {i} is named twice"));
        }
    }
    Ok(list)
}

fn router(text: &str, origin: &str) -> Result<Option<Deploy<AttachOptions>>, String> {
    let Some(r) = section::<RawRouter>(text, origin, "router")? else { return Ok(None) };
    let fib = match r.fib.as_deref() {
        None => xnf_router::program::FibMode::default(),
        Some(f) => clap::ValueEnum::from_str(f, true).map_err(|_| format!("{origin}: [router] fib: {f:?} is not cache, full or direct"))?,
    };
    let mode = mode(origin, "router", r.mode.as_deref())?;
    let opts = AttachOptions { mode, fib, no_bytes: !r.byte_counters.unwrap_or(true) };
    Ok(Some(Deploy { interfaces: interfaces(origin, "router", r.interfaces)?, mode, opts }))
}

/// The filter's or the lb's section: where it runs, and its own file, by
/// path (`<what>_file`) or pasted under `[<name>.<what>]`.
fn stage(text: &str, origin: &str, base: &Path, name: &str, what: &str) -> Result<Option<(Deploy<()>, Content)>, String> {
    let Some(r) = section::<RawStage>(text, origin, name)? else {
        return match text::nested(text, &format!("{name}.{what}")) {
            Some(_) => Err(format!("{origin}: [{name}.{what}] without [{name}]: say where it runs (interfaces = [...])")),
            None => Ok(None),
        };
    };
    if r.gue_port.is_some() || (name == "filter" && r.services_file.is_some()) || (name == "lb" && r.rules_file.is_some()) {
        return Err(format!("{origin}: [{name}]: only interfaces, mode and {what}_file belong here"));
    }
    let by_path = if name == "filter" { r.rules_file } else { r.services_file };
    let pasted = text::nested(text, &format!("{name}.{what}"));
    let content = match (by_path, pasted) {
        (Some(_), Some(_)) => return Err(format!("{origin}: [{name}]: {what}_file and [{name}.{what}] both: give one")),
        (Some(p), None) => {
            let path = base.join(&p);
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{origin}: [{name}] {what}_file: reading {}: {e}", path.display()))?;
            Content { text, origin: path.display().to_string(), base: path.parent().unwrap_or(base).to_path_buf() }
        }
        (None, Some(t)) => Content { text: t, origin: origin.to_string(), base: base.to_path_buf() },
        (None, None) => Content { text: String::new(), origin: format!("{origin} [{name}]"), base: base.to_path_buf() },
    };
    let mode = mode(origin, name, r.mode.as_deref())?;
    Ok(Some((Deploy { interfaces: interfaces(origin, name, r.interfaces)?, mode, opts: () }, content)))
}

fn decap(text: &str, origin: &str) -> Result<Option<Deploy<u16>>, String> {
    let Some(r) = section::<RawStage>(text, origin, "decap")? else { return Ok(None) };
    if r.rules_file.is_some() || r.services_file.is_some() {
        return Err(format!("{origin}: [decap]: only interfaces, mode and gue_port belong here"));
    }
    let mode = mode(origin, "decap", r.mode.as_deref())?;
    let port = r.gue_port.unwrap_or(xnf_lb::config::DEFAULT_GUE_PORT);
    Ok(Some(Deploy { interfaces: interfaces(origin, "decap", r.interfaces)?, mode, opts: port }))
}

fn chains(text: &str, origin: &str) -> Result<xnf_chain::ChainFile, String> {
    let Some(t) = text::extract(text, |t| matches!(t.split('.').next(), Some("nf" | "chain")).then(|| t.to_string())) else {
        return Ok(xnf_chain::ChainFile::default());
    };
    xnf_chain::ChainFile::parse(&t, origin).map_err(|e| format!("{e:#}"))
}

fn daemon(text: &str, origin: &str) -> Result<DaemonSettings, String> {
    let Some(d) = section::<RawDaemon>(text, origin, "daemon")? else { return Ok(DaemonSettings::default()) };
    let listen = d.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let listen = listen.parse().map_err(|_| format!("{origin}: [daemon] listen: {listen:?} is not an address and port (e.g. 127.0.0.1:9460)"))?;
    Ok(DaemonSettings { listen })
}

/// The filter's rules and every list they name, read as an apply would.
fn check_rules(c: &Content) -> anyhow::Result<()> {
    let rs = xnf_filter::rules::RuleSet::parse(&c.text, &c.origin)?;
    for (name, p) in &rs.lists {
        let path = c.base.join(p);
        xnf_filter::prefixes::PrefixList::load(&path).map_err(|e| anyhow::anyhow!("{}: [lists] {name}: {e:#}", c.origin))?;
    }
    Ok(())
}

/// What sections ask of one interface that cannot be: two functions in one
/// stage, or two XDP modes.
fn conflicts(cfg: &BoxConfig, origin: &str) -> Vec<String> {
    // (interface, function, stage, mode) of every section.
    let mut uses: BTreeMap<&str, Vec<(&str, &str, XdpMode)>> = BTreeMap::new();
    type Section<'a> = (&'a str, &'a str, Option<(&'a Vec<String>, XdpMode)>);
    let sections: [Section; 4] = [
        ("router", "forward", cfg.router.as_ref().map(|d| (&d.interfaces, d.mode))),
        ("filter", "filter", cfg.filter.as_ref().map(|(d, _)| (&d.interfaces, d.mode))),
        ("lb", "lb", cfg.lb.as_ref().map(|(d, _)| (&d.interfaces, d.mode))),
        ("decap", "lb", cfg.decap.as_ref().map(|d| (&d.interfaces, d.mode))),
    ];
    for (name, stage, d) in sections {
        let Some((ifaces, mode)) = d else { continue };
        for i in ifaces {
            uses.entry(i.as_str()).or_default().push((name, stage, mode));
        }
    }
    let mut errors = Vec::new();
    let ingresses: Vec<&str> = cfg.chains.chain.iter().map(|c| c.ingress.as_str()).collect();
    for (iface, u) in &uses {
        for (i, a) in u.iter().enumerate() {
            for b in &u[i + 1..] {
                if a.1 == b.1 {
                    errors.push(format!("{origin}: {iface}: [{}] and [{}] both want its {} stage: one network function per stage", a.0, b.0, a.1));
                }
                if a.2 != b.2 {
                    errors.push(format!("{origin}: {iface}: [{}] and [{}] ask for different XDP modes: every function on one interface shares it", a.0, b.0));
                }
            }
        }
        if u.iter().any(|x| x.1 == "forward") && ingresses.contains(iface) {
            errors.push(format!("{origin}: {iface}: [router] and a [[chain]] ingress both want its forward stage: one network function per stage"));
        }
    }
    // An AF_XDP application's selector owns its interface's XDP hook.
    let why = "an [[afxdp]] application's selector owns the interface's XDP hook";
    for (i, a) in cfg.afxdp.iter().enumerate() {
        let mut others: Vec<String> = uses.get(a.interface.as_str()).into_iter().flatten().map(|u| format!("[{}]'s", u.0)).collect();
        for c in &cfg.chains.chain {
            if c.ingress == a.interface {
                others.push(format!("chain {}'s ingress", c.name));
            }
            if c.egress.contains(&a.interface) {
                others.push(format!("chain {}'s egress", c.name));
            }
        }
        if let Some(b) = cfg.afxdp[..i].iter().find(|b| b.interface == a.interface) {
            others.push(format!("[[afxdp]] {}'s (line {})", b.name, b.line));
        }
        for o in others {
            errors.push(format!("{origin}: line {}: [[afxdp]] {}: interface: {} is {o} too: {why}", a.line, a.name, a.interface));
        }
    }
    errors
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
