//! SVG charts for the lab report: scales with round ticks, axes, grid,
//! lines with error bars, markers, grouped and stacked bars, stacked areas
//! and a legend. Marks are drawn in plot-area coordinates (origin at the plot's
//! top-left corner) and the area is placed once the legend's height is
//! known. Written with maud, which escapes every text and attribute; every
//! element is closed explicitly (`<circle ...></circle>`), as SVG inside
//! HTML needs.

use maud::{html, Markup};

/// Width of every chart (SVG user units = CSS pixels at 100 %).
pub const WIDTH: f64 = 600.0;
const LEFT: f64 = 66.0;
const RIGHT: f64 = 22.0;
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
const PLOT_H: f64 = 230.0;
const BOTTOM: f64 = 52.0;
const LEGEND_ROW: f64 = 18.0;
/// Rough advance of one character of legend text (12 px sans-serif).
const CHAR_W: f64 = 6.8;

/// A step of 1, 2 or 5 times a power of ten giving about `target` steps over `span`.
pub fn nice_step(span: f64, target: usize) -> f64 {
    let raw = span / target.max(1) as f64;
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let m = [1.0, 2.0, 5.0, 10.0].into_iter().find(|m| m * mag >= raw * (1.0 - 1e-9)).unwrap_or(10.0);
    m * mag
}

/// Round ticks covering `lo..=hi`: the first at or below `lo`, the last at or above `hi`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let (lo, hi) = widen(lo, hi);
    let step = nice_step(hi - lo, target);
    let first = (lo / step + 1e-9).floor() as i64;
    let last = (hi / step - 1e-9).ceil() as i64;
    (first..=last).map(|i| clean(i as f64 * step)).collect()
}

/// A non-empty range: equal or inverted bounds become a small interval.
fn widen(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo {
        (lo, hi)
    } else if lo == 0.0 {
        (0.0, 1.0)
    } else {
        (lo - lo.abs() * 0.1, lo + lo.abs() * 0.1)
    }
}

/// Removes floating-point noise such as 0.30000000000000004 and -0.
fn clean(v: f64) -> f64 {
    let r = (v * 1e9).round() / 1e9;
    if r == 0.0 {
        0.0
    } else {
        r
    }
}

/// A tick label with as many decimals as the step needs.
pub fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10()).ceil().clamp(0.0, 6.0) as usize };
    format!("{:.*}", decimals, clean(v))
}

/// 1, 20, 500, 1k, 10k, 2.5M: short labels for a logarithmic axis.
pub fn fmt_si(v: f64) -> String {
    let (scaled, unit) = if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = format!("{scaled:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{unit}")
}

/// How data values map onto an axis.
#[derive(Clone, Debug, PartialEq)]
pub enum Scale {
    /// `lo..=hi` with ticks every `step`.
    Linear { lo: f64, hi: f64, step: f64 },
    /// Decades `10^lo_exp..=10^hi_exp`; with `zero`, one more decade below
    /// stands for 0 (labelled "0"), so a sweep from 0 routes still fits.
    Log { lo_exp: i32, hi_exp: i32, zero: bool },
    /// Evenly spaced categories; the data value is the category's index.
    Band { labels: Vec<String> },
}

impl Scale {
    /// A linear scale with round ends covering `lo..=hi`.
    pub fn linear(lo: f64, hi: f64) -> Scale {
        let ticks = nice_ticks(lo, hi, 5);
        let step = ticks.get(1).map_or(1.0, |t| t - ticks[0]);
        Scale::Linear { lo: ticks[0], hi: *ticks.last().unwrap(), step }
    }

    /// A linear scale with whole-number ticks (queues, cores).
    pub fn linear_int(lo: f64, hi: f64) -> Scale {
        match Scale::linear(lo, hi) {
            Scale::Linear { step, .. } if step < 1.0 => {
                let (lo, hi) = widen(lo.floor(), hi.ceil());
                Scale::Linear { lo, hi, step: 1.0 }
            }
            s => s,
        }
    }

