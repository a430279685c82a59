//! Run counts and run time of BPF programs (BPF_ENABLE_STATS): the time
//! XDP programs take per frame, and the profiler's own cost. The kernel
//! counts only while some process holds the stats file descriptor (or the
//! kernel.bpf_stats_enabled sysctl is on); holding it costs two clock reads
//! per program run, in every program.

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::{bail, Result};
use libbpf_rs::query::ProgInfoIter;
use libbpf_rs::ProgramType;
use serde::{Deserialize, Serialize};

/// Stats are counted while this lives.
pub struct StatsOn {
    _fd: OwnedFd,
    before: HashMap<u32, (String, ProgramType, u64, u64)>,
}

/// One program's runs in a profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProgStat {
    pub id: u32,
    pub name: String,
    /// `xdp`, `tracing`, `perf_event`, ...
    pub kind: String,
    pub runs: u64,
    pub ns: u64,
}

impl ProgStat {
    pub fn ns_per_run(&self) -> f64 {
        self.ns as f64 / self.runs.max(1) as f64
    }
}

fn snapshot() -> HashMap<u32, (String, ProgramType, u64, u64)> {
    ProgInfoIter::default().map(|p| (p.id, (p.name.to_string_lossy().into_owned(), p.ty, p.run_cnt, p.run_time_ns))).collect()
}

impl StatsOn {
    pub fn enable() -> Result<Self> {
        // SAFETY: plain syscall wrapper.
        let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
        if fd < 0 {
            bail!("BPF_ENABLE_STATS failed ({}): run as root", std::io::Error::from_raw_os_error(-fd));
        }
        // SAFETY: a new descriptor we own.
        Ok(Self { _fd: unsafe { OwnedFd::from_raw_fd(fd) }, before: snapshot() })
    }

    /// Every program that ran since `enable`, by id.
    pub fn ran(&self) -> Vec<ProgStat> {
        let mut v: Vec<ProgStat> = snapshot()
            .into_iter()
            .filter_map(|(id, (name, ty, cnt, ns))| {
                let (c0, n0) = self.before.get(&id).map(|b| (b.2, b.3)).unwrap_or((0, 0));
                let runs = cnt.saturating_sub(c0);
                (runs > 0).then(|| ProgStat { id, name, kind: kind(ty), runs, ns: ns.saturating_sub(n0) })
            })
            .collect();
        v.sort_by_key(|p| p.id);
        v
    }
}

fn kind(ty: ProgramType) -> String {
    match ty {
        ProgramType::Xdp => "xdp".into(),
        ProgramType::Tracing => "tracing".into(),
        ProgramType::PerfEvent => "perf_event".into(),
        ProgramType::SchedCls => "tc".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}
