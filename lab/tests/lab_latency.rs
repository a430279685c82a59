//! `xnf lab latency` as a user runs it, briefly: every configuration of
//! the matrix and both baselines measured with every RTT kept, summaries
//! that are consistent, clusters covering the AF_XDP runs, a saturation
//! sweep, the timestamp overhead (all in the driver's results'
//! `details`), a report that draws it, the file clustered again with
//! `--from` — and nothing left behind. Timing is not asserted (that is the
//! benchmark's job).

use std::process::Command;

use xnf_testrun::cli::{assert_lab_refuses, lab, namespaces_of};

#[test]
fn bad_options_are_refused_with_one_line_naming_the_flag() {
    assert_lab_refuses(
        "latency",
        &[
            (&["--rate", "0"][..], "--rate 0", 1),
            (&["--count", "1"][..], "--count 1", 1),
            (&["--batch", "0"][..], "--batch 0", 1),
            (&["--max-k", "1"][..], "--max-k 1", 1),
            (&["--saturation", "fast"][..], "--saturation fast", 1),
            (&["--ping-cpu", "99"][..], "--ping-cpu 99", 1),
            (&["--repeats", "x"][..], "--repeats", 2),
            (&["--flame", "/tmp/xnf-flames"][..], "--flame needs --profile", 1),
            (&["--repeats", "0"][..], "--repeats 0", 1),
            (&["--seconds", "2"][..], "--seconds: latency sends --count probes", 1),
            (&["--cpu", "0"][..], "--ping-cpu", 1),
            (&["--zero-loss"][..], "--zero-loss", 1),
            (&["--csv", "/tmp/xnf-latency.csv"][..], "--csv", 1),
            (&["--topology", "line"][..], "one veth pair", 1),
        ],
    );
}

#[test]
fn a_short_run_covers_the_matrix_and_draws_its_report() {
    let dir = std::env::temp_dir();
    let json = dir.join(format!("xnf-lab-latency-{}.json", std::process::id()));
    let html = json.with_extension("html");
    let (out, pid) =
        lab("latency", &["--repeats", "1", "--count", "60", "--batch", "1", "--saturation", "20000", "--profile", "counts", "--json", json.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    assert!(stdout.contains("clusters of the AF_XDP runs"), "{stdout}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["experiment"], "latency");
    assert_eq!(r["samples"].as_array().map(Vec::len), Some(0), "RTTs are no rate samples");
    let d = &r["details"];
    let runs = d["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 16 + 4, "16 AF_XDP combinations at one batch size, UDP and AF_PACKET sleeping and spinning");
    for m in ["afxdp", "udp", "af-packet"] {
        assert!(runs.iter().any(|x| x["config"]["method"] == m), "no {m} run");
    }
    for x in runs {
        let rtts = x["rtts_ns"].as_array().unwrap();
        let (sent, lost) = (x["sent"].as_u64().unwrap(), x["lost"].as_u64().unwrap());
        assert_eq!(sent, 60);
        assert_eq!(rtts.len() as u64, sent - lost, "every answered probe's RTT is kept: {}", x["label"]);
        assert!(lost <= 3, "{}: {lost} of 60 probes lost", x["label"]);
        let s = &x["summary"];
        let f = |k: &str| s[k].as_f64().unwrap();
        assert!(
            f("min") > 0.0 && f("min") <= f("q1") && f("q1") <= f("median") && f("median") <= f("q3") && f("q3") <= f("p99") && f("p99") <= f("max"),
            "{}: {s}",
            x["label"]
        );
        assert_eq!(x["config"]["zero_copy"], false, "veth has copy mode only");
    }
    // Zero-copy is an axis; veth has none: said once, its runs skipped.
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).filter(|n| n.contains("zero-copy run(s) skipped")).collect();
    assert_eq!(notes.len(), 1, "{:?}", r["notes"]);
    assert!(notes[0].starts_with("zero-copy: the driver of ") && notes[0].contains("its 16 zero-copy run(s) skipped"), "{notes:?}");
    // --profile: each method's best configuration once more, profiled.
    let profiles = d["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 3, "afxdp, udp, af-packet: {profiles:?}");
    for p in profiles {
        assert!(p["probes"].as_u64().unwrap() >= 57 && p["profiled_median_us"].as_f64().unwrap() > 0.0, "{}", p["label"]);
        assert!(p["profile"]["counts_only"] == true && p["profile"]["softirqs"].as_u64().unwrap() > 0, "{}", p["label"]);
    }
    assert!(stdout.contains("where the time went (xnf profile; NET_RX softirq ns per probe"), "{stdout}");
    let c = &d["clustering"];
    let k = c["k"].as_u64().unwrap();
    assert!((2..=8).contains(&k), "{c}");
    let clusters = c["clusters"].as_array().unwrap();
    assert_eq!(clusters.iter().map(|x| x["runs"].as_u64().unwrap()).sum::<u64>(), 16, "every AF_XDP run in one cluster");
    let means: Vec<f64> = clusters.iter().map(|x| x["mean_us"].as_f64().unwrap()).collect();
    assert!(means.windows(2).all(|w| w[0] <= w[1]), "best cluster first: {means:?}");
    assert!(d["overhead"]["clock_read_ns"].as_f64().unwrap() > 0.0);
    let sat = d["saturation"].as_array().unwrap();
    assert_eq!(sat.len(), 3, "one rate for each method: {sat:?}");

    let rep = Command::new(xnf_testrun::cli::xnf_bin()).args(["lab", "report", json.to_str().unwrap(), "-o", html.to_str().unwrap()]).output().unwrap();
    assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Table I") && page.matches("<svg").count() as u64 > k, "a density per cluster and one of all");

    // Clustered again from the file: nothing measured, the same runs.
    let again = json.with_extension("again.json");
    let out = Command::new(xnf_testrun::cli::xnf_bin())
        .args(["lab", "latency", "--from", json.to_str().unwrap(), "--max-k", "3", "--json", again.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("clusters of the AF_XDP runs (k = "));
    let a: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&again).unwrap()).unwrap();
    assert_eq!(a["details"]["runs"].as_array().unwrap().len(), runs.len());
    assert!((2..=3).contains(&a["details"]["clustering"]["k"].as_u64().unwrap()));
    for f in [&json, &html, &again] {
        std::fs::remove_file(f).unwrap();
    }
}
