//! A one-call summary of a frame's layers, for traffic sinks and test assertions.

use crate::{
    Addrs, ArpPacket, ArpRepr, Error, EtherType, EthernetFrame, Icmpv4Packet, Icmpv6Packet, IpProtocol, Ipv4Packet, Ipv6Fragment, Ipv6Packet, MacAddr, Result,
    TcpFlags, TcpPacket, UdpPacket, VlanTag,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One VLAN tag, outermost first in [`Parsed::vlans`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanInfo {
    /// The tag's TPID (0x8100 or 0x88a8).
    pub tpid: EtherType,
    /// VLAN id.
    pub vid: u16,
    /// Priority code point.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
}

/// IPv4 header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Info {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Time to live.
    pub ttl: u8,
    /// Protocol field.
    pub protocol: IpProtocol,
    /// DSCP.
    pub dscp: u8,
    /// ECN.
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Fragment offset in 8-byte units.
    pub frag_offset: u16,
    /// Header length in bytes (options included).
    pub header_len: usize,
    /// Total length field.
    pub total_len: u16,
    /// Whether the header checksum is correct.
    pub checksum_ok: bool,
}

/// IPv6 header fields and extension chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Info {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
    /// Payload length field.
    pub payload_len: u16,
    /// Extension headers in order.
    pub ext_headers: Vec<IpProtocol>,
    /// The upper-layer protocol after the extension headers.
    pub protocol: IpProtocol,
    /// The fragment header's fields, if there is one.
    pub fragment: Option<Ipv6Fragment>,
}

/// The network layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L3Info {
    /// IPv4.
    Ipv4(Ipv4Info),
    /// IPv6.
    Ipv6(Ipv6Info),
    /// ARP (Ethernet/IPv4).
    Arp(ArpRepr),
    /// Any other EtherType.
    Other,
}

/// The transport layer. `checksum_ok` is `None` when it cannot be checked (fragments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L4Info {
    /// No transport layer: non-IP frame, or a non-first fragment.
    None,
    /// UDP.
    Udp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Length field.
        len: u16,
        /// Checksum verdict (a zero IPv4 checksum counts as correct).
        checksum_ok: Option<bool>,
    },
    /// TCP.
    Tcp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Sequence number.
        seq: u32,
        /// Acknowledgement number.
        ack: u32,
        /// Flags.
        flags: TcpFlags,
        /// Window.
        window: u16,
        /// Checksum verdict.
        checksum_ok: Option<bool>,
    },
    /// ICMPv4.
    Icmpv4 {
        /// Type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// Bytes 4..8 (echo id and seq, MTU...).
        rest: [u8; 4],
        /// Checksum verdict.
        checksum_ok: Option<bool>,
    },
    /// ICMPv6.
    Icmpv6 {
        /// Type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// Bytes 4..8 (echo id and seq, MTU...).
        rest: [u8; 4],
        /// Checksum verdict.
        checksum_ok: Option<bool>,
    },
    /// Another upper-layer protocol, starting at `l4_offset`.
    Other(IpProtocol),
}

/// What [`parse()`] found in a frame. Offsets are from the start of the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source MAC.
    pub src_mac: MacAddr,
    /// VLAN tags, outermost first.
    pub vlans: Vec<VlanInfo>,
    /// The EtherType after the tags.
    pub ethertype: EtherType,
    /// Where the L3 header starts.
    pub l3_offset: usize,
    /// The network layer.
    pub l3: L3Info,
    /// Where the L4 header starts, if there is one.
    pub l4_offset: Option<usize>,
    /// The transport layer.
    pub l4: L4Info,
    /// Where the innermost payload starts (after L4, else L3, else L2 headers).
    pub payload_offset: usize,
    /// Innermost payload length, as the length fields say (trailing padding excluded).
    pub payload_len: usize,
}

impl Parsed {
    /// VLAN ids, outermost first.
    pub fn vids(&self) -> Vec<u16> {
        self.vlans.iter().map(|v| v.vid).collect()
    }

    /// IP source address.
    pub fn src_ip(&self) -> Option<IpAddr> {
        match &self.l3 {
            L3Info::Ipv4(i) => Some(i.src.into()),
            L3Info::Ipv6(i) => Some(i.src.into()),
            _ => None,
        }
    }

