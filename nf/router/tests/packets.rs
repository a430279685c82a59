//! Packet tests of `router.bpf.c` through `BPF_PROG_TEST_RUN`.
//!
//! Each case is a row: description, ingress, FIB mode, input frame, the
//! verdict and reason the router must give, and the exact output frame
//! (built from scratch by xnf-packet, so every checksum in it is computed
//! independently of the router's incremental update).

mod fixture;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fixture::{dst, Fixture, Ingress, GEN_MAC, NH_MAC, POLICY_SRC4, SKB_NH_MAC, SRC4, SRC6, VLAN200_SRC4, VLAN_NH_MAC};
use xnf_packet::{EtherType, IpProtocol, MacAddr, PacketBuilder, TcpFlags};
use xnf_router::program::{FibMode, Reason, Stats};
use xnf_testrun::table::{assert_table, check_run, Out};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

struct Case {
    desc: String,
    ingress: Ingress,
    fib_direct: bool,
    input: Vec<u8>,
    verdict: Verdict,
    reason: Reason,
    output: Out,
}

const PAYLOAD: &[u8] = b"xnf packet test payload";

/// The L3/L4 part of a test packet, applied to an Ethernet builder.
#[derive(Clone)]
struct Flow {
    src: IpAddr,
    dst: IpAddr,
    hops: u8,
    l4: L4,
}

#[derive(Clone, Copy)]
enum L4 {
    Udp,
    Tcp,
    Icmp,
}

impl Flow {
    fn v4(dst: Ipv4Addr) -> Self {
        Flow { src: SRC4.into(), dst: dst.into(), hops: 64, l4: L4::Udp }
    }
    fn v6(dst: Ipv6Addr) -> Self {
        Flow { src: SRC6.into(), dst: dst.into(), hops: 64, l4: L4::Udp }
    }
    fn hops(mut self, h: u8) -> Self {
        self.hops = h;
        self
    }
    fn src(mut self, s: impl Into<IpAddr>) -> Self {
        self.src = s.into();
        self
    }
    fn l4(mut self, l4: L4) -> Self {
        self.l4 = l4;
        self
    }
    fn on(&self, b: PacketBuilder) -> PacketBuilder {
        let b = b.ip(self.src, self.dst).ttl(self.hops);
        let b = match (self.l4, self.dst) {
            (L4::Udp, _) => b.udp(40000, 9),
            (L4::Tcp, _) => b.tcp(40000, 80, TcpFlags::SYN).seq(7),
            (L4::Icmp, IpAddr::V4(_)) => b.icmpv4_echo(1, 2),
            (L4::Icmp, IpAddr::V6(_)) => b.icmpv6_echo(1, 2),
        };
        b.payload(PAYLOAD)
    }
}

struct Table<'f> {
    f: &'f Fixture,
    cases: Vec<Case>,
}

impl Table<'_> {
    fn eth_in(&self) -> PacketBuilder {
        PacketBuilder::ethernet(GEN_MAC, self.f.in0_mac)
    }
    fn eth_out(&self) -> PacketBuilder {
        PacketBuilder::ethernet(self.f.out0_mac, NH_MAC)
    }
    fn eth_vlan100(&self) -> PacketBuilder {
        PacketBuilder::ethernet(self.f.v100_mac, VLAN_NH_MAC)
    }

    fn push(&mut self, desc: impl Into<String>, input: Vec<u8>, verdict: Verdict, reason: Reason, output: Out) {
        self.cases.push(Case { desc: desc.into(), ingress: Ingress::In0, fib_direct: false, input, verdict, reason, output });
    }

    /// A frame the router must hand to the kernel untouched.
    fn pass(&mut self, desc: impl Into<String>, input: Vec<u8>, reason: Reason) {
        self.push(desc, input, Verdict::Pass, reason, Out::Unchanged);
    }

    /// A flow that must be forwarded out of out0 with one hop less.
    fn forward(&mut self, desc: impl Into<String>, flow: Flow) {
        let input = flow.on(self.eth_in()).build();
        let output = flow.clone().hops(flow.hops - 1).on(self.eth_out()).build();
        self.push(desc, input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
    }

    fn last_mut(&mut self) -> &mut Case {
        self.cases.last_mut().unwrap()
    }
}

