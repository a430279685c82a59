//! The reference model of the filter: what `filter.bpf.c` must do with a
//! frame under a checked rule file (`rules::RuleSet`) and its lists.
//! Written from the documented contract, not the C code: the frame is read
//! as the kernel reads it (`xnf_testrun::kernel::view`, which the shared
//! parser is fuzzed against on its own), and the rules apply as the README
//! and the rule module say: first match in file order; a rule whose fields
//! cannot all be read (the protocol behind too many extension headers;
//! ports, TCP flags or an ICMP type beyond the IP packet or in a later
//! fragment) is taken fail-closed, by drop and rate-limit rules only; what
//! no rule takes meets the default; not IP passes, a broken IP header is
//! dropped, stacked tags meet the default untouched by rules.
//!
//! Rate limits are modelled without time: a bucket starts full (the burst,
//! in packets; in bytes for a bps-only rule; with pps and bps, the byte
//! bucket holds one second's worth) and is never refilled. The fuzzer
//! keeps that exact: its small buckets refill at 1 per second and live for
//! a fraction of one, its large ones never run dry. On a machine slow
//! enough (an emulated guest) for a small bucket to live half a second, it
//! may have refilled: its frames may then pass or drop (`Expect::alt`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use xnf_filter::program::Counter;
use xnf_filter::rules::{Action, Addr, Rule, RuleSet};
use xnf_testrun::kernel::{view, Frag, Ip, Ports, L2, L3, MAX_EXT};
use xnf_testrun::Verdict;

/// What happened to a frame, for the histogram of outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seen {
    NonIp,
    Malformed,
    Qinq,
    Default { drop: bool },
    Rule { action: &'static str, unsure: bool },
}

impl Seen {
    pub fn name(self) -> String {
        match self {
            Seen::NonIp => "non-ip".into(),
            Seen::Malformed => "malformed".into(),
            Seen::Qinq => "qinq".into(),
            Seen::Default { drop } => format!("default {}", if drop { "drop" } else { "pass" }),
            Seen::Rule { action, unsure } => format!("{action}{}", if unsure { " (unsure)" } else { "" }),
        }
    }
}

/// What the filter must do with a frame.
#[derive(Clone, Debug)]
pub struct Expect {
    pub verdict: Verdict,
    /// Global counters that grow by one (`rx` and the verdict's included).
    pub counters: Vec<Counter>,
    /// The rule slot that takes the frame (`RULE_DEFAULT` for the default).
    pub slot: Option<u32>,
    pub seen: Seen,
    /// The other verdict, as good: a small bucket old enough to have
    /// refilled; a segment of a connection conntrack happens to know.
    pub alt: Option<Box<Expect>>,
    /// A SYN answered: the MSS its SYN-ACK offers.
    pub reply: Option<u16>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Match {
    No,
    Yes,
    Unsure,
}

/// A token bucket: packets and bytes left (None: not limited by that).
#[derive(Clone, Copy)]
struct Bucket {
    packets: Option<u64>,
    bytes: Option<u64>,
    made: Instant,
}

/// How long a bucket refilling at 1 per second stays exact (it gains
/// less than one packet or byte).
const EXACT_FOR: Duration = Duration::from_millis(500);

pub struct Model {
    rs: RuleSet,
    /// The kernel offers conntrack's lookup to XDP (else syn-cookie rules
    /// pass what they cannot check).
    conntrack: bool,
    lists: BTreeMap<String, Vec<IpNet>>,
    /// By (rule index, source address).
    buckets: HashMap<(usize, IpAddr), Bucket>,
}

/// The L4 fields past the ports, when they lie within the IP packet.
struct Extras {
    tcp_flags: Option<u8>,
    icmp_type: Option<u8>,
}

impl Model {
    pub fn new(rs: RuleSet, lists: BTreeMap<String, Vec<IpNet>>, conntrack: bool) -> Model {
        Model { rs, lists, conntrack, buckets: HashMap::new() }
    }

