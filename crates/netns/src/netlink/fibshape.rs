//! [`FibShape`]: whether a route lookup's answer in this network namespace
//! can depend on more of the packet than its destination, its ingress and
//! its TOS — the condition for caching lookups per destination (the
//! router's route cache). Per family, it can when:
//! - there are policy rules beyond the kernel's defaults (a rule can
//!   select on the source, ports, protocol, marks, interfaces, VRFs);
//! - a route the default rules reach (tables local, main, default) is
//!   multipath (the path is a hash of the flow with a secret key), uses a
//!   nexthop object (which may be a group), or, for IPv6, names a source
//!   prefix (`ip -6 route add … from …`).
//!
//! Kept current from rtnetlink notifications ([`FibShape::apply`]); when a
//! notification may have undone a special route (a deletion, a
//! replacement, lost notifications) the routes are dumped again, so that
//! an IPv6 multipath route losing one of its siblings is never taken for
//! gone.

use std::collections::HashSet;

use anyhow::Result;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Batch, Rtnl};

/// The tables the kernel's default rules look up.
const DEFAULT_TABLES: [u32; 3] = [253, 254, 255];

/// Identity of a route in the kernel's FIB.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RouteKey {
    v6: bool,
    table: u32,
    /// The destination's bytes (empty for a default route).
    dst: Vec<u8>,
    dst_len: u8,
    src_len: u8,
    tos: u8,
    priority: u32,
}

/// Why lookups of one family cannot be cached per destination, if they
/// cannot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub v4: Option<String>,
    pub v6: Option<String>,
}

/// The FIB's shape, as last seen.
#[derive(Debug, Default)]
pub struct FibShape {
    special: HashSet<RouteKey>,
    extra_rules: [usize; 2],
}

impl FibShape {
    /// Reads the rules and routes of this network namespace.
    pub fn scan() -> Result<Self> {
        let mut s = FibShape::default();
        s.rescan_rules()?;
        s.rescan_routes()?;
        Ok(s)
    }

    /// Takes in a batch of notifications. True if the shape may have
    /// changed (the caller then reads [`FibShape::shape`] again).
    pub fn apply(&mut self, batch: &Batch) -> Result<bool> {
        if batch.overflowed {
            self.rescan_rules()?;
            self.rescan_routes()?;
            return Ok(true);
        }
        let (mut rules, mut routes) = (false, false);
        for m in &batch.messages {
            match m {
                RouteNetlinkMessage::NewRule(_) | RouteNetlinkMessage::DelRule(_) => rules = true,
                RouteNetlinkMessage::NewRoute(r) => {
                    let Some(key) = route_key(r) else { continue };
                    if is_special(r) {
                        self.special.insert(key);
                    } else if self.special.contains(&key) {
                        // A replacement, or one sibling of a multipath route:
                        // only a dump says which.
                        routes = true;
                    }
                }
                RouteNetlinkMessage::DelRoute(r) if route_key(r).is_some_and(|k| self.special.contains(&k)) => routes = true,
                _ => {}
            }
        }
        if rules {
            self.rescan_rules()?;
        }
        if routes {
            self.rescan_routes()?;
        }
        Ok(true)
    }

    /// Families `batch` may make uncacheable (a rule changed, a special
    /// route came): what to step aside from before [`FibShape::apply`]
    /// has taken it in. `[IPv4, IPv6]`.
    pub fn touched(batch: &Batch) -> [bool; 2] {
        let mut t = [batch.overflowed; 2];
        for m in &batch.messages {
            match m {
                RouteNetlinkMessage::NewRule(r) | RouteNetlinkMessage::DelRule(r) => t[(r.header.family == AddressFamily::Inet6) as usize] = true,
                RouteNetlinkMessage::NewRoute(r) if is_special(r) => t[(r.header.address_family == AddressFamily::Inet6) as usize] = true,
                _ => {}
            }
        }
        t
    }