    /// A logarithmic scale over whole decades covering `values` (zero and
    /// negative values sit on the "0" decade below the smallest positive one).
    pub fn log(values: &[f64]) -> Scale {
        let pos: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0 && v.is_finite()).collect();
        let min = pos.iter().copied().fold(f64::INFINITY, f64::min);
        let max = pos.iter().copied().fold(0.0, f64::max);
        let (lo_exp, mut hi_exp) = if pos.is_empty() { (0, 1) } else { (min.log10().floor() as i32, max.log10().ceil() as i32) };
        if hi_exp <= lo_exp {
            hi_exp = lo_exp + 1;
        }
        Scale::Log { lo_exp, hi_exp, zero: values.iter().any(|v| *v <= 0.0) }
    }

    pub fn band(labels: Vec<String>) -> Scale {
        Scale::Band { labels }
    }

    /// Where `v` lies along the axis, 0 at the start and 1 at the end.
    pub fn frac(&self, v: f64) -> f64 {
        match self {
            Scale::Linear { lo, hi, .. } => (v - lo) / (hi - lo),
            Scale::Log { lo_exp, hi_exp, zero } => {
                let start = f64::from(*lo_exp - i32::from(*zero));
                if v <= 0.0 {
                    0.0
                } else {
                    (v.log10() - start) / (f64::from(*hi_exp) - start)
                }
            }
            Scale::Band { labels } => (v + 0.5) / labels.len().max(1) as f64,
        }
    }

    /// The ticks as (value, label).
    pub fn ticks(&self) -> Vec<(f64, String)> {
        match self {
            Scale::Linear { lo, hi, step } => {
                let n = ((hi - lo) / step).round() as i64;
                (0..=n).map(|i| clean(lo + i as f64 * step)).map(|v| (v, fmt_tick(v, *step))).collect()
            }
            Scale::Log { lo_exp, hi_exp, zero } => log_ticks(*lo_exp, *hi_exp, *zero),
            Scale::Band { labels } => labels.iter().enumerate().map(|(i, l)| (i as f64, l.clone())).collect(),
        }
    }

    /// The width of one category as a fraction of the axis (bands only).
    fn band_frac(&self) -> f64 {
        match self {
            Scale::Band { labels } => 1.0 / labels.len().max(1) as f64,
            _ => 0.0,
        }
    }
}

/// Decades, with 2 and 5 between them when the axis spans at most two decades.
fn log_ticks(lo_exp: i32, hi_exp: i32, zero: bool) -> Vec<(f64, String)> {
    let mut ticks = Vec::new();
    if zero {
        ticks.push((0.0, "0".to_string()));
    }
    let between: &[f64] = if hi_exp - lo_exp <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    for e in lo_exp..=hi_exp {
        for m in between {
            let v = m * 10f64.powi(e);
            if v <= 10f64.powi(hi_exp) * (1.0 + 1e-9) {
                ticks.push((v, fmt_si(v)));
            }
        }
    }
    ticks
}

/// A value with an optional range (drawn as an error bar) at `x`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pt {
    pub x: f64,
    pub y: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Pt {
    pub fn new(x: f64, y: f64) -> Pt {
        Pt { x, y, lo: y, hi: y }
    }
    pub fn range(x: f64, y: f64, lo: f64, hi: f64) -> Pt {
        Pt { x, y, lo, hi }
    }
}

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Solid line through filled markers, with error bars.
    Line,
    /// Dashed line through small markers (a derived quantity).
    Dashed,
    /// Hollow markers only (individual trials).
    Hollow,
    /// A smooth line without markers (a density curve).
    Curve,
}

/// A legend entry's symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Swatch {
    Line,
    Dashed,
    Hollow,
    Box,
    FadedBox,
}

struct LegendItem {
    label: String,
    colour: String,
    swatch: Swatch,
    /// Emitted as `data-variant` so tools (and tests) can find each variant.
    variant: Option<String>,
}

/// One named series of points in one colour.
pub struct Series<'a> {
    pub label: String,
    pub variant: &'a str,
    pub colour: &'a str,
    pub style: Style,
    pub points: Vec<Pt>,
}

/// Where a series' bars stand among the side-by-side bars of a category.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    pub index: usize,
    pub of: usize,
    /// Lighter, for a second quantity of the same variant.
    pub faded: bool,
}

/// One layer of a stacked area chart.
pub struct Layer<'a> {
    pub label: &'a str,
    pub colour: &'a str,
    pub ys: Vec<f64>,
}

