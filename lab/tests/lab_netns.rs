//! `xnf lab` leaves nothing behind, also when interrupted.

use std::process::{Command, Stdio};

use xnf_testrun::cli::{interrupt_lab_when, lab_namespace, namespaces_of, rx_packets};

/// `--prog-stats` times every BPF program that runs on the machine: a
/// test reading them runs alone among those that run xnf's programs.
static XNF_PROGRAMS: std::sync::RwLock<()> = std::sync::RwLock::new(());

#[test]
fn ctrl_c_removes_the_lab_topology() {
    let _running_xnf = XNF_PROGRAMS.read().unwrap_or_else(|e| e.into_inner());
    interrupt_lab_when(&["router", "--runs", "1", "--seconds", "30"], "traffic into dut", |names| {
        lab_namespace(names, "dut").and_then(|dut| rx_packets(dut, "xnfin")).is_some_and(|n| n > 1000)
    });
}

/// Runs `xnf ARGS`; returns (success, stderr) and checks nothing was left.
fn xnf_fails(args: &[&str]) -> (bool, String) {
    let child = Command::new(xnf_testrun::cli::xnf_bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(namespaces_of(pid).is_empty(), "{args:?} left namespaces");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_lab_options_fail_at_once_with_one_line() {
    for (args, want) in [
        (&["router", "--size", "10"][..], "--size 10: sizes must be 64..=1518"),
        (&["router", "--size", "2000"][..], "--size 2000"),
        (&["router", "--size", "64,x"][..], "`x`"),
        (&["router", "--ipv6", "--size", "64"][..], "at least 66"),
        (&["router", "--flows", "70000"][..], "--flows 70000"),
        (&["router", "--flows", "0"][..], "--flows 0"),
        (&["router", "--queues", "64"][..], "--queues 64"),
        (&["router", "--runs", "0"][..], "--runs must be"),
        (&["router", "--seconds", "0"][..], "--seconds must be"),
        (&["router", "--cpu", "999"][..], "does not exist"),
        (&["router", "--zero-loss", "100"][..], "tolerance"),
        (&["router", "--size", "-5"][..], "-5"),
        (&["router", "--netfilter", "maybe"][..], "off, on or both"),
        (&["router", "--variants", "bogus"][..], "bogus"),
        (&["router", "--frobnicate"][..], "--frobnicate"),
        (&["router", "--topology", "no-such-scenario"][..], "built-in scenarios: line, pair"),
        (&["actions", "--size", "63"][..], "--size 63"),
        (&["actions", "--flows", "99999"][..], "--flows 99999"),
        (&["actions", "--variants", "xdp-frobnicate"][..], "xdp-frobnicate"),
        (&["no-such-experiment"][..], "no-such-experiment"),
    ] {
        let mut full = vec!["lab"];
        full.extend_from_slice(args);
        let (ok, err) = xnf_fails(&full);
        assert!(!ok, "{args:?} was accepted");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn bad_topology_files_name_the_line_and_field() {
    let dir = std::env::temp_dir().join(format!("xnf-topo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[[namespace]]\nname = \"a\"\n\n[[link]]\na = \"a:x\"\nb = \"a:y\"\nqueus = 2\n").unwrap();
    let (ok, err) = xnf_fails(&["lab", "router", "--topology", file.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad.toml") && err.contains("line 7") && err.contains("unknown field `queus`"), "{err}");
    std::fs::write(&file, "[[namespace]]\nname = \"a\"\n[[link]]\na = \"a:x\"\nb = \"a:y\"\na_addr = [\"10.1.1.1/24\"]\n").unwrap();
    let (ok, err) = xnf_fails(&["lab", "up", "--check", file.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("link 1") && err.contains("not a test address"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The built-in line with `extra` appended (more routes, functions...).
fn line_with(extra: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let out = Command::new(xnf_testrun::cli::xnf_bin()).args(["lab", "up", "--print", "line"]).output().unwrap();
    assert!(out.status.success());
    let dir = std::env::temp_dir().join(format!("xnf-topo-{}-{}", std::process::id(), extra.len()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("line.toml");
    std::fs::write(&file, format!("{}\n{extra}", String::from_utf8_lossy(&out.stdout))).unwrap();
    (dir, file)
}

#[test]
fn a_topology_failing_half_way_through_its_build_leaves_nothing() {
    // Valid as a file; the kernel refuses the route (no such gateway on
    // the link) after the namespaces and links exist.
    let (dir, file) = line_with("[[route]]\nns = \"dut\"\nto = \"198.19.0.0/16\"\nvia = \"198.18.9.9\"\n");
    let (ok, err) = xnf_fails(&["lab", "router", "--topology", file.to_str().unwrap(), "--runs", "1", "--seconds", "0.2"]);
    assert!(!ok, "an unreachable gateway was accepted");
    assert!(err.contains("198.19.0.0/16"), "the error names the route: {err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn synthetic_route_tables_are_installed_looked_up_and_removed() {
    let _running_xnf = XNF_PROGRAMS.read().unwrap_or_else(|e| e.into_inner());
    // In a topology file (stay with the namespace) ...
    let (dir, file) = line_with("[[route]]\nns = \"dut\"\nto = \"synthetic-ipv4\"\ncount = 5000\nvia = \"198.18.1.2\"\ndev = \"out\"\n");
    let (v, csv) = run_experiment(&["router", "--topology", file.to_str().unwrap(), "--variants", "xnf", "--flows", "100"]);
    check_accounting(&v, &csv);
    std::fs::remove_dir_all(&dir).unwrap();
    // ... and swept by the experiment, the flows spread over the table's
    // prefixes, every frame forwarded by a route of the table.
    let (v, csv) = run_experiment(&["router", "--routes", "10000", "--flows", "100", "--variants", "kernel,xnf"]);
    check_accounting(&v, &csv);
    for s in v["samples"].as_array().unwrap() {
        assert_eq!(s["point"]["routes"], 10000, "{s}");
        // The frames that reached dut were forwarded: a destination without
        // a route is dropped inside dut, all of its frames. (Not "none
        // lost": under overload a full veth ring drops a few, before dut
        // or at its egress.)
        let (in_dut, sent) = (s["loss"]["in_dut"].as_i64().unwrap(), s["sent"].as_i64().unwrap());
        assert!(s["received"].as_u64().unwrap() > 0 && in_dut * 100 < sent, "{} lost frames inside dut: {s}", s["variant"]);
    }
}

/// Runs a short experiment and returns its JSON and CSV.
fn run_experiment(args: &[&str]) -> (serde_json::Value, String) {
    // One folder per run: tests run in parallel, several of the same experiment.
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("xnf-lab-test-{}-{}-{n}", std::process::id(), args[0]));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, csv) = (dir.join("r.json"), dir.join("r.csv"));
    let out = Command::new(xnf_testrun::cli::xnf_bin())
        .arg("lab")
        .args(args)
        .args(["--runs", "1", "--seconds", "0.5", "--warmup", "0.2", "--trial-seconds", "0.3"])
        .args(["--json", json.to_str().unwrap(), "--csv", csv.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "xnf lab {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("median Mpps"), "no summary printed");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let csv = std::fs::read_to_string(&csv).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (v, csv)
}

/// Checks what every results file must satisfy, whatever the timing.
fn check_accounting(v: &serde_json::Value, csv: &str) {
    let samples = v["samples"].as_array().unwrap();
    assert!(!samples.is_empty());
    assert_eq!(csv.lines().count(), samples.len() + 1, "one CSV row per sample");
    for s in samples {
        let (sent, received) = (s["sent"].as_i64().unwrap(), s["received"].as_i64().unwrap());
        assert!(sent > 0, "nothing sent: {s}");
        let l = &s["loss"];
        let located = l["gen_to_dut"].as_i64().unwrap() + l["in_dut"].as_i64().unwrap() + l["dut_to_sink"].as_i64().unwrap();
        assert_eq!(located, sent - received, "loss by location must add up to sent - received: {s}");
        for c in s["cpus"].as_array().unwrap() {
            let part = c["user_pct"].as_f64().unwrap() + c["system_pct"].as_f64().unwrap() + c["softirq_pct"].as_f64().unwrap();
            let busy = c["busy_pct"].as_f64().unwrap();
            assert!(part <= busy + 1e-6 && busy <= 100.0 + 1e-6, "CPU shares: {c}");
        }
    }
    assert!(!v["machine"]["kernel"].as_str().unwrap().is_empty());
    assert!(v["machine"]["cores"].as_u64().unwrap() >= 1);
}

#[test]
fn router_experiment_measures_every_variant_and_kind() {
    let _running_xnf = XNF_PROGRAMS.read().unwrap_or_else(|e| e.into_inner());
    let (v, csv) = run_experiment(&["router", "--load-curve", "2", "--zero-loss", "5"]);
    check_accounting(&v, &csv);
    let samples = v["samples"].as_array().unwrap();
    for variant in ["kernel", "xnf", "dut-drop"] {
        let of = |kind: &str| samples.iter().filter(|s| s["variant"] == variant && s["kind"] == kind).count();
        assert_eq!(of("max"), 1, "{variant}");
        assert_eq!(of("load"), 2, "{variant}");
        assert!(of("search") >= 1, "{variant}");
        let max = samples.iter().find(|s| s["variant"] == variant && s["kind"] == "max").unwrap();
        assert!(max["received"].as_u64().unwrap() > 0, "{variant} received nothing");
    }
    assert_eq!((v["ratios"][0]["numerator"].as_str(), v["ratios"][0]["denominator"].as_str()), (Some("xnf"), Some("kernel")));
    let names: Vec<&str> = v["params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["size", "flows", "ipv6", "routes", "queues", "netfilter"]);
    for s in samples.iter().filter(|s| s["kind"] == "load") {
        assert!((1..=2).contains(&s["step"].as_u64().unwrap()), "a load step 1..=2: {s}");
    }
    let head = csv.lines().next().unwrap();
    assert!(head.contains(",variant,size,flows,ipv6,routes,queues,netfilter,run,kind,step,"), "{head}");
    assert!(v["summary"].as_array().unwrap().iter().all(|s| s["zero_loss_mpps"].is_number()));
    // The path's interfaces as their drivers describe them.
    let nics: Vec<(&str, &str)> =
        v["machine"]["nics"].as_array().unwrap().iter().map(|n| (n["role"].as_str().unwrap(), n["driver"].as_str().unwrap())).collect();
    assert_eq!(nics, [("gen", "veth"), ("dut_in", "veth"), ("dut_out", "veth"), ("sink", "veth")]);
    // dut's ingress on a CPU of its own (--dut-cpu auto) where there is
    // one: its CPU per packet measured apart, the placement said.
    let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    if v["machine"]["cores"].as_u64().unwrap() >= 2 {
        assert!(notes.iter().any(|n| n.contains("dut's ingress served on CPU 0 (threaded NAPI, pinned); the sink's on CPU 1")), "{notes:?}");
        for s in samples.iter().filter(|s| s["kind"] == "max") {
            let dut = s["dut_ns_per_packet"].as_f64().unwrap_or_else(|| panic!("no dut CPU per packet: {s}"));
            assert!(dut > 1.0 && dut < s["ns_per_packet"].as_f64().unwrap(), "dut's CPU per packet is a part of the whole: {s}");
        }
        assert!(csv.lines().next().unwrap().contains(",dut_ns_per_packet,nic_drops"));
        // Loss in front of dut is where the drivers saw it: gen's veth
        // could not hand frames to dut's full ring.
        for s in samples.iter().filter(|s| s["kind"] == "max" && s["loss"]["gen_to_dut"].as_i64().unwrap() > 0) {
            let seen = s["nic_drops"]["gen:xnfgen:tx_queue_0_xdp_xmit_errors"].as_i64().unwrap_or(0);
            let lost = s["loss"]["gen_to_dut"].as_i64().unwrap();
            assert!((seen - lost).abs() <= 1 + s["sent"].as_i64().unwrap() / 1000, "gen's full-ring drops {seen} vs {lost} lost in front of dut: {s}");
        }
    } else {
        println!("skipped: dut on a CPU of its own needs 2 CPUs, this machine has 1");
    }
}

/// `--profile counts --prog-stats`: the twin interval times each BPF
/// program, and the path's XDP programs' own time comes per variant.
#[test]
fn prog_stats_time_each_variants_programs_in_the_profiled_twin() {
    let _alone = XNF_PROGRAMS.write().unwrap_or_else(|e| e.into_inner());
    let (v, csv) = run_experiment(&["router", "--variants", "xnf,dut-drop", "--profile", "counts", "--prog-stats"]);
    check_accounting(&v, &csv);
    let profiles = v["profiles"].as_array().unwrap();
    for variant in ["xnf", "dut-drop"] {
        let p = profiles.iter().find(|p| p["variant"] == variant).unwrap_or_else(|| panic!("no profile of {variant}"));
        let progs = p["profile"]["xdp_programs"].as_array().unwrap();
        // The generator's program is not the path's; dut's (and, when
        // frames get there, the sink's) are.
        let path: Vec<&serde_json::Value> = progs.iter().filter(|x| x["name"] != "xnf_gen").collect();
        let ns: u64 = path.iter().map(|x| x["ns"].as_u64().unwrap()).sum();
        assert!(!path.is_empty() && path.iter().all(|x| x["runs"].as_u64().unwrap() > 0), "{variant}: {progs:?}");
        let per_packet = p["xdp_ns_per_packet"].as_f64().unwrap();
        assert!(per_packet > 0.0 && (per_packet - ns as f64 / p["packets"].as_f64().unwrap()).abs() < 1e-6, "{variant}: {p}");
    }
    let entry = |variant: &str| {
        profiles.iter().find(|p| p["variant"] == variant).unwrap()["profile"]["xdp_programs"].as_array().unwrap().iter().any(|x| x["name"] == "xnf_entry")
    };
    assert!(entry("xnf") && !entry("dut-drop"), "xnf runs behind its entry program, dut-drop does not");
}

#[test]
fn actions_experiment_counts_every_verdict_where_it_lands() {
    let (v, csv) = run_experiment(&["actions"]);
    check_accounting(&v, &csv);
    for variant in ["xdp-drop", "xdp-pass", "xdp-tx", "xdp-redirect", "xdp-cpumap", "linux-drop"] {
        let s = v["samples"].as_array().unwrap().iter().find(|s| s["variant"] == variant).unwrap_or_else(|| panic!("no {variant} sample"));
        assert!(s["received"].as_u64().unwrap() > 0, "{variant}: nothing arrived where it is counted: {s}");
    }
}

/// `--nic`: a knob veth has (offloads) is a sweep dimension; one it lacks
/// (ring sizes, coalescing, RSS) is said once and its points skipped.
#[test]
fn nic_knobs_sweep_and_those_veth_lacks_are_said_and_skipped() {
    let (v, csv) = run_experiment(&["router", "--variants", "kernel", "--nic", "gro=off,on"]);
    check_accounting(&v, &csv);
    let gro: Vec<&serde_json::Value> = v["samples"].as_array().unwrap().iter().map(|s| &s["point"]["gro"]).collect();
    assert_eq!(gro, [&serde_json::json!(false), &serde_json::json!(true)], "one point per value");
    assert_eq!(v["options"]["nic"][0]["name"], "gro");
    let (v, _) = run_experiment(&["router", "--variants", "kernel", "--nic", "rx-ring=256,1024", "--nic", "rx-usecs=0"]);
    assert!(v["samples"].as_array().unwrap().is_empty(), "veth has no rings: nothing measured");
    let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).filter(|n| n.contains("every point with it skipped")).collect();
    assert_eq!(notes.len(), 1, "said once: {notes:?}");
    assert!(notes[0].starts_with("rx-ring: xnfin's driver does not have it (`ethtool -G DEV rx N`:"), "{notes:?}");
    let (v, _) = run_experiment(&["router", "--variants", "kernel", "--nic", "rss-queues=1,2"]);
    assert!(v["samples"].as_array().unwrap().is_empty(), "veth has no RSS table: nothing measured");
    let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).filter(|n| n.contains("every point with it skipped")).collect();
    assert_eq!(notes.len(), 1, "said once: {notes:?}");
    assert!(notes[0].starts_with("rss-queues: the driver has no RSS indirection table"), "{notes:?}");
}
