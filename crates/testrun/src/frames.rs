//! Frames for differential fuzzing: valid frames of every kind a network
//! function meets (IPv4 with options and fragments, IPv6 with extension
//! header chains, VLAN and QinQ, ARP, LLDP, broadcast and multicast,
//! UDP/TCP/ICMP and other protocols, padding and trailers), aimed at the
//! addresses, VLANs and ports of a test's world, then often mutated at
//! their header fields and lengths, or replaced by random bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fastrand::Rng;
use xnf_packet::{EtherType, IpProtocol, MacAddr, PacketBuilder, TcpFlags};

/// What a test's network holds: where frames should aim to be interesting.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// MACs of the interfaces frames arrive on ("ours").
    pub macs: Vec<MacAddr>,
    /// Addresses of interest (routes, locals, classes), both families.
    pub addrs: Vec<IpAddr>,
    /// VIDs of interest (VLAN devices, classes).
    pub vids: Vec<u16>,
    /// Ports of interest (classes).
    pub ports: Vec<u16>,
}

/// Addresses the kernel treats specially: zero, loopback, broadcast,
/// multicast, link-local, v4-mapped, class E.
fn special(rng: &mut Rng, v6: bool) -> IpAddr {
    const V4: [[u8; 4]; 8] =
        [[0, 0, 0, 0], [0, 1, 2, 3], [127, 0, 0, 1], [255, 255, 255, 255], [224, 0, 0, 5], [239, 1, 2, 3], [169, 254, 1, 1], [240, 0, 0, 1]];
    const V6: [&str; 9] = ["::", "::1", "ff02::1", "ff01::1", "ff00::1", "ff0e::5", "fe80::1", "::ffff:198.18.0.1", "fec0::1"];
    if v6 {
        IpAddr::V6(V6[rng.usize(..V6.len())].parse().expect("a valid address"))
    } else {
        IpAddr::V4(Ipv4Addr::from(V4[rng.usize(..V4.len())]))
    }
}

fn addr(rng: &mut Rng, w: &World, v6: bool) -> IpAddr {
    let pool = || w.addrs.iter().copied().filter(|a| a.is_ipv6() == v6);
    let n = pool().count();
    match rng.u8(..100) {
        0..=79 if n > 0 => pool().nth(rng.usize(..n)).expect("n addresses"),
        80..=91 => special(rng, v6),
        _ if v6 => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, rng.u16(..), 0, 0, 0, 0, rng.u16(..))),
        _ => IpAddr::V4(Ipv4Addr::new(198, 18 + rng.u8(..2), rng.u8(..), rng.u8(..))),
    }
}

fn unicast_mac(rng: &mut Rng) -> MacAddr {
    let mut m = [0u8; 6];
    rng.fill(&mut m);
    m[0] = (m[0] & 0xfe) | 0x02;
    MacAddr(m)
}

fn dst_mac(rng: &mut Rng, w: &World) -> MacAddr {
    match rng.u8(..100) {
        0..=79 if !w.macs.is_empty() => w.macs[rng.usize(..w.macs.len())],
        80..=86 => MacAddr([0xff; 6]),
        87..=89 => MacAddr([0x01, 0x00, 0x5e, 0, rng.u8(..), rng.u8(..)]),
        90..=92 => MacAddr([0x33, 0x33, 0xff, rng.u8(..), rng.u8(..), rng.u8(..)]),
        93..=94 => MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x0e]),
        _ => unicast_mac(rng),
    }
}

fn pick<T: Copy>(rng: &mut Rng, interesting: &[T], any: impl FnOnce(&mut Rng) -> T) -> T {
    if !interesting.is_empty() && rng.u8(..100) < 60 {
        interesting[rng.usize(..interesting.len())]
    } else {
        any(rng)
    }
}

