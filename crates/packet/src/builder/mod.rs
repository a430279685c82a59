//! A fluent builder for whole Ethernet frames with every length and checksum filled in.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use xnf_packet::{MacAddr, PacketBuilder};
//!
//! let frame = PacketBuilder::ethernet(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]))
//!     .vlan(100)
//!     .ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
//!     .ttl(5)
//!     .udp(1234, 53)
//!     .payload(b"hello")
//!     .frame_len(64)
//!     .build();
//! assert_eq!(frame.len(), 64);
//! let p = xnf_packet::parse(&frame).unwrap();
//! assert_eq!((p.vids(), p.ttl(), p.dst_port()), (vec![100], Some(5), Some(53)));
//! ```
//!
//! The IP layer (`ipv4`/`ipv6`/`ip`) must come before its options and the L4 layer, and the
//! L4 layer before its options; otherwise calls may come in any order. Misuse is reported by
//! [`PacketBuilder::try_build`] (and makes [`PacketBuilder::build`] panic).
//! Defaults: TTL/hop limit 64, ident 0, no DF, TCP window 65535, seq/ack 0.

use crate::arp::ArpRepr;
use crate::{
    icmpv4, icmpv6, Addrs, Error, EtherType, EthernetFrame, Icmpv4Packet, Icmpv6Packet, IpProtocol, Ipv4Packet, Ipv6Packet, MacAddr, Result, TcpFlags,
    TcpPacket, UdpPacket,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Builds one Ethernet frame (without FCS). See the [module docs](self).
#[derive(Debug, Clone)]
pub struct PacketBuilder {
    src_mac: MacAddr,
    dst_mac: MacAddr,
    stags: Vec<(EtherType, u16)>,
    ctags: Vec<(EtherType, u16)>,
    l3: L3,
    l4: L4,
    payload: Vec<u8>,
    trailer: Vec<u8>,
    frame_len: Option<usize>,
    min_frame_len: usize,
    ip_checksum: Option<u16>,
    l4_checksum: Option<u16>,
    err: Option<&'static str>,
}

#[derive(Debug, Clone)]
enum L3 {
    None,
    Raw(EtherType),
    Arp(ArpRepr),
    Ip(Ip),
}

#[derive(Debug, Clone)]
struct Ip {
    addrs: Addrs,
    ttl: u8,
    /// IPv4 TOS or IPv6 traffic class.
    tos: u8,
    ident: u32,
    dont_frag: bool,
    /// IPv4 fragment offset and more-fragments flag.
    frag: (u16, bool),
    flow: u32,
    options: Vec<u8>,
    ext: Vec<(IpProtocol, Vec<u8>)>,
    /// Index in `ext` of the fragment header whose ident comes from `ident`.
    frag_ext: Option<usize>,
    protocol: Option<IpProtocol>,
}

/// Which IP version a builder call applies to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Need {
    Any,
    V4,
    V6,
}

impl Need {
    fn accepts(self, addrs: Addrs) -> bool {
        !matches!((self, addrs), (Need::V4, Addrs::V6(..)) | (Need::V6, Addrs::V4(..)))
    }
}

#[derive(Debug, Clone)]
struct Tcp {
    src: u16,
    dst: u16,
    flags: TcpFlags,
    seq: u32,
    ack: u32,
    window: u16,
    options: Vec<u8>,
}

#[derive(Debug, Clone)]
enum L4 {
    None,
    Udp(u16, u16),
    Tcp(Tcp),
    Icmpv4(u8, u8, [u8; 4]),
    Icmpv6(u8, u8, [u8; 4]),
}

fn echo_rest(id: u16, seq: u16) -> [u8; 4] {
    let [a, b] = id.to_be_bytes();
    let [c, d] = seq.to_be_bytes();
    [a, b, c, d]
}

/// Pads option bytes with EOL (zero) to a multiple of 4.
fn pad4(opts: &[u8]) -> Vec<u8> {
    let mut v = opts.to_vec();
    v.resize(opts.len().div_ceil(4) * 4, 0);
    v
}

fn tci(vid: u16, pcp: u8) -> Option<u16> {
    (vid <= 0xfff && pcp <= 7).then_some((u16::from(pcp) << 13) | vid)
}

impl PacketBuilder {
    /// Starts an Ethernet frame from `src` to `dst`.
    pub fn ethernet(src: MacAddr, dst: MacAddr) -> Self {
        PacketBuilder {
            src_mac: src,
            dst_mac: dst,
            stags: Vec::new(),
            ctags: Vec::new(),
            l3: L3::None,
            l4: L4::None,
            payload: Vec::new(),
            trailer: Vec::new(),
            frame_len: None,
            min_frame_len: 0,
            ip_checksum: None,
            l4_checksum: None,
            err: None,
        }
    }

