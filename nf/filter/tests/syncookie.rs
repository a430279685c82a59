//! Packet tests of the syn-cookie action (`syncookie.h`) through
//! `BPF_PROG_TEST_RUN`: the one action that writes frames.
//!
//! One row per case: description, input, verdict, the exact frame that
//! comes out, and the whole counter delta (the counters a row names besides
//! `rx`, and the one rule's packets, bytes and drops; nothing else moves).
//! A SYN-ACK's sequence number is a cookie made with the kernel's secret,
//! which no test can know: the expected frame takes it from the output, and
//! the rows after it show the kernel's own check accepts it — an ACK that
//! acknowledges it passes, an ACK off by one, from another port or another
//! address does not. Checksums of every frame the filter writes are checked
//! on their own (`xnf_packet::parse`), besides being compared byte by byte
//! with the builder's.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use common::{synack, Filter, Snapshot, Syn};
use xnf_filter::program::{Counter, RuleCounters, RULE_DEFAULT};
use xnf_packet::{IpProtocol, MacAddr, PacketBuilder, TcpFlags};
use xnf_testrun::table::{assert_table, check_run, Out};
use xnf_testrun::Verdict;

use Counter::{CookieDrop, CookieOk, CookieUnchecked, DefaultPass, Qinq, Tx, Unsure};

const RULES: &str = r#"
[[rule]]
name = "web"
proto = "tcp"
dport = 80
action = "syn-cookie"
mss = 1400
"#;

const CLIENT4: &str = "198.18.0.10";
const SERVER4: &str = "198.18.1.1";
const CLIENT6: &str = "2001:db8::10";
const SERVER6: &str = "2001:db8:1::1";
const MAC_CLIENT: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_SERVER: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const SEQ: u32 = 0x1234_5678;
/// The client's MSS option (1460).
const CLIENT_MSS: [u8; 4] = [2, 4, 0x05, 0xb4];