fn cases(f: &Fixture) -> Vec<Case> {
    let mut t = Table { f, cases: Vec::new() };

    // --- Forwarded, untagged -> untagged ---------------------------------
    t.forward("IPv4 UDP is forwarded, TTL 64 -> 63", Flow::v4(dst::FWD4));
    t.forward("IPv4 TCP is forwarded", Flow::v4(dst::FWD4).l4(L4::Tcp));
    t.forward("IPv4 ICMP echo is forwarded", Flow::v4(dst::FWD4).l4(L4::Icmp));
    t.forward("IPv4 TTL 255 -> 254", Flow::v4(dst::FWD4).hops(255));
    t.forward("IPv4 TTL 2 -> 1 (still ours: it expires at the next hop)", Flow::v4(dst::FWD4).hops(2));
    t.forward("IPv6 UDP is forwarded, hop limit 64 -> 63", Flow::v6(dst::FWD6));
    t.forward("IPv6 TCP is forwarded", Flow::v6(dst::FWD6).l4(L4::Tcp));
    t.forward("IPv6 ICMPv6 echo is forwarded", Flow::v6(dst::FWD6).l4(L4::Icmp));
    t.forward("IPv6 hop limit 255 -> 254", Flow::v6(dst::FWD6).hops(255));
    t.forward("IPv6 hop limit 2 -> 1", Flow::v6(dst::FWD6).hops(2));
    {
        let fl = Flow::v4(dst::FWD4);
        let input = fl.on(t.eth_in()).dscp(46).ecn(1).ident(0xbeef).dont_frag(true).build();
        let output = fl.clone().hops(63).on(t.eth_out()).dscp(46).ecn(1).ident(0xbeef).dont_frag(true).build();
        t.push("IPv4 DSCP/ECN/DF/ident are kept", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
    }
    {
        // The kernel trims what follows the IP packet on receive and never
        // forwards it; neither does the router.
        let short = |b: PacketBuilder, ttl: u8| b.ip(SRC4.into(), dst::FWD4.into()).ttl(ttl).udp(40000, 9).payload(b"x");
        // Ethernet padding: zeros after the IP packet up to the 60-byte minimum.
        let mut input = short(t.eth_in(), 64).build();
        input.resize(60, 0);
        let output = short(t.eth_out(), 63).build();
        assert!(output.len() < 60);
        t.push("IPv4 with Ethernet padding after tot_len is forwarded without the padding", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
        for (fl, fam) in [(Flow::v4(dst::FWD4), "IPv4"), (Flow::v6(dst::FWD6), "IPv6")] {
            let mut input = fl.on(t.eth_in()).frame_len(1300).build();
            input.extend(std::iter::repeat_n(0xa5u8, 214));
            let output = fl.clone().hops(63).on(t.eth_out()).frame_len(1300).build();
            t.push(
                format!("{fam} in a 1514-byte frame with a 214-byte trailer is forwarded without it"),
                input,
                Verdict::Redirect,
                Reason::Forwarded,
                Out::Frame(output),
            );
        }
        // Only the IP packet meets the route's MTU (locked at 1000): the
        // trailer must not make it too big, nor be sent.
        let fl = Flow::v4(dst::SMALL_MTU4);
        let mut input = fl.on(t.eth_in()).frame_len(900).build();
        input.extend(std::iter::repeat_n(0u8, 300));
        let output = fl.clone().hops(63).on(t.eth_out()).frame_len(900).build();
        t.push(
            "IPv4 of 886 bytes in a 1200-byte frame, route MTU 1000: forwarded, trailer trimmed",
            input,
            Verdict::Redirect,
            Reason::Forwarded,
            Out::Frame(output),
        );
    }
    {
        let fl = Flow::v4(dst::FWD4);
        let input = fl.on(t.eth_in()).fragment(0, true).ident(77).build();
        let output = fl.clone().hops(63).on(t.eth_out()).fragment(0, true).ident(77).build();
        t.push("IPv4 first fragment (MF) is forwarded as is", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
        let input = fl.on(t.eth_in()).fragment(185, false).ident(77).build();
        let output = fl.clone().hops(63).on(t.eth_out()).fragment(185, false).ident(77).build();
        t.push("IPv4 last fragment (offset, no L4 header) is forwarded as is", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
    }
    for (kind, name) in [(IpProtocol::ROUTING, "routing"), (IpProtocol::DSTOPTS, "destination options"), (IpProtocol::FRAGMENT, "fragment")] {
        let fl = Flow::v6(dst::FWD6);
        let body = [0u8; 6];
        let input = fl.on(t.eth_in()).ipv6_ext(kind, &body).build();
        let output = fl.clone().hops(63).on(t.eth_out()).ipv6_ext(kind, &body).build();
        t.push(format!("IPv6 with a {name} header (end-to-end) is forwarded"), input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
    }
    {
        let fl = Flow::v4(dst::FWD4);
        let input = fl.on(t.eth_in()).frame_len(1514).build();
        let output = fl.clone().hops(63).on(t.eth_out()).frame_len(1514).build();
        t.push("IPv4 full-size 1514-byte frame is forwarded", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
    }

    // --- VLANs: all four directions ----------------------------------------
    {
        let fl = Flow::v4(dst::VLAN100_4);
        let input = fl.on(t.eth_in()).build();
        let output = fl.clone().hops(63).on(t.eth_vlan100().vlan(100)).build();
        t.push("VLAN untagged -> tagged: tag 100 pushed, PCP 0", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));

        // VLAN 200 filters strictly: its sources are on its own subnet.
        let fl = fl.src(VLAN200_SRC4);
        let input = fl.on(t.eth_in().vlan_pcp(200, 5)).build();
        let output = fl.clone().hops(63).on(t.eth_vlan100().vlan_pcp(100, 5)).build();
        t.push("VLAN tagged -> tagged: VID 200 rewritten to 100, PCP 5 kept", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));

        let fl = Flow::v4(dst::FWD4).src(VLAN200_SRC4);
        let input = fl.on(t.eth_in().vlan_pcp(200, 3)).build();
        let output = fl.clone().hops(63).on(t.eth_out()).build();
        t.push("VLAN tagged -> untagged: tag 200 popped", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));

        let fl6 = Flow::v6(dst::VLAN100_6);
        let input = fl6.on(t.eth_in()).build();
        let output = fl6.clone().hops(63).on(t.eth_vlan100().vlan(100)).build();
        t.push("VLAN IPv6 untagged -> tagged", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));

        let fl6 = Flow::v6(dst::FWD6);
        let input = fl6.on(t.eth_in().vlan(200)).build();
        let output = fl6.clone().hops(63).on(t.eth_out()).build();
        t.push("VLAN IPv6 tagged -> untagged", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
    }
    {
        // VID 0 is a priority tag: the kernel takes such frames as untagged.
        let fl = Flow::v4(dst::FWD4);
        let input = fl.on(t.eth_in().vlan_pcp(0, 4)).build();
        let output = fl.clone().hops(63).on(t.eth_out()).build();
        t.push("priority-tagged (VID 0) IPv4 is routed as untagged: tag popped", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
        let fl6 = Flow::v6(dst::FWD6);
        let input = fl6.on(t.eth_in().vlan_pcp(0, 4)).build();
        let output = fl6.clone().hops(63).on(t.eth_out()).build();
        t.push("priority-tagged (VID 0) IPv6 is routed as untagged: tag popped", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
        let fl = Flow::v4(dst::VLAN100_4);
        let input = fl.on(t.eth_in().vlan_pcp(0, 4)).build();
        let output = fl.clone().hops(63).on(t.eth_vlan100().vlan_pcp(100, 4)).build();
        t.push("priority-tagged (VID 0) to VLAN 100: VID rewritten, PCP kept", input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
    }
    t.pass("VLAN with a VID that has no VLAN device", Flow::v4(dst::FWD4).on(t.eth_in().vlan(300)).build(), Reason::VlanUnknown);
    t.pass("QinQ (802.1ad outer tag) goes to the kernel", Flow::v4(dst::FWD4).on(t.eth_in().qinq(10).vlan(200)).build(), Reason::Qinq);
    t.pass(
        "stacked 802.1Q tags go to the kernel",
        Flow::v4(dst::FWD4).on(t.eth_in().tag(EtherType::VLAN, 200).tag(EtherType::VLAN, 201)).build(),
        Reason::Qinq,
    );

    // --- Source check (fib_validate_source; in0 loose, VLAN 200 strict) -------
    for (what, src) in [
        ("dut's own address on in0", "198.18.0.2"),
        ("dut's own address on out0", "198.18.1.1"),
        ("in0's subnet broadcast", "198.18.0.255"),
        ("0.0.0.0/8", "0.1.2.3"),
        ("a loopback address", "127.0.0.1"),
        ("a multicast address", "224.0.0.5"),
        ("the limited broadcast", "255.255.255.255"),
        ("a source with no route back (loose filter on in0)", "198.19.99.5"),
    ] {
        let src: Ipv4Addr = src.parse().unwrap();
        t.pass(format!("IPv4 from {what} is a martian"), Flow::v4(dst::FWD4).src(src).on(t.eth_in()).build(), Reason::Martian);
    }
    t.pass(
        "IPv4 on VLAN 200 from a source routed back through in0 fails its strict filter",
        Flow::v4(dst::FWD4).on(t.eth_in().vlan(200)).build(),
        Reason::Martian,
    );
    t.pass(
        "IPv4 that the loose filter must look back for, towards an egress without forwarding, is left to the kernel",
        Flow::v4(Ipv4Addr::new(198, 18, 3, 5)).on(t.eth_in()).build(),
        Reason::Unsupported,
    );
    t.pass(
        "IPv4 from the policy-routed source, with a route back: not a martian (to the unmanaged port)",
        Flow::v4(dst::FWD4).src(POLICY_SRC4).on(t.eth_in()).build(),
        Reason::NotManaged,
    );
    t.forward("IPv4 from in0's network address is forwarded, as the kernel does", Flow::v4(dst::FWD4).src(Ipv4Addr::new(198, 18, 0, 0)));
    t.pass("IPv4 to 0.0.0.0/8 is a martian", Flow::v4(Ipv4Addr::new(0, 0, 0, 7)).on(t.eth_in()).build(), Reason::Martian);
    t.pass("IPv6 to a link-local address is never forwarded", Flow::v6("fe80::1".parse().unwrap()).on(t.eth_in()).build(), Reason::Local);
    t.pass(
        "IPv6 from a link-local address is a martian",
        Flow::v6(dst::FWD6).src("fe80::1".parse::<Ipv6Addr>().unwrap()).on(t.eth_in()).build(),
        Reason::Martian,
    );

    // --- FIB modes -----------------------------------------------------------
    t.pass("full FIB lookup honours a policy rule (to the unmanaged port)", Flow::v4(dst::FWD4).src(POLICY_SRC4).on(t.eth_in()).build(), Reason::NotManaged);
    t.forward("direct FIB lookup skips the policy rule (main table)", Flow::v4(dst::FWD4).src(POLICY_SRC4));
    t.last_mut().fib_direct = true;
    t.forward("direct FIB lookup forwards ordinary IPv6 too", Flow::v6(dst::FWD6));
    t.last_mut().fib_direct = true;

    // --- Slow path: the kernel's job ------------------------------------------
    for ttl in [0, 1] {
        t.pass(format!("IPv4 TTL {ttl}: the kernel sends time-exceeded"), Flow::v4(dst::FWD4).hops(ttl).on(t.eth_in()).build(), Reason::Ttl);
        t.pass(format!("IPv6 hop limit {ttl}: the kernel sends time-exceeded"), Flow::v6(dst::FWD6).hops(ttl).on(t.eth_in()).build(), Reason::Ttl);
    }
    // The route decides first: TTL 1 for this host, or with no route, is
    // the kernel's to deliver or refuse, not to expire.
    t.pass("IPv4 TTL 1 to this host is delivered, not expired", Flow::v4(dst::LOCAL4).hops(1).on(t.eth_in()).build(), Reason::Local);
    t.pass("IPv6 hop limit 1 to this host is delivered, not expired", Flow::v6(dst::LOCAL6).hops(1).on(t.eth_in()).build(), Reason::Local);
    t.pass("IPv4 TTL 1 with no route: no route, not expired", Flow::v4(dst::NO_ROUTE4).hops(1).on(t.eth_in()).build(), Reason::Local);
    t.pass("IPv4 TTL 1 to an unreachable route: unreachable", Flow::v4(dst::UNREACHABLE4).hops(1).on(t.eth_in()).build(), Reason::Unreachable);
    t.push("IPv4 TTL 1 to a blackhole: dropped", Flow::v4(dst::BLACKHOLE4).hops(1).on(t.eth_in()).build(), Verdict::Drop, Reason::Blackhole, Out::Unchanged);
    t.pass("IPv4 TTL 1 to a next hop without neighbour: expires first", Flow::v4(dst::NO_NEIGH4).hops(1).on(t.eth_in()).build(), Reason::Ttl);
    t.pass("IPv4 TTL 1 larger than the route MTU: expires first", Flow::v4(dst::SMALL_MTU4).hops(1).on(t.eth_in()).frame_len(1100).build(), Reason::Ttl);
    t.pass("IPv4 next hop without neighbour entry", Flow::v4(dst::NO_NEIGH4).on(t.eth_in()).build(), Reason::NoNeigh);
    t.pass("IPv6 next hop without neighbour entry", Flow::v6(dst::NO_NEIGH6).on(t.eth_in()).build(), Reason::NoNeigh);
    t.pass("IPv4 egress not managed by xnf", Flow::v4(dst::UNMANAGED4).on(t.eth_in()).build(), Reason::NotManaged);
    // An egress attached in skb mode has no XDP transmit for frames from a
    // driver hook: the kernel forwards them. An instance in skb mode itself
    // transmits through the kernel's generic path, which reaches any port.
    for (fl, fam) in [(Flow::v4(dst::SKB4), "IPv4"), (Flow::v6(dst::SKB6), "IPv6")] {
        t.pass(format!("{fam} to an egress attached in skb mode, from a driver-mode ingress"), fl.on(t.eth_in()).build(), Reason::EgressSkbMode);
        let input = fl.on(t.eth_in()).build();
        let output = fl.clone().hops(63).on(PacketBuilder::ethernet(f.skb0_mac, SKB_NH_MAC)).build();
        t.push(format!("{fam} to an egress attached in skb mode, from an skb-mode ingress"), input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
        t.last_mut().ingress = Ingress::In0Generic;
    }
    t.forward("an skb-mode ingress forwards to a driver-mode egress", Flow::v4(dst::FWD4));
    t.last_mut().ingress = Ingress::In0Generic;
    t.pass("IPv6 egress not managed by xnf", Flow::v6(dst::UNMANAGED6).on(t.eth_in()).build(), Reason::NotManaged);
    t.pass("IPv4 larger than the route MTU (1000)", Flow::v4(dst::SMALL_MTU4).on(t.eth_in()).frame_len(1100).build(), Reason::Mtu);
    t.pass("IPv6 larger than the route MTU (1280)", Flow::v6(dst::SMALL_MTU6).on(t.eth_in()).frame_len(1400).build(), Reason::Mtu);
    t.pass("IPv4 to this host", Flow::v4(dst::LOCAL4).on(t.eth_in()).build(), Reason::Local);
    t.pass("IPv6 to this host", Flow::v6(dst::LOCAL6).on(t.eth_in()).build(), Reason::Local);
    t.pass("IPv4 with no route", Flow::v4(dst::NO_ROUTE4).on(t.eth_in()).build(), Reason::Local);
    t.pass("IPv4 unreachable route: the kernel sends ICMP", Flow::v4(dst::UNREACHABLE4).on(t.eth_in()).build(), Reason::Unreachable);
    t.pass("IPv6 unreachable route: the kernel sends ICMPv6", Flow::v6(dst::UNREACHABLE6).on(t.eth_in()).build(), Reason::Unreachable);
    t.pass("IPv4 prohibit route: the kernel sends ICMP", Flow::v4(dst::PROHIBIT4).on(t.eth_in()).build(), Reason::Unreachable);
    t.push("IPv4 blackhole route is dropped", Flow::v4(dst::BLACKHOLE4).on(t.eth_in()).build(), Verdict::Drop, Reason::Blackhole, Out::Unchanged);
    t.push("IPv6 blackhole route is dropped", Flow::v6(dst::BLACKHOLE6).on(t.eth_in()).build(), Verdict::Drop, Reason::Blackhole, Out::Unchanged);
    for (fl, fam) in [(Flow::v4(dst::FWD4), "IPv4"), (Flow::v6(dst::FWD6), "IPv6")] {
        let input = fl.on(PacketBuilder::ethernet(GEN_MAC, f.in1_mac)).build();
        t.pass(format!("{fam} forwarding disabled on the ingress"), input, Reason::FwdDisabled);
        t.last_mut().ingress = Ingress::In1;
    }
    t.pass(
        "IPv4 options (router alert): the kernel processes them",
        Flow::v4(dst::FWD4).on(t.eth_in()).ipv4_options(&[0x94, 0x04, 0, 0]).build(),
        Reason::IpOptions,
    );
    t.pass(
        "IPv6 hop-by-hop options: every router reads them",
        Flow::v6(dst::FWD6).on(t.eth_in()).ipv6_ext(IpProtocol::HOPOPTS, &[0u8; 6]).build(),
        Reason::Ipv6Hbh,
    );
    t.pass("frame for another MAC", Flow::v4(dst::FWD4).on(PacketBuilder::ethernet(GEN_MAC, MacAddr([2, 9, 9, 9, 9, 9]))).build(), Reason::NotOurMac);
    t.pass("IPv4 to the broadcast MAC", Flow::v4(dst::FWD4).on(PacketBuilder::ethernet(GEN_MAC, MacAddr([0xff; 6]))).build(), Reason::Multicast);
    t.pass("broadcast ARP request", PacketBuilder::ethernet(GEN_MAC, MacAddr([0xff; 6])).arp_request(GEN_MAC, SRC4, dst::LOCAL4).build(), Reason::Multicast);
    t.pass(
        "IPv6 to a multicast MAC (neighbour solicitation's 33:33:ff:..)",
        Flow::v6(dst::LOCAL6).l4(L4::Icmp).on(PacketBuilder::ethernet(GEN_MAC, MacAddr([0x33, 0x33, 0xff, 0, 0, 2]))).build(),
        Reason::Multicast,
    );
    t.pass(
        "LLDP to its multicast MAC",
        PacketBuilder::ethernet(GEN_MAC, MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x0e])).ethertype(EtherType(0x88cc)).payload(&[0u8; 46]).build(),
        Reason::Multicast,
    );
    t.pass("an instance whose interface slot is empty counts everything as unconfigured", Flow::v4(dst::FWD4).on(t.eth_in()).build(), Reason::Unconfigured);
    t.last_mut().ingress = Ingress::In0Unconfigured;
    t.pass("ARP request", t.eth_in().arp_request(GEN_MAC, SRC4, dst::LOCAL4).build(), Reason::NonIp);
    t.pass("LLDP (non-IP ethertype)", t.eth_in().ethertype(EtherType(0x88cc)).payload(&[0u8; 46]).build(), Reason::NonIp);

    // --- Broken headers ----------------------------------------------------
    let good4 = Flow::v4(dst::FWD4).on(t.eth_in()).build();
    let good6 = Flow::v6(dst::FWD6).on(t.eth_in()).build();
    t.pass("IPv4 header checksum wrong", Flow::v4(dst::FWD4).on(t.eth_in()).ipv4_checksum(0x1234).build(), Reason::BadCsum);
    for (ihl, why) in [(0u8, "0"), (4, "4 (< 5)")] {
        let mut b = good4.clone();
        b[14] = 0x40 | ihl;
        t.pass(format!("IPv4 IHL {why}"), b, Reason::Malformed);
    }
    {
        let mut b = good4.clone();
        b[14] = 0x4f; // IHL 15 = 60 bytes, more than the frame has after its UDP header
        b.truncate(14 + 40);
        t.pass("IPv4 IHL 15 longer than the frame", b, Reason::Malformed);
        let mut b = good4.clone();
        b[14] = 0x65; // version 6 inside an IPv4 ethertype
        t.pass("IPv4 ethertype carrying version 6", b, Reason::Malformed);
        let mut b = good4.clone();
        b[16..18].copy_from_slice(&10u16.to_be_bytes());
        t.pass("IPv4 total length below the header length", b, Reason::Malformed);
        let mut b = good4.clone();
        b[16..18].copy_from_slice(&1400u16.to_be_bytes());
        t.pass("IPv4 total length beyond the frame", b, Reason::Malformed);
        let mut b = good6.clone();
        b[18..20].copy_from_slice(&1400u16.to_be_bytes());
        t.pass("IPv6 payload length beyond the frame", b, Reason::Malformed);
        let mut b = good6.clone();
        b[14] = 0x45;
        t.pass("IPv6 ethertype carrying version 4", b, Reason::Malformed);
    }

    // --- Every truncation of the Ethernet, VLAN, IPv4 and IPv6 headers ----
    // (BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header;
    // truncation_below_ethernet_header checks that separately.)
    let tagged4 = Flow::v4(dst::FWD4).src(VLAN200_SRC4).on(t.eth_in().vlan(200)).build();
    let tagged6 = Flow::v6(dst::FWD6).on(t.eth_in().vlan(200)).build();
    for (name, frame, headers) in
        [("IPv4", &good4, 14 + 20 + 8), ("IPv6", &good6, 14 + 40 + 8), ("VLAN+IPv4", &tagged4, 18 + 20 + 8), ("VLAN+IPv6", &tagged6, 18 + 40 + 8)]
    {
        for len in 14..headers {
            t.pass(format!("{name} truncated to {len} bytes"), frame[..len].to_vec(), Reason::Malformed);
        }
    }
    t.cases
}

/// Runs the table; returns one line per failed case.
fn run_table(f: &Fixture, cases: &[Case]) -> Vec<String> {
    let mut failures = Vec::new();
    let mut loaded = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let key = (c.ingress, if c.fib_direct { FibMode::Direct } else { FibMode::Full });
        if !loaded.iter().any(|(k, _)| *k == key) {
            loaded.push((key, f.load(key.0, key.1).expect("router loads")));
        }
        let (_, (prog, maps, slot)) = loaded.iter().find(|(k, _)| *k == key).unwrap();
        let before = maps.stats(*slot).unwrap();
        // A fresh epoch per case: only this frame can stamp with it.
        let epoch = i as u32 + 1;
        maps.set_neigh_epoch(epoch).unwrap();
        let ctx = XdpContext { ingress_ifindex: f.ifindex(c.ingress), rx_queue_index: 0 };
        let res = match run_xdp(prog.prog(), &c.input, ctx) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{}: test run failed: {e:#}", c.desc));
                continue;
            }
        };
        let after = maps.stats(*slot).unwrap().delta(&before);
        let mut problems = check_run(&res, c.verdict, &c.input, &c.output, true);
        // The whole delta: one packet (and its bytes) under the verdict and
        // the reason, every other counter still.
        let mut want_delta = Stats::default();
        want_delta.packets[c.verdict as usize] = 1;
        want_delta.bytes[c.verdict as usize] = c.input.len() as u64;
        want_delta.reasons[c.reason as usize] = 1;
        if after != want_delta {
            let got: Vec<_> = Reason::ALL.iter().filter(|r| after.reason(**r) > 0).map(|r| format!("{}={}", r.name(), after.reason(*r))).collect();
            problems.push(format!("counters moved: reasons {got:?}, packets {:?}, bytes {:?}; want {} once", after.packets, after.bytes, c.reason.name()));
        }
        problems.extend(f.neighbour_stamp_problem(maps, epoch, c.verdict, &c.output));
        if !problems.is_empty() {
            failures.push(format!("{}: {}", c.desc, problems.join("; ")));
        }
    }
    failures
}

#[test]
fn router_packet_table() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    let (n, failures) = f
        .dut
        .run(|| {
            let cases = cases(&f);
            (cases.len(), run_table(&f, &cases))
        })
        .unwrap();
    assert_table("router", n, 100, &failures);
}

/// The incremental TTL checksum update equals a from-scratch checksum for
/// many headers (identification, addresses, TTL and TOS varied).
#[test]
fn ttl_checksum_update_matches_recomputation() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    let failures = f
        .dut
        .run(|| {
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut t = Table { f: &f, cases: Vec::new() };
            for i in 0..2000 {
                let r = next();
                let dst = Ipv4Addr::new(198, 18, 16, (r & 0xff) as u8);
                // Any source but the one policy routing diverts, dut's own
                // and the subnet's broadcast addresses.
                let src = Ipv4Addr::new(198, 18, 0, 10 + ((r >> 8) % 64) as u8);
                let ttl = 2 + ((r >> 16) % 254) as u8;
                let ident = ((r >> 24) & 0xffff) as u32;
                let dscp = ((r >> 40) & 0x3f) as u8;
                let fl = Flow::v4(dst).src(src).hops(ttl);
                let input = fl.on(t.eth_in()).ident(ident).dscp(dscp).build();
                let output = fl.clone().hops(ttl - 1).on(t.eth_out()).ident(ident).dscp(dscp).build();
                t.push(format!("random header #{i} ttl {ttl}"), input, Verdict::Redirect, Reason::Forwarded, Out::Frame(output));
            }
            run_table(&f, &t.cases)
        })
        .unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn truncation_below_ethernet_header_is_refused_by_the_kernel() {
    let f = Fixture::new().expect("fixture namespace (run as root)");
    f.dut
        .run(|| {
            let (prog, _, _) = f.load(Ingress::In0, FibMode::Full).unwrap();
            let ctx = XdpContext { ingress_ifindex: f.in0, rx_queue_index: 0 };
            for len in 0..14 {
                assert!(run_xdp(prog.prog(), &vec![0u8; len], ctx).is_err(), "a {len}-byte frame was run");
            }
        })
        .unwrap();
}
