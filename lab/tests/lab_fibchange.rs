//! `xnf lab fib-change` as a user runs it: bad options, and the driver's
//! options it has no use for, are refused with one line before anything is
//! built; a short run changes the route under traffic for every variant,
//! in turn, writes one window per change and variant to the results'
//! `details.changes` and leaves no namespace behind; a next hop that
//! changes its MAC silently is found again by the kernel and by the router
//! alike. No timing is asserted (the last waits up to a minute).

use serde_json::Value;
use xnf_testrun::cli::{assert_lab_refuses, lab, namespaces_of};

#[test]
fn bad_options_are_refused_with_one_line_naming_the_flag() {
    assert_lab_refuses(
        "fib-change",
        &[
            (&["--changes", "0"][..], "--changes 0", 1),
            (&["--rate", "10"][..], "--rate 10", 1),
            (&["--variants", "xnf-turbo"][..], "--variants", 2),
            (&["--variants", "kernel,xnf-cache"][..], "--variants: `xnf-cache` is now `xnf` (what `xnf router attach` attaches; `xnf-full` is --fib full)", 2),
            (&["--change", "nexthop-mac", "--timeout", "0"][..], "--timeout 0", 1),
            (&["--seconds", "3"][..], "--seconds: ", 1),
            (&["--zero-loss"][..], "--zero-loss: ", 1),
            (&["--topology", "pair"][..], "--topology: ", 1),
        ],
    );
}

#[test]
fn a_short_run_measures_every_variant_and_leaves_nothing() {
    let json = std::env::temp_dir().join(format!("xnf-lab-fibchange-{}.json", std::process::id()));
    let (out, pid) = lab("fib-change", &["--changes", "2", "--json", json.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!((doc["experiment"].as_str(), doc["options"]["runs"].as_u64()), (Some("fib-change"), Some(2)), "{doc}");
    let results = doc["details"]["changes"].as_array().unwrap();
    let names: Vec<&str> = results.iter().map(|r| r["variant"].as_str().unwrap()).collect();
    assert_eq!(names, ["kernel", "xnf", "xnf-full"]);
    for r in results {
        for key in ["windows_us", "stale", "after_ack_us"] {
            assert_eq!(r[key].as_array().unwrap().len(), 2, "{key} of {}", r["variant"]);
        }
        assert!(stdout.lines().any(|l| l.starts_with(r["variant"].as_str().unwrap())), "no row for {}: {stdout}", r["variant"]);
    }
}

#[test]
fn a_next_hop_that_changes_its_mac_silently_is_found_again_by_the_kernel_and_the_router() {
    let json = std::env::temp_dir().join(format!("xnf-lab-fibchange-mac-{}.json", std::process::id()));
    let args = ["--change", "nexthop-mac", "--changes", "1", "--variants", "kernel,xnf", "--timeout", "60", "--json", json.to_str().unwrap()];
    let (out, pid) = lab("fib-change", &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    for r in doc["details"]["changes"].as_array().unwrap() {
        let rec = r["recovered_us"].as_array().unwrap();
        assert!(rec.len() == 1 && rec[0].is_f64(), "{} did not reach the new MAC within 60 s: {rec:?}\n{stdout}", r["variant"]);
    }
}
