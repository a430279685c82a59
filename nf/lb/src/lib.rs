//! xnf lb: a Layer-4 load balancer in XDP (the XDP paper §5.3, issue 15) — its
//! control plane's pure part, without BPF or netlink.
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
//!   weight.
//!
//! The data plane sends a flow without a connection-table entry to the
//! backend in entry `hash(flow) % table_size` of its service's table.

pub mod apply;
pub mod attach;
pub mod cli;
pub mod config;
pub mod decap;
pub mod flow;
pub mod maglev;
pub mod plan;
pub mod program;
pub mod report;

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

pub use apply::{apply_file, apply_text};
pub use attach::{attach, detach};
pub use config::{Backend, Config, HashFields, Mode, Proto, Service};
pub use maglev::{DEFAULT_TABLE_SIZE, MAX_TABLE_SIZE, NO_BACKEND};
pub use plan::{disruption, plan, rehashed, Balance, Change, Disruption, ServicePlan, Share, Table};
