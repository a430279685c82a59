//! ICMP for IPv4 (RFC 792).

use crate::{be16, checksum, view};

/// Echo reply type.
pub const ECHO_REPLY: u8 = 0;
/// Destination unreachable type.
pub const DEST_UNREACHABLE: u8 = 3;
/// Echo request type.
pub const ECHO_REQUEST: u8 = 8;
/// Time exceeded type.
pub const TIME_EXCEEDED: u8 = 11;
/// Destination unreachable code: fragmentation needed and DF set (carries the next-hop MTU).
pub const CODE_FRAG_NEEDED: u8 = 4;
/// Time exceeded code: TTL exceeded in transit.
pub const CODE_TTL_EXCEEDED: u8 = 0;

view! {
    /// View of an ICMPv4 message: type, code, checksum, 4 "rest of header" bytes, payload.
    /// The checksum covers the whole buffer.
    Icmpv4Packet
}

crate::icmp::icmp_header!(Icmpv4Packet);

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Next-hop MTU of a "fragmentation needed" message (RFC 1191).
    pub fn next_hop_mtu(&self) -> u16 {
        be16(self.b(), 6)
    }

    /// True if the checksum over the whole message is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(self.b())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Computes and writes the checksum over the whole message.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.b());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn echo_request() {
        // A classic ping: id 1, seq 1, payload "abcd".
        let mut b = vec![8, 0, 0, 0, 0, 1, 0, 1, b'a', b'b', b'c', b'd'];
        let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        // !(0x0800 + 0x0001 + 0x0001 + 0x6162 + 0x6364) = !0xccc8
        assert_eq!(p.checksum(), 0x3337);
        assert!(p.verify_checksum());
        p.payload_mut()[0] = b'z';
        assert!(!p.verify_checksum());
        p.set_msg_type(ECHO_REPLY);
        p.set_echo_ident(0x1234);
        p.set_echo_seq(9);
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.msg_type(), p.code(), p.echo_ident(), p.echo_seq()), (0, 0, 0x1234, 9));
        assert_eq!(p.payload(), b"zbcd");
    }

    #[test]
    fn frag_needed() {
        let mut b = [0u8; 8];
        let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_msg_type(DEST_UNREACHABLE);
        p.set_code(CODE_FRAG_NEEDED);
        p.set_rest([0, 0, 0x05, 0xdc]);
        p.fill_checksum();
        assert_eq!(p.next_hop_mtu(), 1500);
        assert_eq!(p.rest(), [0, 0, 5, 0xdc]);
        assert_eq!(b, [3, 4, 0xf7, 0x1f, 0, 0, 5, 0xdc]);
    }

    #[test]
    fn truncated() {
        for n in 0..8 {
            assert_eq!(Icmpv4Packet::new_checked(&[0u8; 8][..n]), Err(Error::Truncated));
        }
    }
}
