//! `xnf-cni` driven exactly as a container runtime drives it: the binary
//! started in the runtime's ("host") namespace with the CNI_* variables
//! and the network configuration on stdin. The main plugin (ptp) is played
//! by the test: a veth pair between the host and a pod namespace, and a
//! ptp-like prevResult.

mod common;

use common::{chain_pins, cni, fails, list, nf_row, ok, run_plugin_with, xdp_prog, Guard};
use serde_json::{json, Value};
use xnf_netns::{ifname, veth, Netns};
use xnf_testrun::cli::xnf_ok;

/// A pod as the main plugin left it: its namespace, the veth (host end in
/// the host namespace), addresses and the plugin's result.
struct Pod {
    ns: Option<Netns>,
    path: String,
    ifname: String,
    host_if: String,
    id: String,
    prev: Value,
}

impl Pod {
    /// `n` picks the pod's /24 in 198.18.0.0/15.
    fn new(host: &Netns, n: u8) -> Pod {
        let ns = Netns::new(&format!("pod{n}")).expect("pod namespace (run as root)");
        let (host_if, pod_if) = (ifname("veth"), ifname("eth"));
        veth(host, &host_if, &ns, &pod_if, None).expect("veth pair");
        let (addr, gw) = (format!("198.18.{n}.2"), format!("198.18.{n}.1"));
        ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", &pod_if]).unwrap();
        ns.ip(&["link", "set", &pod_if, "up"]).unwrap();
        ns.ip(&["route", "add", "default", "via", &gw, "dev", &pod_if]).unwrap();
        host.ip(&["addr", "add", &format!("{gw}/32"), "dev", &host_if]).unwrap();
        host.ip(&["link", "set", &host_if, "up"]).unwrap();
        host.ip(&["route", "add", &format!("{addr}/32"), "dev", &host_if]).unwrap();
        let path = ns.path().display().to_string();
        let prev = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": host_if, "mac": "02:00:00:00:00:01"},
                {"name": pod_if, "mac": "02:00:00:00:00:02", "sandbox": path}
            ],
            "ips": [{"address": format!("{addr}/24"), "gateway": gw, "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {}
        });
        Pod { ns: Some(ns), path, ifname: pod_if, host_if, id: format!("c0ffee{n:02}deadbeef"), prev }
    }

    fn ns(&self) -> &Netns {
        self.ns.as_ref().expect("pod namespace still exists")
    }

    /// The network configuration a runtime hands the second plugin of a conflist.
    fn conf(&self, extra: Value) -> String {
        let mut c = json!({"cniVersion": "1.0.0", "name": "xnf-test-net", "type": "xnf-cni", "prevResult": self.prev});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c.to_string()
    }

    fn env(&self, pod_name: &str) -> Vec<(&'static str, String)> {
        vec![
            ("CNI_CONTAINERID", self.id.clone()),
            ("CNI_NETNS", self.path.clone()),
            ("CNI_IFNAME", self.ifname.clone()),
            ("CNI_ARGS", format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod_name}")),
            ("CNI_PATH", "/opt/cni/bin".into()),
        ]
    }
}

#[test]
fn version_and_bad_input() {
    let host = Netns::new("cnihost").expect("host namespace (run as root)");
    let _g = Guard { host: &host };
    let v = ok(&host, "VERSION", &[], r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(v, json!({"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0"]}));

    let pod = Pod::new(&host, 1);
    let env = pod.env("bad");
    let no_prev = json!({"cniVersion": "1.0.0", "name": "n", "type": "xnf-cni"}).to_string();
    let e = fails(&host, "ADD", &env, &no_prev, 7);
    assert!(e["msg"].as_str().unwrap().contains("prevResult"), "{e}");
    fails(&host, "CHECK", &env, &no_prev, 7);
    fails(&host, "ADD", &env, "{\"cniVersion\": ", 6);
    fails(&host, "ADD", &env, &pod.conf(json!({"function": "teleport"})), 7);
    fails(&host, "ADD", &env, &pod.conf(json!({"nf": "Not A Name"})), 7);
    fails(&host, "ADD", &env, &pod.conf(json!({"cniVersion": "0.2.0"})), 1);
    let no_netns: Vec<_> = env.iter().filter(|(k, _)| *k != "CNI_NETNS").cloned().collect();
    fails(&host, "ADD", &no_netns, &pod.conf(json!({})), 4);
    fails(&host, "FROB", &env, &pod.conf(json!({})), 4);
    // A namespace that does not exist: the plugin's own failure code.
    let mut gone = env.clone();
    gone[1].1 = "/run/netns/xnf-no-such-namespace".into();
    fails(&host, "ADD", &gone, &pod.conf(json!({})), 100);
    assert_eq!(list(&host)["nfs"].as_array().unwrap().len(), 0, "failed ADDs left an NF");
    assert!(chain_pins(&host).is_empty(), "failed ADDs left pins: {:?}", chain_pins(&host));
}

