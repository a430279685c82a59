//! Differential fuzzing of the filter (`filter.bpf.c`) against its
//! reference model (`model.rs`): a million frames, valid and mutated
//! (`xnf_testrun::frames`), under random rule files with random prefix
//! lists, a new rule file every [`SET_FRAMES`] frames. Each frame must get
//! the model's verdict, come out unchanged, and move exactly the model's
//! global counters and the counters of the rule slot the model says took
//! it; at the end of each rule file every rule slot it used (and the
//! default's) must hold exactly the model's totals, so no other slot moved.
//!
//! A rule file is drawn from its own seed (the run's seed and its number),
//! so `XNF_FUZZ_FIRST`/`XNF_FUZZ_FRAMES` reproduce any frame; rate-limit
//! buckets carry state from the rule file's earlier frames, so a failure
//! names the first frame of its rule file to replay from.

#[path = "../common/mod.rs"]
mod common;
mod model;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::IpAddr;

use common::{add, show, slot_name, Filter};
use fastrand::Rng;
use ipnet::IpNet;
use model::{Expect, Model, Seen};
use xnf_filter::program::{Counter, Counters, RuleCounters, RULE_DEFAULT};
use xnf_packet::MacAddr;
use xnf_testrun::frames::{frame, hex, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::kernel::{view, Frag, Ports, L3};
use xnf_testrun::Verdict;

/// Frames under one rule file. An apply costs an RCU grace period per map
/// swapped (tens of ms; most of the run at 2000), and small rate-limit
/// buckets, refilling at one per second, must not refill while their rule
/// file is live (4000 frames: some 40 ms).
const SET_FRAMES: u64 = 4000;
/// Token buckets made before the filter is loaded afresh: the data plane
/// keeps them in an LRU of 65536, which must never evict a live one.
const BUCKET_LIMIT: usize = 20_000;

const V4: [&str; 7] = ["198.18.0.1", "198.18.0.77", "198.18.1.5", "198.18.7.200", "198.19.3.4", "203.0.113.9", "192.0.2.1"];
const V6: [&str; 6] = ["2001:db8::1", "2001:db8::77", "2001:db8:1::5", "2001:db8:7::c8", "2001:db8:ffff::1", "fd00::9"];
const PORTS: [u16; 9] = [0, 22, 53, 80, 443, 1023, 1024, 5000, 65535];

/// Where frames aim: the addresses, ports and VIDs the rules are made of.
fn world() -> World {
    let addrs = V4.iter().chain(&V6).map(|a| a.parse().expect("an address")).collect();
    World { macs: vec![MacAddr([2, 0, 0, 0, 0, 2])], addrs, vids: vec![0, 100, 200], ports: PORTS.to_vec() }
}

fn pool(rng: &mut Rng, v6: bool) -> IpAddr {
    let p: &[&str] = if v6 { &V6 } else { &V4 };
    p[rng.usize(..p.len())].parse().expect("an address")
}

/// A prefix around a pool address, or (sometimes) one around a random one.
fn prefix(rng: &mut Rng, v6: bool) -> IpNet {
    let a = if rng.u8(..4) > 0 {
        pool(rng, v6)
    } else if v6 {
        IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, rng.u16(..), 0, 0, 0, 0, rng.u16(..)))
    } else {
        IpAddr::V4(std::net::Ipv4Addr::new(198, 18 + rng.u8(..2), rng.u8(..), rng.u8(..)))
    };
    let lens: &[u8] = if v6 { &[0, 16, 32, 48, 64, 120, 128, 128] } else { &[0, 8, 15, 16, 24, 31, 32, 32] };
    IpNet::new(a, lens[rng.usize(..lens.len())]).expect("a valid length").trunc()
}

/// A port or a range, from the ports frames use, or any.
fn ports(rng: &mut Rng) -> String {
    let p = |r: &mut Rng| if r.u8(..4) > 0 { PORTS[r.usize(..PORTS.len())] } else { r.u16(..) };
    let (a, b) = (p(rng), p(rng));
    if rng.bool() {
        a.to_string()
    } else {
        format!("\"{}-{}\"", a.min(b), a.max(b))
    }
}

