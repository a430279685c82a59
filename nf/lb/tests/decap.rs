//! Packet tests of `decap.bpf.c` through `BPF_PROG_TEST_RUN`.
//!
//! One row per case: description, input frame, verdict, the exact output
//! (a stripped frame is the original Ethernet header with the inner
//! ethertype, the inner packet, and whatever trailer followed the outer
//! packet: the kernel trims it by the inner length), and the counter that
//! moves besides `rx`. Every other counter must stay still. An outer CE
//! mark must become an ECN-capable inner packet's (RFC 6040). The program is
//! loaded unpinned with no stage array, so "continue" is XDP_PASS: a row
//! tells continue from pass by its counter.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use xnf_lb::decap::{DecapCounter, DecapCounters, DecapProgram};
use xnf_packet::{IpProtocol, MacAddr, PacketBuilder, TcpFlags};
use xnf_testrun::table::{assert_table, check_run, Out};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

use DecapCounter::{BadInner, Continue, Fragment, Gue, Ip6ip6, Ipip};

const BALANCER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
const BACKEND_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);
/// The balancer's outer sources.
const BAL4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const BAL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
/// This backend's addresses (in `locals`).
const LOCAL4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const LOCAL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
/// Another host's (a tunnel this host would only route).
const OTHER4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 99);
const OTHER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x99);
/// The client and the VIP of the inner packets.
const CLIENT4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 7);
const VIP4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 7);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xf, 0, 0, 0, 0, 0x10);
const GUE_PORT: u16 = 6080;
const PAYLOAD: &[u8] = b"xnf lb decap packet test";
const IPIP: IpProtocol = IpProtocol(4);
const IPV6: IpProtocol = IpProtocol(41);

fn eth() -> PacketBuilder {
    PacketBuilder::ethernet(BALANCER_MAC, BACKEND_MAC)
}

/// A client's IPv4 UDP datagram to the VIP, as a whole frame: what the
/// backend must see once the outer header is gone.
fn inner4() -> Vec<u8> {
    eth().ipv4(CLIENT4, VIP4).udp(40000, 53).payload(PAYLOAD).build()
}

/// A client's IPv6 TCP SYN to the VIP, as a whole frame.
fn inner6() -> Vec<u8> {
    eth().ipv6(CLIENT6, VIP6).tcp(40000, 443, TcpFlags::SYN).payload(PAYLOAD).build()
}

/// An outer IPv4 header from the balancer to this host, to be completed.
fn out4() -> PacketBuilder {
    eth().ipv4(BAL4, LOCAL4)
}

/// An outer IPv6 header from the balancer to this host, to be completed.
fn out6() -> PacketBuilder {
    eth().ipv6(BAL6, LOCAL6)
}

/// An outer first fragment (offset 0, more fragments) to this host, to be completed.
fn first(v6: bool) -> PacketBuilder {
    if v6 {
        out6().ident(7).fragment(0, true)
    } else {
        out4().fragment(0, true)
    }
}

/// An outer later fragment (offset 800) to this host, of protocol `proto`.
fn later(v6: bool, proto: IpProtocol, body: &[u8]) -> Vec<u8> {
    let b = if v6 { out6().ident(7) } else { out4() };
    b.fragment(100, false).protocol(proto).payload(body).build()
}

/// The IP packet of a frame built by [`eth`] (untagged).
fn ip(frame: &[u8]) -> &[u8] {
    &frame[14..]
}

/// `inner`'s IP packet behind an outer header from `src` to `dst` with
/// protocol `proto` (4: IPv4 inside, 41: IPv6 inside, or a wrong one).
fn tunnel(src: IpAddr, dst: IpAddr, proto: IpProtocol, inner: &[u8]) -> Vec<u8> {
    eth().ip(src, dst).protocol(proto).payload(ip(inner)).build()
}

/// `inner`'s IP packet in UDP to `port` (GUE variant 1: no GUE header, no
/// UDP checksum, as the balancer sends it).
fn gue(src: IpAddr, dst: IpAddr, port: u16, inner: &[u8]) -> Vec<u8> {
    eth().ip(src, dst).udp(50123, port).payload(ip(inner)).l4_checksum(0).build()
}

fn v4(a: Ipv4Addr) -> IpAddr {
    IpAddr::V4(a)
}

