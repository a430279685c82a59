//! What the samples of `xnf lab filter` add up to: per variant and point,
//! the victim's transactions against the flood rate (medians over runs),
//! the rate that halves them, drops per second and CPU per dropped frame
//! at the maximum rate; kept in the results' `details` (`curves`,
//! `intervals`), printed as tables.

use serde::{Deserialize, Serialize};

use super::flood::{half_rate, CurvePoint};
use super::probe::Extra;
use super::{Cores, Rate};
use crate::engine::results::{median, Point, Results, Sample};

/// One measured interval as the details keep it.
#[derive(Clone, Debug, Serialize)]
pub struct Interval {
    pub variant: String,
    pub point: Point,
    pub run: u32,
    /// Index of its rate in `--rates`.
    pub step: usize,
    pub rate: String,
    /// The flood rate actually sent.
    pub flood_pps: f64,
    pub transactions_per_s: f64,
    /// Flood frames discarded per second (in dut or by the victim's stack).
    pub drops_per_s: f64,
    pub ns_per_drop: f64,
    pub softirq_ns_per_drop: f64,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Interval {
    pub fn of(s: &Sample, step: usize, rate: Rate, extra: Extra) -> Interval {
        Interval {
            variant: s.variant.clone(),
            point: s.point.clone(),
            run: s.run,
            step,
            rate: rate.text(),
            flood_pps: s.sent as f64 / s.seconds,
            transactions_per_s: s.transactions_per_s.unwrap_or(0.0),
            drops_per_s: s.received as f64 / s.seconds,
            ns_per_drop: s.ns_per_packet,
            softirq_ns_per_drop: s.softirq_ns_per_packet,
            extra,
        }
    }
}

/// A step of a variant's curve: medians over the runs (min–max of the
/// transactions).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Step {
    pub rate: String,
    pub flood_pps: f64,
    pub transactions_per_s: f64,
    pub transactions_min: f64,
    pub transactions_max: f64,
    pub drops_per_s: f64,
    pub ns_per_drop: f64,
    pub softirq_ns_per_drop: f64,
}

/// A variant's outcome at one point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Curve {
    pub variant: String,
    pub point: Point,
    pub steps: Vec<Step>,
    /// Transactions per second at the first rate (no flood, by default).
    pub unflooded_tps: f64,
    /// The flood rate that halves them; None if no measured rate did.
    pub half_rate_pps: Option<f64>,
}

fn med(of: &[&Interval], f: impl Fn(&Interval) -> f64) -> f64 {
    median(&mut of.iter().map(|i| f(i)).collect::<Vec<_>>())
}

/// The curve of `variant` at `point` from its intervals.
fn curve(intervals: &[Interval], variant: &str, point: &Point) -> Option<Curve> {
    let of: Vec<&Interval> = intervals.iter().filter(|i| i.variant == variant && &i.point == point).collect();
    let last = of.iter().map(|i| i.step).max()?;
    let steps: Vec<Step> = (0..=last)
        .filter_map(|step| {
            let at: Vec<&Interval> = of.iter().copied().filter(|i| i.step == step).collect();
            let first = at.first()?;
            let tps: Vec<f64> = at.iter().map(|i| i.transactions_per_s).collect();
            Some(Step {
                rate: first.rate.clone(),
                flood_pps: med(&at, |i| i.flood_pps),
                transactions_per_s: med(&at, |i| i.transactions_per_s),
                transactions_min: tps.iter().copied().fold(f64::INFINITY, f64::min),
                transactions_max: tps.iter().copied().fold(0.0, f64::max),
                drops_per_s: med(&at, |i| i.drops_per_s),
                ns_per_drop: med(&at, |i| i.ns_per_drop),
                softirq_ns_per_drop: med(&at, |i| i.softirq_ns_per_drop),
            })
        })
        .collect();
    let mut pts: Vec<CurvePoint> = steps.iter().map(|s| CurvePoint { flood_pps: s.flood_pps, tps: s.transactions_per_s }).collect();
    let unflooded_tps = pts.first()?.tps;
    pts[1..].sort_by(|a, b| a.flood_pps.total_cmp(&b.flood_pps));
    Some(Curve { variant: variant.into(), point: point.clone(), unflooded_tps, half_rate_pps: half_rate(&pts), steps })
}