fn tcp_flags(rng: &mut Rng) -> String {
    const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
    let mut words: Vec<String> = Vec::new();
    for n in NAMES {
        match rng.u8(..20) {
            0..=4 => words.push(n.into()),
            5..=7 => words.push(format!("!{n}")),
            _ => {}
        }
    }
    if words.is_empty() {
        words.push("SYN".into());
    }
    words.join(",")
}

/// The rate fields: mostly buckets that never run dry, or ones of a few
/// packets or bytes refilling at one per second (exact for the model).
fn rate(rng: &mut Rng) -> &'static str {
    const RATES: [&str; 10] = [
        "pps = 1000000000\nburst = 2000000000",
        "pps = 1000000000\nburst = 2000000000",
        "bps = 1000000000000\nburst = 4000000000",
        "pps = 1000000000\nburst = 2000000000\nbps = 4000000000",
        "pps = 1\nburst = 1",
        "pps = 1\nburst = 3",
        "bps = 1\nburst = 200",
        "bps = 1\nburst = 3000",
        // A byte bucket of one second's worth, below any frame: all over.
        "pps = 1\nburst = 5\nbps = 10",
        "pps = 1000000000\nburst = 2000000000",
    ];
    RATES[rng.usize(..RATES.len())]
}

/// A protocol for a rule of family `fam` (empty: none).
fn proto(rng: &mut Rng, fam: Option<bool>) -> String {
    match rng.u8(..20) {
        0..=4 => "udp".into(),
        5..=9 => "tcp".into(),
        10..=12 if fam != Some(true) => "icmp".into(),
        10..=12 => "icmpv6".into(),
        13 | 14 => {
            // Others by name and number (1 and 58 would fix the family).
            let n = [0, 2, 47, 50, 59, 132, 253, rng.u8(..)][rng.usize(..8)];
            if matches!(n, 1 | 58) {
                "253".into()
            } else {
                n.to_string()
            }
        }
        _ => String::new(),
    }
}

/// Ports, TCP flags, ICMP type, as the protocol allows.
fn l4_fields(rng: &mut Rng, proto: &str, s: &mut String) {
    if proto == "udp" || proto == "tcp" {
        for (field, pct) in [("sport", 25), ("dport", 45)] {
            if rng.u8(..100) < pct {
                writeln!(s, "{field} = {}", ports(rng)).unwrap();
            }
        }
    }
    if proto == "tcp" && rng.u8(..5) < 3 {
        writeln!(s, "tcp_flags = \"{}\"", tcp_flags(rng)).unwrap();
    }
    if proto.starts_with("icmp") && rng.u8(..4) > 0 {
        writeln!(s, "icmp_type = {}", [0, 8, 128, 129, 3, 135, rng.u8(..)][rng.usize(..7)]).unwrap();
    }
}

/// One `[[rule]]` of a consistent family, named uniquely (its token
/// buckets are then its own, never an earlier rule file's).
fn rule(rng: &mut Rng, name: &str, lists: &[String]) -> String {
    let mut s = format!("[[rule]]\nname = \"{name}\"\n");
    let fam = [None, Some(false), Some(false), Some(true), Some(true)][rng.usize(..5)];
    if let Some(v6) = fam.filter(|_| rng.u8(..3) == 0) {
        writeln!(s, "family = \"{}\"", if v6 { "ipv6" } else { "ipv4" }).unwrap();
    }
    let proto = proto(rng, fam);
    if !proto.is_empty() {
        writeln!(s, "proto = \"{proto}\"").unwrap();
    }
    l4_fields(rng, &proto, &mut s);
    // Fewer other fields on protocol rules: frames would seldom reach
    // their L4 checks through all of them.
    let scarce = if proto.is_empty() { 1 } else { 3 };
    for field in ["src", "dst"] {
        match (rng.u8(..10 * scarce), fam) {
            (0..=2, Some(v6)) => writeln!(s, "{field} = \"{}\"", prefix(rng, v6)).unwrap(),
            (3, _) if !lists.is_empty() => writeln!(s, "{field} = \"@{}\"", lists[rng.usize(..lists.len())]).unwrap(),
            _ => {}
        }
    }
    if rng.u8(..8 * scarce) == 0 {
        writeln!(s, "vlan = {}", [100, 200, 1, 4094, rng.u16(1..4095)][rng.usize(..5)]).unwrap();
    }
    if rng.u8(..8 * scarce) == 0 {
        let lo = [0u16, 14, 60, 64, 100, 128, 512, 1000][rng.usize(..8)];
        let hi = lo.saturating_add([0, 1, 50, 500, 1500, u16::MAX][rng.usize(..6)]);
        writeln!(s, "length = \"{lo}-{hi}\"").unwrap();
    }
    let cookies = proto == "tcp" && !s.contains("tcp_flags");
    match rng.u8(..100) {
        90.. if cookies => s.push_str("action = \"syn-cookie\"\n"),
        0..=34 => s.push_str("action = \"drop\"\n"),
        35..=59 => s.push_str("action = \"pass\"\n"),
        60..=74 => s.push_str("action = \"count\"\n"),
        _ => writeln!(s, "action = \"rate-limit\"\n{}", rate(rng)).unwrap(),
    }
    s
}

