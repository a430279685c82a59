//! The report's charts, built from what [`super::data`] selects:
//! throughput against every swept parameter (or a bar per variant when
//! nothing was swept), CPU against offered load, loss against offered rate.

use maud::{html, Markup};

use crate::engine::params::{Axis, Point, Value};
use crate::engine::profiling::ProfiledRun;
use crate::engine::results::{median, Results, Sample, SampleKind, Summary};

use super::data::{self, is_load, is_search, offered_pps, samples_at, softirq_pct, Palette, Sweep};
use super::svg::{fmt_tick, nice_ticks, Chart, Layer, Pt, Scale, Series, Slot, Style};

/// A section of the report: a heading and its charts.
pub struct Section {
    pub heading: &'static str,
    pub charts: Vec<Chart>,
}

/// Every chart the results have data for, by section.
pub fn sections(r: &Results) -> Vec<Section> {
    // `xnf lab cost`'s rate is 1000 / ns of a program alone: drawn in ns.
    if super::cost::is_cost(r) {
        return super::cost::sections(r);
    }
    let palette = Palette::of(r);
    let mut throughput: Vec<Chart> = data::sweeps(r).iter().map(|s| sweep_chart(r, s, &palette)).collect();
    if throughput.is_empty() {
        throughput.extend(variant_bars(r, &palette));
    }
    let mut application = transaction_charts(r, &palette);
    application.extend(transaction_sweep_charts(r, &palette));
    let sections = [
        Section { heading: "Application under load", charts: application },
        Section { heading: "Throughput", charts: throughput },
        Section { heading: "Runs", charts: run_boxes(r, &palette).into_iter().collect() },
        Section { heading: "CPU vs offered load", charts: cpu_charts(r, &palette) },
        Section { heading: "Loss vs offered rate", charts: loss_charts(r, &palette) },
    ];
    let mut sections: Vec<Section> = sections.into_iter().filter(|s| !s.charts.is_empty()).collect();
    sections.extend(super::lb::section(r));
    sections
}

fn mpps_axis(max: f64) -> Scale {
    Scale::linear(0.0, max.max(0.01))
}

/// Throughput against one swept parameter, the others as the subtitle:
/// one line per variant (median, min–max whiskers), zero-loss rates dashed;
/// grouped bars for a parameter drawn as bars. Values set apart (IMIX)
/// stand after a separator, not joined to the line.
pub fn sweep_chart(r: &Results, sweep: &Sweep, palette: &Palette) -> Chart {
    let param = &sweep.param;
    let max = sweep.summaries.iter().map(|s| s.max_mpps.max(s.median_mpps).max(s.zero_loss_mpps.unwrap_or(0.0))).fold(0.0, f64::max);
    let numbers: Option<Vec<f64>> = sweep.values.iter().map(Value::number).collect();
    // A scale of numbers needs numbers, and no value set apart from them.
    let numeric = numbers.filter(|_| !sweep.values.iter().any(|v| param.apart.contains(v)));
    let x = match (param.scale, &numeric) {
        (Axis::Log, Some(n)) => Scale::log(n),
        (Axis::Linear, Some(n)) => Scale::linear_int(0.0, n.iter().copied().fold(1.0, f64::max)),
        _ => Scale::band(sweep.values.iter().map(|v| param.label(v)).collect()),
    };
    let banded = matches!(x, Scale::Band { .. });
    let xval = |v: &Value| match (banded, v.number()) {
        (false, Some(n)) => n,
        _ => sweep.values.iter().position(|w| w == v).unwrap_or(0) as f64,
    };
    let title = format!("Throughput vs {}", param.title);
    let mut chart = Chart::new(&title, &r.label(&sweep.fixed), x, &param.axis, mpps_axis(max), "forwarded (Mpps)");
    let apart_x: Vec<f64> = sweep.values.iter().filter(|v| param.apart.contains(v)).map(xval).collect();
    if let Some(first) = apart_x.iter().copied().reduce(f64::min) {
        chart.separator(first - 0.5);
    }
    let variants: Vec<&str> = palette.variants(|v| sweep.summaries.iter().any(|s| s.variant == v)).collect();
    let at = |s: &Summary| s.point.get(&param.name).map_or(0.0, xval);
    for (i, variant) in variants.iter().enumerate() {
        let of: Vec<&&Summary> = sweep.summaries.iter().filter(|s| s.variant == *variant).collect();
        let mut rate: Vec<Pt> = of.iter().map(|s| Pt::range(at(s), s.median_mpps, s.min_mpps, s.max_mpps)).collect();
        rate.sort_by(|a, b| a.x.total_cmp(&b.x));
        let mut zero: Vec<Pt> = of.iter().filter_map(|s| s.zero_loss_mpps.map(|z| Pt::new(at(s), z))).collect();
        zero.sort_by(|a, b| a.x.total_cmp(&b.x));
        let colour = palette.colour(variant);
        if param.scale == Axis::Bars {
            let slot = Slot { index: i, of: variants.len(), faded: false };
            chart.bars(&Series { label: variant.to_string(), variant, colour, style: Style::Line, points: rate }, slot, true);
            continue;
        }
        let dodge = (i as f64 - (variants.len() as f64 - 1.0) / 2.0) * 4.0;
        for (style, label, points) in [(Style::Line, variant.to_string(), rate), (Style::Dashed, format!("{variant} zero-loss"), zero)] {
            let (on_scale, apart): (Vec<Pt>, Vec<Pt>) = points.into_iter().partition(|p| !apart_x.contains(&p.x));
            for points in [on_scale, apart].into_iter().filter(|p| !p.is_empty()) {
                chart.series(&Series { label: label.clone(), variant, colour, style, points }, dodge);
            }
        }
    }
    chart
}

