//! `xnf lab stack` and `--profile` as a user runs them: bad options are
//! refused with one line before anything is built; a short run profiles
//! every variant at an offered rate and at full speed, the kernel's path
//! shows its stages while the XDP drop shows none, the stack's drops are
//! named, the co-runner's baseline and rates are kept, the iperf3 baseline
//! (where iperf3 is installed) is measured and profiled at the offered
//! rate, flame graphs are written, and the lab's namespaces go at the end.
//! No timing is asserted.

use serde_json::Value;
use xnf_testrun::cli::{assert_lab_refuses, lab, namespaces_of};

#[test]
fn bad_options_are_refused_with_one_line_naming_the_flag() {
    assert_lab_refuses(
        "stack",
        &[
            (&["--load-rates", "0"][..], "--load-rates", 1),
            (&["--load-rates", "100000", "--load-curve", "3"][..], "--load-rates and --load-curve", 1),
            (&["--stack-cpu", "1"][..], "--stack-cpu 1", 1),
            (&["--stack-cpu", "9"][..], "--stack-cpu 9", 1),
            (&["--variants", "tcp"][..], "--variants", 2),
        ],
    );
    assert_lab_refuses(
        "router",
        &[
            (&["--flame", "/tmp/x"][..], "--flame needs --profile", 1),
            (&["--profile", "all"][..], "--profile", 2),
            (&["--prog-stats"][..], "--prog-stats needs --profile", 1),
        ],
    );
}

#[test]
fn a_short_run_profiles_the_kernel_path_and_the_xdp_drop_side_by_side() {
    let json = std::env::temp_dir().join(format!("xnf-lab-stack-{}.json", std::process::id()));
    let flames = std::env::temp_dir().join(format!("xnf-lab-stack-flames-{}", std::process::id()));
    let args = [
        "--runs",
        "1",
        "--seconds",
        "1",
        "--warmup",
        "0.5",
        "--trial-seconds",
        "1",
        "--load-rates",
        "50000",
        "--variants",
        "no-socket,xdp-drop",
        "--json",
        json.to_str().unwrap(),
        "--flame",
        flames.to_str().unwrap(),
    ];
    let (out, pid) = lab("stack", &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    assert!(stdout.contains("where the time went") && stdout.contains("the receive path by offered rate"), "{stdout}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(r["experiment"], "stack");
    let profiles = r["profiles"].as_array().expect("profiles");
    let iperf3 = std::process::Command::new("iperf3").arg("--version").output().is_ok_and(|o| o.status.success());
    // Each variant: full speed and the one offered rate; iperf3: the offered rate.
    assert_eq!(profiles.len(), if iperf3 { 5 } else { 4 }, "{profiles:?}");
    let at = |v: &str| profiles.iter().find(|p| p["variant"] == v && p["offered_pps"] == 50000.0).unwrap_or_else(|| panic!("no profile of {v} at 50 kpps"));
    let stage = |p: &Value, name: &str| p["stages"].as_array().unwrap().iter().find(|s| s[0] == name).map(|s| s[1].as_f64().unwrap()).unwrap();
    let (kernel, xdp) = (at("no-socket"), at("xdp-drop"));
    assert!(stage(kernel, "ip-rcv") > 0.0 && stage(kernel, "gro") > 0.0, "the stack's stages: {}", kernel["stages"]);
    // An XDP drop never reaches the stack. The profile covers every
    // namespace: the odd IPv6 control packet of the lab's interfaces (a
    // router solicitation, an MLD report) may fall into the interval,
    // microseconds against the kernel path's ~1 µs per frame.
    let stack = |p: &Value| stage(p, "ip-rcv") + stage(p, "gro") + stage(p, "local");
    assert!(stack(xdp) < 0.02 * stack(kernel), "an XDP drop never reaches the stack: {} against {}", xdp["stages"], kernel["stages"]);
    let drops = kernel["profile"]["drops"].as_array().unwrap();
    assert!(drops.iter().any(|d| d["reason"] == "NO_SOCKET"), "the stack's drops by name: {drops:?}");
    assert!(kernel["corunner_per_s"].as_f64().unwrap() > 0.0, "{kernel}");
    assert!(r["details"]["baselines"].as_object().is_some_and(|b| b.values().all(|v| v.as_f64().unwrap() > 0.0)), "{}", r["details"]);
    assert_eq!(r["details"]["stack"].as_array().unwrap().len(), if iperf3 { 3 } else { 2 });
    if iperf3 {
        // The baseline: a user-space sender into iperf3's socket, at the offered rate.
        let samples: Vec<&Value> = r["samples"].as_array().unwrap().iter().filter(|s| s["variant"] == "iperf3").collect();
        assert_eq!(samples.iter().map(|s| s["offered_pps"].as_f64()).collect::<Vec<_>>(), [Some(50000.0)], "{samples:?}");
        for s in &samples {
            let (sent, received) = (s["sent"].as_u64().unwrap(), s["received"].as_u64().unwrap());
            assert!(received > 0 && received <= sent, "{s}");
            assert!(s["corunner_per_s"].as_f64().unwrap() > 0.0, "{s}");
        }
        let p = at("iperf3");
        assert!(p["packets"].as_u64().unwrap() > 0, "{p}");
        assert!(stage(p, "ip-rcv") + stage(p, "local") > 0.0, "the socket path's stages: {}", p["stages"]);
        assert!(stdout.lines().any(|l| l.starts_with("iperf3 ")), "the stack table's iperf3 row: {stdout}");
    } else {
        assert!(r["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("iperf3 not installed")), "{}", r["notes"]);
    }
    for p in profiles {
        let f = p["flame"].as_str().unwrap_or_else(|| panic!("no flame graph: {p}"));
        assert!(std::fs::read_to_string(f).unwrap().starts_with("<svg") || std::fs::read_to_string(f).unwrap().starts_with("<?xml"), "{f}");
    }
    std::fs::remove_dir_all(&flames).unwrap();
}