    /// Buckets the frames so far have made (the filter keeps them in an LRU).
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    pub fn decide(&mut self, frame: &[u8]) -> Expect {
        let v = view(frame);
        let fixed = |verdict: Verdict, c: Counter, seen: Seen| {
            let last = if verdict == Verdict::Drop { Counter::Drop } else { Counter::Pass };
            Expect { verdict, counters: vec![Counter::Rx, c, last], slot: None, seen, alt: None, reply: None }
        };
        let ip = match (v.l2, &v.l3) {
            (L2::Stacked, _) => return self.by_default(vec![Counter::Qinq], Seen::Qinq),
            (L2::Truncated, _) | (_, L3::Malformed) => return fixed(Verdict::Drop, Counter::Malformed, Seen::Malformed),
            (_, L3::NonIp(_)) => return fixed(Verdict::Pass, Counter::NonIp, Seen::NonIp),
            (_, L3::Ip(ip)) => ip,
        };
        let x = extras(frame, ip);
        for (i, r) in self.rs.rules.iter().enumerate() {
            let m = self.matches(r, v.l2, ip, &x, frame.len());
            let skip = m == Match::Unsure && matches!(r.action, Action::Pass | Action::Count);
            if m != Match::No && !skip {
                if let Action::SynCookie { mss } = r.action {
                    return self.syn_cookie(i, frame, ip, &x, m == Match::Unsure, mss);
                }
                return self.act(i, ip, frame.len(), m == Match::Unsure);
            }
        }
        self.by_default(vec![], Seen::Default { drop: self.rs.default_drop })
    }

    /// The default policy, after `extra` counters (QinQ).
    fn by_default(&self, extra: Vec<Counter>, seen: Seen) -> Expect {
        let drop = self.rs.default_drop;
        let (verdict, c, last) = if drop { (Verdict::Drop, Counter::DefaultDrop, Counter::Drop) } else { (Verdict::Pass, Counter::DefaultPass, Counter::Pass) };
        let mut counters = vec![Counter::Rx];
        counters.extend(extra);
        counters.extend([c, last]);
        Expect { verdict, counters, slot: Some(xnf_filter::program::RULE_DEFAULT), seen, alt: None, reply: None }
    }

    /// Rule `i` took the frame.
    fn act(&mut self, i: usize, ip: &Ip, len: usize, unsure: bool) -> Expect {
        let (admitted, action) = match self.rs.rules[i].action {
            Action::Drop => (Some(false), "drop"),
            Action::Pass => (Some(true), "pass"),
            Action::Count => (Some(true), "count"),
            Action::RateLimit { pps, bps, burst } => (self.admit(i, ip.src, len, pps, bps, burst), "rate"),
            Action::SynCookie { .. } => unreachable!("syn_cookie() takes these"),
        };
        let taken = |pass: bool| {
            let (c, name) = match (action, pass) {
                ("drop", _) => (Counter::RuleDrop, "drop"),
                ("pass", _) => (Counter::RulePass, "pass"),
                ("count", _) => (Counter::Counted, "count"),
                (_, true) => (Counter::RatePass, "rate-pass"),
                (_, false) => (Counter::RateDrop, "rate-drop"),
            };
            let mut counters = vec![Counter::Rx];
            counters.extend(unsure.then_some(Counter::Unsure));
            counters.extend([c, if pass { Counter::Pass } else { Counter::Drop }]);
            let verdict = if pass { Verdict::Pass } else { Verdict::Drop };
            Expect { verdict, counters, slot: Some(i as u32), seen: Seen::Rule { action: name, unsure }, alt: None, reply: None }
        };
        match admitted {
            Some(pass) => taken(pass),
            None => Expect { alt: Some(Box::new(taken(false))), ..taken(true) },
        }
    }

