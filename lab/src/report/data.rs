//! What the report draws, selected from a results file: one colour per
//! variant, the sweeps (summaries that differ in one parameter only, found
//! from the data: any parameter with two values or more is an axis), and
//! the load curves, one point per offered-load step (median over runs,
//! min–max), sorted by load.

use std::collections::BTreeMap;

use crate::engine::params::{Param, Point, Value};
use crate::engine::results::{median, CpuShare, Results, Sample, SampleKind, Summary};

use super::svg::Pt;

/// Colour-blind-friendly categorical colours (Tableau 10).
pub(crate) const PALETTE: [&str; 10] = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

/// One colour per variant, the same in every chart: variants in the order
/// they first appear in the summaries, then in the samples.
pub struct Palette(Vec<String>);

impl Palette {
    pub fn of(r: &Results) -> Palette {
        let mut names: Vec<String> = Vec::new();
        for v in r.summary.iter().map(|s| &s.variant).chain(r.samples.iter().map(|s| &s.variant)) {
            if !names.contains(v) {
                names.push(v.clone());
            }
        }
        Palette(names)
    }

    pub fn colour(&self, variant: &str) -> &'static str {
        let i = self.0.iter().position(|v| v == variant).unwrap_or(self.0.len());
        PALETTE[i % PALETTE.len()]
    }

    /// Variants in palette order that satisfy `has`.
    pub fn variants<'a>(&'a self, has: impl Fn(&str) -> bool + 'a) -> impl Iterator<Item = &'a str> + 'a {
        self.0.iter().map(String::as_str).filter(move |v| has(v))
    }
}

/// Summaries that differ in one parameter only, with more than one value of it.
pub struct Sweep<'a> {
    pub param: Param,
    /// The other parameters, the same for all of them.
    pub fixed: Point,
    /// The swept values, in axis order.
    pub values: Vec<Value>,
    pub summaries: Vec<&'a Summary>,
}

/// The descriptor of parameter `name`: the file's, else a plain one drawn
/// after its values' kind.
pub fn param_of(r: &Results, name: &str, sample: &Value) -> Param {
    r.param(name).cloned().unwrap_or_else(|| Param::plain(name, sample))
}

/// The parameters with two values or more among the summaries: the axes,
/// in the order of the file's descriptors, then any others.
pub fn axes(r: &Results) -> Vec<String> {
    let mut names: Vec<String> = r.params.iter().map(|p| p.name.clone()).collect();
    for s in &r.summary {
        for (n, _) in s.point.iter() {
            if !names.iter().any(|x| x == n) {
                names.push(n.into());
            }
        }
    }
    names.retain(|n| {
        let mut seen: Vec<&Value> = Vec::new();
        for v in r.summary.iter().filter_map(|s| s.point.get(n)) {
            if !seen.contains(&v) {
                seen.push(v);
            }
        }
        seen.len() > 1
    });
    names
}

/// Every sweep of every axis: the summaries grouped by all parameters but one.
pub fn sweeps(r: &Results) -> Vec<Sweep<'_>> {
    let mut out = Vec::new();
    for name in axes(r) {
        let mut groups: Vec<Sweep> = Vec::new();
        for s in &r.summary {
            let Some(v) = s.point.get(&name) else { continue };
            let fixed = s.point.without(&name);
            let i = groups.iter().position(|g| g.fixed == fixed).unwrap_or_else(|| {
                groups.push(Sweep { param: param_of(r, &name, v), fixed, values: Vec::new(), summaries: Vec::new() });
                groups.len() - 1
            });
            let g = &mut groups[i];
            g.summaries.push(s);
            if !g.values.contains(v) {
                g.values.push(v.clone());
            }
        }
        for mut g in groups.into_iter().filter(|g| g.values.len() > 1) {
            let p = g.param.clone();
            g.values.sort_by_key(|v| p.order(v));
            out.push(g);
        }
    }
    out
}