    /// IP destination address.
    pub fn dst_ip(&self) -> Option<IpAddr> {
        match &self.l3 {
            L3Info::Ipv4(i) => Some(i.dst.into()),
            L3Info::Ipv6(i) => Some(i.dst.into()),
            _ => None,
        }
    }

    /// IPv4 TTL or IPv6 hop limit.
    pub fn ttl(&self) -> Option<u8> {
        match &self.l3 {
            L3Info::Ipv4(i) => Some(i.ttl),
            L3Info::Ipv6(i) => Some(i.hop_limit),
            _ => None,
        }
    }

    /// IPv4 protocol or IPv6 upper-layer protocol.
    pub fn ip_protocol(&self) -> Option<IpProtocol> {
        match &self.l3 {
            L3Info::Ipv4(i) => Some(i.protocol),
            L3Info::Ipv6(i) => Some(i.protocol),
            _ => None,
        }
    }

    /// True for IPv4 or IPv6 fragments.
    pub fn is_fragment(&self) -> bool {
        match &self.l3 {
            L3Info::Ipv4(i) => i.more_frags || i.frag_offset != 0,
            L3Info::Ipv6(i) => i.fragment.is_some(),
            _ => false,
        }
    }

    /// UDP or TCP source port.
    pub fn src_port(&self) -> Option<u16> {
        match self.l4 {
            L4Info::Udp { src_port, .. } | L4Info::Tcp { src_port, .. } => Some(src_port),
            _ => None,
        }
    }

    /// UDP or TCP destination port.
    pub fn dst_port(&self) -> Option<u16> {
        match self.l4 {
            L4Info::Udp { dst_port, .. } | L4Info::Tcp { dst_port, .. } => Some(dst_port),
            _ => None,
        }
    }

    /// False if the IPv4 header checksum or a checkable L4 checksum is wrong.
    pub fn checksums_ok(&self) -> bool {
        let l3 = !matches!(&self.l3, L3Info::Ipv4(i) if !i.checksum_ok);
        let l4 = match self.l4 {
            L4Info::Udp { checksum_ok, .. } | L4Info::Tcp { checksum_ok, .. } | L4Info::Icmpv4 { checksum_ok, .. } | L4Info::Icmpv6 { checksum_ok, .. } => {
                checksum_ok != Some(false)
            }
            _ => true,
        };
        l3 && l4
    }

    /// The innermost payload within `frame` (the frame this was parsed from).
    pub fn payload<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        crate::clamp(frame, self.payload_offset, self.payload_offset + self.payload_len)
    }
}