#[test]
fn add_check_del_with_a_chain_through_the_pod() {
    let host = Netns::new("cnihost").expect("host namespace (run as root)");
    let _g = Guard { host: &host };
    let pod = Pod::new(&host, 2);
    let env = pod.env("fw-0");
    let conf = pod.conf(json!({}));

    // ADD: the result is the main plugin's, in the config's version.
    let v = ok(&host, "ADD", &env, &conf);
    assert_eq!(v, pod.prev, "ADD must pass prevResult through unchanged");
    let row = nf_row(&host, "fw-0").expect("NF fw-0 named after the pod");
    assert_eq!((row["port"].as_str(), row["origin"].as_str(), row["state"].as_str()), (Some(pod.host_if.as_str()), Some("cni"), Some("up")), "{row}");
    assert_eq!(row["netns"], pod.path.as_str());
    assert!(xdp_prog(&host, &pod.host_if).is_some(), "no XDP program on the host end");
    assert_eq!(xdp_prog(pod.ns(), &pod.ifname).map(|p| p.1).as_deref(), Some("xnf_pass"), "pod end");
    let v4 = pod.conf(json!({"cniVersion": "0.4.0"}));
    let mut want = pod.prev.clone();
    want["cniVersion"] = json!("0.4.0");
    // ADD again: idempotent, and in the version asked for.
    assert_eq!(ok(&host, "ADD", &env, &v4), want);
    assert_eq!(list(&host)["nfs"].as_array().unwrap().len(), 1);
    assert_eq!(ok(&host, "CHECK", &env, &conf), Value::Null, "CHECK prints nothing when all is well");

    // Another pod cannot take the name while this one lives.
    let other = Pod::new(&host, 3);
    fails(&host, "ADD", &other.env("fw-0"), &other.conf(json!({})), 100);
    // ... but with its own name it can, and reflect is honoured.
    ok(&host, "ADD", &other.env("x"), &other.conf(json!({"nf": "refl", "function": "reflect"})));
    assert_eq!(xdp_prog(other.ns(), &other.ifname).map(|p| p.1).as_deref(), Some("xnf_reflect"));
    ok(&host, "CHECK", &other.env("x"), &other.conf(json!({"nf": "refl", "function": "reflect"})));
    // A DEL for a pod whose derived name is another pod's NF leaves it alone.
    ok(&host, "DEL", &other.env("fw-0"), &other.conf(json!({})));
    assert!(nf_row(&host, "fw-0").is_some(), "DEL of another pod removed fw-0");

    // A chain through the pod: DEL still succeeds and the chain goes down.
    let outside = Netns::new("cniout").unwrap();
    let (ing, peer) = (ifname("in"), ifname("out"));
    veth(&host, &ing, &outside, &peer, None).unwrap();
    host.ip(&["link", "set", &ing, "up"]).unwrap();
    xnf_ok(&host, &["chain", "create", "web", "--ingress", &ing, "--match", "dst=198.18.100.0/24", "--nf", "fw-0"]);
    assert_eq!(list(&host)["chains"][0]["state"], "up");
    assert_eq!(ok(&host, "DEL", &env, &pod.conf(json!({}))), Value::Null);
    assert!(nf_row(&host, "fw-0").is_none(), "DEL left the NF");
    assert_eq!(list(&host)["chains"][0]["state"], "down");
    assert!(xdp_prog(pod.ns(), &pod.ifname).is_none(), "DEL left xnf's function on the pod end");
    let e = fails(&host, "CHECK", &env, &conf, 101);
    assert!(e["msg"].as_str().unwrap().contains("not registered"), "{e}");
    // DEL again: already gone is success. Without prevResult and netns too.
    ok(&host, "DEL", &env, &conf);
    let bare: Vec<_> = env.iter().filter(|(k, _)| *k != "CNI_NETNS").cloned().collect();
    ok(&host, "DEL", &bare, &json!({"cniVersion": "1.0.0", "name": "n", "type": "xnf-cni"}).to_string());
    // The pod comes back: the chain is whole again.
    ok(&host, "ADD", &env, &conf);
    assert_eq!(list(&host)["chains"][0]["state"], "up");
    ok(&host, "DEL", &env, &conf);

    xnf_ok(&host, &["chain", "delete", "web"]);
    ok(&host, "DEL", &other.env("x"), &other.conf(json!({"nf": "refl"})));
    assert_eq!(list(&host)["nfs"].as_array().unwrap().len(), 0);
    assert!(chain_pins(&host).is_empty(), "pins left: {:?}", chain_pins(&host));
    assert!(xdp_prog(&host, &pod.host_if).is_none(), "the chain program is still on the host end");
}