/// Median rate per variant at the first point, when nothing is swept: one
/// bar per variant (and a lighter one for its zero-loss rate).
fn variant_bars(r: &Results, palette: &Palette) -> Option<Chart> {
    let point = &r.summary.first()?.point;
    let at: Vec<&Summary> = palette.variants(|_| true).filter_map(|v| r.summary_of(v, point)).collect();
    let max = at.iter().map(|s| s.max_mpps.max(s.median_mpps)).fold(0.0, f64::max);
    let labels = at.iter().map(|s| s.variant.clone()).collect();
    let any_zero = at.iter().any(|s| s.zero_loss_mpps.is_some());
    let mut chart = Chart::new("Throughput by variant", &r.label(point), Scale::band(labels), "variant", mpps_axis(max), "forwarded (Mpps)");
    let runs = at.iter().map(|s| s.runs).max().unwrap_or(0);
    chart.legend_box(&format!("median of {runs} run{} (whiskers: min–max)", if runs == 1 { "" } else { "s" }), "#6e7781", false, None);
    if any_zero {
        chart.legend_box("zero-loss rate", "#6e7781", true, None);
    }
    let of = if any_zero { 2 } else { 1 };
    for (i, s) in at.iter().enumerate() {
        let (variant, colour) = (s.variant.as_str(), palette.colour(&s.variant));
        let rate = vec![Pt::range(i as f64, s.median_mpps, s.min_mpps, s.max_mpps)];
        chart.bars(&Series { label: variant.into(), variant, colour, style: Style::Line, points: rate }, Slot { index: 0, of, faded: false }, false);
        if let Some(z) = s.zero_loss_mpps {
            let zero = vec![Pt::new(i as f64, z)];
            chart.bars(
                &Series { label: format!("{variant} zero-loss"), variant, colour, style: Style::Line, points: zero },
                Slot { index: 1, of, faded: true },
                false,
            );
        }
    }
    Some(chart)
}

/// Variants that ran at least this often at a point get a box plot there.
const BOX_RUNS: usize = 3;