    /// A syn-cookie rule `i` took the frame (README, "SYN cookies"): a SYN
    /// whose TCP header is whole is answered; anything unreadable, any
    /// fragment, any other SYN is dropped; the rest drops unless conntrack
    /// knows its connection or it acknowledges a valid cookie. The model
    /// cannot know the kernel's cookie secret: it takes every ACK for one
    /// without a valid cookie (a mutated frame makes a valid one with odds
    /// of some 2^-31: the cookie's 24 bits of hash, 2 of MSS index and a
    /// 2-minute window), and allows a pass as a connection conntrack knows.
    fn syn_cookie(&self, i: usize, frame: &[u8], ip: &Ip, x: &Extras, unsure: bool, mss: u16) -> Expect {
        let taken = |verdict: Verdict, c: Counter, action: &'static str| {
            let mut counters = vec![Counter::Rx];
            counters.extend(unsure.then_some(Counter::Unsure));
            counters.push(c);
            counters.extend(match verdict {
                Verdict::Drop => Some(Counter::Drop),
                Verdict::Pass => Some(Counter::Pass),
                _ => None,
            });
            Expect { verdict, counters, slot: Some(i as u32), seen: Seen::Rule { action, unsure }, alt: None, reply: None }
        };
        let dropped = taken(Verdict::Drop, Counter::CookieDrop, "cookie-drop");
        let Some(flags) = x.tcp_flags.filter(|_| !unsure && ip.frag == Frag::None) else { return dropped };
        if flags & 0x17 == 0x02 {
            let (off, end) = (l4_offset(frame, ip), ip.l3_off + ip.ip_len);
            let doff = usize::from(frame[off + 12] >> 4) * 4;
            if off + 20 > end || doff < 20 || off + doff > end {
                return dropped;
            }
            let mss = if ip.v6 { mss - 20 } else { mss };
            return Expect { reply: Some(mss), ..taken(Verdict::Tx, Counter::Tx, "syn-cookie") };
        }
        if !self.conntrack {
            return taken(Verdict::Pass, Counter::CookieUnchecked, "cookie-unchecked");
        }
        Expect { alt: Some(Box::new(taken(Verdict::Pass, Counter::CookieConn, "cookie-conn"))), ..dropped }
    }

    /// Whether the source's bucket of rule `i` holds this frame (and takes
    /// it); `None` when it may have refilled (then it stays unknown).
    fn admit(&mut self, i: usize, src: IpAddr, len: usize, pps: Option<u64>, bps: Option<u64>, burst: u64) -> Option<bool> {
        let fresh = Bucket { packets: pps.map(|_| burst), bytes: bps.map(|b| if pps.is_some() { b } else { burst }), made: Instant::now() };
        let b = self.buckets.entry((i, src)).or_insert(fresh);
        let slow = pps.is_some_and(|p| p < 1000) || bps.is_some_and(|n| n < 1000);
        if slow && b.made.elapsed() > EXACT_FOR {
            return None;
        }
        let len = len as u64;
        let ok = b.packets.is_none_or(|p| p >= 1) && b.bytes.is_none_or(|n| n >= len);
        if ok {
            b.packets = b.packets.map(|p| p - 1);
            b.bytes = b.bytes.map(|n| n - len);
        }
        Some(ok)
    }

    fn in_addr(&self, a: &Addr, addr: IpAddr) -> bool {
        match a {
            Addr::Prefix(net) => net.contains(&addr),
            Addr::List(name) => self.lists.get(name).is_some_and(|l| l.iter().any(|n| n.contains(&addr))),
        }
    }

