//! `xnf lab chain` as a user runs it: bad options are refused with one line
//! before anything is built; a short run measures every variant at every
//! chain length, says where frames were lost, shows that dut's kernel
//! forwarded nothing for xnf, and leaves nothing behind — also on Ctrl-C.

use std::process::{Command, Stdio};

use xnf_testrun::cli::{assert_lab_refuses, lab, namespaces_of};


#[test]
fn bad_options_are_refused_with_one_line_naming_the_flag() {
    // (arguments, what the message must say, exit status: 2 = usage, 1 = refused)
    assert_lab_refuses(
        "chain",
        &[
            (&["--length", "0"][..], "--length 0", 1),
            (&["--length", "9"][..], "--length 9: a chain has 1..=8 NFs (max 8)", 1),
            (&["--length", "1,1"][..], "--length 1 is listed twice", 1),
            (&["--length", "x"][..], "--length", 2),
            (&["--flows", "0"][..], "--flows 0", 1),
            (&["--size", "63"][..], "--size 63", 1),
            (&["--runs", "0"][..], "--runs", 1),
            (&["--cpu", "999"][..], "--cpu 999", 1),
            (&["--variants", "kernel"][..], "--variants", 2),
        ],
    );
}

#[test]
fn a_short_run_measures_every_variant_and_length_and_leaves_nothing() {
    let json = std::env::temp_dir().join(format!("xnf-lab-chain-{}.json", std::process::id()));
    let (out, pid) = lab("chain", &["--length", "1,2", "--runs", "1", "--seconds", "1", "--warmup", "0.5", "--json", json.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("by chain length"), "{stdout}");
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));

    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(r["experiment"], "chain");
    let samples = r["samples"].as_array().unwrap();
    for v in ["linux", "xnf", "xnf-linux-nf"] {
        for n in [1, 2] {
            let label = format!("{v}/{n}");
            let of: Vec<_> = samples.iter().filter(|s| s["variant"] == label.as_str()).collect();
            assert_eq!(of.len(), 1, "{label}: one full-speed sample per run");
            let s = of[0];
            let (sent, received) = (s["sent"].as_i64().unwrap(), s["received"].as_i64().unwrap());
            assert!(received > 0, "{label}: nothing arrived: {s}");
            let l = &s["loss"];
            let located = l["gen_to_dut"].as_i64().unwrap() + l["in_dut"].as_i64().unwrap() + l["dut_to_sink"].as_i64().unwrap();
            assert_eq!(located, sent - received, "{label}: the loss locations do not add up: {s}");
            assert!(r["summary"].as_array().unwrap().iter().any(|x| x["variant"] == label.as_str()), "{label} has no summary");
        }
    }
    let ratios = r["ratios"].as_array().unwrap();
    for n in [1, 2] {
        for v in ["xnf", "xnf-linux-nf"] {
            assert!(
                ratios.iter().any(|q| q["numerator"] == format!("{v}/{n}").as_str() && q["denominator"] == format!("linux/{n}").as_str()),
                "no {v}/{n} : linux/{n} ratio"
            );
        }
    }
    // Hop by hop: dut's kernel forwards every packet n + 1 times for linux,
    // never for xnf, whose chain routed what it matched in XDP.
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    for n in [1, 2] {
        for v in ["xnf", "xnf-linux-nf"] {
            let note = notes.iter().find(|x| x.starts_with(&format!("{v}/{n},"))).unwrap_or_else(|| panic!("no hop note for {v}/{n}: {notes:?}"));
            assert!(note.contains("dut's kernel forwarded 0 ") && note.contains("routed in XDP"), "{note}");
            assert!(note.contains(&format!("in NF{n}")), "{note}");
        }
        let note = notes.iter().find(|x| x.starts_with(&format!("linux/{n},"))).expect("a hop note for linux");
        let per: f64 = note.split(" per received packet").next().and_then(|h| h.rsplit('(').next()).and_then(|x| x.parse().ok()).unwrap_or_else(|| panic!("{note}"));
        assert!((per - (n + 1) as f64).abs() < 0.05, "linux/{n}: dut's kernel should forward every packet {} times: {note}", n + 1);
    }
}

#[test]
fn ctrl_c_removes_the_chain_and_the_namespaces() {
    let mut child = Command::new(xnf_testrun::cli::xnf_bin())
        .args(["lab", "chain", "--length", "2", "--runs", "1", "--seconds", "60", "--variants", "xnf"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let t0 = std::time::Instant::now();
    // gen, dut, sink and two NFs.
    while namespaces_of(pid).len() < 5 {
        assert!(t0.elapsed().as_secs() < 20, "the namespaces never came up");
        assert!(child.try_wait().unwrap().is_none(), "xnf lab chain exited early");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(3)); // the chain is up and measured
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
}
