//! `xnf lab cost` as a user runs it: bad options are refused with one line
//! before anything is built; a short run attaches each variant to a veth
//! in a lab namespace, test-runs the program attached there at every point
//! (ns per frame > 0, the frame's verdict), measures xnf's filter stage
//! too, writes the results the report draws, and leaves nothing behind.

use std::path::Path;

use serde_json::Value;
use xnf_testrun::cli::{assert_lab_refuses, lab_with_peers, namespaces_of, xnf_bin, TempFiles};

#[test]
fn bad_options_are_refused_with_one_line_naming_the_flag() {
    let over = (xnf_filter::program::MAX_RULES + 1).to_string();
    let over_refusal = format!("--rules {over}: this build's xnf filter takes at most");
    assert_lab_refuses(
        "cost",
        &[
            (&["--variants", "xdp-filter", "--xdp-filter", "/nonexistent/xdp-filter"][..], "scripts/peers.sh", 1),
            (&["--variants", "iptables"][..], "--variants", 2),
            (&["--frame", "bogus"][..], "--frame", 2),
            (&["--rules", "0"][..], "--rules 0", 1),
            (&["--rules", &over][..], &over_refusal, 1),
            (&["--repeat", "0"][..], "--repeat 0", 1),
            (&["--runs", "0"][..], "--runs 0", 1),
            (&["--cpu", "999"][..], "--cpu 999", 1),
            (&["--seconds", "5"][..], "--seconds: ", 1),
            (&["--zero-loss"][..], "--zero-loss", 1),
            (&["--profile", "counts"][..], "--profile", 1),
        ],
    );
}

/// One run at a time: each pins its test runs to the same CPU, and
/// xdp-filter's maps are the host's (one set for every xdp-filter).
static RUNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `xnf lab cost ARGS` briefly (one call per variant and point, a
/// small repeat), the lab told of `peers`; returns the results read back
/// and what it said on stderr, after checking that the report draws them
/// and no namespace is left.
fn short_run(tag: &str, args: &[&str], peers: &Path) -> (Value, String) {
    let _alone = RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let json = std::env::temp_dir().join(format!("xnf-lab-cost-{tag}-{}.json", std::process::id()));
    let mut all = vec!["--runs", "1", "--repeat", "20000", "--rules", "1,10", "--json", json.to_str().unwrap()];
    all.extend_from_slice(args);
    let (out, pid) = lab_with_peers(peers, "cost", &all);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}\n{}", String::from_utf8_lossy(&out.stdout));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let html = json.with_extension("html");
    let rep = std::process::Command::new(xnf_bin()).args(["lab", "report"]).arg(&json).arg("-o").arg(&html).output().unwrap();
    assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    std::fs::remove_file(&html).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert!(page.contains("Cost per frame (BPF_PROG_TEST_RUN)") && page.contains("ns per frame vs rule-set size"), "the report's cost table and chart");
    assert_eq!(r["experiment"], "cost");
    (r, err)
}

/// The calls of `variant` in `r`'s details.
fn calls<'a>(r: &'a Value, variant: &str) -> Vec<&'a Value> {
    r["details"]["calls"].as_array().unwrap().iter().filter(|c| c["variant"] == variant).collect()
}

/// `variant` was run once at each of `points` (rules, frame) with the
/// frame's verdict and a cost, by the program named `prog`; its samples
/// carry the kernel's ns.
fn check_variant(r: &Value, variant: &str, prog: &str, points: &[(u64, &str)]) {
    let of = calls(r, variant);
    assert_eq!(of.len(), points.len(), "{variant}: one call per point: {of:?}");
    for (rules, frame) in points {
        let c = of
            .iter()
            .find(|c| c["point"]["rules"] == *rules && c["point"]["frame"] == *frame)
            .unwrap_or_else(|| panic!("{variant}: no call at {rules} rules, {frame}"));
        let verdict = if *frame == "flood" { "drop" } else { "pass" };
        assert_eq!(c["verdict"], verdict, "{variant} at {rules} rules, {frame}: {c}");
        assert!(c["ns"].as_u64().unwrap() > 0 && c["repeat"] == 20000, "{variant}: {c}");
        assert_eq!(c["prog_name"], prog, "{variant}: the program attached: {c}");
        let s = r["samples"].as_array().unwrap().iter().find(|s| s["variant"] == variant && s["point"] == c["point"]).unwrap();
        assert_eq!(s["ns_per_packet"].as_f64().unwrap(), c["ns"].as_f64().unwrap(), "{variant}: the sample is the call");
    }
}

/// The default variants, the lab told of a peers folder without
/// xdp-filter: empty and xnf (with its filter stage), xdp-filter left out
/// saying why; every call returned the frame's verdict.
#[test]
fn empty_and_xnf_are_test_run_where_attached_and_return_the_frames_verdict() {
    let empty = TempFiles::new("lab-cost-no-peers");
    let (r, err) = short_run("default", &["--frame", "flood,pass"], empty.dir());
    let missing = empty.dir().join("sbin/xdp-filter");
    let why = format!("xdp-filter left out of the default variants: xdp-filter: {} not found: run scripts/peers.sh", missing.display());
    assert!(err.contains(&why), "the lab did not say why xdp-filter is left out ({why}):\n{err}");
    assert_eq!(r["options"]["variants"], serde_json::json!(["empty", "xnf"]));
    let points = [(1, "flood"), (10, "flood"), (1, "pass"), (10, "pass")];
    check_variant(&r, "empty", "xnf_action", &points);
    check_variant(&r, "xnf", "xnf_entry", &points);
    check_variant(&r, "xnf-stage", "xnf_filter", &points);
    let diffs = r["details"]["differences"].as_array().unwrap();
    for pair in [("xnf", "empty"), ("xnf-stage", "empty")] {
        assert_eq!(diffs.iter().filter(|d| d["a"] == pair.0 && d["b"] == pair.1).count(), 4, "{pair:?} at every point: {diffs:?}");
    }
    assert_eq!(r["details"]["costs"].as_array().unwrap().len(), 12, "a row per variant and point");
    assert!(r["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("ns per frame by BPF_PROG_TEST_RUN")), "{}", r["notes"]);
}

/// xdp-filter where scripts/peers.sh builds it (`make test` does; missing,
/// the test fails saying so): its program, attached with the rules' ports,
/// drops the flood.
#[test]
fn xdp_filter_built_by_peers_is_test_run_with_the_rules_ports() {
    let bin = xnf_lab::engine::peers::folder().join("sbin/xdp-filter");
    assert!(bin.is_file(), "{} is missing: this test measures xdp-filter; build it with scripts/peers.sh (`make test` does)", bin.display());
    let peers = TempFiles::new("lab-cost-peers");
    std::fs::create_dir(peers.dir().join("sbin")).unwrap();
    std::os::unix::fs::symlink(&bin, peers.dir().join("sbin/xdp-filter")).unwrap();
    let (r, err) = short_run("xdp-filter", &["--variants", "xdp-filter,empty"], peers.dir());
    assert!(!err.contains("left out"), "{err}");
    check_variant(&r, "xdp-filter", "xdpfilt_alw_udp", &[(1, "flood"), (10, "flood")]);
    let d = r["details"]["differences"].as_array().unwrap();
    assert_eq!(d.iter().filter(|d| d["a"] == "xdp-filter" && d["b"] == "empty").count(), 2, "{d:?}");
}
