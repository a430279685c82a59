//! UDP datagrams (RFC 768).

use crate::{be16, checksum, clamp, put16, view, Error, IpProtocol, Result};
use std::net::{Ipv4Addr, Ipv6Addr};

view! {
    /// View of a UDP datagram. The length field bounds the payload and the checksum.
    UdpPacket
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Length of the header.
    pub const HEADER_LEN: usize = 8;

    /// Ok if the header fits and `8 <= len <= buffer length`.
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if usize::from(self.len()) < Self::HEADER_LEN {
            return Err(Error::Malformed("udp: length < 8"));
        }
        if usize::from(self.len()) > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// Length field (header and payload).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// Checksum field (0 = none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 6)
    }

    fn datagram(&self) -> &[u8] {
        clamp(self.b(), 0, usize::from(self.len()))
    }

    /// True if the checksum is correct for an IPv4 pseudo-header, or is 0 (not used).
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.checksum() == 0 || checksum::verify_transport_v4(src, dst, IpProtocol::UDP.0, self.datagram())
    }

    /// True if the checksum is correct for an IPv6 pseudo-header (0 is invalid over IPv6).
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        self.checksum() != 0 && checksum::verify_transport_v6(src, dst, IpProtocol::UDP.0, self.datagram())
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UdpPacket<&'a T> {
    /// Payload, up to the length field.
    pub fn payload(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        clamp(b, Self::HEADER_LEN, usize::from(self.len()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, p: u16) {
        put16(self.bm(), 0, p);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, p: u16) {
        put16(self.bm(), 2, p);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, len: u16) {
        put16(self.bm(), 4, len);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.bm(), 6, c);
    }

    /// Computes the checksum over an IPv4 pseudo-header (a result of 0 is sent as 0xffff).
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = checksum::transport_v4(src, dst, IpProtocol::UDP.0, self.datagram());
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Computes the checksum over an IPv6 pseudo-header (a result of 0 is sent as 0xffff).
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::transport_v6(src, dst, IpProtocol::UDP.0, self.datagram());
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Mutable payload, up to the length field.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.bm()[Self::HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

    #[test]
    fn fields_and_checksums() {
        let mut b = vec![0x04, 0x00, 0x00, 0x35, 0x00, 0x0b, 0x00, 0x00, b'a', b'b', b'c', 0xee];
        let mut u = UdpPacket::new_checked(&mut b[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len(), u.checksum()), (1024, 53, 11, 0));
        assert!(u.verify_checksum_v4(SRC, DST));
        u.fill_checksum_v4(SRC, DST);
        // pseudo: c000+0201+c000+0202+0011+000b, udp: 0400+0035+000b+6162+6300
        assert_eq!(u.checksum(), 0xb33c);
        assert!(u.verify_checksum_v4(SRC, DST));
        assert!(!u.verify_checksum_v4(DST, DST));
        u.payload_mut()[0] = b'A';
        assert!(!u.verify_checksum_v4(SRC, DST));

        let (s6, d6) = ("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap());
        assert!(!u.verify_checksum_v6(s6, d6));
        u.set_checksum(0);
        assert!(!u.verify_checksum_v6(s6, d6));
        u.fill_checksum_v6(s6, d6);
        assert!(u.verify_checksum_v6(s6, d6));
        u.set_src_port(1);
        u.set_dst_port(2);
        u.set_len(9);
        let u = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port()), (1, 2));
        assert_eq!(u.payload(), b"A");
    }

    #[test]
    fn zero_checksum_sent_as_ffff() {
        // Find a payload word making the computed checksum 0.
        let mut b = [0u8; 10];
        let mut u = UdpPacket::new_unchecked(&mut b[..]);
        u.set_len(10);
        u.fill_checksum_v4(SRC, DST);
        let c = u.checksum();
        u.set_checksum(0);
        u.payload_mut().copy_from_slice(&c.to_be_bytes());
        u.fill_checksum_v4(SRC, DST);
        assert_eq!(u.checksum(), 0xffff);
        assert!(u.verify_checksum_v4(SRC, DST));
    }

    #[test]
    fn errors() {
        let b = [0, 1, 0, 2, 0, 10, 0, 0, 0, 0];
        for n in 0..10 {
            assert_eq!(UdpPacket::new_checked(&b[..n]), Err(Error::Truncated));
        }
        let short = [0, 1, 0, 2, 0, 7, 0, 0];
        assert!(matches!(UdpPacket::new_checked(&short[..]), Err(Error::Malformed(_))));
    }
}
