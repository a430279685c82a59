//! xnf filter: a DDoS filter and firewall in XDP (the XDP paper §5.1).
//!
//! The public API is what this file exports: [`attach`], [`detach`],
//! [`apply_file`], [`confirm`], [`rollback`], the [`Filter`] type the one
//! lifecycle ([`xnf_core::lifecycle`]) drives, [`cli`] for the binary, and
//! the rule model and data plane ([`rules`], [`prefixes`], [`compile`],
//! [`program`]) for tests and the lab. Inside, modules import downwards
//! only (checked by a test):
//!
//! - [`rules`], [`prefixes`]: the rule file (TOML), checked whole before
//!   anything changes, and prefix lists in the format of public blocklists;
//! - [`program`]: the BPF program (`filter.bpf.c`) and its shared maps;
//! - [`compile`]: a checked rule file as the data plane's tables, the
//!   per-field classes of its rules made by `classes`;
//! - `synproxy`: the kernel's half of the syn-cookie action (nftables);
//! - `attach`: the filter on the lifecycle, the first stage of interfaces'
//!   entry programs, and the home of its run files;
//! - `apply`: converging to a rule file, confirm or roll back;
//! - `report`, `capture`, [`cli`]: status, counters, top sources, pcap of
//!   drops, and the `xnf filter` commands.

mod apply;
mod attach;
mod capture;
mod classes;
pub mod cli;
pub mod compile;
pub mod lists;
pub mod prefixes;
pub mod program;
mod report;
pub mod rules;
mod synproxy;

mod skel {
    //! Generated skeleton.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod filter {
        include!(concat!(env!("OUT_DIR"), "/filter.skel.rs"));
    }
}

pub use apply::{applied, apply_file, apply_text, apply_text_in, confirm, list_digest, pending_seconds, rollback, Applied, Outcome};
pub use attach::{attach, attached_links, detach, Filter};
pub use report::{rule_stats, RuleRow};
/// The kernel's half of the syn-cookie action alone (nftables SYNPROXY),
/// as the lab's `nft-synproxy` variant runs it.
pub use synproxy::{converge as synproxy_converge, remove as synproxy_remove};
