//! The blocklist of the second scenario: N prefixes shaped like the BGP
//! table (`--blocklist-kind prefixes`, the default), or N distinct single
//! addresses (`addresses`), for the filters that match exact addresses
//! only (xdp-filter); written to a file for xnf, kept as a [`RouteSet`]
//! for nftables and xdp-filter.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use ipnet::{IpNet, Ipv4Net};
use xnf_netns::{RouteSet, MAX_SYNTHETIC, V4_SLICE_MIN};

/// Seed of the synthetic blocklist: the same size gives the same list.
const SEED: u64 = 0x0066_6c6f_6f64; // "flood" in ASCII

/// What a blocklist's entries are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BlocklistKind {
    /// Prefixes with the BGP table's length mix, half of them nested
    /// (xnf: an LPM list; nftables: an interval set).
    #[default]
    Prefixes,
    /// Distinct /32 addresses (xnf: a list of /32s; nftables: a plain
    /// address set; xdp-filter-ip: its address map).
    Addresses,
}

/// A blocklist in a file of its own (removed when dropped).
pub struct Blocklist {
    pub kind: BlocklistKind,
    /// The entries; with `Addresses`, every one a /32.
    pub prefixes: RouteSet,
    pub path: PathBuf,
}

impl Drop for Blocklist {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Blocklist {
    /// A list of `size` entries of `kind` written to a file in `dir` (one
    /// prefix per line, xnf's list format), and up to `sources` flood
    /// sources in distinct entries of its slice in the lab range. With
    /// addresses, a list smaller than `sources` gives that many sources.
    pub fn new(kind: BlocklistKind, size: u64, sources: u32, dir: &Path) -> Result<(Blocklist, Vec<IpAddr>)> {
        let n = usize::try_from(size).context("--blocklist too large")?;
        let (prefixes, sources) = match kind {
            BlocklistKind::Prefixes => {
                let prefixes = RouteSet::synthetic_v4(n, SEED).with_context(|| format!("--blocklist {size}"))?;
                let sources = prefixes
                    .lookup_targets(sources as usize)
                    .with_context(|| format!("--sources {sources}: not that many prefixes of the list lie in the lab range; use fewer sources"))?;
                (prefixes, sources)
            }
            BlocklistKind::Addresses => {
                let (prefixes, in_lab) = addresses(n, sources as usize)?;
                let sources = prefixes.lookup_targets((sources as usize).min(in_lab))?;
                (prefixes, sources)
            }
        };
        let path = dir.join(format!("blocklist-{size}.txt"));
        let mut text = String::with_capacity(n * 19);
        for p in prefixes.prefixes() {
            let _ = writeln!(text, "{p}");
        }
        std::fs::write(&path, text).with_context(|| format!("writing the blocklist {}", path.display()))?;
        Ok((Blocklist { kind, prefixes, path }, sources))
    }

    /// The entries as addresses (with `Addresses`: every entry).
    pub fn addresses(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.prefixes.prefixes().iter().filter_map(|p| match p {
            IpNet::V4(p) if p.prefix_len() == 32 => Some(p.addr()),
            _ => None,
        })
    }
}

/// `n` distinct IPv4 addresses as /32s: a slice in the lab range
/// (198.18.16.0–198.19.255.255, outside the links' 198.18.0.0/20), where
/// the flood's sources are drawn from, of `min(n, max(4096, sources))`
/// addresses, the rest spread over global unicast space as a real list's
/// would be (never 0/8, 10/8, 127/8, 169.254/16, 172.16/12, 192.168/16,
/// 224/3 nor the lab range: what `RouteSet::from_prefixes` accepts, which
/// checks them). The same `n` and `sources` give the same list. Returns
/// the list (sorted) and the size of its lab slice.
fn addresses(n: usize, sources: usize) -> Result<(RouteSet, usize)> {
    ensure!((1..=MAX_SYNTHETIC).contains(&n), "--blocklist {n}: a list of addresses holds 1 to {MAX_SYNTHETIC}");
    const LAB_FIRST: u32 = u32::from_be_bytes([198, 18, 16, 0]);
    const LAB_LAST: u32 = u32::from_be_bytes([198, 19, 255, 255]);
    const NOT_GLOBAL: [(u32, u8); 8] = [
        (0x0000_0000, 8),  // 0/8
        (0x0a00_0000, 8),  // 10/8
        (0x7f00_0000, 8),  // 127/8
        (0xa9fe_0000, 16), // 169.254/16
        (0xac10_0000, 12), // 172.16/12
        (0xc0a8_0000, 16), // 192.168/16
        (0xe000_0000, 3),  // 224/3
        (0xc612_0000, 15), // 198.18/15: the lab's, only the slice's addresses
    ];
    let global = |a: u32| !NOT_GLOBAL.iter().any(|&(net, len)| a >> (32 - len) == net >> (32 - len));
    let in_lab = n.min(V4_SLICE_MIN.max(sources)).min((LAB_LAST - LAB_FIRST + 1) as usize);
    let mut rng = fastrand::Rng::with_seed(SEED ^ n as u64);
    let mut seen: HashSet<u32> = HashSet::with_capacity(n);
    while seen.len() < in_lab {
        seen.insert(rng.u32(LAB_FIRST..=LAB_LAST));
    }
    while seen.len() < n {
        let a = rng.u32(..);
        if global(a) {
            seen.insert(a);
        }
    }
    let mut all: Vec<u32> = seen.into_iter().collect();
    all.sort_unstable();
    let prefixes = all.into_iter().map(|a| IpNet::V4(Ipv4Net::new(Ipv4Addr::from(a), 32).expect("/32 is a valid length"))).collect();
    Ok((RouteSet::from_prefixes(prefixes)?, in_lab))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_host_routes_with_a_lab_slice() {
        let (set, in_lab) = addresses(20_000, 1024).unwrap();
        assert_eq!((set.len(), in_lab), (20_000, V4_SLICE_MIN));
        assert!(set.prefixes().iter().all(|p| p.prefix_len() == 32));
        assert!(set.prefixes().windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
        let lab = set.prefixes().iter().filter(|p| xnf_netns::is_test_ip(p.addr())).count();
        assert_eq!(lab, V4_SLICE_MIN);
        assert_eq!(addresses(20_000, 1024).unwrap().0, set, "the same list for the same size");
        // Fewer addresses than sources: all in the lab range.
        let (small, in_lab) = addresses(1000, 1024).unwrap();
        assert_eq!((small.len(), in_lab), (1000, 1000));
        assert!(addresses(0, 1).is_err());
    }

    #[test]
    fn a_list_of_addresses_holds_the_sources_and_is_written_one_per_line() {
        let dir = std::env::temp_dir().join(format!("xnf-filter-blocklist-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (b, sources) = Blocklist::new(BlocklistKind::Addresses, 1000, 1024, &dir).unwrap();
        assert_eq!(sources.len(), 1000, "a list smaller than --sources: every address a source");
        let text = std::fs::read_to_string(&b.path).unwrap();
        assert_eq!(text.lines().count(), 1000);
        assert!(text.lines().all(|l| l.ends_with("/32")), "{text}");
        let addrs: HashSet<IpAddr> = b.addresses().map(IpAddr::V4).collect();
        assert!(sources.iter().all(|s| addrs.contains(s) && xnf_netns::is_test_ip(*s)));
        let (_, few) = Blocklist::new(BlocklistKind::Addresses, 50_000, 64, &dir).unwrap();
        assert_eq!(few.len(), 64);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
