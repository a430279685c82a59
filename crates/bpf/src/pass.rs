//! The pass program (`bpf/pass.bpf.c`): XDP_PASS only, for veth peers that
//! must have an XDP program so that redirected frames reach them.

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::ProgramMut;

use crate::pod::object_storage;
use crate::skel::pass::{PassSkel, PassSkelBuilder};

pub struct PassProgram {
    skel: PassSkel<'static>,
}

impl PassProgram {
    pub fn load() -> Result<Self> {
        let open = PassSkelBuilder::default().open(object_storage()).context("opening the pass BPF object")?;
        Ok(Self { skel: open.load().context("loading the pass program")? })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_pass
    }
}
