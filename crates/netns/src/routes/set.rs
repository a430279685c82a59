//! [`RouteSet`]: a table of distinct prefixes of one family, synthetic
//! (the public tables' length mix, placed in the lab's ranges) or given.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use anyhow::{bail, Result};
use ipnet::IpNet;

#[cfg(doc)]
use super::mix::NESTED_SHARE;
use super::mix::{apportion, shifted, IPV4_LENGTH_MIX, IPV6_LENGTH_MIX, MAX_SYNTHETIC, V4_SLICE_MIN, V4_SLICE_SHIFT, V6_SHIFT};
use super::place::{overlaps, place, Space, V4_ALL, V4_LAB, V4_LAB_LINKS, V4_NON_GLOBAL, V6_LAB, V6_LAB_LINKS};
use super::targets::lookup_targets;
use super::Family;

/// A set of distinct prefixes of one family to install as routes.
///
/// ```no_run
/// # fn main() -> anyhow::Result<()> {
/// use xnf_netns::{InstalledRoutes, LineConfig, LineTopology, RouteSet};
/// let t = LineTopology::new(&LineConfig::default())?;
/// let table = RouteSet::synthetic_v4(1_000_000, 1)?;
/// let targets = table.lookup_targets(1024)?; // destinations for the generator
/// let routes = InstalledRoutes::new(t.dut(), table, t.sink_v4.into(), &t.dut_sink_if)?;
/// println!("{} routes in {:.2} s", routes.report().routes, routes.report().seconds);
/// // ... send to `targets` from gen, measure ...
/// routes.remove()?; // or let the guard (or the namespace's) drop remove them
/// # let _ = targets; Ok(()) }
/// ```
///
/// # Where the prefixes lie
///
/// Packets in the lab only use 198.18.0.0/15 and 2001:db8::/32, but a /15
/// cannot hold a million distinct prefixes. So:
///
/// * **IPv4** tables span the global unicast space, never overlapping
///   0/8, 10/8, 127/8, 169.254/16, 172.16/12, 192.168/16 or 224/3. A slice of
///   the table lies in 198.18.16.0–198.19.255.255 (198.18.0.0/15 without
///   198.18.0.0/20, where the topologies' links are): `min(n, max(4096,
///   proportional share))` prefixes, so there are always enough distinct
///   destinations for the generator. The slice is a 1:64 scale model of the
///   table (every length plus [`V4_SLICE_SHIFT`] bits: the table's /24s are
///   /30s there, its /16s are /22s), since a realistic /24-heavy mix of 4096
///   prefixes does not fit into 496 /24s. The routes are only ever installed
///   inside a namespace; packets go to [`RouteSet::lookup_targets`] only.
/// * **IPv6** tables lie entirely in 2001:db8::/32, never overlapping
///   2001:db8::/44 (the topologies' links). The /32 plays the role of a /8
///   of real address space: every length of [`IPV6_LENGTH_MIX`] is
///   lengthened by [`V6_SHIFT`] bits (a real /48 becomes a /72, a /32 a
///   /56, a /29 a /53), which keeps the shape of the tree the kernel builds
///   (it depends on the lengths relative to each other, not on absolute
///   values) and leaves room for millions of prefixes.
///
/// In both families about half of the prefixes are more-specifics of another
/// prefix of the table ([`NESTED_SHARE`]), as in the real tables.
///
/// # Installation
///
/// A `NETLINK_ROUTE` socket is opened inside the namespace (on a
/// [`crate::Netns::run`] thread) and `RTM_NEWROUTE` messages are packed many per
/// `send` ([`crate::BatchConfig`]). Routes go to the main table with protocol
/// [`super::XNF_RTPROT`], `NLM_F_CREATE | NLM_F_EXCL`, a gateway and an output
/// interface. Only the last message of each send asks for an
/// acknowledgement: the kernel reports every failed message anyway, and a
/// netlink `send` returns only after the kernel has processed all of it, so
/// the acknowledgement of the last message marks the end of the replies of
/// that send. Acknowledging every message was measured to be slower (one
/// datagram to receive per route). IPv4 routes are sent in a fixed
/// pseudo-random order (the kernel's trie rebalances much less than with
/// routes in address order), IPv6 routes in address order (faster for its
/// radix tree). Failures name the prefix, the kernel's errno and its extended-ack
/// message; a failed installation removes what it installed (all or
/// nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteSet {
    family: Family,
    prefixes: Vec<IpNet>,
}