fn addr(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

/// Client to server on `b` (an Ethernet builder).
fn seg_on(b: PacketBuilder, v6: bool, sport: u16, flags: TcpFlags) -> PacketBuilder {
    let (c, s) = if v6 { (CLIENT6, SERVER6) } else { (CLIENT4, SERVER4) };
    b.ip(addr(c), addr(s)).tcp(sport, 80, flags).seq(SEQ)
}

fn eth() -> PacketBuilder {
    PacketBuilder::ethernet(MAC_CLIENT, MAC_SERVER)
}

fn seg(v6: bool, flags: TcpFlags) -> PacketBuilder {
    seg_on(eth(), v6, 40000, flags)
}

fn syn(v6: bool) -> PacketBuilder {
    seg(v6, TcpFlags::SYN).tcp_options(&CLIENT_MSS)
}

/// The SYN-ACK the filter must send for a SYN from `sport` on `b` (a
/// server-to-client Ethernet builder), carrying `cookie`.
fn synack_on(b: PacketBuilder, v6: bool, sport: u16, cookie: u32) -> Vec<u8> {
    let (c, s) = if v6 { (CLIENT6, SERVER6) } else { (CLIENT4, SERVER4) };
    let syn = Syn { client: addr(c), server: addr(s), client_port: sport, server_port: 80, seq: SEQ };
    synack(b, &syn, cookie, if v6 { 1380 } else { 1400 })
}

/// The cookie a SYN-ACK carries (its sequence number), if it is one.
fn cookie_of(frame: &[u8]) -> Option<u32> {
    match xnf_packet::parse(frame).ok()?.l4 {
        xnf_packet::L4Info::Tcp { seq, .. } => Some(seq),
        _ => None,
    }
}

enum Want {
    Unchanged,
    /// A SYN-ACK from this builder (server to client), sport, family.
    SynAck(Box<PacketBuilder>, u16, bool),
}

struct Case {
    desc: String,
    input: Vec<u8>,
    verdict: Verdict,
    out: Want,
    counters: Vec<Counter>,
    /// The rule slot the frame moves.
    slot: Option<u32>,
}

struct Table {
    f: Filter,
    /// The filter was loaded with conntrack's lookup.
    conntrack: bool,
    cases: usize,
    failures: Vec<String>,
}

impl Table {
    /// The filter loaded with RULES (conntrack's lookup where the kernel
    /// has it), no case run yet.
    fn new() -> Table {
        let f = Filter::load().unwrap();
        let conntrack = f.prog.conntrack();
        f.apply(RULES, &BTreeMap::new()).unwrap();
        Table { f, conntrack, cases: 0, failures: vec![] }
    }

    /// Runs one case at once (later rows use what earlier ones returned);
    /// returns the frame that came out.
    fn row(&mut self, desc: &str, input: Vec<u8>, verdict: Verdict, out: Want, counters: &[Counter], slot: Option<u32>) -> Vec<u8> {
        let c = Case { desc: desc.into(), input, verdict, out, counters: counters.to_vec(), slot };
        self.cases += 1;
        let before = self.f.snapshot().unwrap();
        let res = match self.f.run(&c.input) {
            Ok(r) => r,
            Err(e) => {
                self.failures.push(format!("{}: test run failed: {e:#}", c.desc));
                return vec![];
            }
        };
        let delta = self.f.snapshot().unwrap().delta(&before);
        let out = match &c.out {
            Want::Unchanged => Out::Unchanged,
            Want::SynAck(b, sport, v6) => Out::Frame(synack_on((**b).clone(), *v6, *sport, cookie_of(&res.frame).unwrap_or(0))),
        };
        let mut problems = check_run(&res, c.verdict, &c.input, &out, true);
        let moved = delta.diff(&expected(&c));
        if !moved.is_empty() {
            problems.push(format!("counters: {}", moved.join(", ")));
        }
        if !problems.is_empty() {
            self.failures.push(format!("{}: {}\n    frame {}", c.desc, problems.join("; "), xnf_testrun::frames::hex(&c.input)));
        }
        res.frame
    }

    fn tx(&mut self, desc: &str, input: Vec<u8>, reply: PacketBuilder, sport: u16, v6: bool) -> u32 {
        let out = self.row(desc, input, Verdict::Tx, Want::SynAck(Box::new(reply), sport, v6), &[Tx], Some(0));
        cookie_of(&out).unwrap_or(0)
    }

    fn pass(&mut self, desc: &str, input: Vec<u8>, counters: &[Counter], slot: Option<u32>) {
        self.row(desc, input, Verdict::Pass, Want::Unchanged, counters, slot);
    }

    fn drop(&mut self, desc: &str, input: Vec<u8>, counters: &[Counter]) {
        self.row(desc, input, Verdict::Drop, Want::Unchanged, counters, Some(0));
    }

    /// Neither a SYN to answer nor a valid cookie, after the conntrack
    /// lookup found no connection: dropped; without the lookup in this
    /// kernel (Debian 6.1 with nf_conntrack not loaded), to the kernel.
    fn no_conn(&mut self, desc: &str, input: Vec<u8>) {
        if self.conntrack {
            self.drop(desc, input, &[CookieDrop]);
        } else {
            self.pass(&format!("{desc} (no conntrack lookup: unchecked)"), input, &[CookieUnchecked], Some(0));
        }
    }
}

/// The whole delta a case expects.
fn expected(c: &Case) -> Snapshot {
    let mut want = Snapshot::zero();
    let outcome = match c.verdict {
        Verdict::Drop => Some(Counter::Drop),
        Verdict::Pass => Some(Counter::Pass),
        _ => None,
    };
    for k in [Counter::Rx].iter().chain(outcome.as_ref()).chain(&c.counters) {
        want.counters[*k as usize] += 1;
    }
    if let Some(slot) = c.slot {
        let dropped = u64::from(c.verdict == Verdict::Drop);
        want.rules[slot as usize] = RuleCounters { packets: 1, bytes: c.input.len() as u64, dropped };
    }
    want
}

fn back() -> PacketBuilder {
    PacketBuilder::ethernet(MAC_SERVER, MAC_CLIENT)
}

/// An ACK from `sport` acknowledging `cookie`.
fn ack(v6: bool, sport: u16, cookie: u32, flags: TcpFlags) -> Vec<u8> {
    seg_on(eth(), v6, sport, flags).seq(SEQ.wrapping_add(1)).ack(cookie.wrapping_add(1)).payload(b"GET /").build()
}

#[test]
fn syn_cookie_table() {
    let mut t = Table::new();

    // SYNs: answered in place, whatever they carried.
    let c4 = t.tx("IPv4 SYN with an MSS option: a cookie SYN-ACK back", syn(false).build(), back(), 40000, false);
    t.tx("IPv4 SYN without options", seg(false, TcpFlags::SYN).build(), back(), 40000, false);
    t.tx("IPv4 SYN with IP options: the answer has none", syn(false).ipv4_options(&[1, 1, 1, 0]).build(), back(), 40000, false);
    t.tx("IPv4 SYN carrying data (TFO): the answer carries none", syn(false).payload(&[7; 100]).build(), back(), 40000, false);
    t.tx("IPv4 SYN padded to 60 bytes: the padding goes", syn(false).min_frame_len(60).build(), back(), 40000, false);
    t.tx("IPv4 SYN with ECE and CWR (ECN setup)", seg(false, TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR).build(), back(), 40000, false);
    t.tx(
        "IPv4 SYN in VLAN 100: the answer keeps the tag",
        seg_on(eth().vlan(100), false, 40000, TcpFlags::SYN).tcp_options(&CLIENT_MSS).build(),
        back().vlan(100),
        40000,
        false,
    );
    let c6 = t.tx("IPv6 SYN: MSS 20 less", syn(true).build(), back(), 40000, true);
    t.tx("IPv6 SYN behind a hop-by-hop header: the answer has none", syn(true).ipv6_ext(IpProtocol::HOPOPTS, &[1, 4, 0, 0, 0, 0]).build(), back(), 40000, true);

    // ACKs: the kernel's cookie check decides.
    t.pass("IPv4 ACK of our SYN-ACK: a valid cookie, to the kernel's synproxy", ack(false, 40000, c4, TcpFlags::ACK), &[CookieOk], Some(0));
    t.pass("IPv4 ACK with PSH and data", ack(false, 40000, c4, TcpFlags::ACK | TcpFlags::PSH), &[CookieOk], Some(0));
    t.pass("IPv6 ACK of our SYN-ACK", ack(true, 40000, c6, TcpFlags::ACK), &[CookieOk], Some(0));
    t.no_conn("IPv4 ACK off by one: no cookie", ack(false, 40000, c4.wrapping_add(1), TcpFlags::ACK));
    t.no_conn("IPv4 ACK of a cookie from another port", ack(false, 40001, c4, TcpFlags::ACK));
    t.no_conn("IPv6 ACK of the IPv4 cookie", ack(true, 40000, c4, TcpFlags::ACK));
    t.no_conn("IPv4 ACK+RST carrying a valid cookie: not a handshake", ack(false, 40000, c4, TcpFlags::ACK | TcpFlags::RST));
    t.no_conn("IPv4 ACK+SYN (a SYN-ACK toward the server)", ack(false, 40000, c4, TcpFlags::ACK | TcpFlags::SYN));

    // Neither a SYN to answer nor a cookie nor a connection.
    t.no_conn("IPv4 SYN+FIN", seg(false, TcpFlags::SYN | TcpFlags::FIN).build());
    t.no_conn("IPv4 SYN+RST", seg(false, TcpFlags::SYN | TcpFlags::RST).build());
    t.no_conn("IPv4 RST of no connection", seg(false, TcpFlags::RST).build());
    t.no_conn("IPv4 FIN of no connection", seg(false, TcpFlags::FIN).build());
    t.drop("IPv4 SYN as a first fragment: no handshake in pieces", syn(false).fragment(0, true).build(), &[CookieDrop]);
    t.drop("IPv6 SYN as a first fragment (fragment header): no handshake in pieces", syn(true).fragment(0, true).build(), &[CookieDrop]);
    t.drop("IPv4 later fragment to the port: fail-closed", syn(false).fragment(10, false).build(), &[Unsure, CookieDrop]);
    t.drop("IPv6 later fragment: fail-closed", syn(true).fragment(10, false).build(), &[Unsure, CookieDrop]);
    let mut cut = syn(false).build();
    cut[14 + 20 + 12] = 0xf0; // data offset 15 words: beyond the IP packet
    t.drop("IPv4 SYN whose TCP header claims 60 bytes of 24", cut, &[CookieDrop]);
    let mut short = syn(false).build();
    short[14 + 20 + 12] = 0x40; // data offset 4 words: below a TCP header
    t.drop("IPv4 SYN with a data offset of 16 bytes", short, &[CookieDrop]);

    // What the rule does not take.
    t.pass(
        "TCP SYN to port 81: not the rule's",
        eth().ip(addr(CLIENT4), addr(SERVER4)).tcp(40000, 81, TcpFlags::SYN).build(),
        &[DefaultPass],
        Some(RULE_DEFAULT),
    );
    t.pass("UDP to port 80", eth().ip(addr(CLIENT4), addr(SERVER4)).udp(40000, 80).build(), &[DefaultPass], Some(RULE_DEFAULT));
    t.pass("QinQ SYN: the default policy", seg_on(eth().qinq(5).vlan(100), false, 40000, TcpFlags::SYN).build(), &[Qinq, DefaultPass], Some(RULE_DEFAULT));

    assert_table("syn-cookie", t.cases, 30, &t.failures);
}

/// A SYN whose IP packet ends after `k` bytes of its 24-byte TCP header
/// (the lengths say so), with and without padding after it: the rule
/// answers only the whole header; before that it drops, fail-closed
/// (`unsure` while the ports it matches on are unread), and it never reads
/// padding as header.
#[test]
fn every_truncation_of_a_syn() {
    let mut t = Table::new();
    let whole = syn(false).build();
    let l4 = &whole[14 + 20..];
    assert_eq!(l4.len(), 24, "a SYN with an MSS option");
    for pad in [&[][..], &[0xff; 30][..]] {
        for k in 0..=l4.len() {
            let desc = format!("IPv4 SYN cut to {k} bytes of TCP, {} bytes of padding", pad.len());
            let input = eth().ip(addr(CLIENT4), addr(SERVER4)).protocol(IpProtocol::TCP).payload(&l4[..k]).trailer(pad).build();
            match k {
                0..=3 => t.drop(&desc, input, &[Unsure, CookieDrop]),
                4..=23 => t.drop(&desc, input, &[CookieDrop]),
                _ => {
                    t.tx(&desc, input, back(), 40000, false);
                }
            }
        }
    }
    assert_table("syn-cookie truncation", t.cases, 50, &t.failures);
}