fn v6(a: Ipv6Addr) -> IpAddr {
    IpAddr::V6(a)
}

struct Case {
    desc: &'static str,
    input: Vec<u8>,
    verdict: Verdict,
    out: Out,
    /// The counter the frame moves besides `rx`.
    counter: DecapCounter,
}

/// Stripped: passed on as `out`, `counter` moved.
fn stripped(desc: &'static str, input: Vec<u8>, out: Vec<u8>, counter: DecapCounter) -> Case {
    Case { desc, input, verdict: Verdict::Pass, out: Out::Frame(out), counter }
}

/// Left alone: passed on unchanged, `counter` moved (continue, fragment, bad-inner).
fn untouched(desc: &'static str, input: Vec<u8>, counter: DecapCounter) -> Case {
    Case { desc, input, verdict: Verdict::Pass, out: Out::Unchanged, counter }
}

fn cases() -> Vec<Case> {
    let (i4, i6) = (inner4(), inner6());
    let (b4, b6, l4, l6) = (v4(BAL4), v6(BAL6), v4(LOCAL4), v6(LOCAL6));
    let with_trailer = |frame: &[u8], trailer: &[u8]| [frame, trailer].concat();
    // A GUE variant 0 header (version 0, no flags, protocol 4) before the packet.
    let gue0 = [&[0u8; 14][..], &[0x00, 0x04, 0, 0], ip(&i4)].concat();
    let mut t = vec![
        stripped("4in4", tunnel(b4, l4, IPIP, &i4), i4.clone(), Ipip),
        stripped("6in6", tunnel(b6, l6, IPV6, &i6), i6.clone(), Ip6ip6),
        stripped("4in6 (protocol 4 in IPv6)", tunnel(b6, l6, IPIP, &i4), i4.clone(), Ipip),
        stripped("6in4 (protocol 41 in IPv4)", tunnel(b4, l4, IPV6, &i6), i6.clone(), Ip6ip6),
        stripped("GUE v4 in v4", gue(b4, l4, GUE_PORT, &i4), i4.clone(), Gue),
        stripped("GUE v6 in v4", gue(b4, l4, GUE_PORT, &i6), i6.clone(), Gue),
        stripped("GUE v4 in v6", gue(b6, l6, GUE_PORT, &i4), i4.clone(), Gue),
        stripped("GUE v6 in v6", gue(b6, l6, GUE_PORT, &i6), i6.clone(), Gue),
        stripped(
            "4in4 with outer IPv4 options: stripped with the outer header",
            out4().ipv4_options(&[1, 1, 1, 1]).protocol(IPIP).payload(ip(&i4)).build(),
            i4.clone(),
            Ipip,
        ),
        stripped(
            "6in6 behind an outer destination-options header: stripped with it",
            out6().ipv6_ext(IpProtocol::DSTOPTS, &[0; 6]).protocol(IPV6).payload(ip(&i6)).build(),
            i6.clone(),
            Ip6ip6,
        ),
        untouched("GUE to another port: not ours", gue(b4, l4, GUE_PORT + 1, &i4), Continue),
        untouched("UDP from the GUE port (source, not destination): not ours", out4().udp(GUE_PORT, 9).payload(ip(&i4)).build(), Continue),
        untouched("4in4 to another host (a tunnel passing through)", tunnel(b4, v4(OTHER4), IPIP, &i4), Continue),
        untouched("6in6 to another host", tunnel(b6, v6(OTHER6), IPV6, &i6), Continue),
        untouched("GUE to another host", gue(b6, v6(OTHER6), GUE_PORT, &i4), Continue),
        untouched("4in4 outer first fragment to this host: the kernel's to reassemble", first(false).protocol(IPIP).payload(ip(&i4)).build(), Fragment),
        untouched("4in4 outer later fragment to this host", later(false, IPIP, &ip(&i4)[..16]), Fragment),
        untouched("6in6 outer first fragment (fragment header) to this host", first(true).protocol(IPV6).payload(ip(&i6)).build(), Fragment),
        untouched("6in6 outer later fragment to this host", later(true, IPV6, &ip(&i6)[..16]), Fragment),
        untouched("GUE first fragment to this host", first(false).udp(50123, GUE_PORT).payload(ip(&i4)).l4_checksum(0).build(), Fragment),
        untouched("later UDP fragment to this host: no port to tell GUE by, the kernel's", later(false, IpProtocol::UDP, &[0x45; 16]), Fragment),
        untouched("first UDP fragment to this host, another port: not ours", first(false).udp(50123, 53).payload(PAYLOAD).build(), Continue),
        untouched("later TCP fragment to this host: never ours", later(false, IpProtocol::TCP, &[0x45; 16]), Continue),
        untouched("4in4 first fragment to another host", eth().ipv4(BAL4, OTHER4).fragment(0, true).protocol(IPIP).payload(ip(&i4)).build(), Continue),
        untouched("GUE whose inner version nibble is 0 (a GUE variant 0 header)", gue(b4, l4, GUE_PORT, &gue0), BadInner),
        untouched("GUE whose inner version nibble is 5", gue(b6, l6, GUE_PORT, &[&[0u8; 14][..], &[0x55; 20]].concat()), BadInner),
        untouched("4in4 whose inner packet is IPv6", tunnel(b4, l4, IPIP, &i6), BadInner),
        untouched("6in6 whose inner packet is IPv4", tunnel(b6, l6, IPV6, &i4), BadInner),
        untouched("4in4 with nothing inside", tunnel(b4, l4, IPIP, &[0u8; 14]), BadInner),
        untouched("GUE with nothing inside", gue(b4, l4, GUE_PORT, &[0u8; 14]), BadInner),
        untouched("4in4 frame cut inside the outer IPv4 header: malformed is the kernel's", tunnel(b4, l4, IPIP, &i4)[..14 + 12].to_vec(), Continue),
        untouched("4in4 whose outer total length runs past the frame", tunnel(b4, l4, IPIP, &i4)[..14 + 30].to_vec(), Continue),
        untouched("6in6 frame cut inside the outer IPv6 header", tunnel(b6, l6, IPV6, &i6)[..14 + 30].to_vec(), Continue),
        untouched("ARP", eth().arp_request(BALANCER_MAC, BAL4, LOCAL4).build(), Continue),
        untouched("VLAN-tagged 4in4 to this host: the kernel's", eth().vlan(10).ipv4(BAL4, LOCAL4).protocol(IPIP).payload(ip(&i4)).build(), Continue),
        untouched("802.1ad-tagged 4in4", eth().qinq(20).vlan(10).ipv4(BAL4, LOCAL4).protocol(IPIP).payload(ip(&i4)).build(), Continue),
        untouched("plain TCP to this host", eth().ipv4(CLIENT4, LOCAL4).tcp(40000, 22, TcpFlags::SYN).build(), Continue),
        untouched("plain UDP to this host", eth().ipv6(CLIENT6, LOCAL6).udp(40000, 53).payload(PAYLOAD).build(), Continue),
        untouched("ICMP to this host", out4().icmpv4_echo(1, 1).build(), Continue),
        untouched(
            "IPv4 with its version nibble wrong",
            {
                let mut f = tunnel(b4, l4, IPIP, &i4);
                f[14] = 0x65;
                f
            },
            Continue,
        ),
    ];
    // RFC 6040: an outer CE mark becomes an ECN-capable inner packet's
    // (its IPv4 checksum patched: check_run verifies it); nothing else
    // changes the inner ECN field.
    let inner4_ecn = |ecn| eth().ipv4(CLIENT4, VIP4).ecn(ecn).udp(40000, 53).payload(PAYLOAD).build();
    let inner6_ecn = |ecn| eth().ipv6(CLIENT6, VIP6).dscp(10).ecn(ecn).flow_label(0xabcde).tcp(40000, 443, TcpFlags::SYN).payload(PAYLOAD).build();
    let marked = |src: IpAddr, dst: IpAddr, proto, ecn, inner: &[u8]| eth().ip(src, dst).ecn(ecn).protocol(proto).payload(ip(inner)).build();
    let marked_gue = |src: IpAddr, dst: IpAddr, ecn, inner: &[u8]| eth().ip(src, dst).ecn(ecn).udp(50123, GUE_PORT).payload(ip(inner)).l4_checksum(0).build();
    t.extend([
        stripped("4in4 outer CE, inner ECT(0): the inner packet takes CE", marked(b4, l4, IPIP, 3, &inner4_ecn(2)), inner4_ecn(3), Ipip),
        stripped("4in4 outer CE, inner ECT(1): CE", marked(b4, l4, IPIP, 3, &inner4_ecn(1)), inner4_ecn(3), Ipip),
        stripped("6in6 outer CE, inner ECT(0): CE, DSCP and flow label kept", marked(b6, l6, IPV6, 3, &inner6_ecn(2)), inner6_ecn(3), Ip6ip6),
        stripped("6in4 outer CE, inner ECT(1): CE", marked(b4, l4, IPV6, 3, &inner6_ecn(1)), inner6_ecn(3), Ip6ip6),
        stripped("GUE v4 in v6 outer CE, inner ECT(0): CE", marked_gue(b6, l6, 3, &inner4_ecn(2)), inner4_ecn(3), Gue),
        stripped("GUE v6 in v4 outer CE, inner ECT(0): CE", marked_gue(b4, l4, 3, &inner6_ecn(2)), inner6_ecn(3), Gue),
        stripped("4in4 outer CE, inner CE: unchanged", marked(b4, l4, IPIP, 3, &inner4_ecn(3)), inner4_ecn(3), Ipip),
        stripped("4in4 outer CE, inner Not-ECT: left Not-ECT (routers mark ECT only)", marked(b4, l4, IPIP, 3, &inner4_ecn(0)), inner4_ecn(0), Ipip),
        stripped("4in4 outer ECT(0), inner ECT(1): the inner field stays", marked(b4, l4, IPIP, 2, &inner4_ecn(1)), inner4_ecn(1), Ipip),
        stripped("6in6 outer ECT(1), inner ECT(0): the inner field stays", marked(b6, l6, IPV6, 1, &inner6_ecn(2)), inner6_ecn(2), Ip6ip6),
        stripped("6in6 outer Not-ECT, inner ECT(0): the inner field stays", marked(b6, l6, IPV6, 0, &inner6_ecn(2)), inner6_ecn(2), Ip6ip6),
    ]);
    // Ethernet padding after a small tunnelled packet (a bare 20-byte IPv4
    // header inside: 54 bytes, padded to 60): kept after the inner packet,
    // where the kernel trims it by the inner total length.
    let tiny = eth().ipv4(CLIENT4, VIP4).protocol(IpProtocol::NONE).build();
    let padded = out4().protocol(IPIP).payload(ip(&tiny)).trailer(&[0; 6]).build();
    assert_eq!(padded.len(), 60);
    t.push(stripped("4in4 of a bare IPv4 header with Ethernet padding: the padding kept after it", padded, with_trailer(&tiny, &[0; 6]), Ipip));
    let trailer = [0xee; 9];
    let gue_trailer = out6().udp(50123, GUE_PORT).payload(ip(&i4)).l4_checksum(0).trailer(&trailer).build();
    t.push(stripped("GUE v4 in v6 with a trailer: kept after the inner packet", gue_trailer, with_trailer(&i4, &trailer), Gue));
    t
}