    fn matches(&self, r: &Rule, l2: L2, ip: &Ip, x: &Extras, len: usize) -> Match {
        let fails = [
            r.ipv6.is_some_and(|v6| v6 != ip.v6),
            // A priority tag (VID 0) matches no vlan rule: those are 1-4094.
            r.vlan.is_some_and(|vid| !matches!(l2, L2::Tagged { tci } if tci & 0xfff == vid)),
            r.length.is_some_and(|(lo, hi)| len < usize::from(lo) || len > usize::from(hi)),
            r.src.as_ref().is_some_and(|a| !self.in_addr(a, ip.src)),
            r.dst.as_ref().is_some_and(|a| !self.in_addr(a, ip.dst)),
        ];
        if fails.contains(&true) {
            return Match::No;
        }
        // Each L4 field: a mismatch (Some(false)), a match, or unreadable (None).
        let mut fields: Vec<Option<bool>> = Vec::new();
        if let Some(p) = r.proto {
            fields.push(ip.proto.map(|q| q == p));
        }
        if r.sport.is_some() || r.dport.is_some() {
            let inside = |range: Option<(u16, u16)>, p: u16| range.is_none_or(|(lo, hi)| (lo..=hi).contains(&p));
            fields.push(match ip.ports {
                Ports::Known(s, d) => Some(inside(r.sport, s) && inside(r.dport, d)),
                _ => None,
            });
        }
        if let Some(t) = r.tcp_flags {
            fields.push(x.tcp_flags.map(|f| f & t.set == t.set && f & t.clear == 0));
        }
        if let Some(want) = r.icmp_type {
            fields.push(x.icmp_type.map(|ty| ty == want));
        }
        if fields.contains(&Some(false)) {
            Match::No
        } else if fields.contains(&None) {
            Match::Unsure
        } else {
            Match::Yes
        }
    }
}

/// The SYN-ACK answering SYN `frame` with `cookie` and `mss`
/// ([`crate::common::synack`]), its Ethernet header the frame's own with
/// the MACs swapped, its tag kept.
pub fn synack(frame: &[u8], l2: L2, ip: &Ip, cookie: u32, mss: u16) -> Vec<u8> {
    use xnf_packet::{EtherType, MacAddr, PacketBuilder};
    let mac = |at: usize| MacAddr(frame[at..at + 6].try_into().expect("6 bytes"));
    let mut eth = PacketBuilder::ethernet(mac(0), mac(6));
    if let L2::Tagged { tci } = l2 {
        eth = eth.tag(EtherType::VLAN, tci);
    }
    let off = l4_offset(frame, ip);
    let word = |at: usize| u16::from_be_bytes([frame[off + at], frame[off + at + 1]]);
    let seq = u32::from_be_bytes(frame[off + 4..off + 8].try_into().expect("4 bytes"));
    let syn = crate::common::Syn { client: ip.src, server: ip.dst, client_port: word(0), server_port: word(2), seq };
    crate::common::synack(eth, &syn, cookie, mss)
}

/// The offset of the L4 header in the frame: after the IPv4 header and its
/// options, or after the IPv6 extension headers (the view walked them all
/// within the packet when it found the protocol).
pub fn l4_offset(frame: &[u8], ip: &Ip) -> usize {
    let b = &frame[ip.l3_off..];
    if !ip.v6 {
        return ip.l3_off + usize::from(b[0] & 0xf) * 4;
    }
    let (mut nh, mut at) = (b[6], 40);
    for _ in 0..MAX_EXT {
        let len = match nh {
            44 => 8,
            51 => (usize::from(b[at + 1]) + 2) * 4,
            0 | 43 | 60 => (usize::from(b[at + 1]) + 1) * 8,
            _ => break,
        };
        nh = b[at];
        at += len;
    }
    ip.l3_off + at
}

/// TCP flags (a TCP header with its ports and 14 bytes in the packet) and
/// the ICMP type (one byte of ICMP, not in a later fragment).
fn extras(frame: &[u8], ip: &Ip) -> Extras {
    let end = ip.l3_off + ip.ip_len;
    let mut x = Extras { tcp_flags: None, icmp_type: None };
    match ip.proto {
        Some(6) if matches!(ip.ports, Ports::Known(..)) => {
            let off = l4_offset(frame, ip);
            x.tcp_flags = (off + 14 <= end).then(|| frame[off + 13]);
        }
        Some(1 | 58) if ip.frag != Frag::Later => {
            let off = l4_offset(frame, ip);
            x.icmp_type = (off < end).then(|| frame[off]);
        }
        _ => {}
    }
    x
}