/// Rule file number `n`: its text and its lists' contents.
fn rule_file(rng: &mut Rng, n: u64) -> (String, BTreeMap<String, Vec<IpNet>>) {
    let mut lists = BTreeMap::new();
    // Each list costs the apply an RCU grace period: lists in some files.
    let n_lists = if rng.u8(..5) < 2 { rng.usize(1..4) } else { 0 };
    for i in 0..n_lists {
        let nets = (0..rng.usize(..8))
            .map(|_| {
                let v6 = rng.bool();
                prefix(rng, v6)
            })
            .collect();
        lists.insert(format!("l{i}"), nets);
    }
    let names: Vec<String> = lists.keys().cloned().collect();
    let mut s = format!("default = \"{}\"\n[lists]\n", if rng.bool() { "drop" } else { "pass" });
    for name in &names {
        writeln!(s, "{name} = \"{name}.txt\"").unwrap();
    }
    let count = match rng.u8(..100) {
        0..=6 => 0,
        7..=76 => rng.usize(1..9),
        77..=96 => rng.usize(9..33),
        _ => rng.usize(200..=1024),
    };
    for i in 0..count {
        s.push_str(&rule(rng, &format!("f{n}r{i}"), &names));
    }
    (s, lists)
}

/// Other TCP flags and ICMP types than the generator's (SYN, echo
/// request), written in place: the filter checks no checksum.
fn vary_l4(rng: &mut Rng, f: &mut [u8]) {
    let v = view(f);
    let Some(ip) = v.ip().filter(|ip| ip.frag != Frag::Later && ip.proto.is_some() && rng.u8(..4) > 0) else { return };
    let (off, end) = (model::l4_offset(f, ip), ip.l3_off + ip.ip_len);
    match ip.proto {
        Some(6) if matches!(ip.ports, Ports::Known(..)) && off + 14 <= end => {
            f[off + 13] = [0x02, 0x12, 0x10, 0x04, 0x11, 0x18, 0xc2, rng.u8(..)][rng.usize(..8)]
        }
        Some(1 | 58) if off < end => f[off] = [0, 8, 3, 11, 128, 129, 135, rng.u8(..)][rng.usize(..8)],
        _ => {}
    }
}

/// The rule file live now, with what the model says its slots must hold.
struct Live {
    n: u64,
    first: u64,
    text: String,
    lists: BTreeMap<String, Vec<IpNet>>,
    model: Model,
    /// Slots 0..rules, then the default's: their counters now, by the model.
    want: Vec<(u32, RuleCounters)>,
    shown: bool,
}

/// The fuzz run's state across frames.
struct Run {
    seed: u64,
    filter: Filter,
    /// The global counters by the model.
    want: Counters,
    live: Option<Live>,
    /// Buckets the model made since the filter was loaded.
    buckets: usize,
    seen: BTreeMap<Seen, u64>,
}

