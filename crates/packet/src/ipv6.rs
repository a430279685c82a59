//! IPv6 headers (RFC 8200) and their extension-header chain.

use crate::{be16, be32, clamp, put16, put32, view, Error, IpProtocol, Result};
use std::net::Ipv6Addr;

view! {
    /// View of an IPv6 packet: fixed header, then extension headers and upper-layer data.
    Ipv6Packet
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = 40;

    /// Ok if version is 6 and header plus `payload_len` fit the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::Malformed("ipv6: version is not 6"));
        }
        if Self::HEADER_LEN + usize::from(self.payload_len()) > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// IP version (6).
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }

    /// Traffic class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        ((be16(self.b(), 0) >> 4) & 0xff) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be32(self.b(), 0) & 0x000f_ffff
    }

    /// Length of everything after the fixed header.
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// Next header of the fixed header (first extension header or upper layer).
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.b()[6])
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }

    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        <[u8; 16]>::try_from(&self.b()[8..24]).unwrap().into()
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        <[u8; 16]>::try_from(&self.b()[24..40]).unwrap().into()
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// Bytes after the fixed header, `payload_len` long (extension headers included).
    pub fn payload(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        clamp(b, Self::HEADER_LEN, Self::HEADER_LEN + usize::from(self.payload_len()))
    }

    /// Iterator over the extension headers at the start of the payload.
    pub fn ext_headers(&self) -> ExtHeaders<'a> {
        ExtHeaders::new(self.next_header(), self.payload())
    }

    /// The upper-layer protocol and its offset from the start of the IPv6 header.
    pub fn upper_layer(&self) -> Result<(IpProtocol, usize)> {
        let (proto, off) = self.ext_headers().upper_layer()?;
        Ok((proto, Self::HEADER_LEN + off))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the version nibble.
    pub fn set_version(&mut self, v: u8) {
        let b = self.bm();
        b[0] = (b[0] & 0x0f) | (v << 4);
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let v = (be16(self.b(), 0) & 0xf00f) | (u16::from(tc) << 4);
        put16(self.bm(), 0, v);
    }

    /// Sets the flow label (low 20 bits are used).
    pub fn set_flow_label(&mut self, fl: u32) {
        let v = (be32(self.b(), 0) & 0xfff0_0000) | (fl & 0x000f_ffff);
        put32(self.bm(), 0, v);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        put16(self.bm(), 4, len);
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, p: IpProtocol) {
        self.bm()[6] = p.0;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, h: u8) {
        self.bm()[7] = h;
    }

    /// Sets the source address.
    pub fn set_src(&mut self, a: Ipv6Addr) {
        self.bm()[8..24].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst(&mut self, a: Ipv6Addr) {
        self.bm()[24..40].copy_from_slice(&a.octets());
    }

    /// Mutable payload (`payload_len` bytes after the fixed header).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = Self::HEADER_LEN + usize::from(self.payload_len());
        &mut self.bm()[Self::HEADER_LEN..end]
    }
}

/// The fields of an IPv6 fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Fragment {
    /// Fragment offset in 8-byte units.
    pub offset: u16,
    /// More-fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// One extension header found by [`ExtHeaders`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader<'a> {
    /// Which header this is (e.g. [`IpProtocol::HOPOPTS`]).
    pub kind: IpProtocol,
    /// Its next-header field.
    pub next_header: IpProtocol,
    /// Offset from the start of the IPv6 payload.
    pub offset: usize,
    /// The whole header, next-header and length bytes included.
    pub bytes: &'a [u8],
}

impl ExtHeader<'_> {
    /// The fragment fields, if this is a fragment header.
    pub fn fragment(&self) -> Option<Ipv6Fragment> {
        (self.kind == IpProtocol::FRAGMENT).then(|| Ipv6Fragment { offset: be16(self.bytes, 2) >> 3, more: self.bytes[3] & 1 != 0, ident: be32(self.bytes, 4) })
    }
}

/// Iterator over an IPv6 extension-header chain, yielding `Err(Truncated)` once if a header
/// does not fit. It stops at the first non-extension header, and after a fragment header with
/// a non-zero offset (what follows is fragment data, not headers).
#[derive(Debug, Clone)]
pub struct ExtHeaders<'a> {
    data: &'a [u8],
    proto: IpProtocol,
    offset: usize,
    done: bool,
}

impl<'a> ExtHeaders<'a> {
    /// Walks `data` (an IPv6 payload) whose first header is `first`.
    pub fn new(first: IpProtocol, data: &'a [u8]) -> Self {
        ExtHeaders { data, proto: first, offset: 0, done: false }
    }

    /// Consumes the chain; returns the upper-layer protocol and its offset in `data`.
    pub fn upper_layer(mut self) -> Result<(IpProtocol, usize)> {
        for h in &mut self {
            h?;
        }
        Ok((self.proto, self.offset))
    }
}

