//! TCP segments (RFC 9293).

use crate::{be16, be32, checksum, clamp, put16, put32, view, Error, IpProtocol, Result};
use std::{fmt, net::Ipv4Addr, net::Ipv6Addr, ops};

/// The eight TCP flag bits (byte 13 of the header). Combine with `|`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No flags.
    pub const NONE: TcpFlags = TcpFlags(0);
    /// FIN.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// SYN.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// RST.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// PSH.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// ACK.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// URG.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECE.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// CWR.
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// True if every flag of `other` is set.
    pub fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl ops::BitOrAssign for TcpFlags {
    fn bitor_assign(&mut self, rhs: TcpFlags) {
        self.0 |= rhs.0;
    }
}

impl fmt::Display for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        if self.0 == 0 {
            return f.write_str("NONE");
        }
        let mut sep = "";
        for (i, n) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                write!(f, "{sep}{n}")?;
                sep = "|";
            }
        }
        Ok(())
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

view! {
    /// View of a TCP segment. TCP has no length field: the buffer must be exactly the segment
    /// (e.g. an IP packet's `payload()`), as the checksum and payload extend to its end.
    TcpPacket
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Length of a header without options.
    pub const HEADER_LEN: usize = 20;

    /// Ok if the header fits and the data offset is at least 5 words and within the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.data_offset() < 5 {
            return Err(Error::Malformed("tcp: data offset < 5"));
        }
        if self.header_len() > b.len() {
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

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.b(), 4)
    }

    /// Acknowledgement number.
    pub fn ack(&self) -> u32 {
        be32(self.b(), 8)
    }

    /// Data offset (header length in 32-bit words).
    pub fn data_offset(&self) -> u8 {
        self.b()[12] >> 4
    }

    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }

    /// Flags.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.b()[13])
    }

    /// Window.
    pub fn window(&self) -> u16 {
        be16(self.b(), 14)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 16)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.b(), 18)
    }

    /// True if the checksum is correct for an IPv4 pseudo-header.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        checksum::verify_transport_v4(src, dst, IpProtocol::TCP.0, self.b())
    }

    /// True if the checksum is correct for an IPv6 pseudo-header.
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        checksum::verify_transport_v6(src, dst, IpProtocol::TCP.0, self.b())
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> TcpPacket<&'a T> {
    /// Option bytes (between byte 20 and the data offset).
    pub fn options(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        clamp(b, Self::HEADER_LEN, self.header_len())
    }

    /// Payload (after the data offset, to the end of the buffer).
    pub fn payload(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        clamp(b, self.header_len(), b.len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, p: u16) {
        put16(self.bm(), 0, p);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, p: u16) {
        put16(self.bm(), 2, p);
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        put32(self.bm(), 4, v);
    }

    /// Sets the acknowledgement number.
    pub fn set_ack(&mut self, v: u32) {
        put32(self.bm(), 8, v);
    }

    /// Sets the data offset in words, keeping the low (reserved/NS) bits.
    pub fn set_data_offset(&mut self, words: u8) {
        let b = self.bm();
        b[12] = (b[12] & 0x0f) | (words << 4);
    }

    /// Sets the flags.
    pub fn set_flags(&mut self, f: TcpFlags) {
        self.bm()[13] = f.0;
    }

    /// Sets the window.
    pub fn set_window(&mut self, w: u16) {
        put16(self.bm(), 14, w);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.bm(), 16, c);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent(&mut self, u: u16) {
        put16(self.bm(), 18, u);
    }

    /// Computes the checksum over an IPv4 pseudo-header.
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = checksum::transport_v4(src, dst, IpProtocol::TCP.0, self.b());
        self.set_checksum(c);
    }

    /// Computes the checksum over an IPv6 pseudo-header.
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::transport_v6(src, dst, IpProtocol::TCP.0, self.b());
        self.set_checksum(c);
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.bm()[hl..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        let f = TcpFlags::SYN | TcpFlags::ACK;
        assert_eq!(f.0, 0x12);
        assert!(f.contains(TcpFlags::SYN) && !f.contains(TcpFlags::FIN | TcpFlags::SYN));
        assert_eq!(f.to_string(), "SYN|ACK");
        assert_eq!(format!("{:?}", TcpFlags::NONE), "NONE");
        let mut g = TcpFlags::FIN;
        g |= TcpFlags::CWR;
        assert_eq!(g.to_string(), "FIN|CWR");
    }

    #[test]
    fn fields_options_checksum() {
        let mut b = vec![0u8; 24];
        b.extend_from_slice(b"hi");
        let mut t = TcpPacket::new_unchecked(&mut b[..]);
        t.set_src_port(40000);
        t.set_dst_port(80);
        t.set_seq(0x01020304);
        t.set_ack(0xa0b0c0d0);
        t.set_data_offset(6);
        t.set_flags(TcpFlags::PSH | TcpFlags::ACK);
        t.set_window(512);
        t.set_urgent(7);
        t.bm()[20..24].copy_from_slice(&[2, 4, 0x05, 0xb4]);
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        t.fill_checksum_v4(s, d);
        assert!(t.verify_checksum_v4(s, d));
        assert_eq!(t.payload_mut(), b"hi");
        let t = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port(), t.seq(), t.ack()), (40000, 80, 0x01020304, 0xa0b0c0d0));
        assert_eq!((t.data_offset(), t.header_len(), t.flags(), t.window(), t.urgent()), (6, 24, TcpFlags(0x18), 512, 7));
        assert_eq!(t.options(), &[2, 4, 5, 0xb4]);
        assert_eq!(t.payload(), b"hi");
        let mut manual = vec![10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, 26];
        manual.extend_from_slice(&b);
        assert!(checksum::verify(&manual));

        let (s6, d6) = ("2001:db8::a".parse().unwrap(), "2001:db8::b".parse().unwrap());
        let mut t = TcpPacket::new_checked(&mut b[..]).unwrap();
        assert!(!t.verify_checksum_v6(s6, d6));
        t.fill_checksum_v6(s6, d6);
        assert!(t.verify_checksum_v6(s6, d6));
    }

    #[test]
    fn errors() {
        let mut b = [0u8; 24];
        b[12] = 0x60;
        for n in 0..24 {
            assert_eq!(TcpPacket::new_checked(&b[..n]), Err(Error::Truncated), "len {n}");
        }
        b[12] = 0x40;
        assert!(matches!(TcpPacket::new_checked(&b[..]), Err(Error::Malformed(_))));
    }
}
