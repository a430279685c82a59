//! The filter's rule file: what `xnf filter apply FILE` converges to.
//!
//! ```toml
//! default = "pass"                  # what no rule takes: pass | drop
//!
//! [lists]                           # prefix lists, one prefix per line
//! blocklist = "/etc/xnf/drop.txt"
//!
//! [[rule]]
//! name = "listed sources"
//! src = "@blocklist"                # a prefix, an address, or @list
//! action = "drop"
//!
//! [[rule]]
//! name = "SYN flood"
//! proto = "tcp"
//! tcp_flags = "SYN,!ACK"            # set flags, and !flags that must be clear
//! action = "rate-limit"             # per source address
//! pps = 2000
//! burst = 4000
//!
//! [[rule]]
//! proto = "udp"
//! dport = "1024-65535"
//! length = "1000-1518"              # frame bytes, without the FCS
//! vlan = 100
//! action = "count"                  # counts what a drop would take, passes it
//! ```
//!
//! The first rule that matches decides, in file order. Everything is
//! checked before anything changes; an error names the file, the line and
//! the field. A rule that looks at L4 fields (ports, TCP flags, ICMP type)
//! and meets a frame whose L4 header cannot be read (a later fragment, a
//! truncated header, extension headers beyond what the parser walks) is
//! applied fail-closed: a `drop` or `rate-limit` rule takes the frame, a
//! `pass` or `count` rule does not.

use std::collections::BTreeMap;

use anyhow::{bail, ensure, Result};
use ipnet::IpNet;
use serde::Deserialize;

use xnf_core::class::{parse_port_range, parse_prefix, parse_proto};

/// What a rule does with the frames it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Drop,
    Pass,
    /// Counts the frame as a drop would, and passes it (an audit rule).
    Count,
    /// Per-source token buckets: frames within the rate pass, the rest drop.
    RateLimit {
        pps: Option<u64>,
        bps: Option<u64>,
        burst: u64,
    },
    /// SYNs answered from XDP with a cookie, valid cookies and known
    /// connections to the kernel's synproxy, the rest dropped. `mss` is
    /// what the SYN-ACK offers over IPv4 (IPv6: 20 less).
    SynCookie {
        mss: u16,
    },
}

/// An address match: a prefix or a named list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    Prefix(IpNet),
    List(String),
}

/// TCP flags that must be set and flags that must be clear.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpFlags {
    pub set: u8,
    pub clear: u8,
}

/// One checked rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    /// Line of the rule's `[[rule]]` header in its file.
    pub line: usize,
    pub ipv6: Option<bool>,
    pub src: Option<Addr>,
    pub dst: Option<Addr>,
    pub proto: Option<u8>,
    pub sport: Option<(u16, u16)>,
    pub dport: Option<(u16, u16)>,
    pub tcp_flags: Option<TcpFlags>,
    pub icmp_type: Option<u8>,
    pub vlan: Option<u16>,
    pub length: Option<(u16, u16)>,
    pub action: Action,
}

impl Rule {
    /// Whether the rule looks past the IP header.
    pub fn needs_l4(&self) -> bool {
        self.sport.is_some() || self.dport.is_some() || self.tcp_flags.is_some() || self.icmp_type.is_some()
    }
}

/// A checked rule file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSet {
    pub default_drop: bool,
    pub lists: BTreeMap<String, String>,
    pub rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    lists: BTreeMap<String, String>,
    #[serde(default)]
    rule: Vec<toml::Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<String>,
    family: Option<String>,
    src: Option<String>,
    dst: Option<String>,
    proto: Option<String>,
    sport: Option<toml::Value>,
    dport: Option<toml::Value>,
    tcp_flags: Option<String>,
    icmp_type: Option<u8>,
    vlan: Option<u16>,
    length: Option<toml::Value>,
    action: String,
    pps: Option<u64>,
    bps: Option<u64>,
    burst: Option<u64>,
    mss: Option<u16>,
}

/// Most rules a file may hold (the data plane's table size).
pub const MAX_RULES: usize = 1024;
/// Most lists a file may name (the data plane holds twice as many, so
/// that every list can be replaced while the old one still serves).
pub const MAX_LISTS: usize = 8;
/// Largest rate (per second): the data plane's buckets refill per nanosecond.
pub const MAX_RATE: u64 = 1 << 40;
/// The MSS a syn-cookie rule offers unless told (Ethernet's, over IPv4).
pub const DEFAULT_MSS: u16 = 1460;
/// Largest burst: the data plane counts billionths of a packet or byte.
pub const MAX_BURST: u64 = u64::MAX / 1_000_000_000 / 4;

