//! `xnf lab disrupt` as a user runs it: bad options are refused with one
//! line before anything is built; a short run kills xnf's daemon,
//! applies a bad box file and upgrades to another build under traffic, and replaces the kernel's route,
//! writing a row per event with its numbers, xnf losing not a datagram
//! nor a connection, and leaves no namespace nor daemon behind.

use serde_json::Value;
use xnf_testrun::cli::{assert_lab_refuses, lab, namespaces_of};

#[test]
fn bad_options_are_refused_with_one_line_naming_the_flag() {
    assert_lab_refuses(
        "disrupt",
        &[
            (&["--repeat", "0"][..], "--repeat 0", 1),
            (&["--rate", "10"][..], "--rate 10", 1),
            (&["--events", "explode"][..], "--events", 2),
            (&["--variants", "kernel", "--events", "daemon-kill"][..], "--events: daemon-kill is an event of xnf, which --variants leaves out", 1),
            (&["--variants", "xdp-forward"][..], "xdp-forward: ", 1),
            (&["--upgrade-to", "/nonexistent/xnf"][..], "--upgrade-to /nonexistent/xnf: no such file", 1),
            (&["--seconds", "3"][..], "--seconds: ", 1),
            (&["--zero-loss"][..], "--zero-loss: ", 1),
            (&["--topology", "pair"][..], "--topology: ", 1),
        ],
    );
}

/// The row of `variant`'s `event`.
fn row<'a>(rows: &'a [Value], variant: &str, event: &str) -> &'a Value {
    rows.iter().find(|r| r["variant"] == variant && r["event"] == event).unwrap_or_else(|| panic!("no row for {variant} {event}: {rows:?}"))
}

fn ints(r: &Value, key: &str) -> Vec<u64> {
    r[key].as_array().unwrap_or_else(|| panic!("{key}: {r}")).iter().map(|v| v.as_u64().unwrap()).collect()
}

#[test]
fn a_short_run_measures_each_event_and_xnf_loses_nothing() {
    let json = std::env::temp_dir().join(format!("xnf-lab-disrupt-{}.json", std::process::id()));
    let t0 = std::time::Instant::now();
    // The package's upgrade: a restart into another build of this source.
    let bumped = xnf_testrun::cli::xnf_bin().with_file_name("xnf-layout-bump");
    assert!(bumped.exists(), "{} is missing: the upgrade event restarts into it; build it with `make layout-bump` (make test does)", bumped.display());
    let events = "daemon-kill,bad-config,upgrade,route-change";
    let args = ["--repeat", "1", "--variants", "xnf,kernel", "--events", events, "--upgrade-to", bumped.to_str().unwrap(), "--json", json.to_str().unwrap()];
    let (out, pid) = lab("disrupt", &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(t0.elapsed().as_secs() < 60, "took {:?}", t0.elapsed());
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!((doc["experiment"].as_str(), doc["options"]["runs"].as_u64()), (Some("disrupt"), Some(1)), "{doc}");
    let rows = doc["details"]["events"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for (variant, event) in [("xnf", "daemon-kill"), ("xnf", "bad-config"), ("xnf", "upgrade"), ("kernel", "route-change")] {
        let r = row(rows, variant, event);
        for key in ["sent", "lost", "broken", "kernel_forwarded", "gap_ms", "outcome"] {
            assert_eq!(r[key].as_array().map(Vec::len), Some(1), "{key} of {variant} {event}: {r}");
        }
        assert!(ints(r, "sent")[0] > 1000, "{variant} {event}: the window saw too little traffic: {r}");
        assert!(stdout.lines().any(|l| l.starts_with(variant) && l.contains(event)), "no line for {variant} {event}:\n{stdout}");
    }
    for event in ["daemon-kill", "bad-config", "upgrade"] {
        let r = row(rows, "xnf", event);
        assert_eq!((ints(r, "lost"), ints(r, "broken"), ints(r, "moved")), (vec![0], vec![0], vec![0]), "xnf {event}: {r}");
        assert_eq!(r["lb_flows"], 300, "the connections and the flows: {r}");
    }
    assert_eq!(row(rows, "xnf", "bad-config")["outcome"][0], "refused, nothing changed");
    let upgrade = row(rows, "xnf", "upgrade")["outcome"][0].as_str().unwrap_or_default().to_string();
    // The lb's table holds the TCP connections (through its VIP) and the flows.
    assert!(upgrade.contains("lb swapped=2 migrated=\"conntrack:300+"), "the upgrade did not move the lb's connections: {upgrade}");
    assert_eq!(row(rows, "xnf", "upgrade")["kernel_forwarded"][0], 0, "slow-pathed during the upgrade");
    let kernel = row(rows, "kernel", "route-change");
    assert!(ints(kernel, "kernel_forwarded")[0] > 0, "the kernel forwards the stream: {kernel}");
    assert!(kernel["summary"]["gap_ms"][1].as_f64().unwrap() > 0.0, "{kernel}");
    assert_eq!(doc["samples"].as_array().map(Vec::len), Some(4), "one sample per event for --csv");
    let daemons = std::process::Command::new("pgrep").args(["-f", &format!("xnf --netns xnf-{pid}-")]).output().unwrap();
    assert!(daemons.stdout.is_empty(), "daemons left: {}", String::from_utf8_lossy(&daemons.stdout));
}