impl Run {
    fn new(seed: u64) -> Run {
        let filter = Filter::load().unwrap();
        let want = filter.maps.counters().unwrap();
        Run { seed, filter, want, live: None, buckets: 0, seen: BTreeMap::new() }
    }

    /// Rule slots of the live file whose counters are not the model's.
    fn close(&mut self) -> Vec<String> {
        let Some(live) = self.live.take() else { return vec![] };
        self.buckets += live.model.buckets();
        let got = |slot: u32| self.filter.maps.rule_counters(slot).unwrap();
        let wrong: Vec<String> =
            live.want.iter().filter(|(s, w)| got(*s) != *w).map(|(s, w)| format!("{} {} (model {})", slot_name(*s), show(&got(*s)), show(w))).collect();
        if wrong.is_empty() {
            return wrong;
        }
        vec![format!(
            "at the end of rule file {} (from frame {}), rule counters differ: {}\n{}",
            live.n,
            live.first,
            wrong.join(", "),
            describe(&live.text, &live.lists)
        )]
    }

    /// Makes rule file `n` live (from frame `first`); reloads the filter
    /// when its buckets pile up.
    fn open(&mut self, n: u64, first: u64) {
        if self.buckets > BUCKET_LIMIT {
            *self = Run { seen: std::mem::take(&mut self.seen), ..Run::new(self.seed) };
        }
        let mut rng = Rng::with_seed(self.seed ^ (n + 1).wrapping_mul(0xa076_1d64_78bd_642f));
        let (text, lists) = rule_file(&mut rng, n);
        // Lists as tries alone, or with their bitmaps (big lists' form).
        let rs = self.filter.apply_as(&text, &lists, Some(n % 2 == 1)).unwrap_or_else(|e| panic!("the fuzzer wrote a bad rule file: {e:#}\n{text}"));
        let slots = (0..rs.rules.len() as u32).chain([RULE_DEFAULT]);
        let want = slots.map(|s| (s, self.filter.maps.rule_counters(s).unwrap())).collect();
        let model = Model::new(rs, lists.clone(), self.filter.prog.conntrack());
        self.live = Some(Live { n, first, text, lists, model, want, shown: false });
    }

    /// Frame `i`: what differs from the model.
    fn check(&mut self, i: u64, input: &[u8]) -> Vec<String> {
        let mut problems = Vec::new();
        let n = i / SET_FRAMES;
        if self.live.as_ref().is_none_or(|l| l.n != n) {
            problems.extend(self.close());
            self.open(n, i);
        }
        let want = self.live.as_mut().expect("opened").model.decide(input);
        let got = match self.filter.run(input) {
            Ok(r) => r,
            Err(e) => return vec![format!("test run failed: {e:#}")],
        };
        let want = match want.alt {
            Some(alt) if got.verdict == alt.verdict => *alt,
            _ => want,
        };
        *self.seen.entry(want.seen).or_default() += 1;
        if got.verdict != want.verdict {
            problems.push(format!("{}; the model says {} ({})", got.verdict.name(), want.verdict.name(), want.seen.name()));
        }
        let v = view(input);
        let out = match (want.reply, &v.l3) {
            (Some(mss), L3::Ip(ip)) => model::synack(input, v.l2, ip, cookie_of(&got.frame), mss),
            _ => input.to_vec(),
        };
        if got.frame != out {
            problems.push(format!("the frame came out as {}, the model says {}", hex(&got.frame), hex(&out)));
        }
        if want.reply.is_some() && !xnf_packet::parse(&got.frame).is_ok_and(|p| p.checksums_ok()) {
            problems.push("the SYN-ACK's checksums do not verify".into());
        }
        problems.extend(self.counters(&want, input.len()));
        if !problems.is_empty() {
            problems.push(self.resync(i));
        }
        problems
    }

