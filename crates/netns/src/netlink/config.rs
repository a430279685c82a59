//! Addresses, routes and neighbours in message form: the requests iproute2
//! sends for `ip addr add`, `ip route add|replace|del` and
//! `ip neigh replace|del`, so that the typed helpers behave as the `ip`
//! commands they replace.

use std::net::IpAddr;

use anyhow::{Context, Result};
use ipnet::IpNet;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage, AddressScope};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::Rtnl;

fn family(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

/// `RTM_NEWADDR` for `net` (the address with its prefix length) on
/// `ifindex`: `IFA_LOCAL` and `IFA_ADDRESS` both the address, as `ip` sends
/// them; IPv6 with `IFA_F_NODAD` so it is usable at once.
pub(crate) fn addr_message(ifindex: u32, net: IpNet) -> RouteNetlinkMessage {
    let mut m = AddressMessage::default();
    m.header.family = family(net.addr());
    m.header.prefix_len = net.prefix_len();
    m.header.index = ifindex;
    if net.addr().is_ipv6() {
        m.header.flags = AddressHeaderFlags::Nodad;
    }
    m.attributes = vec![AddressAttribute::Local(net.addr()), AddressAttribute::Address(net.addr())];
    RouteNetlinkMessage::NewAddress(m)
}

/// The interfaces that have an IPv6 link-local address ready to use (not
/// tentative), by ifindex.
pub(crate) fn ipv6_link_local(rtnl: &mut Rtnl) -> Result<Vec<u32>> {
    let mut request = AddressMessage::default();
    request.header.family = AddressFamily::Inet6;
    rtnl.dump(RouteNetlinkMessage::GetAddress(request), |m| match m {
        RouteNetlinkMessage::NewAddress(a) if a.header.scope == AddressScope::Link && !a.header.flags.contains(AddressHeaderFlags::Tentative) => {
            Some(a.header.index)
        }
        _ => None,
    })
    .context("dumping the IPv6 addresses")
}

/// `RTPROT_BOOT`: what `ip route add` marks its routes with.
pub(crate) const RTPROT_BOOT: u8 = 3;

/// A route of the main table to `dst`, `via` a gateway and/or out of `oif`.
pub(crate) fn route_message(dst: IpNet, via: Option<IpAddr>, oif: Option<u32>, protocol: u8) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = family(dst.addr());
    m.header.destination_prefix_length = dst.prefix_len();
    m.header.table = RouteHeader::RT_TABLE_MAIN;
    m.header.protocol = RouteProtocol::from(protocol);
    m.header.kind = RouteType::Unicast;
    // As iproute2: without a gateway the destination is on the link.
    m.header.scope = if via.is_some() { RouteScope::Universe } else { RouteScope::Link };
    if dst.prefix_len() > 0 {
        m.attributes.push(RouteAttribute::Destination(RouteAddress::from(dst.addr())));
    }
    if let Some(via) = via {
        m.attributes.push(RouteAttribute::Gateway(RouteAddress::from(via)));
    }
    if let Some(oif) = oif {
        m.attributes.push(RouteAttribute::Oif(oif));
    }
    m
}

/// `RTM_DELROUTE` for `dst` in the main table. The kernel matches the
/// protocol unless it is 0, the scope and type never (as `ip route del`).
pub(crate) fn del_route_message(dst: IpNet, protocol: u8) -> RouteNetlinkMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = family(dst.addr());
    m.header.destination_prefix_length = dst.prefix_len();
    m.header.table = RouteHeader::RT_TABLE_MAIN;
    m.header.protocol = RouteProtocol::from(protocol);
    m.header.scope = RouteScope::NoWhere;
    m.header.kind = RouteType::Unspec;
    if dst.prefix_len() > 0 {
        m.attributes.push(RouteAttribute::Destination(RouteAddress::from(dst.addr())));
    }
    RouteNetlinkMessage::DelRoute(m)
}

/// `RTM_NEWNEIGH` (with `mac`: a permanent entry) or `RTM_DELNEIGH` (without)
/// for `ip` on `ifindex`.
pub(crate) fn neigh_message(ip: IpAddr, mac: Option<[u8; 6]>, ifindex: u32) -> RouteNetlinkMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = family(ip);
    m.header.ifindex = ifindex;
    m.attributes.push(NeighbourAttribute::Destination(NeighbourAddress::from(ip)));
    match mac {
        Some(mac) => {
            m.header.state = NeighbourState::Permanent;
            m.attributes.push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
            RouteNetlinkMessage::NewNeighbour(m)
        }
        None => RouteNetlinkMessage::DelNeighbour(m),
    }
}
