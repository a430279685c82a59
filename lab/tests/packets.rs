//! Packet tests of the lab's programs (`gen`, `sink`) and of `pass`
//! through `BPF_PROG_TEST_RUN`: tables of input, verdict and exact output.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use xnf_lab::programs::gen::{imix_sequence, GenConfig, GenProgram, AMS_IX_IMIX};
use xnf_lab::programs::sink::{SinkOptions, SinkProgram};
use xnf_packet::{parse, MacAddr, PacketBuilder, TcpFlags};
use xnf_pass::PassProgram;
use xnf_testrun::{run_xdp, Verdict, XdpContext};

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

fn v4() -> (IpAddr, IpAddr) {
    (Ipv4Addr::new(198, 18, 0, 1).into(), Ipv4Addr::new(198, 18, 1, 2).into())
}
fn v6() -> (IpAddr, IpAddr) {
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into(), Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2).into())
}

fn udp(addrs: (IpAddr, IpAddr), sport: u16, len: usize) -> Vec<u8> {
    PacketBuilder::ethernet(A, B).ip(addrs.0, addrs.1).udp(sport, 9).frame_len(len).build()
}

/// Frames that pass and sink must handle whatever they are.
fn assorted() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("IPv4 UDP", udp(v4(), 1, 60)),
        ("IPv6 UDP", udp(v6(), 1, 1514)),
        ("ARP", PacketBuilder::ethernet(A, B).arp_request(A, Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2)).build()),
        ("bare Ethernet header", PacketBuilder::ethernet(A, B).ethertype(xnf_packet::EtherType(0x88b5)).build()),
        ("garbage", vec![0xff; 99]),
        ("802.1Q IPv4 UDP", PacketBuilder::ethernet(A, B).vlan(100).ip(v4().0, v4().1).udp(1, 9).frame_len(64).build()),
        ("802.1ad outside 802.1Q", PacketBuilder::ethernet(A, B).qinq(5).vlan(6).ip(v4().0, v4().1).udp(1, 9).frame_len(68).build()),
    ]
}

// BPF_PROG_TEST_RUN needs a device for the context only when one is named;
// ifindex 0 runs without one (no FIB, no devmap: these programs use neither).
const NO_DEV: XdpContext = XdpContext { ingress_ifindex: 0, rx_queue_index: 0 };

#[test]
fn pass_passes_every_frame_unchanged() {
    let p = PassProgram::load().unwrap();
    for (desc, frame) in assorted() {
        let r = run_xdp(p.prog(), &frame, NO_DEV).unwrap();
        assert_eq!((r.verdict, &r.frame), (Verdict::Pass, &frame), "{desc}");
    }
}

#[test]
fn sink_drops_and_counts_every_frame() {
    for opts in [SinkOptions::default(), SinkOptions { capture_ring: Some(1 << 16), count_sizes: true, count_tags: Some(100), ..Default::default() }] {
        let s = SinkProgram::load_with(opts).unwrap();
        let mut want = 0;
        for (desc, frame) in assorted() {
            let r = run_xdp(s.prog(), &frame, NO_DEV).unwrap();
            assert_eq!(r.verdict, Verdict::Drop, "{desc}");
            want += 1;
            assert_eq!(s.counts().unwrap().0, want, "{desc} not counted once");
        }
        let bytes: usize = assorted().iter().map(|(_, f)| f.len()).sum();
        assert_eq!(s.counts().unwrap().1, bytes as u64);
        let c = s.counter().unwrap();
        assert_eq!(c.total().unwrap().capture_lost, 0);
        let sizes = c.sizes().unwrap();
        if opts.count_sizes {
            let mut want = std::collections::BTreeMap::new();
            for (_, f) in assorted() {
                *want.entry(f.len() as u32).or_insert(0u64) += 1;
            }
            assert_eq!(sizes, want);
        } else {
            assert!(sizes.is_empty(), "sizes counted without count_sizes");
        }
        // Tagged: an 802.1Q tag outermost (what dut puts on a tagged egress).
        let tagged = u64::from(opts.count_tags.is_some());
        assert_eq!(c.tags().unwrap(), (tagged, tagged), "{opts:?}");
        if opts.count_tags.is_some() {
            let other = PacketBuilder::ethernet(A, B).vlan(200).ip(v4().0, v4().1).udp(1, 9).frame_len(64).build();
            run_xdp(s.prog(), &other, NO_DEV).unwrap();
            assert_eq!(c.tags().unwrap(), (2, 1), "VLAN 200 is tagged, not of VLAN 100");
        }
    }
}

