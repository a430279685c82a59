//! Helpers shared by the CNI tests (`cni.rs`: the runtime played by the
//! test; `podman.rs`: a real runtime and real plugins): cleaning up a
//! namespace's NFs and chains, running a CNI plugin as a runtime does, and
//! reading xnf's state.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use xnf_netns::Netns;
use xnf_testrun::cli::{xnf, xnf_ok};

/// Removes every chain and NF in the host namespace before the namespaces
/// go, even when a test fails half-way.
pub struct Guard<'a> {
    pub host: &'a Netns,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let Ok(list) = serde_json::from_slice::<Value>(&xnf(self.host, &["chain", "list", "--json"]).stdout) else { return };
        for c in list["chains"].as_array().into_iter().flatten() {
            let _ = xnf(self.host, &["chain", "delete", c["name"].as_str().unwrap()]);
        }
        for n in list["nfs"].as_array().into_iter().flatten() {
            let _ = xnf(self.host, &["nf", "delete", n["name"].as_str().unwrap(), "--force"]);
        }
        // xnf's run files of the host namespace (lock, cookie): nothing
        // else would remove them before another xnf command collects them.
        if chain_pins(self.host).is_empty() {
            let _ = std::fs::remove_dir_all(run_dir(self.host));
        }
    }
}

pub fn netns_inode(ns: &Netns) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(ns.path()).unwrap().ino()
}

/// xnf's run-file folder of `ns`.
pub fn run_dir(ns: &Netns) -> PathBuf {
    PathBuf::from(format!("/run/xnf/net-{}", netns_inode(ns)))
}

/// Makes `c` start in the network namespace `host` (see [`xnf_chain::podman::in_netns`]).
pub fn in_netns(c: &mut Command, host: &Path) {
    xnf_chain::podman::in_netns(c, host).expect("host namespace file");
}

/// Runs the CNI plugin `bin` in `host` with `command`, `env` and `stdin`,
/// the way libcni does: returns (stdout parsed as JSON or Null when empty,
/// exit status, stderr).
pub fn run_plugin(host: &Netns, bin: &Path, command: &str, env: &[(&str, String)], stdin: &str) -> (Value, i32, String) {
    run_plugin_with(host, bin, command, env, stdin, |_| {})
}

/// [`run_plugin`] with a last change to the command (a mount namespace of its own, ...).
pub fn run_plugin_with(host: &Netns, bin: &Path, command: &str, env: &[(&str, String)], stdin: &str, f: impl FnOnce(&mut Command)) -> (Value, i32, String) {
    let mut c = Command::new(bin);
    c.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("CNI_COMMAND", command);
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    in_netns(&mut c, &host.path());
    f(&mut c);
    let mut child = c.spawn().unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
    // The plugin may answer without reading stdin (VERSION, a missing
    // variable): a closed pipe is its business, not a failure.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "writing the config: {e}");
    }
    let out = child.wait_with_output().expect("waiting for the plugin");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let v = if stdout.trim().is_empty() { Value::Null } else { serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}")) };
    (v, out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).to_string())
}

/// Runs `xnf-cni` (see [`run_plugin`]).
pub fn cni(host: &Netns, command: &str, env: &[(&str, String)], stdin: &str) -> (Value, i32, String) {
    run_plugin(host, &xnf_testrun::cli::xnf_cni_bin(), command, env, stdin)
}

pub fn ok(host: &Netns, command: &str, env: &[(&str, String)], stdin: &str) -> Value {
    let (v, status, err) = cni(host, command, env, stdin);
    assert_eq!(status, 0, "{command} failed: {v} {err}");
    v
}

/// Runs the plugin, insists on a CNI error with `code`, returns the error JSON.
pub fn fails(host: &Netns, command: &str, env: &[(&str, String)], stdin: &str, code: u64) -> Value {
    let (v, status, err) = cni(host, command, env, stdin);
    assert_eq!(status, 1, "{command} should have failed: {v} {err}");
    assert_eq!(v["code"].as_u64(), Some(code), "{command}: {v}");
    for k in ["cniVersion", "msg", "details"] {
        assert!(v[k].is_string(), "{command}: error JSON without {k}: {v}");
    }
    v
}

pub fn list(host: &Netns) -> Value {
    serde_json::from_str(&xnf_ok(host, &["chain", "list", "--json"])).expect("chain list JSON")
}

pub fn nf_row(host: &Netns, name: &str) -> Option<Value> {
    list(host)["nfs"].as_array().unwrap().iter().find(|n| n["name"] == name).cloned()
}

/// The names of the registered NFs, sorted.
pub fn nf_names(host: &Netns) -> Vec<String> {
    let mut v: Vec<String> = list(host)["nfs"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_string()).collect();
    v.sort();
    v
}

/// The XDP program on `dev` in `ns`: (id, name).
pub fn xdp_prog(ns: &Netns, dev: &str) -> Option<(u64, String)> {
    let out = ns.ip(&["-j", "link", "show", "dev", dev]).ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let p = &v[0]["xdp"]["prog"];
    Some((p["id"].as_u64()?, p["name"].as_str().unwrap_or("").to_string()))
}

/// Pins of the chain program in `ns`'s bpffs folder.
pub fn chain_pins(ns: &Netns) -> Vec<PathBuf> {
    let dir = PathBuf::from(format!("/sys/fs/bpf/xnf/net-{}/chain", netns_inode(ns)));
    std::fs::read_dir(dir).map(|rd| rd.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}