impl RouteSet {
    /// `n` distinct IPv4 prefixes with the length mix of the public BGP
    /// table ([`IPV4_LENGTH_MIX`]), the same for the same `n` and `seed`;
    /// see the [`RouteSet`] for where they lie. Sorted by address.
    pub fn synthetic_v4(n: usize, seed: u64) -> Result<RouteSet> {
        check_size(n)?;
        let global = Space { within: V4_ALL, excluded: V4_NON_GLOBAL.iter().copied().chain([V4_LAB]).collect() };
        let slice = Space { within: V4_LAB, excluded: vec![V4_LAB_LINKS] };
        let proportional = (n as f64 * slice.size() / global.size()).round() as usize;
        let in_slice = n.min(V4_SLICE_MIN.max(proportional));
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x7634_7634);
        let mut seen = HashSet::with_capacity(n);
        let mut prefixes = Vec::with_capacity(n);
        let global_counts = apportion(IPV4_LENGTH_MIX, n - in_slice);
        place(&global, &global_counts, &mut rng, &mut seen, &mut prefixes)?;
        let slice_mix = shifted(IPV4_LENGTH_MIX, V4_SLICE_SHIFT, V4_LAB.prefix_len() + 2, 32);
        place(&slice, &apportion(&slice_mix, in_slice), &mut rng, &mut seen, &mut prefixes)?;
        Ok(RouteSet::sorted(Family::V4, prefixes))
    }

    /// `n` distinct IPv6 prefixes inside 2001:db8::/32 (outside
    /// 2001:db8::/44) with the length mix of the public BGP table
    /// ([`IPV6_LENGTH_MIX`]) lengthened by [`V6_SHIFT`] bits, the same for
    /// the same `n` and `seed`. Sorted by address.
    pub fn synthetic_v6(n: usize, seed: u64) -> Result<RouteSet> {
        check_size(n)?;
        let space = Space { within: V6_LAB, excluded: vec![V6_LAB_LINKS] };
        let mix = shifted(IPV6_LENGTH_MIX, V6_SHIFT, V6_LAB.prefix_len() + 1, 128);
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x7636_7636);
        let mut seen = HashSet::with_capacity(n);
        let mut prefixes = Vec::with_capacity(n);
        place(&space, &apportion(&mix, n), &mut rng, &mut seen, &mut prefixes)?;
        Ok(RouteSet::sorted(Family::V6, prefixes))
    }

    fn sorted(family: Family, mut prefixes: Vec<IpNet>) -> RouteSet {
        prefixes.sort_unstable();
        RouteSet { family, prefixes }
    }

    /// A set of your own prefixes. They must be distinct, of one family and
    /// without host bits; IPv4 ones must be global unicast (not overlapping
    /// 0/8, 10/8, 127/8, 169.254/16, 172.16/12, 192.168/16, 224/3) and IPv6
    /// ones inside 2001:db8::/32; neither may overlap the links'
    /// 198.18.0.0/20 or 2001:db8::/44.
    pub fn from_prefixes(prefixes: Vec<IpNet>) -> Result<RouteSet> {
        let Some(first) = prefixes.first() else {
            bail!("a route set needs at least one prefix");
        };
        let family = Family::of(first.addr());
        let mut seen = HashSet::with_capacity(prefixes.len());
        for p in &prefixes {
            if Family::of(p.addr()) != family {
                bail!("{p}: a route set holds prefixes of one family ({family}, like {first})");
            }
            if *p != p.trunc() {
                bail!("{p} has host bits set (did you mean {}?)", p.trunc());
            }
            if !seen.insert(*p) {
                bail!("{p} appears twice in the route set");
            }
            let ok = match family {
                Family::V4 => !V4_NON_GLOBAL.iter().any(|e| overlaps(e, p)) && !overlaps(&V4_LAB_LINKS, p),
                Family::V6 => V6_LAB.contains(p) && !overlaps(&V6_LAB_LINKS, p),
            };
            if !ok {
                bail!(
                    "{p} is not allowed in a route set: IPv4 prefixes must be global unicast and \
                     IPv6 ones inside 2001:db8::/32, and neither may overlap the topologies' links \
                     (198.18.0.0/20, 2001:db8::/44)"
                );
            }
        }
        Ok(RouteSet { family, prefixes })
    }

    pub fn family(&self) -> Family {
        self.family
    }

    pub fn prefixes(&self) -> &[IpNet] {
        &self.prefixes
    }

    pub fn len(&self) -> usize {
        self.prefixes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// How many prefixes of each length the set holds.
    pub fn length_histogram(&self) -> BTreeMap<u8, usize> {
        let mut h = BTreeMap::new();
        for p in &self.prefixes {
            *h.entry(p.prefix_len()).or_default() += 1;
        }
        h
    }

    /// See [`lookup_targets`].
    pub fn lookup_targets(&self, count: usize) -> Result<Vec<IpAddr>> {
        lookup_targets(&self.prefixes, count)
    }
}

