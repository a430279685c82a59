//! "Where the time went": the report's section for results of `--profile`
//! (one [`ProfiledRun`] per profiled interval) — the terminal's table (rate,
//! the profiler's overhead, NET_RX softirq ns per packet by stage, the
//! hottest functions), the stages stacked per full-speed interval, the
//! drops by reason and the flame graphs `--flame` wrote, inline.

use std::path::Path;

use maud::{html, Markup, PreEscaped};

use crate::engine::profiling::ProfiledRun;
use crate::engine::results::Results;

use super::charts::{stage_bars, STAGE_COLOURS};
use super::data::Palette;
use super::html::{fmt_num, variant_cell};

/// The section, or nothing without profiles.
pub fn section(r: &Results) -> Markup {
    if r.profiles.is_empty() {
        return html! {};
    }
    html! {
        section class="profiles" {
            h2 { "Where the time went (xnf profile)" }
            p class="explain" {
                "Each interval measured again with " code { "xnf profile" } " attached (all CPUs, stacks sampled). "
                "Overhead: the fall in rate at full speed, the rise in CPU per packet at a load step, against the unprofiled twin. "
                "Offered: Mpps at a load step, max at full speed; Mpps: received with the profiler. Stages: NET_RX softirq ns per packet received; “-” where only counts were taken (" code { "--profile counts" } ")."
            }
            (table(r))
            @if let Some(chart) = stage_bars(r) {
                h3 { "Time per packet by stage" }
                figure class="wide" { (chart) }
            }
            (drops(r))
            (flames(r))
            (lost(r))
        }
    }
}

/// One row per profiled interval, as the terminal prints them.
fn table(r: &Results) -> Markup {
    let palette = Palette::of(r);
    let stages = xnf_profile::model::STAGES;
    html! {
        div class="scroll" {
            table class="data" {
                thead {
                    tr {
                        th { "variant" } th { "point" } th class="num" { "run" } th class="num" { "offered" }
                        th class="num" { "Mpps" } th class="num" { "overhead" }
                        @for ((name, _), colour) in stages.iter().zip(STAGE_COLOURS) {
                            th class="num" { span class="swatch stage" style=(format!("background:{colour}")) {} (name) }
                        }
                        th class="num" { "softirq" } th class="num" { "XDP" } th { "top functions (self %)" }
                    }
                }
                tbody {
                    @for p in &r.profiles {
                        tr {
                            td { (variant_cell(&p.variant, &palette)) }
                            td { (r.label(&p.point)) }
                            td class="num" { (p.run + 1) }
                            td class="num" { (p.offered_pps.map_or_else(|| "max".into(), |o| fmt_num(o / 1e6, 3))) }
                            td class="num" { (fmt_num(p.profiled_mpps, 3)) }
                            td class="num" { (fmt_num(p.overhead_pct(), 1)) " %" }
                            @for (name, _) in stages {
                                // Counting only, no stage is measured.
                                @if p.profile.counts_only { td class="num dash" { "-" } } @else { td class="num" { (fmt_num(p.stage(name), 0)) } }
                            }
                            td class="num" { (fmt_num(p.stage("softirq"), 0)) }
                            @match p.xdp_ns_per_packet {
                                // Programs are timed only with --prog-stats.
                                Some(x) => td class="num" { (fmt_num(x, 0)) },
                                None => td class="num dash" { "-" },
                            }
                            td class="top" { @for (i, (name, pct)) in p.top.iter().take(3).enumerate() { @if i > 0 { br; } (name) " " (fmt_num(*pct, 0)) } }
                        }
                    }
                }
            }
        }
    }
}

/// Each profile's three commonest drops.
fn drops(r: &Results) -> Markup {
    let palette = Palette::of(r);
    let rows: Vec<(&ProfiledRun, &xnf_profile::model::Drop)> = r.profiles.iter().flat_map(|p| p.profile.drops.iter().take(3).map(move |d| (p, d))).collect();
    html! {
        @if !rows.is_empty() {
            h3 { "Drops by reason" }
            table class="data" {
                thead { tr { th { "variant" } th { "point" } th class="num" { "run" } th class="num" { "count" } th { "reason" } th { "location" } } }
                tbody {
                    @for (p, d) in rows {
                        tr {
                            td { (variant_cell(&p.variant, &palette)) }
                            td { (r.label(&p.point)) }
                            td class="num" { (p.run + 1) }
                            td class="num" { (d.count) }
                            td { code { (d.reason) } }
                            td { code { (d.location) } }
                        }
                    }
                }
            }
        }
    }
}

