//! `xnf lab fwd-latency` as a user runs it, briefly: bad options are
//! refused with one line before anything is built; a short run sends
//! probes through every variant at every load, records their RTTs, loses
//! none without background load, shows that each variant's own forwarder
//! carried them both ways (and dut's kernel only for the kernel variant),
//! draws the table in the report, and leaves nothing behind. Timing is not
//! asserted (that is the benchmark's job).

use std::process::Command;

use xnf_testrun::cli::{assert_lab_refuses, lab, namespaces_of};

#[test]
fn bad_options_are_refused_with_one_line_naming_the_flag() {
    assert_lab_refuses(
        "fwd-latency",
        &[
            (&["--variants", "bogus"][..], "--variants: no variant `bogus`", 1),
            (&["--variants", "chain,chain"][..], "chain named twice", 1),
            (&["--variants", "kernel,xnf-cache"][..], "--variants: `xnf-cache` is now `xnf` (what `xnf router attach` attaches; `xnf-full` is --fib full)", 1),
            (&["--load", "101%"][..], "a share is 0..=100%", 2),
            (&["--load", "fast"][..], "`fast`: a load is 0", 2),
            (&["--load", "50%,100000"][..], "not both", 1),
            (&["--load-curve", "3"][..], "fwd-latency takes its loads from --load", 1),
            (&["--probe-rate", "0"][..], "--probe-rate 0", 1),
            (&["--ping-cpu", "99"][..], "--ping-cpu 99", 1),
        ],
    );
}

#[test]
fn a_short_run_probes_through_every_variant_and_load() {
    let json = std::env::temp_dir().join(format!("xnf-lab-fwd-latency-{}.json", std::process::id()));
    let html = json.with_extension("html");
    let args = [
        "--runs",
        "1",
        "--seconds",
        "0.3",
        "--warmup",
        "0.1",
        "--trial-seconds",
        "0.3",
        "--load",
        "0,50%",
        "--probe-rate",
        "1000",
        "--json",
        json.to_str().unwrap(),
    ];
    let (out, pid) = lab("fwd-latency", &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    assert!(stdout.contains("round-trip time through the forwarder"), "{stdout}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["experiment"], "fwd-latency");
    let rows = r["details"]["rtt"].as_array().expect("the RTTs in details.rtt");
    assert_eq!(rows.len(), 4 * 3, "4 variants × (full speed, 0, 50%): {rows:?}");
    for v in ["kernel", "xnf", "xnf-full", "chain"] {
        for load in ["full", "0", "50%"] {
            let x = rows.iter().find(|x| x["variant"] == v && x["load"] == load).unwrap_or_else(|| panic!("no {v} at {load}"));
            let (sent, lost, n) = (x["sent"].as_u64().unwrap(), x["lost"].as_u64().unwrap(), x["rtt_us"]["n"].as_u64().unwrap());
            assert!(sent >= 300, "{v}/{load}: {x}");
            assert_eq!(n, sent - lost, "{v}/{load}: an RTT for every answered probe: {x}");
            if load == "full" {
                continue; // overload: probes may be lost, some must not.
            }
            assert!(n > 0, "{v}/{load}: no RTT recorded: {x}");
            let s = &x["rtt_us"];
            let f = |k: &str| s[k].as_f64().unwrap();
            assert!(f("min") > 0.0 && f("median") <= f("p99") && f("p99") <= f("p999") && f("p999") <= f("max"), "{v}/{load}: {s}");
            let (fwd, kernel) = (x["forwarded"].as_u64().unwrap(), x["kernel_forwarded"].as_u64().unwrap());
            // Every answered probe crossed the forwarder twice (there and back).
            assert!(fwd >= 2 * n, "{v}/{load}: its forwarder carried {fwd} frames for {n} answered probes: {x}");
            if v != "kernel" {
                assert!(kernel < n / 10, "{v}/{load}: dut's kernel forwarded {kernel} frames: the probes took the kernel path: {x}");
            }
            if load == "0" {
                assert_eq!(lost, 0, "{v}: probes lost without background load: {x}");
                assert!(x["offered_pps"].as_f64().unwrap() <= 1.0, "{x}");
            }
        }
    }
    let rep = Command::new(xnf_testrun::cli::xnf_bin()).args(["lab", "report", json.to_str().unwrap(), "-o", html.to_str().unwrap()]).output().unwrap();
    assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Round-trip time through the forwarder") && page.contains("xnf-full"), "the RTT table in the report");
    std::fs::remove_file(&json).unwrap();
    std::fs::remove_file(&html).unwrap();
}
