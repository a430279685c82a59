//! `xnf lab gen` as a user runs it: bad input is refused with one line and
//! a failing status before anything is built; good input sends, verifies,
//! writes JSON (each run's totals and verification in `details.runs`) and
//! leaves nothing behind.

use xnf_testrun::cli::{assert_lab_refuses, interrupt_lab_when, lab, lab_namespace, namespaces_of, rx_packets};

#[test]
fn bad_input_is_refused_with_one_line_and_a_failing_status() {
    // (arguments, what the message must say, exit status: 2 = usage, 1 = refused)
    assert_lab_refuses(
        "gen",
        &[
            (&["--rate", "0"][..], "omit --rate", 2),
            (&["--rate", "-5"][..], "omit --rate", 2),
            (&["--size", "63"][..], "63 bytes is not an Ethernet frame size: 64..=1518", 2),
            (&["--size", "1519"][..], "1519 bytes is not an Ethernet frame size", 2),
            (&["--size", "-5"][..], "-5 bytes is not an Ethernet frame size", 2),
            (&["--size", "big"][..], "or imix", 2),
            (&["--count", "0"][..], "at least 1", 2),
            (&["--count", "-3"][..], "at least 1", 2),
            (&["--flows", "0"][..], "at least 1", 2),
            (&["--seconds", "0"][..], "--seconds must be positive", 1),
            (&["--warmup", "1"][..], "--warmup: gen counts every frame it sends", 1),
            (&["--zero-loss"][..], "--zero-loss", 1),
            (&["--cpu", "0", "--cpus", "1"][..], "cannot be used with", 2),
            (&["--topology", "line"][..], "give --through-dut kernel|xnf", 1),
            (&["--through-dut", "xnf", "--topology", "pair"][..], "--through-dut: the topology has no dut", 1),
            (&["--cpus", "a"][..], "not a CPU number", 2),
            (&["--cpus", "0,0"][..], "listed twice", 2),
            (&["--tcp", "fin"][..], "fin", 2),
            (&["--flows", "3", "--sports", "3"][..], "cannot be used with", 2),
            (&["--flows", "70000"][..], "--flows 70000: more flows than the source-port range allows (64512 ports, 1024..65535)", 1),
            (&["--sports", "64513"][..], "more flows than the source-port range allows", 1),
            (&["--dports", "65528"][..], "more than the destination-port range allows", 1),
            (&["--ipv6", "--size", "64"][..], "at least 66 bytes", 1),
            (&["--ipv6", "--tcp", "--size", "66"][..], "at least 78 bytes", 1),
            (&["--cpus", "0,999"][..], "CPU 999 does not exist", 1),
            (&["--dsts", "10", "--dst-base", "10.0.0.1"][..], "lab's ranges", 1),
            (&["--dst-list", "/nonexistent/xnf-targets"][..], "reading --dst-list", 1),
            (&["--frobnicate"][..], "--frobnicate", 2),
            (&["--flame", "/tmp/xnf-flames"][..], "--flame needs --profile", 1),
        ],
    );
}

#[test]
fn sends_verifies_and_writes_json() {
    let json = std::env::temp_dir().join(format!("xnf-gen-{}.json", std::process::id()));
    let (out, pid) = lab(
        "gen",
        &["--size", "imix", "--count", "9960", "--flows", "3", "--cpus", "0,1", "--verify", "--profile", "counts", "--json", json.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("verified: every frame arrived"));
    assert!(stdout.contains("where the time went (xnf profile, attached for the whole run)"), "{stdout}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(json).unwrap();
    assert_eq!(r["experiment"], "gen");
    let runs = r["details"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one run unless --runs says more");
    let run = &runs[0];
    assert_eq!((run["sent"].as_u64(), run["received"].as_u64()), (Some(9960), Some(9960)), "{run}");
    assert_eq!(run["per_cpu"].as_array().unwrap().iter().map(|c| c["sent"].as_u64().unwrap()).collect::<Vec<_>>(), [4980, 4980]);
    assert_eq!(run["verification"]["exact"], true, "{run}");
    // The profile saw the sink's NAPI poll the frames (those in flight when
    // the generator stopped arrive after the profile ends).
    let sink = run["profile"]["devices"].as_array().unwrap().iter().find(|d| d["namespace"].as_str().unwrap().ends_with("-sink")).cloned();
    let polled = sink.as_ref().and_then(|d| d["work"].as_u64()).unwrap_or(0);
    assert!(polled > 0 && polled <= 9960, "{}", run["profile"]["devices"]);
    let samples = r["samples"].as_array().unwrap();
    assert!(!samples.is_empty());
    assert!(samples.iter().all(|s| s["variant"] == "gen" && s["point"]["size"] == 0 && s["point"]["queues"] == 2));
    assert_eq!(samples.iter().map(|s| s["sent"].as_u64().unwrap()).sum::<u64>(), 9960);
    assert!(namespaces_of(pid).is_empty());
}

#[test]
fn each_run_sends_and_is_checked_on_its_own() {
    let json = std::env::temp_dir().join(format!("xnf-gen-runs-{}.json", std::process::id()));
    let csv = json.with_extension("csv");
    let (out, pid) =
        lab("gen", &["--runs", "2", "--count", "5000", "--flows", "5", "--verify", "--json", json.to_str().unwrap(), "--csv", csv.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(run 1/2)") && stdout.contains("(run 2/2)"), "{stdout}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = r["details"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for (i, run) in runs.iter().enumerate() {
        assert_eq!((run["run"].as_u64(), run["sent"].as_u64(), run["received"].as_u64()), (Some(i as u64), Some(5000), Some(5000)), "{run}");
        assert_eq!(run["verification"]["exact"], true, "{run}");
    }
    let samples = r["samples"].as_array().unwrap();
    for run in 0..2u64 {
        assert_eq!(samples.iter().filter(|s| s["run"] == run).map(|s| s["sent"].as_u64().unwrap()).sum::<u64>(), 5000, "run {run}");
    }
    let rows = std::fs::read_to_string(&csv).unwrap().lines().count();
    assert_eq!(rows, samples.len() + 1, "a CSV row per sample");
    std::fs::remove_file(json).unwrap();
    std::fs::remove_file(csv).unwrap();
    assert!(namespaces_of(pid).is_empty());
}

#[test]
fn through_an_xnf_dut_every_frame_arrives() {
    let json = std::env::temp_dir().join(format!("xnf-gen-dut-{}.json", std::process::id()));
    let (out, pid) = lab(
        "gen",
        &["--through-dut", "xnf", "--ipv6", "--tcp", "--size", "200", "--count", "20000", "--dsts", "50", "--verify", "--json", json.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(json).unwrap();
    let v = &r["details"]["runs"][0]["verification"];
    assert_eq!(v["exact"], true, "{v}");
    assert_eq!((v["flows_seen"].as_u64(), v["flows_expected"].as_u64(), v["flows_wrong"].as_u64()), (Some(50), Some(50), Some(0)), "{v}");
    assert!(namespaces_of(pid).is_empty());
}

#[test]
fn ctrl_c_stops_sending_and_removes_the_namespaces() {
    interrupt_lab_when(&["gen", "--seconds", "60", "--rate", "100000"], "frames at the sink", |names| {
        lab_namespace(names, "sink").and_then(|sink| rx_packets(sink, "sink")).is_some_and(|n| n > 0)
    });
}