/// The flame graphs `--flame` wrote, each folded away; a path that no
/// longer holds one is named as text.
fn flames(r: &Results) -> Markup {
    let with: Vec<(&ProfiledRun, &str)> = r.profiles.iter().filter_map(|p| Some((p, p.flame.as_deref()?))).collect();
    html! {
        @if !with.is_empty() {
            h3 { "Flame graphs" }
            @for (p, path) in with {
                @let what = format!("{} run {} flame graph", p.variant, p.run + 1);
                @let at = format!("{}, {}", r.label(&p.point), p.offered_pps.map_or_else(|| "full speed".into(), |o| format!("{} Mpps offered", fmt_num(o / 1e6, 3))));
                @match flame_svg(Path::new(path)) {
                    Ok(svg) => {
                        details class="flame" {
                            summary { (what) " — " (at) }
                            // Our own SVG (xnf_profile::flame), its text escaped when written.
                            div class="flame-graph" { (PreEscaped(svg)) }
                        }
                    }
                    Err(why) => {
                        p class="flame missing" { (what) " — " (at) ": " code { (path) } " (" (why) ")" }
                    }
                }
            }
        }
    }
}

/// The flame graph at `path` without any XML prolog or doctype, ready to
/// stand inside HTML; an error says why not ("not found").
fn flame_svg(path: &Path) -> Result<String, &'static str> {
    let text = std::fs::read_to_string(path).map_err(|e| if e.kind() == std::io::ErrorKind::NotFound { "not found" } else { "not readable" })?;
    let mut rest = text.trim_start();
    while rest.starts_with("<?") || rest.starts_with("<!DOCTYPE") || rest.starts_with("<!--") {
        let end = if rest.starts_with("<!--") { rest.find("-->").map(|i| i + 3) } else { rest.find('>').map(|i| i + 1) };
        rest = rest[end.ok_or("not an SVG")?..].trim_start();
    }
    // Only what xnf_profile::flame writes: an SVG without script.
    let lower = rest.to_ascii_lowercase();
    if !lower.starts_with("<svg") || lower.contains("<script") || lower.contains("<foreignobject") {
        return Err("not an SVG flame graph");
    }
    Ok(rest.trim_end().to_string())
}

