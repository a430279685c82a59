//! 802.1Q / 802.1ad VLAN tags.

use crate::{be16, clamp, put16, view, Error, EtherType, Result};

view! {
    /// View of the 4 bytes that follow a VLAN TPID: the TCI (pcp, dei, vid) and the inner
    /// EtherType, then the payload.
    VlanTag
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Length of the tag after its TPID.
    pub const HEADER_LEN: usize = 4;

    /// Ok if the buffer holds the whole tag.
    pub fn check_len(&self) -> Result<()> {
        if self.b().len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The raw tag control information.
    pub fn tci(&self) -> u16 {
        be16(self.b(), 0)
    }

    /// Priority code point (3 bits).
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop eligible indicator.
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (12 bits).
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The EtherType (or next TPID) after this tag.
    pub fn ethertype(&self) -> EtherType {
        EtherType(be16(self.b(), 2))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> VlanTag<&'a T> {
    /// Bytes after the tag.
    pub fn payload(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        clamp(b, Self::HEADER_LEN, b.len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the raw TCI.
    pub fn set_tci(&mut self, tci: u16) {
        put16(self.bm(), 0, tci);
    }

    /// Sets the priority (low 3 bits of `pcp` are used), keeping dei and vid.
    pub fn set_pcp(&mut self, pcp: u8) {
        self.set_tci((self.tci() & 0x1fff) | (u16::from(pcp & 7) << 13));
    }

    /// Sets the drop eligible bit, keeping pcp and vid.
    pub fn set_dei(&mut self, dei: bool) {
        self.set_tci((self.tci() & !0x1000) | if dei { 0x1000 } else { 0 });
    }

    /// Sets the VLAN id (low 12 bits of `vid` are used), keeping pcp and dei.
    pub fn set_vid(&mut self, vid: u16) {
        self.set_tci((self.tci() & 0xf000) | (vid & 0x0fff));
    }

    /// Sets the inner EtherType.
    pub fn set_ethertype(&mut self, e: EtherType) {
        put16(self.bm(), 2, e.0);
    }

    /// Mutable bytes after the tag.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[Self::HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        // pcp 5, dei 1, vid 0x123, inner IPv6
        let b = [0xb1, 0x23, 0x86, 0xdd, 0x60];
        let t = VlanTag::new_checked(&b[..]).unwrap();
        assert_eq!((t.pcp(), t.dei(), t.vid(), t.ethertype()), (5, true, 0x123, EtherType::IPV6));
        assert_eq!(t.payload(), &[0x60]);
    }

    #[test]
    fn setters_keep_other_bits() {
        let mut b = [0xb1, 0x23, 0x08, 0x00];
        let mut t = VlanTag::new_checked(&mut b[..]).unwrap();
        t.set_vid(0xfff);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (5, true, 0xfff));
        t.set_pcp(2);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (2, true, 0xfff));
        t.set_dei(false);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (2, false, 0xfff));
        t.set_vid(0x1064); // masked to 12 bits
        assert_eq!((t.pcp(), t.dei(), t.vid()), (2, false, 0x064));
        t.set_ethertype(EtherType::ARP);
        assert_eq!(b, [0x40, 0x64, 0x08, 0x06]);
    }

    #[test]
    fn truncated() {
        for n in 0..4 {
            assert_eq!(VlanTag::new_checked(&[0u8; 4][..n]), Err(Error::Truncated));
        }
    }
}