/// The spread of the runs (the seeds' box plots): one chart, a category
/// per point and a box per variant with at least [`BOX_RUNS`] runs of its
/// full-speed rate there; None when no variant ran that often.
fn run_boxes(r: &Results, palette: &Palette) -> Option<Chart> {
    let full = |s: &Sample| matches!(s.kind, SampleKind::Max);
    let boxed = |v: &str, p: &Point| samples_at(r, p, v, full).len() >= BOX_RUNS;
    let mut points: Vec<&Point> = Vec::new();
    for s in r.summary.iter().filter(|s| boxed(&s.variant, &s.point)) {
        if !points.contains(&&s.point) {
            points.push(&s.point);
        }
    }
    let first = points.first()?;
    let variants: Vec<&str> = palette.variants(|v| points.iter().any(|p| boxed(v, p))).collect();
    let max = r.samples.iter().filter(|s| full(s) && points.contains(&&s.point)).map(|s| s.mpps).fold(0.0, f64::max);
    let (labels, fixed) = short_labels(&points.iter().map(|p| r.label(p)).collect::<Vec<_>>());
    let subtitle = if points.len() == 1 { r.label(first) } else { fixed };
    let mut chart = Chart::new("Throughput by run", &subtitle, Scale::band(labels), "point", mpps_axis(max * 1.05), "forwarded (Mpps)");
    for (i, v) in variants.iter().enumerate() {
        chart.legend_box(v, palette.colour(v), false, Some(v));
        for (x, p) in points.iter().enumerate().filter(|(_, p)| boxed(v, p)) {
            let runs: Vec<f64> = samples_at(r, p, v, full).iter().map(|s| s.mpps).collect();
            chart.box_plot(x as f64, Slot { index: i, of: variants.len(), faded: false }, v, palette.colour(v), &runs);
        }
    }
    Some(chart)
}

/// Point labels ("64 B, 4 flows, IPv4") without the parts all share, and
/// those parts (the chart's subtitle).
fn short_labels(labels: &[String]) -> (Vec<String>, String) {
    let parts: Vec<Vec<&str>> = labels.iter().map(|l| l.split(", ").collect()).collect();
    let common: Vec<&str> = parts.first().map_or(Vec::new(), |f| f.iter().copied().filter(|p| parts.iter().all(|q| q.contains(p))).collect());
    let short = parts.iter().map(|ps| ps.iter().copied().filter(|p| !common.contains(p)).collect::<Vec<_>>().join(", ")).collect();
    (short, common.join(", "))
}

/// Samples that carry an application's transactions (`xnf lab filter`).
fn has_transactions(s: &Sample) -> bool {
    s.transactions_per_s.is_some()
}

/// One variant's transactions per second against the load as sent: the
/// load steps (median per step over the runs, min–max), then the
/// full-speed samples as one more point; sorted by load.
pub fn transaction_curve(r: &Results, point: &Point, variant: &str) -> Vec<Pt> {
    let tps = |s: &Sample| s.transactions_per_s.unwrap_or(0.0);
    let mut pts = data::per_step(&samples_at(r, point, variant, is_load), tps);
    let max: Vec<&Sample> = samples_at(r, point, variant, |s| matches!(s.kind, SampleKind::Max));
    if !max.is_empty() {
        let mut ys: Vec<f64> = max.iter().map(|s| tps(s)).collect();
        let mut xs: Vec<f64> = max.iter().map(|s| s.sent_mpps).collect();
        let (lo, hi) = (ys.iter().copied().fold(f64::INFINITY, f64::min), ys.iter().copied().fold(0.0, f64::max));
        pts.push(Pt::range(median(&mut xs), median(&mut ys), lo, hi));
    }
    pts.sort_by(|a, b| a.x.total_cmp(&b.x));
    pts
}

/// Per point with an application's transactions: transactions per second
/// (thousands) against the load actually sent, a line per variant, and a
/// dashed line where each falls to half of its rate at the first step
/// (the XDP paper's Fig. 5).
fn transaction_charts(r: &Results, palette: &Palette) -> Vec<Chart> {
    let mut charts = Vec::new();
    for point in data::points_with(r, has_transactions) {
        let variants: Vec<&str> = palette.variants(|v| r.samples.iter().any(|s| has_transactions(s) && s.variant == v && &s.point == point)).collect();
        let curves: Vec<(&str, Vec<Pt>)> = variants.iter().map(|v| (*v, transaction_curve(r, point, v))).collect();
        let xmax = curves.iter().flat_map(|(_, c)| c.iter().map(|p| p.x)).fold(0.001, f64::max);
        let ymax = curves.iter().flat_map(|(_, c)| c.iter().map(|p| p.hi / 1e3)).fold(0.001, f64::max);
        let y = Scale::linear(0.0, ymax);
        let title = "Application transactions vs load";
        let mut chart = Chart::new(title, &r.label(point), Scale::linear(0.0, xmax), "load as sent (Mpps; median per rate)", y, "transactions/s (thousands)");
        for (variant, pts) in curves {
            let colour = palette.colour(variant);
            let curve: Vec<crate::experiments::filter::flood::CurvePoint> =
                pts.iter().map(|p| crate::experiments::filter::flood::CurvePoint { flood_pps: p.x, tps: p.y }).collect();
            let points = pts.iter().map(|p| Pt::range(p.x, p.y / 1e3, p.lo / 1e3, p.hi / 1e3)).collect();
            chart.series(&Series { label: variant.to_string(), variant, colour, style: Style::Line, points }, 0.0);
            if let Some(half) = crate::experiments::filter::flood::half_rate(&curve) {
                chart.vline(half, colour, &format!("{variant}: half the transactions"), variant);
            }
        }
        charts.push(chart);
    }
    charts
}

