//! Maglev lookup tables (Eisenbud et al., "Maglev: A Fast and Reliable
//! Software Network Load Balancer", NSDI 2016, §3.4), with weights.
//!
//! A table has `M` entries (M prime); the data plane sends a flow to the
//! backend in entry `hash(flow) % M`. Each backend walks its own permutation
//! of the entries, `(offset + j·skip) mod M`, and takes turns claiming the
//! next free entry of its permutation until the table is full. Because each
//! backend's preferences depend only on its own key, removing a backend
//! mostly hands its entries to others and leaves the rest where they were.
//!
//! **Weights.** Turns are scheduled in proportion to weight rather than
//! round-robin: a backend of weight `w` that has taken `t` turns is due at
//! virtual time `(2t + 1) / w` (Sainte-Laguë); the earliest due backend goes
//! next, ties to the smaller key. With equal weights this is exactly the
//! paper's round-robin; in general each backend ends within about one
//! entry of `M · w / Σw`. Weight 0 (drained) takes no turns, hence no
//! entries. The arithmetic is integer: no float rounding can differ
//! between machines.
//!
//! **Determinism.** Several xnf instances behind ECMP must build
//! byte-identical tables from the same configuration, so the hash is
//! SipHash-1-3 with fixed keys written below (not std's randomly keyed
//! hasher), backends are ordered by key before the fill (the table depends
//! on the set of backends, not on their order in a file), and nothing
//! depends on the platform's word size or byte order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::net::IpAddr;

use anyhow::{ensure, Result};

/// Table size when a service names none: the paper's small table.
pub const DEFAULT_TABLE_SIZE: u32 = 65_537;
/// Largest table size (a prime): 4 MB of `u32` entries per service. Going
/// from 65,537 to 655,373 entries cuts the collateral disruption of a
/// change about fourfold; beyond a million the memory grows faster than the
/// gain.
pub const MAX_TABLE_SIZE: u32 = 1_000_003;
/// What an entry holds when no backend takes new flows (every backend
/// drained, or none).
pub const NO_BACKEND: u32 = u32::MAX;

/// SipHash keys for a backend's offset and for its skip: two independent
/// hashes of the same key, as the paper asks. The ASCII of the names below,
/// little-endian; changing them changes every table (a pinned test checks).
const OFFSET_KEY: (u64, u64) = (u64::from_le_bytes(*b"xnf-lb-m"), u64::from_le_bytes(*b"aglev-of"));
const SKIP_KEY: (u64, u64) = (u64::from_le_bytes(*b"xnf-lb-m"), u64::from_le_bytes(*b"aglev-sk"));

/// Whether `n` is prime (trial division; `n` is at most a few million here).
pub fn is_prime(n: u32) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n.is_multiple_of(2) {
        return false;
    }
    let n = u64::from(n);
    (3..).step_by(2).take_while(|d| d * d <= n).all(|d| !n.is_multiple_of(d))
}

/// The smallest prime at least `n`, if it fits a `u32`: what to suggest
/// when a size is not prime.
pub fn next_prime(n: u32) -> Option<u32> {
    (n..=u32::MAX).find(|&p| is_prime(p))
}

/// Checks a table size: prime (so that every skip is coprime with it and
/// every permutation visits every entry) and at most [`MAX_TABLE_SIZE`].
pub fn check_size(size: u32) -> Result<()> {
    ensure!(size <= MAX_TABLE_SIZE, "{size} is beyond {MAX_TABLE_SIZE}");
    let hint = next_prime(size).map(|p| format!(" (try {p})")).unwrap_or_default();
    ensure!(is_prime(size), "{size} is not prime{hint}");
    Ok(())
}

/// SipHash-1-3 (Aumasson & Bernstein; the `siphasher` crate) of `data`
/// under the key `(k0, k1)`.
pub fn siphash13(k0: u64, k1: u64, data: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
    h.write(data);
    h.finish()
}

