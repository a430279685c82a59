//! `xnf lab report`: one self-contained HTML page (inline CSS and SVG, no
//! script, nothing fetched) from a `--json` results file: the machine and
//! options, ratio and summary tables, and the charts network papers show —
//! throughput against each swept parameter, CPU against offered load, loss
//! against offered rate.

pub mod svg;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};

use crate::engine::results::{median, Point, Results, Sample, SampleKind, Summary};
use svg::{Chart, Layer, Pt, Scale, Series, Slot, Style};

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

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Colour-blind-friendly categorical colours (Tableau 10).
pub(crate) const PALETTE: [&str; 10] = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

/// One colour per variant, the same in every chart: variants in the order
/// they first appear in the summaries, then in the samples.
struct Palette(Vec<String>);

impl Palette {
    fn of(r: &Results) -> Palette {
        let mut names: Vec<String> = Vec::new();
        for v in r.summary.iter().map(|s| &s.variant).chain(r.samples.iter().map(|s| &s.variant)) {
            if !names.contains(v) {
                names.push(v.clone());
            }
        }
        Palette(names)
    }

    fn colour(&self, variant: &str) -> &'static str {
        let i = self.0.iter().position(|v| v == variant).unwrap_or(self.0.len());
        PALETTE[i % PALETTE.len()]
    }

    /// Variants in palette order that satisfy `has`.
    fn variants<'a>(&'a self, has: impl Fn(&str) -> bool + 'a) -> impl Iterator<Item = &'a str> + 'a {
        self.0.iter().map(String::as_str).filter(move |v| has(v))
    }
}

/// A section of the report: a heading and its charts.
pub struct Section {
    pub heading: &'static str,
    pub charts: Vec<Chart>,
}

/// The whole page.
pub fn render(r: &Results) -> String {
    let mut html = String::new();
    let title = format!("xnf lab {} — {}", r.experiment, fmt_date(r.started_unix));
    let _ = write!(html, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n", esc(&title));
    html += &header(r);
    html += &ratio_table(r);
    for section in sections(r) {
        html += &render_section(&section);
    }
    html += &summary_table(r);
    let _ = write!(html, "<footer>Written by <code>xnf lab report</code> (xnf {}).</footer>\n</main>\n</body>\n</html>\n", esc(env!("CARGO_PKG_VERSION")));
    html
}

/// Every chart the results have data for, by section.
pub fn sections(r: &Results) -> Vec<Section> {
    let palette = Palette::of(r);
    let mut throughput: Vec<Chart> = sweeps(&r.summary).iter().map(|s| sweep_chart(s, &palette)).collect();
    if throughput.is_empty() {
        throughput.extend(variant_bars(r, &palette));
    }
    let sections = [
        Section { heading: "Throughput", charts: throughput },
        Section { heading: "CPU vs offered load", charts: cpu_charts(r, &palette) },
        Section { heading: "Loss vs offered rate", charts: loss_charts(r, &palette) },
    ];
    sections.into_iter().filter(|s| !s.charts.is_empty()).collect()
}

fn render_section(s: &Section) -> String {
    let mut out = format!("<section>\n<h2>{}</h2>\n<div class=\"charts\">\n", esc(s.heading));
    for chart in &s.charts {
        let _ = writeln!(out, "<figure>{}</figure>", chart.render());
    }
    out + "</div>\n</section>\n"
}

// ---- header and tables ----

fn header(r: &Results) -> String {
    let m = &r.machine;
    let mut out = format!(
        "<header>\n<h1>xnf lab <span class=\"experiment\">{}</span></h1>\n<p class=\"lede\">{} · {} · {} cores · Linux {}</p>\n</header>\n",
        esc(&r.experiment),
        esc(&fmt_date(r.started_unix)),
        esc(&m.cpu_model),
        m.cores,
        esc(&m.kernel)
    );
    let machine = [
        ("kernel", m.kernel.clone()),
        ("CPU", m.cpu_model.clone()),
        ("cores", m.cores.to_string()),
        ("xnf", m.xnf_version.clone()),
        ("started", fmt_date(r.started_unix)),
    ];
    out += "<section class=\"meta\">\n";
    out += &kv_table("Machine", machine.iter().map(|(k, v)| (k.to_string(), v.clone())));
    out += &kv_table("Options", option_rows(&r.options).into_iter());
    out += "</section>\n";
    if !r.notes.is_empty() {
        out += "<section class=\"notes\">\n<h2>Notes</h2>\n<ul>\n";
        for n in &r.notes {
            let _ = writeln!(out, "<li>{}</li>", esc(n));
        }
        out += "</ul>\n</section>\n";
    }
    out
}

pub(crate) fn kv_table(title: &str, rows: impl Iterator<Item = (String, String)>) -> String {
    let mut out = format!("<div>\n<h2>{}</h2>\n<table class=\"kv\">\n", esc(title));
    for (k, v) in rows {
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(&k), esc(&v));
    }
    out + "</table>\n</div>\n"
}