/// Per sweep whose samples carry an application's transactions: its
/// transactions per second at full speed (the top load) against the swept
/// parameter, a line per variant (median, min–max) — the victim of `xnf
/// lab filter` against the filters' rule count or blocklist size.
fn transaction_sweep_charts(r: &Results, palette: &Palette) -> Vec<Chart> {
    let at_max = |s: &Sample| has_transactions(s) && matches!(s.kind, SampleKind::Max);
    let mut charts = Vec::new();
    for sweep in data::sweeps(r) {
        let param = &sweep.param;
        let numbers: Option<Vec<f64>> = sweep.values.iter().map(Value::number).collect();
        let (x, banded) = match (param.scale, numbers) {
            (Axis::Log, Some(n)) if n.iter().all(|v| *v > 0.0) => (Scale::log(&n), false),
            (Axis::Linear, Some(n)) => (Scale::linear_int(0.0, n.iter().copied().fold(1.0, f64::max)), false),
            _ => (Scale::band(sweep.values.iter().map(|v| param.label(v)).collect()), true),
        };
        let xval = |v: &Value| match (banded, v.number()) {
            (false, Some(n)) => n,
            _ => sweep.values.iter().position(|w| w == v).unwrap_or(0) as f64,
        };
        let variants: Vec<&str> = palette.variants(|v| sweep.summaries.iter().any(|s| s.variant == v)).collect();
        let mut lines: Vec<(&str, Vec<Pt>)> = Vec::new();
        for variant in variants {
            let mut pts: Vec<Pt> = Vec::new();
            for s in sweep.summaries.iter().filter(|s| s.variant == variant) {
                let max: Vec<&Sample> = r.samples.iter().filter(|x| at_max(x) && x.point == s.point && x.variant == variant).collect();
                let mut ys: Vec<f64> = max.iter().map(|x| x.transactions_per_s.unwrap_or(0.0) / 1e3).collect();
                if let (Some(v), false) = (s.point.get(&param.name), ys.is_empty()) {
                    let (lo, hi) = (ys.iter().copied().fold(f64::INFINITY, f64::min), ys.iter().copied().fold(0.0, f64::max));
                    pts.push(Pt::range(xval(v), median(&mut ys), lo, hi));
                }
            }
            pts.sort_by(|a, b| a.x.total_cmp(&b.x));
            if !pts.is_empty() {
                lines.push((variant, pts));
            }
        }
        if lines.is_empty() {
            continue;
        }
        let ymax = lines.iter().flat_map(|(_, p)| p.iter().map(|p| p.hi)).fold(0.001, f64::max);
        let title = format!("Application transactions at full load vs {}", param.title);
        let mut chart = Chart::new(&title, &r.label(&sweep.fixed), x, &param.axis, Scale::linear(0.0, ymax), "transactions/s (thousands)");
        for (variant, points) in lines {
            chart.series(&Series { label: variant.to_string(), variant, colour: palette.colour(variant), style: Style::Line, points }, 0.0);
        }
        charts.push(chart);
    }
    charts
}

fn offered_axis(samples: &[&Sample]) -> Scale {
    let max = samples.iter().filter_map(|s| offered_pps(s)).fold(0.0, f64::max) / 1e6;
    Scale::linear(0.0, max.max(0.001))
}

