//! [`Events`]: rtnetlink notifications of the calling thread's network
//! namespace, waited for and then taken in batches — everything queued —
//! so that a burst of changes (a routing daemon installing a table) costs
//! its reader one wake-up, and a lost burst (the socket's buffer
//! overflowed) is reported rather than missed.

use std::os::fd::AsRawFd;
use std::time::Duration;

use anyhow::{Context, Result};
use netlink_packet_route::RouteNetlinkMessage;

use super::socket::Rtnl;

/// `RTNLGRP_*` numbers (linux/rtnetlink.h).
pub mod group {
    pub const LINK: u32 = 1;
    pub const NEIGH: u32 = 3;
    pub const IPV4_IFADDR: u32 = 5;
    pub const IPV4_ROUTE: u32 = 7;
    pub const IPV4_RULE: u32 = 8;
    pub const IPV6_IFADDR: u32 = 9;
    pub const IPV6_ROUTE: u32 = 11;
    pub const IPV6_RULE: u32 = 19;
    pub const IPV4_NETCONF: u32 = 24;
    pub const IPV6_NETCONF: u32 = 25;
    pub const NEXTHOP: u32 = 32;
    /// Every group whose changes can alter a forwarding decision: links
    /// (state, MTU, MAC), neighbours, addresses (and the local routes they
    /// make), routes, policy rules, per-device settings (forwarding,
    /// rp_filter), nexthop objects.
    pub const FORWARDING: [u32; 11] =
        [LINK, NEIGH, IPV4_IFADDR, IPV4_ROUTE, IPV4_RULE, IPV6_IFADDR, IPV6_ROUTE, IPV6_RULE, IPV4_NETCONF, IPV6_NETCONF, NEXTHOP];
}

/// Receive buffer of an event socket: a table of a million routes sent by
/// a routing daemon arrives faster than any reader; what does not fit is
/// reported as an overflow.
const EVENT_RCVBUF: usize = 32 << 20;

/// What one read or one drain brought.
#[derive(Debug, Default)]
pub struct Batch {
    pub messages: Vec<RouteNetlinkMessage>,
    /// Message types of notifications netlink-packet-route does not decode
    /// (netconf: forwarding and rp_filter settings; nexthop objects).
    pub undecoded: Vec<u16>,
    /// The kernel dropped notifications (ENOBUFS): something changed that
    /// `messages` does not show.
    pub overflowed: bool,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.undecoded.is_empty() && !self.overflowed
    }

    /// The neighbour entries the batch announces, each with whether it was
    /// deleted.
    pub fn neighbours(&self) -> impl Iterator<Item = (super::Neighbour, bool)> + '_ {
        self.messages.iter().filter_map(|m| match m {
            RouteNetlinkMessage::NewNeighbour(n) => super::neighbour(n).map(|n| (n, false)),
            RouteNetlinkMessage::DelNeighbour(n) => super::neighbour(n).map(|n| (n, true)),
            _ => None,
        })
    }

    /// A link, an address or a per-device setting (netconf) changed.
    pub fn has_link_or_address_change(&self) -> bool {
        use RouteNetlinkMessage as M;
        self.messages.iter().any(|m| matches!(m, M::NewLink(_) | M::DelLink(_) | M::SetLink(_) | M::NewAddress(_) | M::DelAddress(_)))
            || !self.undecoded.is_empty()
    }
}

/// A socket subscribed to rtnetlink groups.
pub struct Events {
    rtnl: Rtnl,
}

impl Events {
    /// Subscribes to `groups` ([`group`]).
    pub fn subscribe(groups: &[u32]) -> Result<Self> {
        Ok(Self { rtnl: Rtnl::subscribe(groups, EVENT_RCVBUF)? })
    }

    /// Attaches the socket filter `prog` (SO_ATTACH_BPF): the kernel runs
    /// it for every notification it sends this socket, as it makes the
    /// change, before queueing it.
    pub fn attach_filter(&self, prog: std::os::fd::BorrowedFd<'_>) -> Result<()> {
        use std::os::fd::AsRawFd as _;
        let fd = prog.as_raw_fd();
        // SAFETY: setsockopt on our socket with a c_int option value.
        let rc = unsafe {
            libc::setsockopt(
                self.rtnl.socket().as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_BPF,
                &fd as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("attaching a BPF filter to the rtnetlink socket (SO_ATTACH_BPF)");
        }
        Ok(())
    }

    /// Waits up to `timeout` for a notification to be queued. False: none
    /// came in time.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let mut pfd = libc::pollfd { fd: self.rtnl.socket().as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis().min(i32::MAX as u128) as libc::c_int) };
        Ok(n > 0)
    }

    /// Takes the notifications of one read of the socket (one datagram);
    /// None: nothing is queued.
    pub fn recv(&mut self) -> Result<Option<Batch>> {
        match self.rtnl.try_recv_events() {
            Ok(None) => Ok(None),
            Ok(Some(n)) => Ok(Some(Batch { messages: n.messages, undecoded: n.undecoded, overflowed: false })),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(Some(Batch { overflowed: true, ..Batch::default() })),
            Err(e) => Err(e).context("receiving rtnetlink notifications"),
        }
    }

    /// Takes every notification queued (an empty batch if none is).
    pub fn drain(&mut self) -> Result<Batch> {
        let mut batch = Batch::default();
        while let Some(b) = self.recv()? {
            batch.messages.extend(b.messages);
            batch.undecoded.extend(b.undecoded);
            batch.overflowed |= b.overflowed;
        }
        Ok(batch)
    }
}