struct Decap {
    prog: DecapProgram,
    maps: xnf_lb::decap::DecapMaps,
}

impl Decap {
    /// An unpinned instance with GUE on `gue_port`, this host being
    /// LOCAL4 and LOCAL6.
    fn load(gue_port: u16) -> Decap {
        let prog = DecapProgram::load(None, gue_port).unwrap();
        let maps = prog.maps().unwrap();
        maps.set_locals(&BTreeSet::from([v4(LOCAL4), v6(LOCAL6)])).unwrap();
        Decap { prog, maps }
    }

    /// What is wrong with one case's run, if anything.
    fn check(&self, c: &Case) -> Option<String> {
        let before = self.maps.counters().unwrap();
        let res = match run_xdp(self.prog.prog(), &c.input, XdpContext::default()) {
            Ok(r) => r,
            Err(e) => return Some(format!("test run failed: {e:#}")),
        };
        let after = self.maps.counters().unwrap();
        let mut problems = check_run(&res, c.verdict, &c.input, &c.out, true);
        let mut want: DecapCounters = [0; DecapCounter::ALL.len()];
        want[DecapCounter::Rx as usize] += 1;
        want[c.counter as usize] += 1;
        let moved: Vec<String> = DecapCounter::ALL
            .iter()
            .filter(|k| after[**k as usize] - before[**k as usize] != want[**k as usize])
            .map(|k| format!("{} +{} (want +{})", k.name(), after[*k as usize] - before[*k as usize], want[*k as usize]))
            .collect();
        if !moved.is_empty() {
            problems.push(format!("counters: {}", moved.join(", ")));
        }
        (!problems.is_empty()).then(|| problems.join("; "))
    }

