//! The report's HTML, written with maud (which escapes every text and
//! attribute): the page around any results — machine, options, notes — and
//! the ratio and summary tables of an experiment's results. The latency
//! report uses the same page.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::engine::results::{Machine, Results};

use super::charts::Section;
use super::data::Palette;

/// What heads every page.
pub struct Head<'a> {
    pub experiment: &'a str,
    pub started_unix: u64,
    pub machine: &'a Machine,
    /// The options as given (an object's members become rows).
    pub options: &'a serde_json::Value,
    pub notes: &'a [String],
}

/// A whole page: head, `body`, footer. Self-contained: inline CSS, no
/// script, nothing fetched.
pub fn page(h: &Head, body: Markup) -> String {
    let m = h.machine;
    let date = fmt_date(h.started_unix);
    let machine =
        [("kernel", m.kernel.clone()), ("CPU", m.cpu_model.clone()), ("cores", m.cores.to_string()), ("xnf", m.xnf_version.clone()), ("started", date.clone())];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "xnf lab " (h.experiment) " — " (date) }
                // A constant of this file: nothing in it comes from the results.
                style { (PreEscaped(CSS)) }
            }
            body {
                main {
                    header {
                        h1 { "xnf lab " span class="experiment" { (h.experiment) } }
                        p class="lede" { (date) " · " (m.cpu_model) " · " (m.cores) " cores · Linux " (m.kernel) }
                    }
                    section class="meta" {
                        (kv_table("Machine", machine.iter().map(|(k, v)| (k.to_string(), v.clone()))))
                        (kv_table("Options", option_rows(h.options).into_iter()))
                    }
                    @if !h.notes.is_empty() {
                        section class="notes" {
                            h2 { "Notes" }
                            ul { @for n in h.notes { li { (n) } } }
                        }
                    }
                    (body)
                    footer { "Written by " code { "xnf lab report" } " (xnf " (env!("CARGO_PKG_VERSION")) ")." }
                }
            }
        }
    }
    .into_string()
}

/// A titled table of key/value rows.
pub fn kv_table(title: &str, rows: impl Iterator<Item = (String, String)>) -> Markup {
    html! {
        div {
            h2 { (title) }
            table class="kv" { @for (k, v) in rows { tr { th { (k) } td { (v) } } } }
        }
    }
}

/// The options as key/value rows: an object's members, or the value itself.
pub fn option_rows(options: &serde_json::Value) -> Vec<(String, String)> {
    let show = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "—".into(),
        v => v.to_string(),
    };
    match options {
        serde_json::Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), show(v))).collect(),
        serde_json::Value::Null => Vec::new(),
        v => vec![("options".into(), show(v))],
    }
}

/// A section of charts.
pub fn charts(s: &Section) -> Markup {
    html! {
        section {
            h2 { (s.heading) }
            div class="charts" { @for c in &s.charts { figure { (c.render()) } } }
        }
    }
}

/// The results of a throughput experiment: ratios, charts, summary.
pub fn results(r: &Results, sections: &[Section]) -> String {
    let body = html! {
        (ratio_table(r))
        (rtt_table(r))
        (super::disrupt::section(r))
        (super::cost::section(r))
        @for s in sections { (charts(s)) }
        (summary_table(r))
        (super::profiles::section(r))
    };
    page(&Head { experiment: &r.experiment, started_unix: r.started_unix, machine: &r.machine, options: &r.options, notes: &r.notes }, body)
}

