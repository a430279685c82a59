//! `xnf lab lb`'s disruption in the report (its `details.disruption`): what removing one backend moved, with the
//! connection table and without it — by test run of the lb program, by real TCP connections through the attached
//! data plane (when the run made them), and as `xnf lb plan` expects it. Two charts: the share of all flows that
//! moved, the removed backend's stacked under the collateral; and the collateral alone, as a share of the flows
//! whose backend stays, on a scale of its own (it is a few per cent or less of the other).

use crate::engine::results::Results;
use crate::experiments::lb::disruption::Disruption;
use crate::experiments::lb::disruption::Outcome;
use crate::experiments::lb::disruption_tcp::TcpOutcome;

use super::charts::Section;
use super::data::PALETTE;
use super::svg::{Chart, Pt, Scale, Series, Slot, Style};

/// The plan's colour: a grey dark enough that its lighter part still shows.
const PLAN: &str = "#79706e";

/// The two variants, as the charts' categories.
const VARIANTS: [&str; 2] = ["with the connection table", "without it"];

/// One source of figures: its label, its colour, and per variant the removed backend's flows moved and the
/// collateral, both as shares of all flows (%), and the collateral as a share of the kept flows (%).
struct Source {
    label: String,
    key: &'static str,
    colour: &'static str,
    removed: [f64; 2],
    collateral: [f64; 2],
    of_kept: [f64; 2],
}

fn pct(x: u64, of: u64) -> f64 {
    100.0 * x as f64 / of.max(1) as f64
}

fn test_run(o: &[&Outcome; 2]) -> ([f64; 2], [f64; 2], [f64; 2]) {
    let all = |o: &Outcome| o.removed_flows + o.kept_flows;
    (o.map(|o| pct(o.removed_moved, all(o))), o.map(|o| pct(o.collateral, all(o))), o.map(|o| 100.0 * o.collateral_share()))
}

fn tcp(o: &[&TcpOutcome; 2]) -> ([f64; 2], [f64; 2], [f64; 2]) {
    (o.map(|o| pct(o.removed_broken, o.connections)), o.map(|o| pct(o.collateral, o.connections)), o.map(|o| 100.0 * o.collateral_share()))
}

/// The sources the results have, in drawing order: test run, real connections, plan.
fn sources(d: &Disruption) -> Vec<Source> {
    let (removed, collateral, of_kept) = test_run(&[&d.with_table, &d.without_table]);
    let mut s = vec![Source { label: format!("test run ({} flows)", d.flows), key: "test-run", colour: PALETTE[0], removed, collateral, of_kept }];
    if let Some(t) = &d.tcp {
        let (removed, collateral, of_kept) = tcp(&[&t.with_table, &t.without_table]);
        let label = format!("real TCP connections ({} × {} run{})", t.connections, t.runs, if t.runs == 1 { "" } else { "s" });
        s.push(Source { label, key: "tcp", colour: PALETTE[1], removed, collateral, of_kept });
    }
    // With the connection table only the removed backend's share moves; without it, what the plan says.
    let p = &d.plan;
    let (removed, moved) = (100.0 * p.removed, 100.0 * p.moved);
    s.push(Source {
        label: "xnf lb plan (expected)".into(),
        key: "plan",
        colour: PLAN,
        removed: [removed, removed],
        collateral: [0.0, (moved - removed).max(0.0)],
        of_kept: [0.0, 100.0 * p.collateral_of_kept],
    });
    s
}

/// The disruption's section, if the results have one.
pub fn section(r: &Results) -> Option<Section> {
    let d: Disruption = serde_json::from_value(r.details.get("disruption")?.clone()).ok()?;
    Some(Section { heading: "Disruption: one backend removed", charts: charts(&d) })
}

