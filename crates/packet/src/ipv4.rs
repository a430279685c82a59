//! IPv4 headers (RFC 791) and IP protocol numbers.

use crate::{be16, checksum, clamp, put16, view, Error, Result};
use std::{fmt, net::Ipv4Addr};

/// An IP protocol / IPv6 next-header number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpProtocol(pub u8);

impl IpProtocol {
    /// IPv6 hop-by-hop options, 0.
    pub const HOPOPTS: IpProtocol = IpProtocol(0);
    /// ICMP, 1.
    pub const ICMP: IpProtocol = IpProtocol(1);
    /// TCP, 6.
    pub const TCP: IpProtocol = IpProtocol(6);
    /// UDP, 17.
    pub const UDP: IpProtocol = IpProtocol(17);
    /// IPv6 routing header, 43.
    pub const ROUTING: IpProtocol = IpProtocol(43);
    /// IPv6 fragment header, 44.
    pub const FRAGMENT: IpProtocol = IpProtocol(44);
    /// IPsec ESP, 50 (carries no ports anyone can read).
    pub const ESP: IpProtocol = IpProtocol(50);
    /// IPsec authentication header, 51 (an IPv6 extension header whose
    /// length counts 4-byte units, minus 2).
    pub const AH: IpProtocol = IpProtocol(51);
    /// ICMPv6, 58.
    pub const ICMPV6: IpProtocol = IpProtocol(58);
    /// IPv6 "no next header", 59.
    pub const NONE: IpProtocol = IpProtocol(59);
    /// IPv6 destination options, 60.
    pub const DSTOPTS: IpProtocol = IpProtocol(60);

    /// True for the IPv6 extension headers this crate walks (hop-by-hop, routing, fragment,
    /// destination options, authentication): the kernel's `ipv6_ext_hdr()` but "no next header".
    pub fn is_ipv6_ext(self) -> bool {
        matches!(self, Self::HOPOPTS | Self::ROUTING | Self::FRAGMENT | Self::DSTOPTS | Self::AH)
    }

    fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::HOPOPTS => "HopOpts",
            Self::ICMP => "ICMP",
            Self::TCP => "TCP",
            Self::UDP => "UDP",
            Self::ROUTING => "Routing",
            Self::FRAGMENT => "Fragment",
            Self::ICMPV6 => "ICMPv6",
            Self::NONE => "NoNext",
            Self::DSTOPTS => "DstOpts",
            _ => return None,
        })
    }
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        IpProtocol(v)
    }
}

impl From<IpProtocol> for u8 {
    fn from(p: IpProtocol) -> Self {
        p.0
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "{}", self.0),
        }
    }
}

impl fmt::Debug for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({})", self.0),
            None => write!(f, "IpProtocol({})", self.0),
        }
    }
}