#[test]
fn broken_and_vanished_pods() {
    let host = Netns::new("cnihost").expect("host namespace (run as root)");
    let _g = Guard { host: &host };
    let (broken, mut vanished) = (Pod::new(&host, 4), Pod::new(&host, 5));
    let (benv, venv) = (broken.env("broken"), vanished.env("vanished-pod-with-a-long-name"));
    let (bconf, vconf) = (broken.conf(json!({})), vanished.conf(json!({"function": "none"})));
    ok(&host, "ADD", &benv, &bconf);
    ok(&host, "ADD", &venv, &vconf);
    ok(&host, "CHECK", &benv, &bconf);
    ok(&host, "CHECK", &venv, &vconf);
    let names: Vec<String> = list(&host)["nfs"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names.len(), 2);
    let long = names.iter().find(|n| *n != "broken").unwrap().clone();
    assert!(long.starts_with("vanish") && long.len() == 11, "long pod names are shortened with a hash: {long}");
    assert!(xdp_prog(vanished.ns(), &vanished.ifname).is_none(), "function none attaches nothing to the pod end");

    // Someone renames the pod's interface: CHECK finds CNI_IFNAME missing,
    // and passes again once it is back. (Down first: Linux before 6.2
    // refuses to rename an interface that is up, with EBUSY.)
    let renamed = ifname("mv");
    broken.ns().link_down(&broken.ifname).unwrap();
    broken.ns().ip(&["link", "set", &broken.ifname, "name", &renamed]).unwrap();
    let e = fails(&host, "CHECK", &benv, &bconf, 101);
    assert!(e["msg"].as_str().unwrap().contains("missing"), "{e}");
    broken.ns().ip(&["link", "set", &renamed, "name", &broken.ifname]).unwrap();
    broken.ns().link_up(&broken.ifname).unwrap();
    ok(&host, "CHECK", &benv, &bconf);
    // CHECK with a configuration asking for another function than ADD attached.
    let e = fails(&host, "CHECK", &benv, &broken.conf(json!({"function": "reflect"})), 101);
    assert!(e["msg"].as_str().unwrap().contains("function"), "{e}");

    // The pod's end of the veth is deleted (the host end goes with it).
    broken.ns().ip(&["link", "del", &broken.ifname]).unwrap();
    let e = fails(&host, "CHECK", &benv, &bconf, 101);
    assert!(e["msg"].as_str().unwrap().contains("vanished"), "{e}");
    assert_eq!(nf_row(&host, "broken").unwrap()["state"], "gone");
    ok(&host, "DEL", &benv, &bconf);
    assert!(nf_row(&host, "broken").is_none());

    // The pod's namespace is deleted before DEL comes.
    vanished.ns.take().unwrap().delete().unwrap();
    // The kernel dismantles a deleted namespace, and the veth with it, from
    // a work queue: wait until the port is gone, as a runtime's later calls would find it.
    let t0 = std::time::Instant::now();
    while nf_row(&host, &long).is_some_and(|r| r["state"] != "gone") {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "the deleted namespace's veth never went away");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    fails(&host, "CHECK", &venv, &vconf, 101);
    // Its successor (same pod name, new sandbox) takes the name over before
    // the old DEL comes, and that late DEL leaves the new pod alone.
    let successor = Pod::new(&host, 6);
    let senv = successor.env("vanished-pod-with-a-long-name");
    let sconf = successor.conf(json!({}));
    let (_, status, err) = cni(&host, "ADD", &senv, &sconf);
    assert_eq!(status, 0, "{err}");
    assert!(err.contains("replacing"), "{err}");
    ok(&host, "DEL", &venv, &vconf);
    ok(&host, "CHECK", &senv, &sconf);
    ok(&host, "DEL", &senv, &sconf);
    ok(&host, "DEL", &venv, &vconf);
    assert_eq!(list(&host)["nfs"].as_array().unwrap().len(), 0);
    assert!(chain_pins(&host).is_empty(), "pins left: {:?}", chain_pins(&host));
}

