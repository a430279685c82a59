//! [`Batch`]: checked configuration commands for one namespace, applied
//! through netlink.

use std::fmt;
use std::net::IpAddr;

use anyhow::{anyhow, bail, Context, Result};
use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::RouteNetlinkMessage;

use crate::addr::{check_ifname, check_test_addr, Mac};
use crate::netlink::{self, LinkChange, Rtnl};
use crate::netns::Netns;

/// A list of configuration commands for one namespace, each checked when
/// added (interface names valid, addresses inside the test ranges) and all
/// sent by [`Batch::apply`] over one netlink socket inside the namespace,
/// in order, stopping at the first the kernel refuses. Each command is what
/// the `ip` command of the same words would do (see [`Batch::lines`]).
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
    ops: Vec<Op>,
    lines: Vec<String>,
}

/// One command, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Link { dev: String, change: LinkChange },
    AddrAdd { dev: String, net: IpNet },
    Route { replace: bool, dst: IpNet, via: Option<IpAddr>, dev: Option<String> },
    RouteDel { dst: IpNet },
    Neigh { ip: IpAddr, mac: Option<Mac>, dev: String },
}

impl fmt::Display for Op {
    /// The `ip` command (without `ip`) that does the same.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Link { dev, change } => match change {
                LinkChange::Up => write!(f, "link set dev {dev} up"),
                LinkChange::Down => write!(f, "link set dev {dev} down"),
                LinkChange::Mac(mac) => write!(f, "link set dev {dev} address {}", Mac::from(*mac)),
                LinkChange::Mtu(mtu) => write!(f, "link set dev {dev} mtu {mtu}"),
            },
            Op::AddrAdd { dev, net } => {
                write!(f, "addr add {net} dev {dev}{}", if net.addr().is_ipv6() { " nodad" } else { "" })
            }
            Op::Route { replace, dst, via, dev } => {
                write!(f, "route {} {}", if *replace { "replace" } else { "add" }, route_dst(dst))?;
                if let Some(via) = via {
                    write!(f, " via {via}")?;
                }
                if let Some(dev) = dev {
                    write!(f, " dev {dev}")?;
                }
                Ok(())
            }
            Op::RouteDel { dst } => write!(f, "route del {}", route_dst(dst)),
            Op::Neigh { ip, mac: Some(mac), dev } => {
                write!(f, "neigh replace {ip} lladdr {mac} dev {dev} nud permanent")
            }
            Op::Neigh { ip, mac: None, dev } => write!(f, "neigh del {ip} dev {dev}"),
        }
    }
}

/// `dst` as `ip route` prints it: IPv4 default as `default`.
fn route_dst(dst: &IpNet) -> String {
    match dst {
        IpNet::V4(n) if n.prefix_len() == 0 => "default".into(),
        _ => dst.to_string(),
    }
}

/// The ifindex of `dev` in this thread's namespace.
fn ifindex(dev: &str, ns: &str) -> Result<u32> {
    nix::net::if_::if_nametoindex(dev).map_err(|_| anyhow!("no interface {dev} there (see `ip -n {ns} link`)"))
}

impl Op {
    /// Sends the command on `rtnl` (a socket inside namespace `ns`).
    fn apply(&self, rtnl: &mut Rtnl, ns: &str) -> Result<()> {
        let (msg, flags): (RouteNetlinkMessage, u16) = match self {
            Op::Link { dev, change } => (netlink::set_link_message(ifindex(dev, ns)?, *change), 0),
            Op::AddrAdd { dev, net } => (netlink::addr_message(ifindex(dev, ns)?, *net), NLM_F_CREATE | NLM_F_EXCL),
            Op::Route { replace, dst, via, dev } => {
                let oif = dev.as_deref().map(|d| ifindex(d, ns)).transpose()?;
                let msg = netlink::route_message(*dst, *via, oif, netlink::RTPROT_BOOT);
                let flags = if *replace { NLM_F_CREATE | NLM_F_REPLACE } else { NLM_F_CREATE | NLM_F_EXCL };
                (RouteNetlinkMessage::NewRoute(msg), flags)
            }
            Op::RouteDel { dst } => (netlink::del_route_message(*dst, 0), 0),
            Op::Neigh { ip, mac, dev } => {
                let msg = netlink::neigh_message(*ip, mac.map(|m| m.0), ifindex(dev, ns)?);
                (msg, if mac.is_some() { NLM_F_CREATE | NLM_F_REPLACE } else { 0 })
            }
        };
        rtnl.request(msg, flags)
    }
}

