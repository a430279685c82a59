//! [`Batch`]: checked `ip` configuration commands, applied in one `ip -batch`.

use anyhow::{bail, Result};

use crate::addr::{check_ifname, check_test_addr, Mac};
use crate::netns::Netns;

/// A list of `ip` commands for one namespace, each checked when added
/// (interface names valid, addresses inside the test ranges) and all run by
/// [`Batch::apply`] in a single `ip -n NS -batch -`.
///
/// ```no_run
/// # fn main() -> anyhow::Result<()> {
/// let ns = xnf_netns::Netns::new("demo")?;
/// let mut b = ns.batch();
/// b.link_up("lo")?.addr_add("lo", "198.18.9.1/32")?.addr_add("lo", "2001:db8:9::1/128")?;
/// b.apply()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Batch<'a> {
    ns: &'a Netns,
    lines: Vec<String>,
}

impl<'a> Batch<'a> {
    pub(crate) fn new(ns: &'a Netns) -> Batch<'a> {
        Batch {
            ns,
            lines: Vec::new(),
        }
    }

    /// The commands so far, without the leading `ip`.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Runs the commands; stops at the first failure. One command is run as
    /// a plain `ip -n NS ...` so its error shows exactly that command line.
    pub fn apply(&self) -> Result<()> {
        match self.lines.as_slice() {
            [] => Ok(()),
            [one] => self
                .ns
                .ip(&one.split_whitespace().collect::<Vec<_>>())
                .map(drop),
            many => self.ns.ip_batch(many),
        }
    }

    fn push(&mut self, line: String) -> Result<&mut Self> {
        self.lines.push(line);
        Ok(self)
    }

    /// `link set dev DEV up`.
    pub fn link_up(&mut self, dev: &str) -> Result<&mut Self> {
        check_ifname(dev)?;
        self.push(format!("link set dev {dev} up"))
    }

    /// `link set dev DEV down`.
    pub fn link_down(&mut self, dev: &str) -> Result<&mut Self> {
        check_ifname(dev)?;
        self.push(format!("link set dev {dev} down"))
    }

    /// `link set dev DEV address MAC`.
    pub fn set_mac(&mut self, dev: &str, mac: Mac) -> Result<&mut Self> {
        check_ifname(dev)?;
        self.push(format!("link set dev {dev} address {mac}"))
    }

    /// `link set dev DEV mtu MTU`.
    pub fn set_mtu(&mut self, dev: &str, mtu: u32) -> Result<&mut Self> {
        check_ifname(dev)?;
        self.push(format!("link set dev {dev} mtu {mtu}"))
    }

    /// `addr add CIDR dev DEV`, plus `nodad` for IPv6 so the address is usable
    /// at once. `cidr` must be a test prefix such as `198.18.0.1/24`.
    pub fn addr_add(&mut self, dev: &str, cidr: &str) -> Result<&mut Self> {
        check_ifname(dev)?;
        let nodad = if check_test_addr(cidr)?.is_ipv6() {
            " nodad"
        } else {
            ""
        };
        self.push(format!("addr add {cidr} dev {dev}{nodad}"))
    }

    /// `route add DST [via VIA] [dev DEV]`. `dst` is a test prefix or
    /// `default` / `0.0.0.0/0` / `::/0` (for IPv6 use `::/0` or give an IPv6 `via`).
    pub fn route_add(
        &mut self,
        dst: &str,
        via: Option<&str>,
        dev: Option<&str>,
    ) -> Result<&mut Self> {
        let line = route_line("add", dst, via, dev)?;
        self.push(line)
    }

    /// `route replace ...`: like [`Batch::route_add`] but overwrites an existing route.
    pub fn route_replace(
        &mut self,
        dst: &str,
        via: Option<&str>,
        dev: Option<&str>,
    ) -> Result<&mut Self> {
        let line = route_line("replace", dst, via, dev)?;
        self.push(line)
    }

    /// `route del DST`.
    pub fn route_del(&mut self, dst: &str) -> Result<&mut Self> {
        let line = route_line("del", dst, None, None)?;
        self.push(line)
    }

    /// `neigh replace IP lladdr MAC dev DEV nud permanent` (adds, or
    /// overwrites an existing entry).
    pub fn neigh_add(&mut self, ip: &str, mac: Mac, dev: &str) -> Result<&mut Self> {
        check_ifname(dev)?;
        check_plain_addr(ip)?;
        self.push(format!(
            "neigh replace {ip} lladdr {mac} dev {dev} nud permanent"
        ))
    }

    /// `neigh del IP dev DEV`.
    pub fn neigh_del(&mut self, ip: &str, dev: &str) -> Result<&mut Self> {
        check_ifname(dev)?;
        check_plain_addr(ip)?;
        self.push(format!("neigh del {ip} dev {dev}"))
    }
}

fn check_plain_addr(ip: &str) -> Result<()> {
    if ip.contains('/') {
        bail!("{ip}: expected an address without prefix length");
    }
    check_test_addr(ip).map(drop)
}

fn route_line(verb: &str, dst: &str, via: Option<&str>, dev: Option<&str>) -> Result<String> {
    if !matches!(dst, "default" | "0.0.0.0/0" | "::/0") {
        check_test_addr(dst)?;
    }
    let mut line = format!("route {verb} {dst}");
    if let Some(via) = via {
        check_plain_addr(via)?;
        line += &format!(" via {via}");
    }
    if let Some(dev) = dev {
        check_ifname(dev)?;
        line += &format!(" dev {dev}");
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_lines() {
        assert_eq!(
            route_line("add", "198.18.1.0/24", Some("198.18.0.2"), None).unwrap(),
            "route add 198.18.1.0/24 via 198.18.0.2"
        );
        assert_eq!(
            route_line("del", "::/0", None, Some("xnf0a")).unwrap(),
            "route del ::/0 dev xnf0a"
        );
        assert!(route_line("add", "10.0.0.0/8", None, Some("xnf0a")).is_err());
        assert!(route_line("add", "default", Some("192.168.1.1"), None).is_err());
        assert!(route_line("add", "default", Some("198.18.0.1/24"), None).is_err());
        assert!(route_line("add", "default", None, Some("bad name")).is_err());
    }
}
