use std::net::{IpAddr, Ipv4Addr};

use super::*;

/// `n` backends 10.0.x.y with weight 1, keyed by address.
fn backends(n: u32) -> Vec<(Vec<u8>, u32)> {
    (0..n).map(|i| (addr_key(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))), 1)).collect()
}

fn counts(table: &[u32], n: usize) -> Vec<usize> {
    let mut c = vec![0; n];
    table.iter().filter(|&&e| e != NO_BACKEND).for_each(|&e| c[e as usize] += 1);
    c
}

/// FNV-1a over the table's little-endian bytes: a fingerprint to pin.
fn fingerprint(table: &[u32]) -> u64 {
    table.iter().flat_map(|e| e.to_le_bytes()).fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// A change of hash, keys or fill order changes every table in the field:
/// several instances behind ECMP would disagree during an upgrade. These
/// values are pinned so that such a change is deliberate.
#[test]
fn hash_and_tables_are_pinned() {
    assert_eq!(siphash13(OFFSET_KEY.0, OFFSET_KEY.1, &[198, 18, 1, 1]), PINNED_HASH);
    let b: Vec<(Vec<u8>, u32)> = ["198.18.1.1", "198.18.1.2", "2001:db8::7"].iter().map(|a| (addr_key(a.parse().unwrap()), 1)).collect();
    assert_eq!(build(&b, 13).unwrap(), PINNED_13);
    let weighted: Vec<(Vec<u8>, u32)> = backends(20).into_iter().enumerate().map(|(i, (k, _))| (k, i as u32 % 4)).collect();
    assert_eq!(fingerprint(&build(&weighted, 1009).unwrap()), PINNED_FINGERPRINT);
}

const PINNED_HASH: u64 = 0x9851_1e34_4162_309e;
const PINNED_13: [u32; 13] = [2, 2, 0, 2, 0, 0, 1, 1, 1, 1, 0, 2, 2];
const PINNED_FINGERPRINT: u64 = 0xa44d_4e1e_3d29_3627;

#[test]
fn primes_and_sizes() {
    for p in [2, 3, 5, 13, 251, 65_537, 655_373, 1_000_003] {
        assert!(is_prime(p), "{p}");
    }
    for n in [0, 1, 4, 9, 65_536, 655_371, 1_000_001, 999_999] {
        assert!(!is_prime(n), "{n}");
    }
    assert_eq!(next_prime(65_536), Some(65_537));
    assert_eq!(next_prime(100_000), Some(100_003));
    assert_eq!(next_prime(u32::MAX), None);
    assert!(is_prime(MAX_TABLE_SIZE) && is_prime(DEFAULT_TABLE_SIZE));
    assert_eq!(check_size(65_536).unwrap_err().to_string(), "65536 is not prime (try 65537)");
    assert_eq!(check_size(1_000_033).unwrap_err().to_string(), "1000033 is beyond 1000003");
    assert!(build(&backends(3), 100).is_err());
    let dup = vec![(vec![1u8], 1), (vec![2], 1), (vec![1], 3)];
    assert_eq!(build(&dup, 13).unwrap_err().to_string(), "backend key [01] is given twice");
}

#[test]
fn permutations_cover_the_table() {
    for (key, size) in [(&b"a"[..], 13), (b"backend", 65_537), (b"", 2)] {
        let (offset, skip) = offset_skip(key, size);
        assert!(offset < size && (1..size.max(2)).contains(&skip), "{offset} {skip}");
    }
    // Offset and skip are independent hashes: not the same numbers.
    let same = (0..1000u32).filter(|i| {
        let (o, s) = offset_skip(&i.to_le_bytes(), 65_537);
        o + 1 == s
    });
    assert!(same.count() < 3);
}

#[test]
fn equal_weights_share_within_one_entry() {
    for (n, size) in [(1, 13), (7, 251), (100, 10_007), (1000, 65_537)] {
        let t = build(&backends(n), size).unwrap();
        assert!(t.iter().all(|&e| e < n));
        let c = counts(&t, n as usize);
        let ideal = f64::from(size) / f64::from(n);
        assert!(c.iter().all(|&x| (x as f64 - ideal).abs() < 1.0), "{n} over {size}: {:?}", (c.iter().min(), c.iter().max()));
    }
}

#[test]
fn shares_follow_weights() {
    // Weights 1..=10 over 100 backends, M ≥ 100·N: each share within 1 % of
    // its weight's share (the paper's balance, and then some).
    let b: Vec<(Vec<u8>, u32)> = backends(100).into_iter().enumerate().map(|(i, (k, _))| (k, 1 + i as u32 % 10)).collect();
    let size = 10_007;
    let t = build(&b, size).unwrap();
    let total: u32 = b.iter().map(|x| x.1).sum();
    for (i, c) in counts(&t, b.len()).into_iter().enumerate() {
        let ideal = f64::from(size) * f64::from(b[i].1) / f64::from(total);
        assert!((c as f64 / ideal - 1.0).abs() < 0.01 || (c as f64 - ideal).abs() < 1.0, "backend {i}: {c} entries, ideal {ideal:.1}");
    }
    // Extreme weights still fill the table and keep the small one.
    let b = vec![(vec![1u8], 65_535), (vec![2], 1)];
    let c = counts(&build(&b, 65_537).unwrap(), 2);
    assert_eq!(c, vec![65_536, 1]);
}

#[test]
fn drained_backends_get_nothing_and_others_stay() {
    let before = build(&backends(100), 10_007).unwrap();
    let mut b = backends(100);
    b[42].1 = 0;
    let after = build(&b, 10_007).unwrap();
    assert_eq!(counts(&after, 100)[42], 0);
    let kept = before.iter().filter(|&&e| e != 42).count();
    let moved = before.iter().zip(&after).filter(|(o, n)| **o != 42 && o != n).count();
    assert!((moved as f64) < 0.02 * kept as f64, "{moved} of {kept} moved");
}

#[test]
fn nothing_to_place_leaves_every_entry_empty() {
    assert_eq!(build::<Vec<u8>>(&[], 13).unwrap(), vec![NO_BACKEND; 13]);
    let drained: Vec<_> = backends(5).into_iter().map(|(k, _)| (k, 0)).collect();
    assert_eq!(build(&drained, 13).unwrap(), vec![NO_BACKEND; 13]);
}

/// The table depends on the set of backends, not on their order: two
/// instances given the same backends in another order agree on every flow.
#[test]
fn order_does_not_matter() {
    let b: Vec<(Vec<u8>, u32)> = backends(50).into_iter().enumerate().map(|(i, (k, _))| (k, 1 + i as u32 % 3)).collect();
    let t1 = build(&b, 4099).unwrap();
    let mut shuffled = b.clone();
    shuffled.reverse();
    shuffled.swap(3, 17);
    let t2 = build(&shuffled, 4099).unwrap();
    let who = |t: &[u32], b: &[(Vec<u8>, u32)], e: usize| b[t[e] as usize].0.clone();
    assert!((0..4099).all(|e| who(&t1, &b, e) == who(&t2, &shuffled, e)));
}

/// More backends than entries: the table fills, some backends get nothing.
#[test]
fn small_tables_fill() {
    let t = build(&backends(20), 7).unwrap();
    assert!(t.iter().all(|&e| e < 20));
    let c = counts(&t, 20);
    assert_eq!(c.iter().sum::<usize>(), 7);
    assert!(c.iter().all(|&x| x <= 1));
}
