//! Asking the kernel what it would do: the input route it picks for a
//! packet (`ip route get DST from SRC iif DEV`, with policy rules, martian
//! and reverse-path checks), and its neighbour table. The reference models
//! of xnf's fuzzers take routing decisions from here, so "what the kernel
//! would do" is the kernel's own answer.

use std::net::IpAddr;

use anyhow::{bail, Result};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourExtFlags, NeighbourFlags, NeighbourMessage, NeighbourState};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteMetric, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::Rtnl;

/// The kernel's input route for one packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteGet {
    /// Forwarded out of `oif`, to `gateway` or (on-link) to the destination.
    Unicast {
        oif: u32,
        gateway: Option<IpAddr>,
        locked_mtu: Option<u32>,
    },
    Local,
    Broadcast,
    Multicast,
    Anycast,
    Blackhole,
    Unreachable,
    Prohibit,
    /// Refused with this errno (EINVAL: a martian; ENETUNREACH, EHOSTUNREACH:
    /// no route, forwarding disabled).
    Error(i32),
}

/// A neighbour entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbour {
    pub ifindex: u32,
    pub addr: IpAddr,
    pub mac: Option<[u8; 6]>,
    /// NUD_VALID: reachable, stale, delay, probe, permanent or noarp.
    pub valid: bool,
    /// NUD_STALE: still used, unconfirmed since its reachable time ran out.
    pub stale: bool,
    /// `ndm_flags` (`NTF_*`) and `NDA_FLAGS_EXT` (`NTF_EXT_*`) as the kernel gave them.
    pub flags: NeighbourFlags,
    pub ext_flags: NeighbourExtFlags,
}

/// The route the kernel picks for a packet from `src` to `dst` that
/// arrived on `iif` (in the calling thread's network namespace).
pub fn route_get(src: IpAddr, dst: IpAddr, iif: u32) -> Result<RouteGet> {
    let mut m = RouteMessage::default();
    m.header.address_family = if dst.is_ipv6() { AddressFamily::Inet6 } else { AddressFamily::Inet };
    m.header.destination_prefix_length = if dst.is_ipv6() { 128 } else { 32 };
    m.header.source_prefix_length = if src.is_ipv6() { 128 } else { 32 };
    m.attributes = vec![RouteAttribute::Destination(dst.into()), RouteAttribute::Source(src.into()), RouteAttribute::Iif(iif)];
    let r = match Rtnl::open()?.query(RouteNetlinkMessage::GetRoute(m))? {
        Err(e) => return Ok(RouteGet::Error(e.errno)),
        Ok(RouteNetlinkMessage::NewRoute(r)) => r,
        Ok(other) => bail!("RTM_GETROUTE answered {other:?}"),
    };
    route_kind(&r)
}

