//! The raw-verdict program (`bpf/actions.bpf.c`) of the `actions`
//! experiment: count, then drop / pass / TX / redirect to a port / redirect
//! to a CPU.

use std::os::fd::{AsFd, AsRawFd};

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramMut};

use crate::skel::actions::types::xnf_action;
use crate::skel::actions::{ActionsSkel, ActionsSkelBuilder};
use xnf_core::maps::{as_bytes, object_storage, sum_percpu};

xnf_core::c_enum! {
    /// The raw XDP verdicts of the `actions` experiment: `enum xnf_action`.
    pub enum ActionKind: xnf_action, max XNF_ACT_MAX {
        Drop = XNF_ACT_DROP => "drop",
        Pass = XNF_ACT_PASS => "pass",
        Tx = XNF_ACT_TX => "tx",
        Redirect = XNF_ACT_REDIRECT => "redirect",
        Cpumap = XNF_ACT_CPUMAP => "cpumap",
    }
}

/// What the program does with every frame, with the redirects' targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Drop,
    Pass,
    /// Back out of the ingress port, MACs swapped.
    Tx,
    /// Out of another port (a DEVMAP entry).
    Redirect {
        ifindex: u32,
    },
    /// To another CPU (a CPUMAP entry), where a CPUMAP program counts and drops.
    Cpumap {
        cpu: u32,
    },
}

impl Action {
    pub fn kind(self) -> ActionKind {
        match self {
            Action::Drop => ActionKind::Drop,
            Action::Pass => ActionKind::Pass,
            Action::Tx => ActionKind::Tx,
            Action::Redirect { .. } => ActionKind::Redirect,
            Action::Cpumap { .. } => ActionKind::Cpumap,
        }
    }

    fn code(self) -> xnf_action {
        xnf_action(self.kind() as u32)
    }
}

/// CPUMAP queue size per CPU (frames waiting for the remote CPU).
const CPUMAP_QSIZE: u32 = 2048;

pub struct ActionsProgram {
    skel: ActionsSkel<'static>,
}

impl ActionsProgram {
    /// Loads the program for `action`, its redirect maps filled (ifindexes
    /// in the calling thread's namespace).
    pub fn load(action: Action) -> Result<Self> {
        let mut open = ActionsSkelBuilder::default().open(object_storage()).context("opening the actions BPF object")?;
        let ro = open.maps.rodata_data.as_deref_mut().context("actions program has no rodata")?;
        ro.action = action.code();
        if let Action::Cpumap { cpu } = action {
            ro.target_cpu = cpu;
        }
        let skel = open.load().context("loading the actions program")?;
        let p = ActionsProgram { skel };
        match action {
            Action::Redirect { ifindex } => {
                let val = libbpf_sys::bpf_devmap_val { ifindex, ..Default::default() };
                p.skel.maps.tx_port.update(&0u32.to_ne_bytes(), as_bytes(&val), MapFlags::ANY).context("filling the redirect DEVMAP")?;
            }
            Action::Cpumap { cpu } => {
                let mut val = libbpf_sys::bpf_cpumap_val { qsize: CPUMAP_QSIZE, ..Default::default() };
                val.bpf_prog.fd = p.skel.progs.xnf_cpumap_count.as_fd().as_raw_fd();
                p.skel
                    .maps
                    .cpu_map
                    .update(&cpu.to_ne_bytes(), as_bytes(&val), MapFlags::ANY)
                    .with_context(|| format!("adding CPU {cpu} to the CPUMAP (with its XDP program: needs Linux 5.9+)"))?;
            }
            _ => {}
        }
        Ok(p)
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_action
    }

    /// Handles on the counters that may move to other threads.
    pub fn counters(&self) -> Result<ActionCounters> {
        Ok(ActionCounters { local: MapHandle::try_from(&self.skel.maps.counts)?, remote: MapHandle::try_from(&self.skel.maps.remote_counts)? })
    }
}

pub struct ActionCounters {
    local: MapHandle,
    remote: MapHandle,
}

impl ActionCounters {
    /// Frames the ingress program acted on.
    pub fn acted(&self) -> Result<u64> {
        Ok(sum_percpu::<1>(&self.local, 0)?[0])
    }

    /// Frames the CPUMAP program received on the remote CPU.
    pub fn remote(&self) -> Result<u64> {
        Ok(sum_percpu::<1>(&self.remote, 0)?[0])
    }
}
