//! Packet tests of `afxdp.bpf.c` through `BPF_PROG_TEST_RUN`.
//!
//! One row per case: description, the classes set, the RX queue the frame
//! arrives on, the frame, the verdict and the reason counter that must move
//! by exactly one. The selector never changes a frame: the output must be
//! the input, byte for byte. A real AF_XDP socket sits in the XSKMAP slot
//! of queue 0 of a two-queue veth; queue 1 has none.

use std::net::{Ipv4Addr, Ipv6Addr};

mod fixture;

use fixture::Bench;
use xnf_afxdp::selector::{AfxdpProgram, Reason, Stats};
use xnf_core::class::Class;
use xnf_packet::{EtherType, MacAddr, PacketBuilder, TcpFlags};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const S4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const D4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const S6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const D6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

fn eth() -> PacketBuilder {
    PacketBuilder::ethernet(A, B)
}

fn udp4(dport: u16) -> Vec<u8> {
    eth().ipv4(S4, D4).udp(1000, dport).payload(b"xnf afxdp").build()
}

/// Which classes are set for a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Classes {
    /// None: everything on a socket's queue goes to user space.
    None,
    /// UDP to port 5000 (IPv4 or IPv6), untagged; and anything tagged VID 100.
    Udp5000OrVlan100,
    /// The same, with frames that may be in a class dropped (`--unknown-l4 drop`).
    Udp5000OrVlan100Drop,
    /// UDP to port 5000, or anything from 198.18.0.0/24; unsure frames dropped.
    Udp5000OrSourceDrop,
}

struct Case {
    what: String,
    classes: Classes,
    queue: u32,
    frame: Vec<u8>,
    verdict: Verdict,
    reason: Reason,
}

fn case(what: impl Into<String>, classes: Classes, queue: u32, frame: Vec<u8>, verdict: Verdict, reason: Reason) -> Case {
    Case { what: what.into(), classes, queue, frame, verdict, reason }
}