/// Parses Ethernet, VLAN tags, IPv4/IPv6 (with extension headers)/ARP and UDP/TCP/ICMP.
/// Unknown EtherTypes and protocols are reported as `Other`; truncated or inconsistent
/// headers are errors. Never panics.
pub fn parse(frame: &[u8]) -> Result<Parsed> {
    let eth = EthernetFrame::new_checked(frame)?;
    let mut off = EthernetFrame::<&[u8]>::HEADER_LEN;
    let mut ethertype = eth.ethertype();
    let mut vlans = Vec::new();
    while ethertype.is_vlan() {
        let tag = VlanTag::new_checked(&frame[off..])?;
        vlans.push(VlanInfo { tpid: ethertype, vid: tag.vid(), pcp: tag.pcp(), dei: tag.dei() });
        ethertype = tag.ethertype();
        off += VlanTag::<&[u8]>::HEADER_LEN;
    }
    let l3buf = &frame[off..];
    let mut p = Parsed {
        dst_mac: eth.dst(),
        src_mac: eth.src(),
        vlans,
        ethertype,
        l3_offset: off,
        l3: L3Info::Other,
        l4_offset: None,
        l4: L4Info::None,
        payload_offset: off,
        payload_len: l3buf.len(),
    };
    match ethertype {
        EtherType::IPV4 => {
            let ip = Ipv4Packet::new_checked(l3buf)?;
            let info = Ipv4Info {
                src: ip.src(),
                dst: ip.dst(),
                ttl: ip.ttl(),
                protocol: ip.protocol(),
                dscp: ip.dscp(),
                ecn: ip.ecn(),
                ident: ip.ident(),
                dont_frag: ip.dont_frag(),
                more_frags: ip.more_frags(),
                frag_offset: ip.frag_offset(),
                header_len: ip.header_len(),
                total_len: ip.total_len(),
                checksum_ok: ip.verify_checksum(),
            };
            let body_off = off + info.header_len;
            (p.payload_offset, p.payload_len) = (body_off, ip.payload().len());
            if info.frag_offset == 0 {
                let addrs = Addrs::V4(info.src, info.dst);
                transport(&mut p, info.protocol, ip.payload(), body_off, addrs, info.more_frags)?;
            }
            p.l3 = L3Info::Ipv4(info);
        }
        EtherType::IPV6 => {
            let ip = Ipv6Packet::new_checked(l3buf)?;
            let mut ext_headers = Vec::new();
            let mut fragment = None;
            let mut chain = ip.ext_headers();
            for h in &mut chain {
                let h = h?;
                ext_headers.push(h.kind);
                fragment = fragment.or(h.fragment());
            }
            let (protocol, upper) = chain.upper_layer()?;
            let body = &ip.payload()[upper..];
            let body_off = off + Ipv6Packet::<&[u8]>::HEADER_LEN + upper;
            (p.payload_offset, p.payload_len) = (body_off, body.len());
            if !matches!(fragment, Some(f) if f.offset != 0) {
                let more = fragment.is_some_and(|f| f.more);
                transport(&mut p, protocol, body, body_off, Addrs::V6(ip.src(), ip.dst()), more)?;
            }
            p.l3 = L3Info::Ipv6(Ipv6Info {
                src: ip.src(),
                dst: ip.dst(),
                hop_limit: ip.hop_limit(),
                traffic_class: ip.traffic_class(),
                flow_label: ip.flow_label(),
                payload_len: ip.payload_len(),
                ext_headers,
                protocol,
                fragment,
            });
        }
        EtherType::ARP => {
            let arp = ArpRepr::parse(&ArpPacket::new_checked(l3buf)?)?;
            p.l3 = L3Info::Arp(arp);
            p.payload_offset = off + ArpPacket::<&[u8]>::LEN;
            p.payload_len = l3buf.len() - ArpPacket::<&[u8]>::LEN;
        }
        _ => {}
    }
    Ok(p)
}