/// The options as key/value rows: an object's members, or the value itself.
pub(crate) fn option_rows(options: &serde_json::Value) -> Vec<(String, String)> {
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

fn ratio_table(r: &Results) -> String {
    if r.ratios.is_empty() {
        return String::new();
    }
    let palette = Palette::of(r);
    let mut out = String::from("<section>\n<h2>Ratios</h2>\n<table class=\"data\">\n<thead><tr><th>point</th><th>numerator</th><th>denominator</th><th class=\"num\">ratio</th></tr></thead>\n<tbody>\n");
    for q in &r.ratios {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num ratio\">{}×</td></tr>",
            esc(&q.point.label()),
            variant_cell(&q.numerator, &palette),
            variant_cell(&q.denominator, &palette),
            fmt_num(q.ratio, 2)
        );
    }
    out + "</tbody>\n</table>\n</section>\n"
}

fn summary_table(r: &Results) -> String {
    if r.summary.is_empty() {
        return String::new();
    }
    let palette = Palette::of(r);
    let mut out = String::from(
        "<section>\n<h2>Summary</h2>\n<table class=\"data\">\n<thead><tr><th>variant</th><th>point</th><th class=\"num\">runs</th><th class=\"num\">median Mpps</th><th class=\"num\">min Mpps</th><th class=\"num\">max Mpps</th><th class=\"num\">ns/packet</th><th class=\"num\">zero-loss Mpps</th></tr></thead>\n<tbody>\n",
    );
    for s in &r.summary {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            variant_cell(&s.variant, &palette),
            esc(&s.point.label()),
            s.runs,
            fmt_num(s.median_mpps, 3),
            fmt_num(s.min_mpps, 3),
            fmt_num(s.max_mpps, 3),
            fmt_num(s.median_ns_per_packet, 1),
            s.zero_loss_mpps.map_or_else(|| "—".into(), |z| fmt_num(z, 3))
        );
    }
    out + "</tbody>\n</table>\n</section>\n"
}

/// A variant's name after a swatch of its chart colour.
fn variant_cell(variant: &str, palette: &Palette) -> String {
    format!("<span class=\"swatch\" style=\"background:{}\"></span>{}", palette.colour(variant), esc(variant))
}

fn fmt_num(v: f64, decimals: usize) -> String {
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

// ---- throughput against the swept parameters ----

/// A parameter of [`Point`] that an experiment may sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Param {
    Size,
    Flows,
    Routes,
    Queues,
    Ipv6,
    Netfilter,
}

const PARAMS: [Param; 6] = [Param::Size, Param::Flows, Param::Routes, Param::Queues, Param::Ipv6, Param::Netfilter];

impl Param {
    fn get(self, p: &Point) -> u64 {
        match self {
            Param::Size => p.size.into(),
            Param::Flows => p.flows.into(),
            Param::Routes => p.routes,
            Param::Queues => p.queues.into(),
            Param::Ipv6 => p.ipv6.into(),
            Param::Netfilter => p.netfilter.into(),
        }
    }

    /// `p` with this parameter zeroed: the same for every point of one sweep.
    fn cleared(self, p: &Point) -> Point {
        let mut p = p.clone();
        match self {
            Param::Size => p.size = 0,
            Param::Flows => p.flows = 0,
            Param::Routes => p.routes = 0,
            Param::Queues => p.queues = 0,
            Param::Ipv6 => p.ipv6 = false,
            Param::Netfilter => p.netfilter = false,
        }
        p
    }

