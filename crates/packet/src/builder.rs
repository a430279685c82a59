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
    icmpv4, icmpv6, Addrs, Error, EtherType, EthernetFrame, Icmpv4Packet, Icmpv6Packet, IpProtocol,
    Ipv4Packet, Ipv6Packet, MacAddr, Result, TcpFlags, TcpPacket, UdpPacket,
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
        !matches!(
            (self, addrs),
            (Need::V4, Addrs::V6(..)) | (Need::V6, Addrs::V4(..))
        )
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
    pub fn arp_request(
        self,
        sender_mac: MacAddr,
        sender_ip: Ipv4Addr,
        target_ip: Ipv4Addr,
    ) -> Self {
        self.set_l3(L3::Arp(ArpRepr::request(sender_mac, sender_ip, target_ip)))
    }

    /// An ARP reply: `sender_ip` is at `sender_mac`, to `target_mac`/`target_ip`.
    pub fn arp_reply(
        self,
        sender_mac: MacAddr,
        sender_ip: Ipv4Addr,
        target_mac: MacAddr,
        target_ip: Ipv4Addr,
    ) -> Self {
        self.set_l3(L3::Arp(ArpRepr::reply(
            sender_mac, sender_ip, target_mac, target_ip,
        )))
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
    fn edit_ip(
        mut self,
        what: &'static str,
        need: Need,
        valid: bool,
        f: impl FnOnce(&mut Ip),
    ) -> Self {
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
        self.edit_ip("ttl() needs ipv4/ipv6 first", Need::Any, true, |ip| {
            ip.ttl = ttl
        })
    }

    /// DSCP (6 bits) of the IPv4 TOS or IPv6 traffic class.
    pub fn dscp(self, dscp: u8) -> Self {
        let what = "dscp() needs ipv4/ipv6 first and a value < 64";
        self.edit_ip(what, Need::Any, dscp < 64, |ip| {
            ip.tos = (ip.tos & 3) | (dscp << 2)
        })
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
        self.edit_ip("dont_frag() needs ipv4 first", Need::V4, true, |ip| {
            ip.dont_frag = df
        })
    }

    /// Marks the packet as a fragment: offset in 8-byte units and more-fragments flag. On IPv4
    /// this sets header fields; on IPv6 it appends a fragment header to the extension chain
    /// (its identification comes from [`ident`](Self::ident)).
    pub fn fragment(self, offset_units: u16, more: bool) -> Self {
        let what = "fragment() needs ipv4/ipv6 first and an offset < 8192";
        self.edit_ip(what, Need::Any, offset_units <= 0x1fff, |ip| {
            match ip.addrs {
                Addrs::V4(..) => ip.frag = (offset_units, more),
                Addrs::V6(..) => {
                    let [a, b] = ((offset_units << 3) | u16::from(more)).to_be_bytes();
                    ip.frag_ext = Some(ip.ext.len());
                    ip.ext.push((IpProtocol::FRAGMENT, vec![a, b, 0, 0, 0, 0]));
                }
            }
        })
    }

    /// IPv4 options (raw bytes, at most 40), padded to a multiple of 4 with EOL.
    pub fn ipv4_options(self, options: &[u8]) -> Self {
        let what = "ipv4_options() needs ipv4 first and at most 40 bytes";
        self.edit_ip(what, Need::V4, options.len() <= 40, |ip| {
            ip.options = pad4(options)
        })
    }

    /// Appends an IPv6 extension header (HOPOPTS, ROUTING, DSTOPTS, FRAGMENT or AH). `body` is
    /// everything after its next-header and length bytes; the builder fills those two bytes and
    /// pads to a multiple of 8 (Pad1/PadN options for HOPOPTS/DSTOPTS, zeros otherwise; AH's
    /// length byte counts 4-byte units minus 2). A FRAGMENT body must be exactly 6 bytes.
    pub fn ipv6_ext(self, kind: IpProtocol, body: &[u8]) -> Self {
        let valid = kind.is_ipv6_ext()
            && (kind != IpProtocol::FRAGMENT || body.len() == 6)
            && body.len() + 2 <= 256 * 8;
        let what = "ipv6_ext() needs ipv6 first, an extension kind and a valid body";
        self.edit_ip(what, Need::V6, valid, |ip| {
            ip.ext.push((kind, body.to_vec()))
        })
    }

    /// Sets the IP protocol / final next header explicitly (needed when there is no L4 layer;
    /// overrides the L4 layer's protocol otherwise).
    pub fn protocol(self, p: IpProtocol) -> Self {
        self.edit_ip("protocol() needs ipv4/ipv6 first", Need::Any, true, |ip| {
            ip.protocol = Some(p)
        })
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
        self.set_l4(L4::Tcp(Tcp {
            src: src_port,
            dst: dst_port,
            flags,
            seq,
            ack,
            window,
            options,
        }))
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

    /// Builds the frame, panicking on misuse (see [`try_build`](Self::try_build)).
    #[track_caller]
    pub fn build(&self) -> Vec<u8> {
        self.try_build().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Builds the frame, or reports misuse and a `frame_len` too short for the contents.
    pub fn try_build(&self) -> Result<Vec<u8>> {
        if let Some(e) = self.err {
            return Err(Error::Build(e));
        }
        let (ethertype, l3_hdr) = match &self.l3 {
            L3::None => {
                return Err(Error::Build(
                    "no layer 3: call ipv4/ipv6/ip/arp_*/ethertype",
                ))
            }
            L3::Raw(e) => (*e, Vec::new()),
            L3::Arp(a) => (EtherType::ARP, a.to_bytes().to_vec()),
            L3::Ip(ip) => {
                let upper = match &self.l4 {
                    L4::Udp(..) => Some(IpProtocol::UDP),
                    L4::Tcp(..) => Some(IpProtocol::TCP),
                    L4::Icmpv4(..) => Some(IpProtocol::ICMP),
                    L4::Icmpv6(..) => Some(IpProtocol::ICMPV6),
                    L4::None => None,
                };
                let proto = ip.protocol.or(upper);
                let proto =
                    proto.ok_or(Error::Build("no protocol: add an L4 layer or protocol()"))?;
                ip.header(proto)
            }
        };
        let l4_hdr = self.l4_header();
        let tags = self.stags.len() + self.ctags.len();
        let eth_len = EthernetFrame::<&[u8]>::HEADER_LEN + 4 * tags;
        let needed =
            eth_len + l3_hdr.len() + l4_hdr.len() + self.payload.len() + self.trailer.len();
        let total = match self.frame_len {
            Some(n) if n < needed => {
                return Err(Error::FrameTooShort {
                    needed,
                    requested: n,
                })
            }
            Some(n) => n,
            None => needed.max(self.min_frame_len),
        };

        // L4 segment (or bare L3 body) with its lengths and checksum.
        let mut seg = l4_hdr;
        seg.extend_from_slice(&self.payload);
        seg.resize(seg.len() + total - needed, 0);
        self.fill_l4(&mut seg)?;

        // L3 lengths and checksum.
        let mut pkt = l3_hdr;
        if let L3::Ip(ip) = &self.l3 {
            let too_long = Error::Build("IP packet over 65535 bytes");
            match ip.addrs {
                Addrs::V4(..) => {
                    let len = u16::try_from(pkt.len() + seg.len()).map_err(|_| too_long)?;
                    let mut p = Ipv4Packet::new_unchecked(&mut pkt[..]);
                    p.set_total_len(len);
                    p.fill_checksum();
                    if let Some(c) = self.ip_checksum {
                        p.set_checksum(c);
                    }
                }
                Addrs::V6(..) => {
                    let len = u16::try_from(pkt.len() - 40 + seg.len()).map_err(|_| too_long)?;
                    Ipv6Packet::new_unchecked(&mut pkt[..]).set_payload_len(len);
                }
            }
        }

        let mut frame = Vec::with_capacity(total);
        frame.extend_from_slice(&self.dst_mac.0);
        frame.extend_from_slice(&self.src_mac.0);
        for (tpid, tci) in self.stags.iter().chain(&self.ctags) {
            frame.extend_from_slice(&tpid.0.to_be_bytes());
            frame.extend_from_slice(&tci.to_be_bytes());
        }
        frame.extend_from_slice(&ethertype.0.to_be_bytes());
        frame.extend_from_slice(&pkt);
        frame.extend_from_slice(&seg);
        frame.extend_from_slice(&self.trailer);
        debug_assert_eq!(frame.len(), total);
        Ok(frame)
    }

    fn l4_header(&self) -> Vec<u8> {
        match &self.l4 {
            L4::None => Vec::new(),
            L4::Udp(s, d) => {
                let [a, b] = s.to_be_bytes();
                let [c, d] = d.to_be_bytes();
                vec![a, b, c, d, 0, 0, 0, 0]
            }
            L4::Tcp(tcp) => {
                let mut h = vec![0u8; 20];
                h.extend_from_slice(&tcp.options);
                let mut t = TcpPacket::new_unchecked(&mut h[..]);
                t.set_src_port(tcp.src);
                t.set_dst_port(tcp.dst);
                t.set_seq(tcp.seq);
                t.set_ack(tcp.ack);
                t.set_data_offset((20 + tcp.options.len()) as u8 / 4);
                t.set_flags(tcp.flags);
                t.set_window(tcp.window);
                h
            }
            L4::Icmpv4(t, c, r) | L4::Icmpv6(t, c, r) => vec![*t, *c, 0, 0, r[0], r[1], r[2], r[3]],
        }
    }

    fn fill_l4(&self, seg: &mut [u8]) -> Result<()> {
        let addrs = match (&self.l3, &self.l4) {
            (_, L4::None) if self.l4_checksum.is_some() => {
                return Err(Error::Build("l4_checksum() without an L4 layer"))
            }
            (L3::Ip(ip), _) => ip.addrs,
            _ => return Ok(()),
        };
        let at = match (&self.l4, addrs) {
            (L4::None, _) => return Ok(()),
            (L4::Udp(..), _) => {
                let len =
                    u16::try_from(seg.len()).map_err(|_| Error::Build("UDP over 65535 bytes"))?;
                let mut u = UdpPacket::new_unchecked(&mut *seg);
                u.set_len(len);
                match addrs {
                    Addrs::V4(s, d) => u.fill_checksum_v4(s, d),
                    Addrs::V6(s, d) => u.fill_checksum_v6(s, d),
                }
                6
            }
            (L4::Tcp(..), _) => {
                let mut t = TcpPacket::new_unchecked(&mut *seg);
                match addrs {
                    Addrs::V4(s, d) => t.fill_checksum_v4(s, d),
                    Addrs::V6(s, d) => t.fill_checksum_v6(s, d),
                }
                16
            }
            (L4::Icmpv4(..), _) => {
                Icmpv4Packet::new_unchecked(&mut *seg).fill_checksum();
                2
            }
            (L4::Icmpv6(..), Addrs::V6(s, d)) => {
                Icmpv6Packet::new_unchecked(&mut *seg).fill_checksum_v6(s, d);
                2
            }
            (L4::Icmpv6(..), Addrs::V4(..)) => unreachable!("rejected by set_l4"),
        };
        if let Some(c) = self.l4_checksum {
            seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        Ok(())
    }
}

impl Ip {
    /// The IP header (with extension headers or options), lengths and checksum not yet set.
    fn header(&self, proto: IpProtocol) -> (EtherType, Vec<u8>) {
        match self.addrs {
            Addrs::V4(src, dst) => {
                let mut h = vec![0u8; 20];
                h.extend_from_slice(&self.options);
                let mut p = Ipv4Packet::new_unchecked(&mut h[..]);
                p.set_version(4);
                p.set_ihl((20 + self.options.len()) as u8 / 4);
                p.set_dscp(self.tos >> 2);
                p.set_ecn(self.tos);
                p.set_ident(self.ident as u16);
                p.set_dont_frag(self.dont_frag);
                p.set_frag_offset(self.frag.0);
                p.set_more_frags(self.frag.1);
                p.set_ttl(self.ttl);
                p.set_protocol(proto);
                p.set_src(src);
                p.set_dst(dst);
                (EtherType::IPV4, h)
            }
            Addrs::V6(src, dst) => {
                let mut h = vec![0u8; 40];
                let mut p = Ipv6Packet::new_unchecked(&mut h[..]);
                p.set_version(6);
                p.set_traffic_class(self.tos);
                p.set_flow_label(self.flow);
                p.set_next_header(self.ext.first().map_or(proto, |e| e.0));
                p.set_hop_limit(self.ttl);
                p.set_src(src);
                p.set_dst(dst);
                for (i, (kind, body)) in self.ext.iter().enumerate() {
                    let next = self.ext.get(i + 1).map_or(proto, |e| e.0);
                    h.extend_from_slice(&ext_header(*kind, body, next));
                    if self.frag_ext == Some(i) {
                        let at = h.len() - 4;
                        h[at..].copy_from_slice(&self.ident.to_be_bytes());
                    }
                }
                (EtherType::IPV6, h)
            }
        }
    }
}

/// One IPv6 extension header: next header, length, body and padding to 8 bytes.
fn ext_header(kind: IpProtocol, body: &[u8], next: IpProtocol) -> Vec<u8> {
    let mut h = vec![next.0, 0];
    h.extend_from_slice(body);
    if kind == IpProtocol::FRAGMENT {
        return h;
    }
    if kind == IpProtocol::AH {
        // Reserved, SPI, sequence number and the ICV in `body`; IPv6
        // wants the whole header a multiple of 8 bytes.
        h.resize(h.len().max(12).div_ceil(8) * 8, 0);
        h[1] = (h.len() / 4 - 2) as u8;
        return h;
    }
    let pad = h.len().div_ceil(8) * 8 - h.len();
    let options = matches!(kind, IpProtocol::HOPOPTS | IpProtocol::DSTOPTS);
    match pad {
        1 if options => h.push(0),
        2.. if options => {
            h.extend_from_slice(&[1, pad as u8 - 2]);
            h.resize(h.len() + pad - 2, 0);
        }
        _ => h.resize(h.len() + pad, 0),
    }
    h[1] = (h.len() / 8 - 1) as u8;
    h
}

#[cfg(test)]
mod tests {
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
        let f = PacketBuilder::ethernet(A, B)
            .vlan(100)
            .ipv4(S4, D4)
            .ttl(5)
            .ident(0x1234)
            .dont_frag(true)
            .udp(1234, 53)
            .payload(b"hello")
            .build();
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
        let f = PacketBuilder::ethernet(A, B)
            .vlan_pcp(100, 3)
            .qinq(200)
            .ipv6(v6("2001:db8::1"), v6("2001:db8::2"))
            .icmpv6_echo(7, 9)
            .payload(b"ping")
            .build();
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
        let L3Info::Ipv6(ip) = &p.l3 else {
            panic!("{p:?}")
        };
        assert_eq!(
            ip.ext_headers,
            [
                IpProtocol::HOPOPTS,
                IpProtocol::ROUTING,
                IpProtocol::FRAGMENT
            ]
        );
        assert_eq!(
            ip.fragment,
            Some(crate::Ipv6Fragment {
                offset: 0,
                more: true,
                ident: 0xdeadbeef
            })
        );
        assert_eq!(ip.protocol, IpProtocol::UDP);
        // first fragment: ports are read, the checksum cannot be judged
        assert!(matches!(
            p.l4,
            L4Info::Udp {
                src_port: 5000,
                dst_port: 6000,
                checksum_ok: None,
                ..
            }
        ));
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
        let hs: Vec<_> = ip
            .ext_headers()
            .map(|h| h.unwrap().bytes.to_vec())
            .collect();
        assert_eq!(hs[0], [0, 0, 0x1e, 1, 3, 0, 0, 0]);
        assert_eq!(hs[1], [60, 0, 1, 3, 0, 0, 0, 0]);
        assert_eq!(hs[2], [43, 0, 1, 4, 0, 0, 0, 0]);
        assert_eq!(hs[3], [6, 1, 4, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 0]);
        assert_eq!(ip.next_header(), IpProtocol::DSTOPTS);
        assert_eq!(ip.upper_layer().unwrap(), (IpProtocol::TCP, 40 + 40));
        let p = parse(&f).unwrap();
        assert!(
            matches!(
                p.l4,
                L4Info::Tcp {
                    checksum_ok: Some(true),
                    ..
                }
            ),
            "{p:?}"
        );
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
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            (
                self::v6("2001:db8::a").into(),
                self::v6("2001:db8::b").into(),
            )
        } else {
            (S4.into(), D4.into())
        };
        b = b.ip(src, dst).ttl(17);
        b = match (l4, v6) {
            (0, _) => b.udp(1111, 2222),
            (1, _) => b
                .tcp(3333, 4444, TcpFlags::PSH | TcpFlags::ACK)
                .seq(7)
                .ack(8),
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
        assert_eq!(
            (p.src_ip(), p.dst_ip(), p.ttl()),
            (Some(src), Some(dst), Some(17)),
            "{ctx}"
        );
        assert!(p.checksums_ok() && !p.is_fragment(), "{ctx}");
        assert_eq!(p.payload(&f), payload, "{ctx}");
        assert_eq!(p.payload_offset + p.payload_len, f.len(), "{ctx}");
        match (&p.l4, l4) {
            (
                L4Info::Udp {
                    src_port: 1111,
                    dst_port: 2222,
                    len: 45,
                    checksum_ok: Some(true),
                },
                0,
            ) => {}
            (
                L4Info::Tcp {
                    src_port: 3333,
                    dst_port: 4444,
                    seq: 7,
                    ack: 8,
                    flags,
                    window: 65535,
                    checksum_ok: Some(true),
                },
                1,
            ) => {
                assert_eq!(*flags, TcpFlags::PSH | TcpFlags::ACK)
            }
            (
                L4Info::Icmpv4 {
                    msg_type: 8,
                    code: 0,
                    rest: [0, 0x55, 0, 0x66],
                    checksum_ok: Some(true),
                },
                2,
            ) if !v6 => {}
            (
                L4Info::Icmpv6 {
                    msg_type: 128,
                    code: 0,
                    rest: [0, 0x55, 0, 0x66],
                    checksum_ok: Some(true),
                },
                2,
            ) if v6 => {}
            (other, _) => panic!("{ctx}: {other:?}"),
        }
        assert_truncations_fail(&f);

        // frame_len pads the payload; every length and checksum still holds.
        let padded = b.payload(&payload).frame_len(200).build();
        assert_eq!(padded.len(), 200);
        let q = parse(&padded).unwrap();
        assert!(q.checksums_ok(), "{ctx}");
        assert_eq!(&q.payload(&padded)[..payload.len()], payload, "{ctx}");
        assert!(
            q.payload(&padded)[payload.len()..].iter().all(|&x| x == 0),
            "{ctx}"
        );
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
        let b = PacketBuilder::ethernet(A, B)
            .ipv4(S4, D4)
            .udp(1, 2)
            .payload(b"abc");
        assert_eq!(b.build().len(), 45);
        let f = b.clone().frame_len(60).build();
        assert_eq!(f.len(), 60);
        let u = UdpPacket::new_checked(&f[34..]).unwrap();
        assert_eq!(u.len(), 26);
        assert_eq!(u.payload(), b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
        assert!(u.verify_checksum_v4(S4, D4));
        assert_eq!(b.clone().frame_len(45).build().len(), 45);
        assert_eq!(
            b.clone().frame_len(44).try_build(),
            Err(Error::FrameTooShort {
                needed: 45,
                requested: 44
            })
        );
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
        PacketBuilder::ethernet(A, B)
            .ipv4(S4, D4)
            .udp(1, 2)
            .frame_len(40)
            .build();
    }

    #[test]
    fn ipv4_options_are_padded() {
        for (opts, ihl) in [
            (&[][..], 5),
            (&[1, 1, 1][..], 6),
            (&[0x94, 4, 0, 0][..], 6),
            (&[1; 5][..], 7),
            (&[1; 40][..], 15),
        ] {
            let f = PacketBuilder::ethernet(A, B)
                .ipv4(S4, D4)
                .ipv4_options(opts)
                .udp(1, 2)
                .payload(b"x")
                .build();
            let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
            assert_eq!(ip.ihl(), ihl);
            assert_eq!(&ip.options()[..opts.len()], opts);
            assert!(ip.options()[opts.len()..].iter().all(|&b| b == 0));
            assert!(ip.verify_checksum());
            let p = parse(&f).unwrap();
            assert!(p.checksums_ok() && p.payload(&f) == b"x");
            assert_truncations_fail(&f);
        }
        let e = PacketBuilder::ethernet(A, B)
            .ipv4(S4, D4)
            .ipv4_options(&[1; 41])
            .udp(1, 2)
            .try_build();
        assert!(matches!(e, Err(Error::Build(_))));
    }

    #[test]
    fn ipv4_fragments() {
        let first = PacketBuilder::ethernet(A, B)
            .ipv4(S4, D4)
            .ident(77)
            .fragment(0, true)
            .udp(9, 10)
            .payload(&[1; 16])
            .build();
        let p = parse(&first).unwrap();
        let L3Info::Ipv4(ip) = &p.l3 else { panic!() };
        assert_eq!((ip.ident, ip.more_frags, ip.frag_offset), (77, true, 0));
        assert!(p.is_fragment());
        assert!(matches!(
            p.l4,
            L4Info::Udp {
                src_port: 9,
                dst_port: 10,
                checksum_ok: None,
                ..
            }
        ));

        let later = PacketBuilder::ethernet(A, B)
            .ipv4(S4, D4)
            .fragment(3, false)
            .protocol(IpProtocol::UDP)
            .payload(&[7; 8])
            .build();
        let p = parse(&later).unwrap();
        let L3Info::Ipv4(ip) = &p.l3 else { panic!() };
        assert_eq!(
            (ip.more_frags, ip.frag_offset, ip.protocol),
            (false, 3, IpProtocol::UDP)
        );
        assert_eq!(
            (p.l4.clone(), p.l4_offset, p.payload_offset, p.payload_len),
            (L4Info::None, None, 34, 8)
        );
        assert!(p.is_fragment() && p.checksums_ok());

        let later6 = PacketBuilder::ethernet(A, B)
            .ipv6(v6("::1"), v6("::2"))
            .fragment(1, true)
            .protocol(IpProtocol::TCP)
            .payload(&[9; 8])
            .build();
        let p = parse(&later6).unwrap();
        assert_eq!(
            (p.l4.clone(), p.payload_offset, p.payload_len),
            (L4Info::None, 14 + 48, 8)
        );
        assert!(p.is_fragment());
    }

    #[test]
    fn non_ip_frames() {
        let sip = Ipv4Addr::new(192, 168, 1, 1);
        let tip = Ipv4Addr::new(192, 168, 1, 2);
        let f = PacketBuilder::ethernet(A, MacAddr::BROADCAST)
            .vlan(3)
            .arp_request(A, sip, tip)
            .min_frame_len(60)
            .build();
        assert_eq!(f.len(), 60);
        assert_eq!(&f[16..18], &[0x08, 0x06]);
        let p = parse(&f).unwrap();
        assert_eq!(p.l3, L3Info::Arp(ArpRepr::request(A, sip, tip)));
        assert_eq!((p.payload_offset, p.payload_len), (46, 14));

        let r = PacketBuilder::ethernet(B, A)
            .arp_reply(B, tip, A, sip)
            .build();
        assert_eq!(
            parse(&r).unwrap().l3,
            L3Info::Arp(ArpRepr::reply(B, tip, A, sip))
        );

        let raw = PacketBuilder::ethernet(A, B)
            .ethertype(0x88b5)
            .payload(&[1, 2, 3])
            .frame_len(60)
            .build();
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
        let tags: Vec<_> = p
            .vlans
            .iter()
            .map(|v| (v.tpid, v.vid, v.pcp, v.dei))
            .collect();
        assert_eq!(
            tags,
            [
                (EtherType::QINQ, 7, 6, false),
                (EtherType::VLAN, 0xd, 7, true)
            ]
        );
        let L3Info::Ipv6(ip) = &p.l3 else { panic!() };
        assert_eq!(
            (ip.traffic_class, ip.flow_label, ip.hop_limit, ip.protocol),
            (46 << 2 | 2, 0xabcde, 1, IpProtocol::NONE)
        );
        assert_eq!(p.l4, L4Info::Other(IpProtocol::NONE));

        let f = PacketBuilder::ethernet(A, B)
            .ipv4(S4, D4)
            .dscp(10)
            .ecn(1)
            .icmpv4(11, 0, [0; 4])
            .build();
        let L3Info::Ipv4(ip) = parse(&f).unwrap().l3 else {
            panic!()
        };
        assert_eq!((ip.dscp, ip.ecn, ip.dont_frag), (10, 1, false));
    }

    #[test]
    fn checksum_overrides() {
        let b = PacketBuilder::ethernet(A, B)
            .ipv4(S4, D4)
            .udp(1, 2)
            .payload(b"z");
        let p = parse(&b.clone().l4_checksum(0x1234).build()).unwrap();
        assert!(matches!(
            p.l4,
            L4Info::Udp {
                checksum_ok: Some(false),
                ..
            }
        ));
        let p = parse(&b.clone().l4_checksum(0).build()).unwrap();
        assert!(matches!(
            p.l4,
            L4Info::Udp {
                checksum_ok: Some(true),
                ..
            }
        ));
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
        e(eth()
            .ipv4(S4, D4)
            .ipv6_ext(IpProtocol::HOPOPTS, &[])
            .udp(1, 2));
        e(eth()
            .ipv6(v6("::1"), v6("::2"))
            .ipv6_ext(IpProtocol::UDP, &[])
            .udp(1, 2));
        e(eth()
            .ipv6(v6("::1"), v6("::2"))
            .ipv6_ext(IpProtocol::FRAGMENT, &[0; 5])
            .udp(1, 2));
        e(eth().ipv6(v6("::1"), v6("::2")).dont_frag(true).udp(1, 2));
        e(eth().ipv4(S4, D4).udp(1, 2).seq(5));
        e(eth()
            .ipv4(S4, D4)
            .tcp(1, 2, TcpFlags::SYN)
            .tcp_options(&[1; 41]));
        e(eth().ethertype(0x88b5).payload(b"x").l4_checksum(1));
        e(eth().arp_request(A, S4, D4).ipv4(S4, D4).udp(1, 2));
    }
}