/// A chart being built: marks are appended, then `render` lays it out.
pub struct Chart {
    title: String,
    subtitle: String,
    x: Scale,
    y: Scale,
    x_label: String,
    y_label: String,
    legend: Vec<LegendItem>,
    marks: Vec<Markup>,
}

impl Chart {
    pub fn new(title: &str, subtitle: &str, x: Scale, x_label: &str, y: Scale, y_label: &str) -> Chart {
        Chart { title: title.into(), subtitle: subtitle.into(), x, y, x_label: x_label.into(), y_label: y_label.into(), legend: Vec::new(), marks: Vec::new() }
    }

    #[cfg(test)]
    pub fn title(&self) -> &str {
        &self.title
    }

    #[cfg(test)]
    pub fn subtitle(&self) -> &str {
        &self.subtitle
    }

    fn px(&self, x: f64) -> f64 {
        self.x.frac(x) * PLOT_W
    }

    fn py(&self, y: f64) -> f64 {
        (1.0 - self.y.frac(y)) * PLOT_H
    }

    /// A series as a line (when it has two points or more), error bars and
    /// markers, shifted `dodge` pixels sideways so error bars of series at
    /// the same x stay apart.
    pub fn series(&mut self, s: &Series, dodge: f64) {
        let pts: Vec<(f64, Pt)> = s.points.iter().filter(|p| p.y.is_finite()).map(|p| (self.px(p.x) + dodge, *p)).collect();
        let line =
            (s.style != Style::Hollow && pts.len() > 1).then(|| pts.iter().map(|(x, p)| format!("{x:.1},{:.1}", self.py(p.y))).collect::<Vec<_>>().join(" "));
        let dash = (s.style == Style::Dashed).then_some("6 4");
        let marks = html! {
            @if s.style != Style::Curve {
                @for (x, p) in &pts {
                    (self.error_bar(*x, p, s.colour))
                    (self.marker(*x, self.py(p.y), s.colour, s.style))
                }
            }
        };
        self.marks.push(html! {
            g class="series" data-variant=(s.variant) {
                @if let Some(points) = line {
                    polyline points=(points) fill="none" stroke=(s.colour) stroke-width="2.2" stroke-dasharray=[dash] {}
                }
                (marks)
            }
        });
        let swatch = match s.style {
            Style::Line | Style::Curve => Swatch::Line,
            Style::Dashed => Swatch::Dashed,
            Style::Hollow => Swatch::Hollow,
        };
        self.legend(&s.label, s.colour, swatch, Some(s.variant));
    }

    fn error_bar(&self, x: f64, p: &Pt, colour: &str) -> Markup {
        if !(p.lo.is_finite() && p.hi.is_finite()) || (self.py(p.lo) - self.py(p.hi)).abs() < 1.0 {
            return html! {};
        }
        let (y0, y1) = (self.py(p.lo), self.py(p.hi));
        let d = format!("M{x:.1},{y0:.1}V{y1:.1}M{:.1},{y0:.1}h8M{:.1},{y1:.1}h8", x - 4.0, x - 4.0);
        html! { path d=(d) stroke=(colour) stroke-width="1.4" fill="none" {} }
    }

    fn marker(&self, x: f64, y: f64, colour: &str, style: Style) -> Markup {
        match style {
            Style::Line => html! { circle cx=(f1(x)) cy=(f1(y)) r="4" fill=(colour) {} },
            Style::Dashed => html! { rect x=(f1(x - 3.0)) y=(f1(y - 3.0)) width="6" height="6" fill=(colour) {} },
            Style::Hollow => html! { circle cx=(f1(x)) cy=(f1(y)) r="4" fill="#fff" stroke=(colour) stroke-width="1.6" {} },
            Style::Curve => html! {},
        }
    }

