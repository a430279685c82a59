//! xnf filter: a DDoS filter and firewall in XDP (the XDP paper §5.1).
//!
//! - [`rules`]: the rule file (TOML), checked whole before anything changes;
//! - [`prefixes`]: prefix lists in the format of public blocklists;
//! - [`program`]: the BPF program (`filter.bpf.c`) and its shared maps;
//! - [`compile`]: a checked rule file as the data plane's tables;
//! - [`attach`]: the filter as the first stage of interfaces' entry programs;
//! - [`apply`]: converging to a rule file, confirm or roll back;
//! - [`synproxy`]: the kernel's half of the syn-cookie action (nftables);
//! - [`report`], [`capture`]: status, counters, top sources, pcap of drops;
//! - [`cli`]: the `xnf filter` commands.

pub mod apply;
pub mod attach;
pub mod capture;
pub mod cli;
pub mod compile;
pub mod prefixes;
pub mod program;
pub mod report;
pub mod rules;
pub mod synproxy;

mod skel {
    //! Generated skeleton.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod filter {
        include!(concat!(env!("OUT_DIR"), "/filter.skel.rs"));
    }
}

pub use apply::{apply_file, apply_text, confirm, rollback, Outcome};
pub use attach::{attach, detach};
