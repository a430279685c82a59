//! Packet tests of `chain.bpf.c` through `BPF_PROG_TEST_RUN`.
//!
//! One row per case: description, the port the frame arrives on (the
//! ingress, or the host end of an NF's veth), the frame, the verdict, the
//! counter that must move, and the exact frame afterwards (built from
//! scratch by xnf-packet, so checksums are computed independently).
//!
//! The tables are set up as `xnf chain` would for two chains sharing an
//! ingress: NF a -> NF b -> out, and a VLAN class into NF b alone.

mod fixture;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use fixture::dst::{BLACKHOLE4, NO_NEIGH4, NO_ROUTE4, UNMANAGED4};
use fixture::{Fixture, CHAIN0_4, CHAIN2_6, CHAIN3_4, DOWN_SRC4, GEN_MAC, NFA_MAC, NFB_MAC, NH_MAC, OTHER4, SRC4, SRC6};
use xnf_chain::program::{ChainMaps, IngressReason, Reason, Rule};
use xnf_core::class::Class;
use xnf_packet::{EtherType, MacAddr, PacketBuilder, TcpFlags};
use xnf_testrun::table::{assert_table, check_run, Out};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

const PAYLOAD: &[u8] = b"xnf chain packet test";

/// The port a frame arrives on.
#[derive(Clone, Copy, Debug)]
enum At {
    Ingress,
    FromNfA,
    FromNfB,
}

/// What a case must count; every other counter must stay still.
#[derive(Clone, Copy, Debug)]
enum Count {
    /// At the ingress, in no chain's class: the ingress reason.
    Ingress(IngressReason),
    /// At the ingress, in chain `chain`'s class: the ingress reason, the
    /// chain's packets and bytes, and (unless dropped) NF `nf`'s input.
    Chain { chain: u32, reason: IngressReason, nf: Option<u32> },
    /// From NF a: its output, and NF `0`'s input.
    Into(u32),
    /// From NF b, the last: its output, and how it left the chain.
    Exit(Reason),
}

struct Case {
    desc: String,
    at: At,
    input: Vec<u8>,
    verdict: Verdict,
    count: Count,
    output: Out,
}

#[derive(Clone, Copy)]
enum L4 {
    Udp(u16),
    Tcp(u16),
}

fn l3(b: PacketBuilder, src: IpAddr, dst: IpAddr, ttl: u8, l4: L4) -> PacketBuilder {
    let b = b.ip(src, dst).ttl(ttl);
    match l4 {
        L4::Udp(port) => b.udp(40000, port),
        L4::Tcp(port) => b.tcp(40000, port, TcpFlags::SYN).seq(1),
    }
    .payload(PAYLOAD)
}

struct Table<'f> {
    f: &'f Fixture,
    cases: Vec<Case>,
}

impl Table<'_> {
    fn eth_in(&self) -> PacketBuilder {
        PacketBuilder::ethernet(GEN_MAC, self.f.in0_mac)
    }
    fn to_nf_a(&self) -> PacketBuilder {
        PacketBuilder::ethernet(self.f.nfa_host, NFA_MAC)
    }
    fn to_nf_b(&self) -> PacketBuilder {
        PacketBuilder::ethernet(self.f.nfb_host, NFB_MAC)
    }
    fn out0(&self) -> PacketBuilder {
        PacketBuilder::ethernet(self.f.out0_mac, NH_MAC)
    }
    fn push(&mut self, desc: impl Into<String>, at: At, input: Vec<u8>, verdict: Verdict, count: Count, output: Out) {
        self.cases.push(Case { desc: desc.into(), at, input, verdict, count, output });
    }
    fn ingress_pass(&mut self, desc: impl Into<String>, input: Vec<u8>, why: IngressReason) {
        self.push(desc, At::Ingress, input, Verdict::Pass, Count::Ingress(why), Out::Unchanged);
    }
    /// Ingress frame `input`, in chain `chain`'s class, must enter NF `nf` as `output`.
    fn steered(&mut self, desc: impl Into<String>, input: Vec<u8>, chain: u32, nf: u32, output: Vec<u8>) {
        let count = Count::Chain { chain, reason: IngressReason::Steered, nf: Some(nf) };
        self.push(desc, At::Ingress, input, Verdict::Redirect, count, Out::Frame(output));
    }
    fn exit_pass(&mut self, desc: impl Into<String>, input: Vec<u8>, why: Reason) {
        self.push(desc, At::FromNfB, input, Verdict::Pass, Count::Exit(why), Out::Unchanged);
    }
}

