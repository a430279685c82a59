//! Ethernet II frames, MAC addresses and EtherTypes.

use crate::{be16, clamp, put16, view, Error, Result};
use std::{fmt, str::FromStr};

/// A 48-bit MAC address. Displays as `aa:bb:cc:dd:ee:ff`; parses with `:` or `-` separators.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// The six octets.
    pub const fn octets(self) -> [u8; 6] {
        self.0
    }

    /// True for ff:ff:ff:ff:ff:ff.
    pub fn is_broadcast(self) -> bool {
        self == Self::BROADCAST
    }

    /// True when the group bit is set (broadcast included).
    pub fn is_multicast(self) -> bool {
        self.0[0] & 1 != 0
    }

    /// True when the group bit is clear.
    pub fn is_unicast(self) -> bool {
        !self.is_multicast()
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(o: [u8; 6]) -> Self {
        MacAddr(o)
    }
}

impl From<MacAddr> for [u8; 6] {
    fn from(m: MacAddr) -> Self {
        m.0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3], o[4], o[5])
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for MacAddr {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        const BAD: Error = Error::Malformed("mac address");
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for o in &mut out {
            let p = parts.next().ok_or(BAD)?;
            if p.is_empty() || p.len() > 2 {
                return Err(BAD);
            }
            *o = u8::from_str_radix(p, 16).map_err(|_| BAD)?;
        }
        if parts.next().is_some() {
            return Err(BAD);
        }
        Ok(MacAddr(out))
    }
}

/// An EtherType / TPID value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4, 0x0800.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// ARP, 0x0806.
    pub const ARP: EtherType = EtherType(0x0806);
    /// 802.1Q VLAN tag (C-tag), 0x8100.
    pub const VLAN: EtherType = EtherType(0x8100);
    /// 802.1ad service tag (S-tag, QinQ), 0x88a8.
    pub const QINQ: EtherType = EtherType(0x88a8);
    /// IPv6, 0x86dd.
    pub const IPV6: EtherType = EtherType(0x86dd);

    /// True for the TPIDs this crate treats as VLAN tags (0x8100, 0x88a8).
    pub fn is_vlan(self) -> bool {
        self == Self::VLAN || self == Self::QINQ
    }

    fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::IPV4 => "IPv4",
            Self::ARP => "ARP",
            Self::VLAN => "802.1Q",
            Self::QINQ => "802.1ad",
            Self::IPV6 => "IPv6",
            _ => return None,
        })
    }
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        EtherType(v)
    }
}

impl From<EtherType> for u16 {
    fn from(e: EtherType) -> Self {
        e.0
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "0x{:04x}", self.0),
        }
    }
}

impl fmt::Debug for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}(0x{:04x})", self.0),
            None => write!(f, "EtherType(0x{:04x})", self.0),
        }
    }
}

view! {
    /// View of an Ethernet II header (no FCS): dst, src, ethertype, payload.
    EthernetFrame
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Length of the header.
    pub const HEADER_LEN: usize = 14;

    /// Ok if the buffer holds a whole header.
    pub fn check_len(&self) -> Result<()> {
        if self.b().len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Destination MAC.
    pub fn dst(&self) -> MacAddr {
        MacAddr(self.b()[0..6].try_into().unwrap())
    }

    /// Source MAC.
    pub fn src(&self) -> MacAddr {
        MacAddr(self.b()[6..12].try_into().unwrap())
    }

    /// The outer EtherType (a TPID when the frame is VLAN-tagged).
    pub fn ethertype(&self) -> EtherType {
        EtherType(be16(self.b(), 12))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> EthernetFrame<&'a T> {
    /// Bytes after the 14-byte header.
    pub fn payload(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        clamp(b, Self::HEADER_LEN, b.len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst(&mut self, m: MacAddr) {
        self.bm()[0..6].copy_from_slice(&m.0);
    }

    /// Sets the source MAC.
    pub fn set_src(&mut self, m: MacAddr) {
        self.bm()[6..12].copy_from_slice(&m.0);
    }

    /// Sets the outer EtherType.
    pub fn set_ethertype(&mut self, e: EtherType) {
        put16(self.bm(), 12, e.0);
    }

    /// Mutable bytes after the header.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[Self::HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 16] = [0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00, 0xaa, 0xbb];

    #[test]
    fn mac_display_parse() {
        let m: MacAddr = "02:1A:b3:00:0f:ff".parse().unwrap();
        assert_eq!(m, MacAddr([0x02, 0x1a, 0xb3, 0x00, 0x0f, 0xff]));
        assert_eq!(m.to_string(), "02:1a:b3:00:0f:ff");
        assert_eq!(format!("{m:?}"), "02:1a:b3:00:0f:ff");
        assert_eq!("02-1a-b3-00-0f-ff".parse::<MacAddr>().unwrap(), m);
        for bad in ["", "02:1a:b3:00:0f", "02:1a:b3:00:0f:ff:00", "02:1a:b3:00:0f:fff", "g2:1a:b3:00:0f:ff", "02::b3:00:0f:ff"] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
        assert!(MacAddr::BROADCAST.is_broadcast() && MacAddr::BROADCAST.is_multicast());
        assert!(m.is_unicast());
    }

    #[test]
    fn ethertype_fmt() {
        assert_eq!(EtherType::IPV6.to_string(), "IPv6");
        assert_eq!(EtherType(0x88b5).to_string(), "0x88b5");
        assert_eq!(format!("{:?}", EtherType::VLAN), "802.1Q(0x8100)");
        assert!(EtherType::QINQ.is_vlan() && !EtherType::ARP.is_vlan());
    }

    #[test]
    fn view_read_write() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst().to_string(), "02:00:00:00:00:02");
        assert_eq!(f.src().to_string(), "02:00:00:00:00:01");
        assert_eq!(f.ethertype(), EtherType::IPV4);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);

        let mut buf = FRAME;
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.set_dst(MacAddr::BROADCAST);
        f.set_src(MacAddr::ZERO);
        f.set_ethertype(EtherType::ARP);
        f.payload_mut()[0] = 1;
        assert_eq!(buf[..14], [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x08, 0x06]);
        assert_eq!(buf[14], 1);
    }

    #[test]
    fn truncated() {
        for n in 0..14 {
            assert_eq!(EthernetFrame::new_checked(&FRAME[..n]), Err(Error::Truncated));
        }
        assert!(EthernetFrame::new_checked(&FRAME[..14]).unwrap().payload().is_empty());
    }
}
