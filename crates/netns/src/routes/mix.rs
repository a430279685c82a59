//! The prefix-length mix of the public BGP tables, the scaling that fits it
//! into the lab's ranges, and splitting a table's size over the lengths.

use std::collections::BTreeMap;

/// Share of prefixes placed inside another prefix of the table (a
/// more-specific of an aggregate). bgp.potaroo.net reports 56–58% of the
/// IPv6 FIB entries as more-specifics (AS131072 and AS6447 views, 2024–25);
/// the IPv4 share is assumed to be similar. One half is used for both.
pub const NESTED_SHARE: f64 = 0.5;

/// Prefix-length mix of the public IPv4 BGP table: `(length, entries per
/// million)`.
///
/// A rounded approximation of a ~1,000,000-entry full table (2023–24) in
/// the shape that bgp.potaroo.net / the CIDR Report and APNIC's weekly
/// routing table report publish: /24 ≈ 61%, /22 12.5%, /23 10.5%, /21 5%,
/// /20 4.2%, /19 2.5%, /18 1.45%, /16 1.4%, /17 0.85%, everything shorter
/// than /16 0.4%; longer than /24 is filtered by practice and absent. The
/// per-length numbers are not a quote of one day's report (they drift week
/// to week); check them against a current snapshot before relying on a
/// specific share.
///
/// | length | per million | length | per million |
/// |---|---|---|---|
/// | /8  | 15    | /17 | 8,500   |
/// | /9  | 13    | /18 | 14,500  |
/// | /10 | 40    | /19 | 25,000  |
/// | /11 | 100   | /20 | 42,000  |
/// | /12 | 300   | /21 | 50,000  |
/// | /13 | 600   | /22 | 125,000 |
/// | /14 | 1,100 | /23 | 105,000 |
/// | /15 | 1,900 | /24 | 611,932 |
/// | /16 | 14,000 | | |
pub const IPV4_LENGTH_MIX: &[(u8, u32)] = &[
    (8, 15),
    (9, 13),
    (10, 40),
    (11, 100),
    (12, 300),
    (13, 600),
    (14, 1_100),
    (15, 1_900),
    (16, 14_000),
    (17, 8_500),
    (18, 14_500),
    (19, 25_000),
    (20, 42_000),
    (21, 50_000),
    (22, 125_000),
    (23, 105_000),
    (24, 611_932),
];

/// Prefix-length mix of the public IPv6 BGP table (real lengths, before
/// [`V6_SHIFT`]): `(length, entries per million)`.
///
/// The four big classes are measured: a full table of 220,785 routes in
/// January 2025 held 99,344 /48s, 25,763 /32s, 23,172 /40s and 20,789 /44s
/// (as215855.net, "Adding BGP prefix length statistics to BIRD exporter").
/// The remaining 23.4% are spread over the other lengths by estimate, so
/// that the mean length (42.7) matches bgp.potaroo.net's 42.8–43.2.
///
/// | length | per million | length | per million |
/// |---|---|---|---|
/// | /28 | 3,000   | /39 | 3,239   |
/// | /29 | 30,000  | /40 | 104,953 |
/// | /30 | 5,000   | /41 | 5,000   |
/// | /31 | 3,000   | /42 | 20,000  |
/// | /32 | 116,688 | /43 | 5,000   |
/// | /33 | 10,000  | /44 | 94,160  |
/// | /34 | 10,000  | /45 | 15,000  |
/// | /35 | 8,000   | /46 | 30,000  |
/// | /36 | 50,000  | /47 | 20,000  |
/// | /37 | 2,000   | /48 | 449,960 |
/// | /38 | 15,000  | | |
pub const IPV6_LENGTH_MIX: &[(u8, u32)] = &[
    (28, 3_000),
    (29, 30_000),
    (30, 5_000),
    (31, 3_000),
    (32, 116_688),
    (33, 10_000),
    (34, 10_000),
    (35, 8_000),
    (36, 50_000),
    (37, 2_000),
    (38, 15_000),
    (39, 3_239),
    (40, 104_953),
    (41, 5_000),
    (42, 20_000),
    (43, 5_000),
    (44, 94_160),
    (45, 15_000),
    (46, 30_000),
    (47, 20_000),
    (48, 449_960),
];

/// Bits added to every IPv6 length so the table fits into 2001:db8::/32
/// (which then stands for a /8 of real space).
pub const V6_SHIFT: u8 = 24;

/// Bits added to every IPv4 length inside the lab's slice of 198.18.0.0/15
/// (a 1:64 scale model of the table).
pub const V4_SLICE_SHIFT: u8 = 6;

/// Prefixes the IPv4 slice holds at least (or all of the table, if smaller).
pub const V4_SLICE_MIN: usize = 4096;

/// Largest synthetic table [`super::RouteSet::synthetic_v4`] / `_v6` make.
pub const MAX_SYNTHETIC: usize = 4_000_000;

/// `n` split over `mix` in proportion to the weights (largest remainder,
/// ties to the earlier entry), so the shares are exact up to rounding.
pub(super) fn apportion(mix: &[(u8, u32)], n: usize) -> Vec<(u8, usize)> {
    let total: u64 = mix.iter().map(|&(_, w)| u64::from(w)).sum();
    let mut out: Vec<(u8, usize)> = Vec::with_capacity(mix.len());
    let mut rest: Vec<(u64, usize)> = Vec::with_capacity(mix.len());
    let mut given = 0;
    for (i, &(len, w)) in mix.iter().enumerate() {
        let exact = n as u128 * u128::from(w);
        let whole = (exact / u128::from(total)) as usize;
        rest.push(((exact % u128::from(total)) as u64, i));
        out.push((len, whole));
        given += whole;
    }
    rest.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in rest.iter().take(n - given) {
        out[i].1 += 1;
    }
    out
}

/// `mix` with every length plus `shift`, clamped to `min..=max`, merged.
pub(super) fn shifted(mix: &[(u8, u32)], shift: u8, min: u8, max: u8) -> Vec<(u8, u32)> {
    let mut merged: BTreeMap<u8, u32> = BTreeMap::new();
    for &(len, w) in mix {
        *merged.entry((len + shift).clamp(min, max)).or_default() += w;
    }
    merged.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apportion_is_exact() {
        let counts = apportion(IPV4_LENGTH_MIX, 1_000_000);
        assert_eq!(counts.iter().map(|c| c.1).sum::<usize>(), 1_000_000);
        assert!(counts.contains(&(24, 611_932)));
        let small = apportion(IPV4_LENGTH_MIX, 9);
        assert_eq!(small.iter().map(|c| c.1).sum::<usize>(), 9);
        assert!(small.iter().find(|c| c.0 == 24).unwrap().1 >= 5);
        assert!(IPV4_LENGTH_MIX.iter().map(|m| m.1).sum::<u32>() == 1_000_000);
        assert!(IPV6_LENGTH_MIX.iter().map(|m| m.1).sum::<u32>() == 1_000_000);
    }

    #[test]
    fn ipv6_mix_mean_length_matches_the_real_table() {
        let mean: f64 = IPV6_LENGTH_MIX.iter().map(|&(l, w)| f64::from(l) * f64::from(w) / 1e6).sum();
        assert!((42.0..43.5).contains(&mean), "mean IPv6 length {mean}");
    }

    #[test]
    fn shifting_clamps_and_merges() {
        let mix = [(8, 1), (24, 2), (30, 3)];
        assert_eq!(shifted(&mix, 6, 17, 32), [(17, 1), (30, 2), (32, 3)]);
        assert_eq!(shifted(&mix, 0, 24, 24), [(24, 6)]);
    }
}