/// What a route message says a packet gets.
fn route_kind(r: &RouteMessage) -> Result<RouteGet> {
    Ok(match r.header.kind {
        RouteType::Unicast => {
            let mut oif = 0;
            let mut gateway = None;
            let (mut mtu, mut locks) = (None, 0);
            for a in &r.attributes {
                match a {
                    RouteAttribute::Oif(i) => oif = *i,
                    RouteAttribute::Gateway(RouteAddress::Inet(g)) => gateway = Some(IpAddr::V4(*g)),
                    RouteAttribute::Gateway(RouteAddress::Inet6(g)) => gateway = Some(IpAddr::V6(*g)),
                    RouteAttribute::Metrics(ms) => {
                        for m in ms {
                            match m {
                                RouteMetric::Mtu(v) => mtu = Some(*v),
                                RouteMetric::Lock(l) => locks = *l,
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
            // RTAX_MTU's bit in the lock mask.
            RouteGet::Unicast { oif, gateway, locked_mtu: mtu.filter(|_| locks & (1 << 2) != 0) }
        }
        RouteType::Local => RouteGet::Local,
        RouteType::Broadcast => RouteGet::Broadcast,
        RouteType::Multicast => RouteGet::Multicast,
        RouteType::Anycast => RouteGet::Anycast,
        RouteType::BlackHole => RouteGet::Blackhole,
        RouteType::Unreachable => RouteGet::Unreachable,
        RouteType::Prohibit => RouteGet::Prohibit,
        other => bail!("RTM_GETROUTE answered a route of type {other:?}"),
    })
}

/// Every neighbour entry of both families.
pub fn neighbours() -> Result<Vec<Neighbour>> {
    let answer = Rtnl::open()?.dump(RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()), |m| match m {
        RouteNetlinkMessage::NewNeighbour(n) => Some(n),
        _ => None,
    })?;
    Ok(answer.iter().filter_map(neighbour).collect())
}

impl Neighbour {
    /// Kept confirmed by the kernel itself (`managed`, `NTF_EXT_MANAGED`).
    pub fn managed(&self) -> bool {
        self.ext_flags.contains(NeighbourExtFlags::Managed)
    }
}

/// The entry a neighbour message (a dump's, or a notification's) describes;
/// `None` without a destination address.
pub fn neighbour(n: &NeighbourMessage) -> Option<Neighbour> {
    let (mut addr, mut mac, mut ext_flags) = (None, None, NeighbourExtFlags::empty());
    for a in &n.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => addr = Some(IpAddr::V4(*a)),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => addr = Some(IpAddr::V6(*a)),
            NeighbourAttribute::LinkLayerAddress(l) if l.len() == 6 => mac = l.as_slice().try_into().ok(),
            NeighbourAttribute::ExtFlags(f) => ext_flags = *f,
            _ => {}
        }
    }
    let valid = matches!(
        n.header.state,
        NeighbourState::Reachable | NeighbourState::Stale | NeighbourState::Delay | NeighbourState::Probe | NeighbourState::Permanent | NeighbourState::Noarp
    );
    let stale = n.header.state == NeighbourState::Stale;
    Some(Neighbour { ifindex: n.header.ifindex, addr: addr?, mac, valid, stale, flags: n.header.flags, ext_flags })
}

/// Tells the kernel a frame was sent to `n`, as its own output path does
/// (`neigh_event_send()`: a STALE entry moves to DELAY, and is probed
/// unless confirmed): `RTM_NEWNEIGH` with `NTF_USE`, what `ip neigh change
/// ADDR dev DEV use` sends. The entry's flags that the kernel would reset
/// otherwise (extern_learn and the extended ones) are sent back as they
/// are. Returns false when the entry is gone (never creates one).
pub fn use_neighbour(n: &Neighbour) -> Result<bool> {
    let mut m = NeighbourMessage::default();
    m.header.family = if n.addr.is_ipv6() { AddressFamily::Inet6 } else { AddressFamily::Inet };
    m.header.ifindex = n.ifindex;
    // Not applied with NTF_USE (the entry keeps its state); STALE for a
    // kernel that would look at it.
    m.header.state = NeighbourState::Stale;
    m.header.flags = NeighbourFlags::Use | (n.flags & NeighbourFlags::ExtLearned);
    m.attributes.push(NeighbourAttribute::Destination(NeighbourAddress::from(n.addr)));
    if !n.ext_flags.is_empty() {
        m.attributes.push(NeighbourAttribute::ExtFlags(n.ext_flags));
    }
    match Rtnl::open()?.request(RouteNetlinkMessage::NewNeighbour(m), 0) {
        Ok(()) => Ok(true),
        Err(e) if e.downcast_ref::<super::KernelError>().is_some_and(|k| k.errno == libc::ENOENT) => Ok(false),
        Err(e) => Err(e.context(format!("marking neighbour {} on ifindex {} as used", n.addr, n.ifindex))),
    }
}

/// A route of one routing table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableRoute {
    pub dst: ipnet::IpNet,
    pub kind: RouteGet,
}

/// Every route of the main table (254), both families: what a lookup that
/// skips the policy rules and the local table (`BPF_FIB_LOOKUP_DIRECT`)
/// finds.
pub fn main_routes() -> Result<Vec<TableRoute>> {
    table_routes(254)
}

/// Every route of routing table `table`, both families.
pub fn table_routes(table: u32) -> Result<Vec<TableRoute>> {
    let mut out = Vec::new();
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let mut m = RouteMessage::default();
        m.header.address_family = family;
        let routes = Rtnl::open()?.dump(RouteNetlinkMessage::GetRoute(m), |m| match m {
            RouteNetlinkMessage::NewRoute(r) => Some(r),
            _ => None,
        })?;
        for r in routes {
            let t = r.attributes.iter().find_map(|a| if let RouteAttribute::Table(t) = a { Some(*t) } else { None }).unwrap_or(u32::from(r.header.table));
            if t != table {
                continue;
            }
            let addr = r.attributes.iter().find_map(|a| match a {
                RouteAttribute::Destination(RouteAddress::Inet(a)) => Some(IpAddr::V4(*a)),
                RouteAttribute::Destination(RouteAddress::Inet6(a)) => Some(IpAddr::V6(*a)),
                _ => None,
            });
            let addr = addr.unwrap_or(if family == AddressFamily::Inet6 {
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
            } else {
                IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
            });
            let Ok(dst) = ipnet::IpNet::new(addr, r.header.destination_prefix_length) else { continue };
            out.push(TableRoute { dst, kind: route_kind(&r)? });
        }
    }
    Ok(out)
}