const TCP_FLAGS: [(&str, u8); 8] = [("FIN", 0x01), ("SYN", 0x02), ("RST", 0x04), ("PSH", 0x08), ("ACK", 0x10), ("URG", 0x20), ("ECE", 0x40), ("CWR", 0x80)];

fn parse_tcp_flags(s: &str) -> Result<TcpFlags> {
    let mut f = TcpFlags::default();
    for word in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let (neg, name) = word.strip_prefix('!').map_or((false, word), |n| (true, n));
        let Some(&(_, bit)) = TCP_FLAGS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) else {
            bail!("unknown TCP flag {name:?} (FIN SYN RST PSH ACK URG ECE CWR, ! for clear)");
        };
        ensure!((f.set | f.clear) & bit == 0, "TCP flag {name} named twice");
        if neg {
            f.clear |= bit;
        } else {
            f.set |= bit;
        }
    }
    ensure!(f.set | f.clear != 0, "no TCP flag named (like \"SYN,!ACK\")");
    Ok(f)
}

/// A port or length range: `53`, `"53"` or `"1024-65535"`.
fn range(v: &toml::Value) -> Result<(u16, u16)> {
    match v {
        toml::Value::Integer(n) => {
            let n = u16::try_from(*n).map_err(|_| anyhow::anyhow!("{n} is out of range (0-65535)"))?;
            Ok((n, n))
        }
        toml::Value::String(s) => parse_port_range(s),
        other => bail!("{other} is not a number or a range like \"1024-65535\""),
    }
}

fn addr(s: &str, lists: &BTreeMap<String, String>) -> Result<Addr> {
    if let Some(name) = s.strip_prefix('@') {
        ensure!(lists.contains_key(name), "list @{name} is not in [lists]");
        return Ok(Addr::List(name.to_owned()));
    }
    Ok(Addr::Prefix(parse_prefix(s)?))
}

/// 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

impl RuleSet {
    /// Parses and checks a rule file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<RuleSet> {
        let raw: RawFile = toml::from_str(text).map_err(|e| xnf_core::files::toml_error(origin, text, &e))?;
        let default_drop = match raw.default.as_deref() {
            None | Some("pass") => false,
            Some("drop") => true,
            Some(o) => bail!("{origin}: default: {o:?} is not pass or drop"),
        };
        for name in raw.lists.keys() {
            ensure!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{origin}: [lists]: {name:?} is not a list name (letters, digits, - and _)"
            );
        }
        ensure!(raw.lists.len() <= MAX_LISTS, "{origin}: [lists]: {} lists; at most {MAX_LISTS}", raw.lists.len());
        ensure!(raw.rule.len() <= MAX_RULES, "{origin}: {} rules; at most {MAX_RULES}", raw.rule.len());
        // Every rule is checked: each fault is named, not only the first.
        let (mut rules, mut faults) = (Vec::with_capacity(raw.rule.len()), Vec::new());
        for (i, spanned) in raw.rule.iter().enumerate() {
            let line = line_of(text, spanned.span().start);
            let r = spanned.get_ref();
            let name = r.name.clone().unwrap_or_else(|| format!("rule {}", i + 1));
            match check(r, name.clone(), line, &raw.lists) {
                Ok(rule) => rules.push(rule),
                Err((field, e)) => faults.push(anyhow::anyhow!("{origin}: line {line}: {name}: {field}: {e:#}")),
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for r in &rules {
            if !names.insert(&r.name) {
                faults.push(anyhow::anyhow!("{origin}: line {}: rule name {:?} is used twice", r.line, r.name));
            }
        }
        xnf_core::files::all_faults(faults)?;
        Ok(RuleSet { default_drop, lists: raw.lists, rules })
    }
}