fn charts(d: &Disruption) -> Vec<Chart> {
    let src = sources(d);
    let x = || Scale::band(VARIANTS.iter().map(|v| v.to_string()).collect());
    let top = |f: &dyn Fn(&Source, usize) -> f64| src.iter().flat_map(|s| [f(s, 0), f(s, 1)]).fold(0.0, f64::max);
    let subtitle = format!("{} backends, {} removed, table of {} entries", d.backends, d.removed, d.table_size);

    let mut moved = Chart::new(
        "Flows moved when one backend is removed",
        &format!("{subtitle}; lighter: the collateral"),
        x(),
        "",
        Scale::linear(0.0, top(&|s, i| s.removed[i] + s.collateral[i]) * 1.1),
        "% of all flows moved",
    );
    let mut collateral = Chart::new(
        "Collateral: flows moved whose backend stays",
        &subtitle,
        x(),
        "",
        Scale::linear(0.0, top(&|s, i| s.of_kept[i]).max(0.1) * 1.15),
        "% of the kept flows",
    );
    for (i, s) in src.iter().enumerate() {
        let slot = Slot { index: i, of: src.len(), faded: false };
        let series = |ys: [f64; 2]| Series {
            label: s.label.clone(),
            variant: s.key,
            colour: s.colour,
            style: Style::Line,
            points: ys.iter().enumerate().map(|(x, y)| Pt::new(x as f64, *y)).collect(),
        };
        moved.stacked_bars(&series(s.removed), &s.collateral, slot, ["% the removed backend's", "% collateral"]);
        collateral.bars(&series(s.of_kept), slot, true);
    }
    vec![moved, collateral]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::lb::disruption::Planned;
    use crate::experiments::lb::disruption_tcp::TcpDisruption;

    fn outcome(removed: u64, kept: u64, collateral: u64) -> Outcome {
        Outcome { moved: removed + collateral, removed_flows: removed, removed_moved: removed, kept_flows: kept, collateral, ..Default::default() }
    }

    pub(crate) fn disruption(tcp: bool) -> Disruption {
        let t = |kept, collateral| TcpOutcome {
            connections: 400,
            removed_connections: 100,
            removed_broken: 100,
            kept_connections: kept,
            collateral,
            survived: 300 - collateral,
            ..Default::default()
        };
        Disruption {
            flows: 10_000,
            backends: 4,
            table_size: 11,
            removed: "198.19.128.1".parse().unwrap(),
            runs: 1,
            before: outcome(2500, 7500, 0),
            with_table: outcome(2500, 7500, 0),
            without_table: outcome(2500, 7500, 900),
            plan: Planned { moved: 0.34, removed: 0.25, collateral_of_kept: 0.12, balance_max: 1.1 },
            tcp: tcp.then(|| TcpDisruption {
                connections: 200,
                backends: 4,
                removed: "198.19.128.1".parse().unwrap(),
                runs: 2,
                with_table: t(300, 0),
                without_table: t(300, 39),
            }),
        }
    }

    #[test]
    fn each_variant_has_the_test_runs_the_connections_and_the_plans_bars() {
        let charts = charts(&disruption(true));
        assert_eq!(
            charts.iter().map(Chart::title).collect::<Vec<_>>(),
            ["Flows moved when one backend is removed", "Collateral: flows moved whose backend stays"]
        );
        let moved = charts[0].render().into_string();
        super::super::tests::assert_balanced(&moved);
        for key in ["test-run", "tcp", "plan"] {
            assert!(moved.contains(&format!(r#"<g class="bars" data-variant="{key}">"#)), "{key}: {moved}");
        }
        // Test run: 25 % and 34 % moved (9 % collateral); connections 25 % and 34.75 %; plan 25 % and 34 %.
        for total in [">25.0</text>", ">34.0</text>", ">34.8</text>"] {
            assert!(moved.contains(total), "{total}: {moved}");
        }
        assert_eq!(moved.matches(r#"data-part="% collateral""#).count(), 6);
        // Collateral of the kept flows: 12 % (test run and plan), 13 % (39 of 300 connections), 0 with the table.
        let coll = charts[1].render().into_string();
        for v in [">12.0</text>", ">13.0</text>", ">0.00</text>"] {
            assert!(coll.contains(v), "{v}: {coll}");
        }
        assert_eq!(coll.matches(">0.00</text>").count(), 3, "with the table: no collateral anywhere");
    }

    #[test]
    fn without_real_connections_two_sources() {
        let moved = charts(&disruption(false))[0].render().into_string();
        assert!(!moved.contains(r#"data-variant="tcp""#) && moved.contains(r#"data-variant="plan""#));
        let mut r = crate::report::tests::results();
        assert!(section(&r).is_none());
        r.details.insert("disruption".into(), serde_json::to_value(disruption(true)).unwrap());
        let html = super::super::render(&r);
        super::super::tests::assert_balanced(&html);
        assert!(html.contains("Disruption: one backend removed") && html.contains("real TCP connections (200 × 2 runs)"), "{html}");
    }
}
