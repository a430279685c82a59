//! Prefix lists in the data plane: each list slot holds an LPM trie of the
//! list, or, for a big list, its IPv4 part as a bitmap of /24s with a leaf
//! per /24 that has longer prefixes, and only its IPv6 part in the trie
//! (filter.bpf.c, `list_bits`, says why). A slot is filled only while the
//! live rules do not name it, so a frame never meets half a list.

use std::os::fd::{AsFd, AsRawFd};

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use ipnet::IpNet;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use xnf_core::maps::{as_bytes, delete_if_present};

use crate::program::FilterMaps;
use crate::skel::filter::types;

/// Entries one list may hold (the LPM trie template's limit).
pub const LIST_MAX: u32 = 1 << 23;
/// A list with at least this many IPv4 prefixes gets the bitmap (4 MiB
/// a list, whatever its size; a trie of fewer is a few cache lines deep).
pub const BITMAP_FROM: usize = 1024;
/// Words of a bitmap: 2 bits for each of the 2^24 /24s.
const BITS_WORDS: u32 = types::xnf_filter_limits::XNF_FILTER_BITS_WORDS.0;

/// A list's entries as the LPM trie keys them.
pub fn lpm_key(net: &IpNet) -> Vec<u8> {
    let mut k = types::xnf_filter_lpm_key::default();
    match net {
        IpNet::V4(n) => {
            k.family = 4;
            k.prefixlen = 8 + u32::from(n.prefix_len());
            k.addr[..4].copy_from_slice(&n.network().octets());
        }
        IpNet::V6(n) => {
            k.family = 6;
            k.prefixlen = 8 + u32::from(n.prefix_len());
            k.addr.copy_from_slice(&n.network().octets());
        }
    }
    as_bytes(&k).to_vec()
}

/// Whether the data plane keeps a list of `v4` IPv4 prefixes (and any
/// IPv6 ones) as a bitmap too.
pub fn wants_bitmap(v4: usize) -> bool {
    v4 >= BITMAP_FROM
}

/// The bitmap of `nets`' IPv4 prefixes: for /24 i, bit 2i if a prefix of
/// /24 or shorter covers it, bit 2i+1 if a longer one lies within it; and
/// the leaves of the second kind: which of their addresses those cover.
pub fn bitmap(nets: &[IpNet]) -> (Vec<u64>, BTreeMap<u32, [u64; 4]>) {
    let mut words = vec![0u64; BITS_WORDS as usize];
    let mut leaves: BTreeMap<u32, [u64; 4]> = BTreeMap::new();
    let mut mark = |i: u32, bit: u64| words[(i >> 5) as usize] |= bit << ((i & 31) * 2);
    for n in nets.iter().filter_map(|n| if let IpNet::V4(n) = n { Some(n) } else { None }) {
        let first = u32::from(n.network());
        match n.prefix_len() {
            len @ 0..=24 => (first >> 8..(first >> 8) + (1u32 << (24 - len))).for_each(|i| mark(i, 1)),
            len => {
                mark(first >> 8, 2);
                let leaf = leaves.entry(first >> 8).or_default();
                for a in (first & 0xff)..(first & 0xff) + (1u32 << (32 - len)) {
                    leaf[(a >> 6) as usize] |= 1 << (a & 63);
                }
            }
        }
    }
    (words, leaves)
}

impl FilterMaps {
    /// Fills list slot `slot` with `nets` (the slot must be unused by the
    /// live rules), with a bitmap when the list is big.
    pub fn set_list(&self, slot: u32, nets: &[IpNet]) -> Result<()> {
        self.set_list_as(slot, nets, wants_bitmap(nets.iter().filter(|n| matches!(n, IpNet::V4(_))).count()))
    }

