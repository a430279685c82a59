//! Placing prefixes: where a table may lie, and drawing distinct prefixes of
//! given lengths there, about half of them inside an earlier one.
//!
//! Prefixes are ipnet's; placement alone treats addresses as integers
//! ([`bits`]), since drawing random host bits under a mask is arithmetic
//! that ipnet does not offer.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{bail, Result};
use ipnet::IpNet;

use super::mix::NESTED_SHARE;
use super::Family;

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> IpNet {
    IpNet::new_assert(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), len)
}

const fn v6(segments: [u16; 2], len: u8) -> IpNet {
    IpNet::new_assert(IpAddr::V6(Ipv6Addr::new(segments[0], segments[1], 0, 0, 0, 0, 0, 0)), len)
}

/// IPv4 space a table never overlaps: this network, private, loopback,
/// link-local, multicast and reserved.
pub(super) const V4_NON_GLOBAL: [IpNet; 7] =
    [v4(0, 0, 0, 0, 8), v4(10, 0, 0, 0, 8), v4(127, 0, 0, 0, 8), v4(169, 254, 0, 0, 16), v4(172, 16, 0, 0, 12), v4(192, 168, 0, 0, 16), v4(224, 0, 0, 0, 3)];
/// All of IPv4.
pub(super) const V4_ALL: IpNet = v4(0, 0, 0, 0, 0);
/// 198.18.0.0/15, the lab's range.
pub(super) const V4_LAB: IpNet = v4(198, 18, 0, 0, 15);
/// 198.18.0.0/20: the topologies' links.
pub(super) const V4_LAB_LINKS: IpNet = v4(198, 18, 0, 0, 20);
/// 2001:db8::/32, the lab's range.
pub(super) const V6_LAB: IpNet = v6([0x2001, 0xdb8], 32);
/// 2001:db8::/44: the topologies' links.
pub(super) const V6_LAB_LINKS: IpNet = v6([0x2001, 0xdb8], 44);

/// An address as an integer, IPv4 in the low 32 bits.
pub(super) fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address of `family` whose integer is `bits`.
pub(super) fn addr(family: Family, bits: u128) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from(bits as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

/// Whether the two share any address (one contains the other).
pub(super) fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(b) || b.contains(a)
}

/// A random prefix of length `len` (not shorter than `parent`'s) inside `parent`.
fn random_within(rng: &mut fastrand::Rng, parent: &IpNet, len: u8) -> IpNet {
    let host = bits(parent.hostmask()) & rng.u128(..);
    let ip = addr(Family::of(parent.addr()), bits(parent.network()) | host);
    IpNet::new(ip, len).expect("length checked by the caller").trunc()
}

/// Where prefixes of one part of a table are placed.
pub(super) struct Space {
    /// The region they must lie in.
    pub within: IpNet,
    /// What they must not overlap.
    pub excluded: Vec<IpNet>,
}

impl Space {
    fn allowed(&self, p: &IpNet) -> bool {
        self.within.contains(p) && !self.excluded.iter().any(|e| overlaps(e, p))
    }

    /// Number of addresses in the space (for proportions).
    pub fn size(&self) -> f64 {
        let size = |p: &IpNet| 2f64.powi(i32::from(p.max_prefix_len() - p.prefix_len()));
        size(&self.within) - self.excluded.iter().filter(|e| self.within.contains(*e)).map(size).sum::<f64>()
    }
}

