//! `xnf lab latency --profile`: each method's best configuration of the
//! matrix (the lowest median RTT) runs once more with `xnf profile`
//! attached, at the matrix's rate: where a probe's CPU time went (NET_RX
//! softirq stages per probe, the hottest functions, a flame graph) and
//! what the profiler added to the RTT.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::pingpong::Path;
use super::{one_run, Probes, Run};

/// One configuration, profiled.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyProfile {
    pub label: String,
    pub rate_pps: u64,
    /// Probes answered in the profiled run.
    pub probes: u64,
    /// Median RTT in µs in the matrix (every repeat's RTTs pooled) and
    /// in the profiled run.
    pub median_us: f64,
    pub profiled_median_us: f64,
    /// NET_RX softirq ns per probe by stage, then the softirq total.
    pub stages: Vec<(String, f64)>,
    /// Hottest functions (self %), idle left out.
    pub top: Vec<(String, f64)>,
    pub flame: Option<String>,
    /// The whole profile (its stacks are in the flame graph).
    pub profile: xnf_profile::Profile,
}

impl LatencyProfile {
    /// The RTT the profiler added, in percent of the unprofiled median.
    pub fn overhead_pct(&self) -> f64 {
        100.0 * (self.profiled_median_us / self.median_us - 1.0)
    }
}

/// `best`, a method's best configuration of the matrix (whose RTTs over
/// every repeat have median `median_us`), once more with the profiler
/// attached, at the matrix's rate and count.
pub fn profile(p: &Path, best: &Run, median_us: f64, opts: &xnf_profile::Options, flame: Option<&std::path::Path>, probes: &Probes) -> Result<LatencyProfile> {
    let session = xnf_profile::Session::start(opts)?;
    let r = one_run(p, &best.config, probes, probes.rate, probes.count, 0)?;
    let mut prof = session.stop()?;
    let answered = r.sent - r.lost;
    let stacks = prof.stacks.take().map(|s| s.busy());
    let top = stacks.as_ref().map(|s| s.top(8).into_iter().map(|f| (f.name, f.self_pct)).collect()).unwrap_or_default();
    let flame = match (flame, &stacks) {
        (Some(dir), Some(st)) => {
            Some(crate::engine::profiling::write_flame(dir, &format!("latency-{}", best.label), &format!("xnf lab latency: {}", best.label), st)?)
        }
        _ => None,
    };
    Ok(LatencyProfile {
        label: best.label.clone(),
        rate_pps: probes.rate,
        probes: answered,
        median_us,
        profiled_median_us: r.summary.median,
        stages: prof.per_packet(answered),
        top,
        flame,
        profile: prof,
    })
}

/// The profiled runs on the terminal.
pub fn print(v: &[LatencyProfile]) {
    if v.is_empty() {
        return;
    }
    let names: Vec<&str> = xnf_profile::model::STAGES.iter().map(|s| s.0).collect();
    println!("\nwhere the time went (xnf profile; NET_RX softirq ns per probe answered, all CPUs):");
    let heads: String = names.iter().map(|n| format!(" {n:>7}")).collect();
    println!("{:<44} {:>9} {:>9} {:>8}{heads} {:>8}  top functions (self %)", "configuration", "median µs", "profiled", "overhead", "softirq");
    for p in v {
        let stage = |n: &str| p.stages.iter().find(|s| s.0 == n).map_or(0.0, |s| s.1);
        let stages: String = names.iter().map(|n| if p.profile.counts_only { format!(" {:>7}", "-") } else { format!(" {:>7.0}", stage(n)) }).collect();
        let top: Vec<String> = p.top.iter().take(3).map(|(n, pct)| format!("{n} {pct:.0}")).collect();
        println!(
            "{:<44} {:>9.1} {:>9.1} {:>7.1}%{stages} {:>8.0}  {}",
            p.label,
            p.median_us,
            p.profiled_median_us,
            p.overhead_pct(),
            stage("softirq"),
            top.join(", ")
        );
        if let Some(f) = &p.flame {
            println!("  flame graph: {f}");
        }
    }
}
