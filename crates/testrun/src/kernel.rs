//! What the Linux receive path makes of a frame, from the kernel's rules
//! (`eth_type_trans`, VLAN untagging, `ip_rcv_core`, `ipv6_rcv`, the flow
//! dissector's walk of IPv6 extension headers): the common ground of the
//! reference models that xnf's BPF programs are fuzzed against. Written
//! from those rules and the RFCs, not from xnf's C parser.
//!
//! Where the kernel has no rule and xnf had to choose (how many extension
//! headers to walk, what a class needs to see), the choice is the one
//! documented in `bpf/include/xnf/parse.h` and the README.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Extension headers walked before the protocol counts as unknown.
pub const MAX_EXT: usize = 8;

/// The L2 shape of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2 {
    Untagged,
    /// One 802.1Q tag (TCI in host order; VID 0 is a priority tag).
    Tagged {
        tci: u16,
    },
    /// 802.1ad outer tag, or a second tag: left to the kernel.
    Stacked,
    /// A tag cut by the end of the frame.
    Truncated,
}

impl L2 {
    /// The VID that selects a VLAN device (0: none; a priority tag is untagged).
    pub fn vid(self) -> u16 {
        match self {
            L2::Tagged { tci } => tci & 0xfff,
            _ => 0,
        }
    }

    /// Length of the tag on the wire.
    pub fn tag_len(self) -> usize {
        match self {
            L2::Tagged { .. } => 4,
            _ => 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frag {
    None,
    /// Offset 0: the L4 header is in it (an atomic fragment is one too).
    First,
    /// Offset > 0: no L4 header.
    Later,
}

/// What is known of the ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ports {
    /// UDP or TCP, both ports inside the IP packet.
    Known(u16, u16),
    /// A protocol without ports (ICMP, ESP, no next header, GRE, ...).
    None,
    /// UDP/TCP whose ports are not in this frame: a later fragment, or an
    /// L4 header cut by the end of the IP packet.
    Hidden,
}

/// An IP packet the kernel accepts on receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ip {
    pub v6: bool,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ttl: u8,
    /// IPv4 TOS.
    pub tos: u8,
    /// Offset of the IP header in the frame.
    pub l3_off: usize,
    /// Length of the IP packet by its own length field (the rest of the
    /// frame is a trailer the kernel trims).
    pub ip_len: usize,
    /// IPv4 header longer than 20 bytes.
    pub options: bool,
    /// IPv4 header checksum right (IPv6 has none: true).
    pub csum_ok: bool,
    /// IPv6 hop-by-hop options present (anywhere in the chain).
    pub hbh: bool,
    /// The IP header's own protocol field (IPv6: the first next header).
    pub ip_proto: u8,
    /// The upper-layer protocol; `None` when the extension headers run out
    /// of walk or of packet.
    pub proto: Option<u8>,
    pub frag: Frag,
    pub ports: Ports,
}

impl Ip {
    /// True for UDP and TCP.
    pub fn has_port_proto(&self) -> bool {
        matches!(self.proto, Some(17 | 6))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L3 {
    /// Not IPv4/IPv6 (ARP, LLDP, ...): the ethertype.
    NonIp(u16),
    /// Headers the kernel drops as inconsistent or cut short.
    Malformed,
    Ip(Ip),
}

/// A frame as the kernel reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub dst_mac: [u8; 6],
    pub l2: L2,
    pub l3: L3,
}

impl View {
    /// Whether the destination MAC is a group address (broadcast, multicast).
    pub fn to_group(&self) -> bool {
        self.dst_mac[0] & 1 == 1
    }

