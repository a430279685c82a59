//! `xnf lab report`: one self-contained HTML page (inline CSS and SVG, no
//! script, nothing fetched) from a `--json` results file: the machine and
//! options, ratio and summary tables, and the charts network papers show —
//! throughput against each swept parameter, CPU against offered load, loss
//! against offered rate.
//!
//! [`data`] selects what to draw (the axes are whatever parameters the file
//! sweeps), [`charts`] draws it with [`svg`], [`html`] lays out the page,
//! [`profiles`] adds where the time went when the run was profiled, [`lb`]
//! what removing a backend moved (`xnf lab lb`'s disruption).

pub mod charts;
pub mod cost;
pub mod data;
pub mod disrupt;
pub mod html;
pub mod lb;
pub mod profiles;
pub mod svg;

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};

use crate::engine::results::Results;

/// Reads `input`, writes the report to `output` (default: `input` with an
/// `.html` extension) and returns where it went.
pub fn run(input: &Path, output: Option<&Path>) -> Result<PathBuf> {
    let out = output.map_or_else(|| default_output(input), Path::to_path_buf);
    ensure!(out != input, "the report would overwrite its input {}: give another file with -o", input.display());
    // `xnf lab latency` writes results of another shape.
    let text = std::fs::read_to_string(input).with_context(|| format!("reading {}", input.display()))?;
    let html = if serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v.get("experiment").cloned()) == Some("latency".into()) {
        crate::experiments::latency::report::render(&crate::experiments::latency::LatencyResults::read(input)?)
    } else {
        render(&Results::read(input)?)
    };
    std::fs::write(&out, html).with_context(|| format!("writing {}", out.display()))?;
    Ok(out)
}

pub fn default_output(input: &Path) -> PathBuf {
    input.with_extension("html")
}

/// The whole page of a throughput experiment's results.
pub fn render(r: &Results) -> String {
    html::results(r, &charts::sections(r))
}

#[cfg(test)]
mod tests {
    use super::charts::sections;
    use super::data::{sweeps, Palette};
    use super::html::{fmt_date, option_rows};
    use super::svg::Chart;
    use super::*;
    use crate::engine::params;
    use crate::engine::results::{CpuShare, Loss, Machine, Point, Ratio, Sample, SampleKind, Summary};

    fn point(size: u32) -> Point {
        Point::default().with("size", size).with("flows", 4u32).with("ipv6", false).with("routes", 0u64).with("queues", 1u32).with("netfilter", false)
    }

    /// Built through serde so fields added to the schema later get their defaults.
    fn sample(variant: &str, point: Point, kind: SampleKind, mpps: f64) -> Sample {
        let offered = match kind {
            SampleKind::Load { offered_pps, .. } | SampleKind::Search { offered_pps } => offered_pps / 1e6,
            SampleKind::Max => mpps,
        };
        let mut s = serde_json::json!({
            "variant": variant, "point": point, "run": 0, "seconds": 1.0,
            "sent": (offered * 1e6) as u64, "received": (mpps * 1e6) as u64, "sent_mpps": offered, "mpps": mpps,
            "loss_pct": if offered > 0.0 { (offered - mpps).max(0.0) / offered * 100.0 } else { 0.0 },
            "loss": Loss::default(),
            "cpus": [CpuShare { cpu: 0, user_pct: 1.0, system_pct: 4.0, softirq_pct: mpps * 20.0, busy_pct: 5.0 + mpps * 20.0 }],
            "ns_per_packet": 1000.0 / mpps.max(0.01),
        });
        let kind = serde_json::to_value(kind).unwrap();
        s.as_object_mut().unwrap().extend(kind.as_object().unwrap().clone());
        serde_json::from_value(s).unwrap()
    }

    fn summary(variant: &str, point: Point, median: f64) -> Summary {
        serde_json::from_value(serde_json::json!({
            "variant": variant, "point": point, "runs": 3,
            "median_mpps": median, "min_mpps": median * 0.95, "max_mpps": median * 1.05,
            "median_ns_per_packet": 1000.0 / median, "zero_loss_mpps": null,
        }))
        .unwrap()
    }

    pub(super) fn results() -> Results {
        serde_json::from_value(serde_json::json!({
            "experiment": "router", "machine": Machine::default(), "started_unix": 1_700_000_000u64,
            "options": {"runs": 3, "ipv6": false}, "samples": [], "summary": [], "ratios": [], "params": params::legacy(),
        }))
        .unwrap()
    }

