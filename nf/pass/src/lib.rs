//! xnf pass: the XDP_PASS program a veth end needs to receive redirected
//! frames (`xnf pass attach|detach`), and the reflector NF (XDP_TX).

pub mod attach;
pub mod cli;
pub mod program;

pub use program::{PassProgram, ReflectProgram};

mod skel {
    //! Generated skeletons.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod pass {
        include!(concat!(env!("OUT_DIR"), "/pass.skel.rs"));
    }
    pub mod reflect {
        include!(concat!(env!("OUT_DIR"), "/reflect.skel.rs"));
    }
}