    fn fail(mut self, msg: &'static str) -> Self {
        self.err.get_or_insert(msg);
        self
    }

    /// Adds an 802.1Q C-tag (TPID 0x8100). Repeatable; C-tags appear in call order.
    pub fn vlan(self, vid: u16) -> Self {
        self.vlan_pcp(vid, 0)
    }

    /// Adds an 802.1Q C-tag with a priority.
    pub fn vlan_pcp(self, vid: u16, pcp: u8) -> Self {
        match tci(vid, pcp) {
            Some(tci) => self.tag(EtherType::VLAN, tci),
            None => self.fail("vlan id > 4095 or pcp > 7"),
        }
    }

    /// Adds an 802.1ad S-tag (TPID 0x88a8). S-tags are placed outside all other tags.
    pub fn qinq(self, vid: u16) -> Self {
        self.qinq_pcp(vid, 0)
    }

    /// Adds an 802.1ad S-tag with a priority.
    pub fn qinq_pcp(mut self, vid: u16, pcp: u8) -> Self {
        match tci(vid, pcp) {
            Some(tci) => self.stags.push((EtherType::QINQ, tci)),
            None => return self.fail("vlan id > 4095 or pcp > 7"),
        }
        self
    }

    /// Adds a tag with any TPID and raw TCI, after the S-tags, in call order with C-tags.
    pub fn tag(mut self, tpid: EtherType, tci: u16) -> Self {
        self.ctags.push((tpid, tci));
        self
    }

    fn set_l3(mut self, l3: L3) -> Self {
        if !matches!(self.l3, L3::None) {
            return self.fail("layer 3 set twice");
        }
        self.l3 = l3;
        self
    }

    /// A non-IP frame with this EtherType; its body is the `payload`.
    pub fn ethertype(self, ethertype: impl Into<EtherType>) -> Self {
        self.set_l3(L3::Raw(ethertype.into()))
    }

    /// An ARP request: who has `target_ip`? Tell `sender_ip` at `sender_mac`.
    pub fn arp_request(self, sender_mac: MacAddr, sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Self {
        self.set_l3(L3::Arp(ArpRepr::request(sender_mac, sender_ip, target_ip)))
    }

    /// An ARP reply: `sender_ip` is at `sender_mac`, to `target_mac`/`target_ip`.
    pub fn arp_reply(self, sender_mac: MacAddr, sender_ip: Ipv4Addr, target_mac: MacAddr, target_ip: Ipv4Addr) -> Self {
        self.set_l3(L3::Arp(ArpRepr::reply(sender_mac, sender_ip, target_mac, target_ip)))
    }

    fn set_ip(self, addrs: Addrs) -> Self {
        self.set_l3(L3::Ip(Ip {
            addrs,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_frag: false,
            frag: (0, false),
            flow: 0,
            options: Vec::new(),
            ext: Vec::new(),
            frag_ext: None,
            protocol: None,
        }))
    }

    /// An IPv4 packet.
    pub fn ipv4(self, src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        self.set_ip(Addrs::V4(src, dst))
    }

    /// An IPv6 packet.
    pub fn ipv6(self, src: Ipv6Addr, dst: Ipv6Addr) -> Self {
        self.set_ip(Addrs::V6(src, dst))
    }

    /// An IPv4 or IPv6 packet, by the family of the addresses (which must match).
    pub fn ip(self, src: IpAddr, dst: IpAddr) -> Self {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.ipv4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => self.ipv6(s, d),
            _ => self.fail("ip() with addresses of different families"),
        }
    }

    /// Applies `f` to the IP layer if there is one of the `need`ed version and `valid` holds.
    fn edit_ip(mut self, what: &'static str, need: Need, valid: bool, f: impl FnOnce(&mut Ip)) -> Self {
        match &mut self.l3 {
            L3::Ip(ip) if valid && need.accepts(ip.addrs) => {
                f(ip);
                self
            }
            _ => self.fail(what),
        }
    }

    /// IPv4 TTL or IPv6 hop limit.
    pub fn ttl(self, ttl: u8) -> Self {
        self.edit_ip("ttl() needs ipv4/ipv6 first", Need::Any, true, |ip| ip.ttl = ttl)
    }