/// The curves and intervals into the results' details, and notes, once
/// everything is measured (the driver has made the summaries and ratios).
pub fn finish(res: &mut Results, names: &[String], intervals: Vec<Interval>, cores: &[(u32, Cores)]) {
    let mut points: Vec<Point> = Vec::new();
    for i in &intervals {
        if !points.contains(&i.point) {
            points.push(i.point.clone());
        }
    }
    let curves: Vec<Curve> = points.iter().flat_map(|p| names.iter().filter_map(|v| curve(&intervals, v, p))).collect();
    res.details.insert("curves".into(), serde_json::to_value(&curves).unwrap_or_default());
    res.details.insert("intervals".into(), serde_json::to_value(&intervals).unwrap_or_default());
    for (q, c) in cores {
        res.notes.push(if cores.len() > 1 { format!("{q} queue(s): {}", c.describe()) } else { c.describe() });
    }
    res.notes.push("samples: sent = flood frames, received = flood frames discarded (dropped in dut, or by the victim's UDP stack), ns/packet = CPU per discarded frame, transactions_per_s = the victim's".into());
    res.notes.push("ratios: discarded flood frames per second at the maximum rate (the filter's capacity on this path)".into());
}

fn fmt_rate(pps: f64) -> String {
    format!("{:.2}", pps / 1e6)
}

/// The title line of the experiment's tables.
pub fn header(r: &Results) {
    let m = &r.machine;
    println!("\nxnf lab filter — kernel {}, {} × {}, xnf {}", m.kernel, m.cores, m.cpu_model, m.xnf_version);
}

/// The figure as tables: transactions per second by flood rate, and each
/// variant's half rate, drops and CPU per drop (from `details.curves`).
pub fn print(r: &Results) {
    let curves: Vec<Curve> = r.details.get("curves").and_then(|c| serde_json::from_value(c.clone()).ok()).unwrap_or_default();
    let mut points: Vec<&Point> = Vec::new();
    for c in &curves {
        if !points.contains(&&c.point) {
            points.push(&c.point);
        }
    }
    for p in points {
        let at: Vec<&Curve> = curves.iter().filter(|c| &c.point == p).collect();
        let label = r.label(p);
        println!("\nVictim's TCP transactions/s (median over runs) at each flood rate, flood as sent in Mpps — {label}");
        let rates: Vec<String> = at[0].steps.iter().map(|s| if s.rate == "max" { "max".into() } else { fmt_rate(s.rate.parse().unwrap_or(0.0)) }).collect();
        println!("{:<12} {}", "variant", rates.iter().map(|x| format!("{x:>16}")).collect::<String>());
        for c in &at {
            let cells: String = c.steps.iter().map(|s| format!("{:>16}", format!("{:.0} @{}", s.transactions_per_s, fmt_rate(s.flood_pps)))).collect();
            println!("{:<12} {cells}", c.variant);
        }
        println!(
            "\n{:<12} {:>11} {:>18} {:>10} {:>11} {:>10} {:>13} {:>13}",
            "variant", "unflooded", "halved at (Mpps)", "max Mpps", "tps at max", "drop Mpps", "ns/drop", "softirq ns"
        );
        for c in &at {
            let top = c.steps.iter().find(|s| s.rate == "max").or(c.steps.last());
            let half = c.half_rate_pps.map_or_else(|| "not halved".to_string(), fmt_rate);
            if let Some(s) = top {
                println!(
                    "{:<12} {:>11.0} {:>18} {:>10} {:>11.0} {:>10} {:>13.0} {:>13.0}",
                    c.variant,
                    c.unflooded_tps,
                    half,
                    fmt_rate(s.flood_pps),
                    s.transactions_per_s,
                    fmt_rate(s.drops_per_s),
                    s.ns_per_drop,
                    s.softirq_ns_per_drop
                );
            }
        }
    }
    println!("(ns/drop: all CPU time per discarded flood frame at the top rate, the generator's and the victim's included; softirq: what ran as softirq, without dut's threaded NAPI loop)");
    print_rules(r, &curves);
}

