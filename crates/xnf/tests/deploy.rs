//! What deploy/ ships to run xnf as a service: the systemd unit (verified by
//! systemd-analyze, its keys exactly the expected ones), the example box
//! file (/etc/xnf/xnf.toml of the package, checked by `xnf check`), and
//! the DaemonSet with its ConfigMap (checked against the Kubernetes API's
//! models by python3-kubernetes, and for what the daemon needs of the node).
//! No systemd, kubelet or kubectl runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use xnf_testrun::cli::TempFiles;

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Fails with what to install when `program` is not there.
fn need(program: &str, package: &str) {
    let found = if program.contains('/') {
        Path::new(program).is_file()
    } else {
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
    };
    assert!(found, "{program} is missing: apt-get install {package} (scripts/deps.sh test installs it)");
}

/// `xnf check FILE`: its output, and whether it passed.
fn xnf_check(path: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xnf")).arg("check").arg(path).output().unwrap();
    (out.status.success(), text(&out.stdout) + &text(&out.stderr))
}

// --- the systemd unit ---

/// The unit's sections and their keys, in order, exactly. A key that is
/// not here (or a misspelt one) fails the test before systemd-analyze
/// would only warn about it.
const UNIT_KEYS: &[(&str, &[&str])] = &[
    ("Unit", &["Description", "Documentation", "After"]),
    (
        "Service",
        &[
            "Type",
            "NotifyAccess",
            "ExecStart",
            "ExecReload",
            "Restart",
            "RestartSec",
            "WatchdogSec",
            "TimeoutStartSec",
            "KillMode",
            "RuntimeDirectory",
            "RuntimeDirectoryPreserve",
            "CapabilityBoundingSet",
            "NoNewPrivileges",
            "LimitMEMLOCK",
            "RestrictAddressFamilies",
            "RestrictNamespaces",
            "ProtectHostname",
            "DevicePolicy",
            "LockPersonality",
            "MemoryDenyWriteExecute",
            "RestrictRealtime",
            "RestrictSUIDSGID",
            "SystemCallArchitectures",
            "SystemCallFilter",
            "SystemCallErrorNumber",
        ],
    ),
    ("Install", &["WantedBy"]),
];

/// A unit file as (section, key, value), comments and blank lines dropped.
fn unit_entries(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
            continue;
        }
        assert!(!line.ends_with('\\'), "line {}: continued lines are not expected: {line}", n + 1);
        let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("line {}: not KEY=VALUE: {line}", n + 1));
        entries.push((section.clone(), k.trim().to_string(), v.trim().to_string()));
    }
    entries
}