/// The key xnf lb hashes for a backend: its address's octets (4 for IPv4,
/// 16 for IPv6), so that a backend keeps its place in the table whatever
/// else changes in the file.
pub fn addr_key(addr: IpAddr) -> Vec<u8> {
    match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// A backend's permutation of a table of `size` entries: its first
/// preference (`offset`, 0..size) and its stride (`skip`, 1..size).
pub fn offset_skip(key: &[u8], size: u32) -> (u32, u32) {
    let h1 = siphash13(OFFSET_KEY.0, OFFSET_KEY.1, key);
    let h2 = siphash13(SKIP_KEY.0, SKIP_KEY.1, key);
    let m = u64::from(size);
    ((h1 % m) as u32, (h2 % (m - 1).max(1)) as u32 + 1)
}

/// One weighted backend during the fill: where it is in its permutation
/// and how many turns it has taken.
struct Turn {
    /// Position in the caller's list: what the table's entries hold.
    index: u32,
    /// Position in key order: breaks ties, so that order in a file does not
    /// matter.
    rank: u32,
    weight: u64,
    taken: u64,
    /// The next entry of its permutation to try.
    next: u32,
    skip: u32,
}

impl Turn {
    /// Due time `(2·taken + 1) / weight`, compared without division: both
    /// products stay below 2^53 (taken ≤ 10^6, weight < 2^32).
    fn due_cmp(&self, other: &Turn) -> Ordering {
        ((2 * self.taken + 1) * other.weight).cmp(&((2 * other.taken + 1) * self.weight))
    }
}

/// `BinaryHeap` pops its greatest element: the greatest turn is the one due
/// first, ties to the smaller rank.
impl Ord for Turn {
    fn cmp(&self, other: &Turn) -> Ordering {
        other.due_cmp(self).then(other.rank.cmp(&self.rank))
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Turn) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Turn {
    fn eq(&self, other: &Turn) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Turn {}

/// Builds the lookup table of `size` entries (prime, at most
/// [`MAX_TABLE_SIZE`]) over `backends` (key and weight). Entry `e` holds the
/// index in `backends` of the backend that flows hashing to `e` go to, or
/// [`NO_BACKEND`] if every weight is 0. Keys must be distinct.
///
/// Cost: O(M log N) for the schedule plus about M·ln M probes of the table
/// for the permutations, which are walked lazily rather than stored.
pub fn build<K: AsRef<[u8]>>(backends: &[(K, u32)], size: u32) -> Result<Vec<u32>> {
    check_size(size)?;
    ensure!(backends.len() < NO_BACKEND as usize, "{} backends is too many", backends.len());
    let key = |i: usize| backends[i].0.as_ref();
    let mut order: Vec<usize> = (0..backends.len()).collect();
    order.sort_by(|&a, &b| key(a).cmp(key(b)));
    if let Some(w) = order.windows(2).find(|w| key(w[0]) == key(w[1])) {
        anyhow::bail!("backend key {:02x?} is given twice", key(w[0]));
    }
    let mut heap: BinaryHeap<Turn> = order
        .iter()
        .enumerate()
        .filter(|&(_, &i)| backends[i].1 > 0)
        .map(|(rank, &i)| {
            let (offset, skip) = offset_skip(key(i), size);
            Turn { index: i as u32, rank: rank as u32, weight: u64::from(backends[i].1), taken: 0, next: offset, skip }
        })
        .collect();
    let mut table = vec![NO_BACKEND; size as usize];
    if heap.is_empty() {
        return Ok(table);
    }
    for _ in 0..size {
        // Changed in place; the heap restores its order when `t` drops.
        let mut t = heap.peek_mut().expect("a weighted backend");
        let mut e = t.next;
        while table[e as usize] != NO_BACKEND {
            e = step(e, t.skip, size);
        }
        table[e as usize] = t.index;
        t.next = step(e, t.skip, size);
        t.taken += 1;
    }
    Ok(table)
}

/// The entry after `e` in a permutation of stride `skip`: `(e + skip) mod size`
/// without a division (both are below `size`).
fn step(e: u32, skip: u32, size: u32) -> u32 {
    let n = e + skip;
    if n >= size {
        n - size
    } else {
        n
    }
}

#[cfg(test)]
mod tests;
