//! `xnf lab bgp` as a user runs it, over IPv4 and IPv6: BIRD in the peer
//! announces a small table that BIRD on dut installs, a short churn runs while traffic flows
//! through every variant, the stale count is reported per variant — none
//! for the kernel and full lookups, which decide on the FIB as it is when
//! the frame arrives — and nothing is left behind: namespaces, BIRD
//! daemons, their directory. No timing is asserted: the route cache's
//! count depends on when the follower is scheduled (a benchmark's
//! number, see the lab README), so it is reported, not bounded.

use serde_json::Value;
use xnf_testrun::cli::{assert_lab_refuses, lab, namespaces_of};

#[test]
fn bad_options_are_refused_with_one_line_naming_the_flag() {
    assert_lab_refuses(
        "bgp",
        &[
            (&["--routes", "0"][..], "--routes 0", 1),
            (&["--routes", "/nonexistent/rib.txt"][..], "--routes /nonexistent/rib.txt", 1),
            (&["--churn", "fast"][..], "--churn", 2),
            (&["--variants", "kernel,xnf-cache"][..], "--variants: `xnf-cache` is now `xnf` (what `xnf router attach` attaches; `xnf-full` is --fib full)", 2),
        ],
    );
}

/// Processes whose command line mentions `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                out.push(cmd);
            }
        }
    }
    out
}

#[test]
fn bird_installs_the_table_and_traffic_is_forwarded_under_churn() {
    under_churn(false);
}

#[test]
fn the_same_over_ipv6() {
    under_churn(true);
}

/// A short run of every variant (IPv6 when `v6`: table, session, traffic).
fn under_churn(v6: bool) {
    let json = std::env::temp_dir().join(format!("xnf-lab-bgp-{}-{v6}.json", std::process::id()));
    let mut args = vec!["--routes", "1000", "--churn", "1000/s", "--runs", "1", "--seconds", "1", "--warmup", "0.2", "--json", json.to_str().unwrap()];
    if v6 {
        args.push("--ipv6");
    }
    let (out, pid) = lab("bgp", &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    let dir = format!("xnf-bird-{pid}-");
    assert!(processes_with(&dir).is_empty(), "BIRD left running: {:?}", processes_with(&dir));
    let tmp: Vec<_> = std::fs::read_dir(std::env::temp_dir()).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&dir)).collect();
    assert!(tmp.is_empty(), "BIRD's directory left: {tmp:?}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let notes: Vec<&str> = doc["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let family = if v6 { "IPv6" } else { "IPv4" };
    let want = format!("1000 synthetic {family} prefixes + 16 probe prefixes, announced by BIRD over iBGP and installed in dut's kernel by BIRD");
    assert!(notes.iter().any(|n| n.contains(&want)), "{notes:?}");
    for s in doc["summary"].as_array().unwrap() {
        assert!(s["median_mpps"].as_f64().unwrap() > 0.0, "nothing forwarded under churn: {s}");
    }
    let stale = doc["details"]["stale"].as_array().unwrap();
    let names: Vec<&str> = stale.iter().map(|r| r["variant"].as_str().unwrap()).collect();
    assert_eq!(names, ["kernel", "xnf", "xnf-full"]);
    for r in stale {
        assert!(r["changes"].as_u64().unwrap() > 0 && r["received"].as_u64().unwrap() > 0, "no churn or no probes: {r}");
        assert!(r["churn_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["stale"].is_u64() && r["late"].is_u64(), "{r}");
        assert!(stdout.lines().any(|l| l.starts_with(r["variant"].as_str().unwrap())), "no row for {}: {stdout}", r["variant"]);
    }
    for r in stale.iter().filter(|r| r["variant"] != "xnf") {
        assert_eq!(r["late"].as_u64(), Some(0), "a frame followed a route after the kernel had changed it: {r}");
    }
}