fn tags(rng: &mut Rng, w: &World, b: PacketBuilder) -> PacketBuilder {
    let pcp = rng.u8(..8);
    match rng.u8(..100) {
        0..=59 => b,
        60..=84 => {
            let vid = pick(rng, &w.vids, |r| if r.bool() { 0 } else { r.u16(1..4095) });
            b.vlan_pcp(vid, pcp)
        }
        85..=92 => b.qinq(rng.u16(1..4095)).vlan(pick(rng, &w.vids, |r| r.u16(1..4095))),
        _ => b.tag(EtherType::VLAN, rng.u16(..)).tag(EtherType::VLAN, rng.u16(..)),
    }
}

fn payload(rng: &mut Rng) -> Vec<u8> {
    let len = match rng.u8(..100) {
        0..=69 => rng.usize(..48),
        70..=94 => rng.usize(48..400),
        _ => rng.usize(400..1460),
    };
    let mut p = vec![0u8; len];
    rng.fill(&mut p);
    p
}

fn l4(rng: &mut Rng, w: &World, b: PacketBuilder, v6: bool) -> PacketBuilder {
    let port = |r: &mut Rng| pick(r, &w.ports, |r| r.u16(..));
    match rng.u8(..100) {
        0..=44 => {
            let (s, d) = (port(rng), port(rng));
            b.udp(s, d)
        }
        45..=74 => {
            let (s, d) = (port(rng), port(rng));
            b.tcp(s, d, TcpFlags::SYN).seq(rng.u32(..))
        }
        75..=89 if v6 => b.icmpv6_echo(rng.u16(..), rng.u16(..)),
        75..=89 => b.icmpv4_echo(rng.u16(..), rng.u16(..)),
        _ => {
            const OTHER: [u8; 5] = [47, 50, 132, 59, 253];
            b.protocol(IpProtocol(OTHER[rng.usize(..OTHER.len())]))
        }
    }
}

fn ipv6_ext(rng: &mut Rng, mut b: PacketBuilder) -> PacketBuilder {
    let n = match rng.u8(..100) {
        0..=59 => return b,
        60..=89 => rng.usize(1..4),
        _ => rng.usize(4..11),
    };
    for i in 0..n {
        let kind = match rng.u8(..6) {
            0 if i == 0 || rng.u8(..4) == 0 => IpProtocol::HOPOPTS,
            0 | 1 => IpProtocol::DSTOPTS,
            2 => IpProtocol::ROUTING,
            3 => IpProtocol::FRAGMENT,
            4 => IpProtocol::AH,
            _ => IpProtocol::DSTOPTS,
        };
        b = match kind {
            IpProtocol::FRAGMENT => {
                // First (offset 0, M), middle, last, or an atomic fragment.
                let offset: u16 = if rng.bool() { 0 } else { rng.u16(1..8192) };
                let fo = (offset << 3) | u16::from(rng.bool());
                let id = rng.u32(..).to_be_bytes();
                b.ipv6_ext(kind, &[(fo >> 8) as u8, fo as u8, id[0], id[1], id[2], id[3]])
            }
            _ => {
                let mut body = vec![0u8; [6, 6, 14, 22][rng.usize(..4)]];
                if kind == IpProtocol::AH {
                    rng.fill(&mut body);
                }
                b.ipv6_ext(kind, &body)
            }
        };
    }
    b
}

fn ip_packet(rng: &mut Rng, w: &World, b: PacketBuilder, v6: bool) -> PacketBuilder {
    let (src, dst) = (addr(rng, w, v6), addr(rng, w, v6));
    let ttl = [0, 1, 2, 3, 64, 255, rng.u8(..)][rng.usize(..7)];
    let mut b = b.ip(src, dst).ttl(ttl);
    if v6 {
        b = ipv6_ext(rng, b).flow_label(if rng.bool() { 0 } else { rng.u32(..1 << 20) });
    } else {
        if rng.u8(..10) == 0 {
            const OPTS: [&[u8]; 3] = [&[0x94, 0x04, 0, 0], &[1, 1, 1, 1], &[7, 7, 4, 0, 0, 0, 0, 1]];
            b = b.ipv4_options(OPTS[rng.usize(..OPTS.len())]);
        }
        b = b.dscp(rng.u8(..64)).ecn(rng.u8(..4)).ident(u32::from(rng.u16(..))).dont_frag(rng.u8(..3) == 0);
        b = match rng.u8(..100) {
            0..=84 => b,
            85..=89 => b.fragment(0, true),
            90..=94 => b.fragment(rng.u16(1..8191), true),
            _ => b.fragment(rng.u16(1..8191), false),
        };
    }
    l4(rng, w, b, v6).payload(&payload(rng))
}