    fn title(self) -> &'static str {
        match self {
            Param::Size => "Throughput vs packet size",
            Param::Flows => "Throughput vs flows",
            Param::Routes => "Throughput vs route-table size",
            Param::Queues => "Throughput vs cores",
            Param::Ipv6 => "Throughput, IPv4 vs IPv6",
            Param::Netfilter => "Throughput without and with netfilter",
        }
    }

    fn axis_label(self) -> &'static str {
        match self {
            Param::Size => "frame size on the wire (bytes, FCS included)",
            Param::Flows => "flows (log scale)",
            Param::Routes => "routes in the table (log scale)",
            Param::Queues => "queues = generator CPUs",
            Param::Ipv6 => "IP version",
            Param::Netfilter => "netfilter ruleset",
        }
    }

    /// On/off parameters are drawn as grouped bars, the others as lines.
    fn is_binary(self) -> bool {
        matches!(self, Param::Ipv6 | Param::Netfilter)
    }

    fn value_label(self, v: u64) -> String {
        match (self, v) {
            (Param::Size, 0) => "IMIX".into(),
            (Param::Ipv6, 0) => "IPv4".into(),
            (Param::Ipv6, _) => "IPv6".into(),
            (Param::Netfilter, 0) => "off".into(),
            (Param::Netfilter, _) => "on".into(),
            _ => v.to_string(),
        }
    }

    /// Sort key: IMIX (size 0) after every fixed size.
    fn order(self, v: u64) -> (bool, u64) {
        (self == Param::Size && v == 0, v)
    }
}

/// The parameters held fixed during a sweep of `skip`, as a subtitle.
fn fixed_label(p: &Point, skip: Param) -> String {
    let mut parts = Vec::new();
    if skip != Param::Size {
        parts.push(if p.size == 0 { "IMIX".to_string() } else { format!("{} B", p.size) });
    }
    if skip != Param::Flows {
        parts.push(format!("{} flow{}", p.flows, if p.flows == 1 { "" } else { "s" }));
    }
    if skip != Param::Ipv6 {
        parts.push(if p.ipv6 { "IPv6" } else { "IPv4" }.into());
    }
    if skip != Param::Routes && p.routes > 0 {
        parts.push(format!("{} routes", p.routes));
    }
    if skip != Param::Queues && p.queues > 1 {
        parts.push(format!("{} queues", p.queues));
    }
    if skip != Param::Netfilter && p.netfilter {
        parts.push("netfilter".into());
    }
    parts.join(", ")
}

/// Summaries that differ in one parameter only, with more than one value of it.
struct Sweep<'a> {
    param: Param,
    fixed: Point,
    values: Vec<u64>,
    summaries: Vec<&'a Summary>,
}

fn sweeps(summary: &[Summary]) -> Vec<Sweep<'_>> {
    let mut out = Vec::new();
    for param in PARAMS {
        let mut groups: Vec<Sweep> = Vec::new();
        for s in summary {
            let fixed = param.cleared(&s.point);
            let i = groups.iter().position(|g| g.fixed == fixed).unwrap_or_else(|| {
                groups.push(Sweep { param, fixed, values: Vec::new(), summaries: Vec::new() });
                groups.len() - 1
            });
            let g = &mut groups[i];
            g.summaries.push(s);
            let v = param.get(&s.point);
            if !g.values.contains(&v) {
                g.values.push(v);
            }
        }
        for mut g in groups.into_iter().filter(|g| g.values.len() > 1) {
            g.values.sort_by_key(|v| param.order(*v));
            out.push(g);
        }
    }
    out
}

fn mpps_axis(max: f64) -> Scale {
    Scale::linear(0.0, max.max(0.01))
}