    /// One bar per category in `slot` of the side-by-side bars, with
    /// min-max error bars and the value above each bar; in the legend
    /// under the series' label when `legend`.
    pub fn bars(&mut self, s: &Series, slot: Slot, legend: bool) {
        let band = self.x.band_frac() * PLOT_W;
        let width = band * 0.78 / slot.of.max(1) as f64;
        let fill = if slot.faded { lighten(s.colour) } else { s.colour.to_string() };
        let bars = html! {
            @for p in s.points.iter().filter(|p| p.y.is_finite()) {
                @let x = self.px(p.x) - band * 0.39 + width * slot.index as f64;
                @let (top, base) = (self.py(p.y.max(0.0)), self.py(0.0));
                @let centre = x + width / 2.0;
                rect x=(f1(x + 1.0)) y=(f1(top)) width=(f1(width - 2.0)) height=(f1(base - top)) fill=(fill) {}
                (self.error_bar(centre, p, "#333"))
                text class="value" x=(f1(centre)) y=(f1(self.py(p.hi.max(p.y)) - 5.0)) text-anchor="middle" { (fmt_value(p.y)) }
            }
        };
        self.marks.push(html! { g class="bars" data-variant=(s.variant) { (bars) } });
        if legend {
            self.legend_box(&s.label, s.colour, slot.faded, Some(s.variant));
        }
    }

    /// A box plot at category `x`, in `slot` of the category's side-by-side
    /// boxes: whiskers from min to max, the box from the first to the third
    /// quartile, a line at the median, and every run as a dot beside it.
    pub fn box_plot(&mut self, x: f64, slot: Slot, variant: &str, colour: &str, runs: &[f64]) {
        let Some(q) = quartiles(runs) else { return };
        let band = self.x.band_frac() * PLOT_W;
        let width = band * 0.78 / slot.of.max(1) as f64;
        let centre = self.px(x) - band * 0.39 + width * (slot.index as f64 + 0.4);
        let w = (width * 0.55).min(60.0);
        let (lo, q1, med, q3, hi) = (self.py(q[0]), self.py(q[1]), self.py(q[2]), self.py(q[3]), self.py(q[4]));
        let whiskers = format!(
            "M{centre:.1},{lo:.1}V{q1:.1}M{centre:.1},{q3:.1}V{hi:.1}M{:.1},{lo:.1}h{:.1}M{:.1},{hi:.1}h{:.1}",
            centre - w / 4.0,
            w / 2.0,
            centre - w / 4.0,
            w / 2.0
        );
        let tip = format!(
            "{variant}: median {}, quartiles {}–{}, min {}, max {} ({} runs)",
            fmt_value(q[2]),
            fmt_value(q[1]),
            fmt_value(q[3]),
            fmt_value(q[0]),
            fmt_value(q[4]),
            runs.len()
        );
        self.marks.push(html! {
            g class="box" data-variant=(variant) {
                title { (tip) }
                path d=(whiskers) stroke=(colour) stroke-width="1.4" fill="none" {}
                rect x=(f1(centre - w / 2.0)) y=(f1(q3)) width=(f1(w)) height=(f1((q1 - q3).max(1.0))) fill=(lighten(colour)) stroke=(colour) stroke-width="1.4" {}
                path d=(format!("M{:.1},{med:.1}h{w:.1}", centre - w / 2.0)) stroke=(colour) stroke-width="2.4" {}
                @for y in runs {
                    circle cx=(f1(centre + w / 2.0 + 6.0)) cy=(f1(self.py(*y))) r="2.5" fill=(colour) {}
                }
            }
        });
    }

    /// Bars of two parts per category in `slot`: `s`'s values at the bottom in its colour, `upper`'s (by category,
    /// as `s`'s points) stacked on them lighter; the total above each bar, both parts in its tooltip
    /// (`what` names them); in the legend under the series' label.
    pub fn stacked_bars(&mut self, s: &Series, upper: &[f64], slot: Slot, what: [&str; 2]) {
        let band = self.x.band_frac() * PLOT_W;
        let width = band * 0.78 / slot.of.max(1) as f64;
        let light = lighten(s.colour);
        let bars = html! {
            @for (p, u) in s.points.iter().zip(upper).filter(|(p, u)| p.y.is_finite() && u.is_finite()) {
                @let x = self.px(p.x) - band * 0.39 + width * slot.index as f64;
                @let (base, mid, top) = (self.py(0.0), self.py(p.y.max(0.0)), self.py((p.y + u).max(0.0)));
                @let centre = x + width / 2.0;
                g class="stack" {
                    title { (format!("{}: {} {}, {} {}, {} in all", s.label, fmt_value(p.y), what[0], fmt_value(*u), what[1], fmt_value(p.y + u))) }
                    rect x=(f1(x + 1.0)) y=(f1(mid)) width=(f1(width - 2.0)) height=(f1(base - mid)) fill=(s.colour) data-part=(what[0]) {}
                    rect x=(f1(x + 1.0)) y=(f1(top)) width=(f1(width - 2.0)) height=(f1(mid - top)) fill=(light) data-part=(what[1]) {}
                    text class="value" x=(f1(centre)) y=(f1(top - 5.0)) text-anchor="middle" { (fmt_value(p.y + u)) }
                }
            }
        };
        self.marks.push(html! { g class="bars" data-variant=(s.variant) { (bars) } });
        self.legend_box(&s.label, s.colour, false, Some(s.variant));
    }

