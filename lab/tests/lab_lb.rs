//! `xnf lab lb` as a user runs it: bad options are refused with one line before anything is built; a short run
//! measures every variant, each delivering to every backend with the loss located, and the disruption part moves
//! exactly the removed backend's flows while the connection table holds, and only a little more without it; real TCP
//! connections through the attached lb break exactly where it sends them elsewhere; the lab's namespaces and xnf's
//! pins go at the end and on Ctrl-C. No timing is asserted.

use std::cell::RefCell;
use std::os::unix::fs::MetadataExt;

use serde_json::Value;
use xnf_testrun::cli::{assert_lab_refuses, interrupt_lab_when, lab, lab_namespace, namespaces_of};

const VARIANTS: [&str; 5] = ["xnf-ipip", "xnf-gue", "xnf-dsr", "nft-jhash", "nft-numgen"];

#[test]
fn bad_options_are_refused_with_one_line_naming_the_flag() {
    assert_lab_refuses(
        "lb",
        &[
            (&["--backends", "0"][..], "--backends 0", 1),
            (&["--backends", "65"][..], "--backends 65", 1),
            (&["--flows", "100003"][..], "--flows 100003", 1),
            (&["--table-size", "65536"][..], "not prime", 1),
            (&["--variants", "ipvs"][..], "--variants", 2),
            (&["--part", "disruption", "--remove", "11"][..], "--remove 11", 1),
            (&["--disruption-backends", "1"][..], "--disruption-backends 1", 1),
            (&["--established", "10000000"][..], "--established 10000000", 1),
            (
                &["--part", "disruption", "--disruption-backends", "65"][..],
                "--disruption-backends 65: the real TCP connections need a namespace per backend",
                1,
            ),
            (&["--tcp-connections", "10001"][..], "--tcp-connections 10001: ", 1),
            (&["--runs", "0"][..], "--runs", 1),
            (&["--part", "disruption", "--zero-loss"][..], "--zero-loss: ", 1),
            (&["--part", "disruption", "--topology", "pair"][..], "--topology pair: ", 1),
            (&["--variants", "katran"][..], "--path tx", 1),
            (&["--variants", "xnf-dsr", "--path", "tx"][..], "xnf-dsr: ", 1),
            (&["--part", "throughput", "--queues", "1,64"][..], "--queues 64: must be 1..=", 1),
            (&["--part", "disruption", "--queues", "2"][..], "--queues 2: the disruption part runs no generator", 1),
        ],
    );
}