    /// Size sweep of two variants with load and search samples at 64 B.
    fn swept() -> Results {
        let mut r = results();
        for size in [64, 512, 1518, 0] {
            r.summary.push(summary("kernel", point(size), 1.0));
            r.summary.push(summary("xnf", point(size), 2.5));
        }
        r.summary[1].zero_loss_mpps = Some(2.0);
        for (variant, cap) in [("kernel", 1.0), ("xnf", 2.5)] {
            for (step, offered) in [0.5e6, 1e6, 2e6, 3e6].into_iter().enumerate() {
                r.samples.push(sample(variant, point(64), SampleKind::Load { offered_pps: offered, step: step as u32 + 1 }, (offered / 1e6).min(cap)));
            }
        }
        r.samples.push(sample("xnf", point(64), SampleKind::Search { offered_pps: 2e6 }, 2.0));
        r.samples.push(sample("xnf", point(64), SampleKind::Search { offered_pps: 3e6 }, 2.5));
        r
    }

    fn titles(r: &Results) -> Vec<String> {
        sections(r).iter().flat_map(|s| s.charts.iter().map(|c| format!("{}: {}", s.heading, c.title()))).collect()
    }

    /// Every tag closed in order, nothing left open (self-closing tags count as closed).
    pub(super) fn assert_balanced(xml: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = xml;
        while let Some(i) = rest.find('<') {
            let j = rest[i..].find('>').expect("unterminated tag") + i;
            let tag = &rest[i + 1..j];
            rest = &rest[j + 1..];
            if tag.starts_with('!') || tag.ends_with('/') {
                continue;
            }
            let name = tag.trim_start_matches('/').split_whitespace().next().unwrap_or("").to_string();
            if tag.starts_with('/') {
                assert_eq!(stack.pop().as_deref(), Some(name.as_str()), "closing </{name}> in {xml}");
            } else if !["meta", "br"].contains(&name.as_str()) {
                stack.push(name);
            }
        }
        assert!(stack.is_empty(), "unclosed {stack:?}");
    }

    #[test]
    fn escapes_markup_and_quotes() {
        let mut r = swept();
        r.experiment = "<script>alert(1)</script>".into();
        r.notes = vec!["rate < 1 & \"limited\"".into()];
        r.summary[0].variant = "k<1>".into();
        let html = render(&r);
        assert!(!html.contains("<script>"), "unescaped experiment");
        assert!(html.contains("rate &lt; 1 &amp; &quot;limited&quot;"));
        assert!(html.contains("k&lt;1&gt;") && !html.contains("k<1>"));
        assert_balanced(&html);
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(fmt_date(0), "1970-01-01 00:00 UTC");
        assert_eq!(fmt_date(1_700_000_000), "2023-11-14 22:13 UTC");
        assert_eq!(fmt_date(951_782_400), "2000-02-29 00:00 UTC");
    }

    #[test]
    fn sweep_charts_load_charts_and_loss_charts_appear_with_their_data() {
        let t = titles(&swept());
        assert_eq!(
            t,
            [
                "Throughput: Throughput vs packet size",
                "CPU vs offered load: Receive-side CPU (softirq) vs offered load",
                "CPU vs offered load: CPU time by kind: kernel",
                "CPU vs offered load: CPU time by kind: xnf",
                "Loss vs offered rate: Loss vs offered rate",
            ]
        );
    }

