//! The crate's one way of talking rtnetlink, in the calling thread's network
//! namespace (wrap it in [`crate::run_in`] or [`crate::Netns::run`] for
//! another): interfaces as the kernel reports them, veth creation, link
//! changes and link events, and underneath one transport that sends single
//! requests, dumps and batches. [`crate::Netns`]'s typed helpers, its
//! [`crate::Batch`], veth pairs and route tables all go through it.

mod config;
mod events;
mod fibshape;
mod link;
mod lookup;
mod socket;

pub(crate) use config::{addr_message, del_route_message, ipv6_link_local, neigh_message, route_message, RTPROT_BOOT};
pub use events::{group, Batch, Events};
pub use fibshape::{FibShape, Shape};
pub use link::{create_veth, delete_link, link_by_name, links, move_link, set_up, Link};
pub(crate) use link::{set_link_message, LinkChange};
pub use lookup::{
    addresses, ipv4_addresses, main_routes, neighbour, neighbours, route_get, table_routes, use_neighbour, Address, Ipv4Address, Neighbour, RouteGet,
    TableRoute,
};
pub use socket::{BatchConfig, KernelError};
pub(crate) use socket::{BatchOutcome, Failure, Rtnl};