impl<'a> Batch<'a> {
    pub(crate) fn new(ns: &'a Netns) -> Batch<'a> {
        Batch { ns, ops: Vec::new(), lines: Vec::new() }
    }

    /// The commands so far, as the `ip` commands (without the leading
    /// `ip`) that do the same.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Sends the commands in order; stops at the first the kernel refuses,
    /// with an error naming that command and the kernel's reason.
    pub fn apply(&self) -> Result<()> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let ns = self.ns.name();
        self.ns.run(|| -> Result<()> {
            let mut rtnl = Rtnl::open()?;
            for (op, line) in self.ops.iter().zip(&self.lines) {
                op.apply(&mut rtnl, ns).map_err(|e| anyhow!("`{line}` in namespace {ns} failed: {e:#}"))?;
            }
            Ok(())
        })?
    }

    fn push(&mut self, op: Op) -> Result<&mut Self> {
        self.lines.push(op.to_string());
        self.ops.push(op);
        Ok(self)
    }

    fn link(&mut self, dev: &str, change: LinkChange) -> Result<&mut Self> {
        check_ifname(dev)?;
        self.push(Op::Link { dev: dev.into(), change })
    }

    /// `link set dev DEV up`.
    pub fn link_up(&mut self, dev: &str) -> Result<&mut Self> {
        self.link(dev, LinkChange::Up)
    }

    /// `link set dev DEV down`.
    pub fn link_down(&mut self, dev: &str) -> Result<&mut Self> {
        self.link(dev, LinkChange::Down)
    }

    /// `link set dev DEV address MAC`.
    pub fn set_mac(&mut self, dev: &str, mac: Mac) -> Result<&mut Self> {
        self.link(dev, LinkChange::Mac(mac.0))
    }

    /// `link set dev DEV mtu MTU`.
    pub fn set_mtu(&mut self, dev: &str, mtu: u32) -> Result<&mut Self> {
        self.link(dev, LinkChange::Mtu(mtu))
    }

    /// `addr add CIDR dev DEV`, plus `nodad` for IPv6 so the address is usable
    /// at once. `cidr` must be a test prefix such as `198.18.0.1/24` (no
    /// length: a host address).
    pub fn addr_add(&mut self, dev: &str, cidr: &str) -> Result<&mut Self> {
        check_ifname(dev)?;
        let net = test_net(cidr)?;
        self.push(Op::AddrAdd { dev: dev.into(), net })
    }

    /// `route add DST [via VIA] [dev DEV]`. `dst` is a test prefix or
    /// `default` / `0.0.0.0/0` / `::/0` (for IPv6 use `::/0` or give an IPv6 `via`).
    pub fn route_add(&mut self, dst: &str, via: Option<&str>, dev: Option<&str>) -> Result<&mut Self> {
        let op = route_op(false, dst, via, dev)?;
        self.push(op)
    }

    /// `route replace ...`: like [`Batch::route_add`] but overwrites an existing route.
    pub fn route_replace(&mut self, dst: &str, via: Option<&str>, dev: Option<&str>) -> Result<&mut Self> {
        let op = route_op(true, dst, via, dev)?;
        self.push(op)
    }

    /// `route del DST` (of any protocol, in the main table).
    pub fn route_del(&mut self, dst: &str) -> Result<&mut Self> {
        let dst = route_dst_net(dst, None)?;
        self.push(Op::RouteDel { dst })
    }

    /// `neigh replace IP lladdr MAC dev DEV nud permanent` (adds, or
    /// overwrites an existing entry).
    pub fn neigh_add(&mut self, ip: &str, mac: Mac, dev: &str) -> Result<&mut Self> {
        check_ifname(dev)?;
        let ip = check_plain_addr(ip)?;
        self.push(Op::Neigh { ip, mac: Some(mac), dev: dev.into() })
    }

    /// `neigh del IP dev DEV`.
    pub fn neigh_del(&mut self, ip: &str, dev: &str) -> Result<&mut Self> {
        check_ifname(dev)?;
        let ip = check_plain_addr(ip)?;
        self.push(Op::Neigh { ip, mac: None, dev: dev.into() })
    }
}