/// Checks one rule; an error says which field.
fn check(r: &RawRule, name: String, line: usize, lists: &BTreeMap<String, String>) -> Result<Rule, (&'static str, anyhow::Error)> {
    let f = |field: &'static str| move |e: anyhow::Error| (field, e);
    let ipv6 = match r.family.as_deref() {
        None => None,
        Some("ipv4") => Some(false),
        Some("ipv6") => Some(true),
        Some(o) => return Err(("family", anyhow::anyhow!("{o:?} is not ipv4 or ipv6"))),
    };
    let src = r.src.as_deref().map(|s| addr(s, lists)).transpose().map_err(f("src"))?;
    let dst = r.dst.as_deref().map(|s| addr(s, lists)).transpose().map_err(f("dst"))?;
    let proto = r.proto.as_deref().map(parse_proto).transpose().map_err(f("proto"))?;
    let sport = r.sport.as_ref().map(range).transpose().map_err(f("sport"))?;
    let dport = r.dport.as_ref().map(range).transpose().map_err(f("dport"))?;
    let length = r.length.as_ref().map(range).transpose().map_err(f("length"))?;
    let tcp_flags = r.tcp_flags.as_deref().map(parse_tcp_flags).transpose().map_err(f("tcp_flags"))?;
    let fail = |field: &'static str, msg: String| Err((field, anyhow::anyhow!(msg)));
    if (sport.is_some() || dport.is_some()) && !matches!(proto, Some(6 | 17)) {
        return fail(if sport.is_some() { "sport" } else { "dport" }, "ports need proto = \"tcp\" or \"udp\"".into());
    }
    if tcp_flags.is_some() && proto != Some(6) {
        return fail("tcp_flags", "TCP flags need proto = \"tcp\"".into());
    }
    if r.icmp_type.is_some() && !matches!(proto, Some(1 | 58)) {
        return fail("icmp_type", "an ICMP type needs proto = \"icmp\" or \"icmpv6\"".into());
    }
    if let Some(v) = r.vlan {
        if !(1..=4094).contains(&v) {
            return fail("vlan", format!("VLAN ID {v} is not 1-4094"));
        }
    }
    // One family per rule: prefixes and ICMP flavour must agree.
    let mut family = ipv6;
    let fams = [
        src.as_ref().and_then(|a| if let Addr::Prefix(p) = a { Some(("src", matches!(p, IpNet::V6(_)))) } else { None }),
        dst.as_ref().and_then(|a| if let Addr::Prefix(p) = a { Some(("dst", matches!(p, IpNet::V6(_)))) } else { None }),
        match proto {
            Some(1) => Some(("proto", false)),
            Some(58) => Some(("proto", true)),
            _ => None,
        },
    ];
    for (field, v6) in fams.into_iter().flatten() {
        if family.is_some_and(|f| f != v6) {
            return fail(field, "mixes IPv4 and IPv6 in one rule; write one rule per family".into());
        }
        family = Some(v6);
    }
    let rate_fields = r.pps.is_some() || r.bps.is_some() || r.burst.is_some();
    let action = match r.action.as_str() {
        "drop" => Action::Drop,
        "pass" => Action::Pass,
        "count" => Action::Count,
        "rate-limit" => {
            if r.pps.is_none() && r.bps.is_none() {
                return fail("action", "rate-limit needs pps (packets/s) or bps (bytes/s)".into());
            }
            for (field, v, max) in [("pps", r.pps, MAX_RATE), ("bps", r.bps, MAX_RATE), ("burst", r.burst, MAX_BURST)] {
                if v.is_some_and(|v| v > max) {
                    return fail(field, format!("{} is beyond {max}", v.unwrap_or_default()));
                }
            }
            if r.pps.is_some() && r.bps.is_some_and(|b| b > MAX_BURST) {
                return fail("bps", format!("with pps, the byte bucket holds one second's worth: at most {MAX_BURST}"));
            }
            if r.pps == Some(0) || r.bps == Some(0) {
                return fail(if r.pps == Some(0) { "pps" } else { "bps" }, "a rate of 0 is a drop rule: write action = \"drop\"".into());
            }
            // A burst of one second's worth unless given.
            let burst = r.burst.unwrap_or_else(|| r.pps.or(r.bps).unwrap_or(1));
            if burst == 0 {
                return fail("burst", "a burst of 0 admits nothing".into());
            }
            Action::RateLimit { pps: r.pps, bps: r.bps, burst }
        }
        "syn-cookie" => {
            if proto != Some(6) {
                return fail("action", "syn-cookie needs proto = \"tcp\"".into());
            }
            if tcp_flags.is_some() {
                return fail("tcp_flags", "a syn-cookie rule looks at the flags itself: leave tcp_flags out".into());
            }
            let mss = r.mss.unwrap_or(DEFAULT_MSS);
            if !(536..=9000).contains(&mss) {
                return fail("mss", format!("{mss} is not 536-9000"));
            }
            Action::SynCookie { mss }
        }
        o => return fail("action", format!("{o:?} is not drop, pass, count, rate-limit or syn-cookie")),
    };
    if r.mss.is_some() && !matches!(action, Action::SynCookie { .. }) {
        return fail("mss", "only syn-cookie rules offer an MSS".into());
    }
    if rate_fields && !matches!(action, Action::RateLimit { .. }) {
        return fail(
            if r.pps.is_some() {
                "pps"
            } else if r.bps.is_some() {
                "bps"
            } else {
                "burst"
            },
            "only rate-limit rules have a rate".into(),
        );
    }
    Ok(Rule { name, line, ipv6: family, src, dst, proto, sport, dport, tcp_flags, icmp_type: r.icmp_type, vlan: r.vlan, length, action })
}

#[cfg(test)]
mod tests;
