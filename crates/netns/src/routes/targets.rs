//! Lookup targets: addresses in the lab's range that a table's prefixes
//! own (longest match), one per prefix, for the traffic generator.

use std::net::IpAddr;

use anyhow::{bail, Result};
use ipnet::IpNet;

use super::place::{addr, bits, overlaps, V4_LAB, V4_LAB_LINKS, V6_LAB, V6_LAB_LINKS};
use super::Family;

/// Addresses that belong to table prefixes inside `region` (and outside
/// `links`): for every such prefix that owns at least one address (no more
/// specific prefix covers it), one address it owns. Sorted by prefix.
fn owned_addresses(table: &[IpNet], region: IpNet, links: IpNet) -> Vec<(IpNet, IpAddr)> {
    let family = Family::of(region.addr());
    let mut cand: Vec<IpNet> = table.iter().map(IpNet::trunc).filter(|p| region.contains(p) && !overlaps(&links, p)).collect();
    // By first address, then length: descendants follow their ancestors.
    cand.sort_unstable();
    cand.dedup();
    let span = |p: &IpNet| (bits(p.network()), bits(p.broadcast()));
    let mut out = Vec::new();
    for (i, p) in cand.iter().enumerate() {
        // Walk the descendants, which follow p while they start inside it,
        // for the first address none of them covers.
        let (start, end) = span(p);
        let mut cursor = start;
        let mut gap = None;
        for (d_start, d_end) in cand[i + 1..].iter().map(span).take_while(|d| d.0 <= end) {
            if d_start > cursor {
                gap = Some((cursor, d_start - 1));
                break;
            }
            cursor = cursor.max(d_end.saturating_add(1));
            if cursor > end {
                break;
            }
        }
        let (from, to) = match gap {
            Some(g) => g,
            None if cursor <= end => (cursor, end),
            None => continue, // every address has a more specific owner
        };
        // Avoid the network address when the prefix owns more than it.
        let owned = if to > from { from + 1 } else { from };
        out.push((*p, addr(family, owned)));
    }
    out
}

/// `count` destination addresses for the traffic generator, each inside a
/// different prefix of `prefixes` that lies in the lab's range
/// (198.18.16.0–198.19.255.255, i.e. 198.18.0.0/15 without the links'
/// 198.18.0.0/20; or 2001:db8::/32 without 2001:db8::/44) and whose longest
/// match in the table is that prefix. The order is a fixed pseudo-random
/// permutation, so consecutive flows hit unrelated prefixes in different
/// parts of the tree; the same table always gives the same list.
///
/// All prefixes must be of one family. Fails if fewer than `count` prefixes
/// qualify, saying how many do.
pub fn lookup_targets(prefixes: &[IpNet], count: usize) -> Result<Vec<IpAddr>> {
    let Some(first) = prefixes.first() else {
        bail!("an empty table has no lookup targets");
    };
    let family = Family::of(first.addr());
    if prefixes.iter().any(|p| Family::of(p.addr()) != family) {
        bail!("lookup_targets needs prefixes of one family");
    }
    let (region, links) = match family {
        Family::V4 => (V4_LAB, V4_LAB_LINKS),
        Family::V6 => (V6_LAB, V6_LAB_LINKS),
    };
    let mut owned = owned_addresses(prefixes, region, links);
    if owned.len() < count {
        bail!(
            "only {} prefixes of this {family} table lie in {region} (outside {links}) with addresses of their own; \
             ask for at most that many lookup targets",
            owned.len(),
        );
    }
    // A fixed seed: the same table gives the same targets, spread out.
    fastrand::Rng::with_seed(0x786e_665f_7461_7267).shuffle(&mut owned);
    Ok(owned.into_iter().take(count).map(|(_, a)| a).collect())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::RouteSet;

    /// Longest match of `ip` in `prefixes`, by brute force.
    fn lpm(prefixes: &[IpNet], ip: IpAddr) -> Option<IpNet> {
        prefixes.iter().filter(|p| p.contains(&ip)).max_by_key(|p| p.prefix_len()).copied()
    }

    fn check_targets(set: &RouteSet, count: usize) {
        let targets = set.lookup_targets(count).unwrap();
        assert_eq!(targets.len(), count);
        let (region, links) = match set.family() {
            Family::V4 => (V4_LAB, V4_LAB_LINKS),
            Family::V6 => (V6_LAB, V6_LAB_LINKS),
        };
        let local: Vec<IpNet> = set.prefixes().iter().copied().filter(|p| region.contains(p)).collect();
        let mut owners = HashSet::new();
        for t in &targets {
            let owner = lpm(&local, *t).unwrap_or_else(|| panic!("{t} is in no prefix"));
            assert!(!overlaps(&links, &owner), "{t}: owner {owner} overlaps the links");
            assert!(owners.insert(owner), "{t}: prefix {owner} is hit twice");
            // Nothing outside the region could be longer.
            assert_eq!(lpm(set.prefixes(), *t), Some(owner));
        }
        assert_eq!(set.lookup_targets(count).unwrap(), targets, "not deterministic");
    }

    #[test]
    fn lookup_targets_hit_distinct_prefixes_they_own() {
        let v4 = RouteSet::synthetic_v4(50_000, 5).unwrap();
        check_targets(&v4, 1000);
        let v6 = RouteSet::synthetic_v6(20_000, 5).unwrap();
        check_targets(&v6, 1000);
        // Nearly all of the slice qualifies; not more than exists.
        let err = v4.lookup_targets(4097).unwrap_err().to_string();
        assert!(err.contains("only"), "{err}");
        // Consecutive targets are not neighbours in the address space.
        let t = v4.lookup_targets(64).unwrap();
        let mut sorted = t.clone();
        sorted.sort();
        assert_ne!(t, sorted);
    }

    #[test]
    fn lookup_targets_skip_covered_prefixes() {
        let p = |s: &str| s.parse::<IpNet>().unwrap();
        // 198.18.16.0/31 is entirely covered by its two /32s.
        let table = vec![
            p("198.18.16.0/31"),
            p("198.18.16.0/32"),
            p("198.18.16.1/32"),
            p("198.18.32.0/24"),
            p("198.18.32.0/25"),
            p("198.18.0.0/24"), // the links: never a target
            p("203.0.113.0/24"),
        ];
        let mut t = lookup_targets(&table, 4).unwrap();
        t.sort();
        let want: Vec<IpAddr> = ["198.18.16.0", "198.18.16.1", "198.18.32.1", "198.18.32.129"].iter().map(|s| s.parse().unwrap()).collect();
        assert_eq!(t, want);
        assert!(lookup_targets(&table, 5).is_err());
    }
}
