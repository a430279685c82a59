//! Interfaces: a dump of all links, creating veths, changing and deleting
//! links, and a socket that wakes on link changes (for the VLAN follower).

use std::os::fd::{AsRawFd, BorrowedFd};

use anyhow::{Context, Result};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{InfoData, InfoKind, InfoVeth, InfoVlan, LinkAttribute, LinkFlags, LinkInfo, LinkLayerType, LinkMessage, LinkXdp, State};
use netlink_packet_route::RouteNetlinkMessage;

use super::socket::Rtnl;

/// What xnf needs to know about one interface.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    pub ifindex: u32,
    pub name: String,
    pub mac: Option<[u8; 6]>,
    /// `IFLA_INFO_KIND`: "veth", "vlan", "bridge", ...; None for physical NICs.
    pub kind: Option<String>,
    /// For a VLAN device: its 802.1Q ID.
    pub vlan_id: Option<u16>,
    /// `IFLA_LINK`: the parent of a VLAN device, or a veth's peer.
    pub parent: Option<u32>,
    /// Set when `parent` lives in another network namespace.
    pub parent_netnsid: Option<i32>,
    pub ethernet: bool,
    pub loopback: bool,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Operational state UP (`IFLA_OPERSTATE`): up with carrier, as the
    /// kernel's link watcher has settled it (up to a second after carrier).
    pub oper_up: bool,
    pub mtu: u32,
    /// ID of the XDP program attached in any mode, if one is.
    pub xdp_prog_id: Option<u32>,
}

impl Link {
    /// Extracts the fields from an `RTM_NEWLINK` message.
    pub fn from_message(msg: &LinkMessage) -> Self {
        let mut link = Link {
            ifindex: msg.header.index,
            ethernet: msg.header.link_layer_type == LinkLayerType::Ether,
            loopback: msg.header.flags.contains(LinkFlags::Loopback),
            up: msg.header.flags.contains(LinkFlags::Up),
            ..Default::default()
        };
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Address(a) if a.len() == 6 => link.mac = a.as_slice().try_into().ok(),
                LinkAttribute::Mtu(m) => link.mtu = *m,
                LinkAttribute::OperState(state) => link.oper_up = *state == State::Up,
                LinkAttribute::Link(p) => link.parent = Some(*p),
                LinkAttribute::LinkNetNsId(id) => link.parent_netnsid = Some(*id),
                LinkAttribute::Xdp(xdp) => {
                    link.xdp_prog_id = xdp.iter().find_map(|x| match x {
                        LinkXdp::ProgId(id) if *id != 0 => Some(*id),
                        _ => None,
                    })
                }
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        match info {
                            LinkInfo::Kind(k) => link.kind = Some(kind_name(k)),
                            LinkInfo::Data(InfoData::Vlan(v)) => {
                                link.vlan_id = v.iter().find_map(|x| match x {
                                    InfoVlan::Id(id) => Some(*id),
                                    _ => None,
                                })
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        link
    }

    pub fn is_veth(&self) -> bool {
        self.kind.as_deref() == Some("veth")
    }

    /// `Some((parent ifindex, vid))` for an 802.1Q VLAN device in this namespace.
    pub fn vlan(&self) -> Option<(u32, u16)> {
        match (self.kind.as_deref(), self.vlan_id, self.parent, self.parent_netnsid) {
            (Some("vlan"), Some(vid), Some(parent), None) => Some((parent, vid)),
            _ => None,
        }
    }
}

fn kind_name(k: &InfoKind) -> String {
    match k {
        InfoKind::Veth => "veth".into(),
        InfoKind::Vlan => "vlan".into(),
        InfoKind::Bridge => "bridge".into(),
        InfoKind::MacVlan => "macvlan".into(),
        InfoKind::Other(s) => s.clone(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Every interface in the current network namespace.
pub fn links() -> Result<Vec<Link>> {
    Rtnl::open()?
        .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()), |m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(Link::from_message(&l)),
            _ => None,
        })
        .context("dumping the interfaces (netlink)")
}

/// Looks an interface up by name, with an error that says what to check.
pub fn link_by_name(name: &str) -> Result<Link> {
    links()?.into_iter().find(|l| l.name == name).with_context(|| format!("no interface named {name:?} in this network namespace (see `ip link`)"))
}

/// Sends one request on a fresh socket and waits for its acknowledgement.
fn request(msg: RouteNetlinkMessage, flags: u16, what: &str) -> Result<()> {
    Rtnl::open()?.request(msg, flags).with_context(|| what.to_string())
}

/// The request creating a veth pair: `name` in the namespace of the socket
/// it is sent on, `peer` in the one open as `peer_ns`, each with `queues`
/// RX and TX queues (`None`: the kernel's default).
fn veth_message(name: &str, peer: &str, peer_ns: BorrowedFd<'_>, queues: Option<u32>) -> RouteNetlinkMessage {
    let queue_attrs = |attrs: &mut Vec<LinkAttribute>| {
        if let Some(q) = queues {
            attrs.extend([LinkAttribute::NumTxQueues(q), LinkAttribute::NumRxQueues(q)]);
        }
    };
    let mut p = LinkMessage::default();
    p.attributes = vec![LinkAttribute::IfName(peer.into()), LinkAttribute::NetNsFd(peer_ns.as_raw_fd())];
    queue_attrs(&mut p.attributes);
    let mut m = LinkMessage::default();
    m.attributes = vec![LinkAttribute::IfName(name.into())];
    queue_attrs(&mut m.attributes);
    m.attributes.push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth), LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(p)))]));
    RouteNetlinkMessage::NewLink(m)
}

