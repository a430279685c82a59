//! Traffic classes: what `--match` means for every network function that
//! selects traffic (the chain classifier, the AF_XDP selector). The user's
//! syntax ([`MatchSpec`]), the checked class ([`Class`]) and its data-plane
//! form (`struct xnf_match`, `bpf/include/xnf/classify.h`).

use std::net::IpAddr;

use anyhow::{bail, ensure, Context, Result};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::abi::types::{xnf_match, xnf_match_flag as flag};

/// Parses an IPv4 or IPv6 prefix such as `198.18.0.0/15`; a bare address is
/// a host prefix. Host bits must be zero: `198.18.0.1/15` is refused rather
/// than silently widened.
pub fn parse_prefix(s: &str) -> Result<IpNet> {
    let net = match s.parse::<IpNet>() {
        Ok(n) => n,
        Err(_) => IpNet::from(
            s.parse::<IpAddr>()
                .ok()
                .filter(|_| !s.contains('/'))
                .with_context(|| format!("{s:?} is not an IP prefix (like 198.18.0.0/15 or 2001:db8::/32)"))?,
        ),
    };
    ensure!(net.trunc() == net, "{s:?} has host bits set (did you mean {}?)", net.trunc());
    Ok(net)
}

/// Parses `N` or `LO-HI` as an inclusive port range.
/// An IP protocol by name (`tcp`, `udp`, `icmp`, `icmpv6`, `gre`, `esp`,
/// `sctp`, any case) or number.
pub fn parse_proto(s: &str) -> Result<u8> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmpv6" | "ipv6-icmp" => 58,
        "gre" => 47,
        "esp" => 50,
        "sctp" => 132,
        n => n.parse().map_err(|_| anyhow::anyhow!("{s:?} is not a protocol (tcp, udp, icmp, icmpv6, gre, esp, sctp or 0-255)"))?,
    })
}

pub fn parse_port_range(s: &str) -> Result<(u16, u16)> {
    let p = |x: &str| x.trim().parse::<u16>().with_context(|| format!("{s:?} is not a port or port range (like 53 or 1024-2047)"));
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (p(a)?, p(b)?),
        None => {
            let v = p(s)?;
            (v, v)
        }
    };
    if lo > hi {
        bail!("port range {s:?} is empty (low end above high end)");
    }
    Ok((lo, hi))
}

/// One class of traffic. Fields left `None` match anything; without `vid`
/// only untagged frames match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Class {
    pub vid: Option<u16>,
    /// Only IPv4 (`Some(false)`) or only IPv6 (`Some(true)`).
    pub ipv6: Option<bool>,
    pub proto: Option<u8>,
    pub sport: Option<(u16, u16)>,
    pub dport: Option<(u16, u16)>,
    pub src: Option<IpNet>,
    pub dst: Option<IpNet>,
}