fn sweep_chart(sweep: &Sweep, palette: &Palette) -> Chart {
    let param = sweep.param;
    let max = sweep.summaries.iter().map(|s| s.max_mpps.max(s.median_mpps).max(s.zero_loss_mpps.unwrap_or(0.0))).fold(0.0, f64::max);
    let labels: Vec<String> = sweep.values.iter().map(|v| param.value_label(*v)).collect();
    let x = match param {
        Param::Size | Param::Ipv6 | Param::Netfilter => Scale::band(labels),
        Param::Flows | Param::Routes => Scale::log(&sweep.values.iter().map(|v| *v as f64).collect::<Vec<_>>()),
        Param::Queues => Scale::linear_int(0.0, *sweep.values.iter().max().unwrap_or(&1) as f64),
    };
    let subtitle = fixed_label(&sweep.fixed, param);
    let mut chart = Chart::new(param.title(), &subtitle, x, param.axis_label(), mpps_axis(max), "forwarded (Mpps)");
    let xval = |v: u64| match param {
        Param::Size | Param::Ipv6 | Param::Netfilter => sweep.values.iter().position(|w| *w == v).unwrap_or(0) as f64,
        _ => v as f64,
    };
    let imix_x = (param == Param::Size && sweep.values.len() > 1 && sweep.values.contains(&0)).then(|| xval(0));
    if let Some(x) = imix_x {
        chart.separator(x - 0.5);
    }
    let variants: Vec<&str> = palette.variants(|v| sweep.summaries.iter().any(|s| s.variant == v)).collect();
    for (i, variant) in variants.iter().enumerate() {
        let of: Vec<&&Summary> = sweep.summaries.iter().filter(|s| s.variant == *variant).collect();
        let mut rate: Vec<Pt> = of.iter().map(|s| Pt::range(xval(param.get(&s.point)), s.median_mpps, s.min_mpps, s.max_mpps)).collect();
        rate.sort_by(|a, b| a.x.total_cmp(&b.x));
        let mut zero: Vec<Pt> = of.iter().filter_map(|s| s.zero_loss_mpps.map(|z| Pt::new(xval(param.get(&s.point)), z))).collect();
        zero.sort_by(|a, b| a.x.total_cmp(&b.x));
        let colour = palette.colour(variant);
        if param.is_binary() {
            let slot = Slot { index: i, of: variants.len(), faded: false };
            chart.bars(&Series { label: variant.to_string(), variant, colour, style: Style::Line, points: rate }, slot, true);
            continue;
        }
        let dodge = (i as f64 - (variants.len() as f64 - 1.0) / 2.0) * 4.0;
        for (style, label, points) in [(Style::Line, variant.to_string(), rate), (Style::Dashed, format!("{variant} zero-loss"), zero)] {
            // IMIX is no size on the axis: its marker stands apart from the line.
            let (sizes, imix): (Vec<Pt>, Vec<Pt>) = points.into_iter().partition(|p| Some(p.x) != imix_x);
            for points in [sizes, imix].into_iter().filter(|p| !p.is_empty()) {
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
    let mut chart = Chart::new("Throughput by variant", &point.label(), Scale::band(labels), "variant", mpps_axis(max), "forwarded (Mpps)");
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
            chart.bars(&Series { label: format!("{variant} zero-loss"), variant, colour, style: Style::Line, points: zero }, Slot { index: 1, of, faded: true }, false);
        }
    }
    Some(chart)
}

// ---- CPU and loss against offered load ----

/// The x of a sample in the load charts: for a load step the rate the
/// generator actually sent (on veth it shares its CPU with the receivers,
/// so near the top it sends less than asked); for a search trial the rate
/// the search asked for.
fn offered_pps(s: &Sample) -> Option<f64> {
    match s.kind {
        SampleKind::Load { .. } => Some(s.sent as f64 / s.seconds.max(1e-9)),
        SampleKind::Search { offered_pps } => Some(offered_pps),
        SampleKind::Max => None,
    }
}

/// Softirq time summed over CPUs: on veth, the receive side (dut + sink)
/// while the generator's own loop shows as system time.
fn softirq_pct(s: &Sample) -> f64 {
    s.cpus.iter().map(|c| c.softirq_pct).sum()
}

fn is_load(s: &Sample) -> bool {
    matches!(s.kind, SampleKind::Load { .. })
}

fn is_search(s: &Sample) -> bool {
    matches!(s.kind, SampleKind::Search { .. })
}

/// The points some sample passing `keep` was taken at, in first-seen order.
fn points_with(r: &Results, keep: impl Fn(&Sample) -> bool) -> Vec<&Point> {
    let mut out: Vec<&Point> = Vec::new();
    for s in r.samples.iter().filter(|s| keep(s)) {
        if !out.contains(&&s.point) {
            out.push(&s.point);
        }
    }
    out
}

/// `f` of the samples, grouped by offered rate: x = offered Mpps, y = the
/// median, with min and max as the range.
fn per_offered_rate(samples: &[&Sample], f: impl Fn(&Sample) -> f64) -> Vec<Pt> {
    let mut by_rate: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for s in samples {
        if let Some(o) = offered_pps(s) {
            by_rate.entry(o.round() as u64).or_default().push(f(s));
        }
    }
    by_rate
        .into_iter()
        .map(|(pps, mut ys)| {
            let lo = ys.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            Pt::range(pps as f64 / 1e6, median(&mut ys), lo, hi)
        })
        .collect()
}

fn samples_at<'a>(r: &'a Results, point: &Point, variant: &str, keep: fn(&Sample) -> bool) -> Vec<&'a Sample> {
    r.samples.iter().filter(|s| keep(s) && &s.point == point && s.variant == variant).collect()
}

