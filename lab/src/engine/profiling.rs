//! `--profile` on any experiment: each full-speed interval and load step
//! is measured again with `xnf profile` attached (all CPUs, stacks
//! sampled), so that each variant's rate stands next to where its CPU time
//! went — stage by stage per packet the experiment counted, its XDP
//! programs, its drops, its hottest functions and a flame graph — and the
//! profiler's overhead is the difference between the two intervals.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use xnf_profile::Profile;

use super::results::{Point, Results, Sample, SampleKind};

/// The generator's own XDP program (BPF_PROG_TEST_RUN live frames): not
/// part of the path measured.
const GENERATOR: &str = "xnf_gen";

/// The path's XDP programs a profile timed (`--prog-stats`): all but the
/// generator's.
fn path_programs(p: &Profile) -> impl Iterator<Item = &xnf_profile::progstats::ProgStat> {
    p.xdp_programs.iter().filter(|x| x.name != GENERATOR)
}

/// `--profile` and `--flame`, on every experiment.
#[derive(Args, Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProfileArgs {
    /// Profile each measured interval again with `xnf profile` attached
    /// (all CPUs, stacks sampled): the results show where the CPU time
    /// went, stage by stage, and what the profiler cost (the difference
    /// between the two intervals). `--profile counts`: nothing that runs
    /// per packet (no stages; the least overhead).
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "stages", value_name = "stages|counts")]
    pub profile: Option<ProfileLevel>,
    /// With --profile: write a flame graph (SVG) per profiled interval here.
    #[arg(long, value_name = "DIR")]
    #[serde(skip)]
    pub flame: Option<PathBuf>,
    /// With --profile: time every BPF program in the profiled twin (the
    /// kernel's BPF statistics: two clock reads per program run, which
    /// slow the twin further). The XDP column then gives the path's XDP
    /// programs' ns per packet, and each one's ns per run is listed.
    #[arg(long)]
    #[serde(default)]
    pub prog_stats: bool,
}

/// How much `--profile` attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileLevel {
    /// Stages and packet records: tracepoints on every packet.
    Stages,
    /// Counts only: NAPI, XDP, drops, scheduling; softirqs from /proc.
    Counts,
}

impl ProfileArgs {
    pub fn check(&self) -> Result<()> {
        ensure!(self.flame.is_none() || self.profile.is_some(), "--flame needs --profile");
        ensure!(!self.prog_stats || self.profile.is_some(), "--prog-stats needs --profile");
        Ok(())
    }

    /// The profiler's options, when profiling.
    pub fn options(&self) -> Option<xnf_profile::Options> {
        self.profile.map(|l| xnf_profile::Options {
            // One packet in 8 followed to its end: the table's updates are
            // the costliest probes, and the latencies need no more.
            watch: xnf_profile::Watch { in_flight: 65536, counts_only: l == ProfileLevel::Counts, follow_every: 8, ..Default::default() },
            stack_hz: Some(499),
            prog_stats: self.prog_stats,
        })
    }
}

/// One profiled interval and its unprofiled twin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfiledRun {
    pub variant: String,
    pub point: Point,
    pub run: u32,
    /// The load step's offered rate; None at full speed.
    pub offered_pps: Option<f64>,
    /// Received Mpps without and with the profiler.
    pub mpps: f64,
    pub profiled_mpps: f64,
    /// CPU ns per received packet without and with the profiler.
    pub ns_per_packet: f64,
    pub profiled_ns_per_packet: f64,
    /// The co-runner's rate in the unprofiled interval (`xnf lab stack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corunner_per_s: Option<f64>,
    /// Packets received in the profiled interval: the denominator below.
    pub packets: u64,
    /// NET_RX softirq ns per packet by stage, then the softirq total.
    pub stages: Vec<(String, f64)>,
    /// The path's XDP programs (not the generator's): ns per packet, with
    /// `--prog-stats`.
    #[serde(default)]
    pub xdp_ns_per_packet: Option<f64>,
    /// Hottest functions: (name, self %).
    pub top: Vec<(String, f64)>,
    /// The flame graph written, if any.
    pub flame: Option<String>,
    /// The whole profile (without its stacks: see the flame graph).
    pub profile: Profile,
}

impl ProfiledRun {
    /// From the unprofiled sample, its profiled twin and the profile; the
    /// flame graph goes into `flame_dir` when given.
    pub fn new(experiment: &str, label: &str, plain: &Sample, twin: &Sample, mut prof: Profile, flame_dir: Option<&Path>) -> Result<ProfiledRun> {
        let packets = twin.received;
        let offered_pps = match twin.kind {
            SampleKind::Load { offered_pps, .. } | SampleKind::Search { offered_pps } => Some(offered_pps),
            SampleKind::Max => None,
        };
        // Programs are timed only with --prog-stats.
        let mut progs = path_programs(&prof).peekable();
        let xdp_ns = progs.peek().is_some().then(|| progs.map(|x| x.ns).sum::<u64>());
        // The idle task is not where the time went.
        let stacks = prof.stacks.take().map(|s| s.busy());
        let top = stacks.as_ref().map(|s| s.top(8).into_iter().map(|f| (f.name, f.self_pct)).collect()).unwrap_or_default();
        let flame = match (flame_dir, &stacks) {
            (Some(dir), Some(st)) => {
                let step = offered_pps.map_or("max".to_string(), |r| format!("{:.3}Mpps", r / 1e6));
                let name = format!("{experiment}-{}-{label}-run{}-{step}", plain.variant, plain.run + 1);
                let title = format!("xnf lab {experiment}: {} at {label}, run {}, {step}", plain.variant, plain.run + 1);
                Some(write_flame(dir, &name, &title, st)?)
            }
            _ => None,
        };
        Ok(ProfiledRun {
            variant: plain.variant.clone(),
            point: plain.point.clone(),
            run: plain.run,
            offered_pps,
            mpps: plain.mpps,
            profiled_mpps: twin.mpps,
            ns_per_packet: plain.ns_per_packet,
            profiled_ns_per_packet: twin.ns_per_packet,
            corunner_per_s: plain.corunner_per_s,
            packets,
            stages: prof.per_packet(packets),
            xdp_ns_per_packet: xdp_ns.map(|ns| ns as f64 / packets.max(1) as f64),
            top,
            flame,
            profile: prof,
        })
    }

