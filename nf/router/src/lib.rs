//! xnf router: IPv4/IPv6 forwarding at the XDP hook on the kernel's FIB.
//!
//! - [`program`]: the BPF program (`router.bpf.c`) and the maps its
//!   instances share;
//! - [`attach`]: attaching it to interfaces and detaching it, all or nothing;
//! - [`follow`]: keeping the VLAN, MAC and source tables in step with the kernel;
//! - [`cache`]: keeping the route cache exact (the follower's half);
//! - [`report`]: `status` and `stats` for people and programs;
//! - [`cli`]: the `xnf router` commands.

pub mod attach;
pub mod cache;
pub mod cli;
pub mod follow;
pub mod neigh;
pub mod program;
pub mod report;

pub use attach::{attach, attached, detach, AttachOptions, AttachReport, Attached};

mod skel {
    //! Generated skeleton.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod router {
        include!(concat!(env!("OUT_DIR"), "/router.skel.rs"));
    }
}
