//! Route tables of any size for route-lookup experiments: synthetic prefix
//! sets with a realistic length mix, installed into and removed from a
//! namespace through batched rtnetlink (no `ip` process per route).
//!
//! * `mix`: the public tables' prefix-length mix and its scaling;
//! * `place`: where a table may lie, and drawing prefixes there;
//! * `set`: [`RouteSet`], synthetic or given;
//! * `targets`: addresses the table's prefixes own, for the generator;
//! * `install`: installing, removing, counting and flushing, in batches.
//!
//! See [`RouteSet`] for where the prefixes lie and how they are installed.

use std::fmt;
use std::net::IpAddr;

use netlink_packet_route::AddressFamily;

mod install;
mod mix;
mod place;
mod set;
mod targets;

pub use install::{InstalledRoutes, RouteReport};
pub use mix::{IPV4_LENGTH_MIX, IPV6_LENGTH_MIX, MAX_SYNTHETIC, NESTED_SHARE, V4_SLICE_MIN, V4_SLICE_SHIFT, V6_SHIFT};
pub use set::RouteSet;
pub use targets::lookup_targets;

/// `rtm_protocol` of every route installed here: 120 (`'x'`). Not in
/// iproute2's `rt_protos` nor used by the kernel, FRR (186–198), BIRD (12)
/// or other daemons; `ip route show proto 120` lists them and
/// [`crate::Netns::flush_routes`] removes them by it.
pub const XNF_RTPROT: u8 = 120;

/// Address family of a prefix or a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    fn af(self) -> AddressFamily {
        match self {
            Family::V4 => AddressFamily::Inet,
            Family::V6 => AddressFamily::Inet6,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}