/// A prefix as the data plane holds it (`struct xnf_match`, the filter's
/// rules): network and mask as four network-order words, IPv4 in word 0.
pub fn prefix_words(p: &IpNet) -> ([u32; 4], [u32; 4]) {
    let (mut net, mut mask) = ([0u8; 16], [0u8; 16]);
    match p {
        IpNet::V4(n) => {
            net[..4].copy_from_slice(&n.network().octets());
            mask[..4].copy_from_slice(&n.netmask().octets());
        }
        IpNet::V6(n) => {
            net = n.network().octets();
            mask = n.netmask().octets();
        }
    }
    let w = |b: &[u8; 16]| std::array::from_fn(|i| u32::from_ne_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes")));
    (w(&net), w(&mask))
}

impl Class {
    /// The class as `struct xnf_match`.
    pub fn to_raw(&self) -> Result<xnf_match> {
        let af = |v6: bool| if v6 { libc::AF_INET6 as u8 } else { libc::AF_INET as u8 };
        let mut r = xnf_match::default();
        let mut family = self.ipv6.map(af);
        for p in [self.src, self.dst].into_iter().flatten() {
            let f = af(matches!(p, IpNet::V6(_)));
            ensure!(family.is_none_or(|x| x == f), "a class cannot match IPv4 and IPv6 prefixes at once");
            family = Some(f);
        }
        r.family = family.unwrap_or(0);
        let mut set = |f: flag| r.flags |= f.0 as u16;
        if let Some(v) = self.vid {
            ensure!((1..4095).contains(&v), "VLAN ID {v} is not 1..4094");
            set(flag::XNF_M_VLAN);
        }
        if self.proto.is_some() {
            set(flag::XNF_M_PROTO);
        }
        if let Some((lo, hi)) = self.sport {
            ensure!(lo <= hi, "source port range {lo}-{hi} is empty");
            set(flag::XNF_M_SPORT);
        }
        if let Some((lo, hi)) = self.dport {
            ensure!(lo <= hi, "destination port range {lo}-{hi} is empty");
            set(flag::XNF_M_DPORT);
        }
        if self.src.is_some() {
            set(flag::XNF_M_SRC);
        }
        if self.dst.is_some() {
            set(flag::XNF_M_DST);
        }
        r.vid = self.vid.unwrap_or(0);
        r.proto = self.proto.unwrap_or(0);
        (r.sport_lo, r.sport_hi) = self.sport.unwrap_or_default();
        (r.dport_lo, r.dport_hi) = self.dport.unwrap_or_default();
        if let Some(p) = &self.src {
            (r.src, r.src_mask) = prefix_words(p);
        }
        if let Some(p) = &self.dst {
            (r.dst, r.dst_mask) = prefix_words(p);
        }
        Ok(r)
    }
}

/// A class as users write it (`--match`, TOML). Unset fields match
/// anything; without `vlan` only untagged frames match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// udp, tcp, icmp, icmpv6 or a protocol number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// ipv4 or ipv6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
}

pub const MATCH_KEYS: &str = "src, dst, proto, sport, dport, vlan, family";

impl MatchSpec {
    /// Parses `key=value` pairs separated by commas or spaces, such as
    /// `dst=198.18.16.0/24,proto=udp,dport=5000-5001`; `all` matches everything.
    pub fn parse(s: &str) -> Result<MatchSpec> {
        let mut m = MatchSpec::default();
        let s = s.trim();
        if s == "all" || s == "any" {
            return Ok(m);
        }
        for part in s.split([',', ' ']).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').with_context(|| format!("match {s:?}: {part:?} is not key=value (keys: {MATCH_KEYS})"))?;
            let v = v.to_string();
            let slot = match k {
                "src" => &mut m.src,
                "dst" => &mut m.dst,
                "proto" => &mut m.proto,
                "sport" => &mut m.sport,
                "dport" => &mut m.dport,
                "family" => &mut m.family,
                "vlan" => {
                    m.vlan = Some(v.parse().with_context(|| format!("match {s:?}: vlan={v} is not a VLAN ID"))?);
                    continue;
                }
                _ => bail!("match {s:?}: unknown key {k:?} (keys: {MATCH_KEYS})"),
            };
            ensure!(slot.is_none(), "match {s:?}: {k} given twice");
            *slot = Some(v);
        }
        m.class().with_context(|| format!("match {s:?}"))?;
        Ok(m)
    }

    /// The checked class.
    pub fn class(&self) -> Result<Class> {
        let prefix = |v: &Option<String>| v.as_deref().map(parse_prefix).transpose();
        let proto = self.proto.as_deref().map(parse_proto).transpose().map_err(|e| anyhow::anyhow!("proto: {e}"))?;
        let ipv6 = match self.family.as_deref() {
            None => None,
            Some("ipv4") => Some(false),
            Some("ipv6") => Some(true),
            Some(f) => bail!("family {f:?}: use ipv4 or ipv6"),
        };
        let ports = |v: &Option<String>| v.as_deref().map(parse_port_range).transpose();
        let (sport, dport) = (ports(&self.sport)?, ports(&self.dport)?);
        if (sport.is_some() || dport.is_some()) && !matches!(proto, Some(6 | 17)) {
            bail!("ports need proto=udp or proto=tcp");
        }
        let class = Class { vid: self.vlan, ipv6, proto, sport, dport, src: prefix(&self.src)?, dst: prefix(&self.dst)? };
        if let Some(v) = self.vlan {
            ensure!((1..=4094).contains(&v), "vlan={v}: a VLAN ID is 1..4094");
        }
        for p in [class.src, class.dst].into_iter().flatten() {
            if let Some(v6) = ipv6 {
                ensure!(v6 == matches!(p, IpNet::V6(_)), "family={} but prefix {p} is not", self.family.as_deref().unwrap_or(""));
            }
        }
        if let (Some(s), Some(d)) = (class.src, class.dst) {
            ensure!(matches!(s, IpNet::V4(_)) == matches!(d, IpNet::V4(_)), "src {s} and dst {d} are of different IP versions");
        }
        Ok(class)
    }
}

