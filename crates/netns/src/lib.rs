//! Network namespaces and netlink for xnf: the one rtnetlink mechanism
//! ([`netlink`]: links, link events, veths, addresses, routes, neighbours,
//! in single requests, dumps and batches), offloads by ioctl ([`ethtool`]),
//! running code inside any network namespace ([`run_in`]), route tables in
//! netlink batches, and the namespace harness of xnf's integration tests
//! and lab.
//!
//! Builds topologies of network namespaces joined by veth pairs, configures
//! them by netlink from inside (`ip` runs only to create and delete named
//! namespaces, and as the [`Netns::ip`] escape hatch for test fixtures),
//! runs code inside them, and guarantees removal through guards: a
//! [`Netns`] deletes its namespace on drop (also on panic), which destroys
//! every interface inside it.
//!
//! Policy enforced here:
//! - everything created is named with the `xnf` prefix: namespaces
//!   `xnf-<pid>-<counter>-<role>`, interfaces `xnf<id><role>` (see [`ifname`]);
//! - links are created only inside namespaces, never in the host's;
//! - addresses come only from 198.18.0.0/15 and 2001:db8::/32
//!   ([`check_test_addr`]);
//! - leftovers of killed processes are removed by [`cleanup_stale`], and
//!   [`cleanup_all`] removes everything this process still owns (for exit paths).
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use xnf_netns::{LineConfig, LineTopology};
//! let t = LineTopology::new(&LineConfig::default())?;
//! let before = t.dut().snmp()?.value("Ip", "ForwDatagrams")?;
//! t.gen().exec(&["ping", "-c1", &t.sink_v4.to_string()])?;
//! assert!(t.dut().snmp()?.value("Ip", "ForwDatagrams")? > before);
//! # Ok(()) }
//! ```
//!
//! Everything needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2
//! (`ip netns`).

mod addr;
mod cmd;
mod config;
pub mod devsettings;
pub mod ethnl;
pub mod ethtool;
pub mod netlink;
mod netns;
mod packet;
mod routes;
mod stats;
mod topology;

pub use addr::{check_test_addr, is_test_ip, Mac};
pub use config::Batch;
pub use ethtool::Offload;
pub use netlink::{BatchConfig, KernelError};
pub use netns::{cleanup_all, cleanup_stale, cleanup_stale_except, live_namespaces, run_in, Netns, NETNS_DIR, NS_PREFIX};
pub use packet::{packet_socket, send_frame};
pub use routes::{
    lookup_targets, Family, InstalledRoutes, RouteReport, RouteSet, IPV4_LENGTH_MIX, IPV6_LENGTH_MIX, MAX_SYNTHETIC, NESTED_SHARE, V4_SLICE_MIN,
    V4_SLICE_SHIFT, V6_SHIFT, XNF_RTPROT,
};
pub use stats::{LinkStats, Snmp};
pub use topology::{ifname, veth, LineConfig, LineTopology, Topology, VethPair};
