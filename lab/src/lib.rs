//! xnf lab: topologies in network namespaces, an in-kernel traffic
//! generator and XDP sink, and experiments that measure xnf against the
//! Linux stack doing the same job.
//!
//! - [`engine`]: what every experiment shares, and the one driver that runs
//!   an experiment's points × runs × alternated variants;
//! - [`experiments`]: one file (or folder) per experiment;
//! - [`programs`]: the lab's own BPF programs (generator, sink, raw verdicts);
//! - [`report`]: one HTML page from a results file;
//! - [`cli`]: the `xnf lab` commands.

pub mod cli;
pub mod engine;
pub mod experiments;
pub mod programs;
pub mod report;

mod skel {
    //! Generated skeletons.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod gen {
        include!(concat!(env!("OUT_DIR"), "/gen.skel.rs"));
    }
    pub mod sink {
        include!(concat!(env!("OUT_DIR"), "/sink.skel.rs"));
    }
    pub mod actions {
        include!(concat!(env!("OUT_DIR"), "/actions.skel.rs"));
    }
}
