//! The service file: what `xnf lb apply FILE` converges to.
//!
//! ```toml
//! [[service]]
//! name = "web"                      # letters, digits, - and _
//! vip = "198.18.0.10"               # IPv4 or IPv6
//! proto = "tcp"                     # tcp | udp
//! port = 80                         # omit for all ports
//! table_size = 65537                # optional: prime, default 65537
//! hash = "5-tuple"                  # or "3-tuple" (source, destination, protocol)
//! mode = "ipip"                     # ipip (default) | gue | dsr
//! # gue_port = 6080                 # gue only: the outer UDP port
//! # drain = true                    # no new flows to any backend, weights kept
//!
//! [[service.backend]]
//! address = "198.18.1.1"
//! weight = 1                        # 0-65535, default 1; 0 drains it
//! # mac = "02:00:00:00:00:01"       # dsr only; else the neighbour table's
//! ```
//!
//! Everything is checked before anything changes; an error is one line,
//! `FILE: line N: NAME: FIELD: why`, naming the `[[service]]` (or the
//! `[[service.backend]]`, named `SERVICE/ADDRESS`) it is about. What is
//! legal but unwise (a table too small for its backends, a service drained
//! whole) comes back as warnings in the same form.
//!
//! Rules the data plane relies on:
//! - a VIP, protocol and port belong to one service; a service without a
//!   port takes its VIP's other ports: **a port-specific service takes
//!   precedence** over an all-ports service of the same VIP and protocol;
//! - `ipip` carries IPv4 in IPv4 and IPv6 in IPv6, so its backends have the
//!   VIP's family; `gue` (UDP) and `dsr` (MAC rewrite) take either;
//! - at least one backend has a weight unless `drain = true`, which drains
//!   every backend at once and keeps the weights for when it is removed;
//! - a backend's address is its identity (its place in the Maglev table),
//!   so it appears once per service, and is no VIP of the file.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use anyhow::{anyhow, bail, ensure, Result};
use serde::{Deserialize, Serialize};
use xnf_packet::MacAddr;

use crate::maglev::{self, DEFAULT_TABLE_SIZE};

/// Most services a file may hold.
pub const MAX_SERVICES: usize = 256;
/// Most backends a service may have.
pub const MAX_BACKENDS: usize = 4096;
/// Most backends over all services (the data plane's backend records).
pub const MAX_TOTAL_BACKENDS: usize = 65536;
/// Most table entries over all services: 64 MiB of data-plane tables.
pub const MAX_TOTAL_ENTRIES: u64 = 16 << 20;
/// Longest service name.
pub const MAX_NAME_LEN: usize = 32;
/// Table entries per weighted backend below which a warning says that
/// shares may be off by more than about 1 % (the Maglev paper's advice).
pub const ENTRIES_PER_BACKEND: u64 = 100;
/// Outer UDP destination port of `gue` when the file names none.
pub const DEFAULT_GUE_PORT: u16 = 6080;

/// The transport protocol a service balances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }
}

/// What the data plane hashes to pick a flow's entry in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum HashFields {
    /// Addresses, protocol and ports: each connection on its own.
    #[serde(rename = "5-tuple")]
    FiveTuple,
    /// Addresses and protocol: every flow of a client to one backend, for
    /// UDP whose source port changes, or client affinity.
    #[serde(rename = "3-tuple")]
    ThreeTuple,
}

/// How packets reach a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// IP-in-IP: IPv4 in IPv4 (protocol 4), IPv6 in IPv6 (protocol 41).
    Ipip,
    /// IP in UDP (GUE) to this destination port, for networks that filter
    /// protocols 4 and 41; either family outside.
    Gue { port: u16 },
    /// Direct server return: the frame's destination MAC rewritten to a
    /// backend on the same segment that holds the VIP on its loopback.
    Dsr,
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(if *self == Proto::Tcp { "tcp" } else { "udp" })
    }
}

impl fmt::Display for HashFields {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(if *self == HashFields::FiveTuple { "5-tuple" } else { "3-tuple" })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Mode::Ipip => f.write_str("ipip"),
            Mode::Gue { port } => write!(f, "gue (port {port})"),
            Mode::Dsr => f.write_str("dsr"),
        }
    }
}