/// An IPv4 address of an interface, with what the kernel derives from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipv4Address {
    pub ifindex: u32,
    /// The address with its prefix length.
    pub net: ipnet::Ipv4Net,
    /// `IFA_BROADCAST`, when set (`ip addr add … brd`).
    pub broadcast: Option<std::net::Ipv4Addr>,
}

/// An address of an interface, either family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address {
    pub ifindex: u32,
    pub addr: IpAddr,
    pub prefix_len: u8,
}

/// The kernel's address messages of one family (None: all).
fn dump_addresses(family: Option<AddressFamily>) -> Result<Vec<AddressMessage>> {
    let mut request = AddressMessage::default();
    if let Some(f) = family {
        request.header.family = f;
    }
    Rtnl::open()?.dump(RouteNetlinkMessage::GetAddress(request), |m| match m {
        RouteNetlinkMessage::NewAddress(a) => Some(a),
        _ => None,
    })
}

/// Every address, IPv4 and IPv6, of every interface (in the calling
/// thread's namespace): IPv4's local address, IPv6's address.
pub fn addresses() -> Result<Vec<Address>> {
    let answer = dump_addresses(None)?;
    let mut out = Vec::new();
    for a in answer {
        let mut local = None;
        let mut address = None;
        for attr in &a.attributes {
            match attr {
                AddressAttribute::Local(l) => local = Some(*l),
                AddressAttribute::Address(l) => address = Some(*l),
                _ => {}
            }
        }
        if let Some(addr) = local.or(address) {
            out.push(Address { ifindex: a.header.index, addr, prefix_len: a.header.prefix_len });
        }
    }
    Ok(out)
}

/// Every IPv4 address of every interface (in the calling thread's namespace).
pub fn ipv4_addresses() -> Result<Vec<Ipv4Address>> {
    let answer = dump_addresses(Some(AddressFamily::Inet))?;
    let mut out = Vec::new();
    for a in answer {
        let mut local = None;
        let mut broadcast = None;
        for attr in &a.attributes {
            match attr {
                AddressAttribute::Local(IpAddr::V4(l)) => local = Some(*l),
                AddressAttribute::Broadcast(b) => broadcast = Some(*b),
                _ => {}
            }
        }
        let Some(local) = local else { continue };
        let net = ipnet::Ipv4Net::new(local, a.header.prefix_len)?;
        out.push(Ipv4Address { ifindex: a.header.index, net, broadcast });
    }
    Ok(out)
}