/// The far end of `xnf lab fwd-latency`'s probes: IPv4 UDP to the
/// reflect port goes back with MACs, addresses and ports swapped (both
/// checksums still valid: the frame is what the other side would build),
/// counted apart; everything else is dropped and counted as before.
#[test]
fn reflecting_sink_turns_probes_around_and_drops_the_rest() {
    let s = SinkProgram::load_with(SinkOptions { reflect_port: Some(7), ..Default::default() }).unwrap();
    let (a, b) = v4();
    let probe = |from: (MacAddr, IpAddr, u16), to: (MacAddr, IpAddr, u16)| {
        PacketBuilder::ethernet(from.0, to.0).ip(from.1, to.1).udp(from.2, to.2).payload(b"XNFL\0\0\0\x2a").frame_len(60).build()
    };
    let r = run_xdp(s.prog(), &probe((A, a, 1024), (B, b, 7)), NO_DEV).unwrap();
    assert_eq!((r.verdict, r.frame), (Verdict::Tx, probe((B, b, 7), (A, a, 1024))));
    let v6_probe = PacketBuilder::ethernet(A, B).ip(v6().0, v6().1).udp(1024, 7).payload(b"XNFL").build();
    // What is not a probe, though its bytes where the ports would be say 7.
    let later_fragment = PacketBuilder::ethernet(A, B).ip(a, b).udp(1024, 7).fragment(1, false).payload(b"XNFL").frame_len(60).build();
    let first_fragment = PacketBuilder::ethernet(A, B).ip(a, b).udp(1024, 7).fragment(0, true).payload(b"XNFL").frame_len(60).build();
    let tagged = PacketBuilder::ethernet(A, B).vlan(5).ip(a, b).udp(1024, 7).payload(b"XNFL").frame_len(64).build();
    let options = PacketBuilder::ethernet(A, B).ip(a, b).ipv4_options(&[1, 1, 1, 1]).udp(1024, 7).payload(b"XNFL").frame_len(64).build();
    let truncated = probe((A, a, 1024), (B, b, 7))[..40].to_vec();
    let others = [
        ("UDP to port 9", udp(v4(), 1, 60)),
        ("IPv6 UDP to port 7", v6_probe),
        ("a later fragment whose payload reads as UDP to port 7", later_fragment),
        ("a first fragment to port 7", first_fragment),
        ("a tagged probe", tagged),
        ("a probe with IP options", options),
        ("a probe cut in its UDP header", truncated),
    ];
    for (desc, frame) in others.iter().cloned().chain(assorted()) {
        let r = run_xdp(s.prog(), &frame, NO_DEV).unwrap();
        assert_eq!(r.verdict, Verdict::Drop, "{desc}");
    }
    let c = s.counter().unwrap().total().unwrap();
    assert_eq!((c.reflected, c.packets), (1, others.len() as u64 + assorted().len() as u64), "every frame counted once, probes apart");
}

#[test]
fn capturing_sink_hands_over_every_frame_exactly() {
    let s = SinkProgram::load_with(SinkOptions { capture_ring: Some(1 << 16), ..Default::default() }).unwrap();
    let mut frames = assorted();
    frames.push(("jumbo, cut at 1518", vec![0xab; 3000]));
    for (_, f) in &frames {
        assert_eq!(run_xdp(s.prog(), f, NO_DEV).unwrap().verdict, Verdict::Drop);
    }
    let mut got = Vec::new();
    s.counter().unwrap().read_capture(&|| true, &mut |c| got.push(c)).unwrap();
    assert_eq!(got.len(), frames.len());
    for (c, (desc, f)) in got.iter().zip(&frames) {
        assert_eq!(c.len as usize, f.len(), "{desc}");
        assert_eq!(c.data, f[..f.len().min(1518)], "{desc}");
    }
}