/// One checked backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Backend {
    pub address: IpAddr,
    /// 0 drains it: no new flows, established ones stay.
    pub weight: u16,
    /// DSR only: its MAC, if the file gives it.
    pub mac: Option<[u8; 6]>,
    /// Line of its `[[service.backend]]` header.
    pub line: usize,
}

/// One checked service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Service {
    pub name: String,
    /// Line of its `[[service]]` header.
    pub line: usize,
    pub vip: IpAddr,
    pub proto: Proto,
    /// `None`: every port not taken by a port-specific service.
    pub port: Option<u16>,
    /// Maglev table entries (prime).
    pub table_size: u32,
    pub hash: HashFields,
    pub mode: Mode,
    /// Every backend drained, weights kept.
    pub drain: bool,
    pub backends: Vec<Backend>,
}

impl Service {
    /// Backends and the weights the table is built with: all 0 if drained.
    pub fn weights(&self) -> Vec<(IpAddr, u32)> {
        self.backends.iter().map(|b| (b.address, if self.drain { 0 } else { u32::from(b.weight) })).collect()
    }

    /// `198.18.0.10 tcp port 80`, `2001:db8::1 udp all ports`: what the
    /// service takes, for messages.
    pub fn selector(&self) -> String {
        match self.port {
            Some(p) => format!("{} {} port {p}", self.vip, self.proto),
            None => format!("{} {} all ports", self.vip, self.proto),
        }
    }
}

/// Outer source addresses of `ipip` and `gue` packets (`[encap]`): each
/// flow takes the prefix's address whose host bits are its hash, so that
/// backends' receive-side scaling spreads flows over their queues. Without
/// a prefix, the lb interface's own address (no spreading).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Encap {
    pub source_v4: Option<ipnet::Ipv4Net>,
    pub source_v6: Option<ipnet::Ipv6Net>,
}

/// A checked service file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Config {
    pub services: Vec<Service>,
    pub encap: Encap,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    service: Vec<toml::Spanned<RawService>>,
    encap: Option<toml::Spanned<RawEncap>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEncap {
    source_v4: Option<String>,
    source_v6: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: Option<String>,
    vip: Option<String>,
    proto: Option<String>,
    port: Option<i64>,
    table_size: Option<i64>,
    hash: Option<String>,
    mode: Option<String>,
    gue_port: Option<i64>,
    drain: Option<bool>,
    #[serde(default)]
    backend: Vec<toml::Spanned<RawBackend>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    address: Option<String>,
    weight: Option<i64>,
    mac: Option<String>,
}

/// Where the lines of a text start, to turn byte offsets into line numbers
/// without rescanning the text for each of thousands of backends.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        Lines(text.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i).collect())
    }

    /// 1-based line of byte offset `at`.
    fn of(&self, at: usize) -> usize {
        self.0.partition_point(|&nl| nl < at) + 1
    }
}

/// An error about `field` of the thing at `line` named `name`.
fn at(origin: &str, line: usize, name: &str, field: &str, e: anyhow::Error) -> anyhow::Error {
    anyhow!("{origin}: line {line}: {name}: {field}: {e:#}")
}

