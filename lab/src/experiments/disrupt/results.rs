//! What `xnf lab disrupt` records of each event (the results'
//! `details.events`, one row per variant and event, the repeats in order)
//! and the table it prints; the report draws the same rows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::results::Results;

/// One variant's event, every repeat of it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EventRow {
    pub variant: String,
    pub event: String,
    /// Per repeat: datagrams of the stream sent from just before the event
    /// to the end of its settling time, and of them lost (by sequence number).
    pub sent: Vec<u64>,
    pub lost: Vec<u64>,
    /// Per repeat: where frames were lost that dut did not lose itself —
    /// datagrams the sink's socket had no room for, frames gen's and dut's
    /// interfaces dropped (a veth peer's full ring).
    #[serde(default)]
    pub sink_drops: Vec<u64>,
    #[serde(default)]
    pub link_drops: Vec<u64>,
    /// Per repeat: the longest time the sink waited between two datagrams (ms).
    pub gap_ms: Vec<f64>,
    /// Per repeat: TCP connections that saw an error or EOF, of `connections`.
    pub broken: Vec<u64>,
    pub connections: u32,
    /// Per repeat, xnf only: entries of the lb's connection table (of
    /// `lb_flows`: the TCP connections to its TCP service and the UDP flows
    /// to its UDP one, both of two backends) whose backend changed or that
    /// went.
    #[serde(default)]
    pub moved: Vec<u64>,
    #[serde(default)]
    pub lb_flows: u32,
    /// Per repeat: datagrams dut's kernel forwarded (its ForwDatagrams).
    pub kernel_forwarded: Vec<u64>,
    /// Per repeat, xnf only: what its functions' counters say they left
    /// to the kernel (or dropped), by function and reason; nonzero ones only.
    pub to_kernel: Vec<BTreeMap<String, u64>>,
    /// Per repeat: how long the event took (ms), and what it said.
    pub event_ms: Vec<f64>,
    pub outcome: Vec<String>,
    /// Mean and max over the repeats.
    #[serde(default)]
    pub summary: Summary,
}

/// An event's figures over its repeats: (mean, max) each.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Summary {
    pub lost: (f64, f64),
    #[serde(default)]
    pub sink_drops: (f64, f64),
    #[serde(default)]
    pub link_drops: (f64, f64),
    pub gap_ms: (f64, f64),
    pub broken: (f64, f64),
    #[serde(default)]
    pub moved: (f64, f64),
    pub kernel_forwarded: (f64, f64),
    /// By reason: (mean, max) over the repeats (a repeat without it counts 0).
    pub to_kernel: BTreeMap<String, (f64, f64)>,
}

/// Mean and max of `v` (0 when empty).
pub fn mean_max(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    (v.iter().sum::<f64>() / v.len() as f64, v.iter().copied().fold(f64::MIN, f64::max))
}

fn floats(v: &[u64]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

impl EventRow {
    /// Fills in [`EventRow::summary`].
    pub fn summarize(&mut self) {
        let reasons: std::collections::BTreeSet<&String> = self.to_kernel.iter().flat_map(|m| m.keys()).collect();
        let to_kernel = reasons
            .into_iter()
            .map(|r| {
                let per: Vec<f64> = self.to_kernel.iter().map(|m| m.get(r).copied().unwrap_or(0) as f64).collect();
                (r.clone(), mean_max(&per))
            })
            .collect();
        self.summary = Summary {
            lost: mean_max(&floats(&self.lost)),
            sink_drops: mean_max(&floats(&self.sink_drops)),
            link_drops: mean_max(&floats(&self.link_drops)),
            gap_ms: mean_max(&self.gap_ms),
            broken: mean_max(&floats(&self.broken)),
            moved: mean_max(&floats(&self.moved)),
            kernel_forwarded: mean_max(&floats(&self.kernel_forwarded)),
            to_kernel,
        };
    }

    /// The xnf counters' reasons as one cell: `router/no-neigh 3 (max 5)`.
    pub fn reasons_cell(&self) -> String {
        let s = &self.summary.to_kernel;
        if s.is_empty() {
            return "—".into();
        }
        s.iter().map(|(r, (mean, max))| format!("{r} {mean:.1} (max {max:.0})")).collect::<Vec<_>>().join(", ")
    }

    /// The outcomes, each distinct one once.
    pub fn outcome_cell(&self) -> String {
        let mut seen: Vec<&str> = Vec::new();
        for o in &self.outcome {
            if !seen.contains(&o.as_str()) {
                seen.push(o);
            }
        }
        seen.join("; ")
    }
}

/// The rows of a results file (`details.events`).
pub fn rows(r: &Results) -> Vec<EventRow> {
    r.details.get("events").and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default()
}

/// The table on the terminal.
pub fn print(rows: &[EventRow], rate: u32) {
    println!("events under {rate} datagrams/s and TCP connections through dut; mean (max) over the repeats");
    println!(
        "{:<12} {:<17} {:>7} {:>16} {:>14} {:>18} {:>12} {:>12} {:>16}  xnf to kernel; outcome",
        "variant", "event", "repeats", "lost datagrams", "sink/link max", "longest gap ms", "TCP broken", "lb moved", "kernel forwarded"
    );
    for x in rows {
        let s = &x.summary;
        let mm = |(mean, max): (f64, f64), d: usize| format!("{mean:.d$} ({max:.d$})");
        println!(
            "{:<12} {:<17} {:>7} {:>16} {:>14} {:>18} {:>12} {:>12} {:>16}  {}; {}",
            x.variant,
            x.event,
            x.lost.len(),
            mm(s.lost, 1),
            format!("{:.0}/{:.0}", s.sink_drops.1, s.link_drops.1),
            mm(s.gap_ms, 1),
            mm(s.broken, 1),
            if x.moved.is_empty() { "—".to_string() } else { mm(s.moved, 1) },
            mm(s.kernel_forwarded, 0),
            x.reasons_cell(),
            x.outcome_cell()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_summarized_by_mean_and_max_reasons_missing_counting_zero() {
        let mut x = EventRow {
            lost: vec![0, 4],
            gap_ms: vec![1.0, 3.0],
            broken: vec![0, 0],
            kernel_forwarded: vec![10, 30],
            to_kernel: vec![BTreeMap::from([("router/no-neigh".to_string(), 4)]), BTreeMap::new()],
            outcome: vec!["refused".into(), "refused".into()],
            moved: vec![0, 2],
            ..Default::default()
        };
        x.summarize();
        assert_eq!((x.summary.lost, x.summary.gap_ms, x.summary.kernel_forwarded), ((2.0, 4.0), (2.0, 3.0), (20.0, 30.0)));
        assert_eq!(x.summary.to_kernel["router/no-neigh"], (2.0, 4.0));
        assert_eq!(x.summary.moved, (1.0, 2.0));
        assert_eq!(x.reasons_cell(), "router/no-neigh 2.0 (max 4)");
        assert_eq!(x.outcome_cell(), "refused");
        assert_eq!(mean_max(&[]), (0.0, 0.0));
    }
}