/// Fills the L4 fields of `p` from `body`, which starts at `body_off` in the frame. `partial`
/// marks a first fragment: lengths beyond `body` are allowed and checksums are not checked.
fn transport(p: &mut Parsed, proto: IpProtocol, body: &[u8], body_off: usize, addrs: Addrs, partial: bool) -> Result<()> {
    let check = |ok: bool| (!partial).then_some(ok);
    let (l4, hdr_len, payload_len) = match (proto, addrs) {
        (IpProtocol::UDP, _) => {
            let u = if partial {
                let u = UdpPacket::new_unchecked(body);
                if body.len() < UdpPacket::<&[u8]>::HEADER_LEN {
                    return Err(Error::Truncated);
                }
                u
            } else {
                UdpPacket::new_checked(body)?
            };
            let ok = match addrs {
                Addrs::V4(s, d) => u.verify_checksum_v4(s, d),
                Addrs::V6(s, d) => u.verify_checksum_v6(s, d),
            };
            let l4 = L4Info::Udp { src_port: u.src_port(), dst_port: u.dst_port(), len: u.len(), checksum_ok: check(ok) };
            let payload_len = if partial { body.len() - 8 } else { u.payload().len() };
            (l4, 8, payload_len)
        }
        (IpProtocol::TCP, _) => {
            let t = TcpPacket::new_checked(body)?;
            let ok = match addrs {
                Addrs::V4(s, d) => t.verify_checksum_v4(s, d),
                Addrs::V6(s, d) => t.verify_checksum_v6(s, d),
            };
            let l4 = L4Info::Tcp {
                src_port: t.src_port(),
                dst_port: t.dst_port(),
                seq: t.seq(),
                ack: t.ack(),
                flags: t.flags(),
                window: t.window(),
                checksum_ok: check(ok),
            };
            (l4, t.header_len(), t.payload().len())
        }
        (IpProtocol::ICMP, Addrs::V4(..)) => {
            let i = Icmpv4Packet::new_checked(body)?;
            let l4 = L4Info::Icmpv4 { msg_type: i.msg_type(), code: i.code(), rest: i.rest(), checksum_ok: check(i.verify_checksum()) };
            (l4, 8, i.payload().len())
        }
        (IpProtocol::ICMPV6, Addrs::V6(s, d)) => {
            let i = Icmpv6Packet::new_checked(body)?;
            let ok = i.verify_checksum_v6(s, d);
            let l4 = L4Info::Icmpv6 { msg_type: i.msg_type(), code: i.code(), rest: i.rest(), checksum_ok: check(ok) };
            (l4, 8, i.payload().len())
        }
        (other, _) => (L4Info::Other(other), 0, body.len()),
    };
    p.l4 = l4;
    p.l4_offset = Some(body_off);
    p.payload_offset = body_off + hdr_len;
    p.payload_len = payload_len;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::bytes;

    // A real-world style frame: 02:..:01 -> 02:..:02, IPv4 UDP 10.0.0.1:1234 -> 10.0.0.2:53.
    fn udp_frame() -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 31, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&[0x04, 0xd2, 0x00, 0x35, 0, 11, 0, 0, b'a', b'b', b'c']);
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
        UdpPacket::new_unchecked(&mut f[34..]).fill_checksum_v4(s, d);
        f
    }

    #[test]
    fn parses_udp() {
        let mut f = udp_frame();
        f.extend_from_slice(&[0; 15]); // ethernet padding
        let p = parse(&f).unwrap();
        assert_eq!(p.dst_mac, MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(p.ethertype, EtherType::IPV4);
        assert_eq!((p.l3_offset, p.l4_offset, p.payload_offset, p.payload_len), (14, Some(34), 42, 3));
        assert_eq!(p.payload(&f), b"abc");
        assert_eq!(p.src_ip(), Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
        assert_eq!((p.src_port(), p.dst_port(), p.ttl()), (Some(1234), Some(53), Some(64)));
        assert!(p.checksums_ok() && !p.is_fragment());
        assert!(matches!(p.l4, L4Info::Udp { len: 11, checksum_ok: Some(true), .. }));
        f[42] ^= 1;
        assert!(!parse(&f).unwrap().checksums_ok());
        f[14 + 8] = 1; // ttl changed, header checksum now wrong
        assert!(matches!(parse(&f).unwrap().l3, L3Info::Ipv4(Ipv4Info { checksum_ok: false, .. })));
    }

    #[test]
    fn other_ethertype_and_protocol() {
        let mut f = vec![0xff; 12];
        f.extend_from_slice(&[0x88, 0xb5, 1, 2, 3]);
        let p = parse(&f).unwrap();
        assert_eq!((p.l3.clone(), p.l4.clone(), p.payload_offset, p.payload_len), (L3Info::Other, L4Info::None, 14, 3));
        let mut f = udp_frame();
        f[14 + 9] = 47;
        let p = parse(&f).unwrap();
        assert_eq!((p.l4, p.l4_offset, p.payload_len), (L4Info::Other(IpProtocol(47)), Some(34), 11));
    }

    #[test]
    fn truncations_are_errors() {
        let f = udp_frame();
        for n in 0..f.len() {
            assert!(parse(&f[..n]).is_err(), "len {n}");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = fastrand::Rng::with_seed(42);
        let base = udp_frame();
        for i in 0..20000 {
            let n = rng.usize(..120);
            let mut f = if i % 2 == 0 { base.clone() } else { bytes(&mut rng, n) };
            // sprinkle interesting ethertypes and corrupt a few bytes
            if f.len() > 14 && i % 3 == 0 {
                let e = [0x0800u16, 0x86dd, 0x8100, 0x88a8, 0x0806][i % 5];
                f[12..14].copy_from_slice(&e.to_be_bytes());
            }
            for _ in 0..3 {
                if !f.is_empty() {
                    let at = rng.usize(..f.len());
                    f[at] = rng.u8(..);
                }
            }
            if let Ok(p) = parse(&f) {
                assert!(p.payload_offset + p.payload_len <= f.len());
                let _ = p.payload(&f);
            }
        }
    }
}