#[test]
fn capturing_sink_counts_what_the_ring_cannot_hold() {
    let s = SinkProgram::load_with(SinkOptions { capture_ring: Some(4096), ..Default::default() }).unwrap();
    let f = udp(v4(), 1, 1514);
    for _ in 0..5 {
        run_xdp(s.prog(), &f, NO_DEV).unwrap();
    }
    let c = s.counter().unwrap();
    let mut got = 0;
    c.read_capture(&|| true, &mut |_| got += 1).unwrap();
    // 4096 bytes hold two records of 16 + 1514 bytes.
    assert_eq!((got, c.total().unwrap().capture_lost), (2, 3));
}

/// What the generator must send: the protocol and header fields the test
/// builds every expected frame from, independently of the program.
#[derive(Clone, Copy, Debug)]
enum Proto {
    Udp,
    TcpAck,
    TcpSyn,
}

fn frame(p: Proto, src: IpAddr, dst: IpAddr, sport: u16, dport: u16, len: usize) -> Vec<u8> {
    tagged_frame(None, p, src, dst, sport, dport, len)
}

/// [`frame`] with an 802.1Q tag of VLAN `vid`, if given.
fn tagged_frame(vid: Option<u16>, p: Proto, src: IpAddr, dst: IpAddr, sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let e = match vid {
        Some(v) => PacketBuilder::ethernet(A, B).vlan(v),
        None => PacketBuilder::ethernet(A, B),
    };
    let b = e.ip(src, dst).ttl(61);
    let b = match p {
        Proto::Udp => b.udp(sport, dport),
        Proto::TcpAck => b.tcp(sport, dport, TcpFlags::ACK).seq(0x1234_5678).ack(0x9abc_def0).window(512),
        Proto::TcpSyn => b.tcp(sport, dport, TcpFlags::SYN).seq(0x0102_0304),
    };
    b.frame_len(len).build()
}

fn hdr_len(p: Proto, ipv6: bool, vid: Option<u16>) -> usize {
    14 + 4 * usize::from(vid.is_some()) + if ipv6 { 40 } else { 20 } + if matches!(p, Proto::Udp) { 8 } else { 20 }
}

/// A page as a receiver may leave it: anything in the headers (receivers
/// rewrite headers, never the payload), any length.
fn dirty(run: usize, len: usize, hdr: usize) -> Vec<u8> {
    // Seeded by the run: every test run dirties the pages alike.
    let mut rng = fastrand::Rng::with_seed(run as u64);
    let mut byte = || rng.u8(..);
    let lens = [len, 60, 1514, len.saturating_sub(50).max(14), (len + 333).min(3000)];
    let n = lens[run % lens.len()];
    let mut f = vec![0u8; n];
    for b in f.iter_mut().take(hdr) {
        *b = byte();
    }
    f
}