    /// The profiler's cost: the fall in rate at full speed, the rise in CPU
    /// per packet at a fixed offered rate, in percent.
    pub fn overhead_pct(&self) -> f64 {
        match self.offered_pps {
            None => 100.0 * (1.0 - self.profiled_mpps / self.mpps),
            Some(_) => 100.0 * (self.profiled_ns_per_packet / self.ns_per_packet - 1.0),
        }
    }

    pub fn stage(&self, name: &str) -> f64 {
        self.stages.iter().find(|(n, _)| n == name).map_or(0.0, |s| s.1)
    }
}

/// Writes a flame graph as `dir/name.svg` (the name made safe for a file
/// system) and returns its path.
pub fn write_flame(dir: &Path, name: &str, title: &str, stacks: &xnf_profile::sample::Stacks) -> Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || "-._".contains(c) { c } else { '_' }).collect();
    let path = dir.join(format!("{name}.svg"));
    std::fs::write(&path, xnf_profile::flame::svg(stacks, title)).with_context(|| format!("writing {}", path.display()))?;
    Ok(path.display().to_string())
}

/// Prints where each variant's time went: one row per profiled interval,
/// the kernel path and the XDP path side by side.
pub fn print(r: &Results) {
    if r.profiles.is_empty() {
        return;
    }
    let names: Vec<&str> = xnf_profile::model::STAGES.iter().map(|s| s.0).collect();
    println!("\nwhere the time went (xnf profile, twin intervals; NET_RX softirq ns per packet received, all CPUs):");
    let heads: String = names.iter().map(|n| format!(" {n:>7}")).collect();
    println!(
        "{:<13} {:<22} {:>3} {:>9} {:>7} {:>8}{heads} {:>8} {:>7}  top functions (self %)",
        "variant", "point", "run", "offered", "Mpps", "overhead", "softirq", "XDP"
    );
    for p in &r.profiles {
        // Counting only, no stage is measured; the softirq time is the kernel's.
        let stages: String = names.iter().map(|n| if p.profile.counts_only { format!(" {:>7}", "-") } else { format!(" {:>7.0}", p.stage(n)) }).collect();
        let top: Vec<String> = p.top.iter().take(3).map(|(n, pct)| format!("{n} {pct:.0}")).collect();
        println!(
            "{:<13} {:<22} {:>3} {:>9} {:>7.3} {:>7.1}%{stages} {:>8.0} {:>7}  {}",
            p.variant,
            r.label(&p.point),
            p.run + 1,
            p.offered_pps.map_or("max".into(), |o| format!("{:.3}", o / 1e6)),
            p.profiled_mpps,
            p.overhead_pct(),
            p.stage("softirq"),
            p.xdp_ns_per_packet.map_or("-".into(), |x| format!("{x:.0}")),
            top.join(", ")
        );
    }
    // Each path program's own time, so variants compare program to program.
    for p in r.profiles.iter().filter(|p| p.xdp_ns_per_packet.is_some()) {
        let progs: Vec<String> = path_programs(&p.profile).map(|x| format!("{} {:.1} ns × {}", x.name, x.ns_per_run(), x.runs)).collect();
        println!("XDP programs, ns per run (--prog-stats), {} {} run {}: {}", p.variant, r.label(&p.point), p.run + 1, progs.join(", "));
    }
    let mut drops: Vec<String> = Vec::new();
    for p in &r.profiles {
        for d in p.profile.drops.iter().take(3) {
            drops.push(format!("{} run {}: {} {} in {}", p.variant, p.run + 1, d.count, d.reason, d.location));
        }
    }
    if !drops.is_empty() {
        println!("drops (reason from the kernel's BTF, where): {}", drops.join("; "));
    }
    let l = |f: fn(&xnf_profile::model::Lost) -> u64| r.profiles.iter().map(|p| f(&p.profile.lost)).sum::<u64>();
    println!(
        "profiler: lost over all intervals: {} packet records, {} stacks, {} devices, {} drop entries; its cost is the overhead column (the fall in rate, or the rise in CPU per packet, against the unprofiled twin)",
        l(|x| x.packets),
        l(|x| x.stacks),
        l(|x| x.devices),
        l(|x| x.drops)
    );
}
