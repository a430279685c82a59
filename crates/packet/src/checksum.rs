//! The internet checksum (RFC 1071), pseudo-header sums and incremental updates (RFC 1624).
//!
//! Partial sums are `u32` values already folded to 16 bits, so a handful of them can be added
//! together before the final [`fold`].

use std::net::{Ipv4Addr, Ipv6Addr};

/// Ones'-complement sum of `data` as big-endian 16-bit words (an odd last byte is padded with
/// zero), folded to 16 bits but not complemented.
pub fn sum(data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u32
}

/// Folds the carries of a partial sum into 16 bits (end-around carry), without complementing.
pub fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The internet checksum of `data`: the complement of its ones'-complement sum.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// True when `data`, checksum field included, sums to 0xffff (i.e. the checksum is correct).
pub fn verify(data: &[u8]) -> bool {
    fold(sum(data)) == 0xffff
}

/// Partial sum of the IPv4 pseudo-header (RFC 768/793): addresses, protocol and L4 length.
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, len: u16) -> u32 {
    let s = sum(&src.octets()) + sum(&dst.octets()) + u32::from(protocol) + u32::from(len);
    u32::from(fold(s))
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 §8.1): addresses, length and next header.
pub fn pseudo_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u32 {
    let s = sum(&src.octets()) + sum(&dst.octets()) + sum(&len.to_be_bytes()) + u32::from(next_header);
    u32::from(fold(s))
}

/// Checksum of an L4 `segment` (its checksum field zeroed) behind an IPv4 pseudo-header.
pub fn transport_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, segment: &[u8]) -> u16 {
    !fold(pseudo_v4(src, dst, protocol, segment.len() as u16) + sum(segment))
}

/// Checksum of an L4 `segment` (its checksum field zeroed) behind an IPv6 pseudo-header.
pub fn transport_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, segment: &[u8]) -> u16 {
    !fold(pseudo_v6(src, dst, next_header, segment.len() as u32) + sum(segment))
}

/// True when an L4 `segment` (checksum field included) is correct behind an IPv4 pseudo-header.
pub fn verify_transport_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, segment: &[u8]) -> bool {
    fold(pseudo_v4(src, dst, protocol, segment.len() as u16) + sum(segment)) == 0xffff
}

/// True when an L4 `segment` (checksum field included) is correct behind an IPv6 pseudo-header.
pub fn verify_transport_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, segment: &[u8]) -> bool {
    fold(pseudo_v6(src, dst, next_header, segment.len() as u32) + sum(segment)) == 0xffff
}

/// RFC 1624 incremental update for one 16-bit word changing from `old` to `new`:
/// `HC' = ~(~HC + ~m + m')`.
pub fn update16(old_csum: u16, old: u16, new: u16) -> u16 {
    !fold(u32::from(!old_csum) + u32::from(!old) + u32::from(new))
}

/// RFC 1624 incremental update for a 32-bit field (e.g. an IPv4 address or a TCP sequence).
pub fn update32(old_csum: u16, old: u32, new: u32) -> u16 {
    let c = update16(old_csum, (old >> 16) as u16, (new >> 16) as u16);
    update16(c, old as u16, new as u16)
}