impl<'a> Iterator for ExtHeaders<'a> {
    type Item = Result<ExtHeader<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || !self.proto.is_ipv6_ext() {
            return None;
        }
        let rest = &self.data[self.offset..];
        let len = match (self.proto, rest.get(1)) {
            (_, None) => 0,
            (IpProtocol::FRAGMENT, Some(_)) => 8,
            (IpProtocol::AH, Some(&l)) => (usize::from(l) + 2) * 4,
            (_, Some(&l)) => (usize::from(l) + 1) * 8,
        };
        if len == 0 || rest.len() < len {
            self.done = true;
            return Some(Err(Error::Truncated));
        }
        let h = ExtHeader { kind: self.proto, next_header: IpProtocol(rest[0]), offset: self.offset, bytes: &rest[..len] };
        self.offset += len;
        self.proto = h.next_header;
        if h.fragment().is_some_and(|f| f.offset != 0) {
            self.done = true;
        }
        Some(Ok(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0x6b, 0x8a, 0xbc, 0xde, 0, payload.len() as u8, next, 64];
        b.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        b.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn fields_and_setters() {
        let mut b = packet(17, &[1, 2, 3, 4, 5, 6, 7, 8]);
        b.push(0xee); // trailing padding is ignored
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.version(), p.traffic_class(), p.flow_label()), (6, 0xb8, 0xabcde));
        assert_eq!((p.payload_len(), p.next_header(), p.hop_limit()), (8, IpProtocol::UDP, 64));
        assert_eq!(p.src(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(p.upper_layer().unwrap(), (IpProtocol::UDP, 40));

        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_traffic_class(0x12);
        assert_eq!((p.traffic_class(), p.flow_label(), p.version()), (0x12, 0xabcde, 6));
        p.set_flow_label(0xfff12345);
        assert_eq!((p.traffic_class(), p.flow_label(), p.version()), (0x12, 0x12345, 6));
        p.set_hop_limit(1);
        p.set_next_header(IpProtocol::TCP);
        p.set_payload_len(4);
        p.set_src(Ipv6Addr::LOCALHOST);
        p.set_dst(Ipv6Addr::UNSPECIFIED);
        assert_eq!(p.payload_mut(), &[1, 2, 3, 4]);
        assert_eq!(&b[..8], &[0x61, 0x21, 0x23, 0x45, 0, 4, 6, 1]);
    }

    #[test]
    fn ext_chain() {
        // hop-by-hop (8) -> routing (16) -> fragment (8, offset 0, M) -> dstopts (8) -> UDP
        let mut pl = vec![43, 0, 1, 4, 0, 0, 0, 0];
        pl.extend_from_slice(&[44, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        pl.extend_from_slice(&[60, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]);
        pl.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        pl.extend_from_slice(&[0; 8]);
        let b = packet(0, &pl);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        let hs: Vec<_> = p.ext_headers().map(Result::unwrap).collect();
        let kinds: Vec<_> = hs.iter().map(|h| (h.kind, h.offset, h.bytes.len())).collect();
        assert_eq!(kinds, [(IpProtocol::HOPOPTS, 0, 8), (IpProtocol::ROUTING, 8, 16), (IpProtocol::FRAGMENT, 24, 8), (IpProtocol::DSTOPTS, 32, 8)]);
        assert_eq!(hs[2].fragment(), Some(Ipv6Fragment { offset: 0, more: true, ident: 0xdeadbeef }));
        assert_eq!(hs[0].fragment(), None);
        assert_eq!(p.upper_layer().unwrap(), (IpProtocol::UDP, 80));
    }

    #[test]
    fn later_fragment_stops_chain() {
        // fragment offset 1 whose next header claims to be dstopts: data is not parsed
        let b = packet(44, &[60, 0, 0x00, 0x08, 0, 0, 0, 1, 0xff, 0xff]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.ext_headers().count(), 1);
        assert_eq!(p.upper_layer().unwrap(), (IpProtocol::DSTOPTS, 48));
    }

    #[test]
    fn no_next_header() {
        let b = packet(59, &[]);
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap().upper_layer().unwrap(), (IpProtocol::NONE, 40));
    }

    #[test]
    fn errors() {
        let b = packet(17, &[0; 8]);
        for n in 0..b.len() {
            assert_eq!(Ipv6Packet::new_checked(&b[..n]), Err(Error::Truncated), "len {n}");
        }
        let mut bad = b.clone();
        bad[0] = 0x40;
        assert!(matches!(Ipv6Packet::new_checked(&bad[..]), Err(Error::Malformed(_))));
        // extension header longer than the payload, and one cut after its first byte
        for pl in [&[17u8, 1, 0, 0, 0, 0, 0, 0][..], &[17u8][..]] {
            let b = packet(60, pl);
            let p = Ipv6Packet::new_checked(&b[..]).unwrap();
            assert_eq!(p.upper_layer(), Err(Error::Truncated));
            let mut it = p.ext_headers();
            assert_eq!(it.next(), Some(Err(Error::Truncated)));
            assert_eq!(it.next(), None);
        }
    }
}