fn check_plain_addr(ip: &str) -> Result<IpAddr> {
    if ip.contains('/') {
        bail!("{ip}: expected an address without prefix length");
    }
    check_test_addr(ip)
}

/// A test address with its prefix length (a host route's without one).
fn test_net(cidr: &str) -> Result<IpNet> {
    let ip = check_test_addr(cidr)?;
    if cidr.contains('/') {
        cidr.parse().with_context(|| format!("`{cidr}` is not a prefix like 198.18.0.1/24"))
    } else {
        Ok(IpNet::from(ip))
    }
}

/// A route's destination: a test prefix, or the default route of the
/// family `via` has (IPv4 without one, as `ip` does).
fn route_dst_net(dst: &str, via: Option<IpAddr>) -> Result<IpNet> {
    Ok(match dst {
        "default" if via.is_some_and(|v| v.is_ipv6()) => "::/0".parse()?,
        "default" | "0.0.0.0/0" => "0.0.0.0/0".parse()?,
        "::/0" => "::/0".parse()?,
        _ => test_net(dst)?,
    })
}

fn route_op(replace: bool, dst: &str, via: Option<&str>, dev: Option<&str>) -> Result<Op> {
    let via = via.map(check_plain_addr).transpose()?;
    let dst = route_dst_net(dst, via)?;
    if let Some(via) = via {
        if via.is_ipv4() != dst.addr().is_ipv4() {
            bail!("route to {dst} via {via}: the gateway must be of the destination's family");
        }
    }
    if let Some(dev) = dev {
        check_ifname(dev)?;
    }
    if via.is_none() && dev.is_none() {
        bail!("route to {dst} needs a gateway (via) or an interface (dev)");
    }
    Ok(Op::Route { replace, dst, via, dev: dev.map(Into::into) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(replace: bool, dst: &str, via: Option<&str>, dev: Option<&str>) -> Result<String> {
        route_op(replace, dst, via, dev).map(|op| op.to_string())
    }

    #[test]
    fn route_lines() {
        assert_eq!(line(false, "198.18.1.0/24", Some("198.18.0.2"), None).unwrap(), "route add 198.18.1.0/24 via 198.18.0.2");
        assert_eq!(line(true, "::/0", None, Some("xnf0a")).unwrap(), "route replace ::/0 dev xnf0a");
        assert_eq!(line(false, "default", Some("2001:db8::1"), None).unwrap(), "route add ::/0 via 2001:db8::1");
        assert_eq!(line(false, "default", None, Some("xnf0a")).unwrap(), "route add default dev xnf0a");
        assert_eq!(line(false, "198.18.1.1", None, Some("xnf0a")).unwrap(), "route add 198.18.1.1/32 dev xnf0a");
        assert!(line(false, "10.0.0.0/8", None, Some("xnf0a")).is_err());
        assert!(line(false, "default", Some("192.168.1.1"), None).is_err());
        assert!(line(false, "default", Some("198.18.0.1/24"), None).is_err());
        assert!(line(false, "default", None, Some("bad name")).is_err());
        assert!(line(false, "default", None, None).is_err());
        let err = line(false, "198.18.1.0/24", Some("2001:db8::1"), None).unwrap_err().to_string();
        assert!(err.contains("family"), "{err}");
    }

    #[test]
    fn other_lines() {
        let ns_less = |op: Op| op.to_string();
        let mac: Mac = "02:00:00:00:00:0a".parse().unwrap();
        assert_eq!(ns_less(Op::AddrAdd { dev: "xnf1a".into(), net: test_net("2001:db8::1/64").unwrap() }), "addr add 2001:db8::1/64 dev xnf1a nodad");
        assert_eq!(
            ns_less(Op::Neigh { ip: "198.18.0.2".parse().unwrap(), mac: Some(mac), dev: "xnf1a".into() }),
            "neigh replace 198.18.0.2 lladdr 02:00:00:00:00:0a dev xnf1a nud permanent"
        );
        assert_eq!(ns_less(Op::Link { dev: "xnf1a".into(), change: LinkChange::Mac(mac.0) }), "link set dev xnf1a address 02:00:00:00:00:0a");
        assert_eq!(test_net("198.18.0.1").unwrap().to_string(), "198.18.0.1/32");
        assert!(test_net("198.18.0.1/x").is_err());
        assert!(check_plain_addr("198.18.0.1/32").is_err());
    }
}
