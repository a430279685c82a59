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
use std::process::{Command, Output};

use common::{chain_pins, in_netns, list, nf_names, nf_row, run_plugin, Guard};
use serde_json::{json, Value};
use xnf_netns::Netns;
use xnf_testrun::cli::{wait_for, xnf_cni_bin, xnf_ok, RoutedLine, TempFiles};

/// Where Debian's containernetworking-plugins installs ptp, bridge, host-local.
const CNI_PLUGINS: &str = "/usr/lib/cni";
const N: usize = 400;

/// A private podman: its configuration, storage, CNI networks and the
/// busybox image, all under one temporary folder. Every container it
/// started is removed on drop (which runs each one's CNI DEL).
struct Podman {
    files: TempFiles,
    host: std::path::PathBuf,
}

impl Podman {
    /// Podman for dut `host`; `tag` names the folder (one per test).
    fn new(host: &Netns, tag: &str) -> Podman {
        for (what, path) in [("podman", "/usr/bin/podman"), ("runc", "/usr/bin/runc"), ("busybox-static", "/bin/busybox"), ("containernetworking-plugins", "/usr/lib/cni/ptp")] {
            assert!(Path::new(path).exists(), "{path} is missing: install {what} (scripts/deps.sh does)");
        }
        let files = TempFiles::new(&format!("podman-{tag}"));
        let d = files.dir().display().to_string();
        for sub in ["bin", "net.d", "ipam", "img/bin"] {
            std::fs::create_dir_all(files.dir().join(sub)).unwrap();
        }
        // The plugin folder: xnf-cni of this build, then Debian's plugins.
        std::os::unix::fs::symlink(xnf_cni_bin(), files.dir().join("bin/xnf-cni")).unwrap();
        // The CNI backend explicitly (Debian's podman 4.3 prefers netavark when
        // it is installed); runc, which works with cgroup v1, v2 and hybrid
        // hierarchies (crun refuses hybrid ones); limits no higher than this
        // process's (without CAP_SYS_RESOURCE podman's defaults are refused).
        let (nofile, nproc) = (hard_limit(libc::RLIMIT_NOFILE), hard_limit(libc::RLIMIT_NPROC).min(32768));
        files.write(
            "containers.conf",
            &format!(
                "[containers]\ndefault_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
                 [network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [\"{d}/bin\", \"{CNI_PLUGINS}\"]\n\
                 network_config_dir = \"{d}/net.d\"\ndefault_network = \"xnfdefault\"\n\
                 [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
                 events_logfile_path = \"{d}/events.log\"\ntmp_dir = \"{d}/tmp\"\n"
            ),
        );
        files.write("storage.conf", &format!("[storage]\ndriver = \"vfs\"\ngraphroot = \"{d}/root\"\nrunroot = \"{d}/runroot\"\n"));
        let pm = Podman { files, host: host.path() };
        pm.import_busybox();
        let backend = pm.ok(&["info", "--format", "{{.Host.NetworkBackend}}"]);
        assert_eq!(backend.trim(), "cni", "podman did not take the CNI backend");
        pm
    }

    /// An image with nothing but busybox-static and its applets, imported
    /// from a tarball: no registry, no network.
    fn import_busybox(&self) {
        let img = self.files.dir().join("img");
        std::fs::copy("/bin/busybox", img.join("bin/busybox")).unwrap();
        for applet in ["sh", "sleep", "ip", "cat", "sysctl"] {
            std::os::unix::fs::symlink("busybox", img.join("bin").join(applet)).unwrap();
        }
        let tar = self.files.dir().join("busybox.tar");
        let st = Command::new("tar").arg("-C").arg(&img).arg("-cf").arg(&tar).arg(".").status().expect("tar");
        assert!(st.success(), "tar of the busybox image failed");
        self.ok(&["import", "--quiet", &tar.display().to_string(), "localhost/xnf-busybox"]);
    }

    /// The environment that makes podman (and `xnf --container`, which asks
    /// podman) use this private root.
    fn env(&self) -> [(&'static str, String); 2] {
        [("CONTAINERS_CONF", self.path("containers.conf")), ("CONTAINERS_STORAGE_CONF", self.path("storage.conf"))]
    }

    fn path(&self, name: &str) -> String {
        self.files.dir().join(name).display().to_string()
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = Command::new("podman");
        c.args(args).envs(self.env());
        in_netns(&mut c, &self.host);
        c.output().expect("running podman")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "podman {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// A CNI network: `main` (the real plugin's config) with `xnf-cni` after it when `chained`.
    fn network(&self, name: &str, main: Value, chained: bool) {
        let mut plugins = vec![main];
        if chained {
            plugins.push(json!({"type": "xnf-cni", "function": "pass", "forward": true}));
        }
        let conf = json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins});
        self.files.write(&format!("net.d/{name}.conflist"), &conf.to_string());
    }

    /// host-local addresses from `subnet`, its state in this folder.
    fn ipam(&self, subnet: &str) -> Value {
        json!({"type": "host-local", "subnet": subnet, "dataDir": self.path("ipam"), "routes": [{"dst": "0.0.0.0/0"}]})
    }

    /// Starts a busybox container `name` on `network`.
    fn start(&self, name: &str, network: &str) {
        self.ok(&["run", "-d", "--name", name, "--network", network, "localhost/xnf-busybox", "sleep", "3600"]);
    }

    fn inspect(&self, name: &str, format: &str) -> String {
        self.ok(&["inspect", "--format", format, name]).trim().to_string()
    }

    /// IPv4 datagrams the container's kernel forwarded.
    fn forwarded(&self, name: &str) -> u64 {
        let pid = self.inspect(name, "{{.State.Pid}}");
        let snmp = std::fs::read_to_string(format!("/proc/{pid}/net/snmp")).unwrap();
        let mut ip = snmp.lines().filter(|l| l.starts_with("Ip:"));
        let (h, v) = (ip.next().unwrap(), ip.next().unwrap());
        let i = h.split_whitespace().position(|k| k == "ForwDatagrams").unwrap();
        v.split_whitespace().nth(i).unwrap().parse().unwrap()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.run(&["rm", "--all", "--force", "--time", "0"]);
    }
}

fn hard_limit(resource: libc::__rlimit_resource_t) -> u64 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut r) }, 0);
    r.rlim_max
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
fn round_trip(line: &RoutedLine, pm: &Podman, container: &str) {
    let (before, fwd) = (chain_stats(line.dut(), "web"), pm.forwarded(container));
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
    assert!(pm.forwarded(container) - fwd >= N as u64, "the container's kernel did not forward them");
    assert_eq!(line.forw_v4(), dut_fwd, "dut's kernel forwarded what the chain should have");
}

