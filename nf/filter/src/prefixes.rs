//! Prefix lists in the format of public blocklists (Spamhaus DROP,
//! FireHOL, the output of `ipset save` cut to its addresses): one IPv4 or
//! IPv6 prefix or address per line; `#` or `;` starts a comment, anywhere
//! on a line; blank lines are skipped. A bad line fails the whole list with
//! its file and line — a list is loaded whole or not at all.

use std::path::Path;

use anyhow::{Context, Result};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use xnf_core::class::parse_prefix;

/// A prefix list, split by family, sorted, without duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixList {
    pub v4: Vec<Ipv4Net>,
    pub v6: Vec<Ipv6Net>,
}

impl PrefixList {
    /// Parses a list's text; `origin` names it in errors (a file name).
    pub fn parse(text: &str, origin: &str) -> Result<PrefixList> {
        let mut list = PrefixList::default();
        for (i, line) in text.lines().enumerate() {
            let entry = line.split(['#', ';']).next().unwrap_or("").trim();
            if entry.is_empty() {
                continue;
            }
            // Some lists follow the prefix with fields of their own
            // ("192.0.2.0/24 SBL123"): the first word is the prefix.
            let word = entry.split_whitespace().next().unwrap_or(entry);
            match parse_prefix(word).with_context(|| format!("{origin}: line {}", i + 1))? {
                IpNet::V4(n) => list.v4.push(n),
                IpNet::V6(n) => list.v6.push(n),
            }
        }
        list.v4.sort_unstable();
        list.v4.dedup();
        list.v6.sort_unstable();
        list.v6.dedup();
        Ok(list)
    }

    /// Reads and parses the list in `path`.
    pub fn load(path: &Path) -> Result<PrefixList> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading prefix list {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Every entry, IPv4 first.
    pub fn nets(&self) -> Vec<IpNet> {
        self.v4.iter().copied().map(IpNet::V4).chain(self.v6.iter().copied().map(IpNet::V6)).collect()
    }

    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `addr` lies in a prefix of the list (longest-prefix match
    /// would give the same answer: every entry means "in the list").
    pub fn contains(&self, addr: std::net::IpAddr) -> bool {
        match addr {
            std::net::IpAddr::V4(a) => self.v4.iter().any(|n| n.contains(&a)),
            std::net::IpAddr::V6(a) => self.v6.iter().any(|n| n.contains(&a)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocklist_format_with_comments_fields_and_duplicates() {
        let text =
            "; Spamhaus DROP List\n# and a hash comment\n\n198.18.0.0/24 ; SBL1\n198.18.0.0/24\n2001:db8::/32   # doc\n198.19.1.7\n192.0.2.0/24 SBL123 extra\n";
        let l = PrefixList::parse(text, "drop.txt").unwrap();
        assert_eq!(l.v4.iter().map(|n| n.to_string()).collect::<Vec<_>>(), ["192.0.2.0/24", "198.18.0.0/24", "198.19.1.7/32"]);
        assert_eq!(l.v6.iter().map(|n| n.to_string()).collect::<Vec<_>>(), ["2001:db8::/32"]);
        assert!(l.contains("198.18.0.99".parse().unwrap()));
        assert!(!l.contains("198.18.1.1".parse().unwrap()));
    }

    #[test]
    fn a_bad_line_fails_the_list_naming_file_and_line() {
        for (text, line, why) in [
            ("198.18.0.0/24\n198.18.0.1/24\n", "line 2", "host bits"),
            ("# x\n\n198.18.0.0/33\n", "line 3", "not an IP prefix"),
            ("example.com\n", "line 1", "not an IP prefix"),
        ] {
            let e = format!("{:#}", PrefixList::parse(text, "bl.txt").unwrap_err());
            assert!(e.contains("bl.txt") && e.contains(line) && e.contains(why), "{e}");
        }
    }

    #[test]
    fn a_million_entries_parse() {
        let mut text = String::with_capacity(20 << 20);
        for i in 0..1_000_000u32 {
            let a = std::net::Ipv4Addr::from(0xC612_0000u32.wrapping_add(i << 4) | 0x8000_0000);
            text.push_str(&format!("{a}/28\n"));
        }
        let l = PrefixList::parse(&text, "big").unwrap();
        assert_eq!(l.len(), 1_000_000);
    }
}
