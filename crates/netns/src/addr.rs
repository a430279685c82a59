//! Test-address policy and MAC addresses.

use std::net::IpAddr;

use anyhow::{bail, Context, Result};

/// Whether `ip` lies in the ranges xnf may use: 198.18.0.0/15 (RFC 2544
/// benchmarking) or 2001:db8::/32 (RFC 3849 documentation).
pub fn is_test_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 198 && o[1] & 0xfe == 18
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            s[0] == 0x2001 && s[1] == 0x0db8
        }
    }
}

/// Checks that `addr` (an address like `198.18.0.1`, or a prefix like
/// `198.18.0.1/24`) lies entirely within 198.18.0.0/15 or 2001:db8::/32 and
/// returns the address part.
///
/// Every address the harness configures goes through this check, so a test
/// can never route to or impersonate a real network.
pub fn check_test_addr(addr: &str) -> Result<IpAddr> {
    let (ip, len) = match addr.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (addr, None),
    };
    let ip: IpAddr = ip.parse().with_context(|| format!("`{addr}` is not an IP address or prefix (expected e.g. 198.18.0.1/24 or 2001:db8::1/64)"))?;
    if !is_test_ip(ip) {
        bail!(
            "{addr} is not a test address: xnf only uses 198.18.0.0/15 and 2001:db8::/32 \
             so tests can never reach real networks; pick an address from those ranges"
        );
    }
    if let Some(len) = len {
        let (max, min) = if ip.is_ipv4() { (32, 15) } else { (128, 32) };
        let len: u8 = len.parse().ok().filter(|l| *l <= max).with_context(|| format!("{addr}: prefix length must be a number from 0 to {max}"))?;
        if len < min {
            bail!(
                "{addr} is wider than the test ranges (198.18.0.0/15, 2001:db8::/32): \
                 use a prefix length of at least /{min}"
            );
        }
    }
    Ok(ip)
}

/// Ethernet MAC addresses are xnf-packet's (`02:00:00:00:00:01` in text).
pub use xnf_packet::MacAddr as Mac;

/// Checks a Linux interface name: 1 to 15 bytes, no `/`, `:` or whitespace.
pub(crate) fn check_ifname(name: &str) -> Result<()> {
    let bad = name.is_empty() || name.len() > 15 || name == "." || name == ".." || name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
    if bad {
        bail!("`{name}` is not a valid interface name (1-15 bytes, no '/', ':' or spaces)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_ranges() {
        for good in ["198.18.0.1", "198.19.255.1", "2001:db8::1", "198.18.0.0/15", "2001:db8:1::/64"] {
            assert!(check_test_addr(good).is_ok(), "{good} should be accepted");
        }
        for bad in [
            "10.0.0.1",
            "8.8.8.8",
            "198.17.255.255",
            "198.20.0.0",
            "2001:db9::1",
            "fe80::1",
            "198.18.0.0/14",
            "2001:db8::/31",
            "198.18.0.1/33",
            "nonsense",
            "198.18.0.1/x",
        ] {
            assert!(check_test_addr(bad).is_err(), "{bad} should be rejected");
        }
        let msg = format!("{:#}", check_test_addr("10.0.0.1").unwrap_err());
        assert!(msg.contains("198.18.0.0/15"), "{msg}");
    }

    #[test]
    fn ifnames() {
        assert!(check_ifname("xnf123456789abc").is_ok());
        assert!(check_ifname("xnf123456789abcd").is_err());
        assert!(check_ifname("a b").is_err());
        assert!(check_ifname("").is_err());
    }
}