impl Config {
    /// Parses and checks a service file's text; `origin` names it in errors
    /// and warnings. Returns the file and its warnings, one line each.
    pub fn parse(text: &str, origin: &str) -> Result<(Config, Vec<String>)> {
        let raw: RawFile = toml::from_str(text).map_err(|e| xnf_core::files::toml_error(origin, text, &e))?;
        ensure!(raw.service.len() <= MAX_SERVICES, "{origin}: {} services; at most {MAX_SERVICES}", raw.service.len());
        let mut services = Vec::with_capacity(raw.service.len());
        let mut warnings = Vec::new();
        let lines = Lines::new(text);
        // Every service and backend is checked: each fault is named, not
        // only the first.
        let mut faults = Vec::new();
        for (i, spanned) in raw.service.iter().enumerate() {
            let line = lines.of(spanned.span().start);
            let r = spanned.get_ref();
            let name = r.name.clone().filter(|n| is_name(n)).unwrap_or_else(|| format!("service {}", i + 1));
            let s = match check_service(r, &name, line) {
                Ok(s) => s,
                Err((field, e)) => {
                    faults.push(at(origin, line, &name, field, e));
                    continue;
                }
            };
            let mut backends = Vec::with_capacity(r.backend.len());
            for (j, b) in r.backend.iter().enumerate() {
                let bline = lines.of(b.span().start);
                let bname = match b.get_ref().address.as_deref().map(str::parse::<IpAddr>) {
                    Some(Ok(a)) => format!("{name}/{a}"),
                    _ => format!("{name}/backend {}", j + 1),
                };
                match check_backend(b.get_ref(), &s, bline) {
                    Ok(b) => backends.push(b),
                    Err((field, e)) => faults.push(at(origin, bline, &bname, field, e)),
                }
            }
            if backends.len() < r.backend.len() {
                continue;
            }
            let s = Service { backends, ..s };
            if let Err((field, e)) = check_backends(&s) {
                faults.push(at(origin, line, &name, field, e));
                continue;
            }
            warnings.extend(warn(&s).into_iter().map(|(field, w)| format!("{origin}: line {line}: {name}: {field}: {w}")));
            services.push(s);
        }
        let encap = match &raw.encap {
            None => Encap::default(),
            Some(e) => check_encap(e.get_ref()).unwrap_or_else(|(field, e2)| {
                faults.push(at(origin, lines.of(e.span().start), "encap", field, e2));
                Encap::default()
            }),
        };
        xnf_core::files::all_faults(faults)?;
        check_file(&services, origin)?;
        Ok((Config { services, encap }, warnings))
    }

    /// The service of that name.
    pub fn service(&self, name: &str) -> Option<&Service> {
        self.services.iter().find(|s| s.name == name)
    }
}

type Checked<T> = Result<T, (&'static str, anyhow::Error)>;

fn fail<T>(field: &'static str, why: impl fmt::Display) -> Checked<T> {
    Err((field, anyhow!("{why}")))
}

/// Checks `[encap]`: unicast prefixes off this host.
fn check_encap(r: &RawEncap) -> Checked<Encap> {
    let prefix = |field: &'static str, s: &str| -> Checked<ipnet::IpNet> {
        let n: ipnet::IpNet = s.parse().map_err(|_| (field, anyhow!("{s:?} is not a prefix (like 198.18.255.0/24 or 2001:db8:ff::/64)")))?;
        address(&n.network().to_string()).map_err(|e| (field, e))?;
        if n.addr() != n.network() {
            return fail(field, format!("{s} has host bits set: write {}", n.trunc()));
        }
        Ok(n)
    };
    let source_v4 = match r.source_v4.as_deref().map(|s| prefix("source_v4", s)).transpose()? {
        None => None,
        Some(ipnet::IpNet::V4(n)) => Some(n),
        Some(_) => return fail("source_v4", "an IPv6 prefix (source_v6 takes it)"),
    };
    let source_v6 = match r.source_v6.as_deref().map(|s| prefix("source_v6", s)).transpose()? {
        None => None,
        Some(ipnet::IpNet::V6(n)) => Some(n),
        Some(_) => return fail("source_v6", "an IPv4 prefix (source_v4 takes it)"),
    };
    Ok(Encap { source_v4, source_v6 })
}

