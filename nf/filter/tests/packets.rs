//! Packet tests of `filter.bpf.c` through `BPF_PROG_TEST_RUN`.
//!
//! One row per case: description, the rule file it runs under (named: the
//! rule files are below, several rows share one), the input frame, the
//! verdict, and the whole counter delta. A row names the counters its
//! frame moves besides the two every frame moves (`rx`, and `pass` or
//! `drop` by the verdict), and the rule slot that takes it (a rule, the
//! default's slot, or none), whose packets and bytes grow by one frame and
//! whose `dropped` grows when the verdict is drop. Every other counter,
//! every other rule slot's included, must stay still. The filter never
//! changes a frame: every output is the input.
//!
//! Rows run in order on one filter instance, so rows of one rate-limit
//! rule file see the buckets the rows before them emptied.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use common::{Filter, Snapshot};
use ipnet::IpNet;
use xnf_filter::program::{Counter, RuleCounters, RULE_DEFAULT};
use xnf_packet::{EtherType, IpProtocol, MacAddr, PacketBuilder, TcpFlags};
use xnf_testrun::table::{assert_table, check_run, Out};
use xnf_testrun::Verdict;

use Counter::{Counted, DefaultDrop, DefaultPass, Malformed, NonIp, Qinq, RateDrop, RatePass, RuleDrop, RulePass, Unsure};

const PAYLOAD: &[u8] = b"xnf filter packet test";
const SRC4: &str = "198.18.0.10";
const DST4: &str = "198.18.1.1";
const SRC6: &str = "2001:db8::10";
const DST6: &str = "2001:db8:1::1";

/// Which rule slot a frame moves.
#[derive(Clone, Copy, Debug)]
enum Hit {
    /// None (not IP, malformed: no rule is consulted).
    Nothing,
    Rule(u32),
    Default,
}

struct Case {
    desc: String,
    set: &'static str,
    input: Vec<u8>,
    verdict: Verdict,
    counters: Vec<Counter>,
    hit: Hit,
}

/// The rule files, by name. `[lists]` entries are filled from [`lists`].
const SETS: &[(&str, &str)] = &[
    (
        "actions",
        r#"
[[rule]]
name = "drop v4"
dst = "198.18.10.1"
action = "drop"
[[rule]]
name = "pass v4"
dst = "198.18.10.2"
action = "pass"
[[rule]]
name = "count v4"
dst = "198.18.10.3"
action = "count"
[[rule]]
name = "drop v6"
dst = "2001:db8:10::1"
action = "drop"
[[rule]]
name = "pass v6"
dst = "2001:db8:10::2"
action = "pass"
[[rule]]
name = "count v6"
dst = "2001:db8:10::3"
action = "count"
[[rule]]
name = "wide first"
src = "198.18.20.0/24"
action = "drop"
[[rule]]
name = "narrow after wide"
src = "198.18.20.5"
action = "pass"
[[rule]]
name = "narrow first"
src = "198.18.21.5"
action = "pass"
[[rule]]
name = "wide after narrow"
src = "198.18.21.0/24"
action = "drop"
[[rule]]
name = "v6 sources"
src = "2001:db8:20::/48"
action = "drop"
"#,
    ),
    (
        "default-drop",
        r#"
default = "drop"
[[rule]]
name = "web"
proto = "tcp"
dport = 80
action = "pass"
"#,
    ),
    (
        "lists",
        r#"
[lists]
bad = "bad.txt"
good = "good.txt"
empty = "empty.txt"
[[rule]]
name = "nothing listed"
src = "@empty"
action = "drop"
[[rule]]
name = "allowed destinations"
dst = "@good"
action = "pass"
[[rule]]
name = "listed sources"
src = "@bad"
action = "drop"
"#,
    ),
    (
        "l4",
        r#"
[[rule]]
name = "udp range"
proto = "udp"
dport = "5000-5010"
action = "drop"
[[rule]]
name = "syn"
proto = "tcp"
dport = 80
tcp_flags = "SYN,!ACK"
action = "drop"
[[rule]]
name = "ping"
proto = "icmp"
icmp_type = 8
action = "drop"
[[rule]]
name = "ping6"
proto = "icmpv6"
icmp_type = 128
action = "drop"
[[rule]]
name = "dns answers"
proto = "udp"
sport = 53
action = "count"
[[rule]]
name = "gre"
proto = "gre"
action = "drop"
[[rule]]
name = "sctp over v6"
family = "ipv6"
proto = "sctp"
action = "drop"
"#,
    ),
    (
        "vlan",
        r#"
[[rule]]
name = "vlan 100"
vlan = 100
action = "drop"
[[rule]]
name = "udp on vlan 200"
vlan = 200
proto = "udp"
action = "count"
[[rule]]
name = "host"
dst = "198.18.60.1"
action = "drop"
"#,
    ),
    ("length", "[[rule]]\nname = \"mid\"\nlength = \"100-200\"\naction = \"drop\"\n"),
    (
        "rate-pps",
        r#"
[[rule]]
name = "v4 sources"
src = "198.18.50.0/24"
action = "rate-limit"
pps = 1
burst = 3
[[rule]]
name = "v6 sources"
src = "2001:db8:50::/64"
action = "rate-limit"
pps = 1
burst = 2
"#,
    ),
    ("rate-bps", "[[rule]]\nname = \"bytes\"\nproto = \"udp\"\naction = \"rate-limit\"\nbps = 1\nburst = 260\n"),
    (
        // Rules with L4 fields that cannot be read: taken by drop and
        // rate-limit rules only.
        "fail-closed",
        r#"
[[rule]]
name = "pass port"
proto = "udp"
dport = 7000
action = "pass"
[[rule]]
name = "count port"
proto = "udp"
dport = 7000
action = "count"
[[rule]]
name = "drop port"
proto = "udp"
dport = 9000
action = "drop"
[[rule]]
name = "tcp rate"
proto = "tcp"
dport = 80
action = "rate-limit"
pps = 1000000
"#,
    ),
    (
        // Nothing but pass and count rules, then the default drop: an
        // unreadable L4 header must not pass by a rule that needs it.
        "pass-only",
        r#"
default = "drop"
[[rule]]
name = "pass port"
proto = "udp"
dport = 7000
action = "pass"
[[rule]]
name = "count port"
proto = "udp"
dport = 7000
action = "count"
[[rule]]
name = "web"
proto = "tcp"
dport = 80
action = "pass"
[[rule]]
name = "syn"
proto = "tcp"
tcp_flags = "SYN"
action = "pass"
[[rule]]
name = "ping"
proto = "icmp"
icmp_type = 8
action = "pass"
[[rule]]
name = "udp (protocol only)"
proto = "udp"
action = "count"
"#,
    ),
    ("proto-unknown", "[[rule]]\nname = \"udp pass\"\nproto = \"udp\"\naction = \"pass\"\n[[rule]]\nname = \"udp drop\"\nproto = \"udp\"\naction = \"drop\"\n"),
];

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|s| s.parse().expect("a prefix")).collect()
}