/// Per point with load samples: the receive side's CPU against offered
/// load (a line per variant, one point per load step), and each variant's
/// CPU time by kind, stacked.
fn cpu_charts(r: &Results, palette: &Palette) -> Vec<Chart> {
    let mut charts = Vec::new();
    for point in data::points_with(r, is_load) {
        let load: Vec<&Sample> = r.samples.iter().filter(|s| is_load(s) && &s.point == point).collect();
        let max = load.iter().map(|s| softirq_pct(s)).fold(100.0, f64::max);
        let y = Scale::linear(0.0, max);
        let label = r.label(point);
        let mut chart = Chart::new(
            "Receive-side CPU (softirq) vs offered load",
            &label,
            offered_axis(&load),
            "offered load, as sent (Mpps; median per step)",
            y,
            "softirq CPU (%, summed over CPUs)",
        );
        let variants: Vec<&str> = palette.variants(|v| load.iter().any(|s| s.variant == v)).collect();
        for variant in &variants {
            let points = data::per_step(&samples_at(r, point, variant, is_load), softirq_pct);
            chart.series(&Series { label: variant.to_string(), variant, colour: palette.colour(variant), style: Style::Line, points }, 0.0);
        }
        charts.push(chart);
        charts.extend(variants.iter().filter_map(|v| cpu_kind_chart(r, point, v)));
    }
    charts
}

/// Neutral shades for kinds of CPU time, apart from the variants' colours.
const CPU_KINDS: [(&str, &str); 4] = [("softirq", "#34495e"), ("system", "#7f8fa6"), ("user", "#b8c4d2"), ("other (irq, steal)", "#e1e6ec")];

/// CPU time by kind (summed over CPUs, the median per load step) against
/// offered load, stacked.
fn cpu_kind_chart(r: &Results, point: &Point, variant: &str) -> Option<Chart> {
    let load = samples_at(r, point, variant, is_load);
    let steps = data::kinds_per_step(&load);
    if steps.len() < 2 || steps.iter().all(|(_, k)| k[..3].iter().all(|v| *v == 0.0)) {
        return None;
    }
    let xs: Vec<f64> = steps.iter().map(|s| s.0).collect();
    let max = steps.iter().map(|(_, k)| k.iter().sum::<f64>()).fold(100.0, f64::max);
    let title = format!("CPU time by kind: {variant}");
    let mut chart =
        Chart::new(&title, &r.label(point), offered_axis(&load), "offered load (Mpps; median per step)", Scale::linear(0.0, max), "CPU (%, summed over CPUs)");
    let layers: Vec<Layer> =
        CPU_KINDS.iter().enumerate().map(|(k, (label, colour))| Layer { label, colour, ys: steps.iter().map(|s| s.1[k]).collect() }).collect();
    chart.stack(&xs, &layers);
    Some(chart)
}

fn loss_charts(r: &Results, palette: &Palette) -> Vec<Chart> {
    let mut charts = Vec::new();
    for point in data::points_with(r, |s| is_load(s) || is_search(s)) {
        let at: Vec<&Sample> = r.samples.iter().filter(|s| (is_load(s) || is_search(s)) && &s.point == point).collect();
        let lo = at.iter().map(|s| s.loss_pct).fold(0.0, f64::min);
        let hi = at.iter().map(|s| s.loss_pct).fold(1.0, f64::max);
        let mut chart = Chart::new("Loss vs offered rate", &r.label(point), offered_axis(&at), "offered rate (Mpps)", Scale::linear(lo, hi), "loss (%)");
        for variant in palette.variants(|v| at.iter().any(|s| s.variant == v)) {
            add_loss_series(&mut chart, r, point, variant, palette.colour(variant));
        }
        charts.push(chart);
    }
    charts
}