    /// Per family, why lookups must not be cached; `None`: they may be.
    pub fn shape(&self) -> Shape {
        let why = |v6: bool| {
            let rules = self.extra_rules[v6 as usize];
            let routes = self.special.iter().filter(|k| k.v6 == v6).count();
            match (rules, routes) {
                (0, 0) => None,
                (0, n) => Some(format!("{n} multipath, nexthop-object or source-specific route(s)")),
                (n, 0) => Some(format!("{n} policy rule(s) beyond the defaults")),
                (n, m) => Some(format!("{n} policy rule(s) beyond the defaults, {m} multipath, nexthop-object or source-specific route(s)")),
            }
        };
        Shape { v4: why(false), v6: why(true) }
    }

    fn rescan_rules(&mut self) -> Result<()> {
        for (i, family) in [AddressFamily::Inet, AddressFamily::Inet6].into_iter().enumerate() {
            let mut m = RuleMessage::default();
            m.header.family = family;
            let rules = Rtnl::open()?.dump(RouteNetlinkMessage::GetRule(m), |m| match m {
                RouteNetlinkMessage::NewRule(r) => Some(r),
                _ => None,
            })?;
            self.extra_rules[i] = rules.iter().filter(|r| !is_default_rule(r)).count();
        }
        Ok(())
    }

    fn rescan_routes(&mut self) -> Result<()> {
        let mut special = HashSet::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut m = RouteMessage::default();
            m.header.address_family = family;
            let keys = Rtnl::open()?.dump(RouteNetlinkMessage::GetRoute(m), |m| match m {
                RouteNetlinkMessage::NewRoute(r) if is_special(&r) => route_key(&r),
                _ => None,
            })?;
            special.extend(keys);
        }
        self.special = special;
        Ok(())
    }
}

/// The route's identity if it sits in a table the default rules reach.
fn route_key(r: &RouteMessage) -> Option<RouteKey> {
    let mut key = RouteKey {
        v6: r.header.address_family == AddressFamily::Inet6,
        table: u32::from(r.header.table),
        dst: Vec::new(),
        dst_len: r.header.destination_prefix_length,
        src_len: r.header.source_prefix_length,
        tos: r.header.tos,
        priority: 0,
    };
    for a in &r.attributes {
        match a {
            RouteAttribute::Table(t) => key.table = *t,
            RouteAttribute::Destination(RouteAddress::Inet(a)) => key.dst = a.octets().to_vec(),
            RouteAttribute::Destination(RouteAddress::Inet6(a)) => key.dst = a.octets().to_vec(),
            RouteAttribute::Priority(p) => key.priority = *p,
            _ => {}
        }
    }
    DEFAULT_TABLES.contains(&key.table).then_some(key)
}

/// Multipath, a nexthop object, or an IPv6 source prefix.
fn is_special(r: &RouteMessage) -> bool {
    (r.header.address_family == AddressFamily::Inet6 && r.header.source_prefix_length > 0)
        || r.attributes.iter().any(|a| matches!(a, RouteAttribute::MultiPath(_) | RouteAttribute::NhId(_)))
}