fn cases() -> Vec<Case> {
    use Classes::*;
    use Reason::*;
    use Verdict::{Pass, Redirect};
    let mut v = vec![
        case("no classes: UDP on the socket's queue goes to user space", None, 0, udp4(9), Redirect, ToUser),
        case("no classes: ARP too (xdpsock behaviour)", None, 0, eth().arp_request(A, S4, D4).build(), Redirect, ToUser),
        case("no classes: a queue without a socket leaves the frame to the kernel", None, 1, udp4(9), Pass, NoSocket),
        case("UDP to 5000 is in the class", Udp5000OrVlan100, 0, udp4(5000), Redirect, ToUser),
        case("UDP to 5000 on a queue without a socket: the kernel's", Udp5000OrVlan100, 1, udp4(5000), Pass, NoSocket),
        case("UDP to 5001 is not", Udp5000OrVlan100, 0, udp4(5001), Pass, NoMatch),
        case("TCP to 5000 is not (protocol)", Udp5000OrVlan100, 0, eth().ipv4(S4, D4).tcp(1000, 5000, TcpFlags::SYN).build(), Pass, NoMatch),
        case("ICMP echo is the kernel's (ping keeps working)", Udp5000OrVlan100, 0, eth().ipv4(S4, D4).icmpv4_echo(1, 1).build(), Pass, NoMatch),
        case("IPv6 UDP to 5000 is in the class", Udp5000OrVlan100, 0, eth().ipv6(S6, D6).udp(1000, 5000).build(), Redirect, ToUser),
        case(
            "IPv6 UDP after a destination-options header: the parser walks to its ports, in the class",
            Udp5000OrVlan100,
            0,
            eth().ipv6(S6, D6).ipv6_ext(xnf_packet::IpProtocol::from(60u8), &[0; 6]).udp(1000, 5000).build(),
            Redirect,
            ToUser,
        ),
        case(
            "IPv4 with options: ports found past them",
            Udp5000OrVlan100,
            0,
            eth().ipv4(S4, D4).ipv4_options(&[1, 1, 1, 1]).udp(1000, 5000).build(),
            Redirect,
            ToUser,
        ),
        case("first fragment carries the ports", Udp5000OrVlan100, 0, eth().ipv4(S4, D4).fragment(0, true).udp(1000, 5000).build(), Redirect, ToUser),
        // Frames that may be UDP to 5000 but show no ports: to user space
        // (or dropped), never to the kernel behind the NF's back.
        case(
            "later UDP fragment may be in the port class: to user space",
            Udp5000OrVlan100,
            0,
            eth().ipv4(S4, D4).fragment(8, false).udp(1000, 5000).build(),
            Redirect,
            UnsureToUser,
        ),
        case(
            "later UDP fragment, classes that drop the unsure: dropped",
            Udp5000OrVlan100Drop,
            0,
            eth().ipv4(S4, D4).fragment(8, false).udp(1000, 5000).build(),
            Verdict::Drop,
            UnsureDropped,
        ),
        case(
            "later TCP fragment is not UDP: the kernel's",
            Udp5000OrVlan100,
            0,
            eth().ipv4(S4, D4).fragment(8, false).tcp(1000, 5000, TcpFlags::SYN).build(),
            Pass,
            NoMatch,
        ),
        case(
            "IPv6 later UDP fragment: to user space",
            Udp5000OrVlan100,
            0,
            eth().ipv6(S6, D6).ipv6_ext(xnf_packet::IpProtocol::FRAGMENT, &[0, 8, 0, 0, 0, 1]).udp(1000, 5000).build(),
            Redirect,
            UnsureToUser,
        ),
        case(
            "UDP whose ports lie in the Ethernet trailer: unsure, to user space",
            Udp5000OrVlan100,
            0,
            eth().ipv4(S4, D4).protocol(xnf_packet::IpProtocol::UDP).payload(&[0x03, 0xe8]).trailer(&[0x13, 0x88, 0, 8]).build(),
            Redirect,
            UnsureToUser,
        ),
        case(
            "IPv6 with nine extension headers (protocol unknown): to user space",
            Udp5000OrVlan100,
            0,
            (0..9).fold(eth().ipv6(S6, D6), |b, _| b.ipv6_ext(xnf_packet::IpProtocol::DSTOPTS, &[0; 6])).udp(1000, 5000).build(),
            Redirect,
            UnsureToUser,
        ),
        case(
            "Ethernet padding is not ports: a short UDP header is unsure",
            Udp5000OrVlan100Drop,
            0,
            eth().ipv4(S4, D4).protocol(xnf_packet::IpProtocol::UDP).payload(&[0x03]).trailer(&[0xe8, 0x13, 0x88, 0, 0, 0]).build(),
            Verdict::Drop,
            UnsureDropped,
        ),
        // Found by the fuzzer (tests/fuzz): the selector stopped at the
        // first class that may hold the frame and dropped a frame a later
        // class surely holds.
        case(
            "later UDP fragment from 198.18.0.1 may be UDP to 5000 and surely is from 198.18.0.0/24: to user space",
            Udp5000OrSourceDrop,
            0,
            eth().ipv4(S4, D4).fragment(8, false).udp(1000, 5000).build(),
            Redirect,
            ToUser,
        ),
        case(
            "later UDP fragment from elsewhere may be UDP to 5000 only: dropped",
            Udp5000OrSourceDrop,
            0,
            eth().ipv4(Ipv4Addr::new(198, 18, 5, 1), D4).fragment(8, false).udp(1000, 5000).build(),
            Verdict::Drop,
            UnsureDropped,
        ),
        case(
            "tagged UDP to 5000: the port class is for untagged frames",
            Udp5000OrVlan100,
            0,
            eth().vlan(7).ipv4(S4, D4).udp(1000, 5000).build(),
            Pass,
            NoMatch,
        ),
        case("tagged VID 100: the VLAN class", Udp5000OrVlan100, 0, eth().vlan(100).ipv4(S4, D4).udp(1000, 9).build(), Redirect, ToUser),
        case("QinQ is the kernel's", Udp5000OrVlan100, 0, eth().qinq(100).vlan(100).ipv4(S4, D4).udp(1000, 5000).build(), Pass, QinQ),
        case("stacked 802.1Q tags are the kernel's", Udp5000OrVlan100, 0, eth().vlan(100).vlan(100).ipv4(S4, D4).udp(1000, 5000).build(), Pass, QinQ),
        case("ARP is the kernel's", Udp5000OrVlan100, 0, eth().arp_request(A, S4, D4).build(), Pass, NonIp),
        case("LLDP is the kernel's", Udp5000OrVlan100, 0, eth().ethertype(EtherType::from(0x88ccu16)).payload(&[0; 46]).build(), Pass, NonIp),
        case(
            "IHL 4 is malformed",
            Udp5000OrVlan100,
            0,
            {
                let mut f = udp4(5000);
                f[14] = 0x44;
                f
            },
            Pass,
            Malformed,
        ),
        case(
            "total length past the frame is malformed",
            Udp5000OrVlan100,
            0,
            {
                let mut f = udp4(5000);
                f[16] = 0xff;
                f
            },
            Pass,
            Malformed,
        ),
        case(
            "IPv6 payload length past the frame is malformed",
            Udp5000OrVlan100,
            0,
            {
                let mut f = eth().ipv6(S6, D6).udp(1000, 5000).build();
                f[18] = 0xff;
                f
            },
            Pass,
            Malformed,
        ),
        case(
            "IP version 6 in an IPv4 ethertype is malformed",
            Udp5000OrVlan100,
            0,
            {
                let mut f = udp4(5000);
                f[14] = 0x65;
                f
            },
            Pass,
            Malformed,
        ),
    ];
    // Every truncation of a UDP frame, from the bare Ethernet header on:
    // short of a whole IPv4 header, or past it with a total length the cut
    // contradicts, it is malformed (the kernel refuses frames under 14 bytes).
    let full = udp4(5000);
    for cut in 14..full.len() {
        v.push(case(format!("UDP frame cut to {cut} bytes"), Udp5000OrVlan100, 0, full[..cut].to_vec(), Pass, Malformed));
    }
    let full = eth().vlan(100).ipv4(S4, D4).udp(1000, 5000).build();
    for cut in 14..18 {
        v.push(case(format!("tagged frame cut to {cut} bytes (in the tag)"), Udp5000OrVlan100, 0, full[..cut].to_vec(), Pass, Malformed));
    }
    v
}