/// Checks a service's own fields (its backends come after).
fn check_service(r: &RawService, name: &str, line: usize) -> Checked<Service> {
    let name = match &r.name {
        None => return fail("name", "missing: every service has a name (status and stats go by it)"),
        Some(n) if !is_name(n) => return fail("name", format!("{n:?} is not a service name (1-{MAX_NAME_LEN} letters, digits, - and _)")),
        Some(_) => name.to_owned(),
    };
    let vip = match r.vip.as_deref() {
        None => return fail("vip", "missing: the virtual address clients connect to"),
        Some(v) => address(v).map_err(|e| ("vip", e))?,
    };
    let proto = match r.proto.as_deref() {
        Some("tcp") => Proto::Tcp,
        Some("udp") => Proto::Udp,
        Some(o) => return fail("proto", format!("{o:?} is not tcp or udp")),
        None => return fail("proto", "missing: tcp or udp"),
    };
    let port = match r.port {
        None => None,
        Some(p @ 1..=65535) => Some(p as u16),
        Some(p) => return fail("port", format!("{p} is not 1-65535 (omit port for all ports)")),
    };
    let table_size = r.table_size.map_or(Ok(DEFAULT_TABLE_SIZE), table_size).map_err(|e| ("table_size", e))?;
    let hash = match r.hash.as_deref() {
        None | Some("5-tuple") => HashFields::FiveTuple,
        Some("3-tuple") => HashFields::ThreeTuple,
        Some(o) => return fail("hash", format!("{o:?} is not 5-tuple or 3-tuple")),
    };
    let mode = match r.mode.as_deref() {
        None | Some("ipip") => Mode::Ipip,
        Some("gue") => Mode::Gue { port: DEFAULT_GUE_PORT },
        Some("dsr") => Mode::Dsr,
        Some(o) => return fail("mode", format!("{o:?} is not ipip, gue or dsr")),
    };
    let mode = match (mode, r.gue_port) {
        (_, None) => mode,
        (Mode::Gue { .. }, Some(p @ 1..=65535)) => Mode::Gue { port: p as u16 },
        (Mode::Gue { .. }, Some(p)) => return fail("gue_port", format!("{p} is not 1-65535")),
        (_, Some(_)) => return fail("gue_port", "only gue services have a gue_port"),
    };
    let drain = r.drain.unwrap_or(false);
    Ok(Service { name, line, vip, proto, port, table_size, hash, mode, drain, backends: Vec::new() })
}

/// A table size from the file: prime, at most [`maglev::MAX_TABLE_SIZE`].
fn table_size(n: i64) -> Result<u32> {
    let n = u32::try_from(n).map_err(|_| if n < 0 { anyhow!("{n} is not a table size") } else { anyhow!("{n} is beyond {}", maglev::MAX_TABLE_SIZE) })?;
    maglev::check_size(n)?;
    Ok(n)
}

/// Service names appear in commands and paths: short, and no spaces.
fn is_name(n: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&n.len()) && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// A unicast address off this host: what a VIP or a backend can be. An
/// IPv4-mapped IPv6 address is refused: it would be a second name of an
/// IPv4 address (one backend twice, a VIP as its own backend).
fn address(s: &str) -> Result<IpAddr> {
    let a: IpAddr = s.parse().map_err(|_| anyhow!("{s:?} is not an IP address (like 198.18.0.10 or 2001:db8::10)"))?;
    let broadcast = matches!(a, IpAddr::V4(v4) if v4.is_broadcast());
    ensure!(!a.is_unspecified() && !a.is_multicast() && !broadcast, "{a} is not a unicast address");
    ensure!(!a.is_loopback(), "{a} is a loopback address");
    if let IpAddr::V6(v6) = a {
        if let Some(v4) = v6.to_ipv4_mapped() {
            bail!("{a} is IPv4-mapped: write {v4}");
        }
    }
    Ok(a)
}

/// Checks one backend of service `s`.
fn check_backend(r: &RawBackend, s: &Service, line: usize) -> Checked<Backend> {
    let address = match r.address.as_deref() {
        None => return fail("address", "missing: the backend's own address"),
        Some(a) => address(a).map_err(|e| ("address", e))?,
    };
    if s.mode == Mode::Ipip && address.is_ipv4() != s.vip.is_ipv4() {
        let (b, v) = if address.is_ipv4() { ("IPv4", "IPv6") } else { ("IPv6", "IPv4") };
        return fail("address", format!("an {b} backend of an {v} VIP: ipip carries IPv4 in IPv4 and IPv6 in IPv6 (mode = \"gue\" mixes them)"));
    }
    let weight = match r.weight {
        None => 1,
        Some(w @ 0..=65535) => w as u16,
        Some(w) => return fail("weight", format!("{w} is not 0-65535 (0 drains the backend)")),
    };
    let mac = match (&r.mac, s.mode) {
        (None, _) => None,
        (Some(m), Mode::Dsr) => Some(mac(m).map_err(|e| ("mac", e))?),
        (Some(_), _) => return fail("mac", "only dsr backends have a mac (ipip and gue reach them by address)"),
    };
    Ok(Backend { address, weight, mac, line })
}