fn offered_axis(samples: &[&Sample]) -> Scale {
    let max = samples.iter().filter_map(|s| offered_pps(s)).fold(0.0, f64::max) / 1e6;
    Scale::linear(0.0, max.max(0.001))
}

fn cpu_charts(r: &Results, palette: &Palette) -> Vec<Chart> {
    let mut charts = Vec::new();
    for point in points_with(r, is_load) {
        let load: Vec<&Sample> = r.samples.iter().filter(|s| is_load(s) && &s.point == point).collect();
        let max = load.iter().map(|s| softirq_pct(s)).fold(100.0, f64::max);
        let y = Scale::linear(0.0, max);
        let mut chart = Chart::new("Receive-side CPU (softirq) vs offered load", &point.label(), offered_axis(&load), "offered load, as sent (Mpps)", y, "softirq CPU (%, summed over CPUs)");
        let variants: Vec<&str> = palette.variants(|v| load.iter().any(|s| s.variant == v)).collect();
        for variant in &variants {
            let points = per_offered_rate(&samples_at(r, point, variant, is_load), softirq_pct);
            chart.series(&Series { label: variant.to_string(), variant, colour: palette.colour(variant), style: Style::Line, points }, 0.0);
        }
        charts.push(chart);
        charts.extend(variants.iter().filter_map(|v| cpu_kind_chart(r, point, v)));
    }
    charts
}

/// Neutral shades for kinds of CPU time, apart from the variants' colours.
const CPU_KINDS: [(&str, &str); 4] = [("softirq", "#34495e"), ("system", "#7f8fa6"), ("user", "#b8c4d2"), ("other (irq, steal)", "#e1e6ec")];

/// Mean CPU time by kind (summed over CPUs) against offered load, stacked.
fn cpu_kind_chart(r: &Results, point: &Point, variant: &str) -> Option<Chart> {
    let load = samples_at(r, point, variant, is_load);
    let kinds = |s: &Sample| {
        let sum = |f: fn(&crate::engine::results::CpuShare) -> f64| s.cpus.iter().map(f).sum::<f64>();
        let (soft, sys, user) = (sum(|c| c.softirq_pct), sum(|c| c.system_pct), sum(|c| c.user_pct));
        [soft, sys, user, (s.cpu_busy_pct() - soft - sys - user).max(0.0)]
    };
    let mut by_rate: BTreeMap<u64, Vec<[f64; 4]>> = BTreeMap::new();
    for s in &load {
        by_rate.entry(offered_pps(s)?.round() as u64).or_default().push(kinds(s));
    }
    if by_rate.len() < 2 || by_rate.values().flatten().all(|k| k[..3].iter().all(|v| *v == 0.0)) {
        return None;
    }
    let xs: Vec<f64> = by_rate.keys().map(|pps| *pps as f64 / 1e6).collect();
    let means: Vec<[f64; 4]> = by_rate.values().map(|ks| mean_of(ks)).collect();
    let max = means.iter().map(|m| m.iter().sum::<f64>()).fold(100.0, f64::max);
    let title = format!("CPU time by kind: {variant}");
    let mut chart = Chart::new(&title, &point.label(), offered_axis(&load), "offered load (Mpps)", Scale::linear(0.0, max), "CPU (%, summed over CPUs)");
    let layers: Vec<Layer> = CPU_KINDS.iter().enumerate().map(|(k, (label, colour))| Layer { label, colour, ys: means.iter().map(|m| m[k]).collect() }).collect();
    chart.stack(&xs, &layers);
    Some(chart)
}

fn mean_of(ks: &[[f64; 4]]) -> [f64; 4] {
    let mut m = [0.0; 4];
    for k in ks {
        for (acc, v) in m.iter_mut().zip(k) {
            *acc += v / ks.len() as f64;
        }
    }
    m
}

fn loss_charts(r: &Results, palette: &Palette) -> Vec<Chart> {
    let mut charts = Vec::new();
    for point in points_with(r, |s| is_load(s) || is_search(s)) {
        let at: Vec<&Sample> = r.samples.iter().filter(|s| (is_load(s) || is_search(s)) && &s.point == point).collect();
        let lo = at.iter().map(|s| s.loss_pct).fold(0.0, f64::min);
        let hi = at.iter().map(|s| s.loss_pct).fold(1.0, f64::max);
        let mut chart = Chart::new("Loss vs offered rate", &point.label(), offered_axis(&at), "offered rate (Mpps)", Scale::linear(lo, hi), "loss (%)");
        for variant in palette.variants(|v| at.iter().any(|s| s.variant == v)) {
            add_loss_series(&mut chart, r, point, variant, palette.colour(variant));
        }
        charts.push(chart);
    }
    charts
}