    /// A legend entry for bars of `colour` (`faded` like faded bars).
    pub fn legend_box(&mut self, label: &str, colour: &str, faded: bool, variant: Option<&str>) {
        self.legend(label, colour, if faded { Swatch::FadedBox } else { Swatch::Box }, variant);
    }

    /// Stacked areas over `xs`, first layer at the bottom.
    pub fn stack(&mut self, xs: &[f64], layers: &[Layer]) {
        let mut base = vec![0.0; xs.len()];
        for layer in layers {
            let top: Vec<f64> = base.iter().zip(&layer.ys).map(|(b, y)| b + y).collect();
            let upper = xs.iter().zip(&top).map(|(x, y)| format!("{:.1},{:.1}", self.px(*x), self.py(*y)));
            let lower = xs.iter().zip(&base).rev().map(|(x, y)| format!("{:.1},{:.1}", self.px(*x), self.py(*y)));
            let points: Vec<String> = upper.chain(lower).collect();
            self.marks.push(html! { polygon points=(points.join(" ")) fill=(layer.colour) stroke="#fff" stroke-width="0.8" {} });
            self.legend(layer.label, layer.colour, Swatch::Box, None);
            base = top;
        }
    }

    /// A dashed vertical line across the plot at `x` (a threshold).
    pub fn vline(&mut self, x: f64, colour: &str, label: &str, variant: &str) {
        let px = f1(self.px(x));
        self.marks.push(html! {
            line class="vline" data-variant=(variant) x1=(px) x2=(px) y1="0" y2=(PLOT_H) stroke=(colour) stroke-width="1.6" stroke-dasharray="3 3" {}
        });
        self.legend(label, colour, Swatch::Dashed, Some(variant));
    }

    /// A light vertical rule at `x` setting apart what follows it.
    pub fn separator(&mut self, x: f64) {
        let px = f1(self.px(x));
        self.marks.push(html! { line class="separator" x1=(px) x2=(px) y1="0" y2=(PLOT_H) stroke="#c9d1d9" stroke-dasharray="2 3" {} });
    }

    fn legend(&mut self, label: &str, colour: &str, swatch: Swatch, variant: Option<&str>) {
        if !self.legend.iter().any(|l| l.label == label) {
            self.legend.push(LegendItem { label: label.into(), colour: colour.into(), swatch, variant: variant.map(String::from) });
        }
    }