#[test]
fn gen_sends_every_protocol_size_and_flow_exactly_as_built() {
    xnf_testrun::pin_to_current_cpu();
    let srcs4: Vec<IpAddr> = ["198.18.0.1", "198.18.0.255", "198.19.255.254"].iter().map(|s| s.parse().unwrap()).collect();
    let dsts4: Vec<IpAddr> = ["198.18.1.2", "198.19.0.0", "198.18.200.7", "198.19.255.255", "198.18.1.3"].iter().map(|s| s.parse().unwrap()).collect();
    let srcs6: Vec<IpAddr> = ["2001:db8::1", "2001:db8::ffff", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"].iter().map(|s| s.parse().unwrap()).collect();
    let dsts6: Vec<IpAddr> =
        ["2001:db8:1::2", "2001:db8:1::1:0", "2001:db8:abcd::7", "2001:db8::", "2001:db8:1::3"].iter().map(|s| s.parse().unwrap()).collect();
    let (sports, dports, base_sport, base_dport) = (3u32, 2u32, 65533u16, 7u16);
    // Untagged, and with one 802.1Q tag: every offset 4 bytes further.
    for (vid, ipv6) in [None, Some(100)].into_iter().flat_map(|v| [(v, false), (v, true)]) {
        let (srcs, dsts) = if ipv6 { (&srcs6, &dsts6) } else { (&srcs4, &dsts4) };
        let frame = |p, src, dst, sport, dport, len| tagged_frame(vid, p, src, dst, sport, dport, len);
        for proto in [Proto::Udp, Proto::TcpAck, Proto::TcpSyn] {
            let hdr_len = |p, ipv6| hdr_len(p, ipv6, vid);
            let min = hdr_len(proto, ipv6).max(60);
            let imix = imix_sequence(min);
            for (sizes, runs) in
                [(vec![min as u16], 40), (vec![124], 40), (vec![1514], 40), (vec![min as u16, 1514, 124, 1514], 40), (imix.clone(), imix.len() + 10)]
            {
                let largest = *sizes.iter().max().unwrap() as usize;
                // The template's addresses are not the first of the lists: the program must use the lists.
                let (t_src, t_dst) = if ipv6 { v6() } else { v4() };
                let cfg = GenConfig {
                    template: frame(proto, t_dst, t_src, 999, base_dport, largest),
                    ipv6,
                    flows: sports,
                    base_sport,
                    sizes: sizes.clone(),
                    dst_ports: dports,
                    src_addrs: srcs.clone(),
                    dst_addrs: dsts.clone(),
                };
                assert_eq!(cfg.flow_count(), 90);
                let g = GenProgram::load(&cfg).unwrap();
                let desc = format!("{} {proto:?} VLAN {vid:?} sizes {:?}", if ipv6 { "IPv6" } else { "IPv4" }, &sizes[..sizes.len().min(4)]);
                for k in 0..runs {
                    let len = sizes[k % sizes.len()] as usize;
                    let f = k as u64;
                    let (sport, dport) = (base_sport + (f % 3) as u16, base_dport + (f / 3 % 2) as u16);
                    let (src, dst) = (srcs[(f / 6 % 3) as usize], dsts[(f / 18 % 5) as usize]);
                    let want = frame(proto, src, dst, sport, dport, len);
                    let flow = cfg.flow(f).unwrap();
                    assert_eq!((flow.src, flow.dst, flow.sport, flow.dport), (src, dst, sport, dport), "{desc} frame {k}: GenConfig::flow");
                    let r = run_xdp(g.prog(), &dirty(k, len, hdr_len(proto, ipv6)), NO_DEV).unwrap();
                    assert_eq!(r.verdict, Verdict::Tx, "{desc} frame {k}");
                    assert_eq!(r.frame, want, "{desc} frame {k} ({len} bytes, flow {f}): not the frame the builder makes");
                    assert!(parse(&r.frame).unwrap().checksums_ok(), "{desc} frame {k}: checksums");
                }
            }
        }
    }
}

/// Every IMIX class, every flow field, checksums over many flows: the
/// incremental patches equal a full computation wherever carries fall.
#[test]
fn gen_checksums_hold_for_thousands_of_flows() {
    xnf_testrun::pin_to_current_cpu();
    for ipv6 in [false, true] {
        let (s, d) = if ipv6 { v6() } else { v4() };
        let dsts: Vec<IpAddr> = (0..257u32)
            .map(|i| match d {
                IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + i * 251)),
                IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) + ((i as u128) << 40) + i as u128 * 65521)),
            })
            .collect();
        let cfg = GenConfig {
            template: frame(Proto::Udp, s, d, 1024, 9, 1514),
            ipv6,
            flows: 13,
            base_sport: 1024,
            dst_addrs: dsts,
            sizes: imix_sequence(62),
            ..Default::default()
        };
        let g = GenProgram::load(&cfg).unwrap();
        let input = vec![0u8; 1514];
        for k in 0..13 * 257 + 5 {
            let r = run_xdp(g.prog(), &input, NO_DEV).unwrap();
            let p = parse(&r.frame).unwrap();
            let flow = cfg.flow(k as u64).unwrap();
            assert!(p.checksums_ok(), "frame {k}");
            assert_eq!((p.dst_ip(), p.src_port()), (Some(flow.dst), Some(flow.sport)), "frame {k}");
            assert_eq!(r.frame.len(), cfg.sizes[k % cfg.sizes.len()] as usize);
        }
    }
}