/// `02:00:00:00:00:01`: a unicast MAC.
fn mac(s: &str) -> Result<[u8; 6]> {
    let m: MacAddr = s.parse().map_err(|_| anyhow!("{s:?} is not a MAC address (like 02:00:00:00:00:01)"))?;
    ensure!(m.is_unicast() && m != MacAddr::ZERO, "{s} is not a unicast MAC address");
    Ok(m.0)
}

/// Checks a service's backends as a set.
fn check_backends(s: &Service) -> Checked<()> {
    let n = s.backends.len();
    if n == 0 {
        return fail("backend", "none: a service needs at least one [[service.backend]]");
    }
    if n > MAX_BACKENDS {
        return fail("backend", format!("{n} backends; at most {MAX_BACKENDS}"));
    }
    let mut seen = BTreeMap::new();
    for b in &s.backends {
        if let Some(first) = seen.insert(b.address, b.line) {
            return fail("backend", format!("{} is given twice (lines {first} and {})", b.address, b.line));
        }
    }
    let weighted = s.backends.iter().filter(|b| b.weight > 0).count();
    if weighted == 0 && !s.drain {
        return fail("backend", "every backend has weight 0, so no new flow would find one (to drain the whole service on purpose, write drain = true)");
    }
    if (s.table_size as usize) < weighted {
        return fail("table_size", format!("{} entries for {weighted} weighted backends: some would get no flow", s.table_size));
    }
    Ok(())
}

/// What is legal but probably not meant.
fn warn(s: &Service) -> Vec<(&'static str, String)> {
    let mut w = Vec::new();
    let weighted = s.backends.iter().filter(|b| b.weight > 0).count() as u64;
    let wanted = ENTRIES_PER_BACKEND * weighted;
    // One weighted backend takes every entry, however few: no share is off.
    if weighted > 1 && u64::from(s.table_size) < wanted {
        // At most MAX_BACKENDS × ENTRIES_PER_BACKEND: a prime follows below MAX_TABLE_SIZE.
        let hint = maglev::next_prime(wanted as u32).map(|p| format!("; table_size = {p} keeps them within")).unwrap_or_default();
        w.push(("table_size", format!("{} entries for {weighted} backends: shares may be off by more than 1 %{hint}", s.table_size)));
    }
    if s.drain {
        w.push(("drain", format!("every backend is drained: new flows to {} find no backend", s.selector())));
    }
    w
}

/// Checks what concerns several services.
fn check_file(services: &[Service], origin: &str) -> Result<()> {
    let mut names = BTreeMap::new();
    let mut selectors = BTreeMap::new();
    for s in services {
        if let Some(first) = names.insert(s.name.as_str(), s.line) {
            bail!("{origin}: line {}: {}: name: used by the service at line {first} too", s.line, s.name);
        }
        if let Some(other) = selectors.insert((s.vip, s.proto, s.port), &s.name) {
            bail!("{origin}: line {}: {}: vip: {} is service {other}'s already", s.line, s.name, s.selector());
        }
    }
    let vips: BTreeSet<IpAddr> = services.iter().map(|s| s.vip).collect();
    for s in services {
        if let Some(b) = s.backends.iter().find(|b| vips.contains(&b.address)) {
            bail!("{origin}: line {}: {}/{}: address: is a VIP of this file; packets would loop", b.line, s.name, b.address);
        }
    }
    let backends: usize = services.iter().map(|s| s.backends.len()).sum();
    ensure!(backends <= MAX_TOTAL_BACKENDS, "{origin}: {backends} backends over all services; at most {MAX_TOTAL_BACKENDS}");
    let entries: u64 = services.iter().map(|s| u64::from(s.table_size)).sum();
    ensure!(entries <= MAX_TOTAL_ENTRIES, "{origin}: {entries} table entries over all services; at most {MAX_TOTAL_ENTRIES}");
    Ok(())
}

#[cfg(test)]
mod tests;
