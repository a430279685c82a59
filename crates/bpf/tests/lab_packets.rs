//! Packet tests of the lab's programs (`gen`, `sink`) and of `pass`
//! through `BPF_PROG_TEST_RUN`: tables of input, verdict and exact output.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use xnf_bpf::gen::{GenConfig, GenProgram};
use xnf_bpf::pass::PassProgram;
use xnf_bpf::sink::SinkProgram;
use xnf_bpf::testrun::{run_xdp, Verdict, XdpContext};
use xnf_packet::{parse, MacAddr, PacketBuilder};

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
    let s = SinkProgram::load().unwrap();
    let mut want = 0;
    for (desc, frame) in assorted() {
        let r = run_xdp(s.prog(), &frame, NO_DEV).unwrap();
        assert_eq!(r.verdict, Verdict::Drop, "{desc}");
        want += 1;
        assert_eq!(s.counts().unwrap().0, want, "{desc} not counted once");
    }
    let bytes: usize = assorted().iter().map(|(_, f)| f.len()).sum();
    assert_eq!(s.counts().unwrap().1, bytes as u64);
}

/// Whatever the page held before (here: a forwarded copy with other MACs and
/// TTL, or zeros), the generator writes its headers and the flow's port.
#[test]
fn gen_rewrites_headers_on_every_run_and_cycles_flows() {
    for (fam, addrs, ipv6) in [("IPv4", v4(), false), ("IPv6", v6(), true)] {
        let smallest = if ipv6 { 62 } else { 60 };
        for len in [smallest, 124, 1514] {
            let flows = 3;
            let cfg = GenConfig { template: udp(addrs, 1024, len), ipv6, flows, base_sport: 1024 };
            let g = GenProgram::load(&cfg).unwrap();
            let stale = PacketBuilder::ethernet(B, A).ip(addrs.0, addrs.1).ttl(3).udp(7, 7).frame_len(len).build();
            for i in 0..7u16 {
                let input = if i % 2 == 0 { stale.clone() } else { vec![0u8; len] };
                let r = run_xdp(g.prog(), &input, NO_DEV).unwrap();
                let want = udp(addrs, 1024 + i % flows as u16, len);
                assert_eq!(r.verdict, Verdict::Tx, "{fam} {len} run {i}");
                // The payload is the page's business; headers must be exact.
                let hdr = if ipv6 { 62 } else { 42 };
                assert_eq!(&r.frame[..hdr], &want[..hdr], "{fam} {len} run {i}: headers");
                if i % 2 == 1 {
                    // On a zeroed page the whole frame equals the template's flow.
                    let p = parse(&r.frame).unwrap();
                    assert!(p.checksums_ok(), "{fam} {len} run {i}: UDP checksum");
                    assert_eq!(r.frame, want, "{fam} {len} run {i}: whole frame");
                }
            }
        }
    }
}

#[test]
fn gen_aborts_on_frames_shorter_than_its_headers() {
    let cfg = GenConfig { template: udp(v6(), 1024, 62), ipv6: true, flows: 1, base_sport: 1024 };
    let g = GenProgram::load(&cfg).unwrap();
    for len in 14..62 {
        let r = run_xdp(g.prog(), &vec![0u8; len], NO_DEV).unwrap();
        assert_eq!(r.verdict, Verdict::Aborted, "{len} bytes");
    }
}

#[test]
fn gen_refuses_flows_beyond_the_port_range() {
    let cfg = GenConfig { template: udp(v4(), 60000, 60), ipv6: false, flows: 6000, base_sport: 60000 };
    assert!(GenProgram::load(&cfg).is_err());
}