/// Creates a veth pair: `name` here, `peer` (with that name) in the network
/// namespace open as `peer_ns`, both with `queues` RX and TX queues (a
/// number, or `None` for the kernel's default).
pub fn create_veth(name: &str, peer: &str, peer_ns: BorrowedFd<'_>, queues: impl Into<Option<u32>>) -> Result<()> {
    request(veth_message(name, peer, peer_ns, queues.into()), NLM_F_CREATE | NLM_F_EXCL, &format!("creating veth {name} (peer {peer})"))
}

/// Moves interface `ifindex` (`name`) into the network namespace open as
/// `ns`, renamed `new_name` there: `ip link set NAME netns NS name NEW`.
pub fn move_link(ifindex: u32, name: &str, new_name: &str, ns: BorrowedFd<'_>) -> Result<()> {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    m.attributes = vec![LinkAttribute::IfName(new_name.into()), LinkAttribute::NetNsFd(ns.as_raw_fd())];
    request(RouteNetlinkMessage::SetLink(m), 0, &format!("moving {name} into the NF's namespace as {new_name}"))
}

/// A change to one interface: `ip link set` in message form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkChange {
    Up,
    Down,
    Mac([u8; 6]),
    Mtu(u32),
}

/// The request applying `change` to interface `ifindex`.
pub(crate) fn set_link_message(ifindex: u32, change: LinkChange) -> RouteNetlinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    match change {
        LinkChange::Up | LinkChange::Down => {
            m.header.change_mask = LinkFlags::Up;
            if change == LinkChange::Up {
                m.header.flags = LinkFlags::Up;
            }
        }
        LinkChange::Mac(mac) => m.attributes.push(LinkAttribute::Address(mac.to_vec())),
        LinkChange::Mtu(mtu) => m.attributes.push(LinkAttribute::Mtu(mtu)),
    }
    RouteNetlinkMessage::SetLink(m)
}

/// Sets an interface of the current network namespace up.
pub fn set_up(ifindex: u32, name: &str) -> Result<()> {
    request(set_link_message(ifindex, LinkChange::Up), 0, &format!("setting {name} up"))
}

/// Deletes an interface of the current network namespace (a veth takes its peer along).
pub fn delete_link(ifindex: u32, name: &str) -> Result<()> {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    request(RouteNetlinkMessage::DelLink(m), 0, &format!("deleting {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vlan_msg(index: u32, parent: u32, vid: u16) -> LinkMessage {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.link_layer_type = LinkLayerType::Ether;
        m.attributes = vec![
            LinkAttribute::IfName(format!("eth0.{vid}")),
            LinkAttribute::Address(vec![2, 0, 0, 0, 0, 9]),
            LinkAttribute::Link(parent),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Vlan), LinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(vid)]))]),
        ];
        m
    }

    #[test]
    fn vlan_device_is_recognised_from_its_message() {
        let l = Link::from_message(&vlan_msg(12, 3, 100));
        assert_eq!(l.vlan(), Some((3, 100)));
        assert_eq!(l.mac, Some([2, 0, 0, 0, 0, 9]));
        assert!(l.ethernet);
    }

    #[test]
    fn vlan_on_a_parent_in_another_namespace_is_not_ours() {
        let mut m = vlan_msg(12, 3, 100);
        m.attributes.push(LinkAttribute::LinkNetNsId(1));
        assert_eq!(Link::from_message(&m).vlan(), None);
    }

    #[test]
    fn dump_finds_loopback() {
        let all = links().expect("netlink dump works");
        let lo = all.iter().find(|l| l.name == "lo").expect("lo exists");
        assert!(lo.loopback && !lo.ethernet);
    }
}
