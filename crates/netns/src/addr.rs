//! Test-address policy and MAC addresses.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

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
    let ip: IpAddr = ip.parse().with_context(|| {
        format!("`{addr}` is not an IP address or prefix (expected e.g. 198.18.0.1/24 or 2001:db8::1/64)")
    })?;
    if !is_test_ip(ip) {
        bail!(
            "{addr} is not a test address: xnf only uses 198.18.0.0/15 and 2001:db8::/32 \
             so tests can never reach real networks; pick an address from those ranges"
        );
    }
    if let Some(len) = len {
        let (max, min) = if ip.is_ipv4() { (32, 15) } else { (128, 32) };
        let len: u8 =
            len.parse().ok().filter(|l| *l <= max).with_context(|| {
                format!("{addr}: prefix length must be a number from 0 to {max}")
            })?;
        if len < min {
            bail!(
                "{addr} is wider than the test ranges (198.18.0.0/15, 2001:db8::/32): \
                 use a prefix length of at least /{min}"
            );
        }
    }
    Ok(ip)
}

/// An Ethernet MAC address; parses from and displays as `02:00:00:00:00:01`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// The six octets.
    pub fn octets(self) -> [u8; 6] {
        self.0
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            o[0], o[1], o[2], o[3], o[4], o[5]
        )
    }
}

impl FromStr for Mac {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Mac> {
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for byte in out.iter_mut() {
            let part = parts.next().filter(|p| p.len() == 2);
            *byte = part
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .with_context(|| format!("`{s}` is not a MAC address like 02:00:00:00:00:01"))?;
        }
        if parts.next().is_some() {
            bail!("`{s}` is not a MAC address like 02:00:00:00:00:01");
        }
        Ok(Mac(out))
    }
}

/// Checks a Linux interface name: 1 to 15 bytes, no `/`, `:` or whitespace.
pub(crate) fn check_ifname(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.len() > 15
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace());
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
        for good in [
            "198.18.0.1",
            "198.19.255.1",
            "2001:db8::1",
            "198.18.0.0/15",
            "2001:db8:1::/64",
        ] {
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
    fn mac_roundtrip() {
        let mac: Mac = "02:aB:00:10:ff:01".parse().unwrap();
        assert_eq!(mac.octets(), [0x02, 0xab, 0, 0x10, 0xff, 0x01]);
        assert_eq!(mac.to_string(), "02:ab:00:10:ff:01");
        for bad in [
            "",
            "02:ab:00:10:ff",
            "02:ab:00:10:ff:01:02",
            "2:ab:00:10:ff:01",
            "zz:ab:00:10:ff:01",
        ] {
            assert!(bad.parse::<Mac>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ifnames() {
        assert!(check_ifname("xnf123456789abc").is_ok());
        assert!(check_ifname("xnf123456789abcd").is_err());
        assert!(check_ifname("a b").is_err());
        assert!(check_ifname("").is_err());
    }
}
