//! The sink's program (`bpf/sink.bpf.c`): count per CPU, drop.

use std::mem::MaybeUninit;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, ProgramMut};

use crate::skel::sink::{SinkSkel, SinkSkelBuilder};

pub struct SinkProgram {
    skel: SinkSkel<'static>,
}

impl SinkProgram {
    pub fn load() -> Result<Self> {
        // Leaked on purpose, as for the router: a few bytes per load.
        let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let open = SinkSkelBuilder::default().open(storage).context("opening the sink BPF object")?;
        Ok(Self { skel: open.load().context("loading the sink program")? })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_sink
    }

    /// (packets, bytes) counted so far, summed over CPUs.
    pub fn counts(&self) -> Result<(u64, u64)> {
        let per_cpu = self.skel.maps.counts.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
        Ok(per_cpu.iter().fold((0, 0), |(p, b), v| {
            let word = |i: usize| u64::from_ne_bytes(v[i * 8..i * 8 + 8].try_into().unwrap());
            (p + word(0), b + word(1))
        }))
    }
}

impl SinkProgram {
    /// The per-CPU `{packets, bytes}` counter map.
    pub fn counts_map(&self) -> &libbpf_rs::MapMut<'static> {
        &self.skel.maps.counts
    }
}
