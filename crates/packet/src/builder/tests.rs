use super::*;
use crate::{parse, L3Info, L4Info, Parsed};

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const S4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const D4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn assert_truncations_fail(frame: &[u8]) {
    for n in 0..frame.len() {
        assert!(parse(&frame[..n]).is_err(), "prefix of {n} bytes parsed");
    }
}

// Expected bytes below were produced independently with scapy 2.8.
#[test]
fn golden_vlan_ipv4_udp() {
    let f = PacketBuilder::ethernet(A, B).vlan(100).ipv4(S4, D4).ttl(5).ident(0x1234).dont_frag(true).udp(1234, 53).payload(b"hello").build();
    #[rustfmt::skip]
    let want = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x81, 0x00, 0x00, 0x64,
        0x08, 0x00, 0x45, 0x00, 0x00, 0x21, 0x12, 0x34, 0x40, 0x00, 0x05, 0x11, 0x4f, 0x96, 0x0a, 0x00,
        0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, 0x04, 0xd2, 0x00, 0x35, 0x00, 0x0d, 0xa2, 0xf8, 0x68, 0x65,
        0x6c, 0x6c, 0x6f,
    ];
    assert_eq!(f, want);
}

#[test]
fn golden_qinq_ipv6_icmpv6_echo() {
    let f = PacketBuilder::ethernet(A, B).vlan_pcp(100, 3).qinq(200).ipv6(v6("2001:db8::1"), v6("2001:db8::2")).icmpv6_echo(7, 9).payload(b"ping").build();
    #[rustfmt::skip]
    let want = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x88, 0xa8, 0x00, 0xc8,
        0x81, 0x00, 0x60, 0x64, 0x86, 0xdd, 0x60, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x3a, 0x40, 0x20, 0x01,
        0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01,
        0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x80, 0x00,
        0x45, 0x63, 0x00, 0x07, 0x00, 0x09, 0x70, 0x69, 0x6e, 0x67,
    ];
    assert_eq!(f, want);
}

#[test]
fn golden_ipv4_tcp_syn_with_mss() {
    let f = PacketBuilder::ethernet(A, B)
        .ipv4(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 2))
        .tcp(40000, 80, TcpFlags::SYN)
        .seq(1000)
        .window(1024)
        .tcp_options(&[2, 4, 0x05, 0xb4])
        .build();
    #[rustfmt::skip]
    let want = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45, 0x00,
        0x00, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x40, 0x06, 0x8e, 0x95, 0xc0, 0x00, 0x02, 0x01, 0xc6, 0x33,
        0x64, 0x02, 0x9c, 0x40, 0x00, 0x50, 0x00, 0x00, 0x03, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x60, 0x02,
        0x04, 0x00, 0x07, 0x77, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4,
    ];
    assert_eq!(f, want);
}

#[test]
fn golden_ipv6_ext_chain() {
    let f = PacketBuilder::ethernet(A, B)
        .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
        .ipv6_ext(IpProtocol::HOPOPTS, &[0x05, 0x02, 0x00, 0x00]) // router alert, PadN added
        .ipv6_ext(IpProtocol::ROUTING, &[0, 0, 0, 0, 0, 0])
        .fragment(0, true)
        .ident(0xdeadbeef)
        .udp(5000, 6000)
        .payload(b"xy")
        .build();
    #[rustfmt::skip]
    let want = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0xdd, 0x60, 0x00,
        0x00, 0x00, 0x00, 0x22, 0x00, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x2b, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00, 0x2c, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef, 0x13, 0x88,
        0x17, 0x70, 0x00, 0x0a, 0x00, 0xf4, 0x78, 0x79,
    ];
    assert_eq!(f, want);
    let p = parse(&f).unwrap();
    let L3Info::Ipv6(ip) = &p.l3 else { panic!("{p:?}") };
    assert_eq!(ip.ext_headers, [IpProtocol::HOPOPTS, IpProtocol::ROUTING, IpProtocol::FRAGMENT]);
    assert_eq!(ip.fragment, Some(crate::Ipv6Fragment { offset: 0, more: true, ident: 0xdeadbeef }));
    assert_eq!(ip.protocol, IpProtocol::UDP);
    // first fragment: ports are read, the checksum cannot be judged
    assert!(matches!(p.l4, L4Info::Udp { src_port: 5000, dst_port: 6000, checksum_ok: None, .. }));
    assert_eq!(p.payload(&f), b"xy");
    assert_truncations_fail(&f);
}