view! {
    /// View of an IPv4 packet: header, options and payload.
    Ipv4Packet
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Length of a header without options.
    pub const HEADER_LEN: usize = 20;

    /// Ok if version is 4, ihl >= 5, and header and `total_len` fit the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 {
            return Err(Error::Malformed("ipv4: version is not 4"));
        }
        if self.ihl() < 5 {
            return Err(Error::Malformed("ipv4: ihl < 5"));
        }
        if self.header_len() > b.len() {
            return Err(Error::Truncated);
        }
        if usize::from(self.total_len()) < self.header_len() {
            return Err(Error::Malformed("ipv4: total length shorter than header"));
        }
        if usize::from(self.total_len()) > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// IP version (4).
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }

    /// Header length in 32-bit words.
    pub fn ihl(&self) -> u8 {
        self.b()[0] & 0x0f
    }

    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// Differentiated services code point (6 bits).
    pub fn dscp(&self) -> u8 {
        self.b()[1] >> 2
    }

    /// Explicit congestion notification (2 bits).
    pub fn ecn(&self) -> u8 {
        self.b()[1] & 3
    }

    /// Total length of header and payload.
    pub fn total_len(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        be16(self.b(), 6) & 0x1fff
    }

    /// True if this packet is a fragment (more-fragments set or non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol(self.b()[9])
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 10)
    }

    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        <[u8; 4]>::try_from(&self.b()[12..16]).unwrap().into()
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        <[u8; 4]>::try_from(&self.b()[16..20]).unwrap().into()
    }

    /// True if the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(clamp(self.b(), 0, self.header_len()))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// Option bytes (between byte 20 and `header_len`).
    pub fn options(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        clamp(b, Self::HEADER_LEN, self.header_len())
    }

    /// Payload, from `header_len` to `total_len` (bytes beyond `total_len` are ignored).
    pub fn payload(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        clamp(b, self.header_len(), usize::from(self.total_len()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version nibble.
    pub fn set_version(&mut self, v: u8) {
        let b = self.bm();
        b[0] = (b[0] & 0x0f) | (v << 4);
    }

    /// Sets the header length in 32-bit words.
    pub fn set_ihl(&mut self, words: u8) {
        let b = self.bm();
        b[0] = (b[0] & 0xf0) | (words & 0x0f);
    }

    /// Sets the DSCP, keeping the ECN bits.
    pub fn set_dscp(&mut self, dscp: u8) {
        let b = self.bm();
        b[1] = (b[1] & 3) | (dscp << 2);
    }

    /// Sets the ECN bits, keeping the DSCP.
    pub fn set_ecn(&mut self, ecn: u8) {
        let b = self.bm();
        b[1] = (b[1] & !3) | (ecn & 3);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        put16(self.bm(), 2, len);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, id: u16) {
        put16(self.bm(), 4, id);
    }

    /// Sets the don't-fragment flag.
    pub fn set_dont_frag(&mut self, on: bool) {
        let b = self.bm();
        b[6] = (b[6] & !0x40) | if on { 0x40 } else { 0 };
    }

    /// Sets the more-fragments flag.
    pub fn set_more_frags(&mut self, on: bool) {
        let b = self.bm();
        b[6] = (b[6] & !0x20) | if on { 0x20 } else { 0 };
    }

    /// Sets the fragment offset (8-byte units, 13 bits), keeping the flags.
    pub fn set_frag_offset(&mut self, units: u16) {
        let v = (be16(self.b(), 6) & 0xe000) | (units & 0x1fff);
        put16(self.bm(), 6, v);
    }

    /// Sets the TTL.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.bm()[8] = ttl;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, p: IpProtocol) {
        self.bm()[9] = p.0;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.bm(), 10, c);
    }

    /// Sets the source address.
    pub fn set_src(&mut self, a: Ipv4Addr) {
        self.bm()[12..16].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst(&mut self, a: Ipv4Addr) {
        self.bm()[16..20].copy_from_slice(&a.octets());
    }

    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(&self.b()[..self.header_len()]);
        self.set_checksum(c);
    }

    /// Decrements the TTL (saturating at 0), updating the checksum incrementally (RFC 1624).
    pub fn decrement_ttl(&mut self) {
        let old = be16(self.b(), 8);
        self.set_ttl(self.ttl().saturating_sub(1));
        let c = checksum::update16(self.checksum(), old, be16(self.b(), 8));
        self.set_checksum(c);
    }

    /// Mutable option bytes.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.bm()[Self::HEADER_LEN..hl]
    }

    /// Mutable payload, from `header_len` to `total_len`.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), usize::from(self.total_len()));
        &mut self.bm()[hl..tl]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 192.168.0.1 -> 192.168.0.199, UDP, DF, total length 0x73 (payload zero-filled here).
    fn packet() -> Vec<u8> {
        let mut v = vec![0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7];
        v.resize(0x73, 0);
        v
    }

    #[test]
    fn fields() {
        let b = packet();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.version(), p.ihl(), p.header_len()), (4, 5, 20));
        assert_eq!((p.dscp(), p.ecn(), p.total_len(), p.ident()), (0, 0, 0x73, 0));
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!((p.frag_offset(), p.ttl(), p.protocol()), (0, 64, IpProtocol::UDP));
        assert_eq!(p.checksum(), 0xb861);
        assert!(p.verify_checksum());
        assert_eq!(p.src(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(p.options().is_empty());
        assert_eq!(p.payload().len(), 0x73 - 20);
    }

    #[test]
    fn setters_and_checksum() {
        let mut b = packet();
        b.extend_from_slice(&[0xee; 4]); // ethernet padding beyond total_len
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_dscp(46);
        p.set_ecn(1);
        p.set_ident(0x1234);
        p.set_frag_offset(0x1fff);
        p.set_more_frags(true);
        p.set_dont_frag(false);
        p.set_ttl(1);
        p.set_protocol(IpProtocol::TCP);
        p.set_src(Ipv4Addr::new(10, 0, 0, 1));
        p.set_dst(Ipv4Addr::new(10, 0, 0, 2));
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!((p.dscp(), p.ecn(), p.ident(), p.frag_offset()), (46, 1, 0x1234, 0x1fff));
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        p.set_frag_offset(3);
        assert!(p.more_frags());
        p.fill_checksum();
        p.decrement_ttl();
        assert_eq!(p.ttl(), 0);
        assert!(p.verify_checksum());
        assert_eq!(p.payload_mut().len(), 0x73 - 20);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 0x73 - 20);
    }

    #[test]
    fn options() {
        let mut b = vec![0x46, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        b.extend_from_slice(&[0x94, 0x04, 0x00, 0x00, 0xaa, 0xbb, 0xcc, 0xdd]);
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert_eq!(p.options_mut(), &[0x94, 0x04, 0x00, 0x00]);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn check_len_errors() {
        let b = packet();
        for n in 0..b.len() {
            assert_eq!(Ipv4Packet::new_checked(&b[..n]), Err(Error::Truncated), "len {n}");
        }
        let mut bad = b.clone();
        bad[0] = 0x44;
        assert!(matches!(Ipv4Packet::new_checked(&bad[..]), Err(Error::Malformed(_))));
        bad[0] = 0x65;
        assert!(matches!(Ipv4Packet::new_checked(&bad[..]), Err(Error::Malformed(_))));
        bad[0] = 0x4f; // 60-byte header, total_len 0x73 still fine
        assert!(Ipv4Packet::new_checked(&bad[..]).is_ok());
        bad[2] = 0;
        bad[3] = 40; // total_len < header_len
        assert!(matches!(Ipv4Packet::new_checked(&bad[..]), Err(Error::Malformed(_))));
    }

    #[test]
    fn unchecked_views_do_not_panic_on_slices() {
        let b = packet();
        let p = Ipv4Packet::new_unchecked(&b[..30]);
        assert_eq!(p.payload().len(), 10);
        let _ = p.verify_checksum();
    }

    #[test]
    fn protocol_fmt() {
        assert_eq!(IpProtocol::UDP.to_string(), "UDP");
        assert_eq!(format!("{:?}", IpProtocol(200)), "IpProtocol(200)");
        assert!(IpProtocol::FRAGMENT.is_ipv6_ext() && !IpProtocol::NONE.is_ipv6_ext());
    }
}
