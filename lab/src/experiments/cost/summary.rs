//! What `xnf lab cost` makes of its calls: a sample per call, the
//! median and spread per variant and point ([`rows`]), the differences
//! between variants in ns ([`differences`]: xnf against xdp-filter, every
//! program against the test run's floor), the notes on what a test run
//! does not measure; on the terminal ([`print`]) and in the results'
//! `details` (`calls`, `costs`, `differences`), which `xnf lab report`
//! draws (`report/cost.rs`).

use serde::{Deserialize, Serialize};

use super::XNF_STAGE;
use crate::engine::results::{median, Loss, Point, Results, Sample, SampleKind};

/// One measured test-run call.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Call {
    pub variant: String,
    pub point: Point,
    pub run: u32,
    /// The program run: the one attached to the interface (or, for
    /// `xnf-stage`, the filter stage), by its id and the kernel's name.
    pub prog_id: u32,
    pub prog_name: String,
    /// What it returned ("drop", "pass"): checked against the frame's.
    pub verdict: String,
    pub repeat: u32,
    /// The kernel's mean ns per run.
    pub ns: u32,
    /// The call's wall-clock seconds (syscall and scheduling included).
    pub wall_s: f64,
}

impl Call {
    /// The call as a sample: `repeat` frames "sent" and "received" by the
    /// program alone in `repeat × ns`; its rate, 1000 / ns Mpps, and no
    /// CPU shares (the run is one CPU's, by construction).
    pub fn sample(&self) -> Sample {
        let ns = f64::from(self.ns);
        Sample {
            variant: self.variant.clone(),
            point: self.point.clone(),
            run: self.run,
            kind: SampleKind::Max,
            seconds: ns * f64::from(self.repeat) / 1e9,
            sent: self.repeat.into(),
            received: self.repeat.into(),
            sent_mpps: 1e3 / ns,
            mpps: 1e3 / ns,
            loss_pct: 0.0,
            loss: Loss::default(),
            cpus: Vec::new(),
            ns_per_packet: ns,
            // Not softirq: a test run runs in the calling thread's syscall.
            softirq_ns_per_packet: 0.0,
            dut_ns_per_packet: None,
            nic_drops: Default::default(),
            transactions_per_s: None,
            corunner_per_s: None,
        }
    }
}

/// One variant at one point: ns per frame over its calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub variant: String,
    pub point: Point,
    pub runs: usize,
    pub median_ns: f64,
    pub min_ns: f64,
    pub max_ns: f64,
    /// The program's name (from the calls), empty if unknown.
    #[serde(default)]
    pub program: String,
}

/// `a` against `b` at one point: medians' difference and ratio.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub point: Point,
    pub a: String,
    pub b: String,
    pub diff_ns: f64,
    pub ratio: f64,
}

/// The pairs compared, where both were measured: xnf against xdp-filter
/// (the question of issue 39), then every program against the floor.
const PAIRS: [(&str, &str); 4] = [("xnf", "xdp-filter"), ("xnf", "empty"), (XNF_STAGE, "empty"), ("xdp-filter", "empty")];

/// The rows of `r`'s samples, in the order variants and points first
/// appear; programs named from `details.calls`.
pub fn rows(r: &Results) -> Vec<Row> {
    let calls: Vec<Call> = r.details.get("calls").and_then(|c| serde_json::from_value(c.clone()).ok()).unwrap_or_default();
    let mut out: Vec<Row> = Vec::new();
    for s in r.samples.iter().filter(|s| matches!(s.kind, SampleKind::Max)) {
        if out.iter().any(|x| x.variant == s.variant && x.point == s.point) {
            continue;
        }
        let mut ns: Vec<f64> = r.samples.iter().filter(|o| o.variant == s.variant && o.point == s.point).map(|o| o.ns_per_packet).collect();
        let program = calls.iter().find(|c| c.variant == s.variant && c.point == s.point).map(|c| c.prog_name.clone()).unwrap_or_default();
        out.push(Row {
            variant: s.variant.clone(),
            point: s.point.clone(),
            runs: ns.len(),
            min_ns: ns.iter().copied().fold(f64::INFINITY, f64::min),
            max_ns: ns.iter().copied().fold(0.0, f64::max),
            median_ns: median(&mut ns),
            program,
        });
    }
    out
}

/// The differences at every point where both of a pair were measured.
pub fn differences(rows: &[Row]) -> Vec<Difference> {
    let mut out = Vec::new();
    for a in rows {
        for (na, nb) in PAIRS.iter().filter(|(na, _)| *na == a.variant) {
            if let Some(b) = rows.iter().find(|b| b.variant == *nb && b.point == a.point) {
                out.push(Difference {
                    point: a.point.clone(),
                    a: na.to_string(),
                    b: nb.to_string(),
                    diff_ns: a.median_ns - b.median_ns,
                    ratio: a.median_ns / b.median_ns,
                });
            }
        }
    }
    // Grouped by pair, in PAIRS' order, then by point.
    out.sort_by_key(|d| PAIRS.iter().position(|(a, b)| *a == d.a && *b == d.b));
    out
}