#[test]
fn ipv6_ext_padding() {
    let f = PacketBuilder::ethernet(A, B)
        .ipv6(v6("fe80::1"), v6("fe80::2"))
        .ipv6_ext(IpProtocol::DSTOPTS, &[0x1e]) // 3 bytes -> PadN of 5
        .ipv6_ext(IpProtocol::HOPOPTS, &[1, 3, 0, 0, 0]) // 7 bytes -> Pad1
        .ipv6_ext(IpProtocol::DSTOPTS, &[1, 4, 0, 0, 0, 0]) // exactly 8
        .ipv6_ext(IpProtocol::ROUTING, &[4, 0, 0, 0, 0, 0, 1, 2, 3]) // 11 -> 16, zeros
        .tcp(1, 2, TcpFlags::ACK)
        .build();
    let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
    let hs: Vec<_> = ip.ext_headers().map(|h| h.unwrap().bytes.to_vec()).collect();
    assert_eq!(hs[0], [0, 0, 0x1e, 1, 3, 0, 0, 0]);
    assert_eq!(hs[1], [60, 0, 1, 3, 0, 0, 0, 0]);
    assert_eq!(hs[2], [43, 0, 1, 4, 0, 0, 0, 0]);
    assert_eq!(hs[3], [6, 1, 4, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 0]);
    assert_eq!(ip.next_header(), IpProtocol::DSTOPTS);
    assert_eq!(ip.upper_layer().unwrap(), (IpProtocol::TCP, 40 + 40));
    let p = parse(&f).unwrap();
    assert!(matches!(p.l4, L4Info::Tcp { checksum_ok: Some(true), .. }), "{p:?}");
    assert_truncations_fail(&f);
}