    fn run_table(&self, cases: &[Case]) -> Vec<String> {
        cases.iter().filter_map(|c| self.check(c).map(|why| format!("{}: {why}\n    frame {}", c.desc, xnf_testrun::frames::hex(&c.input)))).collect()
    }
}

#[test]
fn decap_packet_table() {
    let d = Decap::load(GUE_PORT);
    let cases = cases();
    let failures = d.run_table(&cases);
    assert_table("decap", cases.len(), 53, &failures);
}

/// An instance loaded with GUE port 0 strips no UDP at all (and counts no
/// UDP fragment as possibly its own), while IP-in-IP still goes.
#[test]
fn gue_port_zero_leaves_gue_alone() {
    let d = Decap::load(0);
    let (i4, i6) = (inner4(), inner6());
    let cases = vec![
        untouched("GUE to 6080 without GUE", gue(v4(BAL4), v4(LOCAL4), GUE_PORT, &i4), Continue),
        untouched("GUE v6 in v6 to 6080 without GUE", gue(v6(BAL6), v6(LOCAL6), GUE_PORT, &i6), Continue),
        untouched("UDP to port 0 without GUE", gue(v4(BAL4), v4(LOCAL4), 0, &i4), Continue),
        untouched("later UDP fragment to this host without GUE: not ours", later(false, IpProtocol::UDP, &[0x45; 16]), Continue),
        stripped("4in4 without GUE", tunnel(v4(BAL4), v4(LOCAL4), IPIP, &i4), i4.clone(), Ipip),
        stripped("6in6 without GUE", tunnel(v6(BAL6), v6(LOCAL6), IPV6, &i6), i6.clone(), Ip6ip6),
    ];
    let failures = d.run_table(&cases);
    assert_table("GUE port 0", cases.len(), 6, &failures);
    assert_eq!(d.prog.gue_port().unwrap(), 0);
}