impl std::fmt::Display for MatchSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        let mut add = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                parts.push(format!("{k}={v}"));
            }
        };
        add("family", &self.family);
        add("vlan", &self.vlan.map(|v| v.to_string()));
        add("src", &self.src);
        add("dst", &self.dst);
        add("proto", &self.proto);
        add("sport", &self.sport);
        add("dport", &self.dport);
        if parts.is_empty() {
            write!(f, "all")
        } else {
            write!(f, "{}", parts.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_refuse_host_bits() {
        let p = parse_prefix("198.18.0.0/15").unwrap();
        assert!(p.contains(&"198.19.255.1".parse::<IpAddr>().unwrap()));
        assert!(!p.contains(&"198.20.0.1".parse::<IpAddr>().unwrap()));
        assert!(!p.contains(&"2001:db8::1".parse::<IpAddr>().unwrap()));
        let p6 = parse_prefix("2001:db8:1::/48").unwrap();
        assert!(p6.contains(&"2001:db8:1:ffff::1".parse::<IpAddr>().unwrap()));
        assert!(!p6.contains(&"2001:db8:2::1".parse::<IpAddr>().unwrap()));
        assert_eq!(parse_prefix("198.18.0.7").unwrap().prefix_len(), 32);
        assert!(parse_prefix("198.18.0.1/15").unwrap_err().to_string().contains("host bits"));
        assert!(parse_prefix("198.18.0.0/33").is_err());
        assert!(parse_prefix("nonsense").is_err());
        let odd = parse_prefix("2001:db8:8000::/33").unwrap();
        assert!(odd.contains(&"2001:db8:ffff::1".parse::<IpAddr>().unwrap()));
        assert!(!odd.contains(&"2001:db8:7fff::1".parse::<IpAddr>().unwrap()));
    }

    #[test]
    fn prefix_words_are_network_order_with_ipv4_in_word_0() {
        let (net, mask) = prefix_words(&parse_prefix("198.18.0.0/15").unwrap());
        assert_eq!(net[0].to_ne_bytes(), [198, 18, 0, 0]);
        assert_eq!(mask[0].to_ne_bytes(), [255, 254, 0, 0]);
        assert_eq!(&net[1..], &[0, 0, 0]);
        let (net, mask) = prefix_words(&parse_prefix("2001:db8:8000::/33").unwrap());
        assert_eq!(net[0].to_ne_bytes(), [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(net[1].to_ne_bytes(), [0x80, 0, 0, 0]);
        assert_eq!(mask[0], u32::MAX);
        assert_eq!(mask[1].to_ne_bytes(), [0x80, 0, 0, 0]);
        assert_eq!(mask[2], 0);
    }

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("53").unwrap(), (53, 53));
        assert_eq!(parse_port_range("1024-2047").unwrap(), (1024, 2047));
        assert!(parse_port_range("9-1").is_err());
        assert!(parse_port_range("70000").is_err());
    }

    #[test]
    fn classes_refuse_mixed_families_and_bad_vlans() {
        let c = Class { src: Some(parse_prefix("198.18.0.0/15").unwrap()), dst: Some(parse_prefix("2001:db8::/32").unwrap()), ..Default::default() };
        assert!(c.to_raw().is_err());
        assert!(Class { vid: Some(4095), ..Default::default() }.to_raw().is_err());
    }
}