/// A variant's loss at the load steps (a line through the median of each
/// step, min–max whiskers), its search trials and the zero-loss rate the
/// search found (dashed vertical line). Search trials are drawn as they
/// are, each at the rate the search asked for, as hollow markers without
/// lines: every run's search takes its own path of rates, so trials of
/// different runs have no step in common to group them by, and a line
/// through them would invent an order.
fn add_loss_series(chart: &mut Chart, r: &Results, point: &Point, variant: &str, colour: &str) {
    let load = data::per_step(&samples_at(r, point, variant, is_load), |s| s.loss_pct);
    if !load.is_empty() {
        chart.series(&Series { label: format!("{variant} (fixed load)"), variant, colour, style: Style::Line, points: load }, 0.0);
    }
    let trials: Vec<Pt> = samples_at(r, point, variant, is_search).iter().filter_map(|s| Some(Pt::new(offered_pps(s)? / 1e6, s.loss_pct))).collect();
    if !trials.is_empty() {
        chart.series(&Series { label: format!("{variant} (search trials)"), variant, colour, style: Style::Hollow, points: trials }, 0.0);
    }
    if let Some(z) = r.summary_of(variant, point).and_then(|s| s.zero_loss_mpps) {
        chart.vline(z, colour, &format!("{variant} zero-loss rate"), variant);
    }
}

/// The receive path's stages (`xnf_profile::model::STAGES`, in order along
/// the path): viridis, apart from the variants' and the CPU kinds' colours.
pub const STAGE_COLOURS: [&str; 7] = ["#440154", "#443983", "#31688e", "#21918c", "#35b779", "#90d743", "#fde725"];
/// Softirq time no stage accounts for (drawn only when above 1 % of it).
const OTHER_STAGE: (&str, &str) = ("other softirq", "#c8c8c8");

/// A profiled interval's segments: (stage, colour, ns per packet).
fn stage_segments(p: &ProfiledRun) -> Vec<(&'static str, &'static str, f64)> {
    let mut segs: Vec<(&str, &str, f64)> = xnf_profile::model::STAGES.iter().zip(STAGE_COLOURS).map(|((n, _), c)| (*n, c, p.stage(n))).collect();
    let other = p.stage("softirq") - segs.iter().map(|s| s.2).sum::<f64>();
    if other > 0.01 * p.stage("softirq") {
        segs.push((OTHER_STAGE.0, OTHER_STAGE.1, other));
    }
    segs
}

