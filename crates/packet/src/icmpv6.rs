//! ICMP for IPv6 (RFC 4443) and neighbour discovery type numbers (RFC 4861).

use crate::{be32, checksum, view, IpProtocol};
use std::net::Ipv6Addr;

/// Destination unreachable type.
pub const DEST_UNREACHABLE: u8 = 1;
/// Packet too big type (carries the MTU).
pub const PACKET_TOO_BIG: u8 = 2;
/// Time exceeded type.
pub const TIME_EXCEEDED: u8 = 3;
/// Echo request type.
pub const ECHO_REQUEST: u8 = 128;
/// Echo reply type.
pub const ECHO_REPLY: u8 = 129;
/// Router solicitation type.
pub const ROUTER_SOLICIT: u8 = 133;
/// Router advertisement type.
pub const ROUTER_ADVERT: u8 = 134;
/// Neighbour solicitation type.
pub const NEIGHBOR_SOLICIT: u8 = 135;
/// Neighbour advertisement type.
pub const NEIGHBOR_ADVERT: u8 = 136;

view! {
    /// View of an ICMPv6 message: type, code, checksum, 4 "rest of header" bytes, payload.
    /// The checksum covers an IPv6 pseudo-header and the whole buffer.
    Icmpv6Packet
}

crate::icmp::icmp_header!(Icmpv6Packet);

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// MTU of a packet-too-big message.
    pub fn mtu(&self) -> u32 {
        be32(self.b(), 4)
    }

    /// True if the checksum is correct for this IPv6 pseudo-header.
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        checksum::verify_transport_v6(src, dst, IpProtocol::ICMPV6.0, self.b())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Computes and writes the checksum for this IPv6 pseudo-header.
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::transport_v6(src, dst, IpProtocol::ICMPV6.0, self.b());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn echo_and_checksum() {
        let (s, d): (Ipv6Addr, Ipv6Addr) = ("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap());
        let mut b = vec![0u8; 12];
        let mut p = Icmpv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_msg_type(ECHO_REQUEST);
        p.set_echo_ident(7);
        p.set_echo_seq(8);
        p.payload_mut().copy_from_slice(b"ping");
        p.fill_checksum_v6(s, d);
        assert!(p.verify_checksum_v6(s, d));
        assert!(!p.verify_checksum_v6(d, d));
        let mut manual = Vec::from(s.octets());
        manual.extend_from_slice(&d.octets());
        manual.extend_from_slice(&[0, 0, 0, 12, 0, 0, 0, 58]);
        manual.extend_from_slice(&b);
        assert!(checksum::verify(&manual));
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.msg_type(), p.code(), p.echo_ident(), p.echo_seq()), (128, 0, 7, 8));
        assert_eq!(p.payload(), b"ping");
    }

    #[test]
    fn packet_too_big() {
        let mut b = [0u8; 8];
        let mut p = Icmpv6Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(PACKET_TOO_BIG);
        p.set_code(0);
        p.set_rest(1280u32.to_be_bytes());
        assert_eq!(p.mtu(), 1280);
        assert_eq!(p.rest(), [0, 0, 5, 0]);
    }

    #[test]
    fn truncated() {
        for n in 0..8 {
            assert_eq!(Icmpv6Packet::new_checked(&[0u8; 8][..n]), Err(Error::Truncated));
        }
    }
}
