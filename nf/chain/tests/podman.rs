//! Network functions in real containers: podman (CNI backend) starts
//! busybox containers on networks of the real `ptp` and `bridge` plugins
//! with `xnf-cni` chained after them, or on a plain network for
//! `xnf nf create --container`; traffic from gen goes through the
//! container's own Linux stack to sink. Podman runs in dut's network
//! namespace (as a runtime on that host would) with a private storage and
//! configuration root under a temporary folder, so the host's containers,
//! networks and global configuration are never touched.

mod common;

use std::path::Path;
use std::process::Command;

use common::{chain_pins, list, nf_names, nf_row, run_plugin, Guard};
use serde_json::{json, Value};
use xnf_chain::podman::{Podman, CNI_PLUGINS};
use xnf_netns::Netns;
use xnf_testrun::cli::{wait_for, xnf_cni_bin, xnf_ok, RoutedLine};

const N: usize = 400;

/// The private podman of [`xnf_chain::podman`], for dut `host`; `tag`
/// names its folder (one per test).
fn podman(host: &Netns, tag: &str) -> Podman {
    Podman::new(&host.path(), tag, &xnf_cni_bin()).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Panics with podman's error.
trait Must<T> {
    fn must(self) -> T;
}

impl<T> Must<T> for anyhow::Result<T> {
    fn must(self) -> T {
        self.unwrap_or_else(|e| panic!("{e:#}"))
    }
}

/// `xnf --netns dut args` with podman's private root in the environment
/// (`--container` asks podman where the container is).
fn xnf_pm(dut: &Netns, pm: &Podman, args: &[&str]) -> String {
    let out = Command::new(xnf_testrun::cli::xnf_bin()).arg("--netns").arg(dut.name()).args(args).envs(pm.env()).output().unwrap();
    assert!(out.status.success(), "xnf {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn chain_stats(dut: &Netns, name: &str) -> Value {
    let s: Value = serde_json::from_str(&xnf_ok(dut, &["chain", "stats", "--json"])).unwrap();
    s["chains"].as_array().unwrap().iter().find(|c| c["name"] == name).cloned().unwrap_or_else(|| panic!("chain {name} in {s}"))
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn chain_state(dut: &Netns, name: &str) -> String {
    list(dut)["chains"].as_array().unwrap().iter().find(|c| c["name"] == name).map(|c| c["state"].as_str().unwrap().to_string()).unwrap()
}

/// A chain `web` from gen's side through `nf` to sink's address.
fn chain_through(line: &RoutedLine, nf: &str) {
    let (i, o) = (line.line.dut_gen_if.clone(), line.line.dut_sink_if.clone());
    let m = format!("dst={}/32", line.line.sink_v4);
    xnf_ok(line.dut(), &["chain", "create", "web", "--ingress", &i, "--egress", &o, "--match", &m, "--nf", nf]);
}

/// N datagrams gen -> sink all arrive, every one counted at the chain's
/// ingress and in and out of its NF, and the container's kernel forwarded them.
fn round_trip(line: &RoutedLine, pm: &Podman, container: &str, ifname: &str) {
    let (before, fwd) = (chain_stats(line.dut(), "web"), pm.forwarded(container).must());
    let dut_fwd = line.forw_v4();
    assert_eq!(line.send_udp(false, N), N, "datagrams through container {container} to sink");
    let after = chain_stats(line.dut(), "web");
    assert_eq!(num(&after["matched"]) - num(&before["matched"]), N as u64, "matched at the ingress: {after}");
    let (ha, hb) = (&after["hops"][0], &before["hops"][0]);
    for k in ["in_packets", "out_packets"] {
        let d = num(&ha[k]) - num(&hb[k]);
        assert!((N as u64..N as u64 + 10).contains(&d), "NF {k}: {d} ({after})");
    }
    assert!(num(&after["routed"]) - num(&before["routed"]) >= N as u64, "routed out in XDP: {after}");
    assert!(pm.forwarded(container).must() - fwd >= N as u64, "the container's kernel did not forward them");
    // Forwarded out of the interface they came in by: redirects are off
    // (all and the NF's interface), which also keeps the kernel on its
    // fast source check (no reverse FIB lookup per packet), and none was sent.
    let pid = pm.inspect(container, "{{.State.Pid}}").must();
    for dev in ["all", ifname] {
        let f = format!("/proc/sys/net/ipv4/conf/{dev}/send_redirects");
        let out = Command::new("nsenter").args(["-t", &pid, "-n", "cat", &f]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{f} in container {container}: {out:?}");
    }
    assert_eq!(pm.snmp(container, "Icmp", "OutRedirects").must(), 0, "the container's kernel sent ICMP redirects");
    assert_eq!(line.forw_v4(), dut_fwd, "dut's kernel forwarded what the chain should have");
}

/// A restarted runtime's CHECK, as libcni does it: every plugin of the
/// network in order, with the result podman cached at ADD as prevResult.
fn check_from_cache(dut: &Netns, pm: &Podman, network: &str, container: &str) {
    let id = pm.inspect(container, "{{.Id}}").must();
    let netns = pm.inspect(container, "{{.NetworkSettings.SandboxKey}}").must();
    let cache: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("/var/lib/cni/results/{network}-{id}-eth0")).expect("podman's CNI cache entry")).unwrap();
    let conflist: Value = serde_json::from_str(&std::fs::read_to_string(pm.path(&format!("net.d/{network}.conflist"))).unwrap()).unwrap();
    let args: Vec<String> = cache["cniArgs"].as_array().unwrap().iter().map(|p| format!("{}={}", p[0].as_str().unwrap(), p[1].as_str().unwrap())).collect();
    let env = [("CNI_CONTAINERID", id), ("CNI_NETNS", netns), ("CNI_IFNAME", "eth0".to_string()), ("CNI_ARGS", args.join(";")), ("CNI_PATH", pm.cni_path())];
    for plugin in conflist["plugins"].as_array().unwrap() {
        let mut conf = plugin.clone();
        conf["cniVersion"] = conflist["cniVersion"].clone();
        conf["name"] = conflist["name"].clone();
        conf["prevResult"] = cache["result"].clone();
        let ty = plugin["type"].as_str().unwrap();
        let bin = if ty == "xnf-cni" { xnf_cni_bin() } else { Path::new(CNI_PLUGINS).join(ty) };
        let (v, status, err) = run_plugin(dut, &bin, "CHECK", &env, &conf.to_string());
        assert_eq!(status, 0, "CHECK of {ty} after the runtime's restart: {v} {err}");
    }
}

/// xnf-cni after a real main plugin: ADD makes the container an NF, a chain
/// carries traffic through its stack, CHECK from the runtime's cache passes,
/// stop (DEL) takes the chain down fail-closed, start (ADD) brings it back.
fn chained_after(main: &str, tag: &str, subnet: &str) {
    let line = RoutedLine::new(&[]);
    line.resolve_sink();
    let dut = line.dut();
    let _g = Guard { host: dut };
    let pm = podman(dut, tag);
    let net = format!("xnf{tag}");
    let mut conf = json!({"type": main, "ipMasq": false, "ipam": pm.ipam(subnet)});
    if main == "bridge" {
        conf["bridge"] = json!(format!("xnfbr{tag}"));
        conf["isGateway"] = json!(true);
    }
    pm.network(&net, conf, true).must();
    let fw = format!("xnf-{tag}");
    pm.start(&fw, &net).must();

    let row = nf_row(dut, &fw).unwrap_or_else(|| panic!("no NF named after container {fw}: {}", list(dut)));
    assert_eq!((row["origin"].as_str(), row["state"].as_str(), row["ifname"].as_str()), (Some("cni"), Some("up"), Some("eth0")), "{row}");
    assert_eq!(row["netns"].as_str().unwrap(), pm.inspect(&fw, "{{.NetworkSettings.SandboxKey}}").must(), "the runtime's namespace path");
    chain_through(&line, &fw);
    round_trip(&line, &pm, &fw, "eth0");

    // Every podman process has exited since ADD (podman has no daemon): a
    // runtime coming back CHECKs the network from its cache.
    check_from_cache(dut, &pm, &net, &fw);

    // Stop: DEL removes the NF, the chain drops its class, nothing bypasses it.
    pm.ok(&["stop", "--time", "0", &fw]).must();
    assert!(nf_row(dut, &fw).is_none(), "DEL left the NF: {}", list(dut));
    assert_eq!(chain_state(dut, "web"), "down");
    let down = |s: &Value| num(&s["ingresses"].as_object().unwrap().values().next().unwrap()["chain-down"]);
    let s0: Value = serde_json::from_str(&xnf_ok(dut, &["chain", "stats", "--json"])).unwrap();
    assert_eq!(line.send_udp(false, 50), 0, "traffic got around the stopped container");
    let s1: Value = serde_json::from_str(&xnf_ok(dut, &["chain", "stats", "--json"])).unwrap();
    assert_eq!(down(&s1) - down(&s0), 50, "dropped as chain-down");

    // Start again (same name, new namespace): ADD brings the chain back up.
    pm.ok(&["start", &fw]).must();
    assert_eq!(chain_state(dut, "web"), "up");
    round_trip(&line, &pm, &fw, "eth0");
    check_from_cache(dut, &pm, &net, &fw);
    pm.ok(&["rm", "--force", "--time", "0", &fw]).must();
    assert!(nf_row(dut, &fw).is_none(), "rm left the NF");
    xnf_ok(dut, &["chain", "delete", "web"]);
    assert!(chain_pins(dut).is_empty(), "pins left: {:?}", chain_pins(dut));
}

#[test]
fn xnf_cni_after_the_real_ptp_plugin() {
    chained_after("ptp", "ptp", "198.18.100.0/24");
}

#[test]
fn xnf_cni_after_the_real_bridge_plugin() {
    chained_after("bridge", "br", "198.18.101.0/24");
}

#[test]
fn container_flag_with_a_podman_container_on_its_own_network() {
    let line = RoutedLine::new(&[]);
    line.resolve_sink();
    let dut = line.dut();
    let _g = Guard { host: dut };
    let pm = podman(dut, "ctr");
    pm.network("xnfctr", json!({"type": "ptp", "ipMasq": false, "ipam": pm.ipam("198.18.102.0/24")}), false).must();
    pm.start("xnf-ctr", "xnfctr").must();
    assert!(list(dut)["nfs"].as_array().unwrap().is_empty(), "a network without xnf-cni made an NF");
    xnf_pm(dut, &pm, &["nf", "create", "fw", "--container", "xnf-ctr", "--forward"]);
    let row = nf_row(dut, "fw").unwrap();
    assert_eq!((row["origin"].as_str(), row["state"].as_str()), (Some("cli"), Some("up")), "{row}");
    // XPS on the NF's end although the container's sysfs is read-only
    // (read here through the container's own mounts).
    let pid = pm.inspect("xnf-ctr", "{{.State.Pid}}").must();
    let ncpu = std::thread::available_parallelism().unwrap().get();
    for q in 0..ncpu.min(2) {
        let f = format!("/sys/class/net/xnf0/queues/tx-{q}/xps_cpus");
        let out = Command::new("nsenter").args(["-t", &pid, "-n", "-m", "cat", &f]).output().unwrap();
        let mask = u64::from_str_radix(&String::from_utf8_lossy(&out.stdout).trim().replace(',', ""), 16).unwrap_or_else(|e| panic!("{f}: {e} {out:?}"));
        let want: u64 = (0..ncpu).filter(|c| c % ncpu == q).map(|c| 1u64 << c).sum();
        assert_eq!(mask, want, "{f}");
    }
    chain_through(&line, "fw");
    round_trip(&line, &pm, "xnf-ctr", "xnf0");
    // The container stops: its namespace and the NF's veth go with it.
    pm.ok(&["stop", "--time", "0", "xnf-ctr"]).must();
    wait_for("the stopped container's NF to be gone", || nf_row(dut, "fw").is_some_and(|r| r["state"] == "gone"));
    assert_eq!(chain_state(dut, "web"), "down");
    xnf_ok(dut, &["chain", "delete", "web"]);
    xnf_ok(dut, &["nf", "delete", "fw"]);
    assert!(chain_pins(dut).is_empty(), "pins left: {:?}", chain_pins(dut));
}

#[test]
fn ten_containers_started_and_removed_at_once() {
    let host = Netns::new("pmhost").expect("host namespace (run as root)");
    let _g = Guard { host: &host };
    let pm = podman(&host, "par");
    pm.network("xnfpar", json!({"type": "ptp", "ipMasq": false, "ipam": pm.ipam("198.18.103.0/24")}), true).must();
    let names: Vec<String> = (0..10).map(|i| format!("xnf-par{i}")).collect();
    std::thread::scope(|s| {
        for n in &names {
            let pm = &pm;
            s.spawn(move || pm.start(n, "xnfpar").must());
        }
    });
    assert_eq!(nf_names(&host), names, "every container is an NF, and only those");
    for n in &names {
        assert_eq!(nf_row(&host, n).unwrap()["state"], "up", "{n}");
        check_from_cache(&host, &pm, "xnfpar", n);
    }
    let ports = host.ip(&["-br", "link"]).unwrap();
    assert_eq!(String::from_utf8_lossy(&ports.stdout).lines().filter(|l| l.starts_with("veth")).count(), 10, "one host port per container");
    std::thread::scope(|s| {
        for n in &names {
            let pm = &pm;
            s.spawn(move || pm.ok(&["rm", "--force", "--time", "0", n]).must());
        }
    });
    assert!(nf_names(&host).is_empty(), "NFs left after the containers went: {:?}", nf_names(&host));
    assert!(chain_pins(&host).is_empty(), "pins left: {:?}", chain_pins(&host));
    let cached =
        std::fs::read_dir("/var/lib/cni/results").map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("xnfpar-")).count()).unwrap_or(0);
    assert_eq!(cached, 0, "podman kept CNI results of removed containers");
}