/// A valid frame of a random kind.
pub fn valid(rng: &mut Rng, w: &World) -> Vec<u8> {
    let eth = PacketBuilder::ethernet(unicast_mac(rng), dst_mac(rng, w));
    let b = tags(rng, w, eth);
    let b = match rng.u8(..100) {
        0..=43 => ip_packet(rng, w, b, false),
        44..=87 => ip_packet(rng, w, b, true),
        88..=92 => {
            let ip = |r: &mut Rng| match addr(r, w, false) {
                IpAddr::V4(a) => a,
                IpAddr::V6(_) => unreachable!("asked for IPv4"),
            };
            let (s, t) = (ip(rng), ip(rng));
            b.arp_request(unicast_mac(rng), s, t)
        }
        93..=96 => b.ethertype(EtherType(0x88cc)).payload(&payload(rng)),
        _ => b.ethertype(EtherType(rng.u16(..))).payload(&payload(rng)),
    };
    let mut frame = b.try_build().unwrap_or_else(|e| panic!("the fuzzer built an invalid frame: {e}"));
    // Ethernet padding up to the minimum, or a trailer no length counts.
    match rng.u8(..100) {
        0..=14 if frame.len() < 60 => frame.resize(60, 0),
        15..=24 => frame.extend((0..rng.usize(1..64)).map(|_| rng.u8(..))),
        25..=27 => frame.extend((0..rng.usize(64..300)).map(|_| rng.u8(..))),
        _ => {}
    }
    frame
}

/// One mutation of a header field or length.
fn mutate(rng: &mut Rng, f: &mut Vec<u8>) {
    let head = f.len().min(120);
    match rng.u8(..8) {
        0 | 1 => {
            let at = rng.usize(..head);
            f[at] ^= 1 << rng.u8(..8);
        }
        2 => {
            let at = rng.usize(..head);
            f[at] = rng.u8(..);
        }
        3 => {
            let len = rng.usize(14..=f.len());
            f.truncate(len);
        }
        4 => {
            // A length field of whichever IP header may be there.
            for at in [16usize, 18, 20, 22] {
                if at + 2 <= f.len() && rng.bool() {
                    let v = [0u16, 1, 20, 40, rng.u16(..), rng.u16(..1600)][rng.usize(..6)];
                    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
                    return;
                }
            }
        }
        5 => {
            // IHL or version nibble.
            for at in [14usize, 18] {
                if at < f.len() && rng.bool() {
                    f[at] = (f[at] & 0xf0) | rng.u8(..16);
                    return;
                }
            }
        }
        6 => f.extend((0..rng.usize(1..40)).map(|_| rng.u8(..))),
        _ => {
            // A next-header or protocol byte: another extension header, protocol.
            let at = rng.usize(14..head.max(15));
            if at < f.len() {
                f[at] = [0, 6, 17, 43, 44, 51, 58, 59, 60][rng.usize(..9)];
            }
        }
    }
}

/// A frame for a fuzz run: valid, valid then mutated at one to three
/// places, or (rarely) random bytes behind a plausible Ethernet header.
pub fn frame(rng: &mut Rng, w: &World) -> Vec<u8> {
    match rng.u8(..100) {
        0..=54 => valid(rng, w),
        55..=97 => {
            let mut f = valid(rng, w);
            for _ in 0..rng.usize(1..4) {
                mutate(rng, &mut f);
            }
            f
        }
        _ => {
            let mut f = vec![0u8; rng.usize(14..200)];
            rng.fill(&mut f);
            f[..6].copy_from_slice(&dst_mac(rng, w).octets());
            f
        }
    }
}

/// The frame as hex, for failure reports.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
