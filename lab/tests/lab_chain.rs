//! `xnf lab chain` as a user runs it: bad options are refused with one line
//! before anything is built; a short run measures every variant at every
//! chain length, says where frames were lost, shows that dut's kernel
//! forwarded nothing for xnf, and leaves nothing behind — also on Ctrl-C;
//! with NFs in podman containers too.

use xnf_testrun::cli::{assert_lab_refuses, interrupt_lab_when, lab, lab_namespace, namespaces_of, rx_packets};

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
            (&["--variants", "xnf-podman-cni", "--queues", "2"][..], "the ptp plugin makes single-queue veths; run it with --queues 1", 1),
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
    assert!(r["params"].as_array().unwrap().iter().any(|p| p["name"] == "nfs"), "the chain length is a described parameter");
    let at = |x: &serde_json::Value, v: &str, n: u64| x["variant"] == v && x["point"]["nfs"] == n;
    let samples = r["samples"].as_array().unwrap();
    for v in ["linux", "xnf", "xnf-linux-nf"] {
        for n in [1, 2] {
            let of: Vec<_> = samples.iter().filter(|s| at(s, v, n)).collect();
            assert_eq!(of.len(), 1, "{v} with {n} NFs: one full-speed sample per run");
            let s = of[0];
            let (sent, received) = (s["sent"].as_i64().unwrap(), s["received"].as_i64().unwrap());
            assert!(received > 0, "{v}/{n}: nothing arrived: {s}");
            let l = &s["loss"];
            let located = l["gen_to_dut"].as_i64().unwrap() + l["in_dut"].as_i64().unwrap() + l["dut_to_sink"].as_i64().unwrap();
            assert_eq!(located, sent - received, "{v}/{n}: the loss locations do not add up: {s}");
            assert!(r["summary"].as_array().unwrap().iter().any(|x| at(x, v, n)), "{v}/{n} has no summary");
        }
    }
    let ratios = r["ratios"].as_array().unwrap();
    for n in [1, 2] {
        for v in ["xnf", "xnf-linux-nf"] {
            assert!(ratios.iter().any(|q| q["numerator"] == v && q["denominator"] == "linux" && q["point"]["nfs"] == n), "no {v} : linux ratio with {n} NFs");
        }
    }
    // Hop by hop: dut's kernel forwards every packet n + 1 times for linux,
    // never for xnf, whose chain routed what it matched in XDP.
    let hops = r["details"]["hops"].as_array().expect("losses hop by hop in the results");
    for n in [1, 2] {
        let of = |v: &str| &hops.iter().find(|h| at(h, v, n)).unwrap_or_else(|| panic!("no hops of {v} with {n} NFs: {hops:?}"))["hops"];
        for v in ["xnf", "xnf-linux-nf"] {
            let h = of(v);
            assert_eq!(h["forwarded"], 0, "{v}/{n}: {h}");
            assert!(h["chain"]["routed"].as_i64().unwrap() > 0, "{v}/{n}: nothing routed in XDP: {h}");
            assert!(h["segments"].as_array().unwrap().iter().any(|s| s[0] == format!("in NF{n}").as_str()), "{h}");
        }
        let h = of("linux");
        let per = h["forwarded"].as_f64().unwrap() / h["received"].as_f64().unwrap();
        assert!((per - (n + 1) as f64).abs() < 0.05, "linux/{n}: dut's kernel should forward every packet {} times: {h}", n + 1);
    }
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert!(notes.iter().any(|x| x.starts_with("xnf, 64 B, 1 flow, 2 NFs: lost inside dut")), "the hop notes name variant and point: {notes:?}");
}

#[test]
fn ctrl_c_removes_the_chain_and_the_namespaces() {
    // Interrupted once dut has the second NF's port: the chain is being made or measured.
    interrupt_lab_when(&["chain", "--length", "2", "--runs", "1", "--seconds", "60", "--variants", "xnf"], "the chain's NFs", |names| {
        names.len() >= 5 && lab_namespace(names, "dut").is_some_and(|dut| rx_packets(dut, "xnf-nf2").is_some())
    });
}

