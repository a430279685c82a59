//! xnf lb: a Layer-4 load balancer in XDP (the XDP paper §5.3, issue 15).
//!
//! The public API is what this file exports: [`attach`], [`detach`],
//! [`apply_file`], [`applied`], [`counters`], the [`Lb`] and [`Decap`]
//! types the one lifecycle ([`xnf_core::lifecycle`]) drives, [`cli`] for
//! the binary, and the model and data plane for tests and the lab. Inside,
//! modules import downwards only (checked by a test):
//!
//! - [`config`]: the service file (TOML) that `xnf lb apply FILE` converges
//!   to: virtual IPs with protocol and port, backends and weights,
//!   forwarding mode; checked whole, errors naming file, line and field;
//! - [`maglev`]: Maglev lookup tables with weights, built identically by
//!   every instance behind ECMP from the same file (fixed SipHash-1-3 keys,
//!   integer arithmetic, independent of backend order);
//! - [`plan`]: what a new file does before it is applied (`xnf lb plan`):
//!   the share of the hash space that moves, the collateral that moves
//!   although its backend stays, and each backend's share against its
//!   weight;
//! - [`program`], [`flow`]: the BPF program (`lb.bpf.c`), its shared maps
//!   and the flow keys it hashes;
//! - [`tables`]: a checked file written into an instance's maps (ids,
//!   records, VIPs, tables);
//! - `attach`: the lb on the lifecycle, and the home of its run files;
//! - `apply`: converging the pinned maps to a file;
//! - [`decap`]: the backends' half, a network function of its own;
//! - `report`, [`cli`]: status and counters, and the `xnf lb` commands.
//!
//! The data plane sends a flow without a connection-table entry to the
//! backend in entry `hash(flow) % table_size` of its service's table.

mod apply;
#[cfg(test)]
mod apply_tests;
mod attach;
pub mod cache;
pub mod cli;
pub mod config;
pub mod decap;
pub mod flow;
pub mod maglev;
pub mod plan;
pub mod program;
mod report;
pub mod tables;

mod skel {
    //! Generated skeletons.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod lb {
        include!(concat!(env!("OUT_DIR"), "/lb.skel.rs"));
    }
    pub mod decap {
        include!(concat!(env!("OUT_DIR"), "/decap.skel.rs"));
    }
}

pub use apply::{apply_file, apply_text, restore, snapshot, Snapshot};
pub use attach::{applied, Applied, AppliedFile};
pub use attach::{attach, attached_links, counters, detach, neigh_table, open_maps, pinned_program, Lb};
pub use config::{Backend, Config, HashFields, Mode, Proto, Service};
pub use decap::Decap;
pub use maglev::{DEFAULT_TABLE_SIZE, MAX_TABLE_SIZE, NO_BACKEND};
pub use plan::{disruption, plan, rehashed, Balance, Change, Disruption, ServicePlan, Share, Table};
pub use report::{service_stats, ServiceStats};