/// Runs `xnf lab lb ARGS` briefly and returns its results file read back.
fn short_run(tag: &str, args: &[&str]) -> Value {
    let json = std::env::temp_dir().join(format!("xnf-lab-lb-{tag}-{}.json", std::process::id()));
    let mut all = vec!["--seconds", "1", "--warmup", "0.5", "--json", json.to_str().unwrap()];
    if !args.contains(&"--runs") {
        all.extend_from_slice(&["--runs", "1"]);
    }
    all.extend_from_slice(args);
    let (out, pid) = lab("lb", &all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(r["experiment"], "lb");
    r
}

#[test]
fn every_variant_delivers_to_every_backend_and_a_removal_moves_only_the_removed_backends_flows() {
    let r = short_run("both", &["--backends", "3", "--established", "20000"]);
    let samples = r["samples"].as_array().unwrap();
    for v in VARIANTS {
        let s = samples.iter().find(|s| s["variant"] == v && s["kind"] == "max").unwrap_or_else(|| panic!("no full-speed sample of {v}"));
        let (sent, received) = (s["sent"].as_i64().unwrap(), s["received"].as_i64().unwrap());
        assert!(received > 0, "{v}: nothing delivered: {s}");
        let l = &s["loss"];
        assert_eq!(
            l["gen_to_dut"].as_i64().unwrap() + l["in_dut"].as_i64().unwrap() + l["dut_to_sink"].as_i64().unwrap(),
            sent - received,
            "{v}: the loss locations do not add up: {s}"
        );
        assert_eq!(s["point"]["backends"], 3, "{s}");
        let b = r["details"]["backends"].as_array().unwrap().iter().find(|b| b["variant"] == v).unwrap_or_else(|| panic!("no per-backend counts of {v}"));
        let packets: Vec<u64> = b["packets"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(packets.len(), 3, "{v}: {b}");
        // Each backend gets about a third of 1,024 equal flows; a fifth is far below any plausible share.
        let total: u64 = packets.iter().sum();
        assert!(packets.iter().all(|&p| p * 5 > total), "{v}: a backend got (almost) nothing: {packets:?}");
        if v.starts_with("xnf") {
            assert!(b["forwarded"].as_u64().unwrap() <= 100, "{v}: dut's kernel forwarded the traffic: {b}");
        } else {
            // (The sinks also count the odd IPv6 router solicitation dut sends on a fresh link.)
            assert!(b["forwarded"].as_u64().unwrap() + 20 >= total, "{v}: dut's kernel did not forward what the backends got: {b}");
        }
    }
    let ratios = r["ratios"].as_array().unwrap();
    for n in ["xnf-ipip", "xnf-gue", "xnf-dsr"] {
        for d in ["nft-jhash", "nft-numgen"] {
            assert!(ratios.iter().any(|q| q["numerator"] == n && q["denominator"] == d), "no {n} / {d} ratio");
        }
    }

    let d = &r["details"]["disruption"];
    let u = |o: &Value, k: &str| o[k].as_u64().unwrap_or_else(|| panic!("no {k} in {o}"));
    assert_eq!((d["flows"].as_u64(), d["backends"].as_u64(), d["runs"].as_u64()), (Some(20000), Some(10), Some(1)), "{d}");
    let before = &d["before"];
    assert_eq!(u(before, "model_agrees"), 20000, "the data plane placed flows where the control plane's model says: {before}");
    let removed = u(before, "removed_flows");
    assert!(removed > 1000 && removed < 3000, "the removed backend had about a tenth of the flows: {before}");
    let with = &d["with_table"];
    assert_eq!((u(with, "collateral"), u(with, "removed_moved"), u(with, "removed_flows")), (0, removed, removed), "with the connection table: {with}");
    assert_eq!(u(with, "moved"), removed, "with the connection table only the removed backend's flows move: {with}");
    assert_eq!(u(with, "ct_stale"), removed, "{with}");
    let without = &d["without_table"];
    assert_eq!((u(without, "removed_moved"), u(without, "removed_flows")), (removed, removed), "without the table: {without}");
    let kept = u(without, "kept_flows");
    assert!(u(without, "collateral") * 50 <= kept, "without the table, collateral above 2 % of the kept flows: {without}");
    assert_eq!(u(without, "model_agrees"), 20000, "after the change too: {without}");
    assert!(d["plan"]["collateral_of_kept"].as_f64().unwrap() < 0.02, "{d}");
}

/// On the tx path the balanced packets come back out of dut's ingress to gen's sink: xnf lb sends them in XDP
/// (XDP_TX; dut's kernel forwards nothing), the kernel variant forwards them.
#[test]
fn on_the_tx_path_the_lb_and_the_kernel_send_back_out_of_the_ingress() {
    let r = short_run("tx", &["--part", "throughput", "--path", "tx", "--variants", "xnf-ipip,nft-jhash,xdp-floor"]);
    let samples = r["samples"].as_array().unwrap();
    for v in ["xnf-ipip", "nft-jhash", "xdp-floor"] {
        let s = samples.iter().find(|s| s["variant"] == v && s["kind"] == "max").unwrap_or_else(|| panic!("no full-speed sample of {v}"));
        // With dut on a CPU of its own the generator outruns it: what is
        // lost in front of dut (its ring full) never reached it.
        let (sent, received) = (s["sent"].as_i64().unwrap(), s["received"].as_i64().unwrap());
        let reached = sent - s["loss"]["gen_to_dut"].as_i64().unwrap();
        assert!(received > 0 && received * 2 > reached, "{v}: less than half of what reached dut came back to gen: {s}");
        let b = r["details"]["backends"].as_array().unwrap().iter().find(|b| b["variant"] == v).unwrap();
        let forwarded = b["forwarded"].as_u64().unwrap();
        if v != "nft-jhash" {
            assert!(forwarded <= 100, "{v}: dut's kernel forwarded the traffic: {b}");
        } else {
            assert!(forwarded + 20 >= received as u64, "{v}: dut's kernel did not forward what came back: {b}");
        }
    }
    let floor = r["details"]["backends"].as_array().unwrap().iter().find(|b| b["variant"] == "xdp-floor").unwrap();
    assert_eq!(floor["packets"].as_array().map(Vec::len), Some(1), "xdp-floor balances nothing: one share: {floor}");
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert!(notes.iter().any(|n| n.starts_with("path tx: ")), "{notes:?}");
}

/// IPv6 VIP, backends and clients: xnf lb (ip6ip6) and nftables' ip6 DNAT reach every backend.
#[test]
fn ipv6_reaches_every_backend() {
    let r = short_run("v6", &["--part", "throughput", "--family", "ipv6", "--size", "78", "--backends", "2", "--variants", "xnf-ipip,nft-jhash"]);
    for v in ["xnf-ipip", "nft-jhash"] {
        let b = r["details"]["backends"].as_array().unwrap().iter().find(|b| b["variant"] == v).unwrap_or_else(|| panic!("no per-backend counts of {v}"));
        let packets: Vec<u64> = b["packets"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        let total: u64 = packets.iter().sum();
        assert!(packets.len() == 2 && packets.iter().all(|&p| p * 5 > total), "{v}: {packets:?}");
        let forwarded = b["forwarded"].as_u64().unwrap();
        if v != "nft-jhash" {
            assert!(forwarded <= 100, "{v}: dut's kernel forwarded the traffic: {b}");
        } else {
            assert!(forwarded + 20 >= total, "{v}: dut's kernel (Ip6 OutForwDatagrams) did not forward what the backends got: {b}");
        }
    }
}

/// Two queues: gen sends from CPUs 0 and 1, each CPU's frames on dut's ingress queue of its number; both queues
/// carry traffic, both CPUs deliver it to every backend, and dut's own per-CPU counters, summed, match the sinks.
#[test]
fn two_queues_carry_the_traffic_to_every_backend() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: --queues 2 needs two CPUs");
        return;
    }
    let r = short_run("queues", &["--part", "throughput", "--queues", "2", "--backends", "2", "--variants", "xnf-ipip,nft-jhash"]);
    assert_eq!(r["options"]["queues"], serde_json::json!([2]));
    let u = |v: &Value| -> Vec<u64> { v.as_array().unwrap_or_else(|| panic!("not a list: {v}")).iter().map(|x| x.as_u64().unwrap()).collect() };
    for v in ["xnf-ipip", "nft-jhash"] {
        let s =
            r["samples"].as_array().unwrap().iter().find(|s| s["variant"] == v && s["kind"] == "max").unwrap_or_else(|| panic!("no full-speed sample of {v}"));
        assert_eq!(s["point"]["queues"], 2, "{s}");
        let b = r["details"]["backends"].as_array().unwrap().iter().find(|b| b["variant"] == v).unwrap_or_else(|| panic!("no per-backend counts of {v}"));
        let (packets, queues, cpus) = (u(&b["packets"]), u(&b["queues"]), u(&b["cpus"]));
        let total: u64 = packets.iter().sum();
        assert!(packets.len() == 2 && packets.iter().all(|&p| p * 5 > total), "{v}: a backend got (almost) nothing: {b}");
        // Two generators at full speed, one per queue: each queue well above a tenth of the traffic.
        let into_dut: u64 = queues.iter().sum();
        assert!(queues.len() == 2 && queues.iter().all(|&q| q * 10 > into_dut), "{v}: a queue of dut's ingress carried (almost) nothing: {b}");
        assert!(cpus.len() >= 2 && cpus[0] * 10 > total && cpus[1] * 10 > total, "{v}: a generating CPU delivered (almost) nothing: {b}");
        assert_eq!(cpus.iter().sum::<u64>(), total, "{v}: the sinks' per-CPU counts do not add up to the backends': {b}");
        let run = &b["run"];
        if v == "xnf-ipip" {
            let (sent, delivered) = (run["sent"].as_u64().unwrap(), run["delivered"].as_u64().unwrap());
            assert!(
                sent.abs_diff(delivered) <= (delivered / 100).max(100),
                "{v}: xnf lb's counters summed over CPUs ({sent}) are not what the sinks got ({delivered})"
            );
            assert_eq!(run["ct_entries"], 1024, "{v}: one connection-table entry per flow, whichever CPU saw it: {run}");
            assert!(b["forwarded"].as_u64().unwrap() <= 100, "{v}: dut's kernel forwarded the traffic: {b}");
        } else {
            assert!(b["forwarded"].as_u64().unwrap() + 20 >= total, "{v}: dut's kernel did not forward what the backends got: {b}");
        }
    }
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert!(notes.iter().any(|n| n.starts_with("xnf-ipip, 64 B, 1024 flows, 2 backends, 2 queues: dut's ingress queues ")), "{notes:?}");
    assert!(!notes.iter().any(|n| n.contains("counted") && n.contains("the sinks")), "dut's counters and the sinks disagree: {notes:?}");
}

#[test]
fn the_disruption_part_alone_gives_the_same_outcome_in_every_run() {
    let r = short_run("disruption", &["--part", "disruption", "--runs", "2", "--cpu", "0", "--established", "5000", "--disruption-backends", "5"]);
    let d = &r["details"]["disruption"];
    assert_eq!((d["flows"].as_u64(), d["backends"].as_u64(), d["runs"].as_u64()), (Some(5000), Some(5), Some(2)), "{d}");
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert!(notes.iter().any(|n| n.starts_with("disruption: 5000 flows")), "{notes:?}");
    assert!(!notes.iter().any(|n| n.contains("differ")), "the lb decided the same flows differently in another run: {notes:?}");
    let with = &d["with_table"];
    assert_eq!(with["collateral"].as_u64(), Some(0), "{with}");
    assert_eq!(with["removed_moved"], d["before"]["removed_flows"], "{d}");
    assert!(r["samples"].as_array().unwrap().is_empty(), "the disruption part has no samples");
}

/// Real TCP connections through the attached lb, one backend of four removed: every connection on it breaks by a
/// RST (its next segment reached a backend without its socket), no other does while the connection table holds,
/// and without the table the ones the new table sends elsewhere do — about as many as `xnf lb plan` expects, each
/// one the control plane's model names; the clients and the backends count the same connections. A table of 11
/// entries makes the collateral large enough (12.5 %) to be seen in 400 connections.
#[test]
fn real_connections_break_where_the_lb_sends_them_elsewhere_and_nowhere_else() {
    let args = ["--part", "disruption", "--runs", "2", "--established", "5000", "--disruption-backends", "4", "--table-size", "11", "--tcp-connections", "200"];
    let r = short_run("tcp", &args);
    let d = &r["details"]["disruption"];
    let t = &d["tcp"];
    assert_eq!((t["connections"].as_u64(), t["backends"].as_u64(), t["runs"].as_u64()), (Some(200), Some(4), Some(2)), "{t}");
    assert_eq!(t["removed"], d["removed"], "the connections' service is the test runs'");
    let u = |o: &Value, k: &str| o[k].as_u64().unwrap_or_else(|| panic!("no {k} in {o}"));
    let v = |o: &Value, k: &str| -> Vec<u64> { o[k].as_array().unwrap_or_else(|| panic!("no {k} in {o}")).iter().map(|x| x.as_u64().unwrap()).collect() };
    let plan = d["plan"]["collateral_of_kept"].as_f64().unwrap();
    assert!((0.10..0.15).contains(&plan), "the plan's collateral of a table of 11: {plan}");
    // Within 4 standard deviations of a binomial draw of `kept` flows at the plan's share.
    let near_plan = |collateral: u64, kept: u64| {
        let share = collateral as f64 / kept as f64;
        (share - plan).abs() <= 4.0 * (plan * (1.0 - plan) / kept as f64).sqrt()
    };
    for (name, o) in [("with-table", &t["with_table"]), ("without-table", &t["without_table"])] {
        let n = u(o, "connections");
        assert_eq!(n, 400, "{name}: {o}");
        let removed = u(o, "removed_connections");
        assert!(removed > 50 && removed < 180, "{name}: the removed backend held about a quarter of the connections: {o}");
        assert_eq!(u(o, "removed_broken"), removed, "{name}: every connection on the removed backend breaks: {o}");
        assert_eq!(u(o, "removed_connections") + u(o, "kept_connections"), n, "{o}");
        let broken = u(o, "removed_broken") + u(o, "collateral");
        assert_eq!(u(o, "survived") + broken, n, "{name}: {o}");
        // Broken by the RST of a backend without the socket: no timeouts, no other backend answering.
        assert_eq!((u(o, "reset"), u(o, "timed_out"), u(o, "wrong_backend"), u(o, "failed")), (broken, 0, 0, 0), "{name}: {o}");
        assert!(u(o, "backend_rsts") >= broken && u(o, "backend_rsts") <= 2 * broken, "{name}: the backends sent the RSTs: {o}");
        assert_eq!((u(o, "model_before"), u(o, "model_agrees")), (n, n), "{name}: the control plane's model names every backend and fate: {o}");
        // Both sides count: what the clients saw is what the backends accepted and answered.
        let per_backend = v(o, "per_backend");
        assert_eq!((per_backend.len(), per_backend[0]), (4, removed), "{name}: the removed backend is the first: {o}");
        assert_eq!(v(o, "accepted"), per_backend, "{name}: {o}");
        assert_eq!(v(o, "answered_before"), per_backend, "{name}: {o}");
        let after = v(o, "answered_after");
        assert_eq!((after.iter().sum::<u64>(), after[0]), (u(o, "survived"), 0), "{name}: answers after the change, none from the removed backend: {o}");
        assert_eq!(v(o, "decapsulated_after")[0], 0, "{name}: nothing reached the removed backend after the change: {o}");
        assert!(v(o, "decapsulated_after").iter().sum::<u64>() >= n, "{name}: every request went through a backend's decap: {o}");
        // The lb sent every client segment and none of the replies; dut's kernel forwarded those.
        assert_eq!(u(o, "lb_to_kernel"), 0, "{name}: {o}");
        assert!(u(o, "lb_redirected") >= 4 * n && u(o, "replies_forwarded") >= 3 * n, "{name}: {o}");
    }
    let (with, without) = (&t["with_table"], &t["without_table"]);
    assert_eq!(u(with, "collateral"), 0, "the connection table keeps every other connection: {with}");
    assert_eq!(u(with, "ct_stale"), u(with, "removed_connections"), "{with}");
    assert_eq!(u(without, "flushed"), 400, "{without}");
    assert!(u(without, "collateral") > 0, "without the table some connections move: {without}");
    assert!(near_plan(u(without, "collateral"), u(without, "kept_connections")), "without the table the collateral is the plan's {plan}: {without}");
    // The test runs of the same change, beside them.
    let (w, wo) = (&d["with_table"], &d["without_table"]);
    assert_eq!(u(w, "collateral"), 0, "{w}");
    assert!(near_plan(u(wo, "collateral"), u(wo, "kept_flows")), "test runs: {wo}");
    let stdout_note = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .any(|n| n.starts_with("disruption, real TCP connections: 200 per variant and run, 2 run(s); "));
    assert!(stdout_note, "{}", r["notes"]);
}

/// The inode of a named network namespace: its pins live under /sys/fs/bpf/xnf/net-<inode>.
fn inode(ns: &str) -> Option<u64> {
    std::fs::metadata(format!("/run/netns/{ns}")).ok().map(|m| m.ino())
}

/// Whether `dev` (a name ending so) in `ns` runs an XDP program.
fn has_xdp(ns: &str, dev: &str) -> bool {
    let out = std::process::Command::new("ip").args(["-n", ns, "-j", "link", "show"]).output().expect("running ip");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v.as_array().into_iter().flatten().any(|l| l["ifname"].as_str().is_some_and(|n| n.ends_with(dev)) && !l["xdp"].is_null())
}

/// TCP connections established in namespace `ns` now (`Tcp CurrEstab`).
fn established(ns: &str) -> u64 {
    let out = std::process::Command::new("ip").args(["netns", "exec", ns, "cat", "/proc/net/snmp"]).output().expect("running ip netns exec");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(head), Some(values)) = (tcp.next(), tcp.next()) else { return 0 };
    head.split_whitespace().zip(values.split_whitespace()).find(|(k, _)| *k == "CurrEstab").and_then(|(_, v)| v.parse().ok()).unwrap_or(0)
}