/// The GUE port is each instance's own, and what the kernel holds is what
/// `status` reads back.
#[test]
fn gue_port_is_per_instance() {
    let a = Decap::load(5555);
    let b = Decap::load(GUE_PORT);
    assert_eq!((a.prog.gue_port().unwrap(), b.prog.gue_port().unwrap()), (5555, GUE_PORT));
    let i4 = inner4();
    let to = |port| gue(v4(BAL4), v4(LOCAL4), port, &i4);
    let mut failures = a.run_table(&[
        stripped("GUE to 5555 on the 5555 instance", to(5555), i4.clone(), Gue),
        untouched("GUE to 6080 on the 5555 instance", to(GUE_PORT), Continue),
    ]);
    failures.extend(b.run_table(&[
        stripped("GUE to 6080 on the 6080 instance", to(GUE_PORT), i4.clone(), Gue),
        untouched("GUE to 5555 on the 6080 instance", to(5555), Continue),
    ]));
    assert_table("per-instance GUE port", 4, 4, &failures);
}

/// `set_locals` makes the map hold exactly what it is given, and the
/// packets follow: an address removed is no longer stripped for.
#[test]
fn locals_are_rewritten_exactly() {
    let d = Decap::load(GUE_PORT);
    let extra = v4(Ipv4Addr::new(198, 18, 1, 3));
    let change = d.maps.set_locals(&BTreeSet::from([v6(LOCAL6), extra])).unwrap();
    assert_eq!((change.added, change.removed, change.total), (vec![extra], vec![v4(LOCAL4)], 2));
    assert_eq!(d.maps.locals(), BTreeSet::from([v6(LOCAL6), extra]));
    let i4 = inner4();
    let failures = d.run_table(&[
        untouched("4in4 to an address removed from locals", tunnel(v4(BAL4), v4(LOCAL4), IPIP, &i4), Continue),
        stripped("4in4 to an address added to locals", tunnel(v4(BAL4), extra, IPIP, &i4), i4.clone(), Ipip),
    ]);
    assert_table("locals rewrite", 2, 2, &failures);
    let again = d.maps.set_locals(&BTreeSet::from([v6(LOCAL6), extra])).unwrap();
    assert!(again.added.is_empty() && again.removed.is_empty(), "{again:?}");
}