    pub fn ip(&self) -> Option<&Ip> {
        match &self.l3 {
            L3::Ip(ip) => Some(ip),
            _ => None,
        }
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads `frame` (at least the 14 bytes of an Ethernet header, as XDP
/// guarantees).
pub fn view(frame: &[u8]) -> View {
    assert!(frame.len() >= 14, "XDP never sees a frame shorter than an Ethernet header");
    let dst_mac = frame[..6].try_into().expect("6 bytes");
    let mut ethertype = be16(frame, 12);
    let mut l3_off = 14;
    let l2 = match ethertype {
        0x88a8 => L2::Stacked,
        0x8100 if frame.len() < 18 => L2::Truncated,
        0x8100 => {
            let tci = be16(frame, 14);
            ethertype = be16(frame, 16);
            l3_off = 18;
            if matches!(ethertype, 0x8100 | 0x88a8) {
                L2::Stacked
            } else {
                L2::Tagged { tci }
            }
        }
        _ => L2::Untagged,
    };
    let l3 = match (l2, ethertype) {
        (L2::Stacked | L2::Truncated, _) => L3::Malformed,
        (_, 0x0800) => ipv4(frame, l3_off),
        (_, 0x86dd) => ipv6(frame, l3_off),
        (_, e) => L3::NonIp(e),
    };
    View { dst_mac, l2, l3 }
}

/// One's complement sum check over an IPv4 header.
fn ipv4_csum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// ip_rcv_core: a header of 20 bytes at least, version 4, IHL >= 5, a
/// total length covering the header and inside the frame.
fn ipv4(frame: &[u8], off: usize) -> L3 {
    let b = &frame[off..];
    if b.len() < 20 || b[0] >> 4 != 4 || b[0] & 0xf < 5 {
        return L3::Malformed;
    }
    let ihl = usize::from(b[0] & 0xf) * 4;
    let tot = usize::from(be16(b, 2));
    if tot < ihl || tot > b.len() {
        return L3::Malformed;
    }
    let frag_off = be16(b, 6);
    let frag = if frag_off & 0x1fff != 0 {
        Frag::Later
    } else if frag_off & 0x2000 != 0 {
        Frag::First
    } else {
        Frag::None
    };
    let proto = b[9];
    let mut ip = Ip {
        v6: false,
        src: IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15])),
        dst: IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19])),
        ttl: b[8],
        tos: b[1],
        l3_off: off,
        ip_len: tot,
        options: ihl > 20,
        csum_ok: ipv4_csum_ok(&b[..ihl]),
        hbh: false,
        ip_proto: proto,
        proto: Some(proto),
        frag,
        ports: Ports::None,
    };
    ip.ports = ports(&b[..tot], ihl, proto, frag);
    L3::Ip(ip)
}

/// The ports of `proto` at `l4` in the IP packet `pkt`.
fn ports(pkt: &[u8], l4: usize, proto: u8, frag: Frag) -> Ports {
    if !matches!(proto, 17 | 6) {
        return Ports::None;
    }
    if frag == Frag::Later || l4 + 4 > pkt.len() {
        return Ports::Hidden;
    }
    Ports::Known(be16(pkt, l4), be16(pkt, l4 + 2))
}

/// ipv6_rcv: 40 bytes at least, version 6, a payload length inside the
/// frame; then the extension headers as the flow dissector walks them.
fn ipv6(frame: &[u8], off: usize) -> L3 {
    let b = &frame[off..];
    if b.len() < 40 || b[0] >> 4 != 6 {
        return L3::Malformed;
    }
    let plen = usize::from(be16(b, 4));
    if 40 + plen > b.len() {
        return L3::Malformed;
    }
    let pkt = &b[..40 + plen];
    let addr = |at: usize| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[at..at + 16]).expect("16 bytes")));
    let mut ip = Ip {
        v6: true,
        src: addr(8),
        dst: addr(24),
        ttl: b[7],
        tos: 0,
        l3_off: off,
        ip_len: 40 + plen,
        options: false,
        csum_ok: true,
        hbh: false,
        ip_proto: b[6],
        proto: None,
        frag: Frag::None,
        ports: Ports::None,
    };
    let mut nh = b[6];
    let mut at = 40;
    for _ in 0..MAX_EXT {
        if !matches!(nh, 0 | 43 | 44 | 60 | 51) {
            break;
        }
        if nh == 0 {
            ip.hbh = true;
        }
        if at + 8 > pkt.len() {
            // The chain is cut by the end of the packet: protocol unknown.
            ip.ports = Ports::Hidden;
            return L3::Ip(ip);
        }
        let len = match nh {
            44 => {
                let offset = be16(pkt, at + 2) >> 3;
                if offset != 0 {
                    ip.frag = Frag::Later;
                    ip.proto = Some(pkt[at]);
                    ip.ports = if matches!(pkt[at], 17 | 6) { Ports::Hidden } else { Ports::None };
                    return L3::Ip(ip);
                }
                ip.frag = Frag::First;
                8
            }
            51 => (usize::from(pkt[at + 1]) + 2) * 4,
            _ => (usize::from(pkt[at + 1]) + 1) * 8,
        };
        nh = pkt[at];
        at += len;
    }
    if matches!(nh, 0 | 43 | 44 | 60 | 51) {
        // More than MAX_EXT extension headers: protocol unknown.
        ip.ports = Ports::Hidden;
        return L3::Ip(ip);
    }
    ip.proto = Some(nh);
    ip.ports = ports(pkt, at, nh, ip.frag);
    L3::Ip(ip)
}