/// RFC 1624 incremental update for a field of any even-aligned length (e.g. an IPv6 address).
pub fn update_bytes(old_csum: u16, old: &[u8], new: &[u8]) -> u16 {
    !fold(u32::from(!old_csum) + u32::from(!(sum(old) as u16)) + sum(new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::bytes;

    const IP_HDR: [u8; 20] = [0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7];

    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
        assert_eq!(sum(&[0x01]), 0x0100);
        assert_eq!(sum(&[]), 0);
        assert_eq!(fold(0x0001_fffe), 0xffff);
    }

    #[test]
    fn known_ipv4_header() {
        assert!(verify(&IP_HDR));
        let mut h = IP_HDR;
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0xb861);
        assert!(!verify(&h));
        assert!(!verify(&[0u8; 20]));
    }

    #[test]
    fn sum_is_order_and_split_independent() {
        let mut rng = fastrand::Rng::with_seed(7);
        for n in [0usize, 1, 2, 3, 64, 1501, 70000] {
            let d = bytes(&mut rng, n);
            let split = (n / 2) & !1;
            assert_eq!(fold(sum(&d[..split]) + sum(&d[split..])), fold(sum(&d)));
        }
    }

    #[test]
    fn pseudo_headers() {
        // UDP: 192.0.2.1:1024 -> 192.0.2.2:53 with payload "ab" computed by hand.
        let src = Ipv4Addr::new(192, 0, 2, 1);
        let dst = Ipv4Addr::new(192, 0, 2, 2);
        let mut seg = [0x04, 0x00, 0x00, 0x35, 0x00, 0x0a, 0x00, 0x00, b'a', b'b'];
        let mut manual = Vec::new();
        manual.extend_from_slice(&src.octets());
        manual.extend_from_slice(&dst.octets());
        manual.extend_from_slice(&[0, 17, 0, 10]);
        manual.extend_from_slice(&seg);
        let c = transport_v4(src, dst, 17, &seg);
        assert_eq!(c, checksum(&manual));
        seg[6..8].copy_from_slice(&c.to_be_bytes());
        assert!(verify_transport_v4(src, dst, 17, &seg));
        assert!(!verify_transport_v4(src, Ipv4Addr::new(192, 0, 2, 3), 17, &seg));

        let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d6: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let mut manual = Vec::new();
        manual.extend_from_slice(&s6.octets());
        manual.extend_from_slice(&d6.octets());
        manual.extend_from_slice(&[0, 0, 0, 10, 0, 0, 0, 17]);
        seg[6] = 0;
        seg[7] = 0;
        manual.extend_from_slice(&seg);
        let c = transport_v6(s6, d6, 17, &seg);
        assert_eq!(c, checksum(&manual));
        seg[6..8].copy_from_slice(&c.to_be_bytes());
        assert!(verify_transport_v6(s6, d6, 17, &seg));
    }

    #[test]
    fn incremental_ttl_decrement_matches_recompute() {
        let mut rng = fastrand::Rng::with_seed(0x1234_5678);
        for _ in 0..2000 {
            let mut h = IP_HDR;
            h[4..8].copy_from_slice(&bytes(&mut rng, 4));
            h[8] = rng.u8(1..=255);
            h[12..20].copy_from_slice(&bytes(&mut rng, 8));
            h[10] = 0;
            h[11] = 0;
            let c = checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            while h[8] > 0 {
                let old = u16::from_be_bytes([h[8], h[9]]);
                h[8] -= 1;
                let new = u16::from_be_bytes([h[8], h[9]]);
                let inc = update16(u16::from_be_bytes([h[10], h[11]]), old, new);
                h[10] = 0;
                h[11] = 0;
                assert_eq!(inc, checksum(&h), "header {h:02x?}");
                h[10..12].copy_from_slice(&inc.to_be_bytes());
            }
        }
    }

    #[test]
    fn incremental_address_rewrite_matches_recompute() {
        let mut rng = fastrand::Rng::with_seed(99);
        for _ in 0..1000 {
            let mut h = IP_HDR;
            h[12..20].copy_from_slice(&bytes(&mut rng, 8));
            h[10] = 0;
            h[11] = 0;
            let c = checksum(&h);
            let old = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
            let new = rng.u32(..);
            h[12..16].copy_from_slice(&new.to_be_bytes());
            assert_eq!(update32(c, old, new), checksum(&h));
            let old_dst = h[16..20].to_vec();
            let new_dst = bytes(&mut rng, 4);
            let c2 = checksum(&h);
            h[16..20].copy_from_slice(&new_dst);
            assert_eq!(update_bytes(c2, &old_dst, &new_dst), checksum(&h));
        }
    }
}
