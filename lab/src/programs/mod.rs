//! The lab's BPF programs (`lab/bpf/`): the live-frame generator, the
//! counting sink, and the raw XDP verdicts.

pub mod actions;
pub mod gen;
pub mod sink;