    /// The finished `<svg>` element.
    pub fn render(&self) -> Markup {
        let (legend, legend_h) = self.render_legend();
        let top = self.header_height() + legend_h + 12.0;
        let height = top + PLOT_H + BOTTOM;
        let (cx, cy) = (LEFT + PLOT_W / 2.0, top + PLOT_H / 2.0);
        html! {
            svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {height}")) width=(WIDTH) height=(height) role="img" aria-label=(self.title) {
                text class="title" x=(LEFT) y="20" { (self.title) }
                @if !self.subtitle.is_empty() {
                    text class="subtitle" x=(LEFT) y="38" { (self.subtitle) }
                }
                g transform=(format!("translate(0,{:.1})", self.header_height())) { (legend) }
                g transform=(format!("translate({LEFT},{top:.1})")) {
                    (self.grid_and_axes())
                    @for m in &self.marks { (m) }
                }
                text class="axis" x=(f1(cx)) y=(f1(top + PLOT_H + 44.0)) text-anchor="middle" { (self.x_label) }
                text class="axis" transform=(format!("translate(16,{cy:.1}) rotate(-90)")) text-anchor="middle" { (self.y_label) }
            }
        }
    }

    fn header_height(&self) -> f64 {
        if self.subtitle.is_empty() {
            30.0
        } else {
            48.0
        }
    }

    /// Legend items in rows that fit the chart's width, and the rows' height.
    fn render_legend(&self) -> (Markup, f64) {
        let (mut x, mut y) = (LEFT, 0.0);
        let mut items = Vec::new();
        for item in &self.legend {
            let w = 30.0 + item.label.chars().count() as f64 * CHAR_W + 18.0;
            if x > LEFT && x + w > WIDTH - RIGHT {
                x = LEFT;
                y += LEGEND_ROW;
            }
            items.push(legend_item(item, x, y));
            x += w;
        }
        let rows = if self.legend.is_empty() { 0.0 } else { y + LEGEND_ROW };
        (html! { @for i in &items { (i) } }, rows)
    }

    /// Horizontal grid at the y ticks, both axes, tick marks and tick labels.
    fn grid_and_axes(&self) -> Markup {
        html! {
            @for (v, label) in self.y.ticks() {
                @let y = self.py(v);
                line x1="0" x2=(PLOT_W) y1=(f1(y)) y2=(f1(y)) stroke="#e6e6e6" {}
                text class="tick" x="-8" y=(f1(y + 4.0)) text-anchor="end" { (label) }
            }
            @for (v, label) in self.x.ticks() {
                @let x = f1(self.px(v));
                line x1=(x) x2=(x) y1=(PLOT_H) y2=(PLOT_H + 5.0) stroke="#555" {}
                text class="tick" x=(x) y=(PLOT_H + 19.0) text-anchor="middle" { (label) }
            }
            path d=(format!("M0,0V{PLOT_H}H{PLOT_W}")) fill="none" stroke="#555" {}
        }
    }
}

/// A coordinate with one decimal.
fn f1(v: f64) -> String {
    format!("{v:.1}")
}

fn legend_item(item: &LegendItem, x: f64, y: f64) -> Markup {
    let c = item.colour.as_str();
    let mid = y + 9.0;
    let symbol = match item.swatch {
        Swatch::Line => html! {
            line x1=(f1(x)) x2=(f1(x + 24.0)) y1=(f1(mid)) y2=(f1(mid)) stroke=(c) stroke-width="2.2" {}
            circle cx=(f1(x + 12.0)) cy=(f1(mid)) r="4" fill=(c) {}
        },
        Swatch::Dashed => html! { line x1=(f1(x)) x2=(f1(x + 24.0)) y1=(f1(mid)) y2=(f1(mid)) stroke=(c) stroke-width="2.2" stroke-dasharray="5 3" {} },
        Swatch::Hollow => html! { circle cx=(f1(x + 12.0)) cy=(f1(mid)) r="4" fill="#fff" stroke=(c) stroke-width="1.6" {} },
        Swatch::Box => html! { rect x=(f1(x + 5.0)) y=(f1(mid - 6.0)) width="14" height="12" fill=(c) {} },
        Swatch::FadedBox => html! { rect x=(f1(x + 5.0)) y=(f1(mid - 6.0)) width="14" height="12" fill=(lighten(c)) {} },
    };
    let colour = item.variant.as_ref().map(|_| c);
    html! {
        g class="legend" data-variant=[item.variant.as_deref()] data-colour=[colour] {
            (symbol)
            text class="legend-label" x=(f1(x + 30.0)) y=(f1(mid + 4.0)) { (item.label) }
        }
    }
}

/// `#rrggbb` mixed 60 % towards white (other colours are returned as they are).
/// Min, first quartile, median, third quartile, max (quartiles by
/// linear interpolation between order statistics); None without values.
pub fn quartiles(values: &[f64]) -> Option<[f64; 5]> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = q * (v.len() - 1) as f64;
        let (lo, hi) = (i.floor() as usize, i.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (i - lo as f64)
    };
    (!v.is_empty()).then(|| [at(0.0), at(0.25), at(0.5), at(0.75), at(1.0)])
}

