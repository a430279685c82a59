//! Per-CPU time from /proc/stat, split the way packet processing spends it.

use anyhow::{Context, Result};
pub use xnf_core::procstat::{clk_tck, delta, parse, sample, CpuTimes};

/// Each CPU's share of an interval in percent; shares of one CPU add up to
/// 100 with idle (and irq/steal in busy).
pub fn shares(delta: &[CpuTimes]) -> Vec<crate::engine::results::CpuShare> {
    delta
        .iter()
        .enumerate()
        .map(|(cpu, c)| {
            let pct = |v: u64| 100.0 * v as f64 / c.total().max(1) as f64;
            crate::engine::results::CpuShare { cpu, user_pct: pct(c.user), system_pct: pct(c.system), softirq_pct: pct(c.softirq), busy_pct: pct(c.busy()) }
        })
        .collect()
}

/// All CPUs' busy time in an interval, in nanoseconds.
pub fn busy_ns(delta: &[CpuTimes]) -> f64 {
    delta.iter().map(|c| c.busy() as f64).sum::<f64>() * 1e9 / clk_tck()
}

/// All CPUs' softirq time in an interval, in nanoseconds: on veth, the
/// receive side (dut and sink), while the generator shows as system time.
pub fn softirq_ns(delta: &[CpuTimes]) -> f64 {
    delta.iter().map(|c| c.softirq as f64).sum::<f64>() * 1e9 / clk_tck()
}

/// Pins thread or process `pid` (0: the calling thread) to `cpu`.
pub fn pin(pid: i32, cpu: usize) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).with_context(|| format!("CPU {cpu} does not exist"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(pid), &set).with_context(|| format!("pinning to CPU {cpu}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  10 0 20 300 0 0 40 0 0 0\n\
cpu0 4 0 10 150 0 0 30 0 0 0\n\
cpu1 6 0 10 150 0 0 10 0 0 0\n\
intr 1 2 3\n";

    #[test]
    fn shares_add_up_to_the_whole_interval() {
        let cpus = parse(STAT);
        for (share, c) in shares(&cpus).iter().zip(&cpus) {
            let idle = 100.0 * c.idle as f64 / c.total() as f64;
            assert!((share.busy_pct + idle - 100.0).abs() < 1e-9);
            assert!((share.user_pct + share.system_pct + share.softirq_pct - share.busy_pct).abs() < 1e-9, "no irq/steal here");
        }
        assert_eq!(shares(&cpus)[0].softirq_pct, 100.0 * 30.0 / 194.0);
        // 44 + 26 busy jiffies at USER_HZ.
        assert_eq!(busy_ns(&cpus), (44 + 26) as f64 * 1e9 / clk_tck());
    }
}