    /// DSCP (6 bits) of the IPv4 TOS or IPv6 traffic class.
    pub fn dscp(self, dscp: u8) -> Self {
        let what = "dscp() needs ipv4/ipv6 first and a value < 64";
        self.edit_ip(what, Need::Any, dscp < 64, |ip| ip.tos = (ip.tos & 3) | (dscp << 2))
    }

    /// ECN (2 bits) of the IPv4 TOS or IPv6 traffic class.
    pub fn ecn(self, ecn: u8) -> Self {
        let what = "ecn() needs ipv4/ipv6 first and a value < 4";
        self.edit_ip(what, Need::Any, ecn < 4, |ip| ip.tos = (ip.tos & !3) | ecn)
    }

    /// IPv6 flow label (20 bits).
    pub fn flow_label(self, label: u32) -> Self {
        let what = "flow_label() needs ipv6 first and a 20-bit value";
        self.edit_ip(what, Need::V6, label <= 0xfffff, |ip| ip.flow = label)
    }

    /// Identification: the IPv4 header's (must fit 16 bits) or the IPv6 fragment header's.
    pub fn ident(self, ident: u32) -> Self {
        let need = if ident > 0xffff { Need::V6 } else { Need::Any };
        let what = "ident() needs ipv4/ipv6 first (and a 16-bit value for ipv4)";
        self.edit_ip(what, need, true, |ip| ip.ident = ident)
    }

    /// IPv4 don't-fragment flag.
    pub fn dont_frag(self, df: bool) -> Self {
        self.edit_ip("dont_frag() needs ipv4 first", Need::V4, true, |ip| ip.dont_frag = df)
    }

    /// Marks the packet as a fragment: offset in 8-byte units and more-fragments flag. On IPv4
    /// this sets header fields; on IPv6 it appends a fragment header to the extension chain
    /// (its identification comes from [`ident`](Self::ident)).
    pub fn fragment(self, offset_units: u16, more: bool) -> Self {
        let what = "fragment() needs ipv4/ipv6 first and an offset < 8192";
        self.edit_ip(what, Need::Any, offset_units <= 0x1fff, |ip| match ip.addrs {
            Addrs::V4(..) => ip.frag = (offset_units, more),
            Addrs::V6(..) => {
                let [a, b] = ((offset_units << 3) | u16::from(more)).to_be_bytes();
                ip.frag_ext = Some(ip.ext.len());
                ip.ext.push((IpProtocol::FRAGMENT, vec![a, b, 0, 0, 0, 0]));
            }
        })
    }

    /// IPv4 options (raw bytes, at most 40), padded to a multiple of 4 with EOL.
    pub fn ipv4_options(self, options: &[u8]) -> Self {
        let what = "ipv4_options() needs ipv4 first and at most 40 bytes";
        self.edit_ip(what, Need::V4, options.len() <= 40, |ip| ip.options = pad4(options))
    }

    /// Appends an IPv6 extension header (HOPOPTS, ROUTING, DSTOPTS, FRAGMENT or AH). `body` is
    /// everything after its next-header and length bytes; the builder fills those two bytes and
    /// pads to a multiple of 8 (Pad1/PadN options for HOPOPTS/DSTOPTS, zeros otherwise; AH's
    /// length byte counts 4-byte units minus 2). A FRAGMENT body must be exactly 6 bytes.
    pub fn ipv6_ext(self, kind: IpProtocol, body: &[u8]) -> Self {
        let valid = kind.is_ipv6_ext() && (kind != IpProtocol::FRAGMENT || body.len() == 6) && body.len() + 2 <= 256 * 8;
        let what = "ipv6_ext() needs ipv6 first, an extension kind and a valid body";
        self.edit_ip(what, Need::V6, valid, |ip| ip.ext.push((kind, body.to_vec())))
    }

    /// Sets the IP protocol / final next header explicitly (needed when there is no L4 layer;
    /// overrides the L4 layer's protocol otherwise).
    pub fn protocol(self, p: IpProtocol) -> Self {
        self.edit_ip("protocol() needs ipv4/ipv6 first", Need::Any, true, |ip| ip.protocol = Some(p))
    }

    fn set_l4(mut self, l4: L4) -> Self {
        let need = match l4 {
            L4::Icmpv4(..) => Need::V4,
            L4::Icmpv6(..) => Need::V6,
            _ => Need::Any,
        };
        match &self.l3 {
            L3::Ip(ip) if matches!(self.l4, L4::None) && need.accepts(ip.addrs) => {
                self.l4 = l4;
                self
            }
            _ => self.fail("L4 layer needs ipv4/ipv6 first, once, and ICMP of the IP version"),
        }
    }

