//! The HTML page of `xnf lab latency` results (through `xnf lab report`,
//! from a file of either form, see [`LatencyResults::read`]):
//! the clusters as the seed's Table I, a density plot of each cluster's
//! RTTs, every configuration's summary, the baselines and the saturation
//! sweep. The same self-contained page as every lab report.

use maud::{html, Markup};

use super::stats::{kde, quantile, Summary};
use super::{pooled_us, LatencyResults};
use crate::report::data::PALETTE;
use crate::report::html::{page, Head};
use crate::report::svg::{Chart, Pt, Scale, Series, Style};

/// One density curve: (label, colour, pooled RTTs in µs).
fn density_chart(title: &str, subtitle: &str, curves: &[(String, &str, Vec<f64>)]) -> Option<Chart> {
    let all: Vec<f64> = curves.iter().flat_map(|c| c.2.iter().copied()).collect();
    if all.len() < 2 {
        return None;
    }
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    // Up to the 99.5th percentile: the far tail would flatten every peak.
    let (lo, hi) = (sorted[0].max(0.0), quantile(&sorted, 0.995));
    let hi = if hi > lo { hi } else { lo + 1.0 };
    let dens: Vec<Vec<(f64, f64)>> = curves.iter().map(|c| kde(&c.2, lo, hi, 240)).collect();
    let ymax = dens.iter().flatten().map(|p| p.1).fold(0.0, f64::max).max(1e-9);
    let mut chart = Chart::new(title, subtitle, Scale::linear(lo, hi), "RTT (µs)", Scale::linear(0.0, ymax * 1.05), "density (1/µs)");
    for (c, d) in curves.iter().zip(&dens) {
        let points = d.iter().map(|&(x, y)| Pt::new(x, y)).collect();
        chart.series(&Series { label: c.0.clone(), variant: &c.0, colour: c.1, style: Style::Curve, points }, 0.0);
    }
    Some(chart)
}

/// The cells of an RTT summary.
fn summary_cells(s: &Summary) -> Markup {
    html! { @for v in [s.mean, s.median, s.std, s.q1, s.q3, s.p99, s.p999, s.min, s.max] { td { (format!("{v:.1}")) } } }
}

const SUMMARY_HEAD: [&str; 9] = ["mean", "median", "std", "q1", "q3", "p99", "p99.9", "min", "max"];

fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// The clusters (Table I) and their densities, with the baselines'.
fn clusters(r: &LatencyResults) -> Markup {
    let Some(c) = &r.details.clustering else { return html! {} };
    let mut charts = Vec::new();
    let mut all = Vec::new();
    for k in &c.clusters {
        let pooled = pooled_us(r.details.runs.iter().filter(|x| x.cluster == Some(k.id)));
        charts.extend(density_chart(
            &format!("Cluster c{}", k.id),
            &format!("{} runs, mean {:.1} µs", k.runs, k.mean_us),
            &[(format!("c{}", k.id), colour(k.id), pooled.clone())],
        ));
        all.push((format!("c{}", k.id), colour(k.id), pooled));
    }
    for (i, m) in ["udp", "af-packet"].iter().enumerate() {
        let pooled = pooled_us(r.details.runs.iter().filter(|x| x.config.method.name() == *m));
        all.push((m.to_string(), colour(c.clusters.len() + i), pooled));
    }
    charts.extend(density_chart("Every cluster and the kernel baselines", "RTT densities pooled over runs", &all));
    html! {
        section {
            h2 { "Clusters of the AF_XDP runs (Table I)" }
            p { "k = " (c.k) " chosen by " (c.criterion) "; silhouette " (format!("{:.2}", c.silhouette)) "; features: " (c.features.join(", ")) ". RTT in µs." }
            table {
                tr { @for h in ["cluster", "runs", "mean", "std", "median", "p99", "parameters always present", "in ≥ 80 % of members"] { th { (h) } } }
                @for k in &c.clusters {
                    @let (always, mostly) = k.shared();
                    tr {
                        td { "c" (k.id) }
                        td { (k.runs) }
                        @for v in [k.mean_us, k.std_us, k.median_us, k.p99_us] { td { (format!("{v:.1}")) } }
                        td { (always.join(", ")) }
                        td { (mostly.join(", ")) }
                    }
                }
            }
            div class="charts" { @for ch in &charts { figure { (ch.render()) } } }
        }
    }
}

/// The whole page.
pub fn render(r: &LatencyResults) -> String {
    let d = &r.details;
    let eff = super::effects(&d.runs);
    // Every configuration, best median first, repeats pooled.
    let rows = super::by_config(&d.runs);
    let body = html! {
        (clusters(r))
        @if !eff.is_empty() {
            section {
                h2 { "Effect of each AF_XDP setting" }
                p { "Median of the run medians (µs) of the runs with each value; largest spread first." }
                table {
                    tr { th { "setting" } th { "values" } }
                    @for e in &eff {
                        @let v: Vec<String> = e.values.iter().map(|(v, n, m)| format!("{v}: {m:.1} µs ({n} runs)")).collect();
                        tr { td { (e.param) } td { (v.join(" · ")) } }
                    }
                }
            }
        }
        section {
            h2 { "Every configuration (repeats pooled, µs)" }
            table {
                tr { th { "configuration" } @for h in SUMMARY_HEAD { th { (h) } } th { "lost" } th { "cluster" } }
                @for row in &rows {
                    tr { td { (row.label) } (summary_cells(&row.summary)) td { (row.lost) } td { (row.cluster.map_or("—".into(), |c| format!("c{c}"))) } }
                }
            }
        }
        @if !d.saturation.is_empty() {
            section {
                h2 { "Saturation: the best configuration of each method at rising rates (µs)" }
                table {
                    tr { th { "configuration" } th { "probes/s" } @for h in SUMMARY_HEAD { th { (h) } } th { "lost" } }
                    @for s in &d.saturation {
                        tr { td { (s.label) } td { (s.rate_pps) } (summary_cells(&s.summary)) td { (s.lost) "/" (s.sent) } }
                    }
                }
            }
        }
    };
    page(&Head { experiment: "latency", started_unix: r.started_unix, machine: &r.machine, options: &r.options, notes: &r.notes }, body)
}
