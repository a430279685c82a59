//! xnf as a library: everything the `xnf` and `xnf-cni` binaries share.

pub mod afxdp;
pub mod chain;
pub mod lab;
pub mod netlink;
pub mod pass;
pub mod router;
pub mod runtime;
pub mod state;
pub mod xdp_link;