/// The rate a load sample's generator actually sent (on veth it shares its
/// CPU with the receivers, so near the top it sends less than asked); for
/// a search trial the rate the search asked for.
pub fn offered_pps(s: &Sample) -> Option<f64> {
    match s.kind {
        SampleKind::Load { .. } => Some(s.sent as f64 / s.seconds.max(1e-9)),
        SampleKind::Search { offered_pps } => Some(offered_pps),
        SampleKind::Max => None,
    }
}

/// Softirq time summed over CPUs: on veth, the receive side (dut + sink)
/// while the generator's own loop shows as system time.
pub fn softirq_pct(s: &Sample) -> f64 {
    s.cpus.iter().map(|c| c.softirq_pct).sum()
}

pub fn is_load(s: &Sample) -> bool {
    matches!(s.kind, SampleKind::Load { .. })
}

pub fn is_search(s: &Sample) -> bool {
    matches!(s.kind, SampleKind::Search { .. })
}

/// The points some sample passing `keep` was taken at, in first-seen order.
pub fn points_with(r: &Results, keep: impl Fn(&Sample) -> bool) -> Vec<&Point> {
    let mut out: Vec<&Point> = Vec::new();
    for s in r.samples.iter().filter(|s| keep(s)) {
        if !out.contains(&&s.point) {
            out.push(&s.point);
        }
    }
    out
}

pub fn samples_at<'a>(r: &'a Results, point: &Point, variant: &str, keep: fn(&Sample) -> bool) -> Vec<&'a Sample> {
    r.samples.iter().filter(|s| keep(s) && &s.point == point && s.variant == variant).collect()
}

/// The load samples by step of the load curve, steps in order.
fn by_step<'a>(samples: &[&'a Sample]) -> BTreeMap<u32, Vec<&'a Sample>> {
    let mut steps: BTreeMap<u32, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        if let SampleKind::Load { step, .. } = s.kind {
            steps.entry(step).or_default().push(s);
        }
    }
    steps
}

/// The median of the rates the runs actually sent at one step, in Mpps.
fn step_x(at: &[&Sample]) -> f64 {
    median(&mut at.iter().filter_map(|s| offered_pps(s)).collect::<Vec<_>>()) / 1e6
}

/// `f` of load samples, one point per step of the load curve: x = the
/// median rate sent at that step (Mpps), y = the median of `f` over the
/// runs, min–max as the range; sorted by x. Samples of different runs at
/// one step belong together whatever rate each run happened to reach.
pub fn per_step(samples: &[&Sample], f: impl Fn(&Sample) -> f64) -> Vec<Pt> {
    let mut pts: Vec<Pt> = by_step(samples)
        .into_values()
        .map(|at| {
            let mut ys: Vec<f64> = at.iter().map(|s| f(s)).collect();
            let lo = ys.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            Pt::range(step_x(&at), median(&mut ys), lo, hi)
        })
        .collect();
    pts.sort_by(|a, b| a.x.total_cmp(&b.x));
    pts
}

/// CPU time by kind, summed over CPUs: softirq, system, user, the rest of busy.
pub fn cpu_kinds(s: &Sample) -> [f64; 4] {
    let sum = |f: fn(&CpuShare) -> f64| s.cpus.iter().map(f).sum::<f64>();
    let (soft, sys, user) = (sum(|c| c.softirq_pct), sum(|c| c.system_pct), sum(|c| c.user_pct));
    [soft, sys, user, (s.cpu_busy_pct() - soft - sys - user).max(0.0)]
}