/// What the profiler could not record, when anything.
fn lost(r: &Results) -> Markup {
    let l = |f: fn(&xnf_profile::model::Lost) -> u64| r.profiles.iter().map(|p| f(&p.profile.lost)).sum::<u64>();
    let (packets, stacks, devices, drops) = (l(|x| x.packets), l(|x| x.stacks), l(|x| x.devices), l(|x| x.drops));
    html! {
        @if packets + stacks + devices + drops > 0 {
            p class="explain" { "The profiler lost, over all intervals: " (packets) " packet records, " (stacks) " stacks, " (devices) " devices, " (drops) " drop entries." }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use xnf_profile::model::{Drop, Profile};

    use super::*;
    use crate::engine::params::Point;
    use crate::report::render;
    use crate::report::tests::{assert_balanced, results};

    fn point() -> Point {
        Point::default().with("size", 64u32).with("flows", 4u32).with("ipv6", false).with("routes", 0u64).with("queues", 1u32).with("netfilter", false)
    }

    /// Built through serde so fields added to the schema later get their defaults.
    fn run(variant: &str, counts_only: bool, stages: &[(&str, f64)], flame: Option<&str>) -> ProfiledRun {
        let drops = vec![Drop { reason: "NETFILTER_DROP".into(), location: "nf_hook_slow".into(), count: 1234 }];
        let profile = Profile { counts_only, drops, ..Default::default() };
        serde_json::from_value(json!({
            "variant": variant, "point": point(), "run": 0, "offered_pps": null,
            "mpps": 1.0, "profiled_mpps": 0.9, "ns_per_packet": 1000.0, "profiled_ns_per_packet": 1100.0,
            "packets": 1_000_000u64, "stages": stages, "xdp_ns_per_packet": 12.0,
            "top": [["fib_table_lookup", 9.5], ["ip_forward", 4.0], ["<memcpy>", 3.0], ["fourth", 1.0]],
            "flame": flame, "profile": profile,
        }))
        .unwrap()
    }

    fn profiled(flame: Option<&str>) -> Results {
        let mut r = results();
        let kernel =
            [("driver", 120.0), ("gro", 30.0), ("ip-rcv", 80.0), ("route", 40.0), ("local", 0.0), ("forward", 90.0), ("xmit", 60.0), ("softirq", 420.0)];
        r.profiles.push(run("kernel", false, &kernel, flame));
        r.profiles.push(run("xnf", true, &[("softirq", 150.0)], None));
        r
    }

    #[test]
    fn profiles_get_their_section_with_stages_drops_and_dashes() {
        let html = render(&profiled(None));
        assert!(html.contains("Where the time went (xnf profile)"));
        for (stage, _) in xnf_profile::model::STAGES {
            assert!(html.contains(&format!("{stage}</th>")), "no column {stage}");
        }
        assert_eq!(html.matches(r#"<td class="num dash">-</td>"#).count(), 7, "the counts-only row's stages");
        assert!(html.contains("<td class=\"num\">120</td>") && html.contains("<td class=\"num\">420</td>"), "kernel's driver stage and softirq total");
        assert!(html.contains("fib_table_lookup 10<br>ip_forward 4<br>&lt;memcpy&gt; 3</td>") && !html.contains("fourth"), "top 3, escaped");
        assert!(html.contains("10.0 %"), "overhead");
        assert!(html.contains("NETFILTER_DROP") && html.contains("nf_hook_slow") && html.contains("<td class=\"num\">1234</td>"));
        // The chart: the kernel's full-speed interval only (xnf counted only).
        let chart = stage_bars(&profiled(None)).unwrap().into_string();
        assert_eq!(chart.matches(r#"<g class="bar""#).count(), 1);
        assert!(chart.contains(&format!(r#"fill="{}" data-stage="driver""#, STAGE_COLOURS[0])));
        assert!(!chart.contains(r#"data-stage="local""#), "a zero stage has no segment");
        assert!(!chart.contains("other softirq"), "the stages account for the softirq time");
        assert!(chart.contains(">420</text>"), "the total at the bar's end");
        assert_balanced(&html);
    }

    #[test]
    fn no_profiles_no_section() {
        let html = render(&results());
        assert!(!html.contains("Where the time went") && !html.contains("class=\"profiles\""));
        let mut counted = results();
        counted.profiles.push(run("xnf", true, &[("softirq", 150.0)], None));
        assert!(stage_bars(&counted).is_none(), "no bar without stages");
        assert!(!render(&counted).contains("<svg class=\"chart hbars\""));
    }

    #[test]
    fn flame_graphs_are_embedded_or_named_missing() {
        let dir = std::env::temp_dir().join(format!("xnf-report-flame-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("kernel-run1.svg");
        std::fs::write(
            &file,
            "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\"><g><title>a&lt;b</title><rect x=\"0\"/></g></svg>\n",
        )
        .unwrap();
        let html = render(&profiled(Some(file.to_str().unwrap())));
        assert!(html.contains("<summary>kernel run 1 flame graph"), "{html}");
        assert!(html.contains("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\"><g><title>a&lt;b</title>"));
        assert!(!html.contains("<?xml"), "prolog stripped");
        assert_balanced(&html);

        std::fs::write(&file, "<svg><script>alert(1)</script></svg>").unwrap();
        assert!(render(&profiled(Some(file.to_str().unwrap()))).contains("(not an SVG flame graph)"));

        let missing = dir.join("gone <x>.svg");
        let html = render(&profiled(Some(missing.to_str().unwrap())));
        assert!(html.contains("gone &lt;x&gt;.svg</code> (not found)"), "{html}");
        assert!(!html.contains("<details"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