fn cases(f: &Fixture) -> Vec<Case> {
    let mut t = Table { f, cases: Vec::new() };
    let (s4, s6): (IpAddr, IpAddr) = (SRC4.into(), SRC6.into());

    // --- Classification at the ingress -------------------------------------
    for (desc, l4) in [("UDP", L4::Udp(9)), ("TCP", L4::Tcp(80))] {
        let input = l3(t.eth_in(), s4, CHAIN0_4.into(), 64, l4).build();
        let output = l3(t.to_nf_a(), s4, CHAIN0_4.into(), 64, l4).build();
        t.steered(format!("IPv4 {desc} in chain 0's prefix enters NF a, only the MACs change"), input, 0, 0, output);
    }
    {
        let input = l3(t.eth_in(), s4, CHAIN0_4.into(), 1, L4::Udp(9)).build();
        let output = l3(t.to_nf_a(), s4, CHAIN0_4.into(), 1, L4::Udp(9)).build();
        t.steered("TTL 1 is steered too: the chain is not a routing hop, the exit is", input, 0, 0, output);
        let input = l3(t.eth_in(), s4, CHAIN0_4.into(), 64, L4::Udp(9)).fragment(185, false).ident(5).build();
        let output = l3(t.to_nf_a(), s4, CHAIN0_4.into(), 64, L4::Udp(9)).fragment(185, false).ident(5).build();
        t.steered("IPv4 later fragment matches a prefix-only rule", input, 0, 0, output);
        let input = l3(t.eth_in(), s4, CHAIN0_4.into(), 64, L4::Udp(9)).min_frame_len(60).build();
        let output = l3(t.to_nf_a(), s4, CHAIN0_4.into(), 64, L4::Udp(9)).min_frame_len(60).build();
        t.steered("Ethernet padding after the IPv4 packet is kept", input, 0, 0, output);
    }
    {
        let input = l3(t.eth_in(), s4, CHAIN3_4.into(), 64, L4::Udp(7)).build();
        let output = l3(t.to_nf_b(), s4, CHAIN3_4.into(), 64, L4::Udp(7)).build();
        t.steered("UDP port 7 to chain 3's prefix enters NF b (first rule wins)", input, 3, 1, output);
        let input = l3(t.eth_in(), s4, CHAIN3_4.into(), 64, L4::Udp(7)).ipv4_options(&[1, 1, 1, 0]).build();
        let output = l3(t.to_nf_b(), s4, CHAIN3_4.into(), 64, L4::Udp(7)).ipv4_options(&[1, 1, 1, 0]).build();
        t.steered("IPv4 options: ports are read after them", input, 3, 1, output);
        let input = l3(t.eth_in(), s4, CHAIN3_4.into(), 64, L4::Udp(7)).fragment(0, true).ident(9).build();
        let output = l3(t.to_nf_b(), s4, CHAIN3_4.into(), 64, L4::Udp(7)).fragment(0, true).ident(9).build();
        t.steered("IPv4 first fragment carries ports and matches a port rule", input, 3, 1, output);
        // A later fragment of UDP to chain 3's prefix may be to port 7: the
        // chain says drop (never around its NF, which may be a firewall).
        let drop3 = Count::Chain { chain: 3, reason: IngressReason::UnsureDropped, nf: None };
        let input = l3(t.eth_in(), s4, CHAIN3_4.into(), 64, L4::Udp(7)).fragment(185, false).ident(9).build();
        t.push("IPv4 later UDP fragment may be chain 3's: dropped, as chain 3 says", At::Ingress, input, Verdict::Drop, drop3, Out::Unchanged);
        let input = t.eth_in().ip(s4, CHAIN3_4.into()).protocol(xnf_packet::IpProtocol::UDP).payload(&[0x9c, 0x40]).trailer(&[0, 7, 0, 8]).build();
        t.push("UDP whose ports lie beyond the IP packet (in the trailer) may be chain 3's: dropped", At::Ingress, input, Verdict::Drop, drop3, Out::Unchanged);
        let input = l3(t.eth_in(), s4, CHAIN3_4.into(), 64, L4::Tcp(7)).fragment(185, false).ident(9).build();
        t.ingress_pass("IPv4 later TCP fragment: not UDP, not chain 3's", input, IngressReason::NoMatch);
        t.ingress_pass("UDP to another port of chain 3's prefix", l3(t.eth_in(), s4, CHAIN3_4.into(), 64, L4::Udp(8)).build(), IngressReason::NoMatch);
        t.ingress_pass("TCP port 7: the rule wants UDP", l3(t.eth_in(), s4, CHAIN3_4.into(), 64, L4::Tcp(7)).build(), IngressReason::NoMatch);
    }
    for port in [5000, 5001] {
        let input = l3(t.eth_in(), s6, CHAIN2_6.into(), 64, L4::Udp(port)).build();
        let output = l3(t.to_nf_a(), s6, CHAIN2_6.into(), 64, L4::Udp(port)).build();
        t.steered(format!("IPv6 UDP port {port} in chain 2's range enters NF a"), input, 2, 0, output);
    }
    t.ingress_pass("IPv6 UDP port 5002: outside the range", l3(t.eth_in(), s6, CHAIN2_6.into(), 64, L4::Udp(5002)).build(), IngressReason::NoMatch);
    t.ingress_pass("IPv6 TCP port 5000: the rule wants UDP", l3(t.eth_in(), s6, CHAIN2_6.into(), 64, L4::Tcp(5000)).build(), IngressReason::NoMatch);
    {
        let input = l3(t.eth_in(), s6, CHAIN2_6.into(), 64, L4::Udp(5000)).ipv6_ext(xnf_packet::IpProtocol::ROUTING, &[0u8; 6]).build();
        let output = l3(t.to_nf_a(), s6, CHAIN2_6.into(), 64, L4::Udp(5000)).ipv6_ext(xnf_packet::IpProtocol::ROUTING, &[0u8; 6]).build();
        t.steered("IPv6 with a routing header before UDP: the parser walks to the ports, chain 2 takes it", input, 2, 0, output);
        // Eight extension headers are walked; a ninth leaves the protocol unknown.
        let dst_opts = |b: PacketBuilder, n: usize| (0..n).fold(b, |b, _| b.ipv6_ext(xnf_packet::IpProtocol::DSTOPTS, &[0u8; 6]));
        let input = dst_opts(l3(t.eth_in(), s6, CHAIN2_6.into(), 64, L4::Udp(5000)), 8).build();
        let output = dst_opts(l3(t.to_nf_a(), s6, CHAIN2_6.into(), 64, L4::Udp(5000)), 8).build();
        t.steered("IPv6 with eight extension headers: walked to the ports, chain 2's", input, 2, 0, output);
        let unsure2 = Count::Chain { chain: 2, reason: IngressReason::UnsureSteered, nf: Some(0) };
        let input = dst_opts(l3(t.eth_in(), s6, CHAIN2_6.into(), 64, L4::Udp(5000)), 9).build();
        let output = dst_opts(l3(t.to_nf_a(), s6, CHAIN2_6.into(), 64, L4::Udp(5000)), 9).build();
        t.push(
            "IPv6 with nine extension headers: protocol unknown, may be chain 2's: into its NF",
            At::Ingress,
            input,
            Verdict::Redirect,
            unsure2,
            Out::Frame(output),
        );
        let frag = |b: PacketBuilder| b.ipv6_ext(xnf_packet::IpProtocol::FRAGMENT, &[0x05, 0xc8, 0, 0, 0, 7]);
        let input = frag(l3(t.eth_in(), s6, CHAIN2_6.into(), 64, L4::Udp(5000))).build();
        let output = frag(l3(t.to_nf_a(), s6, CHAIN2_6.into(), 64, L4::Udp(5000))).build();
        t.push("IPv6 later UDP fragment may be chain 2's: into its NF, as chain 2 says", At::Ingress, input, Verdict::Redirect, unsure2, Out::Frame(output));
        let frag0 = |b: PacketBuilder| b.ipv6_ext(xnf_packet::IpProtocol::FRAGMENT, &[0, 1, 0, 0, 0, 7]);
        let input = frag0(l3(t.eth_in(), s6, CHAIN2_6.into(), 64, L4::Udp(5000))).build();
        let output = frag0(l3(t.to_nf_a(), s6, CHAIN2_6.into(), 64, L4::Udp(5000))).build();
        t.steered("IPv6 first fragment carries the ports: chain 2's", input, 2, 0, output);
    }
    t.ingress_pass("IPv4 to no chain's class: the kernel's, untouched", l3(t.eth_in(), s4, OTHER4.into(), 64, L4::Udp(9)).build(), IngressReason::NoMatch);
    t.push(
        "a class whose chain is down is dropped, not routed around its NFs",
        At::Ingress,
        l3(t.eth_in(), DOWN_SRC4.into(), OTHER4.into(), 64, L4::Udp(9)).build(),
        Verdict::Drop,
        Count::Chain { chain: 4, reason: IngressReason::Down, nf: None },
        Out::Unchanged,
    );

    // --- VLANs --------------------------------------------------------------
    {
        let input = l3(t.eth_in().vlan_pcp(100, 3), s4, OTHER4.into(), 64, L4::Udp(9)).build();
        let output = l3(t.to_nf_b(), s4, OTHER4.into(), 64, L4::Udp(9)).build();
        t.steered("VLAN 100 enters NF b with its tag removed", input, 1, 1, output);
        let input = l3(t.eth_in().vlan(100), s6, CHAIN2_6.into(), 64, L4::Udp(5000)).build();
        let output = l3(t.to_nf_b(), s6, CHAIN2_6.into(), 64, L4::Udp(5000)).build();
        t.steered("IPv6 on VLAN 100 follows the VLAN rule (untagged rules skip tagged frames)", input, 1, 1, output);
    }
    t.ingress_pass("VLAN 200: no rule for it", l3(t.eth_in().vlan(200), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build(), IngressReason::NoMatch);
    t.ingress_pass("QinQ goes to the kernel", l3(t.eth_in().qinq(10).vlan(100), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build(), IngressReason::Qinq);
    t.ingress_pass(
        "stacked 802.1Q tags go to the kernel",
        l3(t.eth_in().tag(EtherType::VLAN, 100).tag(EtherType::VLAN, 101), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build(),
        IngressReason::Qinq,
    );

    // --- Not ours ---------------------------------------------------------
    t.ingress_pass(
        "frame for another MAC",
        l3(PacketBuilder::ethernet(GEN_MAC, MacAddr([2, 9, 9, 9, 9, 9])), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build(),
        IngressReason::NotOurMac,
    );
    t.ingress_pass(
        "ARP broadcast",
        PacketBuilder::ethernet(GEN_MAC, MacAddr([0xff; 6])).arp_request(GEN_MAC, SRC4, Ipv4Addr::new(198, 18, 0, 2)).build(),
        IngressReason::Multicast,
    );
    t.ingress_pass(
        "IPv4 to a multicast MAC",
        l3(PacketBuilder::ethernet(GEN_MAC, MacAddr([0x01, 0, 0x5e, 0, 0, 1])), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build(),
        IngressReason::Multicast,
    );
    t.ingress_pass("ARP unicast to us", t.eth_in().arp_request(GEN_MAC, SRC4, Ipv4Addr::new(198, 18, 0, 2)).build(), IngressReason::NonIp);
    t.ingress_pass("LLDP", t.eth_in().ethertype(EtherType(0x88cc)).payload(&[0u8; 46]).build(), IngressReason::NonIp);

    // --- Broken headers: the kernel's to drop --------------------------------
    let good4 = l3(t.eth_in(), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build();
    let good6 = l3(t.eth_in(), s6, CHAIN2_6.into(), 64, L4::Udp(5000)).build();
    for (ihl, why) in [(0u8, "0"), (4, "4 (< 5)")] {
        let mut b = good4.clone();
        b[14] = 0x40 | ihl;
        t.ingress_pass(format!("IPv4 IHL {why}"), b, IngressReason::Malformed);
    }
    for (off, v, desc) in [(16, 10u16, "IPv4 total length below the header"), (16, 1400, "IPv4 total length beyond the frame")] {
        let mut b = good4.clone();
        b[off..off + 2].copy_from_slice(&v.to_be_bytes());
        t.ingress_pass(desc, b, IngressReason::Malformed);
    }
    let mut b = good6.clone();
    b[18..20].copy_from_slice(&1400u16.to_be_bytes());
    t.ingress_pass("IPv6 payload length beyond the frame", b, IngressReason::Malformed);
    let mut b = good4.clone();
    b[14] = 0x65;
    t.ingress_pass("IPv4 ethertype carrying version 6", b, IngressReason::Malformed);
    let tagged4 = l3(t.eth_in().vlan(100), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build();
    for (name, frame, headers) in [("IPv4", &good4, good4.len()), ("IPv6", &good6, good6.len()), ("VLAN+IPv4", &tagged4, tagged4.len())] {
        for len in 14..headers {
            t.ingress_pass(format!("{name} truncated to {len} bytes"), frame[..len].to_vec(), IngressReason::Malformed);
        }
    }

    // --- Between NFs: whatever NF a sends goes to NF b ---------------------------
    {
        let input = l3(PacketBuilder::ethernet(NFA_MAC, f.nfa_host), s4, CHAIN0_4.into(), 63, L4::Udp(9)).build();
        let output = l3(t.to_nf_b(), s4, CHAIN0_4.into(), 63, L4::Udp(9)).build();
        t.push("NF a's output (TTL rewritten by it) goes to NF b as it is", At::FromNfA, input, Verdict::Redirect, Count::Into(1), Out::Frame(output));
        let input = l3(PacketBuilder::ethernet(NFA_MAC, f.nfa_host), s6, CHAIN2_6.into(), 2, L4::Tcp(1)).build();
        let output = l3(t.to_nf_b(), s6, CHAIN2_6.into(), 2, L4::Tcp(1)).build();
        t.push("NF a's IPv6 answer, of any class, goes to NF b", At::FromNfA, input, Verdict::Redirect, Count::Into(1), Out::Frame(output));
        let input = PacketBuilder::ethernet(NFA_MAC, f.nfa_host).arp_request(NFA_MAC, SRC4, OTHER4).build();
        let output = PacketBuilder::ethernet(f.nfb_host, NFB_MAC).arp_request(NFA_MAC, SRC4, OTHER4).build();
        t.push("even non-IP output follows the chain (the next hop is the NF's)", At::FromNfA, input, Verdict::Redirect, Count::Into(1), Out::Frame(output));
    }

    // --- After the last NF: routed out ----------------------------------------
    let from_b = || PacketBuilder::ethernet(NFB_MAC, f.nfb_host);
    for (desc, src, dst) in [("IPv4", s4, IpAddr::from(CHAIN0_4)), ("IPv6", s6, IpAddr::from(CHAIN2_6))] {
        let input = l3(from_b(), src, dst, 64, L4::Udp(5000)).build();
        let output = l3(t.out0(), src, dst, 63, L4::Udp(5000)).build();
        t.push(
            format!("{desc} after the last NF is routed out, one hop less"),
            At::FromNfB,
            input,
            Verdict::Redirect,
            Count::Exit(Reason::Forwarded),
            Out::Frame(output),
        );
    }
    {
        let input = l3(PacketBuilder::ethernet(NFB_MAC, MacAddr([2, 7, 7, 7, 7, 7])), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build();
        let output = l3(t.out0(), s4, CHAIN0_4.into(), 63, L4::Udp(9)).build();
        t.push(
            "the NF's destination MAC does not matter (a reflector leaves it)",
            At::FromNfB,
            input,
            Verdict::Redirect,
            Count::Exit(Reason::Forwarded),
            Out::Frame(output),
        );
    }
    t.exit_pass("TTL 1 after the last NF: the kernel sends time-exceeded", l3(from_b(), s4, CHAIN0_4.into(), 1, L4::Udp(9)).build(), Reason::Ttl);
    t.exit_pass("next hop without neighbour: the kernel resolves it", l3(from_b(), s4, NO_NEIGH4.into(), 64, L4::Udp(9)).build(), Reason::NoNeigh);
    t.exit_pass("egress not managed by the chain", l3(from_b(), s4, UNMANAGED4.into(), 64, L4::Udp(9)).build(), Reason::NotManaged);
    t.exit_pass("no route", l3(from_b(), s4, NO_ROUTE4.into(), 64, L4::Udp(9)).build(), Reason::Local);
    t.exit_pass(
        "ARP from the NF's stack goes to the host",
        PacketBuilder::ethernet(NFB_MAC, MacAddr([0xff; 6])).arp_request(NFB_MAC, SRC4, Ipv4Addr::new(198, 18, 0, 2)).build(),
        Reason::Multicast,
    );
    t.exit_pass("ARP unicast from the NF's stack goes to the host", from_b().arp_request(NFB_MAC, SRC4, Ipv4Addr::new(198, 18, 0, 2)).build(), Reason::NonIp);
    t.exit_pass(
        "IPv4 to a broadcast MAC is not forwarded (not PACKET_HOST)",
        l3(PacketBuilder::ethernet(NFB_MAC, MacAddr([0xff; 6])), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build(),
        Reason::Multicast,
    );
    t.exit_pass(
        "IPv4 from one of dut's own addresses is a martian",
        l3(from_b(), Ipv4Addr::new(198, 18, 1, 1).into(), CHAIN0_4.into(), 64, L4::Udp(9)).build(),
        Reason::Martian,
    );
    t.exit_pass(
        "IPv4 from a subnet's broadcast address is a martian",
        l3(from_b(), Ipv4Addr::new(198, 18, 0, 255).into(), CHAIN0_4.into(), 64, L4::Udp(9)).build(),
        Reason::Martian,
    );
    t.exit_pass("a tagged frame out of an NF goes to the kernel", l3(from_b().vlan(5), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build(), Reason::VlanUnknown);
    t.exit_pass("IPv4 with a bad header checksum", l3(from_b(), s4, CHAIN0_4.into(), 64, L4::Udp(9)).ipv4_checksum(0x1234).build(), Reason::BadCsum);
    t.push(
        "blackhole route after the last NF: dropped",
        At::FromNfB,
        l3(from_b(), s4, BLACKHOLE4.into(), 64, L4::Udp(9)).build(),
        Verdict::Drop,
        Count::Exit(Reason::Blackhole),
        Out::Unchanged,
    );
    let good_exit = l3(from_b(), s4, CHAIN0_4.into(), 64, L4::Udp(9)).build();
    for len in 14..good_exit.len() {
        t.exit_pass(format!("IPv4 out of an NF truncated to {len} bytes"), good_exit[..len].to_vec(), Reason::Malformed);
    }
    t.cases
}

fn is_arp(frame: &[u8]) -> bool {
    frame.get(12..14) == Some(&[0x08, 0x06][..])
}

/// The counter `c` names, read now.
/// Every counter the tables hold for the ingress, the chains and NFs the
/// fixture uses, by name.
fn snapshot(m: &ChainMaps) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let ingress = m.ingress_stats(0).unwrap();
    for r in IngressReason::ALL {
        out.insert(format!("ingress {}", r.name()), ingress.get(r));
    }
    for chain in 0..10 {
        let (p, b) = m.chain_stats(chain).unwrap();
        out.insert(format!("chain {chain} packets"), p);
        out.insert(format!("chain {chain} bytes"), b);
    }
    for nf in 0..3 {
        let s = m.nf_stats(nf).unwrap();
        for (k, v) in [("in_packets", s.in_packets), ("in_bytes", s.in_bytes), ("out_packets", s.out_packets), ("out_bytes", s.out_bytes), ("gone", s.gone)] {
            out.insert(format!("nf {nf} {k}"), v);
        }
        for r in Reason::ALL {
            out.insert(format!("nf {nf} exit {}", r.name()), s.exit(r));
        }
    }
    out
}

/// The counters a case moves, and by how much: all the others stay still.
fn expected_delta(c: &Case) -> BTreeMap<String, u64> {
    let (len_in, len_out) = (
        c.input.len() as u64,
        match &c.output {
            Out::Frame(b) => b.len() as u64,
            Out::Unchanged => c.input.len() as u64,
        },
    );
    let mut d = BTreeMap::new();
    let into = |d: &mut BTreeMap<String, u64>, nf: u32| {
        d.insert(format!("nf {nf} in_packets"), 1);
        d.insert(format!("nf {nf} in_bytes"), len_out);
    };
    match c.count {
        Count::Ingress(r) => {
            d.insert(format!("ingress {}", r.name()), 1);
        }
        Count::Chain { chain, reason, nf } => {
            d.insert(format!("ingress {}", reason.name()), 1);
            d.insert(format!("chain {chain} packets"), 1);
            d.insert(format!("chain {chain} bytes"), len_in);
            if let Some(nf) = nf {
                into(&mut d, nf);
            }
        }
        Count::Into(nf) => {
            d.insert("nf 0 out_packets".into(), 1);
            d.insert("nf 0 out_bytes".into(), len_in);
            into(&mut d, nf);
        }
        Count::Exit(r) => {
            d.insert("nf 1 out_packets".into(), 1);
            d.insert("nf 1 out_bytes".into(), len_in);
            d.insert(format!("nf 1 exit {}", r.name()), 1);
        }
    }
    d
}

fn run_table(f: &Fixture, cases: &[Case]) -> Vec<String> {
    let (prog, maps) = f.load().expect("chain program loads");
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        // An epoch per case: the slots stamped with it are this case's.
        let epoch = i as u32 + 1;
        libbpf_rs::MapCore::update(&maps.neigh_epoch, &0u32.to_ne_bytes(), &epoch.to_ne_bytes(), libbpf_rs::MapFlags::ANY).unwrap();
        let ifindex = match c.at {
            At::Ingress => f.in0,
            At::FromNfA => f.nfa,
            At::FromNfB => f.nfb,
        };
        let before = snapshot(&maps);
        let res = match run_xdp(prog.prog(), &c.input, XdpContext { ingress_ifindex: ifindex, rx_queue_index: 0 }) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{}: test run failed: {e:#}", c.desc));
                continue;
            }
        };
        // ARP from NF a has no checksum to verify.
        let mut problems = check_run(&res, c.verdict, &c.input, &c.output, !matches!(c.at, At::FromNfA) || !is_arp(&c.input));
        let after = snapshot(&maps);
        let moved: BTreeMap<String, u64> = after.iter().filter(|(k, v)| before[*k] != **v).map(|(k, v)| (k.clone(), v - before[k])).collect();
        let want = expected_delta(c);
        if moved != want {
            problems.push(format!("counters moved {moved:?}, want {want:?}"));
        }
        // A frame routed out stamps its next hop's slot, so the daemon
        // keeps that neighbour confirmed (neigh_use.h); nothing else does.
        let stamped = xnf_core::neigh::slots_stamped(&maps.neigh_use, epoch).unwrap();
        let want_stamp = match c.count {
            Count::Exit(Reason::Forwarded) => vec![xnf_core::neigh::neigh_use_slot(f.out0, NH_MAC.0)],
            _ => Vec::new(),
        };
        if stamped != want_stamp {
            problems.push(format!("neighbour slots stamped {stamped:?}, want {want_stamp:?}"));
        }
        if !problems.is_empty() {
            failures.push(format!("{}: {}", c.desc, problems.join("; ")));
        }
    }
    failures
}

#[test]
fn chain_packet_table() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    let (n, failures) = f
        .dut
        .run(|| {
            let cases = cases(&f);
            (cases.len(), run_table(&f, &cases))
        })
        .unwrap();
    assert_table("chain", n, 150, &failures);
}

/// Rules are replaced as a whole: a new list takes effect at once and the
/// old one is gone (the two copies alternate).
#[test]
fn rule_sets_replace_each_other() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    f.dut
        .run(|| {
            let (prog, maps) = f.load().unwrap();
            let frame = l3(PacketBuilder::ethernet(GEN_MAC, f.in0_mac), SRC4.into(), OTHER4.into(), 64, L4::Udp(9)).build();
            let ctx = XdpContext { ingress_ifindex: f.in0, rx_queue_index: 0 };
            assert_eq!(run_xdp(prog.prog(), &frame, ctx).unwrap().verdict, Verdict::Pass);
            for round in 0..3 {
                let all = Rule { ifindex: f.in0, chain: 9, first_nf: Some(1), class: Class::default(), unsure_drop: false };
                maps.set_rules(&[all]).unwrap();
                assert_eq!(run_xdp(prog.prog(), &frame, ctx).unwrap().verdict, Verdict::Redirect, "round {round}");
                assert_eq!(maps.live_rules().unwrap(), vec![(f.in0, 9, 2)]);
                maps.set_rules(&[]).unwrap();
                assert_eq!(run_xdp(prog.prog(), &frame, ctx).unwrap().verdict, Verdict::Pass, "round {round}");
            }
            assert_eq!(maps.chain_stats(9).unwrap().0, 3);
        })
        .unwrap();
}

/// An NF whose port left the devmap (its namespace was deleted) gets
/// nothing: its traffic is dropped and counted, never sent around it.
#[test]
fn vanished_nf_port_drops_its_traffic() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    f.dut
        .run(|| {
            let (prog, maps) = f.load().unwrap();
            maps.del_tx(f.nfa).unwrap();
            let frame = l3(PacketBuilder::ethernet(GEN_MAC, f.in0_mac), SRC4.into(), CHAIN0_4.into(), 64, L4::Udp(9)).build();
            let ctx = XdpContext { ingress_ifindex: f.in0, rx_queue_index: 0 };
            let res = run_xdp(prog.prog(), &frame, ctx).unwrap();
            assert_eq!(res.verdict, Verdict::Drop);
            assert_eq!(res.frame, frame, "a dropped frame is left as it was");
            assert_eq!(maps.nf_stats(0).unwrap().gone, 1);
            assert_eq!(maps.ingress_stats(0).unwrap().get(IngressReason::NfGone), 1);
        })
        .unwrap();
}
