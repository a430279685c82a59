//! `xnf lab router --vlan`: on a kernel with 802.1Q, every pattern (none,
//! in, out, both) runs with the kernel and `xnf router` forwarding, and
//! each point's frames reach the sink; on a kernel without it (this
//! project's development host), the tagged patterns are refused in one
//! line before anything is built, and `--vlan none` runs as ever.
//!
//! And the lab's own check, that what reaches the sink is the pattern's:
//! a "forwarder" that sends `out`'s frames untagged fails the run.
//!
//! Functional only: the run is short, and the 6.1 guest that has 802.1Q
//! (`scripts/kernels.sh test 6.1 lab-lab_router_vlan`) is emulated, so its
//! rates mean nothing; what is asserted is which frames arrived.

use serde_json::Value;
use xnf_core::features::Feature;
use xnf_testrun::cli::{assert_lab_refuses, lab, namespaces_of, xnf_bin, TempFiles};

/// A peer that forwards `out`'s frames untagged: the egress addresses and
/// the sink's neighbour back on the veth, the VLAN device down, then `xnf
/// router` (which then routes to the veth); undone by its detach.
fn untagging_peer() -> String {
    let xnf = xnf_bin().display().to_string();
    let untag = "mac=$(ip neigh show 198.18.1.2 dev {out}.200 | cut -d' ' -f3) && ip addr add 198.18.1.1/24 dev {out} && ip neigh replace 198.18.1.2 lladdr $mac nud permanent dev {out} && ip link set {out}.200 down";
    format!("untagging={untag} && {xnf} router attach {{in}} {{out}} --no-follow;{xnf} router detach {{in}} {{out}} && ip link set {{out}}.200 up && ip addr del 198.18.1.1/24 dev {{out}}")
}

/// Runs `xnf lab router ARGS` briefly with kernel and xnf; its results.
fn run(args: &[&str]) -> Value {
    let tmp = TempFiles::new("lab-router-vlan");
    let json = tmp.dir().join("r.json").display().to_string();
    let short = ["--variants", "kernel,xnf", "--runs", "1", "--seconds", "1", "--warmup", "0.2", "--json", &json];
    let (out, pid) = lab("router", &[args, &short[..]].concat());
    assert!(out.status.success(), "xnf lab router {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// (pattern, variant, median Mpps) of every summary row: the pattern is
/// the point's `vlan`, "none" where the point has none.
fn rates(r: &Value) -> Vec<(String, String, f64)> {
    r["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["point"]["vlan"].as_str().unwrap_or("none").to_string(), s["variant"].as_str().unwrap().to_string(), s["median_mpps"].as_f64().unwrap()))
        .collect()
}

#[test]
fn every_pattern_forwards_where_the_kernel_has_802_1q_and_tagged_ones_are_refused_where_not() {
    match Feature::Vlan.probe() {
        Ok(()) => {
            eprintln!("this kernel has 802.1Q: running every pattern");
            // Untagged last: the veths must have had everything given back.
            let r = run(&["--vlan", "in,out,both,none"]);
            let got = rates(&r);
            for pattern in ["none", "in", "out", "both"] {
                for variant in ["kernel", "xnf"] {
                    let rate = got.iter().find(|(p, v, _)| p == pattern && v == variant).map(|g| g.2);
                    assert!(rate.is_some_and(|m| m > 0.0), "--vlan {pattern}, {variant}: no frames reached the sink ({rate:?} Mpps); all: {got:?}");
                }
            }
            let notes = r["notes"].to_string();
            assert!(notes.contains("VLAN 100 from gen, 200 to the sink"), "{notes}");
            // The guests' CPU is QEMU's TCG: these rates are emulated, and say so.
            if std::env::var_os("XNF_GUEST").is_some() {
                assert!(notes.contains("a CPU emulated in software"), "{notes}");
            }
            let peer = untagging_peer();
            let (out, pid) = lab("router", &["--vlan", "out", "--variants", "untagging", "--peer", &peer, "--runs", "1", "--seconds", "1", "--warmup", "0.2"]);
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.trim().lines().last().unwrap_or_default();
            assert_eq!(out.status.code(), Some(1), "{err}{}", String::from_utf8_lossy(&out.stdout));
            assert!(last.contains("--vlan out, untagging: ") && last.contains("lack a VLAN 200 tag") && last.ends_with("dut did not tag its egress"), "{err}");
            assert!(namespaces_of(pid).is_empty(), "left: {:?}", namespaces_of(pid));
        }
        Err(why) => {
            eprintln!("this kernel has no 802.1Q ({why}): checking the refusal, and that --vlan none runs");
            let msg = |p: &str| format!("--vlan {p}: this kernel has no 802.1Q support (module 8021q / CONFIG_VLAN_8021Q");
            let (m_in, m_out, m_both) = (msg("in"), msg("out"), msg("both"));
            assert_lab_refuses(
                "router",
                &[
                    (&["--vlan", "in"][..], m_in.as_str(), 1),
                    (&["--vlan", "none,out"][..], m_out.as_str(), 1),
                    (&["--vlan", "both", "--variants", "kernel"][..], m_both.as_str(), 1),
                    (&["--vlan", "out"][..], "only --vlan none runs here; the 6.1 guest has it (scripts/kernels.sh)", 1),
                ],
            );
            let got = rates(&run(&["--vlan", "none"]));
            assert_eq!(got.len(), 2, "{got:?}");
            assert!(got.iter().all(|(p, _, m)| p == "none" && *m > 0.0), "{got:?}");
        }
    }
}

#[test]
fn bad_vlan_options_are_refused_before_anything_is_built() {
    assert_lab_refuses(
        "router",
        &[
            (&["--vlan", "qinq"][..], "none, in, out or both", 2),
            (&["--vlan", "in,out,in"][..], "--vlan: in named twice", 1),
            (&["--vlan", "in", "--ipv6", "--size", "66"][..], "tagged IPv6 UDP (--vlan in or both) needs at least 70 bytes", 1),
        ],
    );
}
