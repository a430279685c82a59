//! The experiments, one file (or folder) each.

pub mod actions;
pub mod afxdp;
pub mod bgp;
pub mod chain;
pub mod cost;
pub mod disrupt;
pub mod fibchange;
pub mod filter;
pub mod fwdlatency;
pub mod gen;
pub mod latency;
pub mod lb;
pub mod router;
pub mod scrape;
pub mod stack;
