//! What every xnf control plane shares: where state lives (bpffs pins, run
//! files) and the lock that serialises changes to it, XDP attachment through
//! pinned links, reading and writing BPF maps, the C types and enums every
//! network function shares (generated from BTF), traffic classes, the
//! kernel's IPv4 source check as forwarding programs hold it, the route
//! cache's keeper, and process set-up.

pub mod abi;
pub mod cenum;
pub mod class;
pub mod entry;
pub mod features;
pub mod files;
pub mod fwd;
pub mod layout;
pub mod lifecycle;
pub mod maps;
pub mod migrate;
pub mod neigh;
pub mod procstat;
pub mod route_cache;
pub mod runtime;
pub mod sources;
pub mod state;
pub mod upgrade;
pub mod xdp;
