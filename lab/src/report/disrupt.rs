//! `xnf lab disrupt`'s events in the report: one row per variant and
//! event (its `details.events`), mean and max over the repeats.

use maud::{html, Markup};

use super::html::fmt_num;
use crate::engine::results::Results;
use crate::experiments::disrupt::results::{rows, EventRow};

/// The events' table, if the results have any.
pub fn section(r: &Results) -> Markup {
    let rows = rows(r);
    let heads = ["repeats", "lost datagrams", "of them at the sink's socket / links", "longest gap ms", "TCP broken", "lb flows moved", "kernel forwarded"];
    html! {
        @if !rows.is_empty() {
            section {
                h2 { "Events under traffic" }
                p { "Mean (max) over the repeats, from just before each event to the end of its settling time: datagrams of the stream lost by sequence number, the longest wait between two at the sink, TCP connections that saw an error or EOF, lb flows whose backend changed (xnf), datagrams dut's kernel forwarded; for xnf what its counters left to the kernel, by reason." }
                table class="data" {
                    thead { tr { th { "variant" } th { "event" } @for h in heads { th class="num" { (h) } } th { "xnf to kernel" } th { "outcome" } } }
                    tbody { @for x in &rows { (row(x)) } }
                }
            }
        }
    }
}

fn row(x: &EventRow) -> Markup {
    let s = &x.summary;
    let mm = |(mean, max): (f64, f64), d: usize| format!("{} ({})", fmt_num(mean, d), fmt_num(max, d));
    html! {
        tr {
            td { (x.variant) }
            td { (x.event) }
            td class="num" { (x.lost.len()) }
            td class="num" { (mm(s.lost, 1)) }
            td class="num" { (mm(s.sink_drops, 1)) " / " (mm(s.link_drops, 1)) }
            td class="num" { (mm(s.gap_ms, 1)) }
            td class="num" { (mm(s.broken, 1)) " of " (x.connections) }
            td class="num" { @if x.moved.is_empty() { "—" } @else { (mm(s.moved, 1)) " of " (x.lb_flows) } }
            td class="num" { (mm(s.kernel_forwarded, 0)) }
            td { (x.reasons_cell()) }
            td { (x.outcome_cell()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_gets_its_row_escaped() {
        let mut r = crate::report::tests::results();
        let mut x =
            EventRow { variant: "xnf".into(), event: "daemon-kill".into(), lost: vec![0, 2], gap_ms: vec![1.0, 3.0], connections: 100, ..Default::default() };
        x.outcome = vec!["refused <bad>".into()];
        x.summarize();
        r.details.insert("events".into(), serde_json::to_value(vec![x]).unwrap());
        let html = super::super::render(&r);
        crate::report::tests::assert_balanced(&html);
        assert!(html.contains("Events under traffic") && html.contains("<td>daemon-kill</td>"), "{html}");
        assert!(html.contains("1.0 (2.0)") && html.contains("2.0 (3.0)") && html.contains("refused &lt;bad&gt;"));
        assert!(!super::super::render(&crate::report::tests::results()).contains("Events under traffic"));
    }
}
