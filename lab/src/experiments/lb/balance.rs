//! Where `xnf lab lb`'s throughput part delivered: per backend (the balance), and with `--queues N` per receive
//! queue of dut's ingress and per CPU at the sinks (the spread).
//!
//! **The spread.** veth picks the peer's receive queue by the sending CPU (an XDP frame: the CPU's number modulo the
//! queues; a forwarded skb: its TX queue, CPU i → queue i by XPS, set when the topology is built), and the peer's
//! NAPI runs in softirq on that CPU: with N queues the generator's CPUs 0..N-1 each carry their own share down the
//! whole path — dut's ingress queue of its number, dut's program or the kernel's forwarding, the backend's veth, the
//! sink. Read at the same instants as the backends' counters: dut's ingress per RX queue (the veth's
//! `rx_queue_I_xdp_packets`, `ethtool -S`, which counts every frame the queue's NAPI takes, XDP frame or skb) and the
//! sinks per CPU. A full-speed interval with several queues in which a queue, or a generating CPU at the sinks,
//! carried nothing is refused: it would be one queue's rate under the name of N.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use xnf_netns::Netns;

use crate::engine::params::Point;
use crate::engine::results::Results;
use crate::engine::LabAttachment;

/// One full-speed interval's packets per backend, per queue of dut's ingress and per CPU at the sinks.
#[derive(Clone, Debug, Serialize)]
pub struct BackendShare {
    pub variant: String,
    pub point: Point,
    /// Packets each backend's sink counted, backend 1 first.
    pub packets: Vec<u64>,
    /// The busiest backend's packets over the mean: 1 is perfect balance.
    pub max_over_mean: f64,
    /// Packets dut's kernel forwarded in the interval.
    pub forwarded: u64,
    /// Packets each receive queue of dut's ingress took in the interval, queue 0 first.
    pub queues: Vec<u64>,
    /// Packets the sinks counted on each CPU in the interval, CPU 0 first.
    pub cpus: Vec<u64>,
    /// The whole run's counts (every rate measured), from the variant's set-up to its end.
    pub run: RunCounts,
}

/// A run's packets by dut's own per-CPU counters, summed over the CPUs, against what the sinks counted: with N
/// queues every CPU counts its share, so a sum that missed one would fall short of the sinks.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunCounts {
    /// Packets the sinks counted in the run.
    pub delivered: u64,
    /// Packets dut's XDP program counted as sent on (xnf lb: XDP_TX and redirects; Katran: its per-real packets);
    /// none for the kernel's variants.
    pub sent: Option<u64>,
    /// Entries in xnf lb's connection table at the run's end: one per flow, whichever CPUs saw it.
    pub ct_entries: Option<u64>,
}

impl RunCounts {
    /// Whether dut's count and the sinks' differ by more than 1 % (and 100 packets: the sinks also count the odd
    /// IPv6 router solicitation of a fresh link).
    pub fn disagree(&self) -> bool {
        self.sent.is_some_and(|s| s.abs_diff(self.delivered) > (self.delivered / 100).max(100))
    }
}

/// Packets per receive queue of dut's ingress and per CPU at the sinks, at one instant or over an interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spread {
    pub queues: Vec<u64>,
    pub cpus: Vec<u64>,
}

