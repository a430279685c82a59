//! The sink's program (`bpf/sink.bpf.c`): count per CPU, drop.

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapHandle, ProgramMut};

use crate::pod::{object_storage, sum_percpu};
use crate::skel::sink::{SinkSkel, SinkSkelBuilder};

pub struct SinkProgram {
    skel: SinkSkel<'static>,
}

impl SinkProgram {
    pub fn load() -> Result<Self> {
        let open = SinkSkelBuilder::default().open(object_storage()).context("opening the sink BPF object")?;
        Ok(Self { skel: open.load().context("loading the sink program")? })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_sink
    }

    /// (packets, bytes) counted so far, summed over CPUs.
    pub fn counts(&self) -> Result<(u64, u64)> {
        let [packets, bytes] = sum_percpu::<2>(&self.skel.maps.counts, 0)?;
        Ok((packets, bytes))
    }

    /// A handle on the counters that outlives this object and may move to
    /// another thread (the program itself may not).
    pub fn counter(&self) -> Result<SinkCounter> {
        Ok(SinkCounter { counts: MapHandle::try_from(&self.skel.maps.counts)? })
    }
}

/// Reads a sink's counters from any thread.
pub struct SinkCounter {
    counts: MapHandle,
}

impl SinkCounter {
    /// Packets counted so far, summed over CPUs.
    pub fn packets(&self) -> Result<u64> {
        Ok(sum_percpu::<1>(&self.counts, 0)?[0])
    }
}
