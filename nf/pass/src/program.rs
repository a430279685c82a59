//! The two trivial programs: pass (`pass.bpf.c`: XDP_PASS only, for veth
//! peers that must have an XDP program so that redirected frames reach them)
//! and reflect (`reflect.bpf.c`: XDP_TX every frame, the seed's stand-in
//! network function).

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::ProgramMut;

use xnf_core::maps::object_storage;

use crate::skel::pass::{PassSkel, PassSkelBuilder};
use crate::skel::reflect::{ReflectSkel, ReflectSkelBuilder};

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

pub struct ReflectProgram {
    skel: ReflectSkel<'static>,
}

impl ReflectProgram {
    pub fn load() -> Result<Self> {
        let open = ReflectSkelBuilder::default().open(object_storage()).context("opening the reflect BPF object")?;
        Ok(Self { skel: open.load().context("loading the reflect program")? })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_reflect
    }
}