fn check_roundtrip(tags: usize, v6: bool, l4: usize) {
    let payload: Vec<u8> = (0..37u8).collect();
    let mut b = PacketBuilder::ethernet(A, B);
    if tags >= 1 {
        b = b.vlan_pcp(100, 5);
    }
    if tags >= 2 {
        b = b.qinq(200);
    }
    let (src, dst): (IpAddr, IpAddr) = if v6 { (self::v6("2001:db8::a").into(), self::v6("2001:db8::b").into()) } else { (S4.into(), D4.into()) };
    b = b.ip(src, dst).ttl(17);
    b = match (l4, v6) {
        (0, _) => b.udp(1111, 2222),
        (1, _) => b.tcp(3333, 4444, TcpFlags::PSH | TcpFlags::ACK).seq(7).ack(8),
        (_, false) => b.icmpv4_echo(0x55, 0x66),
        (_, true) => b.icmpv6_echo(0x55, 0x66),
    };
    let f = b.clone().payload(&payload).build();
    let ctx = format!("tags {tags} v6 {v6} l4 {l4}");
    let p: Parsed = parse(&f).unwrap();
    assert_eq!((p.src_mac, p.dst_mac), (A, B), "{ctx}");
    let tpids: Vec<_> = p.vlans.iter().map(|v| (v.tpid, v.vid, v.pcp)).collect();
    let want_tags = [(EtherType::QINQ, 200, 0), (EtherType::VLAN, 100, 5)];
    assert_eq!(tpids, want_tags[2 - tags..], "{ctx}");
    assert_eq!(p.l3_offset, 14 + 4 * tags, "{ctx}");
    assert_eq!((p.src_ip(), p.dst_ip(), p.ttl()), (Some(src), Some(dst), Some(17)), "{ctx}");
    assert!(p.checksums_ok() && !p.is_fragment(), "{ctx}");
    assert_eq!(p.payload(&f), payload, "{ctx}");
    assert_eq!(p.payload_offset + p.payload_len, f.len(), "{ctx}");
    match (&p.l4, l4) {
        (L4Info::Udp { src_port: 1111, dst_port: 2222, len: 45, checksum_ok: Some(true) }, 0) => {}
        (L4Info::Tcp { src_port: 3333, dst_port: 4444, seq: 7, ack: 8, flags, window: 65535, checksum_ok: Some(true) }, 1) => {
            assert_eq!(*flags, TcpFlags::PSH | TcpFlags::ACK)
        }
        (L4Info::Icmpv4 { msg_type: 8, code: 0, rest: [0, 0x55, 0, 0x66], checksum_ok: Some(true) }, 2) if !v6 => {}
        (L4Info::Icmpv6 { msg_type: 128, code: 0, rest: [0, 0x55, 0, 0x66], checksum_ok: Some(true) }, 2) if v6 => {}
        (other, _) => panic!("{ctx}: {other:?}"),
    }
    assert_truncations_fail(&f);

    // frame_len pads the payload; every length and checksum still holds.
    let padded = b.payload(&payload).frame_len(200).build();
    assert_eq!(padded.len(), 200);
    let q = parse(&padded).unwrap();
    assert!(q.checksums_ok(), "{ctx}");
    assert_eq!(&q.payload(&padded)[..payload.len()], payload, "{ctx}");
    assert!(q.payload(&padded)[payload.len()..].iter().all(|&x| x == 0), "{ctx}");
    assert_eq!(q.payload_offset + q.payload_len, 200, "{ctx}");
}

#[test]
fn roundtrip_all_combinations() {
    for tags in 0..3 {
        for v6 in [false, true] {
            for l4 in 0..3 {
                check_roundtrip(tags, v6, l4);
            }
        }
    }
}

