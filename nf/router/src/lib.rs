//! xnf router: IPv4/IPv6 forwarding at the XDP hook on the kernel's FIB.
//!
//! The public API is what this file exports: [`attach`], [`detach`],
//! [`attached`], the [`Router`] type the one lifecycle
//! ([`xnf_core::lifecycle`]) drives, [`spawn_follower`], [`cli`] for the
//! binary and [`program`] (the data plane, for packet tests and the lab).
//! Inside, modules import downwards only (checked by a test):
//!
//! - [`program`]: the BPF program (`router.bpf.c`) and the maps its
//!   instances share;
//! - `tables`: the VLAN, MAC and source tables in step with the kernel;
//! - `attach`: the router on the lifecycle (slots, options, replacement);
//! - `cache`, `neigh`: the route cache kept exact and the neighbours it
//!   sends to confirmed (the follower's halves);
//! - `follow`: the follower, which runs them;
//! - `report`, [`cli`]: `status` and `stats`, and the `xnf router` commands.

mod attach;
mod cache;
pub mod cli;
mod follow;
mod neigh;
pub mod program;
mod report;
mod tables;

pub use attach::{attach, attached, detach, lock, open_maps, pin_dir, AttachOptions, AttachReport, Attached, Router};
pub use follow::{run as run_follower, running_pid as follower_pid, spawn as spawn_follower};
pub use report::interface_stats;

mod skel {
    //! Generated skeleton.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod router {
        include!(concat!(env!("OUT_DIR"), "/router.skel.rs"));
    }
}