    /// A UDP datagram.
    pub fn udp(self, src_port: u16, dst_port: u16) -> Self {
        self.set_l4(L4::Udp(src_port, dst_port))
    }

    /// A TCP segment with these flags (see [`seq`](Self::seq), [`ack`](Self::ack),
    /// [`window`](Self::window), [`tcp_options`](Self::tcp_options)).
    pub fn tcp(self, src_port: u16, dst_port: u16, flags: TcpFlags) -> Self {
        let (seq, ack, window, options) = (0, 0, 65535, Vec::new());
        self.set_l4(L4::Tcp(Tcp { src: src_port, dst: dst_port, flags, seq, ack, window, options }))
    }

    fn edit_tcp(mut self, what: &'static str, valid: bool, f: impl FnOnce(&mut Tcp)) -> Self {
        match &mut self.l4 {
            L4::Tcp(t) if valid => {
                f(t);
                self
            }
            _ => self.fail(what),
        }
    }

    /// TCP sequence number.
    pub fn seq(self, n: u32) -> Self {
        self.edit_tcp("seq() needs tcp first", true, |t| t.seq = n)
    }

    /// TCP acknowledgement number.
    pub fn ack(self, n: u32) -> Self {
        self.edit_tcp("ack() needs tcp first", true, |t| t.ack = n)
    }

    /// TCP window.
    pub fn window(self, w: u16) -> Self {
        self.edit_tcp("window() needs tcp first", true, |t| t.window = w)
    }

    /// TCP options (raw bytes, at most 40), padded to a multiple of 4 with EOL.
    pub fn tcp_options(self, options: &[u8]) -> Self {
        let what = "tcp_options() needs tcp first and at most 40 bytes";
        self.edit_tcp(what, options.len() <= 40, |t| t.options = pad4(options))
    }

    /// An ICMPv4 echo request.
    pub fn icmpv4_echo(self, ident: u16, seq: u16) -> Self {
        self.icmpv4(icmpv4::ECHO_REQUEST, 0, echo_rest(ident, seq))
    }

    /// An ICMPv4 echo reply.
    pub fn icmpv4_echo_reply(self, ident: u16, seq: u16) -> Self {
        self.icmpv4(icmpv4::ECHO_REPLY, 0, echo_rest(ident, seq))
    }

    /// Any ICMPv4 message: type, code and bytes 4..8; the body is the `payload`.
    pub fn icmpv4(self, msg_type: u8, code: u8, rest: [u8; 4]) -> Self {
        self.set_l4(L4::Icmpv4(msg_type, code, rest))
    }

    /// An ICMPv6 echo request.
    pub fn icmpv6_echo(self, ident: u16, seq: u16) -> Self {
        self.icmpv6(icmpv6::ECHO_REQUEST, 0, echo_rest(ident, seq))
    }

    /// An ICMPv6 echo reply.
    pub fn icmpv6_echo_reply(self, ident: u16, seq: u16) -> Self {
        self.icmpv6(icmpv6::ECHO_REPLY, 0, echo_rest(ident, seq))
    }

    /// Any ICMPv6 message: type, code and bytes 4..8; the body is the `payload`.
    pub fn icmpv6(self, msg_type: u8, code: u8, rest: [u8; 4]) -> Self {
        self.set_l4(L4::Icmpv6(msg_type, code, rest))
    }

    /// The innermost payload (L4 data, or the L3/L2 body when there is no L4 layer).
    pub fn payload(mut self, data: &[u8]) -> Self {
        self.payload = data.to_vec();
        self
    }

    /// Bytes after the L3 packet that no length field counts (like Ethernet padding).
    pub fn trailer(mut self, data: &[u8]) -> Self {
        self.trailer = data.to_vec();
        self
    }

    /// Pads the payload with zeros so the whole frame (no FCS) is exactly `len` bytes;
    /// building fails if the frame is already longer.
    pub fn frame_len(mut self, len: usize) -> Self {
        self.frame_len = Some(len);
        self
    }

    /// Pads the payload with zeros only if the frame is shorter than `len` (e.g. 60).
    pub fn min_frame_len(mut self, len: usize) -> Self {
        self.min_frame_len = len;
        self
    }

    /// Writes this IPv4 header checksum instead of the correct one.
    pub fn ipv4_checksum(mut self, csum: u16) -> Self {
        self.ip_checksum = Some(csum);
        self
    }

    /// Writes this L4 checksum instead of the correct one (e.g. 0 for "no UDP checksum").
    pub fn l4_checksum(mut self, csum: u16) -> Self {
        self.l4_checksum = Some(csum);
        self
    }
}

mod emit;
#[cfg(test)]
mod tests;
