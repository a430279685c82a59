//! Packet tests of the raw-verdict program (`bpf/actions.bpf.c`) through
//! `BPF_PROG_TEST_RUN`: for every action, a table of frames, the verdict
//! and the exact output, and the count.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use xnf_lab::programs::actions::{Action, ActionsProgram};
use xnf_packet::{MacAddr, PacketBuilder};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const NO_DEV: XdpContext = XdpContext { ingress_ifindex: 0, rx_queue_index: 0 };

fn frames() -> Vec<(&'static str, Vec<u8>)> {
    let (s4, d4): (IpAddr, IpAddr) = (Ipv4Addr::new(198, 18, 0, 1).into(), Ipv4Addr::new(198, 18, 1, 2).into());
    let (s6, d6): (IpAddr, IpAddr) = (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into(), Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2).into());
    vec![
        ("IPv4 UDP 64 B", PacketBuilder::ethernet(A, B).ip(s4, d4).udp(1024, 9).frame_len(60).build()),
        ("IPv6 TCP 1518 B", PacketBuilder::ethernet(A, B).ip(s6, d6).tcp(1024, 80, xnf_packet::TcpFlags::ACK).frame_len(1514).build()),
        ("VLAN-tagged IPv4", PacketBuilder::ethernet(A, B).vlan(100).ip(s4, d4).udp(1, 2).build()),
        ("ARP", PacketBuilder::ethernet(A, B).arp_request(A, Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2)).build()),
        ("bare Ethernet header", PacketBuilder::ethernet(A, B).ethertype(xnf_packet::EtherType(0x88b5)).build()),
        ("garbage", vec![0xff; 99]),
    ]
}

/// `frame` with its MAC addresses swapped (what XDP_TX sends back).
fn swapped(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[..6].copy_from_slice(&frame[6..12]);
    f[6..12].copy_from_slice(&frame[..6]);
    f
}

fn lo_ifindex() -> u32 {
    std::fs::read_to_string("/sys/class/net/lo/ifindex").unwrap().trim().parse().unwrap()
}

/// One row: description, action, verdict, expected output of a frame.
type Case = (&'static str, Action, Verdict, fn(&[u8]) -> Vec<u8>);

#[test]
fn every_action_gives_its_verdict_and_counts_each_frame_once() {
    let table: [Case; 5] = [
        ("drop", Action::Drop, Verdict::Drop, |f| f.to_vec()),
        ("pass", Action::Pass, Verdict::Pass, |f| f.to_vec()),
        ("tx: MACs swapped", Action::Tx, Verdict::Tx, swapped),
        ("redirect to a port", Action::Redirect { ifindex: lo_ifindex() }, Verdict::Redirect, |f| f.to_vec()),
        ("redirect to CPU 0", Action::Cpumap { cpu: 0 }, Verdict::Redirect, |f| f.to_vec()),
    ];
    for (desc, action, verdict, output) in table {
        let p = ActionsProgram::load(action).unwrap();
        let counters = p.counters().unwrap();
        for (n, (what, frame)) in frames().into_iter().enumerate() {
            let r = run_xdp(p.prog(), &frame, NO_DEV).unwrap();
            assert_eq!(r.verdict, verdict, "{desc}: {what}");
            assert_eq!(r.frame, output(&frame), "{desc}: {what}");
            assert_eq!(counters.acted().unwrap(), n as u64 + 1, "{desc}: {what} not counted once");
        }
        // Test runs do not carry out redirects: nothing reaches the CPUMAP program.
        assert_eq!(counters.remote().unwrap(), 0, "{desc}");
    }
}

#[test]
fn a_cpu_beyond_the_cpumap_is_refused_with_the_reason() {
    let e = ActionsProgram::load(Action::Cpumap { cpu: 4096 }).err().expect("cpu 4096 accepted");
    assert!(format!("{e:#}").contains("CPUMAP"), "{e:#}");
}
