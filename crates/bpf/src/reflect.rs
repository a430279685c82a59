//! The reflector (`bpf/reflect.bpf.c`): XDP_TX every frame, the seed's
//! stand-in network function.

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::ProgramMut;

use crate::pod::object_storage;
use crate::skel::reflect::{ReflectSkel, ReflectSkelBuilder};

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