#[test]
fn parallel_adds_and_dels_as_a_runtime_starts_pods() {
    // A runtime starts pods concurrently: every ADD must land in the one
    // registry (it is changed under a file lock), and so must every DEL.
    let host = Netns::new("cnihost").expect("host namespace (run as root)");
    let _g = Guard { host: &host };
    let pods: Vec<Pod> = (10..16).map(|n| Pod::new(&host, n)).collect();
    let names: Vec<String> = (0..pods.len()).map(|i| format!("par-{i}")).collect();
    std::thread::scope(|s| {
        for (p, name) in pods.iter().zip(&names) {
            let host = &host;
            s.spawn(move || ok(host, "ADD", &p.env(name), &p.conf(json!({}))));
        }
    });
    let mut listed: Vec<String> = list(&host)["nfs"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_string()).collect();
    listed.sort();
    assert_eq!(listed, names, "every parallel ADD registered its NF");
    for (p, name) in pods.iter().zip(&names) {
        ok(&host, "CHECK", &p.env(name), &p.conf(json!({})));
    }
    std::thread::scope(|s| {
        for (p, name) in pods.iter().zip(&names) {
            let host = &host;
            s.spawn(move || ok(host, "DEL", &p.env(name), &p.conf(json!({}))));
        }
    });
    assert_eq!(list(&host)["nfs"].as_array().unwrap().len(), 0, "every parallel DEL removed its NF");
    assert!(chain_pins(&host).is_empty(), "pins left: {:?}", chain_pins(&host));
}

/// Makes the plugin start in a mount namespace of its own, as a runtime in
/// one (`ip netns exec`, a sandboxed kubelet) starts it: the pod's
/// namespace bind-mounted at `at` there only (in the host's mount namespace
/// `at` is an empty file), and /sys remounted so bpffs is hidden and
/// xnf-cni joins the host's mount namespace to reach its pins.
fn private_mounts(c: &mut std::process::Command, pod_ns: &str, at: &std::path::Path) {
    use std::os::unix::process::CommandExt;
    let src = std::ffi::CString::new(pod_ns).unwrap();
    let dst = std::ffi::CString::new(at.display().to_string()).unwrap();
    let check = |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) };
    // SAFETY: only system calls between fork and exec, on strings made before.
    unsafe {
        c.pre_exec(move || {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_SLAVE, std::ptr::null()))?;
            check(libc::mount(src.as_ptr(), dst.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()))?;
            check(libc::umount2(c"/sys".as_ptr(), libc::MNT_DETACH))?;
            check(libc::mount(c"sysfs".as_ptr(), c"/sys".as_ptr(), c"sysfs".as_ptr(), 0, std::ptr::null()))
        });
    }
}

#[test]
fn a_runtime_in_a_mount_namespace_of_its_own() {
    let host = Netns::new("cnihost").expect("host namespace (run as root)");
    let _g = Guard { host: &host };
    let pod = Pod::new(&host, 7);
    let files = xnf_testrun::cli::TempFiles::new("cni-mnt");
    let at = std::path::PathBuf::from(files.write("podns", ""));
    let mut env = pod.env("mnt-0");
    env[1].1 = at.display().to_string();
    let conf = pod.conf(json!({}));
    let run = |command: &str| {
        let (v, status, err) = run_plugin_with(&host, &xnf_testrun::cli::xnf_cni_bin(), command, &env, &conf, |c| private_mounts(c, &pod.path, &at));
        assert_eq!(status, 0, "{command} from a runtime's own mount namespace: {v} {err}");
        v
    };
    assert_eq!(run("ADD"), pod.prev);
    let row = nf_row(&host, "mnt-0").expect("NF mnt-0");
    assert_eq!((row["state"].as_str(), row["netns"].as_str()), (Some("up"), at.to_str()), "the runtime's path is kept: {row}");
    assert_eq!(xdp_prog(pod.ns(), &pod.ifname).map(|p| p.1).as_deref(), Some("xnf_pass"), "pod end");
    run("CHECK");
    run("DEL");
    assert!(nf_row(&host, "mnt-0").is_none(), "DEL left the NF");
    assert!(xdp_prog(pod.ns(), &pod.ifname).is_none(), "DEL left xnf's function on the pod end");
    assert!(chain_pins(&host).is_empty(), "pins left: {:?}", chain_pins(&host));
}