/// A variant's loss at fixed loads (line), its search trials (hollow
/// markers) and the zero-loss rate the search found (dashed vertical line).
fn add_loss_series(chart: &mut Chart, r: &Results, point: &Point, variant: &str, colour: &str) {
    let load = per_offered_rate(&samples_at(r, point, variant, is_load), |s| s.loss_pct);
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

pub(crate) const CSS: &str = r#"
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
footer { margin-top: 32px; color: #8c959f; font-size: 12px; }
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::results::{CpuShare, Loss, Machine, Ratio};

    fn point(size: u32) -> Point {
        Point { size, flows: 4, queues: 1, ..Point::default() }
    }

    /// Built through serde so fields added to the schema later get their defaults.
    fn sample(variant: &str, point: Point, kind: SampleKind, mpps: f64) -> Sample {
        let offered = match kind {
            SampleKind::Load { offered_pps } | SampleKind::Search { offered_pps } => offered_pps / 1e6,
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

    fn results() -> Results {
        serde_json::from_value(serde_json::json!({
            "experiment": "router", "machine": Machine::default(), "started_unix": 1_700_000_000u64,
            "options": {"runs": 3, "ipv6": false}, "samples": [], "summary": [], "ratios": [],
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
            for offered in [0.5e6, 1e6, 2e6, 3e6] {
                r.samples.push(sample(variant, point(64), SampleKind::Load { offered_pps: offered }, (offered / 1e6).min(cap)));
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
    fn assert_balanced(xml: &str) {
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
        assert_eq!(esc(r#"<a href="x">Tom & 'Jerry'</a>"#), "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;");
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
    fn one_point_gets_a_bar_chart_and_nothing_else() {
        let mut r = results();
        r.summary = vec![summary("kernel", point(64), 1.0), summary("xnf", point(64), 2.0)];
        assert_eq!(titles(&r), ["Throughput: Throughput by variant"]);
        let svg = sections(&r)[0].charts[0].render();
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
        for flows in [1, 10, 100, 10000] {
            r.summary.push(summary("xnf", Point { flows, ..point(64) }, 2.0));
        }
        for routes in [0, 1000, 100000] {
            r.summary.push(summary("xnf", Point { routes, flows: 7, ..point(64) }, 2.0));
        }
        for queues in [1, 2, 4] {
            r.summary.push(summary("xnf", Point { queues, flows: 8, ..point(64) }, 2.0));
        }
        for netfilter in [false, true] {
            r.summary.push(summary("kernel", Point { netfilter, flows: 9, ..point(64) }, 1.0));
        }
        let charts: Vec<Chart> = sections(&r).remove(0).charts;
        let got: Vec<(&str, &str)> = charts.iter().map(|c| (c.title(), c.subtitle())).collect();
        assert_eq!(
            got,
            [
                ("Throughput vs flows", "64 B, IPv4"),
                ("Throughput vs route-table size", "64 B, 7 flows, IPv4"),
                ("Throughput vs cores", "64 B, 8 flows, IPv4"),
                ("Throughput without and with netfilter", "64 B, 9 flows, IPv4"),
            ]
        );
        let nf = charts[3].render();
        assert!(nf.contains(">off</text>") && nf.contains(">on</text>") && nf.contains("<rect"));
        assert!(charts[0].render().contains(">10k</text>"), "log axis labels");
        assert!(charts[1].render().contains(">0</text>"), "0 routes on the log axis");
    }

    #[test]
    fn imix_comes_after_the_fixed_sizes() {
        let r = swept();
        let s = &sweeps(&r.summary)[0];
        assert_eq!(s.values, [64, 512, 1518, 0]);
        let svg = sweep_chart(s, &Palette::of(&r)).render();
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
                let svg = chart.render();
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
        let loss = sections(&r).pop().unwrap().charts.remove(0).render();
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
        assert_eq!(option_rows(&serde_json::json!({"a": "x", "b": 2, "c": null})), [("a".into(), "x".into()), ("b".into(), "2".into()), ("c".into(), "—".into())]);
        assert!(option_rows(&serde_json::Value::Null).is_empty());
    }

    #[test]
    fn default_output_swaps_the_extension() {
        assert_eq!(default_output(Path::new("/tmp/r.json")), Path::new("/tmp/r.html"));
    }
}
