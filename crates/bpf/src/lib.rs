//! xnf's BPF programs as libbpf-rs skeletons, the types they share with
//! user space, and a `BPF_PROG_TEST_RUN` harness for packet tests.

pub mod skel {
    //! Generated skeletons, one module per `bpf/*.bpf.c`.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod router {
        include!(concat!(env!("OUT_DIR"), "/router.skel.rs"));
    }
    pub mod pass {
        include!(concat!(env!("OUT_DIR"), "/pass.skel.rs"));
    }
    pub mod gen {
        include!(concat!(env!("OUT_DIR"), "/gen.skel.rs"));
    }
    pub mod sink {
        include!(concat!(env!("OUT_DIR"), "/sink.skel.rs"));
    }
    pub mod actions {
        include!(concat!(env!("OUT_DIR"), "/actions.skel.rs"));
    }
    pub mod chain {
        include!(concat!(env!("OUT_DIR"), "/chain.skel.rs"));
    }
    pub mod reflect {
        include!(concat!(env!("OUT_DIR"), "/reflect.skel.rs"));
    }
    pub mod afxdp {
        include!(concat!(env!("OUT_DIR"), "/afxdp.skel.rs"));
    }
}

mod pod;
pub mod actions;
pub mod afxdp;
pub mod chain;
pub mod gen;
pub mod pass;
pub mod reflect;
pub mod router;
pub mod sink;
pub mod testrun;
