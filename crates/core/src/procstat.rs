//! Per-CPU time and softirq runs from the kernel's own accounting:
//! /proc/stat (jiffies at USER_HZ; tick-sampled unless the kernel has
//! CONFIG_IRQ_TIME_ACCOUNTING) and /proc/softirqs.

use anyhow::{Context, Result};
use serde::Serialize;

/// Jiffies of one CPU (or their difference between two samples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuTimes {
    pub user: u64,
    pub system: u64,
    pub softirq: u64,
    pub irq: u64,
    pub idle: u64,
    pub other: u64,
}

impl CpuTimes {
    pub fn busy(&self) -> u64 {
        self.user + self.system + self.softirq + self.irq + self.other
    }
    pub fn total(&self) -> u64 {
        self.busy() + self.idle
    }
    fn since(&self, old: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user - old.user,
            system: self.system - old.system,
            softirq: self.softirq - old.softirq,
            irq: self.irq - old.irq,
            idle: self.idle - old.idle,
            other: self.other - old.other,
        }
    }
}

/// Parses the `cpuN` lines of /proc/stat (not the aggregate `cpu` line).
pub fn parse(stat: &str) -> Vec<CpuTimes> {
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            let v: Vec<u64> = l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
            let f = |i: usize| v.get(i).copied().unwrap_or(0);
            // user nice system idle iowait irq softirq steal guest guest_nice
            CpuTimes { user: f(0) + f(1), system: f(2), idle: f(3) + f(4), irq: f(5), softirq: f(6), other: f(7) }
        })
        .collect()
}

pub fn sample() -> Result<Vec<CpuTimes>> {
    Ok(parse(&std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?))
}

/// Per-CPU differences between two samples.
pub fn delta(new: &[CpuTimes], old: &[CpuTimes]) -> Vec<CpuTimes> {
    new.iter().zip(old).map(|(n, o)| n.since(o)).collect()
}

/// USER_HZ: /proc/stat's jiffies per second.
pub fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

/// Runs of softirq `vector` (NET_RX, NET_TX, ...) per CPU so far, from
/// /proc/softirqs.
pub fn softirq_runs(vector: &str) -> Result<Vec<u64>> {
    let text = std::fs::read_to_string("/proc/softirqs").context("reading /proc/softirqs")?;
    parse_softirqs(&text, vector).with_context(|| format!("/proc/softirqs has no {vector} row"))
}

fn parse_softirqs(text: &str, vector: &str) -> Option<Vec<u64>> {
    let row = text.lines().find(|l| l.trim_start().strip_prefix(vector).is_some_and(|r| r.starts_with(':')))?;
    Some(row.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  10 0 20 300 0 0 40 0 0 0\n\
cpu0 4 0 10 150 0 0 30 0 0 0\n\
cpu1 6 0 10 150 0 0 10 0 0 0\n\
intr 1 2 3\n";

    #[test]
    fn per_cpu_lines_add_up_to_the_aggregate() {
        let cpus = parse(STAT);
        assert_eq!(cpus.len(), 2);
        let sum = cpus.iter().fold(CpuTimes::default(), |a, c| CpuTimes {
            user: a.user + c.user,
            system: a.system + c.system,
            softirq: a.softirq + c.softirq,
            irq: a.irq + c.irq,
            idle: a.idle + c.idle,
            other: a.other + c.other,
        });
        assert_eq!((sum.user, sum.system, sum.idle, sum.softirq), (10, 20, 300, 40));
        assert_eq!(cpus[0].busy() + cpus[0].idle, cpus[0].total());
    }

    #[test]
    fn accounting_matches_the_kernels_own_aggregate() {
        // The aggregate `cpu` line is the sum of the per-CPU lines.
        let text = std::fs::read_to_string("/proc/stat").unwrap();
        let all: Vec<u64> = text.lines().next().unwrap().split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
        let per = parse(&text);
        let busy: u64 = per.iter().map(|c| c.busy()).sum();
        let total: u64 = per.iter().map(|c| c.total()).sum();
        // user nice system idle iowait irq softirq steal (guest is inside user)
        let agg_total: u64 = all[..8].iter().sum();
        let agg_idle = all[3] + all[4];
        // The kernel sums idle separately while the lines are printed: allow
        // a few ticks per CPU of skew, far below a real accounting error.
        let slack = 10 * per.len() as u64;
        assert!(total.abs_diff(agg_total) <= slack, "{total} vs {agg_total}");
        assert!(busy.abs_diff(agg_total - agg_idle) <= slack, "{busy} vs {}", agg_total - agg_idle);
    }

    #[test]
    fn softirq_rows_are_read_per_cpu() {
        let text = "                    CPU0       CPU1\n          HI:          1          0\n      NET_TX:          5          6\n      NET_RX:     123456       789\n";
        assert_eq!(parse_softirqs(text, "NET_RX"), Some(vec![123456, 789]));
        assert_eq!(parse_softirqs(text, "NET_TX"), Some(vec![5, 6]));
        assert_eq!(parse_softirqs(text, "RCU"), None);
        // This machine's: one number per CPU.
        assert_eq!(softirq_runs("NET_RX").unwrap().len(), sample().unwrap().len());
    }

    #[test]
    fn delta_subtracts_per_cpu() {
        let a = parse(STAT);
        let mut b = a.clone();
        b[1].softirq += 7;
        let d = delta(&b, &a);
        assert_eq!(d[0], CpuTimes::default());
        assert_eq!(d[1].softirq, 7);
    }
}
