//! Rust mirrors of the C types every network function shares
//! (`bpf/include/xnf/`), generated from the BTF of `abi.bpf.c`.
#![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
include!(concat!(env!("OUT_DIR"), "/abi.skel.rs"));