/// One of the rules a fresh namespace has: `lookup local` (0), `lookup
/// main` (32766), IPv4's `lookup default` (32767), with no selector.
fn is_default_rule(r: &RuleMessage) -> bool {
    let h = &r.header;
    if h.dst_len != 0 || h.src_len != 0 || h.tos != 0 || h.action != RuleAction::ToTable {
        return false;
    }
    let (mut priority, mut table) = (0, u32::from(h.table));
    for a in &r.attributes {
        match a {
            RuleAttribute::Priority(p) => priority = *p,
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Protocol(_) => {}
            // -1: no suppressor (the kernel reports it anyway).
            RuleAttribute::SuppressPrefixLen(u32::MAX) | RuleAttribute::SuppressIfGroup(u32::MAX) => {}
            _ => return false, // a selector, goto, suppressor, l3mdev, ...
        }
    }
    let defaults: &[(u32, u32)] = if h.family == AddressFamily::Inet6 { &[(0, 255), (32766, 254)] } else { &[(0, 255), (32766, 254), (32767, 253)] };
    defaults.contains(&(priority, table))
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::route::RouteNextHop;

    fn route(v6: bool, table: u32, attrs: Vec<RouteAttribute>) -> RouteMessage {
        let mut r = RouteMessage::default();
        r.header.address_family = if v6 { AddressFamily::Inet6 } else { AddressFamily::Inet };
        r.header.destination_prefix_length = 24;
        r.header.table = 254;
        r.attributes = attrs;
        r.attributes.push(RouteAttribute::Table(table));
        r
    }

    fn rule(v6: bool, priority: u32, table: u32, extra: Option<RuleAttribute>) -> RuleMessage {
        let mut r = RuleMessage::default();
        r.header.family = if v6 { AddressFamily::Inet6 } else { AddressFamily::Inet };
        r.header.action = RuleAction::ToTable;
        // As the kernel reports its own: no suppressor is -1.
        r.attributes = vec![RuleAttribute::Table(table), RuleAttribute::SuppressPrefixLen(u32::MAX), RuleAttribute::Priority(priority)];
        r.attributes.extend(extra);
        r
    }

    #[test]
    fn only_routes_that_depend_on_more_than_the_destination_are_special() {
        assert!(!is_special(&route(false, 254, vec![])));
        assert!(is_special(&route(false, 254, vec![RouteAttribute::MultiPath(vec![RouteNextHop::default()])])));
        assert!(is_special(&route(false, 254, vec![RouteAttribute::NhId(5)])));
        let mut src6 = route(true, 254, vec![]);
        src6.header.source_prefix_length = 64;
        assert!(is_special(&src6));
        // A table the default rules never reach does not matter.
        assert!(route_key(&route(false, 100, vec![])).is_none());
        assert!(route_key(&route(false, 254, vec![])).is_some());
    }

    #[test]
    fn the_kernels_own_rules_are_default_and_anything_else_is_not() {
        for (v6, p, t) in [(false, 0, 255), (false, 32766, 254), (false, 32767, 253), (true, 0, 255), (true, 32766, 254)] {
            assert!(is_default_rule(&rule(v6, p, t, None)), "{v6} {p} {t}");
        }
        assert!(!is_default_rule(&rule(true, 32767, 253, None)), "IPv6 has no default-table rule");
        assert!(!is_default_rule(&rule(false, 100, 254, None)));
        assert!(!is_default_rule(&rule(false, 32766, 254, Some(RuleAttribute::Source("198.18.0.1".parse().unwrap())))));
        assert!(!is_default_rule(&rule(false, 32766, 254, Some(RuleAttribute::L3MDev(true)))));
        assert!(!is_default_rule(&rule(false, 32766, 254, Some(RuleAttribute::SuppressPrefixLen(0)))));
        let mut tos = rule(false, 32766, 254, None);
        tos.header.tos = 0x10;
        assert!(!is_default_rule(&tos));
    }

    #[test]
    fn a_special_route_seen_again_as_plain_asks_for_a_dump() {
        let mut s = FibShape::default();
        let multi = route(true, 254, vec![RouteAttribute::MultiPath(vec![RouteNextHop::default()])]);
        let batch = Batch { messages: vec![RouteNetlinkMessage::NewRoute(multi.clone())], ..Default::default() };
        assert_eq!(FibShape::touched(&batch), [false, true]);
        s.apply(&batch).unwrap();
        assert!(s.shape().v6.is_some() && s.shape().v4.is_none(), "{:?}", s.shape());
        // Plain routes elsewhere change nothing and need no dump.
        let other = route(true, 254, vec![RouteAttribute::Priority(7)]);
        s.apply(&Batch { messages: vec![RouteNetlinkMessage::NewRoute(other)], ..Default::default() }).unwrap();
        assert!(s.shape().v6.is_some());
    }
}