/// NET_RX softirq ns per packet by stage, stacked: one horizontal bar per
/// profiled full-speed interval that measured stages, grouped by point and
/// within a point in variant order, so the kernel's path and the XDP path
/// stand side by side (the receive-path profiling paper's breakdown). None without such intervals.
pub fn stage_bars(r: &Results) -> Option<Markup> {
    const W: f64 = 760.0;
    const RIGHT: f64 = 56.0;
    const ROW: f64 = 20.0;
    const BAR: f64 = 14.0;
    const HEAD: f64 = 18.0;
    let mut bars: Vec<&ProfiledRun> = r.profiles.iter().filter(|p| p.offered_pps.is_none() && !p.profile.counts_only).collect();
    if bars.is_empty() {
        return None;
    }
    let palette = Palette::of(r);
    let mut variants: Vec<&str> = palette.variants(|_| true).collect();
    let mut points: Vec<&Point> = Vec::new();
    for p in &bars {
        if !variants.contains(&p.variant.as_str()) {
            variants.push(&p.variant);
        }
        if !points.contains(&&p.point) {
            points.push(&p.point);
        }
    }
    bars.sort_by_key(|p| (points.iter().position(|q| **q == p.point), variants.iter().position(|v| *v == p.variant), p.run));
    let label = |p: &ProfiledRun| format!("{} run {}", p.variant, p.run + 1);
    let left = (bars.iter().map(|p| label(p).chars().count()).max().unwrap_or(0) as f64 * 6.8 + 16.0).clamp(90.0, 260.0);
    let plot_w = W - left - RIGHT;
    let segs: Vec<Vec<(&str, &str, f64)>> = bars.iter().map(|p| stage_segments(p)).collect();
    let max = segs.iter().map(|s| s.iter().map(|x| x.2).sum::<f64>()).fold(0.0, f64::max);
    let ticks = nice_ticks(0.0, max, 5);
    let step = ticks.get(1).map_or(1.0, |t| t - ticks[0]);
    let hi = ticks.last().copied().unwrap_or(1.0).max(f64::MIN_POSITIVE);
    let px = |v: f64| v / hi * plot_w;

    // The legend: each stage drawn, in path order, in rows that fit.
    let mut legend: Vec<(&str, &str)> = Vec::new();
    for (name, colour, _) in segs.iter().flatten().filter(|s| s.2 > 0.0) {
        if !legend.iter().any(|l| l.0 == *name) {
            legend.push((name, colour));
        }
    }
    let order = |n: &str| xnf_profile::model::STAGES.iter().position(|s| s.0 == n).unwrap_or(usize::MAX);
    legend.sort_by_key(|l| order(l.0));
    let (mut lx, mut ly) = (left, 0.0);
    let mut items = Vec::new();
    for (name, colour) in &legend {
        let w = 24.0 + name.chars().count() as f64 * 6.8 + 14.0;
        if lx > left && lx + w > W - 8.0 {
            lx = left;
            ly += 18.0;
        }
        items.push((lx, ly, *name, *colour));
        lx += w;
    }
    let top = 48.0 + ly + 18.0 + 10.0;

    // Rows: a heading per point, then its bars.
    let mut rows = Vec::new();
    let mut y = 0.0;
    let mut at: Option<&Point> = None;
    for (p, s) in bars.iter().zip(&segs) {
        if at != Some(&p.point) {
            rows.push(html! { text class="tick group" x="6" y=(format!("{:.1}", y + 13.0)) { (r.label(&p.point)) } });
            y += HEAD;
            at = Some(&p.point);
        }
        // Each segment starts where the ones before it end.
        let starts = s.iter().scan(0.0, |acc, seg| {
            let at = *acc;
            *acc += seg.2;
            Some(at)
        });
        let parts = html! {
            @for ((name, colour, v), x0) in s.iter().zip(starts).filter(|(s, _)| s.2 > 0.0) {
                rect x=(format!("{:.1}", px(x0))) y=(format!("{:.1}", y + (ROW - BAR) / 2.0)) width=(format!("{:.1}", px(*v))) height=(BAR) fill=(colour) data-stage=(name) {
                    title { (format!("{} run {}, {name}: {v:.0} ns/packet", p.variant, p.run + 1)) }
                }
            }
        };
        let total: f64 = s.iter().map(|x| x.2).sum();
        rows.push(html! {
            g class="bar" data-variant=(p.variant) {
                text class="legend-label" x="-8" y=(format!("{:.1}", y + 14.0)) text-anchor="end" { (label(p)) }
                (parts)
                text class="value" x=(format!("{:.1}", px(total) + 5.0)) y=(format!("{:.1}", y + 14.0)) { (format!("{total:.0}")) }
            }
        });
        y += ROW;
    }
    let plot_h = y + 4.0;
    let height = top + plot_h + 46.0;
    Some(html! {
        svg class="chart hbars" xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {W} {height:.1}")) width=(W) height=(format!("{height:.1}")) role="img" aria-label="Time per packet by stage" {
            text class="title" x=(left) y="20" { "NET_RX softirq time per packet by stage" }
            text class="subtitle" x=(left) y="38" { "full speed, profiled intervals; all CPUs; total at the end of each bar" }
            g transform="translate(0,48)" {
                @for (x, y, name, colour) in &items {
                    g class="legend" data-stage=(name) data-colour=(colour) {
                        rect x=(format!("{:.1}", x + 5.0)) y=(format!("{:.1}", y + 3.0)) width="14" height="12" fill=(colour) {}
                        text class="legend-label" x=(format!("{:.1}", x + 24.0)) y=(format!("{:.1}", y + 13.0)) { (name) }
                    }
                }
            }
            g transform=(format!("translate({left:.1},{top:.1})")) {
                @for t in &ticks {
                    line x1=(format!("{:.1}", px(*t))) x2=(format!("{:.1}", px(*t))) y1="0" y2=(format!("{plot_h:.1}")) stroke="#e6e6e6" {}
                    text class="tick" x=(format!("{:.1}", px(*t))) y=(format!("{:.1}", plot_h + 16.0)) text-anchor="middle" { (fmt_tick(*t, step)) }
                }
                @for row in &rows { (row) }
                path d=(format!("M0,0V{plot_h:.1}H{plot_w:.1}")) fill="none" stroke="#555" {}
            }
            text class="axis" x=(format!("{:.1}", left + plot_w / 2.0)) y=(format!("{:.1}", top + plot_h + 38.0)) text-anchor="middle" { "ns per packet received (NET_RX softirq)" }
        }
    })
}
