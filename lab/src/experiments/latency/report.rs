//! The HTML page of `xnf lab latency` results (through `xnf lab report`):
//! the clusters as the seed's Table I, a density plot of each cluster's
//! RTTs, every configuration's summary, the baselines and the saturation
//! sweep. Self-contained: inline CSS and SVG, nothing fetched.

use std::fmt::Write;

use super::stats::{kde, quantile, Summary};
use super::{pooled_us, LatencyResults};
use crate::report::svg::{Chart, Pt, Scale, Series, Style};
use crate::report::{esc, fmt_date, kv_table, option_rows, CSS, PALETTE};

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

fn summary_row(label: &str, s: &Summary, extra: &str) -> String {
    format!(
        "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td>{extra}</tr>\n",
        esc(label),
        s.mean,
        s.median,
        s.std,
        s.q1,
        s.q3,
        s.p99,
        s.p999,
        s.min,
        s.max
    )
}

const SUMMARY_HEAD: &str = "<th>mean</th><th>median</th><th>std</th><th>q1</th><th>q3</th><th>p99</th><th>p99.9</th><th>min</th><th>max</th>";

/// The whole page.
pub fn render(r: &LatencyResults) -> String {
    let mut h = String::new();
    let title = format!("xnf lab latency — {}", fmt_date(r.started_unix));
    let _ = write!(h, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n", esc(&title));
    let m = &r.machine;
    let _ = write!(
        h,
        "<header>\n<h1>xnf lab <span class=\"experiment\">latency</span></h1>\n<p class=\"lede\">{} · {} · {} cores · Linux {}</p>\n</header>\n<section class=\"meta\">\n",
        esc(&fmt_date(r.started_unix)),
        esc(&m.cpu_model),
        m.cores,
        esc(&m.kernel)
    );
    h += &kv_table("Machine", [("kernel", m.kernel.clone()), ("CPU", m.cpu_model.clone()), ("cores", m.cores.to_string()), ("xnf", m.xnf_version.clone())].into_iter().map(|(k, v)| (k.to_string(), v)));
    h += &kv_table("Options", option_rows(&serde_json::to_value(&r.options).unwrap_or_default()).into_iter());
    h += "</section>\n<section>\n<h2>Notes</h2>\n<ul>\n";
    for n in &r.notes {
        let _ = writeln!(h, "<li>{}</li>", esc(n));
    }
    h += "</ul>\n</section>\n";

    if let Some(c) = &r.clustering {
        let _ = write!(
            h,
            "<section>\n<h2>Clusters of the AF_XDP runs (Table I)</h2>\n<p>k = {} chosen by {}; silhouette {:.2}; features: {}. RTT in µs.</p>\n<table>\n<tr><th>cluster</th><th>runs</th><th>mean</th><th>std</th><th>median</th><th>p99</th><th>parameters always present</th><th>in ≥ 80 % of members</th></tr>\n",
            c.k,
            esc(&c.criterion),
            c.silhouette,
            esc(&c.features.join(", "))
        );
        for k in &c.clusters {
            let always: Vec<String> = k.always.iter().filter(|(n, _)| n != "method").map(|(n, v)| format!("{n}={v}")).collect();
            let mostly: Vec<String> = k.mostly.iter().map(|(n, v, f)| format!("{n}={v} ({:.0} %)", f * 100.0)).collect();
            let _ = writeln!(
                h,
                "<tr><td>c{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
                k.id,
                k.runs,
                k.mean_us,
                k.std_us,
                k.median_us,
                k.p99_us,
                esc(&always.join(", ")),
                esc(&mostly.join(", "))
            );
        }
        h += "</table>\n<div class=\"charts\">\n";
        let colour = |i: usize| PALETTE[i % PALETTE.len()];
        let mut all = Vec::new();
        for k in &c.clusters {
            let pooled = pooled_us(r.runs.iter().filter(|x| x.cluster == Some(k.id)));
            if let Some(ch) = density_chart(&format!("Cluster c{}", k.id), &format!("{} runs, mean {:.1} µs", k.runs, k.mean_us), &[(format!("c{}", k.id), colour(k.id), pooled.clone())]) {
                let _ = writeln!(h, "<figure>{}</figure>", ch.render());
            }
            all.push((format!("c{}", k.id), colour(k.id), pooled));
        }
        for (i, m) in ["udp", "af-packet"].iter().enumerate() {
            let pooled = pooled_us(r.runs.iter().filter(|x| x.config.method.name() == *m));
            all.push((m.to_string(), colour(c.clusters.len() + i), pooled));
        }
        if let Some(ch) = density_chart("Every cluster and the kernel baselines", "RTT densities pooled over runs", &all) {
            let _ = writeln!(h, "<figure>{}</figure>", ch.render());
        }
        h += "</div>\n</section>\n";
    }

    let eff = super::effects(&r.runs);
    if !eff.is_empty() {
        h += "<section>\n<h2>Effect of each AF_XDP setting</h2>\n<p>Median of the run medians (µs) of the runs with each value; largest spread first.</p>\n<table>\n<tr><th>setting</th><th>values</th></tr>\n";
        for e in &eff {
            let v: Vec<String> = e.values.iter().map(|(v, n, m)| format!("{v}: {m:.1} µs ({n} runs)")).collect();
            let _ = writeln!(h, "<tr><td>{}</td><td>{}</td></tr>", esc(&e.param), esc(&v.join(" · ")));
        }
        h += "</table>\n</section>\n";
    }

    // Every configuration, best median first, repeats pooled.
    let rows = super::by_config(&r.runs);
    let _ = write!(h, "<section>\n<h2>Every configuration (repeats pooled, µs)</h2>\n<table>\n<tr><th>configuration</th>{SUMMARY_HEAD}<th>lost</th><th>cluster</th></tr>\n");
    for row in &rows {
        h += &summary_row(row.label, &row.summary, &format!("<td>{}</td><td>{}</td>", row.lost, row.cluster.map_or("—".into(), |c| format!("c{c}"))));
    }
    h += "</table>\n</section>\n";

    if !r.saturation.is_empty() {
        let _ = write!(h, "<section>\n<h2>Saturation: the best configuration of each method at rising rates (µs)</h2>\n<table>\n<tr><th>configuration</th><th>probes/s</th>{SUMMARY_HEAD}<th>lost</th></tr>\n");
        for s in &r.saturation {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td>{}<td>{}/{}</td></tr>",
                esc(&s.label),
                s.rate_pps,
                summary_row("", &s.summary, "").trim_start_matches("<tr><td></td>").trim_end_matches("</tr>\n"),
                s.lost,
                s.sent
            );
        }
        h += "</table>\n</section>\n";
    }
    let _ = write!(h, "<footer>Written by <code>xnf lab report</code> (xnf {}).</footer>\n</main>\n</body>\n</html>\n", esc(env!("CARGO_PKG_VERSION")));
    h
}