    #[test]
    fn application_transactions_are_drawn_against_the_load_with_their_half_rate() {
        let mut r = results();
        r.experiment = "filter".into();
        let p = Point::default().with("blocklist", 0u64);
        // none halves between 1 and 2 Mpps; xnf never does.
        for (variant, tps) in [("none", [20e3, 15e3, 5e3]), ("xnf", [20e3, 19e3, 18e3])] {
            for (step, (rate, t)) in [0.0, 1e6].into_iter().zip(tps).enumerate() {
                let mut s = sample(variant, p.clone(), SampleKind::Load { offered_pps: rate, step: step as u32 + 1 }, rate / 1e6);
                s.transactions_per_s = Some(t);
                r.samples.push(s);
            }
            let mut s = sample(variant, p.clone(), SampleKind::Max, 2.0);
            s.transactions_per_s = Some(tps[2]);
            r.samples.push(s);
        }
        let charts = sections(&r).remove(0).charts;
        assert_eq!(charts.len(), 1);
        assert_eq!(charts[0].title(), "Application transactions vs load");
        let svg = charts[0].render().into_string();
        assert!(svg.contains(r#"class="vline" data-variant="none""#), "none's half rate");
        assert!(!svg.contains(r#"class="vline" data-variant="xnf""#), "xnf never halves");
        let none = charts::transaction_curve(&r, &p, "none");
        assert_eq!(none.iter().map(|p| (p.x, p.y)).collect::<Vec<_>>(), [(0.0, 20e3), (1.0, 15e3), (2.0, 5e3)], "steps, then the maximum");
    }

    #[test]
    fn three_runs_or_more_get_a_box_plot_of_their_rates() {
        let mut r = results();
        r.summary = vec![summary("kernel", point(64), 1.0), summary("xnf", point(64), 2.0)];
        for (variant, rates) in [("kernel", vec![1.8, 1.0, 1.4, 1.2, 1.6]), ("xnf", vec![2.0, 2.1])] {
            r.samples.extend(rates.into_iter().map(|m| sample(variant, point(64), SampleKind::Max, m)));
        }
        assert_eq!(titles(&r), ["Throughput: Throughput by variant", "Runs: Throughput by run"]);
        let svg = sections(&r)[1].charts[0].render().into_string();
        assert!(svg.contains(r#"class="box" data-variant="kernel""#), "kernel ran 5 times: {svg}");
        assert!(!svg.contains(r#"class="box" data-variant="xnf""#), "xnf ran twice: no box");
        assert!(svg.contains("kernel: median 1.40, quartiles 1.20–1.60, min 1.00, max 1.80 (5 runs)"), "{svg}");
        assert_balanced(&svg);
    }

    #[test]
    fn one_point_gets_a_bar_chart_and_nothing_else() {
        let mut r = results();
        r.summary = vec![summary("kernel", point(64), 1.0), summary("xnf", point(64), 2.0)];
        assert_eq!(titles(&r), ["Throughput: Throughput by variant"]);
        let svg = sections(&r)[0].charts[0].render().into_string();
        assert!(svg.contains(r#"data-variant="kernel""#) && svg.contains(r#"data-variant="xnf""#));
        assert!(svg.contains(">2.00</text>"), "value above the bar: {svg}");
    }

    #[test]
    fn no_data_means_no_charts() {
        assert!(sections(&results()).is_empty());
        assert_balanced(&render(&results()));
    }

    #[test]
    fn every_swept_parameter_gets_its_chart_with_the_others_as_subtitle() {
        let mut r = results();
        for flows in [1u32, 10, 100, 10000] {
            r.summary.push(summary("xnf", point(64).with("flows", flows), 2.0));
        }
        for routes in [0u64, 1000, 100000] {
            r.summary.push(summary("xnf", point(64).with("routes", routes).with("flows", 7u32), 2.0));
        }
        for queues in [1u32, 2, 4] {
            r.summary.push(summary("xnf", point(64).with("queues", queues).with("flows", 8u32), 2.0));
        }
        for netfilter in [false, true] {
            r.summary.push(summary("kernel", point(64).with("netfilter", netfilter).with("flows", 9u32), 1.0));
        }
        let charts: Vec<Chart> = sections(&r).remove(0).charts;
        let got: Vec<(&str, &str)> = charts.iter().map(|c| (c.title(), c.subtitle())).collect();
        assert_eq!(
            got,
            [
                ("Throughput vs flows", "64 B, IPv4"),
                ("Throughput vs route-table size", "64 B, 7 flows, IPv4"),
                ("Throughput vs cores", "64 B, 8 flows, IPv4"),
                ("Throughput vs netfilter ruleset", "64 B, 9 flows, IPv4"),
            ]
        );
        let nf = charts[3].render().into_string();
        assert!(nf.contains(">off</text>") && nf.contains(">on</text>") && nf.contains("<rect"));
        assert!(charts[0].render().into_string().contains(">10k</text>"), "log axis labels");
        assert!(charts[1].render().into_string().contains(">0</text>"), "0 routes on the log axis");
    }

    #[test]
    fn a_chain_length_sweep_is_an_axis_like_any_other() {
        let mut r = results();
        r.experiment = "chain".into();
        r.params = vec![params::size(), params::flows(), params::queues(), params::nfs()];
        for nfs in [1u32, 2, 4] {
            for (v, rate) in [("linux", 0.3), ("xnf", 1.0)] {
                let p = Point::default().with("size", 64u32).with("flows", 1u32).with("queues", 1u32).with("nfs", nfs);
                r.summary.push(summary(v, p, rate / f64::from(nfs)));
            }
        }
        let charts = sections(&r).remove(0).charts;
        let got: Vec<(&str, &str)> = charts.iter().map(|c| (c.title(), c.subtitle())).collect();
        assert_eq!(got, [("Throughput vs chain length", "64 B, 1 flow")]);
        let svg = charts[0].render().into_string();
        assert!(svg.contains(">NFs in the chain</text>") && svg.contains(">4</text>"), "{svg}");
        for line in svg.split("<polyline points=\"").skip(1) {
            assert_eq!(line.split('"').next().unwrap().split(' ').count(), 3, "one point per length: {line}");
        }
        assert!(render(&r).contains("<td>64 B, 1 flow, 2 NFs</td>"));
    }

    #[test]
    fn imix_comes_after_the_fixed_sizes() {
        let r = swept();
        let s = &sweeps(&r)[0];
        assert_eq!(s.values, params::values(&[64u32, 512, 1518, 0]));
        let svg = charts::sweep_chart(&r, s, &Palette::of(&r)).render().into_string();
        let (a, b) = (svg.find(">1518</text>").unwrap(), svg.find(">IMIX</text>").unwrap());
        assert!(a < b);
        assert!(svg.contains(r#"class="separator""#), "IMIX set apart");
        // Four values, IMIX off the line: every polyline has three points.
        for line in svg.split("<polyline points=\"").skip(1) {
            assert_eq!(line.split('"').next().unwrap().split(' ').count(), 3, "{line}");
        }
    }

    #[test]
    fn charts_are_balanced_and_hold_every_variant_in_its_colour() {
        let r = swept();
        let palette = Palette::of(&r);
        assert_ne!(palette.colour("kernel"), palette.colour("xnf"));
        for section in sections(&r) {
            for chart in &section.charts {
                let svg = chart.render().into_string();
                assert_balanced(&svg);
                assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
                if chart.title().contains("by kind") {
                    assert!(svg.contains("softirq") && svg.matches("<polygon").count() == 4, "{svg}");
                    continue;
                }
                for v in ["kernel", "xnf"] {
                    let marks = format!(r#"<g class="series" data-variant="{v}"><polyline"#);
                    assert!(svg.contains(&marks), "{}: no line of {v}", chart.title());
                    assert!(svg.contains(&format!(r#"data-variant="{v}" data-colour="{}""#, palette.colour(v))), "legend of {v}");
                }
            }
        }
        let loss = sections(&r).pop().unwrap().charts.remove(0).render().into_string();
        assert!(loss.contains("xnf (search trials)") && loss.contains(r#"class="vline" data-variant="xnf""#));
        assert!(!loss.contains("kernel (search trials)"));
    }

    #[test]
    fn tables_show_ratios_and_summaries() {
        let mut r = swept();
        r.ratios.push(Ratio { point: point(64), numerator: "xnf".into(), denominator: "kernel".into(), ratio: 2.5 });
        let html = render(&r);
        assert!(html.contains("<td>64 B, 4 flows, IPv4</td>"));
        assert!(html.contains("2.50×"));
        assert!(html.contains("<td class=\"num\">2.000</td>"), "zero-loss column");
        assert_eq!(html.matches("<figure>").count(), 5);
        assert!(!html.contains("<script"), "no script");
        assert!(!html.contains("http://") || html.matches("http://").count() == html.matches("http://www.w3.org/2000/svg").count(), "no fetches");
    }

    #[test]
    fn options_become_rows() {
        assert_eq!(
            option_rows(&serde_json::json!({"a": "x", "b": 2, "c": null})),
            [("a".into(), "x".into()), ("b".into(), "2".into()), ("c".into(), "—".into())]
        );
        assert!(option_rows(&serde_json::Value::Null).is_empty());
    }

    #[test]
    fn default_output_swaps_the_extension() {
        assert_eq!(default_output(Path::new("/tmp/r.json")), Path::new("/tmp/r.html"));
    }
}
