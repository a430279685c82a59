//! xnf filter: a DDoS filter and firewall in XDP (seed 003 §5.1).
//!
//! This crate holds, so far, the filter's rule language ([`rules`]) and its
//! prefix lists ([`prefixes`]), checked whole before anything changes. The
//! data plane, its control plane and `xnf filter` come next (README).

pub mod prefixes;
pub mod rules;