#[test]
fn gen_sends_no_more_than_its_limit() {
    xnf_testrun::pin_to_current_cpu();
    let cfg = GenConfig { template: udp(v4(), 1024, 60), flows: 1, base_sport: 1024, ..Default::default() };
    let g = GenProgram::load(&cfg).unwrap();
    let ctl = g.control().unwrap();
    ctl.set_limit(5).unwrap();
    let verdicts: Vec<Verdict> = (0..8).map(|_| run_xdp(g.prog(), &[0u8; 60], NO_DEV).unwrap().verdict).collect();
    assert_eq!(verdicts, [[Verdict::Tx; 5].as_slice(), &[Verdict::Drop; 3]].concat());
    assert_eq!(ctl.sent().unwrap(), 5);
    ctl.set_limit(6).unwrap();
    assert_eq!(run_xdp(g.prog(), &[0u8; 60], NO_DEV).unwrap().verdict, Verdict::Tx);
    assert_eq!(run_xdp(g.prog(), &[0u8; 60], NO_DEV).unwrap().verdict, Verdict::Drop);
}

#[test]
fn imix_sequence_is_the_ams_ix_mix() {
    let seq = imix_sequence(60);
    let total: u32 = AMS_IX_IMIX.iter().map(|c| c.1).sum();
    assert_eq!(seq.len() as u32, total);
    for (wire, share) in AMS_IX_IMIX {
        assert_eq!(seq.iter().filter(|&&l| l as u32 == wire as u32 - 4).count() as u32, share);
    }
}

#[test]
fn gen_refuses_what_it_cannot_send() {
    let ok = GenConfig { template: udp(v4(), 1024, 60), flows: 1, base_sport: 1024, ..Default::default() };
    GenProgram::load(&ok).unwrap();
    let v6tcp = frame(Proto::TcpAck, v6().0, v6().1, 1024, 9, 100);
    let mut payload = udp(v4(), 1024, 60);
    payload[50] = 1;
    let cases: Vec<(GenConfig, &str)> = vec![
        (GenConfig { template: udp(v4(), 60000, 60), flows: 6000, base_sport: 60000, ..ok.clone() }, "do not fit the port range"),
        (GenConfig { dst_ports: 65530, ..ok.clone() }, "destination ports do not fit"),
        (GenConfig { sizes: vec![60, 61, 62, 63, 64, 65, 66, 67, 68], ..ok.clone() }, "distinct frame sizes"),
        (GenConfig { sizes: vec![60; 1025], ..ok.clone() }, "at most 1024"),
        (GenConfig { sizes: vec![41], ..ok.clone() }, "shorter than the headers"),
        (GenConfig { template: v6tcp.clone(), ipv6: true, sizes: vec![73], ..ok.clone() }, "shorter than the headers"),
        (GenConfig { sizes: vec![4000], ..ok.clone() }, "at most 3000"),
        (GenConfig { ipv6: true, ..ok.clone() }, "not IPv6"),
        (GenConfig { dst_addrs: vec![v6().1], ..ok.clone() }, "is not IPv4"),
        (GenConfig { template: payload, ..ok.clone() }, "payload must be zeros"),
        (GenConfig { template: PacketBuilder::ethernet(A, B).ip(v4().0, v4().1).icmpv4_echo(1, 1).frame_len(60).build(), ..ok.clone() }, "UDP or TCP only"),
        (
            GenConfig { template: PacketBuilder::ethernet(A, B).qinq(5).vlan(6).ip(v4().0, v4().1).udp(1024, 9).frame_len(60).build(), ..ok.clone() },
            "one 802.1Q tag",
        ),
        (
            GenConfig { template: PacketBuilder::ethernet(A, B).vlan(5).vlan(6).ip(v4().0, v4().1).udp(1024, 9).frame_len(60).build(), ..ok.clone() },
            "one 802.1Q tag",
        ),
        (
            GenConfig { template: tagged_frame(Some(5), Proto::Udp, v6().0, v6().1, 1024, 9, 100), ipv6: true, sizes: vec![65], ..ok.clone() },
            "shorter than the headers",
        ),
    ];
    for (cfg, want) in cases {
        let err = format!("{:#}", GenProgram::load(&cfg).err().unwrap_or_else(|| panic!("accepted: {want}")));
        assert!(err.contains(want), "{err} does not say {want}");
    }
}