#[test]
fn the_unit_has_exactly_its_keys_and_never_detaches() {
    let unit = read(&deploy().join("systemd/xnf.service"));
    let entries = unit_entries(&unit);
    let sections: Vec<(String, Vec<String>)> =
        UNIT_KEYS.iter().map(|(s, _)| (s.to_string(), entries.iter().filter(|e| e.0 == *s).map(|e| e.1.clone()).collect())).collect();
    let expected: Vec<(String, Vec<String>)> = UNIT_KEYS.iter().map(|(s, keys)| (s.to_string(), keys.iter().map(|k| k.to_string()).collect())).collect();
    assert_eq!(sections, expected, "the unit's keys, section by section");
    assert!(entries.iter().all(|e| UNIT_KEYS.iter().any(|(s, _)| *s == e.0)), "a section other than Unit, Service, Install");
    let get = |key: &str| entries.iter().find(|e| e.1 == key).map(|e| e.2.as_str()).unwrap_or_else(|| panic!("no {key}="));
    assert_eq!(get("Type"), "notify");
    assert_eq!(get("NotifyAccess"), "main");
    assert_eq!(get("ExecStart"), "/usr/bin/xnf daemon --config /etc/xnf/xnf.toml");
    assert_eq!(get("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(get("Restart"), "on-failure");
    assert_eq!(get("WatchdogSec"), "30s");
    assert_eq!(get("KillMode"), "process", "a stop or restart leaves the [[afxdp]] applications running, for the next daemon to adopt");
    assert_eq!((get("RuntimeDirectory"), get("RuntimeDirectoryPreserve")), ("xnf", "yes"), "the run files survive restarts");
    assert_eq!(get("After"), "network-pre.target");
    assert_eq!(get("WantedBy"), "multi-user.target");
    // Stopping never detaches: no command at stop, and no mount namespace
    // of the service's own, where a bpffs xnf mounts would vanish with it.
    for key in ["ExecStop", "ExecStopPost", "ProtectSystem", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables", "ProtectProc", "ReadWritePaths"] {
        assert!(entries.iter().all(|e| e.1 != key), "{key}= would stop the data plane or hide bpffs (see the unit's comments)");
    }
    let caps: Vec<&str> = get("CapabilityBoundingSet").split_whitespace().collect();
    for cap in ["CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON", "CAP_SYS_RESOURCE"] {
        assert!(caps.contains(&cap), "the daemon needs {cap}: {caps:?}");
    }
}

/// systemd-analyze verify of the unit with ExecStart's binary this build's
/// xnf (verify wants it to exist): no error and no warning. Runs offline,
/// without systemd as PID 1. Its unknown-key warnings are only warnings
/// (exit 0), so any output fails; shown on a misspelt copy first.
#[test]
fn systemd_analyze_verifies_the_unit() {
    need("systemd-analyze", "systemd");
    let unit = read(&deploy().join("systemd/xnf.service"));
    let dir = TempFiles::new("unit");
    let verify = |text: &str| {
        let path = dir.write("xnf.service", &text.replace("/usr/bin/xnf ", &format!("{} ", env!("CARGO_BIN_EXE_xnf"))));
        let out = Command::new("systemd-analyze").args(["verify", "--man=no", &path]).output().unwrap();
        (out.status.success(), text_of(&out))
    };
    fn text_of(out: &std::process::Output) -> String {
        text(&out.stdout) + &text(&out.stderr)
    }
    let misspelt = unit.replace("RestrictRealtime=", "RestrictRealtim=");
    let (_, said) = verify(&misspelt);
    assert!(said.contains("RestrictRealtim"), "systemd-analyze says nothing of a misspelt key, so its silence proves nothing: {said}");
    let (ok, said) = verify(&unit);
    assert!(ok && said.trim().is_empty(), "systemd-analyze verify:\n{said}");
}

// --- the example box file ---

/// deploy/xnf.toml, /etc/xnf/xnf.toml of the package: `xnf check` takes it
/// (the `[daemon]` section included), it needs no other file, and it runs
/// the README's box: filter, router, lb and a chain.
#[test]
fn the_example_box_file_checks() {
    let path = deploy().join("xnf.toml");
    let (ok, said) = xnf_check(&path);
    assert!(ok, "xnf check deploy/xnf.toml:\n{said}");
    let text = read(&path);
    for key in ["rules_file", "services_file", "lists"] {
        assert!(!text.lines().any(|l| l.trim_start().starts_with(key)), "the example names another file ({key}): the package installs it alone");
    }
    // Checked from a folder of its own: it reads nothing beside it.
    let alone = TempFiles::new("box");
    let (ok, said) = xnf_check(Path::new(&alone.write("xnf.toml", &text)));
    assert!(ok, "the example reads a file beside it:\n{said}");
    let cfg = xnf_config::load(&path).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    assert_eq!(cfg.daemon.listen.to_string(), "127.0.0.1:9460");
    assert!(cfg.router.is_some() && cfg.filter.is_some() && cfg.lb.is_some(), "filter, router and lb");
    assert!(!cfg.chains.chain.is_empty(), "a chain");
}

// --- Kubernetes ---

/// The documents of a YAML file (separated by `---` lines).
fn documents(path: &Path) -> Vec<serde_yaml::Value> {
    let text = read(path);
    text.split("\n---\n").map(|d| serde_yaml::from_str(d).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).collect()
}

fn of_kind<'a>(docs: &'a [serde_yaml::Value], kind: &str) -> &'a serde_yaml::Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"))
}

/// Runs tests/k8s_schema.py (python3-kubernetes' models) on `path`.
fn schema_check(path: &Path) -> (bool, String) {
    let python = "/usr/bin/python3"; // Debian's, which has python3-kubernetes (not a pyenv's)
    need(python, "python3");
    let probe = Command::new(python).args(["-c", "import kubernetes, yaml"]).output().unwrap();
    assert!(probe.status.success(), "python3-kubernetes or python3-yaml is missing (apt-get install python3-kubernetes python3-yaml): {}", text(&probe.stderr));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/k8s_schema.py");
    let out = Command::new(python).arg(script).arg(path).output().unwrap();
    (out.status.success(), text(&out.stdout) + &text(&out.stderr))
}