/// What the lists the rule files name hold.
fn lists() -> BTreeMap<String, Vec<IpNet>> {
    BTreeMap::from([
        (
            "bad".into(),
            nets(&[
                "198.18.30.0/24",
                "198.18.31.7/32",
                "198.18.32.0/23",
                "198.18.33.16/28",
                "198.18.34.16/28",
                "2001:db8:30::/64",
                "2001:db8:31::7/128",
                "3001:db8::/32",
            ]),
        ),
        ("good".into(), nets(&["198.18.40.0/24", "2001:db8:40::/64"])),
        ("empty".into(), vec![]),
    ])
}

fn eth() -> PacketBuilder {
    PacketBuilder::ethernet(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]))
}

fn addr(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

/// An IP packet from `src` to `dst` on `b` (an Ethernet builder).
fn ip_on(b: PacketBuilder, src: &str, dst: &str) -> PacketBuilder {
    b.ip(addr(src), addr(dst))
}

fn ip(src: &str, dst: &str) -> PacketBuilder {
    ip_on(eth(), src, dst)
}

fn udp(src: &str, dst: &str, sport: u16, dport: u16) -> Vec<u8> {
    ip(src, dst).udp(sport, dport).payload(PAYLOAD).build()
}

/// UDP from SRC4 to `dst` on `b` (an Ethernet builder, tagged or not).
fn udp_on(b: PacketBuilder, dst: &str) -> Vec<u8> {
    ip_on(b, SRC4, dst).udp(1, 2).payload(PAYLOAD).build()
}

fn tcp(src: &str, dst: &str, dport: u16, flags: TcpFlags) -> Vec<u8> {
    ip(src, dst).tcp(40000, dport, flags).payload(PAYLOAD).build()
}

/// An IPv4 packet of protocol `proto` whose L4 part is `l4` (cut short on
/// purpose), with `padding` after the IP packet.
fn short4(proto: IpProtocol, l4: &[u8], padding: &[u8]) -> Vec<u8> {
    ip(SRC4, DST4).protocol(proto).payload(l4).trailer(padding).build()
}

struct Table {
    cases: Vec<Case>,
}

impl Table {
    fn row(&mut self, desc: impl Into<String>, set: &'static str, input: Vec<u8>, verdict: Verdict, counters: &[Counter], hit: Hit) {
        self.cases.push(Case { desc: desc.into(), set, input, verdict, counters: counters.to_vec(), hit });
    }
    fn pass(&mut self, desc: impl Into<String>, set: &'static str, input: Vec<u8>, counters: &[Counter], hit: Hit) {
        self.row(desc, set, input, Verdict::Pass, counters, hit);
    }
    fn drop(&mut self, desc: impl Into<String>, set: &'static str, input: Vec<u8>, counters: &[Counter], hit: Hit) {
        self.row(desc, set, input, Verdict::Drop, counters, hit);
    }
}

fn actions_and_order(t: &mut Table) {
    let s = "actions";
    t.drop("IPv4 to a drop rule's destination", s, udp(SRC4, "198.18.10.1", 1, 2), &[RuleDrop], Hit::Rule(0));
    t.pass("IPv4 to a pass rule's destination", s, udp(SRC4, "198.18.10.2", 1, 2), &[RulePass], Hit::Rule(1));
    t.pass("IPv4 to a count rule's destination: counted and passed", s, udp(SRC4, "198.18.10.3", 1, 2), &[Counted], Hit::Rule(2));
    t.drop("IPv6 to a drop rule's destination", s, udp(SRC6, "2001:db8:10::1", 1, 2), &[RuleDrop], Hit::Rule(3));
    t.pass("IPv6 to a pass rule's destination", s, udp(SRC6, "2001:db8:10::2", 1, 2), &[RulePass], Hit::Rule(4));
    t.pass("IPv6 to a count rule's destination", s, udp(SRC6, "2001:db8:10::3", 1, 2), &[Counted], Hit::Rule(5));
    t.pass("IPv4 no rule takes: default pass", s, udp(SRC4, DST4, 1, 2), &[DefaultPass], Hit::Default);
    t.pass("IPv6 no rule takes: default pass", s, udp(SRC6, DST6, 1, 2), &[DefaultPass], Hit::Default);
    t.pass("IPv4 from a drop rule's address (a dst rule): default", s, udp("198.18.10.1", DST4, 1, 2), &[DefaultPass], Hit::Default);
    t.drop("first match: a /24 drop before a /32 pass of the source", s, udp("198.18.20.5", DST4, 1, 2), &[RuleDrop], Hit::Rule(6));
    t.pass("first match: a /32 pass before a /24 drop of the source", s, udp("198.18.21.5", DST4, 1, 2), &[RulePass], Hit::Rule(8));
    t.drop("the /24 drop after the /32 takes its other addresses", s, udp("198.18.21.6", DST4, 1, 2), &[RuleDrop], Hit::Rule(9));
    t.drop("IPv6 source inside a /48", s, udp("2001:db8:20:ffff::1", DST6, 1, 2), &[RuleDrop], Hit::Rule(10));
    t.pass("IPv6 source just outside the /48", s, udp("2001:db8:21::1", DST6, 1, 2), &[DefaultPass], Hit::Default);
}

fn default_drop_and_not_rules(t: &mut Table) {
    let s = "default-drop";
    t.pass("default drop: TCP to port 80 passes by rule", s, tcp(SRC4, DST4, 80, TcpFlags::SYN), &[RulePass], Hit::Rule(0));
    t.drop("default drop: IPv4 UDP no rule takes", s, udp(SRC4, DST4, 1, 2), &[DefaultDrop], Hit::Default);
    t.drop("default drop: IPv6 UDP no rule takes", s, udp(SRC6, DST6, 1, 2), &[DefaultDrop], Hit::Default);
    let arp = eth().arp_request(MacAddr([2, 0, 0, 0, 0, 1]), "198.18.0.10".parse().unwrap(), "198.18.0.1".parse().unwrap()).build();
    t.pass("ARP passes whatever the default: not IP", s, arp, &[NonIp], Hit::Nothing);
    t.pass("LLDP passes: not IP", s, eth().ethertype(EtherType(0x88cc)).payload(PAYLOAD).build(), &[NonIp], Hit::Nothing);
    let web = |b: PacketBuilder| ip_on(b, SRC4, DST4).tcp(40000, 80, TcpFlags::SYN).payload(PAYLOAD).build();
    t.drop("QinQ (802.1ad) meets the default drop, not the pass rule it matches", s, web(eth().qinq(10).vlan(20)), &[Qinq, DefaultDrop], Hit::Default);
    t.drop("stacked 802.1Q tags meet the default drop", s, web(eth().tag(EtherType::VLAN, 20).tag(EtherType::VLAN, 30)), &[Qinq, DefaultDrop], Hit::Default);
    t.pass(
        "QinQ under a default pass passes, not meeting the drop rule it matches",
        "actions",
        udp_on(eth().qinq(10).vlan(20), "198.18.10.1"),
        &[Qinq, DefaultPass],
        Hit::Default,
    );

    // Malformed: dropped whatever the rules and default (the kernel would drop it).
    let good4 = web(eth());
    let mut b = good4.clone();
    b[14] = 0x44;
    t.drop("IPv4 IHL 4 (< 5) is malformed, under a default pass too", "actions", b, &[Malformed], Hit::Nothing);
    let mut b = good4.clone();
    let tot = (b.len() - 14 + 1) as u16;
    b[16..18].copy_from_slice(&tot.to_be_bytes());
    t.drop("IPv4 total length one beyond the frame is malformed", s, b, &[Malformed], Hit::Nothing);
    let mut b = good4.clone();
    b[16..18].copy_from_slice(&19u16.to_be_bytes());
    t.drop("IPv4 total length below its header is malformed", s, b, &[Malformed], Hit::Nothing);
    let mut b = udp(SRC6, DST6, 1, 2);
    let plen = (b.len() - 54 + 1) as u16;
    b[18..20].copy_from_slice(&plen.to_be_bytes());
    t.drop("IPv6 payload length one beyond the frame is malformed", "actions", b, &[Malformed], Hit::Nothing);
    let mut b = good4.clone();
    b[14] = 0x65;
    t.drop("IPv4 ethertype carrying version 6 is malformed", s, b, &[Malformed], Hit::Nothing);
    t.drop("a VLAN tag cut by the end of the frame is malformed", s, udp_on(eth().vlan(100), DST4)[..16].to_vec(), &[Malformed], Hit::Nothing);
}

/// The lists' rows, with the lists as tries alone (`lists`) and with
/// their IPv4 bitmaps (`lists-bitmap`: its /24 rows answered by the
/// bitmap, its /32 rows by the trie behind it).
fn lists_rows(t: &mut Table) {
    lists_rows_in(t, "lists");
    lists_rows_in(t, "lists-bitmap");
}

fn lists_rows_in(t: &mut Table, s: &'static str) {
    t.drop("source in a listed /24", s, udp("198.18.30.200", DST4, 1, 2), &[RuleDrop], Hit::Rule(2));
    t.drop("source is a listed /32", s, udp("198.18.31.7", DST4, 1, 2), &[RuleDrop], Hit::Rule(2));
    t.pass("source next to a listed /32: in no list", s, udp("198.18.31.8", DST4, 1, 2), &[DefaultPass], Hit::Default);
    t.drop("source in a listed /23's second /24", s, udp("198.18.33.200", DST4, 1, 2), &[RuleDrop], Hit::Rule(2));
    t.drop("source in a listed /28 alone in its /24", s, udp("198.18.34.20", DST4, 1, 2), &[RuleDrop], Hit::Rule(2));
    t.pass("source in the /24 of a listed /28, not in it", s, udp("198.18.34.40", DST4, 1, 2), &[DefaultPass], Hit::Default);
    t.drop("IPv6 source in a listed /64", s, udp("2001:db8:30::abcd", DST6, 1, 2), &[RuleDrop], Hit::Rule(2));
    t.drop("IPv6 source is a listed /128", s, udp("2001:db8:31::7", DST6, 1, 2), &[RuleDrop], Hit::Rule(2));
    t.pass("IPv6 source next to a listed /128", s, udp("2001:db8:31::8", DST6, 1, 2), &[DefaultPass], Hit::Default);
    t.pass("listed source to a destination of the allow list before it: pass", s, udp("198.18.30.1", "198.18.40.9", 1, 2), &[RulePass], Hit::Rule(1));
    t.pass("IPv6 to the allow list", s, udp(SRC6, "2001:db8:40::1", 1, 2), &[RulePass], Hit::Rule(1));
    // 48.1.13.184 is 3001:0db8 as bytes: the family keeps it out of 3001:db8::/32.
    t.pass("IPv4 whose bytes begin a listed IPv6 /32 is not in the list", s, udp("48.1.13.184", DST4, 1, 2), &[DefaultPass], Hit::Default);
}

fn l4_rows(t: &mut Table) {
    let s = "l4";
    t.pass("UDP dport 4999: below the range", s, udp(SRC4, DST4, 1, 4999), &[DefaultPass], Hit::Default);
    t.drop("UDP dport 5000: the range's low edge", s, udp(SRC4, DST4, 1, 5000), &[RuleDrop], Hit::Rule(0));
    t.drop("UDP dport 5010: the range's high edge", s, udp(SRC4, DST4, 1, 5010), &[RuleDrop], Hit::Rule(0));
    t.pass("UDP dport 5011: one above the range", s, udp(SRC4, DST4, 1, 5011), &[DefaultPass], Hit::Default);
    t.drop("IPv6 UDP dport 5005", s, udp(SRC6, DST6, 1, 5005), &[RuleDrop], Hit::Rule(0));
    t.pass("TCP dport 5005: a UDP rule's port, another protocol", s, tcp(SRC4, DST4, 5005, TcpFlags::SYN), &[DefaultPass], Hit::Default);
    t.drop("TCP SYN to 80 (SYN,!ACK)", s, tcp(SRC4, DST4, 80, TcpFlags::SYN), &[RuleDrop], Hit::Rule(1));
    t.pass("TCP SYN-ACK to 80: ACK must be clear", s, tcp(SRC4, DST4, 80, TcpFlags::SYN | TcpFlags::ACK), &[DefaultPass], Hit::Default);
    t.pass("TCP ACK to 80: SYN must be set", s, tcp(SRC4, DST4, 80, TcpFlags::ACK), &[DefaultPass], Hit::Default);
    t.drop("IPv6 TCP SYN to 80", s, tcp(SRC6, DST6, 80, TcpFlags::SYN), &[RuleDrop], Hit::Rule(1));
    t.drop("ICMP echo request (type 8)", s, ip(SRC4, DST4).icmpv4_echo(1, 1).payload(PAYLOAD).build(), &[RuleDrop], Hit::Rule(2));
    t.pass("ICMP echo reply (type 0)", s, ip(SRC4, DST4).icmpv4_echo_reply(1, 1).payload(PAYLOAD).build(), &[DefaultPass], Hit::Default);
    t.drop("ICMPv6 echo request (type 128)", s, ip(SRC6, DST6).icmpv6_echo(1, 1).payload(PAYLOAD).build(), &[RuleDrop], Hit::Rule(3));
    t.pass("ICMPv6 echo reply (type 129)", s, ip(SRC6, DST6).icmpv6_echo_reply(1, 1).payload(PAYLOAD).build(), &[DefaultPass], Hit::Default);
    t.pass("UDP from port 53: counted and passed", s, udp(SRC4, DST4, 53, 40000), &[Counted], Hit::Rule(4));
    t.drop("GRE (proto only)", s, ip(SRC4, DST4).protocol(IpProtocol(47)).payload(PAYLOAD).build(), &[RuleDrop], Hit::Rule(5));
    t.pass("SCTP over IPv4: the rule is IPv6 only", s, ip(SRC4, DST4).protocol(IpProtocol(132)).payload(PAYLOAD).build(), &[DefaultPass], Hit::Default);
    t.drop("SCTP over IPv6", s, ip(SRC6, DST6).protocol(IpProtocol(132)).payload(PAYLOAD).build(), &[RuleDrop], Hit::Rule(6));
    let opts = ip(SRC4, DST4).ipv4_options(&[0x94, 0x04, 0, 0]).udp(1, 5005).payload(PAYLOAD).build();
    t.drop("IPv4 with options: ports read after them", s, opts, &[RuleDrop], Hit::Rule(0));
    let ext = ip(SRC6, DST6).ipv6_ext(IpProtocol::HOPOPTS, &[0; 6]).ipv6_ext(IpProtocol::DSTOPTS, &[0; 14]).udp(1, 5005).payload(PAYLOAD).build();
    t.drop("IPv6 hop-by-hop + destination options, then UDP: ports read", s, ext, &[RuleDrop], Hit::Rule(0));
}

fn vlan_and_length(t: &mut Table) {
    let s = "vlan";
    t.drop("VLAN 100 IPv4", s, udp_on(eth().vlan(100), DST4), &[RuleDrop], Hit::Rule(0));
    t.drop("VLAN 100 IPv6", s, ip_on(eth().vlan(100), SRC6, DST6).udp(1, 2).build(), &[RuleDrop], Hit::Rule(0));
    t.pass("VLAN 101: another VID", s, udp_on(eth().vlan(101), DST4), &[DefaultPass], Hit::Default);
    t.pass("untagged: a vlan rule needs a tag", s, udp_on(eth(), DST4), &[DefaultPass], Hit::Default);
    t.pass("VLAN 200 UDP: counted", s, udp_on(eth().vlan(200), DST4), &[Counted], Hit::Rule(1));
    t.pass("priority tag (VID 0, PCP 5): untagged for vlan rules", s, udp_on(eth().vlan_pcp(0, 5), DST4), &[DefaultPass], Hit::Default);
    t.drop("priority tag meets rules without vlan", s, udp_on(eth().vlan_pcp(0, 5), "198.18.60.1"), &[RuleDrop], Hit::Rule(2));
    t.drop("a rule without vlan takes any tag (VID 300)", s, udp_on(eth().vlan(300), "198.18.60.1"), &[RuleDrop], Hit::Rule(2));

    let s = "length";
    let sized = |len: usize| ip(SRC4, DST4).udp(1, 2).frame_len(len).build();
    t.pass("99-byte frame: below 100-200", s, sized(99), &[DefaultPass], Hit::Default);
    t.drop("100-byte frame: low edge", s, sized(100), &[RuleDrop], Hit::Rule(0));
    t.drop("200-byte frame: high edge", s, sized(200), &[RuleDrop], Hit::Rule(0));
    t.pass("201-byte frame: above", s, sized(201), &[DefaultPass], Hit::Default);
    t.drop("IPv6 150-byte frame", s, ip(SRC6, DST6).udp(1, 2).frame_len(150).build(), &[RuleDrop], Hit::Rule(0));
    let trailer = ip(SRC4, DST4).udp(1, 2).payload(&[0; 48]).trailer(&[0; 20]).build();
    assert_eq!(trailer.len(), 110);
    t.drop("90 bytes of IPv4 and a 20-byte trailer: the length is the frame's, 110", s, trailer, &[RuleDrop], Hit::Rule(0));
}

fn rate_limits(t: &mut Table) {
    let s = "rate-pps";
    for i in 1..=5 {
        let f = udp("198.18.50.1", DST4, 1, 2);
        if i <= 3 {
            t.pass(format!("pps 1 burst 3: frame {i} of 5 from one source is within"), s, f, &[RatePass], Hit::Rule(0));
        } else {
            t.drop(format!("pps 1 burst 3: frame {i} of 5 from one source is over"), s, f, &[RateDrop], Hit::Rule(0));
        }
    }
    t.pass("another source of the same rule has its own bucket", s, udp("198.18.50.2", DST4, 1, 2), &[RatePass], Hit::Rule(0));
    for i in 1..=3 {
        let f = udp("2001:db8:50::1", DST6, 1, 2);
        if i <= 2 {
            t.pass(format!("IPv6 pps 1 burst 2: frame {i} of 3 is within"), s, f, &[RatePass], Hit::Rule(1));
        } else {
            t.drop(format!("IPv6 pps 1 burst 2: frame {i} of 3 is over"), s, f, &[RateDrop], Hit::Rule(1));
        }
    }
    // A 260-byte bucket: 100 + 100 fit, the third 100 does not, a 60 does.
    let s = "rate-bps";
    let sized = |len: usize| ip("198.18.51.1", DST4).udp(1, 2).frame_len(len).build();
    t.pass("bps 1 burst 260: first 100 bytes within", s, sized(100), &[RatePass], Hit::Rule(0));
    t.pass("bps 1 burst 260: second 100 bytes within", s, sized(100), &[RatePass], Hit::Rule(0));
    t.drop("bps 1 burst 260: third 100 bytes over (60 left)", s, sized(100), &[RateDrop], Hit::Rule(0));
    t.pass("bps 1 burst 260: 60 bytes fit the 60 left", s, sized(60), &[RatePass], Hit::Rule(0));
    t.drop("bps 1 burst 260: then nothing is left", s, sized(60), &[RateDrop], Hit::Rule(0));
}

fn fail_closed(t: &mut Table) {
    let s = "fail-closed";
    let frag4 = |offset: u16, more: bool, dport: u16| ip(SRC4, DST4).fragment(offset, more).ident(9).udp(1, dport).payload(PAYLOAD).build();
    t.drop("IPv4 first fragment: ports read, dport 9000 dropped", s, frag4(0, true, 9000), &[RuleDrop], Hit::Rule(2));
    t.pass("IPv4 first fragment: dport 7000 passes by its rule", s, frag4(0, true, 7000), &[RulePass], Hit::Rule(0));
    t.drop("IPv4 later fragment: pass/count rules with ports skip it, the drop rule takes it", s, frag4(100, false, 7000), &[Unsure, RuleDrop], Hit::Rule(2));
    let later_tcp = ip(SRC4, DST4).fragment(100, true).tcp(1, 80, TcpFlags::ACK).payload(PAYLOAD).build();
    t.pass("IPv4 later TCP fragment: taken by a rate-limit rule with ports, within", s, later_tcp, &[Unsure, RatePass], Hit::Rule(3));
    t.drop("UDP header cut to 2 bytes: a drop rule with ports takes it", s, short4(IpProtocol::UDP, &[0x1b, 0x58], &[]), &[Unsure, RuleDrop], Hit::Rule(2));
    let frag6 = |offset: u16, dport: u16| ip(SRC6, DST6).fragment(offset, offset == 0).ident(0x1234_5678).udp(1, dport).payload(PAYLOAD).build();
    t.drop("IPv6 later fragment (fragment header): the drop rule with ports takes it", s, frag6(100, 7000), &[Unsure, RuleDrop], Hit::Rule(2));
    t.pass("IPv6 first fragment: ports read, dport 7000 passes", s, frag6(0, 7000), &[RulePass], Hit::Rule(0));

    let s = "pass-only";
    t.pass("later UDP fragment: pass/count rules with ports skip it, a protocol-only rule takes it", s, frag4(100, false, 7000), &[Counted], Hit::Rule(5));
    let later_tcp = ip(SRC4, DST4).fragment(100, false).tcp(1, 80, TcpFlags::SYN).payload(PAYLOAD).build();
    t.drop("later TCP fragment: no pass rule with ports or flags takes it; the default drop does", s, later_tcp, &[DefaultDrop], Hit::Default);
    t.pass("whole UDP to 7000 passes by its rule", s, udp(SRC4, DST4, 1, 7000), &[RulePass], Hit::Rule(0));
    // Ethernet padding after a short IP packet is not part of it: bytes that
    // would read as dport 80, SYN, ICMP type 8 must not be read.
    let pad = |first: &[u8]| {
        let mut p = first.to_vec();
        p.resize(40, 0);
        p
    };
    let f = short4(IpProtocol::TCP, &[0x9c, 0x40], &pad(&[0x00, 0x50]));
    t.drop("TCP cut after its sport; padding spells dport 80: no port is read", s, f, &[DefaultDrop], Hit::Default);
    let mut cut = vec![0x9c, 0x40, 0x00, 0x51, 0, 0, 0, 1, 0, 0, 0, 0, 0x50];
    let f = short4(IpProtocol::TCP, &cut, &pad(&[0x02]));
    t.drop("TCP to 81 cut before its flags; padding spells SYN: flags not read", s, f, &[DefaultDrop], Hit::Default);
    cut.push(0x02);
    let f = short4(IpProtocol::TCP, &cut, &pad(&[]));
    t.pass("TCP to 81 cut just after its flags (SYN): flags read", s, f, &[RulePass], Hit::Rule(3));
    let f = short4(IpProtocol::ICMP, &[], &pad(&[0x08]));
    t.drop("ICMP with no header; padding spells type 8: the type is not read", s, f, &[DefaultDrop], Hit::Default);
    let f = short4(IpProtocol::ICMP, &[0x08], &pad(&[]));
    t.pass("ICMP of one byte, type 8: read", s, f, &[RulePass], Hit::Rule(4));

    let s = "proto-unknown";
    let chain = |n: usize| (0..n).fold(ip(SRC6, DST6), |b, _| b.ipv6_ext(IpProtocol::DSTOPTS, &[0; 6])).udp(1, 2).payload(PAYLOAD).build();
    t.pass("IPv6 with 8 extension headers: UDP found, the pass rule takes it", s, chain(8), &[RulePass], Hit::Rule(0));
    t.drop("IPv6 with 9 extension headers: protocol unknown, only the drop rule takes it", s, chain(9), &[Unsure, RuleDrop], Hit::Rule(1));
    let cut = ip(SRC6, DST6).ipv6_ext(IpProtocol::HOPOPTS, &[0; 6]).protocol(IpProtocol::DSTOPTS).build();
    t.drop("IPv6 chain cut by the end of the packet (a header announced, none there): protocol unknown", s, cut, &[Unsure, RuleDrop], Hit::Rule(1));
    let mut long = ip(SRC6, DST6).ipv6_ext(IpProtocol::HOPOPTS, &[0; 6]).udp(1, 2).build();
    long[14 + 40 + 1] = 200; // the hop-by-hop header claims 1608 bytes
    t.pass("IPv6 last extension header longer than the packet: UDP known, ports not", s, long, &[RulePass], Hit::Rule(0));
    t.pass("IPv4 later UDP fragment: the protocol is known, the pass rule takes it", s, frag4(100, false, 9), &[RulePass], Hit::Rule(0));
}

fn cases() -> Vec<Case> {
    let mut t = Table { cases: Vec::new() };
    actions_and_order(&mut t);
    default_drop_and_not_rules(&mut t);
    lists_rows(&mut t);
    l4_rows(&mut t);
    vlan_and_length(&mut t);
    rate_limits(&mut t);
    fail_closed(&mut t);
    t.cases
}

/// The whole delta a case expects.
fn expected(c: &Case) -> Snapshot {
    let mut want = Snapshot::zero();
    let verdict = if c.verdict == Verdict::Drop { Counter::Drop } else { Counter::Pass };
    for k in [Counter::Rx, verdict].iter().chain(&c.counters) {
        want.counters[*k as usize] += 1;
    }
    let slot = match c.hit {
        Hit::Nothing => None,
        Hit::Rule(i) => Some(i),
        Hit::Default => Some(RULE_DEFAULT),
    };
    if let Some(slot) = slot {
        let dropped = u64::from(c.verdict == Verdict::Drop);
        want.rules[slot as usize] = RuleCounters { packets: 1, bytes: c.input.len() as u64, dropped };
    }
    want
}

/// Runs the cases in order on `f`, applying each one's rule file when it
/// changes (a case with no rule file runs under the one live); one line
/// per failed case.
fn run_table(f: &Filter, cases: &[Case]) -> Vec<String> {
    let sets: BTreeMap<&str, &str> = SETS.iter().copied().collect();
    let lists = lists();
    let mut live = "";
    let mut failures = Vec::new();
    for c in cases {
        if !c.set.is_empty() && c.set != live {
            let text = sets[c.set.trim_end_matches("-bitmap")];
            f.apply_as(text, &lists, Some(c.set.ends_with("-bitmap"))).unwrap_or_else(|e| panic!("rule file {}: {e:#}", c.set));
            live = c.set;
        }
        failures.extend(check_case(f, c).map(|why| format!("{} [{}]: {why}\n    frame {}", c.desc, c.set, xnf_testrun::frames::hex(&c.input))));
    }
    failures
}

/// What is wrong with one case's run, if anything.
fn check_case(f: &Filter, c: &Case) -> Option<String> {
    let before = f.snapshot().unwrap();
    let res = match f.run(&c.input) {
        Ok(r) => r,
        Err(e) => return Some(format!("test run failed: {e:#}")),
    };
    let delta = f.snapshot().unwrap().delta(&before);
    let mut problems = check_run(&res, c.verdict, &c.input, &Out::Unchanged, false);
    let moved = delta.diff(&expected(c));
    if !moved.is_empty() {
        problems.push(format!("counters: {}", moved.join(", ")));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

#[test]
fn filter_packet_table() {
    let f = Filter::load().unwrap();
    let cases = cases();
    let failures = run_table(&f, &cases);
    assert_table("filter", cases.len(), 100, &failures);
}

/// One TCP SYN to port 80, cut at every length two ways: the frame itself
/// (then the IP header's length is beyond the frame: malformed, or a cut
/// Ethernet/IP header: malformed too), and the IP packet with its length
/// fields saying so (the L4 header cut short: a pass rule needing port 80
/// and ACK skips it while any of that is unread; the drop rule for
/// SYN,!ACK takes it fail-closed until its flags byte is in).
#[test]
fn every_truncation_of_a_tcp_syn() {
    const TRUNC: &str = "[[rule]]\nname = \"web ack\"\nproto = \"tcp\"\ndport = 80\ntcp_flags = \"ACK\"\naction = \"pass\"\n\
                         [[rule]]\nname = \"syn\"\nproto = \"tcp\"\ntcp_flags = \"SYN,!ACK\"\naction = \"drop\"\n";
    let f = Filter::load().unwrap();
    f.apply(TRUNC, &BTreeMap::new()).unwrap();
    let mut t = Table { cases: Vec::new() };
    for (fam, src, dst) in [("IPv4", SRC4, DST4), ("IPv6", SRC6, DST6)] {
        let whole = ip(src, dst).tcp(40000, 80, TcpFlags::SYN).build();
        for len in 14..whole.len() {
            t.drop(format!("{fam} SYN frame cut to {len} bytes"), "", whole[..len].to_vec(), &[Malformed], Hit::Nothing);
        }
        t.drop(format!("{fam} SYN whole"), "", whole.clone(), &[RuleDrop], Hit::Rule(1));
        for l4 in 0..20 {
            let input = ip(src, dst).protocol(IpProtocol::TCP).payload(&whole[whole.len() - 20..][..l4]).build();
            let unsure: &[Counter] = if l4 < 14 { &[Unsure, RuleDrop] } else { &[RuleDrop] };
            t.drop(format!("{fam} SYN with {l4} bytes of TCP header"), "", input, unsure, Hit::Rule(1));
        }
    }
    let failures = run_table(&f, &t.cases);
    // IPv4: 40 cut frames, the whole, 20 cut TCP headers; IPv6: 60, 1, 20.
    assert_table("TCP SYN truncation", t.cases.len(), 142, &failures);
}

/// A thousand rules, the one that drops the flood last after 999 for other
/// ports; then a thousand with addresses (a source /32 each and a port),
/// which the data plane checks candidate by candidate. Each frame meets
/// exactly its own rule, or the default; and the kernel matrix runs this
/// table, so the oldest kernel's verifier takes the program with them.
#[test]
fn a_thousand_rules() {
    let f = Filter::load().unwrap();
    let ports: String = (0..999).map(|i| format!("[[rule]]\nproto = \"udp\"\ndport = {}\naction = \"drop\"\n", 10_000 + i)).collect();
    f.apply(&format!("{ports}[[rule]]\nproto = \"udp\"\ndport = 9\naction = \"drop\"\n"), &BTreeMap::new()).unwrap();
    let mut t = Table { cases: Vec::new() };
    t.drop("1000 port rules: the flood meets the last", "", udp(SRC4, DST4, 1234, 9), &[RuleDrop], Hit::Rule(999));
    t.drop("1000 port rules: the 501st", "", udp(SRC6, DST6, 1234, 10_500), &[RuleDrop], Hit::Rule(500));
    t.pass("1000 port rules: a port none has", "", udp(SRC4, DST4, 1234, 53), &[DefaultPass], Hit::Default);
    let mut failures = run_table(&f, &t.cases);
    let hosts: String =
        (0..999).map(|i| format!("[[rule]]\nsrc = \"198.18.{}.{}/32\"\nproto = \"udp\"\ndport = 9\naction = \"drop\"\n", 100 + i / 250, i % 250)).collect();
    f.apply(&format!("{hosts}[[rule]]\nsrc = \"{SRC4}/32\"\nproto = \"udp\"\ndport = 9\naction = \"drop\"\n"), &BTreeMap::new()).unwrap();
    let mut t = Table { cases: Vec::new() };
    t.drop("1000 address rules: the last", "", udp(SRC4, DST4, 1234, 9), &[RuleDrop], Hit::Rule(999));
    t.drop("1000 address rules: the 252nd", "", udp("198.18.101.1", DST4, 1234, 9), &[RuleDrop], Hit::Rule(251));
    t.pass("1000 address rules: another source", "", udp("198.18.0.99", DST4, 1234, 9), &[DefaultPass], Hit::Default);
    t.pass("1000 address rules: another port", "", udp(SRC4, DST4, 1234, 10), &[DefaultPass], Hit::Default);
    failures.extend(run_table(&f, &t.cases));
    assert_table("a thousand rules", 7, 7, &failures);
}
