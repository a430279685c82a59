//! xnf profile: where the kernel's network path spends its time.
//!
//! - [`stages`]: the tracepoint program (`bpf/stages.bpf.c`) loaded,
//!   attached and read into a [`Profile`] ([`model`]): NET_RX softirq time
//!   cut into stages, per-packet time to each end of life, NAPI and XDP per
//!   device, drops by reason ([`reasons`]), scheduling; what was lost;
//! - [`progstats`]: run time of XDP programs and of the profiler itself;
//! - [`sample`]: sampled kernel and user stacks (`bpf/sample.bpf.c`),
//!   symbolised ([`symbols`]) into a flame graph ([`flame`]) and a
//!   top-functions table;
//! - [`Session`]: all of them over one interval; [`table`] prints it;
//! - [`cli`]: `xnf profile`.

pub mod cli;
pub mod flame;
pub mod model;
pub mod progstats;
pub mod reasons;
pub mod sample;
pub mod stages;
pub mod symbols;
pub mod table;

use std::time::Instant;

use anyhow::Result;

pub use model::Profile;
pub use stages::Watch;

/// What a profile watches and whether it samples stacks.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub watch: Watch,
    /// Sample stacks at this many Hz per CPU.
    pub stack_hz: Option<u64>,
    /// Count BPF programs' run time (BPF_ENABLE_STATS): XDP programs' ns
    /// per run and the profiler's own cost, at two clock reads per run of
    /// every BPF program (a fifth of a fast XDP path's time per packet).
    pub prog_stats: bool,
}

/// A profile being taken: run-time stats on, the tracepoints attached,
/// the sampler running. [`Session::stop`] reads and detaches all of them.
pub struct Session {
    stats: Option<progstats::StatsOn>,
    tracer: stages::Tracer,
    sampler: Option<sample::Sampler>,
    started: Instant,
    cpus: Vec<usize>,
    netns: Option<String>,
}

/// The CPUs of this machine (online, from /proc/stat's count).
pub fn cpu_count() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .max(nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN).ok().flatten().unwrap_or(1) as usize)
}

impl Session {
    pub fn start(o: &Options) -> Result<Session> {
        // Tracepoints, BPF programs and cpu-wide perf events all need it;
        // say so once rather than the first refusal's own words.
        anyhow::ensure!(nix::unistd::geteuid().is_root(), "xnf profile needs root (BPF, tracefs and perf events): run it with sudo");
        let ncpu = cpu_count();
        if let Some(c) = o.watch.cpus.iter().find(|&&c| c >= ncpu) {
            anyhow::bail!("CPU {c} out of range: this machine has CPUs 0-{}", ncpu - 1);
        }
        let cpus: Vec<usize> = if o.watch.cpus.is_empty() { (0..ncpu).collect() } else { o.watch.cpus.clone() };
        let stats = if o.prog_stats { Some(progstats::StatsOn::enable()?) } else { None };
        let tracer = stages::Tracer::start(&o.watch)?;
        let sampler = match o.stack_hz {
            Some(frequency) => Some(sample::Sampler::start(&sample::SampleOptions { cpus: cpus.clone(), frequency })?),
            None => None,
        };
        Ok(Session { stats, tracer, sampler, started: Instant::now(), cpus, netns: o.watch.netns.as_ref().map(|n| n.0.clone()) })
    }

    /// What the tracepoints counted so far (no stacks, no program stats):
    /// for waiting on a count without stopping.
    pub fn peek(&self) -> Result<Profile> {
        self.tracer.read(&self.cpus, None)
    }

    /// Reads everything, detaches, and returns the profile.
    pub fn stop(self) -> Result<Profile> {
        let seconds = self.started.elapsed().as_secs_f64();
        let stacks = self.sampler.map(sample::Sampler::stop).transpose()?;
        let ksyms = symbols::KernelSymbols::load().ok();
        let mut p = self.tracer.read(&self.cpus, ksyms.as_ref())?;
        let ran = self.stats.as_ref().map(progstats::StatsOn::ran).unwrap_or_default();
        let own: Vec<_> = ran.iter().filter(|r| r.name.starts_with("prof_") && matches!(r.kind.as_str(), "tracing" | "perf_event")).collect();
        let ns: u64 = own.iter().map(|r| r.ns).sum();
        p.cost = model::Cost { runs: own.iter().map(|r| r.runs).sum(), ns, cpu_pct: 100.0 * ns as f64 / (seconds * 1e9 * self.cpus.len() as f64) };
        p.xdp_programs = ran.into_iter().filter(|r| r.kind == "xdp").collect();
        p.seconds = seconds;
        p.cpus = self.cpus;
        p.netns = self.netns;
        if let Some(s) = &stacks {
            p.lost.stacks = s.lost.total();
        }
        p.stacks = stacks;
        Ok(p)
    }
}

mod skel {
    //! Generated skeletons.
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    pub mod stages {
        include!(concat!(env!("OUT_DIR"), "/stages.skel.rs"));
    }
    pub mod sample {
        include!(concat!(env!("OUT_DIR"), "/sample.skel.rs"));
    }
}