/// Interrupted while the real connections are being opened (the lb attached to dut's backend ports, decap in the
/// backends): both go with the namespaces.
#[test]
fn ctrl_c_during_the_real_connections_removes_the_lb_and_decap() {
    let inodes = RefCell::new(None);
    let args = ["lb", "--part", "disruption", "--runs", "1", "--established", "1000", "--disruption-backends", "4", "--tcp-connections", "9000"];
    interrupt_lab_when(&args, "the real connections opening through the lb", |names| {
        let (Some(gen), Some(dut), Some(be)) = (lab_namespace(names, "gen"), lab_namespace(names, "dut"), lab_namespace(names, "be4")) else { return false };
        let ready = has_xdp(dut, "bk4") && has_xdp(be, "be") && established(gen) > 100;
        if ready {
            *inodes.borrow_mut() = Some([inode(dut), inode(be)]);
        }
        ready
    });
    for ino in inodes.take().expect("the namespaces' inodes") {
        let ino = ino.expect("an inode");
        assert!(!std::path::Path::new(&format!("/sys/fs/bpf/xnf/net-{ino}")).exists(), "xnf's pins of net-{ino} were left behind");
    }
}

#[test]
fn ctrl_c_removes_the_lb_and_the_namespaces() {
    let dut_inode = RefCell::new(None);
    interrupt_lab_when(&["lb", "--part", "throughput", "--variants", "xnf-ipip", "--runs", "1", "--seconds", "60"], "xnf lb attached in dut", |names| {
        let Some(dut) = lab_namespace(names, "dut") else { return false };
        let ready = lab_namespace(names, "be4").is_some() && has_xdp(dut, "in") && has_xdp(dut, "bk4");
        if ready {
            *dut_inode.borrow_mut() = inode(dut);
        }
        ready
    });
    let ino = dut_inode.take().expect("dut's inode");
    assert!(!std::path::Path::new(&format!("/sys/fs/bpf/xnf/net-{ino}")).exists(), "xnf's pins of dut were left behind");
}