    /// [`set_list`](Self::set_list) with the bitmap or without it, whatever
    /// the list's size (the tests take both paths with small lists).
    pub fn set_list_as(&self, slot: u32, nets: &[IpNet], with_bitmap: bool) -> Result<()> {
        let key = slot.to_ne_bytes();
        let mut in_trie: Vec<IpNet> = nets.to_vec();
        if with_bitmap {
            // The leaves before the bitmap that sends frames to them.
            let (words, leaves) = bitmap(nets);
            let fd = |m: &MapHandle| (m.as_fd().as_raw_fd() as u32).to_ne_bytes();
            let leaves = new_leaves(&leaves)?;
            self.list_leaves.update(&key, &fd(&leaves), MapFlags::ANY).context("switching a prefix list's leaves")?;
            let bits = new_bitmap(&words)?;
            self.list_bits.update(&key, &fd(&bits), MapFlags::ANY).context("switching a prefix list's bitmap")?;
            in_trie.retain(|n| matches!(n, IpNet::V6(_)));
        } else {
            delete_if_present(&self.list_bits, &key)?;
            delete_if_present(&self.list_leaves, &key)?;
        }
        let trie = new_trie(&in_trie)?;
        let fd = trie.as_fd().as_raw_fd() as u32;
        self.lists.update(&key, &fd.to_ne_bytes(), MapFlags::ANY).context("switching a prefix list slot")
    }

    pub fn clear_list(&self, slot: u32) -> Result<()> {
        delete_if_present(&self.list_bits, &slot.to_ne_bytes())?;
        delete_if_present(&self.list_leaves, &slot.to_ne_bytes())?;
        delete_if_present(&self.lists, &slot.to_ne_bytes())
    }

    /// Whether list slot `slot` holds a list of `v4` IPv4 prefixes in the
    /// form this build gives it (a state from a build without bitmaps has
    /// none: the list is filled again).
    pub fn list_ready(&self, slot: u32, v4: usize) -> bool {
        let used = |m: &MapHandle| m.lookup(&slot.to_ne_bytes(), MapFlags::ANY).ok().flatten().is_some();
        used(&self.lists) && (!wants_bitmap(v4) || (used(&self.list_bits) && used(&self.list_leaves)))
    }
}

/// A new inner map for a list slot, filled with the entries laid end to
/// end in `keys` and `values` in batches; `per_entry`: kernels without
/// batched updates of this map type get one update per entry.
fn new_map(
    ty: MapType,
    name: &str,
    (key_size, value_size, max): (u32, u32, u32),
    flags: u32,
    (keys, values): (&[u8], &[u8]),
    per_entry: bool,
) -> Result<MapHandle> {
    let opts = libbpf_sys::bpf_map_create_opts { sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _, map_flags: flags, ..Default::default() };
    let map = MapHandle::create(ty, Some(name), key_size, value_size, max, &opts).with_context(|| format!("creating {name} for a prefix list"))?;
    let (ks, vs) = (key_size as usize, value_size as usize);
    for (k, v) in keys.chunks(ks * 65536).zip(values.chunks(vs * 65536)) {
        map.update_batch(k, v, (k.len() / ks) as u32, MapFlags::ANY, MapFlags::ANY)
            .or_else(|e| if per_entry { k.chunks(ks).zip(v.chunks(vs)).try_for_each(|(kk, vv)| map.update(kk, vv, MapFlags::ANY)) } else { Err(e) })
            .with_context(|| format!("filling {name} of a prefix list"))?;
    }
    Ok(map)
}

/// The trie of `nets` (LPM tries took no batched updates before Linux 6.x).
fn new_trie(nets: &[IpNet]) -> Result<MapHandle> {
    let key_size = std::mem::size_of::<types::xnf_filter_lpm_key>() as u32;
    let keys: Vec<u8> = nets.iter().flat_map(lpm_key).collect();
    new_map(MapType::LpmTrie, "xnf_filter_list", (key_size, 1, LIST_MAX), libbpf_sys::BPF_F_NO_PREALLOC, (&keys, &vec![1u8; nets.len()]), true)
}