/// Fills the details and the notes once everything is measured; `cpu` is
/// the one the calls ran on.
pub fn finish(res: &mut Results, calls: &[Call], cpu: usize) -> anyhow::Result<()> {
    res.details.insert("calls".into(), serde_json::to_value(calls)?);
    let rows = rows(res);
    res.details.insert("differences".into(), serde_json::to_value(differences(&rows))?);
    res.details.insert("costs".into(), serde_json::to_value(&rows)?);
    res.notes.push(format!(
        "ns per frame by BPF_PROG_TEST_RUN: the program alone on CPU {cpu}, the same frame every time — no driver, no NAPI, no frame's data to fetch, rules and maps as warm as a tight loop keeps them (what real traffic misses is not here); the kernel reports whole ns per run, its own test loop included (what `empty` costs)"
    ));
    if rows.iter().any(|x| x.variant == "xnf") {
        res.notes.push(format!("xnf: the entry program attached to the interface, which tail-calls the filter stage (the cost a frame pays as attached); {XNF_STAGE}: the filter stage run alone"));
    }
    if rows.iter().any(|x| x.variant == "xdp-filter") {
        res.notes.push("xdp-filter keeps its ports in a bitmap: one lookup whatever the number of rules, flat by design".into());
    }
    res.notes.push("mpps in these results is 1000 / ns: the rate of the program alone on one CPU, no I/O".into());
    Ok(())
}

/// The costs and differences on the terminal.
pub fn print(r: &Results) {
    let m = &r.machine;
    println!("\nxnf lab cost — ns per frame by BPF_PROG_TEST_RUN; kernel {}, {} × {}, xnf {}", m.kernel, m.cores, m.cpu_model, m.xnf_version);
    let rows = rows(r);
    let w = rows.iter().map(|x| r.label(&x.point).chars().count()).max().unwrap_or(5).max(5);
    println!("\n{:<w$} {:<12} {:>5} {:>10} {:>8} {:>8}  program", "point", "variant", "runs", "median ns", "min", "max");
    for x in &rows {
        println!("{:<w$} {:<12} {:>5} {:>10.0} {:>8.0} {:>8.0}  {}", r.label(&x.point), x.variant, x.runs, x.median_ns, x.min_ns, x.max_ns, x.program);
    }
    let diffs = differences(&rows);
    if !diffs.is_empty() {
        println!();
    }
    for d in &diffs {
        println!("{:<w$} {} − {}: {:+.0} ns ({:.2}×)", r.label(&d.point), d.a, d.b, d.diff_ns, d.ratio);
    }
    println!();
    for n in &r.notes {
        println!("note: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(variant: &str, rules: u32, run: u32, ns: u32) -> Call {
        Call {
            variant: variant.into(),
            point: Point::default().with("rules", rules).with("frame", "flood"),
            run,
            prog_id: 7,
            prog_name: format!("{variant}_prog"),
            verdict: "drop".into(),
            repeat: 1000,
            ns,
            wall_s: 0.0,
        }
    }

    #[test]
    fn rows_take_median_and_spread_and_differences_compare_medians() {
        let mut r = Results::new("cost", &serde_json::json!({}), Vec::new());
        let calls = [
            call("empty", 1, 0, 9),
            call("xnf", 1, 0, 30),
            call(XNF_STAGE, 1, 0, 20),
            call("xdp-filter", 1, 0, 14),
            call("empty", 1, 1, 11),
            call("xnf", 1, 1, 34),
            call(XNF_STAGE, 1, 1, 22),
            call("xdp-filter", 1, 1, 12),
            call("xnf", 10, 0, 40),
        ];
        r.samples = calls.iter().map(Call::sample).collect();
        finish(&mut r, &calls, 1).unwrap();
        let rows = rows(&r);
        assert_eq!(rows.len(), 5);
        let x = &rows[1];
        assert_eq!((x.variant.as_str(), x.runs, x.median_ns, x.min_ns, x.max_ns, x.program.as_str()), ("xnf", 2, 32.0, 30.0, 34.0, "xnf_prog"));
        let d = differences(&rows);
        let pairs: Vec<(&str, &str, f64)> = d.iter().map(|d| (d.a.as_str(), d.b.as_str(), d.diff_ns)).collect();
        assert_eq!(
            pairs,
            [("xnf", "xdp-filter", 19.0), ("xnf", "empty", 22.0), (XNF_STAGE, "empty", 11.0), ("xdp-filter", "empty", 3.0)],
            "10 rules: xnf alone, nothing to compare"
        );
        assert!((d[0].ratio - 32.0 / 13.0).abs() < 1e-9);
        assert_eq!(r.details["differences"].as_array().unwrap().len(), 4);
        assert!(r.notes.iter().any(|n| n.starts_with("xdp-filter keeps its ports in a bitmap")));
        // A sample is the call: 1000 frames at 30 ns, 33.3 Mpps by the program alone.
        let s = calls[1].sample();
        assert_eq!((s.ns_per_packet, s.received), (30.0, 1000));
        assert!((s.mpps - 1e3 / 30.0).abs() < 1e-9 && (s.seconds - 30e-6).abs() < 1e-12);
    }
}