/// Every document of xnf-daemon.yaml is what the Kubernetes API takes:
/// each field one its model has, of its type, required ones present. A
/// misspelt field, or a port as a string, fails: shown first on a copy.
#[test]
fn the_daemonset_matches_the_kubernetes_api_models() {
    let path = deploy().join("kubernetes/xnf-daemon.yaml");
    let yaml = read(&path);
    let bad = TempFiles::new("k8s");
    for (what, from, to) in [
        ("a misspelt field", "mountPropagation:", "mountPropogation:"),
        ("a number as a string", "containerPort: 9460", "containerPort: \"9460\""),
        ("a required field left out (a container's name)", "        - name: xnf\n          image:", "        - image:"),
    ] {
        assert!(yaml.contains(from), "{from}");
        let (ok, said) = schema_check(Path::new(&bad.write("bad.yaml", &yaml.replacen(from, to, 1))));
        assert!(!ok, "the schema check takes {what} ({to}):\n{said}");
    }
    let (ok, said) = schema_check(&path);
    assert!(ok, "{said}");
    assert_eq!(said.lines().filter(|l| l.starts_with("ok ")).count(), 2, "{said}");
}

/// The DaemonSet gives the daemon what it needs of the node, and its
/// ConfigMap's box file checks and listens where the pod is scraped.
#[test]
fn the_daemonset_runs_the_daemon_on_the_nodes_bpffs_with_its_config() {
    let docs = documents(&deploy().join("kubernetes/xnf-daemon.yaml"));
    assert_eq!(docs.len(), 2);
    for d in &docs {
        assert_eq!(d["metadata"]["namespace"], "kube-system", "{:?}", d["metadata"]["name"]);
    }
    let cm = of_kind(&docs, "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "xnf-config");
    let ds = of_kind(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"];
    assert_eq!(ds["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"], "the selector matches the pods");
    let spec = &pod["spec"];
    assert_eq!(spec["hostNetwork"], true, "the node's interfaces");
    assert_eq!(spec["hostPID"], false);
    let containers = spec["containers"].as_sequence().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["image"], "xnf:latest");
    let command: Vec<&str> = c["command"].as_sequence().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(command, ["/usr/bin/xnf", "daemon", "--config", "/etc/xnf/xnf.toml"]);
    assert_eq!(c["securityContext"]["privileged"], true, "Bidirectional propagation and bpffs writes need it");

    // Volumes: name -> (host path or ConfigMap, type); mounts: name -> (path, propagation, read-only).
    let volumes = spec["volumes"].as_sequence().unwrap();
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no volume {name}"));
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    for m in mounts {
        volume(m["name"].as_str().unwrap());
    }
    let mount_at = |path: &str| mounts.iter().find(|m| m["mountPath"] == path).unwrap_or_else(|| panic!("nothing mounted at {path}"));
    let host = |mount: &serde_yaml::Value| {
        let v = volume(mount["name"].as_str().unwrap());
        (v["hostPath"]["path"].as_str().unwrap_or("").to_string(), v["hostPath"]["type"].as_str().unwrap_or("").to_string())
    };
    let bpf = mount_at("/sys/fs/bpf");
    assert_eq!(host(bpf), ("/sys/fs/bpf".into(), "Directory".into()));
    assert_eq!(bpf["mountPropagation"], "Bidirectional", "pins made in the pod are the host's");
    let run = mount_at("/run/xnf");
    assert_eq!(host(run), ("/run/xnf".into(), "DirectoryOrCreate".into()));
    let modules = mount_at("/lib/modules");
    assert_eq!(host(modules), ("/lib/modules".into(), "Directory".into()));
    assert_eq!(modules["readOnly"], true);
    let config = mount_at("/etc/xnf");
    assert_eq!(volume(config["name"].as_str().unwrap())["configMap"]["name"], "xnf-config");

    // The box file: checks, and listens on every address of the node at
    // the port the annotations, the container port and the probes name.
    let toml = cm["data"]["xnf.toml"].as_str().expect("the ConfigMap's key xnf.toml");
    let dir = TempFiles::new("k8s-box");
    let file = dir.write("xnf.toml", toml);
    let (ok, said) = xnf_check(Path::new(&file));
    assert!(ok, "xnf check of the ConfigMap's xnf.toml:\n{said}");
    let cfg = xnf_config::load(Path::new(&file)).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    assert_eq!(cfg.daemon.listen.to_string(), "0.0.0.0:9460", "reachable from outside the node's loopback");
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "9460");
    assert_eq!(c["ports"][0]["containerPort"], 9460);
    for (probe, path) in [("readinessProbe", "/readyz"), ("startupProbe", "/healthz"), ("livenessProbe", "/healthz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], 9460, "{probe}");
    }
}