fn ratio_table(r: &Results) -> Markup {
    let palette = Palette::of(r);
    html! {
        @if !r.ratios.is_empty() {
            section {
                h2 { "Ratios" }
                table class="data" {
                    thead { tr { th { "point" } th { "numerator" } th { "denominator" } th class="num" { "ratio" } } }
                    tbody {
                        @for q in &r.ratios {
                            tr {
                                td { (r.label(&q.point)) }
                                td { (variant_cell(&q.numerator, &palette)) }
                                td { (variant_cell(&q.denominator, &palette)) }
                                td class="num ratio" { (fmt_num(q.ratio, 2)) "×" }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn summary_table(r: &Results) -> Markup {
    let palette = Palette::of(r);
    let heads = ["runs", "median Mpps", "min Mpps", "max Mpps", "sd Mpps", "Gbit/s", "ns/packet", "dut ns/packet", "zero-loss Mpps"];
    let opt = |v: Option<f64>, digits: usize| v.map_or_else(|| "—".into(), |x| fmt_num(x, digits));
    html! {
        @if !r.summary.is_empty() {
            section {
                h2 { "Summary" }
                table class="data" {
                    thead { tr { th { "variant" } th { "point" } @for h in heads { th class="num" { (h) } } } }
                    tbody {
                        @for s in &r.summary {
                            tr {
                                td { (variant_cell(&s.variant, &palette)) }
                                td { (r.label(&s.point)) }
                                td class="num" { (s.runs) }
                                td class="num" { (fmt_num(s.median_mpps, 3)) }
                                td class="num" { (fmt_num(s.min_mpps, 3)) }
                                td class="num" { (fmt_num(s.max_mpps, 3)) }
                                td class="num" { (opt(s.stddev_mpps, 3)) }
                                td class="num" { (opt(s.median_gbps, 2)) }
                                td class="num" { (fmt_num(s.median_ns_per_packet, 1)) }
                                td class="num" { (opt(s.median_dut_ns_per_packet, 1)) }
                                td class="num" { (s.zero_loss_mpps.map_or_else(|| "—".into(), |z| fmt_num(z, 3))) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `xnf lab fwd-latency`'s round-trip times (its `details.rtt`), if any.
fn rtt_table(r: &Results) -> Markup {
    let palette = Palette::of(r);
    let rows = crate::experiments::fwdlatency::rows(r);
    let heads = ["offered Mpps", "background Mpps", "median µs", "p99 µs", "p99.9 µs", "mean µs", "std µs", "lost / sent"];
    html! {
        @if !rows.is_empty() {
            section {
                h2 { "Round-trip time through the forwarder" }
                table class="data" {
                    thead { tr { th { "variant" } th { "point" } th { "load" } @for h in heads { th class="num" { (h) } } } }
                    tbody {
                        @for x in &rows {
                            tr {
                                td { (variant_cell(&x.variant, &palette)) }
                                td { (r.label(&x.point)) }
                                td { (x.load) }
                                td class="num" { (x.offered_pps.map_or_else(|| "full".into(), |o| fmt_num(o / 1e6, 3))) }
                                td class="num" { (fmt_num(x.background_mpps, 3)) }
                                @for v in [x.rtt_us.median, x.rtt_us.p99, x.rtt_us.p999, x.rtt_us.mean, x.rtt_us.std] { td class="num" { (fmt_num(v, 1)) } }
                                td class="num" { (x.lost) " / " (x.sent) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A variant's name after a swatch of its chart colour.
pub(super) fn variant_cell(variant: &str, palette: &Palette) -> Markup {
    html! { span class="swatch" style=(format!("background:{}", palette.colour(variant))) {} (variant) }
}

pub(super) fn fmt_num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "—".into()
    }
}

/// "2024-05-01 12:34 UTC" (days to civil date after H. Hinnant's algorithm).
pub fn fmt_date(unix: u64) -> String {
    let days = (unix / 86400) as i64;
    let secs = unix % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", secs / 3600, secs / 60 % 60)
}

pub const CSS: &str = r#"
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #f6f7f9; color: #1f2328; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 24px 40px; }
header h1 { margin: 0; font-size: 26px; font-weight: 650; letter-spacing: -0.01em; }
header .experiment { color: #0969da; }
.lede { margin: 4px 0 18px; color: #57606a; }
h2 { font-size: 17px; font-weight: 620; margin: 26px 0 10px; }
section.meta { display: flex; flex-wrap: wrap; gap: 16px 48px; }
section.meta h2 { margin-top: 4px; }
table { border-collapse: collapse; background: #fff; border: 1px solid #d8dee4; border-radius: 6px; }
th, td { padding: 5px 12px; text-align: left; border-bottom: 1px solid #eaeef2; vertical-align: top; }
table.kv th { color: #57606a; font-weight: 500; }
table.data thead th { background: #f0f3f6; font-weight: 600; font-size: 13px; }
table.data tbody tr:nth-child(even) { background: #fafbfc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.ratio { font-weight: 600; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 7px; vertical-align: baseline; }
.notes ul { margin: 0; padding-left: 20px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; }
figure { margin: 0; background: #fff; border: 1px solid #d8dee4; border-radius: 6px; padding: 10px 8px 4px; }
svg.chart { display: block; width: 100%; height: auto; max-width: 600px; margin: 0 auto; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; fill: #1f2328; font-size: 11px; }
svg .title { font-size: 15px; font-weight: 600; }
svg .subtitle { font-size: 12px; fill: #57606a; }
svg .legend-label { font-size: 12px; }
svg .axis { font-size: 12px; fill: #3d444d; }
svg .tick { fill: #57606a; }
svg .value { font-size: 11px; font-weight: 600; }
h3 { font-size: 15px; font-weight: 600; margin: 20px 0 8px; }
.explain { color: #57606a; max-width: 980px; }
.scroll { overflow-x: auto; }
td.dash { color: #8c959f; }
section.profiles td, section.profiles th { white-space: nowrap; padding: 5px 7px; }
section.profiles .swatch.stage { display: block; margin: 0 0 3px auto; }
section.profiles td.top { font-size: 12px; line-height: 1.3; }
figure.wide { max-width: 800px; }
svg.chart.hbars { max-width: 760px; }
details.flame { margin: 8px 0; background: #fff; border: 1px solid #d8dee4; border-radius: 6px; padding: 6px 10px; }
details.flame summary { cursor: pointer; font-weight: 600; }
details.flame svg { display: block; width: 100%; height: auto; margin-top: 8px; }
details.flame svg text { font-family: monospace; font-size: 11px; fill: #000; }
footer { margin-top: 32px; color: #8c959f; font-size: 12px; }
"#;
