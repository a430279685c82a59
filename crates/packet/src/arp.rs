//! ARP for Ethernet/IPv4 (RFC 826).

use crate::{be16, put16, view, Error, EtherType, MacAddr, Result};
use std::net::Ipv4Addr;

/// ARP request operation code.
pub const OP_REQUEST: u16 = 1;
/// ARP reply operation code.
pub const OP_REPLY: u16 = 2;

view! {
    /// View of an Ethernet/IPv4 ARP packet (28 bytes).
    ArpPacket
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Length of an Ethernet/IPv4 ARP packet.
    pub const LEN: usize = 28;

    /// Ok if the buffer holds 28 bytes and the packet is Ethernet/IPv4.
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < Self::LEN {
            return Err(Error::Truncated);
        }
        if be16(b, 0) != 1 || be16(b, 2) != EtherType::IPV4.0 || b[4] != 6 || b[5] != 4 {
            return Err(Error::Unsupported("arp: not Ethernet/IPv4"));
        }
        Ok(())
    }

    /// Hardware type (1 = Ethernet).
    pub fn htype(&self) -> u16 {
        be16(self.b(), 0)
    }

    /// Protocol type (0x0800 = IPv4).
    pub fn ptype(&self) -> EtherType {
        EtherType(be16(self.b(), 2))
    }

    /// Operation ([`OP_REQUEST`] or [`OP_REPLY`]).
    pub fn operation(&self) -> u16 {
        be16(self.b(), 6)
    }

    /// Sender hardware address.
    pub fn sender_mac(&self) -> MacAddr {
        MacAddr(self.b()[8..14].try_into().unwrap())
    }

    /// Sender protocol address.
    pub fn sender_ip(&self) -> Ipv4Addr {
        <[u8; 4]>::try_from(&self.b()[14..18]).unwrap().into()
    }

    /// Target hardware address.
    pub fn target_mac(&self) -> MacAddr {
        MacAddr(self.b()[18..24].try_into().unwrap())
    }

    /// Target protocol address.
    pub fn target_ip(&self) -> Ipv4Addr {
        <[u8; 4]>::try_from(&self.b()[24..28]).unwrap().into()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Writes htype 1, ptype IPv4, hlen 6, plen 4.
    pub fn set_eth_ipv4(&mut self) {
        self.bm()[0..6].copy_from_slice(&[0, 1, 8, 0, 6, 4]);
    }

    /// Sets the operation.
    pub fn set_operation(&mut self, op: u16) {
        put16(self.bm(), 6, op);
    }

    /// Sets the sender hardware address.
    pub fn set_sender_mac(&mut self, m: MacAddr) {
        self.bm()[8..14].copy_from_slice(&m.0);
    }

    /// Sets the sender protocol address.
    pub fn set_sender_ip(&mut self, a: Ipv4Addr) {
        self.bm()[14..18].copy_from_slice(&a.octets());
    }

    /// Sets the target hardware address.
    pub fn set_target_mac(&mut self, m: MacAddr) {
        self.bm()[18..24].copy_from_slice(&m.0);
    }

    /// Sets the target protocol address.
    pub fn set_target_ip(&mut self, a: Ipv4Addr) {
        self.bm()[24..28].copy_from_slice(&a.octets());
    }
}

/// The fields of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// [`OP_REQUEST`] or [`OP_REPLY`].
    pub op: u16,
    /// Sender hardware address.
    pub sender_mac: MacAddr,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in requests).
    pub target_mac: MacAddr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// "Who has `target_ip`? Tell `sender_ip`."
    pub fn request(sender_mac: MacAddr, sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Self {
        let target_mac = MacAddr::ZERO;
        ArpRepr { op: OP_REQUEST, sender_mac, sender_ip, target_mac, target_ip }
    }

    /// "`sender_ip` is at `sender_mac`", sent to `target_mac`/`target_ip`.
    pub fn reply(sender_mac: MacAddr, sender_ip: Ipv4Addr, target_mac: MacAddr, target_ip: Ipv4Addr) -> Self {
        ArpRepr { op: OP_REPLY, sender_mac, sender_ip, target_mac, target_ip }
    }

    /// Reads a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<Self> {
        p.check_len()?;
        Ok(ArpRepr { op: p.operation(), sender_mac: p.sender_mac(), sender_ip: p.sender_ip(), target_mac: p.target_mac(), target_ip: p.target_ip() })
    }

    /// The 28 bytes of this packet.
    pub fn to_bytes(&self) -> [u8; 28] {
        let mut b = [0u8; 28];
        let mut p = ArpPacket::new_unchecked(&mut b[..]);
        p.set_eth_ipv4();
        p.set_operation(self.op);
        p.set_sender_mac(self.sender_mac);
        p.set_sender_ip(self.sender_ip);
        p.set_target_mac(self.target_mac);
        p.set_target_ip(self.target_ip);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQ: [u8; 28] = [0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2];

    #[test]
    fn request_bytes() {
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        let r = ArpRepr::request(mac, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(r.to_bytes(), REQ);
        let p = ArpPacket::new_checked(&REQ[..]).unwrap();
        assert_eq!((p.htype(), p.ptype(), p.operation()), (1, EtherType::IPV4, OP_REQUEST));
        assert_eq!(ArpRepr::parse(&p).unwrap(), r);
    }

    #[test]
    fn reply_roundtrip() {
        let r = ArpRepr::reply(MacAddr([2, 0, 0, 0, 0, 2]), Ipv4Addr::new(10, 0, 0, 2), MacAddr([2, 0, 0, 0, 0, 1]), Ipv4Addr::new(10, 0, 0, 1));
        let b = r.to_bytes();
        assert_eq!(ArpRepr::parse(&ArpPacket::new_unchecked(&b[..])).unwrap(), r);
    }

    #[test]
    fn errors() {
        for n in 0..28 {
            assert_eq!(ArpPacket::new_checked(&REQ[..n]), Err(Error::Truncated));
        }
        let mut b = REQ;
        b[5] = 16;
        assert!(matches!(ArpPacket::new_checked(&b[..]), Err(Error::Unsupported(_))));
    }
}