/// A class as `struct xnf_match` describes it, evaluated on a view: the
/// contract of `match_pkt` (classify.h), three-valued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassMatch {
    No,
    Yes,
    /// Everything readable matches, but the class needs the protocol or the
    /// ports and the frame hides them.
    Unsure,
}

/// Whether the view is in `class` (VID 0 counts as untagged).
pub fn class_match(class: &xnf_core::class::Class, v: &View) -> ClassMatch {
    let Some(ip) = v.ip() else { return ClassMatch::No };
    let vid = v.l2.vid();
    match class.vid {
        Some(want) if vid != want => return ClassMatch::No,
        None if vid != 0 => return ClassMatch::No,
        _ => {}
    }
    if class.ipv6.is_some_and(|v6| v6 != ip.v6) {
        return ClassMatch::No;
    }
    for (net, addr) in [(class.src, ip.src), (class.dst, ip.dst)] {
        if let Some(net) = net {
            if !net.contains(&addr) {
                return ClassMatch::No;
            }
        }
    }
    let mut unsure = false;
    if let Some(p) = class.proto {
        match ip.proto {
            None => unsure = true,
            Some(q) if q != p => return ClassMatch::No,
            _ => {}
        }
    }
    if class.sport.is_some() || class.dport.is_some() {
        match ip.ports {
            Ports::None if ip.proto.is_some() => return ClassMatch::No,
            Ports::Known(s, d) => {
                let out = |r: Option<(u16, u16)>, p: u16| r.is_some_and(|(lo, hi)| p < lo || p > hi);
                if out(class.sport, s) || out(class.dport, d) {
                    return ClassMatch::No;
                }
            }
            _ => return ClassMatch::Unsure,
        }
    }
    if unsure {
        ClassMatch::Unsure
    } else {
        ClassMatch::Yes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xnf_packet::{IpProtocol, MacAddr, PacketBuilder};

    fn eth() -> PacketBuilder {
        PacketBuilder::ethernet(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]))
    }

    #[test]
    fn reads_what_the_kernel_reads() {
        let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d6: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let f = eth().ipv6(s6, d6).ipv6_ext(IpProtocol::AH, &[0; 10]).udp(1, 5000).trailer(&[9; 7]).build();
        let ip = view(&f).ip().cloned().unwrap();
        assert_eq!((ip.proto, ip.ports, ip.ip_len), (Some(17), Ports::Known(1, 5000), f.len() - 14 - 7));
        let f = eth().vlan_pcp(0, 3).ipv4("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap()).fragment(10, false).udp(1, 2).build();
        let v = view(&f);
        assert_eq!((v.l2.vid(), v.ip().unwrap().frag, v.ip().unwrap().ports), (0, Frag::Later, Ports::Hidden));
        let mut f = eth().ipv4("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap()).udp(1, 2).build();
        f[16..18].copy_from_slice(&[0, 10]);
        assert_eq!(view(&f).l3, L3::Malformed, "total length below the header");
        let hbh_jumbo = eth().ipv6(s6, d6).ipv6_ext(IpProtocol::HOPOPTS, &[0; 6]).udp(1, 2).build();
        let mut j = hbh_jumbo.clone();
        j[18..20].copy_from_slice(&[0, 0]);
        let ip = view(&j).ip().cloned().unwrap();
        assert!(ip.hbh && ip.proto.is_none(), "payload length 0 with hop-by-hop: the kernel's, protocol unknown");
    }
}
