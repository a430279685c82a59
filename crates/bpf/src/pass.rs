//! The pass program (`bpf/pass.bpf.c`): XDP_PASS only, for veth peers that
//! must have an XDP program so that redirected frames reach them.

use std::mem::MaybeUninit;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{OpenObject, ProgramMut};

use crate::skel::pass::{PassSkel, PassSkelBuilder};

pub struct PassProgram {
    skel: PassSkel<'static>,
}

impl PassProgram {
    pub fn load() -> Result<Self> {
        // Leaked on purpose, as for the router: a few bytes per load.
        let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let open = PassSkelBuilder::default().open(storage).context("opening the pass BPF object")?;
        Ok(Self { skel: open.load().context("loading the pass program")? })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_pass
    }
}