    /// The counters the frame moved that differ from the model's: the
    /// global ones, and those of the slot the model says took it.
    fn counters(&mut self, want: &Expect, len: usize) -> Vec<String> {
        let mut problems = Vec::new();
        for c in &want.counters {
            self.want[*c as usize] += 1;
        }
        let now = self.filter.maps.counters().unwrap();
        if now != self.want {
            let differ = Counter::ALL.iter().filter(|c| now[**c as usize] != self.want[**c as usize]);
            let d: Vec<_> = differ.map(|c| format!("{} {} (model {})", c.name(), now[*c as usize], self.want[*c as usize])).collect();
            problems.push(format!("counters differ ({}): {}", want.seen.name(), d.join(", ")));
        }
        if let Some(slot) = want.slot {
            let live = self.live.as_mut().expect("opened");
            let w = live.want.iter_mut().find(|(s, _)| *s == slot).expect("a slot of the live rule file");
            w.1 = add(w.1, RuleCounters { packets: 1, bytes: len as u64, dropped: u64::from(want.verdict == Verdict::Drop) });
            let got = self.filter.maps.rule_counters(slot).unwrap();
            if got != w.1 {
                problems.push(format!("{} {} (model {})", slot_name(slot), show(&got), show(&w.1)));
            }
        }
        problems
    }

    /// After a mismatch at frame `i`: the next frames start from what the
    /// filter counted. Returns how to replay, and the rule file.
    fn resync(&mut self, i: u64) -> String {
        self.want = self.filter.maps.counters().unwrap();
        let live = self.live.as_mut().expect("opened");
        for (s, w) in live.want.iter_mut() {
            *w = self.filter.maps.rule_counters(*s).unwrap();
        }
        let (n, first) = (live.n, live.first);
        let replay = format!("rule file {n} starts at frame {first}: XNF_FUZZ_FIRST={first} XNF_FUZZ_FRAMES={} replays its buckets", i - first + 1);
        let file = if std::mem::replace(&mut live.shown, true) { "(rule file as above)".to_string() } else { describe(&live.text, &live.lists) };
        format!("{replay}\n{file}")
    }
}

/// A rule file and its lists, for failure reports.
fn describe(text: &str, lists: &BTreeMap<String, Vec<IpNet>>) -> String {
    let l: Vec<String> = lists.iter().map(|(k, v)| format!("{k}: {}", v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" "))).collect();
    format!("--- rule file ---\n{text}--- lists ---\n{}\n---", l.join("\n"))
}

/// The sequence number of a TCP frame (a SYN-ACK's cookie), else 0.
fn cookie_of(frame: &[u8]) -> u32 {
    match xnf_packet::parse(frame).map(|p| p.l4) {
        Ok(xnf_packet::L4Info::Tcp { seq, .. }) => seq,
        _ => 0,
    }
}

#[test]
fn the_filter_does_what_its_rules_say_on_every_frame() {
    let fuzz = Fuzz::from_env("filter", DEFAULT_FRAMES);
    let world = world();
    let mut run = Run::new(fuzz.seed);
    let mut index = fuzz.first;
    fuzz.run(|rng| {
        let mut input = frame(rng, &world);
        vary_l4(rng, &mut input);
        let problems = run.check(index, &input);
        index += 1;
        (input, if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) })
    });
    let last = run.close();
    assert!(last.is_empty(), "{}", last.join("\n"));
    let histogram: Vec<_> = run.seen.iter().map(|(s, n)| format!("{} {n}", s.name())).collect();
    eprintln!("fuzz filter: frames per outcome: {}", histogram.join(", "));
    // Every outcome must be reached: a generator that stops reaching one
    // tests nothing there.
    if fuzz.frames >= DEFAULT_FRAMES {
        let mut all = vec![Seen::NonIp, Seen::Malformed, Seen::Qinq, Seen::Default { drop: false }, Seen::Default { drop: true }];
        for action in ["drop", "pass", "count", "rate-pass", "rate-drop"] {
            all.push(Seen::Rule { action, unsure: false });
        }
        for action in ["drop", "rate-pass", "rate-drop", "cookie-drop"] {
            all.push(Seen::Rule { action, unsure: true });
        }
        all.push(Seen::Rule { action: "syn-cookie", unsure: false });
        all.push(Seen::Rule { action: "cookie-drop", unsure: false });
        let missed: Vec<_> = all.iter().filter(|s| !run.seen.contains_key(s)).map(|s| s.name()).collect();
        assert!(missed.is_empty(), "no frame got {missed:?}");
    }
}