pub fn lighten(colour: &str) -> String {
    let hex = colour.strip_prefix('#').filter(|h| h.len() == 6 && h.chars().all(|c| c.is_ascii_hexdigit()));
    let Some(hex) = hex else { return colour.to_string() };
    let channel = |i: usize| {
        let c = f64::from(u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0));
        (c + (255.0 - c) * 0.6).round() as u8
    };
    format!("#{:02x}{:02x}{:02x}", channel(0), channel(2), channel(4))
}

/// A rate for a label: three significant digits.
pub fn fmt_value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate_between_order_statistics() {
        assert_eq!(quartiles(&[3.0, 1.0, 2.0]), Some([1.0, 1.5, 2.0, 2.5, 3.0]));
        assert_eq!(quartiles(&[4.0]), Some([4.0; 5]));
        assert_eq!(quartiles(&[f64::NAN]), None);
        assert_eq!(quartiles(&[]), None);
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(nice_ticks(0.0, 9.3, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(nice_ticks(0.0, 1.0, 5), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(nice_ticks(0.0, 0.3, 5), vec![0.0, 0.1, 0.2, 0.3]);
        assert_eq!(nice_ticks(0.0, 430.0, 5), vec![0.0, 100.0, 200.0, 300.0, 400.0, 500.0]);
        assert_eq!(nice_ticks(3.0, 3.0, 5).first(), Some(&2.6), "a single value gets a small range");
        assert_eq!(nice_ticks(0.0, 0.0, 5), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(nice_step(12.0, 5), 5.0);
        assert_eq!(nice_step(f64::NAN, 5), 1.0);
    }

    #[test]
    fn tick_labels_have_the_decimals_the_step_needs() {
        assert_eq!(fmt_tick(0.30000000000000004, 0.1), "0.3");
        assert_eq!(fmt_tick(2.0, 0.5), "2.0");
        assert_eq!(fmt_tick(200.0, 100.0), "200");
        assert_eq!(fmt_tick(-0.0, 1.0), "0");
        assert_eq!(fmt_si(1.0), "1");
        assert_eq!(fmt_si(2500.0), "2.5k");
        assert_eq!(fmt_si(10000.0), "10k");
        assert_eq!(fmt_si(1e6), "1M");
    }

    #[test]
    fn scales_map_their_ends_to_0_and_1() {
        let s = Scale::linear(0.0, 9.3);
        assert_eq!((s.frac(0.0), s.frac(10.0)), (0.0, 1.0));
        let labels: Vec<String> = Scale::linear_int(1.0, 4.0).ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["1", "2", "3", "4"], "queues get whole-number ticks");
        let log = Scale::log(&[1.0, 10.0, 100.0, 10000.0]);
        assert_eq!(log, Scale::Log { lo_exp: 0, hi_exp: 4, zero: false });
        assert_eq!((log.frac(1.0), log.frac(100.0), log.frac(10000.0)), (0.0, 0.5, 1.0));
        let labels: Vec<String> = log.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["1", "10", "100", "1k", "10k"]);
        let zero = Scale::log(&[0.0, 1000.0, 100000.0]);
        assert_eq!(zero, Scale::Log { lo_exp: 3, hi_exp: 5, zero: true });
        assert_eq!(zero.frac(0.0), 0.0);
        assert_eq!(zero.ticks()[0], (0.0, "0".to_string()));
        let few = Scale::log(&[1.0, 8.0]);
        let labels: Vec<String> = few.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["1", "2", "5", "10"], "a single decade gets 2 and 5 between");
        let band = Scale::band(vec!["64".into(), "IMIX".into()]);
        assert_eq!((band.frac(0.0), band.frac(1.0)), (0.25, 0.75));
    }

    #[test]
    fn lighten_mixes_towards_white() {
        assert_eq!(lighten("#000000"), "#999999");
        assert_eq!(lighten("#ffffff"), "#ffffff");
        assert_eq!(lighten("red"), "red");
    }

    #[test]
    fn legend_wraps_into_rows() {
        let mut c = Chart::new("t", "", Scale::linear(0.0, 1.0), "x", Scale::linear(0.0, 1.0), "y");
        for i in 0..12 {
            c.legend(&format!("a rather long series name {i}"), "#000", Swatch::Line, None);
        }
        let (_, h) = c.render_legend();
        assert!(h >= 4.0 * LEGEND_ROW, "{h}");
    }
}