/// CNI results podman cached for lab run `pid`'s network (one per container).
fn cni_cached(pid: u32) -> usize {
    let network = format!("xnflab-{pid}-");
    std::fs::read_dir("/var/lib/cni/results").map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&network)).count()).unwrap_or(0)
}

/// Nothing of the lab run `pid`'s podman is left: its root, its containers' processes, their CNI results.
fn no_podman_left(pid: u32) {
    let root = std::env::temp_dir().join(format!("xnf-podman-lab-{pid}"));
    assert!(!root.exists(), "{} left", root.display());
    let ps = std::process::Command::new("pgrep").args(["-f", &root.display().to_string()]).output().unwrap();
    assert!(ps.stdout.is_empty(), "processes of the lab's containers left: {}", String::from_utf8_lossy(&ps.stdout));
    assert_eq!(cni_cached(pid), 0, "CNI results of the lab's containers left");
}

#[test]
fn nfs_in_podman_containers_carry_the_chain_like_plain_namespaces() {
    let json = std::env::temp_dir().join(format!("xnf-lab-chain-podman-{}.json", std::process::id()));
    let args = [
        "--variants",
        "xnf-linux-nf,xnf-podman,xnf-podman-cni",
        "--length",
        "2",
        "--runs",
        "1",
        "--seconds",
        "1",
        "--warmup",
        "0.5",
        "--json",
        json.to_str().unwrap(),
    ];
    let (out, pid) = lab("chain", &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    no_podman_left(pid);

    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let hops = r["details"]["hops"].as_array().expect("losses hop by hop in the results");
    for v in ["xnf-podman", "xnf-podman-cni"] {
        let s = r["samples"].as_array().unwrap().iter().find(|s| s["variant"] == v).unwrap_or_else(|| panic!("no sample of {v}"));
        let received = s["received"].as_u64().unwrap();
        assert!(received > 0, "{v}: nothing arrived: {s}");
        let h = &hops.iter().find(|h| h["variant"] == v).unwrap_or_else(|| panic!("no hops of {v}"))["hops"];
        // The containers' kernels forwarded, dut's did not: every frame the
        // chain matched went into the first container, what came out of one
        // went into the next (at full speed a container's kernel may drop
        // some; a few frames of its own may come out), and what arrived was
        // routed out in XDP.
        assert_eq!(h["forwarded"], 0, "{v}: {h}");
        let c = &h["chain"];
        let (matched, routed) = (c["matched"].as_u64().unwrap(), c["routed"].as_u64().unwrap());
        let counts: Vec<(u64, u64)> = c["hops"].as_array().unwrap().iter().map(|x| (x[0].as_u64().unwrap(), x[1].as_u64().unwrap())).collect();
        assert_eq!(counts.len(), 2, "{v}: {h}");
        assert!(counts[0].0 >= matched && matched >= received && routed >= received, "{v}: {h}");
        for (i, &(into, out)) in counts.iter().enumerate() {
            assert!(out > 0 && out <= into + 10, "{v}: NF{} in {into} out {out}", i + 1);
        }
        assert!(counts[1].0 + 10 >= counts[0].1, "{v}: NF1's output did not go into NF2: {h}");
        assert!(r["ratios"].as_array().unwrap().iter().any(|q| q["numerator"] == v && q["denominator"] == "xnf-linux-nf"), "no {v} : xnf-linux-nf ratio");
    }
    assert!(stdout.contains("xnf-podman-cni/xnf-linux-nf"), "{stdout}");
}

#[test]
fn ctrl_c_removes_the_containers_too() {
    let pid = std::cell::Cell::new(None);
    interrupt_lab_when(&["chain", "--length", "1", "--runs", "1", "--seconds", "60", "--variants", "xnf-podman-cni"], "the container's NF", |names| {
        let Some(dut) = lab_namespace(names, "dut") else { return false };
        pid.set(dut.strip_prefix("xnf-").and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok()));
        pid.get().is_some_and(|p| cni_cached(p) > 0)
    });
    no_podman_left(pid.get().expect("the lab's pid"));
}