fn check_size(n: usize) -> Result<()> {
    if n == 0 || n > MAX_SYNTHETIC {
        bail!("a synthetic table holds 1 to {MAX_SYNTHETIC} prefixes, not {n}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(set: &RouteSet, filter: impl Fn(&IpNet) -> bool) -> BTreeMap<u8, f64> {
        let chosen: Vec<&IpNet> = set.prefixes().iter().filter(|p| filter(p)).collect();
        let mut h: BTreeMap<u8, f64> = BTreeMap::new();
        for p in &chosen {
            *h.entry(p.prefix_len()).or_default() += 1.0;
        }
        h.values_mut().for_each(|v| *v /= chosen.len() as f64);
        h
    }

    fn expected(mix: &[(u8, u32)]) -> BTreeMap<u8, f64> {
        let total: u32 = mix.iter().map(|m| m.1).sum();
        mix.iter().map(|&(l, w)| (l, f64::from(w) / f64::from(total))).collect()
    }

    fn assert_shares(got: &BTreeMap<u8, f64>, want: &BTreeMap<u8, f64>, tolerance: f64) {
        for (len, w) in want {
            let g = got.get(len).copied().unwrap_or(0.0);
            assert!((g - w).abs() <= tolerance, "/{len}: share {g:.5}, expected {w:.5}");
        }
        for len in got.keys() {
            assert!(want.contains_key(len), "unexpected length /{len}");
        }
    }

    fn in_lab_v4(p: &IpNet) -> bool {
        V4_LAB.contains(p)
    }

    fn all_distinct(set: &RouteSet) {
        let unique: HashSet<IpNet> = set.prefixes().iter().copied().collect();
        assert_eq!(unique.len(), set.len(), "prefixes are not distinct");
    }

    #[test]
    fn v4_table_has_the_bgp_mix_and_a_lab_slice() {
        let n = 200_000;
        let set = RouteSet::synthetic_v4(n, 7).unwrap();
        assert_eq!(set.len(), n);
        assert_eq!(set.family(), Family::V4);
        all_distinct(&set);
        // Outside the lab's /15: the table's mix, exactly up to rounding.
        let global = share(&set, |p| !in_lab_v4(p));
        assert_shares(&global, &expected(IPV4_LENGTH_MIX), 0.0005);
        assert!(global[&24] > 0.6);
        // Inside: 4096 prefixes, the same mix 6 bits longer.
        let slice: Vec<IpNet> = set.prefixes().iter().copied().filter(in_lab_v4).collect();
        assert_eq!(slice.len(), V4_SLICE_MIN);
        let want = expected(&shifted(IPV4_LENGTH_MIX, V4_SLICE_SHIFT, 17, 32));
        assert_shares(&share(&set, in_lab_v4), &want, 0.001);
        assert!(want[&30] > 0.6);
        // Exclusions.
        for p in set.prefixes() {
            assert!(!V4_NON_GLOBAL.iter().any(|e| overlaps(e, p)), "{p} is not global unicast");
            assert!(!overlaps(&V4_LAB_LINKS, p), "{p} overlaps the links");
            assert!(!p.contains(&V4_LAB) || *p == V4_LAB, "{p} covers the lab range");
            assert_eq!(*p, p.trunc(), "{p} has host bits");
        }
        // Sorted (they are sent to the kernel in another order, see send_order).
        assert!(set.prefixes().windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn about_half_are_more_specifics() {
        for set in [RouteSet::synthetic_v4(100_000, 3).unwrap(), RouteSet::synthetic_v6(100_000, 3).unwrap()] {
            let all: HashSet<IpNet> = set.prefixes().iter().copied().collect();
            let nested = all.iter().filter(|p| std::iter::successors(p.supernet(), IpNet::supernet).any(|s| all.contains(&s))).count();
            let share = nested as f64 / all.len() as f64;
            assert!((0.4..0.65).contains(&share), "{} more-specifics share {share}", set.family());
        }
    }

    #[test]
    fn v6_table_lies_in_the_documentation_range() {
        let n = 100_000;
        let set = RouteSet::synthetic_v6(n, 11).unwrap();
        assert_eq!(set.len(), n);
        all_distinct(&set);
        let want = expected(&shifted(IPV6_LENGTH_MIX, V6_SHIFT, 33, 128));
        assert_shares(&share(&set, |_| true), &want, 0.0005);
        assert!(want[&72] > 0.44, "the real table's /48s are /72s here");
        for p in set.prefixes() {
            assert!(V6_LAB.contains(p), "{p} outside 2001:db8::/32");
            assert!(!overlaps(&V6_LAB_LINKS, p), "{p} overlaps 2001:db8::/44");
        }
    }

    #[test]
    fn the_same_for_the_same_size_and_seed() {
        assert_eq!(RouteSet::synthetic_v4(5000, 1).unwrap(), RouteSet::synthetic_v4(5000, 1).unwrap());
        assert_ne!(RouteSet::synthetic_v4(5000, 1).unwrap(), RouteSet::synthetic_v4(5000, 2).unwrap());
        assert_eq!(RouteSet::synthetic_v6(5000, 1).unwrap(), RouteSet::synthetic_v6(5000, 1).unwrap());
        // Pinned: a table must not change between runs or builds (results of
        // route sweeps are compared across them), so a change of generator
        // shows up here.
        let v4 = RouteSet::synthetic_v4(9, 0x786e66).unwrap();
        let v6 = RouteSet::synthetic_v6(3, 0x786e66).unwrap();
        let text = |s: &RouteSet| s.prefixes().iter().map(|p| p.to_string()).collect::<Vec<_>>().join(" ");
        assert_eq!(text(&v4), PINNED_V4);
        assert_eq!(text(&v6), PINNED_V6);
    }

    const PINNED_V4: &str = "198.18.88.176/30 198.18.105.32/27 198.18.105.32/28 198.18.105.32/30 \
                             198.18.105.36/30 198.18.105.40/30 198.18.143.24/29 198.19.146.136/30 198.19.216.44/30";
    const PINNED_V6: &str = "2001:db8:239f:9c00::/56 2001:db8:48bd:49f4:3800::/72 2001:db8:f349:7369:2300::/72";

    #[test]
    fn small_tables_lie_in_the_lab_slice() {
        let set = RouteSet::synthetic_v4(9, 1).unwrap();
        assert_eq!(set.len(), 9);
        assert!(set.prefixes().iter().all(in_lab_v4), "{:?}", set.prefixes());
        assert!(RouteSet::synthetic_v4(0, 1).is_err());
        assert!(RouteSet::synthetic_v4(MAX_SYNTHETIC + 1, 1).is_err());
    }

    #[test]
    fn own_sets_are_checked() {
        let p = |s: &str| s.parse::<IpNet>().unwrap();
        assert!(RouteSet::from_prefixes(vec![p("203.0.113.0/24"), p("198.18.64.0/18")]).is_ok());
        for bad in [
            vec![p("10.1.0.0/16")],
            vec![p("198.18.1.0/24")],
            vec![p("0.0.0.0/0")],
            vec![p("2001:db9::/32")],
            vec![p("2001:db8::/48")],
            vec![p("203.0.113.0/24"), p("2001:db8:100::/48")],
            vec![p("203.0.113.0/24"), p("203.0.113.0/24")],
            vec![],
        ] {
            assert!(RouteSet::from_prefixes(bad.clone()).is_err(), "{bad:?} accepted");
        }
        let err = RouteSet::from_prefixes(vec![p("203.0.113.1/24")]).unwrap_err().to_string();
        assert!(err.contains("did you mean 203.0.113.0/24"), "{err}");
    }
}
