//! `xnf lab cost` in the report: ns per frame by test run, per variant
//! and point (median, min, max), the differences between variants, and ns
//! per frame against the rule-set size — drawn in ns, not as the rate the
//! generic charts would show (its samples' Mpps are 1000 / ns).

use maud::{html, Markup};

use super::charts::Section;
use super::data::Palette;
use super::html::{fmt_num, variant_cell};
use super::svg::{Chart, Pt, Scale, Series, Style};
use crate::engine::params::Value;
use crate::engine::results::Results;
use crate::experiments::cost::summary::{differences, rows, Row};

/// The results are `xnf lab cost`'s.
pub fn is_cost(r: &Results) -> bool {
    r.experiment == <crate::experiments::cost::Cost as crate::engine::driver::Experiment>::NAME
}

/// The tables of costs and differences, if the results are cost's.
pub fn section(r: &Results) -> Markup {
    if !is_cost(r) {
        return html! {};
    }
    let palette = Palette::of(r);
    let rows = rows(r);
    let diffs = differences(&rows);
    html! {
        section {
            h2 { "Cost per frame (BPF_PROG_TEST_RUN)" }
            p { "The kernel's mean ns per run of each program over the same frame, millions of runs per call, on one CPU: the program alone (no driver, no real traffic). Median (min–max) over the calls; variants alternated." }
            table class="data" {
                thead { tr { th { "variant" } th { "point" } th { "program" } th class="num" { "calls" } th class="num" { "median ns" } th class="num" { "min ns" } th class="num" { "max ns" } } }
                tbody {
                    @for x in &rows {
                        tr {
                            td { (variant_cell(&x.variant, &palette)) }
                            td { (r.label(&x.point)) }
                            td { code { (x.program) } }
                            td class="num" { (x.runs) }
                            td class="num" { (fmt_num(x.median_ns, 0)) }
                            td class="num" { (fmt_num(x.min_ns, 0)) }
                            td class="num" { (fmt_num(x.max_ns, 0)) }
                        }
                    }
                }
            }
            @if !diffs.is_empty() {
                h2 { "Differences" }
                table class="data" {
                    thead { tr { th { "point" } th { "a" } th { "b" } th class="num" { "a − b" } th class="num" { "a / b" } } }
                    tbody {
                        @for d in &diffs {
                            tr {
                                td { (r.label(&d.point)) }
                                td { (variant_cell(&d.a, &palette)) }
                                td { (variant_cell(&d.b, &palette)) }
                                td class="num" { (format!("{:+.0} ns", d.diff_ns)) }
                                td class="num ratio" { (fmt_num(d.ratio, 2)) "×" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// ns per frame against the rule-set size, one chart per frame, when
/// more than one size was measured.
pub fn sections(r: &Results) -> Vec<Section> {
    let palette = Palette::of(r);
    let rows = rows(r);
    let mut fixed: Vec<_> = Vec::new();
    for x in &rows {
        let f = x.point.without("rules");
        if !fixed.contains(&f) {
            fixed.push(f);
        }
    }
    let charts: Vec<Chart> = fixed
        .iter()
        .filter_map(|f| {
            let of: Vec<&Row> = rows.iter().filter(|x| x.point.without("rules") == *f).collect();
            let mut sizes: Vec<f64> = of.iter().filter_map(|x| x.point.get("rules").and_then(Value::number)).collect();
            sizes.sort_by(f64::total_cmp);
            sizes.dedup();
            (sizes.len() > 1).then(|| chart(r, &r.label(f), &of, &sizes, &palette))
        })
        .collect();
    if charts.is_empty() {
        return Vec::new();
    }
    vec![Section { heading: "Cost per frame vs rules", charts }]
}

fn chart(r: &Results, subtitle: &str, of: &[&Row], sizes: &[f64], palette: &Palette) -> Chart {
    let max = of.iter().map(|x| x.max_ns).fold(0.0, f64::max);
    let title = "ns per frame vs rule-set size";
    let axis = r.param("rules").map_or("rules", |p| p.axis.as_str());
    let mut c = Chart::new(title, subtitle, Scale::log(sizes), axis, Scale::linear(0.0, max.max(1.0)), "ns per frame (test run)");
    let variants: Vec<&str> = palette.variants(|v| of.iter().any(|x| x.variant == v)).collect();
    for (i, v) in variants.iter().enumerate() {
        let mut points: Vec<Pt> =
            of.iter().filter(|x| x.variant == *v).filter_map(|x| Some(Pt::range(x.point.get("rules")?.number()?, x.median_ns, x.min_ns, x.max_ns))).collect();
        points.sort_by(|a, b| a.x.total_cmp(&b.x));
        let dodge = (i as f64 - (variants.len() as f64 - 1.0) / 2.0) * 4.0;
        c.series(&Series { label: v.to_string(), variant: v, colour: palette.colour(v), style: Style::Line, points }, dodge);
    }
    c
}

#[cfg(test)]
mod tests {
    use crate::engine::results::Results;
    use crate::experiments::cost::summary::{finish, Call};

    fn results() -> Results {
        let mut r = Results::new("cost", &serde_json::json!({}), Vec::new());
        let mut calls = Vec::new();
        for (variant, ns) in [("empty", 9), ("xnf", 31), ("xdp-filter", 14)] {
            for rules in [1u32, 10] {
                let point = crate::engine::params::Point::default().with("rules", rules).with("frame", "flood");
                calls.push(Call {
                    variant: variant.into(),
                    point,
                    run: 0,
                    prog_id: 1,
                    prog_name: "p<1>".into(),
                    verdict: "drop".into(),
                    repeat: 10,
                    ns,
                    wall_s: 0.0,
                });
            }
        }
        r.samples = calls.iter().map(Call::sample).collect();
        r.summarize(&[]);
        finish(&mut r, &calls, 1).unwrap();
        r
    }

    #[test]
    fn costs_and_differences_are_tabled_and_drawn_in_ns() {
        let html = super::super::render(&results());
        crate::report::tests::assert_balanced(&html);
        assert!(html.contains("Cost per frame (BPF_PROG_TEST_RUN)") && html.contains("+17 ns") && html.contains("p&lt;1&gt;"), "{html}");
        assert!(html.contains("ns per frame vs rule-set size") && !html.contains("Throughput vs"), "drawn in ns, not as a rate");
        assert!(!super::super::render(&crate::report::tests::results()).contains("Cost per frame"));
    }
}
