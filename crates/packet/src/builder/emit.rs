//! Emitting the frame: headers laid out, lengths and checksums filled in.

use super::*;

impl PacketBuilder {
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
            L3::None => return Err(Error::Build("no layer 3: call ipv4/ipv6/ip/arp_*/ethertype")),
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
                let proto = proto.ok_or(Error::Build("no protocol: add an L4 layer or protocol()"))?;
                ip.header(proto)
            }
        };
        let l4_hdr = self.l4_header();
        let tags = self.stags.len() + self.ctags.len();
        let eth_len = EthernetFrame::<&[u8]>::HEADER_LEN + 4 * tags;
        let needed = eth_len + l3_hdr.len() + l4_hdr.len() + self.payload.len() + self.trailer.len();
        let total = match self.frame_len {
            Some(n) if n < needed => return Err(Error::FrameTooShort { needed, requested: n }),
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
            (_, L4::None) if self.l4_checksum.is_some() => return Err(Error::Build("l4_checksum() without an L4 layer")),
            (L3::Ip(ip), _) => ip.addrs,
            _ => return Ok(()),
        };
        let at = match (&self.l4, addrs) {
            (L4::None, _) => return Ok(()),
            (L4::Udp(..), _) => {
                let len = u16::try_from(seg.len()).map_err(|_| Error::Build("UDP over 65535 bytes"))?;
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