fn rules(c: Classes) -> Vec<Class> {
    match c {
        Classes::None => vec![],
        Classes::Udp5000OrVlan100 | Classes::Udp5000OrVlan100Drop => {
            vec![Class { proto: Some(17), dport: Some((5000, 5000)), ..Default::default() }, Class { vid: Some(100), ..Default::default() }]
        }
        Classes::Udp5000OrSourceDrop => {
            vec![
                Class { proto: Some(17), dport: Some((5000, 5000)), ..Default::default() },
                Class { src: Some("198.18.0.0/24".parse().unwrap()), ..Default::default() },
            ]
        }
    }
}

#[test]
fn selector_table() {
    let bench = Bench::new("axpk");
    let failures = bench
        .ns
        .run(|| -> Vec<String> {
            let set = bench.socket();
            let prog = bench.selector(&set);
            let mut failures = Vec::new();
            let mut current = None;
            for c in cases() {
                if current != Some(c.classes) {
                    prog.set_rules(&rules(c.classes), matches!(c.classes, Classes::Udp5000OrVlan100Drop | Classes::Udp5000OrSourceDrop)).unwrap();
                    current = Some(c.classes);
                }
                let before = prog.stats().unwrap();
                let r = run_xdp(prog.prog(), &c.frame, XdpContext { ingress_ifindex: bench.ifindex, rx_queue_index: c.queue }).unwrap();
                let after = prog.stats().unwrap();
                let moved: Vec<Reason> = Reason::ALL.into_iter().filter(|&x| after.get(x) != before.get(x)).collect();
                let mut want = Stats::default();
                want.0[c.reason as usize] = 1;
                let delta = Stats(std::array::from_fn(|i| after.0[i] - before.0[i]));
                if r.verdict != c.verdict || delta != want || r.frame != c.frame {
                    failures.push(format!(
                        "{}: got {} with {:?} moved{}; want {} with {}",
                        c.what,
                        r.verdict.name(),
                        moved.iter().map(|m| m.name()).collect::<Vec<_>>(),
                        if r.frame != c.frame { ", frame changed" } else { "" },
                        c.verdict.name(),
                        c.reason.name()
                    ));
                }
            }
            failures
        })
        .unwrap();
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn classes_are_limited() {
    let prog = AfxdpProgram::load().expect("loading the afxdp program (run as root)");
    let many = vec![Class { proto: Some(17), ..Default::default() }; xnf_afxdp::selector::MAX_RULES + 1];
    let e = prog.set_rules(&many, false).unwrap_err().to_string();
    assert!(e.contains("at most 16"), "{e}");
}