/// Places `counts` (length, how many) into `space`, shortest first, each
/// either inside an earlier, shorter prefix (with [`NESTED_SHARE`]) or
/// anywhere in the space; all distinct from `seen`.
pub(super) fn place(space: &Space, counts: &[(u8, usize)], rng: &mut fastrand::Rng, seen: &mut HashSet<IpNet>, out: &mut Vec<IpNet>) -> Result<()> {
    let within = space.within;
    // Prefixes placed so far in this space, by length.
    let mut by_len: Vec<Vec<IpNet>> = vec![Vec::new(); usize::from(within.max_prefix_len()) + 1];
    let mut counts = counts.to_vec();
    counts.sort();
    for (len, count) in counts {
        if count > 0 && !(within.prefix_len()..=within.max_prefix_len()).contains(&len) {
            bail!("cannot place /{len} prefixes inside {within}");
        }
        // Parents are 1..=8 bits shorter.
        let parents = len.saturating_sub(8).max(within.prefix_len())..len;
        for _ in 0..count {
            let mut placed = false;
            for _attempt in 0..10_000 {
                let nested_total: usize = parents.clone().map(|l| by_len[usize::from(l)].len()).sum();
                let parent = if nested_total > 0 && rng.f64() < NESTED_SHARE {
                    let mut pick = rng.usize(..nested_total);
                    let mut parent = within;
                    for l in parents.clone() {
                        let here = &by_len[usize::from(l)];
                        if pick < here.len() {
                            parent = here[pick];
                            break;
                        }
                        pick -= here.len();
                    }
                    parent
                } else {
                    within
                };
                let p = random_within(rng, &parent, len);
                if space.allowed(&p) && seen.insert(p) {
                    by_len[usize::from(len)].push(p);
                    out.push(p);
                    placed = true;
                    break;
                }
            }
            if !placed {
                bail!("could not find room for another /{len} prefix in {within} (table too large for the space)");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn integers_and_overlaps() {
        assert_eq!(bits("10.0.0.1".parse().unwrap()), 0x0a00_0001);
        assert_eq!(addr(Family::V4, 0x0a00_0001), "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(addr(Family::V6, bits("2001:db8::1".parse().unwrap())).to_string(), "2001:db8::1");
        let (a, b, c) = (net("10.0.0.0/8"), net("10.1.0.0/16"), net("11.0.0.0/8"));
        assert!(overlaps(&a, &b) && overlaps(&b, &a));
        assert!(!overlaps(&a, &c));
        assert!(!overlaps(&a, &net("2001:db8::/32")));
        assert_eq!(V6_LAB, net("2001:db8::/32"));
        assert_eq!(V4_NON_GLOBAL[6], net("224.0.0.0/3"));
    }

    #[test]
    fn random_prefixes_lie_in_their_parent() {
        let mut rng = fastrand::Rng::with_seed(1);
        for parent in [net("198.18.0.0/15"), net("0.0.0.0/0"), net("2001:db8:100::/40")] {
            for len in [parent.prefix_len(), parent.prefix_len() + 1, parent.max_prefix_len()] {
                let p = random_within(&mut rng, &parent, len);
                assert!(parent.contains(&p) && p.prefix_len() == len && p == p.trunc(), "{p} in {parent}");
            }
        }
    }

    #[test]
    fn placement_respects_the_space() {
        let space = Space { within: net("198.18.0.0/15"), excluded: vec![net("198.18.0.0/16")] };
        assert_eq!(space.size(), 65536.0);
        let (mut seen, mut out) = (HashSet::new(), Vec::new());
        let mut rng = fastrand::Rng::with_seed(3);
        place(&space, &[(24, 200), (17, 2), (32, 50)], &mut rng, &mut seen, &mut out).unwrap();
        assert_eq!(out.len(), 252);
        assert!(out.iter().all(|p| net("198.19.0.0/16").contains(p)), "{out:?}");
        // Shortest first: /17s, then /24s, then /32s.
        assert!(out.windows(2).all(|w| w[0].prefix_len() <= w[1].prefix_len()));
        // A space too small says so; lengths outside it are refused.
        let err = place(&space, &[(17, 3)], &mut rng, &mut seen, &mut out).unwrap_err();
        assert!(err.to_string().contains("could not find room"), "{err}");
        assert!(place(&space, &[(8, 1)], &mut rng, &mut seen, &mut out).is_err());
    }
}