/// The bitmap holding `words` (an array starts zeroed: only the words with
/// a bit set are written).
fn new_bitmap(words: &[u64]) -> Result<MapHandle> {
    let set: Vec<u32> = (0..BITS_WORDS).filter(|&i| words[i as usize] != 0).collect();
    let keys: Vec<u8> = set.iter().flat_map(|i| i.to_ne_bytes()).collect();
    let values: Vec<u8> = set.iter().flat_map(|&i| words[i as usize].to_ne_bytes()).collect();
    new_map(MapType::Array, "xnf_filter_bits", (4, 8, BITS_WORDS), 0, (&keys, &values), false)
}

/// The leaves map holding `leaves` (room for one at least: a map has one).
fn new_leaves(leaves: &BTreeMap<u32, [u64; 4]>) -> Result<MapHandle> {
    let keys: Vec<u8> = leaves.keys().flat_map(|k| k.to_ne_bytes()).collect();
    let values: Vec<u8> = leaves.values().flatten().flat_map(|w| w.to_ne_bytes()).collect();
    let max = (leaves.len() as u32).max(1);
    new_map(MapType::Hash, "xnf_filter_leaf", (4, 32, max), libbpf_sys::BPF_F_NO_PREALLOC, (&keys, &values), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two(words: &[u64], a: [u8; 4]) -> u64 {
        let i = u32::from_be_bytes(a) >> 8;
        (words[(i >> 5) as usize] >> ((i & 31) * 2)) & 3
    }

    fn in_leaf(leaves: &BTreeMap<u32, [u64; 4]>, a: [u8; 4]) -> bool {
        let a = u32::from_be_bytes(a);
        leaves.get(&(a >> 8)).is_some_and(|l| l[(a as usize & 0xff) / 64] >> (a & 63) & 1 == 1)
    }

    #[test]
    fn short_prefixes_cover_their_24s_and_long_ones_mark_theirs_with_a_leaf() {
        let nets: Vec<IpNet> = ["198.18.0.0/23", "198.19.5.16/28", "198.19.5.0/24", "10.1.2.3/32"].iter().map(|s| s.parse().unwrap()).collect();
        let (w, leaves) = bitmap(&nets);
        assert_eq!(two(&w, [198, 18, 0, 9]), 1);
        assert_eq!(two(&w, [198, 18, 1, 255]), 1);
        assert_eq!(two(&w, [198, 18, 2, 0]), 0, "past the /23");
        assert_eq!(two(&w, [198, 19, 5, 1]), 3, "a /24 and a /28 within it");
        assert_eq!(two(&w, [10, 1, 2, 200]), 2, "a /32 in its /24");
        assert_eq!(w.iter().map(|x| x.count_ones()).sum::<u32>(), 5);
        assert_eq!(leaves.len(), 2);
        assert!(in_leaf(&leaves, [10, 1, 2, 3]) && !in_leaf(&leaves, [10, 1, 2, 4]));
        assert!((16..32).all(|i| in_leaf(&leaves, [198, 19, 5, i])));
        assert!(!in_leaf(&leaves, [198, 19, 5, 15]) && !in_leaf(&leaves, [198, 19, 5, 32]));
    }

    #[test]
    fn the_whole_space_a_whole_leaf_and_ipv6_alone() {
        let (all, leaves) = bitmap(&["0.0.0.0/0".parse().unwrap()]);
        assert!(all.iter().all(|&x| x == 0x5555_5555_5555_5555) && leaves.is_empty());
        let (_, leaves) = bitmap(&["198.18.7.0/25".parse().unwrap(), "198.18.7.128/25".parse().unwrap()]);
        assert_eq!(leaves[&(u32::from_be_bytes([198, 18, 7, 0]) >> 8)], [u64::MAX; 4]);
        let (v6, leaves) = bitmap(&["2001:db8::/32".parse().unwrap()]);
        assert!(v6.iter().all(|&x| x == 0) && leaves.is_empty());
        assert!(!wants_bitmap(BITMAP_FROM - 1) && wants_bitmap(BITMAP_FROM));
    }
}