impl Spread {
    /// dut's ingress `din` of `queues` receive queues, and `sinks`, now.
    pub fn read(dut: &Netns, din: &str, queues: u32, sinks: &[&LabAttachment]) -> Result<Spread> {
        let stats = dut.ethtool_stats(din)?;
        let queues = (0..queues)
            .map(|i| {
                let name = format!("rx_queue_{i}_xdp_packets");
                let v = stats.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
                v.with_context(|| format!("dut's {din} reports no {name} (`ethtool -S`): not a veth of {queues} queues"))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut cpus: Vec<u64> = Vec::new();
        for s in sinks {
            for (i, c) in s.sink_counter()?.per_cpu()?.iter().enumerate() {
                if cpus.len() <= i {
                    cpus.push(0);
                }
                cpus[i] += c.packets;
            }
        }
        Ok(Spread { queues, cpus })
    }

    /// What was counted from `earlier` to `self`.
    pub fn since(&self, earlier: &Spread) -> Spread {
        let diff = |b: &[u64], a: &[u64]| b.iter().enumerate().map(|(i, x)| x.saturating_sub(a.get(i).copied().unwrap_or(0))).collect();
        Spread { queues: diff(&self.queues, &earlier.queues), cpus: diff(&self.cpus, &earlier.cpus) }
    }

    /// With several queues, every queue of dut's ingress and every generating CPU (at the sinks) carried packets.
    pub fn check(&self, gen_cpus: &[usize]) -> Result<()> {
        let n = self.queues.len();
        if n < 2 {
            return Ok(());
        }
        if let Some(i) = self.queues.iter().position(|&p| p == 0) {
            bail!("--queues {n}: dut's ingress queue {i} received nothing in the full-speed interval (per queue {:?}): the traffic did not spread over the queues", self.queues);
        }
        if let Some(c) = gen_cpus.iter().find(|&&c| self.cpus.get(c).is_none_or(|&p| p == 0)) {
            bail!("--queues {n}: the backends received nothing on CPU {c}, a generator's, in the full-speed interval (per CPU {:?})", self.cpus);
        }
        Ok(())
    }
}

/// Each value's share of their sum in percent, e.g. "50.1 / 49.9".
pub fn shares(v: &[u64]) -> String {
    let total = v.iter().sum::<u64>().max(1) as f64;
    v.iter().map(|&x| format!("{:.1}", 100.0 * x as f64 / total)).collect::<Vec<_>>().join(" / ")
}

/// The distinct (variant, point) pairs of `items`, in the order measured.
pub fn distinct<T>(items: &[T], key: impl Fn(&T) -> (&String, &Point)) -> Vec<(String, Point)> {
    let mut out: Vec<(String, Point)> = Vec::new();
    for it in items {
        let (v, p) = key(it);
        if !out.iter().any(|(ov, op)| ov == v && op == p) {
            out.push((v.clone(), p.clone()));
        }
    }
    out
}

/// Element-wise sums of `rows` (of any lengths).
fn summed<'a>(rows: impl Iterator<Item = &'a [u64]>) -> Vec<u64> {
    let mut sum: Vec<u64> = Vec::new();
    for row in rows {
        for (i, x) in row.iter().enumerate() {
            if sum.len() <= i {
                sum.push(0);
            }
            sum[i] += x;
        }
    }
    sum
}

/// The notes of the spread, one per variant and point of several queues: the shares of dut's ingress queues and
/// of the generating CPUs at the sinks, over every run's full-speed interval.
pub fn spread_notes(shares_of: &[BackendShare], gen_cpus: impl Fn(u32) -> Vec<usize>, res: &mut Results) {
    for (v, p) in distinct(shares_of, |s| (&s.variant, &s.point)) {
        let of: Vec<&BackendShare> = shares_of.iter().filter(|s| s.variant == v && s.point == p).collect();
        let queues = summed(of.iter().map(|s| s.queues.as_slice()));
        if queues.len() < 2 {
            continue;
        }
        let cpus = summed(of.iter().map(|s| s.cpus.as_slice()));
        let gen = gen_cpus(queues.len() as u32);
        let on: Vec<u64> = gen.iter().map(|&c| cpus.get(c).copied().unwrap_or(0)).collect();
        let names: Vec<String> = gen.iter().map(usize::to_string).collect();
        res.notes.push(format!(
            "{v}, {}: dut's ingress queues {} % of the full-speed intervals' packets; delivered on CPUs {}: {} %",
            res.label(&p),
            shares(&queues),
            names.join(" / "),
            shares(&on)
        ));
    }
}

/// A note for every run in which dut's own counters, summed over CPUs, and the sinks disagree.
pub fn count_notes(shares_of: &[BackendShare], res: &mut Results) {
    for s in shares_of.iter().filter(|s| s.run.disagree()) {
        res.notes.push(format!(
            "{}, {}: dut's program counted {} packets sent on (summed over CPUs), the sinks {} in the same run",
            s.variant,
            res.label(&s.point),
            s.run.sent.unwrap_or(0),
            s.run.delivered
        ));
    }
}

/// The balance table: each variant's share of the packets per backend (summed over runs) and max/mean; with
/// several queues, each queue's share of dut's ingress.
pub fn print_balance(r: &Results) {
    let Some(all) = r.details.get("backends").and_then(|v| serde_json::from_value::<Vec<serde_json::Value>>(v.clone()).ok()) else { return };
    println!("\nper backend (full-speed intervals, all runs summed): share of the packets delivered, busiest backend / mean");
    let label = |v: &serde_json::Value| serde_json::from_value::<Point>(v.clone()).map(|p| r.label(&p)).unwrap_or_default();
    let w = all.iter().map(|s| label(&s["point"]).chars().count()).max().unwrap_or(0);
    let numbers = |v: &serde_json::Value| -> Vec<u64> { v.as_array().into_iter().flatten().map(|x| x.as_u64().unwrap_or(0)).collect() };
    let mut seen: Vec<(String, String)> = Vec::new();
    for s in &all {
        let (v, point) = (s["variant"].as_str().unwrap_or_default().to_string(), s["point"].to_string());
        if seen.contains(&(v.clone(), point.clone())) {
            continue;
        }
        seen.push((v.clone(), point.clone()));
        let same: Vec<&serde_json::Value> = all.iter().filter(|o| o["variant"] == s["variant"] && o["point"] == s["point"]).collect();
        let rows: Vec<(Vec<u64>, Vec<u64>)> = same.iter().map(|o| (numbers(&o["packets"]), numbers(&o["queues"]))).collect();
        let sum = summed(rows.iter().map(|r| r.0.as_slice()));
        let queues = summed(rows.iter().map(|r| r.1.as_slice()));
        let mean = sum.iter().sum::<u64>() as f64 / sum.len().max(1) as f64;
        let by_queue = if queues.len() > 1 { format!("  (dut's ingress queues {} %)", shares(&queues)) } else { String::new() };
        println!("{v:<12} {:<w$} {:>6.3}  {} %{by_queue}", label(&s["point"]), sum.iter().copied().max().unwrap_or(0) as f64 / mean.max(1.0), shares(&sum));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_is_refused_when_a_queue_or_a_generating_cpu_carried_nothing() {
        let a = Spread { queues: vec![10, 20], cpus: vec![5, 5, 0] };
        let b = Spread { queues: vec![110, 220], cpus: vec![105, 205, 0] };
        let d = b.since(&a);
        assert_eq!(d, Spread { queues: vec![100, 200], cpus: vec![100, 200, 0] });
        d.check(&[0, 1]).unwrap();
        let e = format!("{:#}", Spread { queues: vec![100, 0], cpus: vec![100, 0] }.check(&[0, 1]).unwrap_err());
        assert!(e.starts_with("--queues 2: dut's ingress queue 1 received nothing") && !e.contains('\n'), "{e}");
        let e = format!("{:#}", Spread { queues: vec![100, 100], cpus: vec![200] }.check(&[0, 1]).unwrap_err());
        assert!(e.starts_with("--queues 2: the backends received nothing on CPU 1"), "{e}");
        // One queue: nothing to spread (the generator on the last CPU).
        Spread { queues: vec![100], cpus: vec![0, 100] }.check(&[1]).unwrap();
        assert_eq!(shares(&[1, 3]), "25.0 / 75.0");
        assert_eq!(summed([&[1u64, 2][..], &[10, 20, 30][..]].into_iter()), [11, 22, 30]);
        let run = |sent, delivered| RunCounts { delivered, sent, ct_entries: None };
        assert!(!run(Some(1_000_000), 1_009_000).disagree() && !run(Some(50), 140).disagree() && !run(None, 7).disagree());
        assert!(run(Some(500_000), 1_000_000).disagree(), "one CPU's half summed");
    }
}