/// The median of each kind of CPU time per step: (x as in [`per_step`],
/// the four kinds), sorted by x.
pub fn kinds_per_step(samples: &[&Sample]) -> Vec<(f64, [f64; 4])> {
    let mut out: Vec<(f64, [f64; 4])> = by_step(samples)
        .into_values()
        .map(|at| {
            let mut kinds = [0.0; 4];
            for (k, v) in kinds.iter_mut().enumerate() {
                *v = median(&mut at.iter().map(|s| cpu_kinds(s)[k]).collect::<Vec<_>>());
            }
            (step_x(&at), kinds)
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::params;
    use crate::engine::results::{Loss, Machine};

    fn sample(variant: &str, run: u32, step: u32, sent_mpps: f64, softirq: f64) -> Sample {
        Sample {
            variant: variant.into(),
            point: Point::default().with("size", 64u32),
            run,
            kind: SampleKind::Load { offered_pps: step as f64 * 1e6, step },
            seconds: 1.0,
            sent: (sent_mpps * 1e6) as u64,
            received: (sent_mpps * 1e6) as u64,
            sent_mpps,
            mpps: sent_mpps,
            loss_pct: 0.0,
            loss: Loss::default(),
            cpus: vec![CpuShare { cpu: 0, user_pct: 1.0, system_pct: 2.0, softirq_pct: softirq, busy_pct: softirq + 3.0 }],
            ns_per_packet: 100.0,
            softirq_ns_per_packet: 90.0,
            dut_ns_per_packet: None,
            nic_drops: Default::default(),
            transactions_per_s: None,
            corunner_per_s: None,
        }
    }

    #[test]
    fn load_curves_have_one_point_per_step_sorted_by_load() {
        // Three runs of three steps, measured in alternating order; run 2
        // reaches less at the top step than runs 0 and 1 did at step 2.
        let s = [
            sample("x", 0, 1, 1.0, 10.0),
            sample("x", 0, 2, 2.0, 20.0),
            sample("x", 0, 3, 3.0, 30.0),
            sample("x", 1, 3, 2.9, 50.0),
            sample("x", 1, 2, 2.1, 22.0),
            sample("x", 1, 1, 1.1, 12.0),
            sample("x", 2, 1, 0.9, 11.0),
            sample("x", 2, 2, 1.9, 21.0),
            sample("x", 2, 3, 2.05, 31.0),
        ];
        let refs: Vec<&Sample> = s.iter().collect();
        let pts = per_step(&refs, softirq_pct);
        assert_eq!(pts.len(), 3, "one point per step, not per sample");
        let xs: Vec<f64> = pts.iter().map(|p| p.x).collect();
        assert_eq!(xs, [1.0, 2.0, 2.9], "median sent rate per step, in order");
        assert_eq!((pts[2].y, pts[2].lo, pts[2].hi), (31.0, 30.0, 50.0), "median and min–max over the runs");
        let kinds = kinds_per_step(&refs);
        assert_eq!(kinds.len(), 3);
        assert_eq!(kinds[2].1, [31.0, 2.0, 1.0, 0.0]);
    }

    fn results(points: &[Point]) -> Results {
        let mut r = Results::new("t", &serde_json::Value::Null, params::legacy());
        r.machine = Machine::default();
        for p in points {
            r.summary.push(
                serde_json::from_value(serde_json::json!({
                    "variant": "v", "point": p, "runs": 1, "median_mpps": 1.0, "min_mpps": 1.0, "max_mpps": 1.0,
                    "median_ns_per_packet": 1.0, "zero_loss_mpps": null,
                }))
                .unwrap(),
            );
        }
        r
    }

    #[test]
    fn axes_are_discovered_from_the_data() {
        let p = |nfs: u32, size: u32| Point::default().with("size", size).with("nfs", nfs).with("vlan", "qinq");
        let r = results(&[p(1, 64), p(2, 64), p(4, 64), p(1, 1518)]);
        assert_eq!(axes(&r), ["size", "nfs"], "described first; a constant is no axis");
        let s = sweeps(&r);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].param.name.as_str(), s[0].values.len()), ("size", 2));
        assert_eq!((s[1].param.name.as_str(), s[1].values.clone()), ("nfs", params::values(&[1u32, 2, 4])));
        assert_eq!(s[1].param.title, "nfs", "an undescribed parameter gets a plain descriptor");
        assert_eq!(s[1].fixed, Point::default().with("size", 64u32).with("vlan", "qinq"));
    }
}
