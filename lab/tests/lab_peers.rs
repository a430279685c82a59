//! `xnf lab router` with peers: a forwarder from outside the lab, given by
//! an attach and a detach command, is measured and compared like the
//! built-in variants, its detach command runs (also after a failed
//! attach), and bad definitions are refused before anything is built. The
//! peer here is `xnf router` driven through its CLI, so no external tool is
//! needed; the built-in xdp-forward variants are the same mechanism.

use serde_json::Value;
use xnf_testrun::cli::{assert_lab_refuses, lab, namespaces_of, xnf_bin, TempFiles};

/// A detach command that detaches the router, then records dut's namespace
/// name and both interfaces' `ip link` lines in `record` (what is attached
/// once the peer is gone).
fn detach_recording(record: &str) -> String {
    let xnf = xnf_bin().display().to_string();
    format!(
        "{xnf} router detach {{in}} {{out}} && echo {{ns}} >> {record} && ip -o link show dev {{in}} >> {record} && ip -o link show dev {{out}} >> {record}"
    )
}

/// What `record` says: dut's namespace name, then one line per interface
/// with nothing attached.
fn check_detached(record: &str) {
    let text = std::fs::read_to_string(record).unwrap_or_else(|e| panic!("the detach command did not run ({record}: {e})"));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("xnf-") && lines[0].ends_with("-dut"), "{{ns}} is dut's namespace: {text}");
    for l in &lines[1..] {
        assert!(!l.contains("xdp"), "still attached after the detach command: {l}");
    }
}

#[test]
fn a_peer_is_measured_compared_and_detached() {
    let tmp = TempFiles::new("lab-peer");
    let record = tmp.dir().join("detached").display().to_string();
    let json = tmp.dir().join("r.json").display().to_string();
    let xnf = xnf_bin().display().to_string();
    let peer = format!("xnf-cli={xnf} router attach {{in}} {{out}} --fib direct --no-follow;{}", detach_recording(&record));
    let args = ["--variants", "kernel,xnf,xnf-cli", "--peer", &peer, "--runs", "1", "--seconds", "1", "--warmup", "0.2", "--json", &json];
    let (out, pid) = lab("router", &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rate = r["summary"].as_array().unwrap().iter().find(|s| s["variant"] == "xnf-cli").map(|s| s["median_mpps"].as_f64().unwrap());
    assert!(rate.is_some_and(|m| m > 0.0), "the peer's rate: {rate:?}");
    let ratios: Vec<(&str, &str)> =
        r["ratios"].as_array().unwrap().iter().map(|q| (q["numerator"].as_str().unwrap(), q["denominator"].as_str().unwrap())).collect();
    assert_eq!(ratios, [("xnf", "kernel"), ("xnf", "xnf-cli")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("xnf / xnf-cli = "), "no ratio row printed");
    check_detached(&record);
}

#[test]
fn a_failing_attach_fails_the_run_with_one_line_and_is_undone() {
    let tmp = TempFiles::new("lab-peer-fail");
    let record = tmp.dir().join("detached").display().to_string();
    let xnf = xnf_bin().display().to_string();
    // Half-way: the router is attached when the command fails.
    let attach = format!("{xnf} router attach {{in}} {{out}} --no-follow && echo 'broken: no licence' >&2 && false");
    let peer = format!("broken={attach};{}", detach_recording(&record));
    let (out, pid) = lab("router", &["--variants", "broken,kernel", "--peer", &peer, "--runs", "1", "--seconds", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let last = err.trim().lines().last().unwrap_or_default();
    assert!(last.contains("peer broken: attach command `") && last.contains("&& false`") && last.ends_with("broken: no licence"), "{err}");
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    check_detached(&record);
}

#[test]
fn bad_peers_are_refused_before_anything_is_built() {
    assert_lab_refuses(
        "router",
        &[
            (&["--peer", "fwd=load {in}"][..], "no `;`", 2),
            (&["--peer", "fwd=load {dev};unload"][..], "unknown placeholder {dev}", 2),
            (&["--peer", "fwd= ;unload"][..], "attach command is empty", 2),
            (&["--variants", "kernel", "--peer", "kernel=a;b"][..], "a built-in variant has that name", 1),
            (&["--peer", "fwd=a;b"][..], "not in --variants", 1),
            (&["--variants", "fwd"][..], "no variant `fwd`", 1),
            (&["--variants", "xdp-forward", "--xdp-forward", "/nonexistent/xdp-forward"][..], "run scripts/peers.sh", 1),
            // The lab is told of an empty peers folder: not built there.
            (&["--variants", "kernel,xdp-forward-direct"][..], "/sbin/xdp-forward not found: run scripts/peers.sh", 1),
        ],
    );
}
