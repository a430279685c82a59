//! The decap program (`decap.bpf.c`) for backends: loading it.

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::ProgramMut;
use std::path::Path;

use crate::skel::decap::{DecapSkel, DecapSkelBuilder};

pub struct DecapProgram {
    skel: DecapSkel<'static>,
}

impl DecapProgram {
    pub fn load(_pin_dir: Option<&Path>, gue_port: u16) -> Result<Self> {
        let mut open = DecapSkelBuilder::default().open(xnf_core::maps::object_storage()).context("opening the decap BPF object")?;
        let ro = open.maps.rodata_data.as_deref_mut().context("decap has no rodata")?;
        ro.gue_port = gue_port.to_be();
        let skel = open.load().context("loading decap")?;
        Ok(Self { skel })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_lb_decap
    }
}