#[test]
fn frame_len_and_min_frame_len() {
    let b = PacketBuilder::ethernet(A, B).ipv4(S4, D4).udp(1, 2).payload(b"abc");
    assert_eq!(b.build().len(), 45);
    let f = b.clone().frame_len(60).build();
    assert_eq!(f.len(), 60);
    let u = UdpPacket::new_checked(&f[34..]).unwrap();
    assert_eq!(u.len(), 26);
    assert_eq!(u.payload(), b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    assert!(u.verify_checksum_v4(S4, D4));
    assert_eq!(b.clone().frame_len(45).build().len(), 45);
    assert_eq!(b.clone().frame_len(44).try_build(), Err(Error::FrameTooShort { needed: 45, requested: 44 }));
    assert_eq!(b.clone().min_frame_len(60).build().len(), 60);
    assert_eq!(b.clone().min_frame_len(20).build().len(), 45);
    // a trailer is outside every length field
    let t = b.clone().trailer(&[0xee; 4]).frame_len(60).build();
    assert_eq!((t.len(), &t[56..]), (60, &[0xee; 4][..]));
    let p = parse(&t).unwrap();
    assert_eq!((p.payload_len, p.payload_offset), (14, 42));
    assert!(p.checksums_ok());
}

#[test]
#[should_panic(expected = "frame length 40")]
fn build_panics_when_frame_len_too_small() {
    PacketBuilder::ethernet(A, B).ipv4(S4, D4).udp(1, 2).frame_len(40).build();
}

#[test]
fn ipv4_options_are_padded() {
    for (opts, ihl) in [(&[][..], 5), (&[1, 1, 1][..], 6), (&[0x94, 4, 0, 0][..], 6), (&[1; 5][..], 7), (&[1; 40][..], 15)] {
        let f = PacketBuilder::ethernet(A, B).ipv4(S4, D4).ipv4_options(opts).udp(1, 2).payload(b"x").build();
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(ip.ihl(), ihl);
        assert_eq!(&ip.options()[..opts.len()], opts);
        assert!(ip.options()[opts.len()..].iter().all(|&b| b == 0));
        assert!(ip.verify_checksum());
        let p = parse(&f).unwrap();
        assert!(p.checksums_ok() && p.payload(&f) == b"x");
        assert_truncations_fail(&f);
    }
    let e = PacketBuilder::ethernet(A, B).ipv4(S4, D4).ipv4_options(&[1; 41]).udp(1, 2).try_build();
    assert!(matches!(e, Err(Error::Build(_))));
}

#[test]
fn ipv4_fragments() {
    let first = PacketBuilder::ethernet(A, B).ipv4(S4, D4).ident(77).fragment(0, true).udp(9, 10).payload(&[1; 16]).build();
    let p = parse(&first).unwrap();
    let L3Info::Ipv4(ip) = &p.l3 else { panic!() };
    assert_eq!((ip.ident, ip.more_frags, ip.frag_offset), (77, true, 0));
    assert!(p.is_fragment());
    assert!(matches!(p.l4, L4Info::Udp { src_port: 9, dst_port: 10, checksum_ok: None, .. }));

    let later = PacketBuilder::ethernet(A, B).ipv4(S4, D4).fragment(3, false).protocol(IpProtocol::UDP).payload(&[7; 8]).build();
    let p = parse(&later).unwrap();
    let L3Info::Ipv4(ip) = &p.l3 else { panic!() };
    assert_eq!((ip.more_frags, ip.frag_offset, ip.protocol), (false, 3, IpProtocol::UDP));
    assert_eq!((p.l4.clone(), p.l4_offset, p.payload_offset, p.payload_len), (L4Info::None, None, 34, 8));
    assert!(p.is_fragment() && p.checksums_ok());

    let later6 = PacketBuilder::ethernet(A, B).ipv6(v6("::1"), v6("::2")).fragment(1, true).protocol(IpProtocol::TCP).payload(&[9; 8]).build();
    let p = parse(&later6).unwrap();
    assert_eq!((p.l4.clone(), p.payload_offset, p.payload_len), (L4Info::None, 14 + 48, 8));
    assert!(p.is_fragment());
}

#[test]
fn non_ip_frames() {
    let sip = Ipv4Addr::new(192, 168, 1, 1);
    let tip = Ipv4Addr::new(192, 168, 1, 2);
    let f = PacketBuilder::ethernet(A, MacAddr::BROADCAST).vlan(3).arp_request(A, sip, tip).min_frame_len(60).build();
    assert_eq!(f.len(), 60);
    assert_eq!(&f[16..18], &[0x08, 0x06]);
    let p = parse(&f).unwrap();
    assert_eq!(p.l3, L3Info::Arp(ArpRepr::request(A, sip, tip)));
    assert_eq!((p.payload_offset, p.payload_len), (46, 14));

    let r = PacketBuilder::ethernet(B, A).arp_reply(B, tip, A, sip).build();
    assert_eq!(parse(&r).unwrap().l3, L3Info::Arp(ArpRepr::reply(B, tip, A, sip)));

    let raw = PacketBuilder::ethernet(A, B).ethertype(0x88b5).payload(&[1, 2, 3]).frame_len(60).build();
    assert_eq!(&raw[12..17], &[0x88, 0xb5, 1, 2, 3]);
    assert_eq!(raw.len(), 60);
}

#[test]
fn tags_and_ip_fields() {
    let f = PacketBuilder::ethernet(A, B)
        .tag(EtherType::VLAN, 0xf00d)
        .qinq_pcp(7, 6)
        .ipv6(v6("::1"), v6("::2"))
        .dscp(46)
        .ecn(2)
        .flow_label(0xabcde)
        .ttl(1)
        .protocol(IpProtocol::NONE)
        .build();
    let p = parse(&f).unwrap();
    let tags: Vec<_> = p.vlans.iter().map(|v| (v.tpid, v.vid, v.pcp, v.dei)).collect();
    assert_eq!(tags, [(EtherType::QINQ, 7, 6, false), (EtherType::VLAN, 0xd, 7, true)]);
    let L3Info::Ipv6(ip) = &p.l3 else { panic!() };
    assert_eq!((ip.traffic_class, ip.flow_label, ip.hop_limit, ip.protocol), (46 << 2 | 2, 0xabcde, 1, IpProtocol::NONE));
    assert_eq!(p.l4, L4Info::Other(IpProtocol::NONE));

    let f = PacketBuilder::ethernet(A, B).ipv4(S4, D4).dscp(10).ecn(1).icmpv4(11, 0, [0; 4]).build();
    let L3Info::Ipv4(ip) = parse(&f).unwrap().l3 else { panic!() };
    assert_eq!((ip.dscp, ip.ecn, ip.dont_frag), (10, 1, false));
}

#[test]
fn checksum_overrides() {
    let b = PacketBuilder::ethernet(A, B).ipv4(S4, D4).udp(1, 2).payload(b"z");
    let p = parse(&b.clone().l4_checksum(0x1234).build()).unwrap();
    assert!(matches!(p.l4, L4Info::Udp { checksum_ok: Some(false), .. }));
    let p = parse(&b.clone().l4_checksum(0).build()).unwrap();
    assert!(matches!(p.l4, L4Info::Udp { checksum_ok: Some(true), .. }));
    let p = parse(&b.clone().ipv4_checksum(0).build()).unwrap();
    assert!(!p.checksums_ok());
}

#[test]
fn misuse_is_reported() {
    let e = |b: PacketBuilder| assert!(matches!(b.try_build(), Err(Error::Build(_))), "{b:?}");
    let eth = || PacketBuilder::ethernet(A, B);
    e(eth());
    e(eth().ttl(3).ipv4(S4, D4).udp(1, 2));
    e(eth().ipv4(S4, D4));
    e(eth().udp(1, 2));
    e(eth().ipv4(S4, D4).udp(1, 2).udp(1, 2));
    e(eth().ipv4(S4, D4).icmpv6_echo(1, 2));
    e(eth().ipv6(v6("::1"), v6("::2")).icmpv4_echo(1, 2));
    e(eth().ipv4(S4, D4).ipv6(v6("::1"), v6("::2")).udp(1, 2));
    e(eth().ip(S4.into(), v6("::2").into()).udp(1, 2));
    e(eth().vlan(4096).ipv4(S4, D4).udp(1, 2));
    e(eth().qinq_pcp(1, 8).ipv4(S4, D4).udp(1, 2));
    e(eth().ipv4(S4, D4).ident(0x10000).udp(1, 2));
    e(eth().ipv4(S4, D4).fragment(0x2000, false).udp(1, 2));
    e(eth().ipv4(S4, D4).dscp(64).udp(1, 2));
    e(eth().ipv4(S4, D4).flow_label(1).udp(1, 2));
    e(eth().ipv4(S4, D4).ipv6_ext(IpProtocol::HOPOPTS, &[]).udp(1, 2));
    e(eth().ipv6(v6("::1"), v6("::2")).ipv6_ext(IpProtocol::UDP, &[]).udp(1, 2));
    e(eth().ipv6(v6("::1"), v6("::2")).ipv6_ext(IpProtocol::FRAGMENT, &[0; 5]).udp(1, 2));
    e(eth().ipv6(v6("::1"), v6("::2")).dont_frag(true).udp(1, 2));
    e(eth().ipv4(S4, D4).udp(1, 2).seq(5));
    e(eth().ipv4(S4, D4).tcp(1, 2, TcpFlags::SYN).tcp_options(&[1; 41]));
    e(eth().ethertype(0x88b5).payload(b"x").l4_checksum(1));
    e(eth().arp_request(A, S4, D4).ipv4(S4, D4).udp(1, 2));
}