/// A restarted runtime's CHECK, as libcni does it: every plugin of the
/// network in order, with the result podman cached at ADD as prevResult.
fn check_from_cache(dut: &Netns, pm: &Podman, network: &str, container: &str) {
    let id = pm.inspect(container, "{{.Id}}");
    let netns = pm.inspect(container, "{{.NetworkSettings.SandboxKey}}");
    let cache: Value = serde_json::from_str(&std::fs::read_to_string(format!("/var/lib/cni/results/{network}-{id}-eth0")).expect("podman's CNI cache entry")).unwrap();
    let conflist: Value = serde_json::from_str(&std::fs::read_to_string(pm.path(&format!("net.d/{network}.conflist"))).unwrap()).unwrap();
    let args: Vec<String> = cache["cniArgs"].as_array().unwrap().iter().map(|p| format!("{}={}", p[0].as_str().unwrap(), p[1].as_str().unwrap())).collect();
    let env = [
        ("CNI_CONTAINERID", id),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "eth0".to_string()),
        ("CNI_ARGS", args.join(";")),
        ("CNI_PATH", format!("{}:{CNI_PLUGINS}", pm.path("bin"))),
    ];
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
    let pm = Podman::new(dut, tag);
    let net = format!("xnf{tag}");
    let mut conf = json!({"type": main, "ipMasq": false, "ipam": pm.ipam(subnet)});
    if main == "bridge" {
        conf["bridge"] = json!(format!("xnfbr{tag}"));
        conf["isGateway"] = json!(true);
    }
    pm.network(&net, conf, true);
    let fw = format!("xnf-{tag}");
    pm.start(&fw, &net);

    let row = nf_row(dut, &fw).unwrap_or_else(|| panic!("no NF named after container {fw}: {}", list(dut)));
    assert_eq!((row["origin"].as_str(), row["state"].as_str(), row["ifname"].as_str()), (Some("cni"), Some("up"), Some("eth0")), "{row}");
    assert_eq!(row["netns"].as_str().unwrap(), pm.inspect(&fw, "{{.NetworkSettings.SandboxKey}}"), "the runtime's namespace path");
    chain_through(&line, &fw);
    round_trip(&line, &pm, &fw);

    // Every podman process has exited since ADD (podman has no daemon): a
    // runtime coming back CHECKs the network from its cache.
    check_from_cache(dut, &pm, &net, &fw);

    // Stop: DEL removes the NF, the chain drops its class, nothing bypasses it.
    pm.ok(&["stop", "--time", "0", &fw]);
    assert!(nf_row(dut, &fw).is_none(), "DEL left the NF: {}", list(dut));
    assert_eq!(chain_state(dut, "web"), "down");
    let down = |s: &Value| num(&s["ingresses"].as_object().unwrap().values().next().unwrap()["chain-down"]);
    let s0: Value = serde_json::from_str(&xnf_ok(dut, &["chain", "stats", "--json"])).unwrap();
    assert_eq!(line.send_udp(false, 50), 0, "traffic got around the stopped container");
    let s1: Value = serde_json::from_str(&xnf_ok(dut, &["chain", "stats", "--json"])).unwrap();
    assert_eq!(down(&s1) - down(&s0), 50, "dropped as chain-down");

    // Start again (same name, new namespace): ADD brings the chain back up.
    pm.ok(&["start", &fw]);
    assert_eq!(chain_state(dut, "web"), "up");
    round_trip(&line, &pm, &fw);
    check_from_cache(dut, &pm, &net, &fw);
    pm.ok(&["rm", "--force", "--time", "0", &fw]);
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
    let pm = Podman::new(dut, "ctr");
    pm.network("xnfctr", json!({"type": "ptp", "ipMasq": false, "ipam": pm.ipam("198.18.102.0/24")}), false);
    pm.start("xnf-ctr", "xnfctr");
    assert!(list(dut)["nfs"].as_array().unwrap().is_empty(), "a network without xnf-cni made an NF");
    xnf_pm(dut, &pm, &["nf", "create", "fw", "--container", "xnf-ctr", "--forward"]);
    let row = nf_row(dut, "fw").unwrap();
    assert_eq!((row["origin"].as_str(), row["state"].as_str()), (Some("cli"), Some("up")), "{row}");
    // XPS on the NF's end although the container's sysfs is read-only
    // (read here through the container's own mounts).
    let pid = pm.inspect("xnf-ctr", "{{.State.Pid}}");
    let ncpu = std::thread::available_parallelism().unwrap().get();
    for q in 0..ncpu.min(2) {
        let f = format!("/sys/class/net/xnf0/queues/tx-{q}/xps_cpus");
        let out = Command::new("nsenter").args(["-t", &pid, "-n", "-m", "cat", &f]).output().unwrap();
        let mask = u64::from_str_radix(&String::from_utf8_lossy(&out.stdout).trim().replace(',', ""), 16).unwrap_or_else(|e| panic!("{f}: {e} {out:?}"));
        let want: u64 = (0..ncpu).filter(|c| c % ncpu == q).map(|c| 1u64 << c).sum();
        assert_eq!(mask, want, "{f}");
    }
    chain_through(&line, "fw");
    round_trip(&line, &pm, "xnf-ctr");
    // The container stops: its namespace and the NF's veth go with it.
    pm.ok(&["stop", "--time", "0", "xnf-ctr"]);
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
    let pm = Podman::new(&host, "par");
    pm.network("xnfpar", json!({"type": "ptp", "ipMasq": false, "ipam": pm.ipam("198.18.103.0/24")}), true);
    let names: Vec<String> = (0..10).map(|i| format!("xnf-par{i}")).collect();
    std::thread::scope(|s| {
        for n in &names {
            let pm = &pm;
            s.spawn(move || pm.start(n, "xnfpar"));
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
            s.spawn(move || pm.ok(&["rm", "--force", "--time", "0", n]));
        }
    });
    assert!(nf_names(&host).is_empty(), "NFs left after the containers went: {:?}", nf_names(&host));
    assert!(chain_pins(&host).is_empty(), "pins left: {:?}", chain_pins(&host));
    let cached = std::fs::read_dir("/var/lib/cni/results").map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("xnfpar-")).count()).unwrap_or(0);
    assert_eq!(cached, 0, "podman kept CNI results of removed containers");
}