/// With `--rules` swept: per blocklist, a column per rule count — flood
/// frames dropped per second and the victim's transactions per second at
/// the top rate, per variant; then xnf's drop rate over each other's.
fn print_rules(r: &Results, curves: &[Curve]) {
    let rules = |p: &Point| p.get("rules").and_then(|v| v.number()).map(|n| n as u32);
    let mut counts: Vec<u32> = curves.iter().filter_map(|c| rules(&c.point)).collect();
    counts.sort_unstable();
    counts.dedup();
    if counts.len() < 2 {
        return;
    }
    let mut groups: Vec<Point> = Vec::new();
    for c in curves {
        let g = c.point.without("rules");
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    for g in groups {
        let at: Vec<&Curve> = curves.iter().filter(|c| c.point.without("rules") == g).collect();
        let mut variants: Vec<&str> = Vec::new();
        for c in &at {
            if !variants.contains(&c.variant.as_str()) {
                variants.push(&c.variant);
            }
        }
        println!("\nBy rule count at the top rate — {}: flood dropped (Mpps) / victim's transactions/s", r.label(&g));
        println!("{:<20} {}", "variant", counts.iter().map(|n| format!("{:>18}", format!("{n} rule{}", if *n == 1 { "" } else { "s" }))).collect::<String>());
        for v in &variants {
            let cells: String = counts
                .iter()
                .map(|n| {
                    let top = at
                        .iter()
                        .find(|c| c.variant == *v && rules(&c.point) == Some(*n))
                        .and_then(|c| c.steps.iter().find(|s| s.rate == "max").or(c.steps.last()));
                    format!("{:>18}", top.map_or("-".to_string(), |s| format!("{} / {:.0}", fmt_rate(s.drops_per_s), s.transactions_per_s)))
                })
                .collect();
            println!("{v:<20} {cells}");
        }
        for d in variants.iter().filter(|v| **v != "xnf") {
            let cells: String = counts
                .iter()
                .map(|n| {
                    let q =
                        r.ratios.iter().find(|q| q.numerator == "xnf" && q.denominator == *d && q.point.without("rules") == g && rules(&q.point) == Some(*n));
                    format!("{:>18}", q.map_or("-".to_string(), |q| format!("{:.2}x", q.ratio)))
                })
                .collect();
            println!("{:<20} {cells}", format!("xnf / {d}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(variant: &str, run: u32, step: usize, flood_pps: f64, tps: f64) -> Interval {
        Interval {
            variant: variant.into(),
            point: Point::default().with("blocklist", 0u64),
            run,
            step,
            rate: if step == 2 { "max".into() } else { (step as u64 * 1_000_000).to_string() },
            flood_pps,
            transactions_per_s: tps,
            drops_per_s: flood_pps,
            ns_per_drop: 300.0,
            softirq_ns_per_drop: 200.0,
            extra: Extra {
                dropped_in_dut: 0,
                reached_victim: 0,
                answers: None,
                own_drops: None,
                own_drops_per_s: None,
                own_secs_min: None,
                own_secs_max: None,
            },
        }
    }

    #[test]
    fn curves_take_medians_per_step_and_find_the_half_rate() {
        let mut v = Vec::new();
        for run in 0..3 {
            v.push(interval("none", run, 0, 0.0, 20000.0 + run as f64));
            v.push(interval("none", run, 1, 1e6, 12000.0));
            v.push(interval("none", run, 2, 1.4e6 + run as f64 * 1e5, 4000.0));
            v.push(interval("xnf", run, 0, 0.0, 21000.0));
            v.push(interval("xnf", run, 2, 3e6, 19000.0));
        }
        let p = Point::default().with("blocklist", 0u64);
        let none = curve(&v, "none", &p).unwrap();
        assert_eq!(none.steps.len(), 3);
        assert_eq!((none.unflooded_tps, none.steps[0].transactions_min, none.steps[0].transactions_max), (20001.0, 20000.0, 20002.0));
        assert_eq!(none.steps[2].flood_pps, 1.5e6, "median of the rates sent");
        // 10,000.5 lies a quarter of the way from 12,000 to 4,000.
        let half = none.half_rate_pps.unwrap();
        assert!((half - (1e6 + 0.5e6 * 1999.5 / 8000.0)).abs() < 1.0, "{half}");
        let xnf = curve(&v, "xnf", &p).unwrap();
        assert_eq!(xnf.steps.len(), 2, "a step no run measured is left out");
        assert_eq!(xnf.half_rate_pps, None);
        assert!(curve(&v, "nft-raw", &p).is_none());
    }
}
