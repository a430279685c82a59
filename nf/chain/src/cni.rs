//! `xnf-cni`: a CNI plugin (spec 1.0) that makes a pod a network function.
//!
//! It is *chained*: a main plugin (`bridge`, `ptp`, ...) has already made the
//! pod's veth and addresses, and hands its result over as `prevResult`. This
//! plugin adopts that veth as an NF ([`crate::nf_create`] with `existing`):
//! xnf's chain program on the host end, xnf's function (pass or reflect) on
//! the pod's end. Chains created with `xnf chain create ... --nf NAME` then
//! steer traffic through the pod, so Kubernetes places network functions
//! and nobody types `xnf nf` commands on the node.
//!
//! The plugin acts in the network namespace it is started in: the runtime's
//! (the host's). Its state is xnf's own registry of that namespace, so
//! `xnf chain list` shows the pods' NFs (origin `cni`) and `xnf apply` leaves
//! them alone.
//!
//! Network configuration keys besides the standard ones:
//! - `nf`: the NF's name. Default: the pod's name (`K8S_POD_NAME` in
//!   `CNI_ARGS`) if it is a valid NF name, a shortened form of it otherwise,
//!   or the start of the container ID when there is no pod name.
//! - `function`: `pass` (default), `reflect` or `none`.
//! - `forward`: the pod's kernel forwards what it receives back to the host
//!   (replaces the pod's default routes).

use std::io::Read;
use std::path::Path;

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::dataplane;
use crate::model::{check_name, Function, NfSpec, Origin, NF_NAME_MAX};
use crate::ns;
use crate::registry::{Locked, Nf};
use xnf_netns::netlink;

/// The spec versions whose configurations and results this plugin speaks.
/// CHECK exists since 0.4.0; older runtimes are refused rather than half-served.
pub const SUPPORTED_VERSIONS: [&str; 2] = ["0.4.0", "1.0.0"];
/// Version of the plugin's own answers (VERSION, and errors before a config is read).
pub const OWN_VERSION: &str = "1.0.0";

/// Error codes of the CNI spec (1-99) and this plugin's own (100+).
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const INVALID_ENV: u32 = 4;
    pub const DECODE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    /// ADD or DEL could not make the data plane what it must be.
    pub const ATTACH_FAILED: u32 = 100;
    /// CHECK found the pod's NF not as ADD left it.
    pub const CHECK_FAILED: u32 = 101;
}

/// A CNI error result: printed as JSON on stdout, exit status 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> Self {
        CniError { code, msg: msg.into(), details: details.into() }
    }

    /// A plugin failure: `msg` says what failed, the error chain is the detail.
    fn from_anyhow(code: u32, msg: impl Into<String>, e: &anyhow::Error) -> Self {
        CniError::new(code, msg, format!("{e:#}"))
    }

    pub fn to_json(&self, cni_version: &str) -> Value {
        json!({ "cniVersion": cni_version, "code": self.code, "msg": self.msg, "details": self.details })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
}

/// The `CNI_*` variables, as far as this plugin needs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Env {
    pub command: Command,
    pub container_id: String,
    /// Empty on DEL when the runtime no longer has the namespace.
    pub netns: Option<String>,
    pub ifname: String,
    /// `CNI_ARGS`: `KEY=VALUE;...` pairs (Kubernetes puts `K8S_POD_NAME` there).
    pub args: Vec<(String, String)>,
}

fn env_error(msg: impl Into<String>) -> CniError {
    CniError::new(code::INVALID_ENV, msg, "")
}

impl Env {
    /// Reads the variables through `get` (the process environment, or a map in tests).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Env, CniError> {
        let var = |k: &str| get(k).filter(|v| !v.is_empty());
        let command = match var("CNI_COMMAND").as_deref() {
            Some("ADD") => Command::Add,
            Some("DEL") => Command::Del,
            Some("CHECK") => Command::Check,
            Some("VERSION") => Command::Version,
            Some(c) => return Err(env_error(format!("CNI_COMMAND {c:?} is not supported (ADD, DEL, CHECK, VERSION)"))),
            None => return Err(env_error("CNI_COMMAND is not set")),
        };
        let mut env = Env { command, container_id: String::new(), netns: var("CNI_NETNS"), ifname: String::new(), args: Vec::new() };
        if command == Command::Version {
            return Ok(env);
        }
        env.container_id = var("CNI_CONTAINERID").ok_or_else(|| env_error("CNI_CONTAINERID is not set"))?;
        env.ifname = var("CNI_IFNAME").ok_or_else(|| env_error("CNI_IFNAME is not set"))?;
        // DEL must work when the namespace is gone; ADD and CHECK need it.
        if command != Command::Del && env.netns.is_none() {
            return Err(env_error("CNI_NETNS is not set"));
        }
        env.args = parse_args(&var("CNI_ARGS").unwrap_or_default());
        Ok(env)
    }

    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// `K8S_POD_NAME=web-0;K8S_POD_NAMESPACE=default;IgnoreUnknown=1` as pairs;
/// pieces without `=` are skipped (other plugins' conventions vary).
pub fn parse_args(s: &str) -> Vec<(String, String)> {
    s.split(';').filter_map(|p| p.split_once('=')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

/// The network configuration: the standard keys this plugin reads, and its own.
/// Unknown keys are fine (the runtime adds `runtimeConfig`, `args`, ...).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct NetConf {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    pub name: String,
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    #[serde(rename = "prevResult", default)]
    pub prev_result: Option<Value>,
    #[serde(default)]
    pub nf: Option<String>,
    #[serde(default)]
    pub function: Function,
    #[serde(default)]
    pub forward: bool,
}

/// Decodes stdin: not JSON at all is "failure to decode" (6), JSON that is
/// not a valid configuration is "invalid network config" (7), a version we
/// do not speak is "incompatible version" (1).
pub fn parse_conf(input: &[u8]) -> Result<NetConf, CniError> {
    let v: Value = serde_json::from_slice(input).map_err(|e| CniError::new(code::DECODE, "network configuration is not JSON", e.to_string()))?;
    let version = v.get("cniVersion").and_then(Value::as_str).map(str::to_string);
    let conf: NetConf = serde_json::from_value(v).map_err(|e| CniError::new(code::INVALID_CONFIG, "invalid network configuration", e.to_string()))?;
    if let Some(ver) = version {
        if !SUPPORTED_VERSIONS.contains(&ver.as_str()) {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!("cniVersion {ver} is not supported"),
                format!("supported: {}", SUPPORTED_VERSIONS.join(", ")),
            ));
        }
    }
    if let Some(p) = &conf.prev_result {
        if !p.is_object() {
            return Err(CniError::new(code::INVALID_CONFIG, "prevResult is not an object", ""));
        }
    }
    Ok(conf)
}

/// Lower case, anything outside `[a-z0-9-_]` becomes `-`, no leading `-`/`_`.
fn sanitize(s: &str) -> String {
    let s: String =
        s.chars().map(|c| c.to_ascii_lowercase()).map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' { c } else { '-' }).collect();
    s.trim_start_matches(['-', '_']).to_string()
}

/// FNV-1a: a stable hash (std's is randomised per process).
fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

/// The NF name of a pod when the configuration gives none.
///
/// A pod name that is a valid NF name is used as it is, so a chain can name
/// a StatefulSet's `fw-0` or a pod `ids` before it exists. Longer names are
/// cut to 6 characters plus a hash of the whole name: plain truncation
/// would give every replica of a Deployment (`web-7d9f8b-xk2lp`,
/// `web-7d9f8b-q8zrt`) the same name, and only the first could start.
/// Without a pod name (not Kubernetes), the container ID's start is unique enough.
pub fn derive_name(pod: Option<&str>, container_id: &str) -> Option<String> {
    if let Some(p) = pod.map(sanitize).filter(|p| !p.is_empty()) {
        if p.len() <= NF_NAME_MAX {
            return Some(p);
        }
        return Some(format!("{}-{:04x}", &p[..NF_NAME_MAX - 5], fnv1a(&p) & 0xffff));
    }
    let c: String = sanitize(container_id).chars().take(NF_NAME_MAX).collect();
    (!c.is_empty()).then_some(c)
}

/// The NF name for this invocation: `nf` from the configuration, or derived.
pub fn nf_name(conf: &NetConf, env: &Env) -> Result<String, CniError> {
    match &conf.nf {
        Some(n) => {
            check_name("NF", n, NF_NAME_MAX).map_err(|e| CniError::from_anyhow(code::INVALID_CONFIG, format!("invalid \"nf\" {n:?}"), &e))?;
            Ok(n.clone())
        }
        None => derive_name(env.arg("K8S_POD_NAME"), &env.container_id)
            .ok_or_else(|| env_error(format!("cannot derive an NF name from CNI_CONTAINERID {:?}; set \"nf\"", env.container_id))),
    }
}

/// Runs one plugin invocation: returns what to print on stdout and the exit status.
pub fn run(get_env: &dyn Fn(&str) -> Option<String>, stdin: &mut dyn Read) -> (String, i32) {
    let mut version = OWN_VERSION.to_string();
    match dispatch(get_env, stdin, &mut version) {
        Ok(Some(v)) => (v.to_string(), 0),
        Ok(None) => (String::new(), 0),
        Err(e) => (e.to_json(&version).to_string(), 1),
    }
}

fn dispatch(get_env: &dyn Fn(&str) -> Option<String>, stdin: &mut dyn Read, version: &mut String) -> Result<Option<Value>, CniError> {
    let env = Env::from_lookup(get_env)?;
    if env.command == Command::Version {
        // Not reading stdin: the answer does not depend on it, and a person
        // trying the plugin by hand would otherwise wait on the terminal.
        return Ok(Some(json!({ "cniVersion": OWN_VERSION, "supportedVersions": SUPPORTED_VERSIONS })));
    }
    let mut input = Vec::new();
    stdin.read_to_end(&mut input).map_err(|e| CniError::new(code::DECODE, "reading the network configuration from stdin", e.to_string()))?;
    let conf = parse_conf(&input)?;
    *version = conf.cni_version.clone();
    let name = nf_name(&conf, &env)?;
    // Chained: the main plugin's result is what we adopt and pass on.
    if env.command != Command::Del && conf.prev_result.is_none() {
        return Err(CniError::new(
            code::INVALID_CONFIG,
            "no prevResult: xnf-cni is a chained plugin",
            "list it after a main plugin such as bridge or ptp in a .conflist",
        ));
    }
    match env.command {
        Command::Add => add(&env, &conf, &name).map(Some),
        Command::Del => del(&env, &name).map(|()| None),
        Command::Check => check(&env, &conf, &name).map(|()| None),
        Command::Version => unreachable!("answered above"),
    }
}

/// The process entry point of the `xnf-cni` binary; returns the exit status.
pub fn main() -> i32 {
    // The pod's namespace as the runtime sees it, opened before leaving
    // the runtime's mount namespace (see `ns::keep_reachable`).
    let netns = std::env::var("CNI_NETNS").ok().filter(|p| !p.is_empty()).and_then(|p| std::fs::File::open(&p).ok().map(|f| (p, f)));
    // Before any thread: a runtime that runs plugins with a private mount
    // namespace must not make the NF's pins vanish with it.
    if let Err(e) = xnf_core::state::join_host_mount_ns() {
        println!("{}", CniError::from_anyhow(code::ATTACH_FAILED, "cannot reach the host's bpffs", &e).to_json("1.0.0"));
        return 1;
    }
    if let Some((path, file)) = netns {
        ns::keep_reachable(Path::new(&path), file);
    }
    xnf_core::runtime::raise_memlock();
    let (out, status) = run(&|k| std::env::var(k).ok(), &mut std::io::stdin().lock());
    if !out.is_empty() {
        println!("{out}");
    }
    status
}

fn warn(w: &[String]) {
    for w in w {
        eprintln!("xnf-cni: warning: {w}");
    }
}

/// The registered NF of that name (the registry lock is released on return,
/// since `nf_create` and `nf_delete` take it themselves).
fn registered(name: &str) -> Result<Option<Nf>> {
    Ok(Locked::open()?.reg.nfs.get(name).cloned())
}

/// Whether the NF is this pod's: same namespace (by path, or by inode while
/// it exists) and same interface.
fn same_pod(nf: &Nf, netns: Option<&str>, ifname: &str) -> bool {
    let Some(netns) = netns else { return false };
    nf.spec.ifname == ifname && (nf.netns_path == Path::new(netns) || ns::inode(Path::new(netns)).is_ok_and(|i| i == nf.netns_inode))
}

/// Whether the NF's host port still exists (it vanishes with the pod's namespace).
fn is_present(nf: &Nf) -> Result<bool> {
    Ok(dataplane::present(nf, &netlink::links()?))
}

fn fail(e: anyhow::Error) -> CniError {
    CniError::from_anyhow(code::ATTACH_FAILED, "xnf-cni failed", &e)
}

/// ADD: adopt the pod's veth as NF `name`; the result is the main plugin's, unchanged.
fn add(env: &Env, conf: &NetConf, name: &str) -> Result<Value, CniError> {
    let netns = env.netns.as_deref();
    let mut result: Map<String, Value> = conf.prev_result.clone().and_then(|v| v.as_object().cloned()).unwrap_or_default();
    result.insert("cniVersion".into(), Value::String(conf.cni_version.clone()));
    let result = Value::Object(result);

    if let Some(nf) = registered(name).map_err(fail)? {
        let present = is_present(&nf).map_err(fail)?;
        if present && same_pod(&nf, netns, &env.ifname) {
            return Ok(result); // a repeated ADD: nothing to do
        }
        if present || nf.origin != Origin::Cni {
            return Err(CniError::new(
                code::ATTACH_FAILED,
                format!("NF name {name} is taken"),
                format!(
                    "NF {name} is {} in namespace {} (origin {:?}); give this network's pods their own names with \"nf\" \
                     or delete it (`xnf nf delete {name}`)",
                    nf.host_ifname,
                    nf.netns_path.display(),
                    nf.origin
                ),
            ));
        }
        // A pod of this name whose DEL never came (its namespace and port are
        // gone): the new pod takes the name over, and chains through it come back up.
        eprintln!("xnf-cni: NF {name} belonged to a pod that is gone ({}); replacing it", nf.netns_path.display());
        warn(&crate::nf_delete(name, true).map_err(fail)?);
    }

    let spec = NfSpec {
        name: name.to_string(),
        netns: netns.map(str::to_string),
        container: None,
        ifname: env.ifname.clone(),
        queues: None,
        function: conf.function,
        forward: conf.forward,
        existing: true,
    };
    match crate::nf_create(spec, Origin::Cni) {
        Ok(w) => warn(&w),
        Err(e) => {
            // A concurrent ADD of the same pod may have registered it first.
            if let Ok(Some(nf)) = registered(name) {
                if same_pod(&nf, netns, &env.ifname) {
                    return Ok(result);
                }
            }
            return Err(CniError::from_anyhow(code::ATTACH_FAILED, format!("attaching xnf to {} of the pod as NF {name}", env.ifname), &e));
        }
    }
    Ok(result)
}

/// DEL: remove the pod's NF. Already gone (NF, interface or namespace) is
/// success, as the spec asks; an NF of that name that is not this pod's
/// (another pod took the name, or it was made by hand) is left alone.
fn del(env: &Env, name: &str) -> Result<(), CniError> {
    let Some(nf) = registered(name).map_err(fail)? else { return Ok(()) };
    if nf.origin != Origin::Cni {
        eprintln!("xnf-cni: NF {name} was not made by xnf-cni (origin {:?}); left alone", nf.origin);
        return Ok(());
    }
    let present = is_present(&nf).map_err(fail)?;
    if present && !same_pod(&nf, env.netns.as_deref(), &env.ifname) {
        eprintln!("xnf-cni: NF {name} now belongs to another pod ({}); left alone", nf.netns_path.display());
        return Ok(());
    }
    // force: chains through the pod go down and drop their traffic until a
    // pod of this name is back; refusing would leave the pod undeletable.
    match crate::nf_delete(name, true) {
        Ok(w) => {
            warn(&w);
            Ok(())
        }
        Err(_) if matches!(registered(name), Ok(None)) => Ok(()), // a concurrent DEL won
        Err(e) => Err(CniError::from_anyhow(code::ATTACH_FAILED, format!("removing NF {name}"), &e)),
    }
}

fn check_failed(msg: String) -> CniError {
    CniError::new(code::CHECK_FAILED, msg, "")
}

/// CHECK: the NF is registered for this pod and every attachment ADD made is in place.
fn check(env: &Env, conf: &NetConf, name: &str) -> Result<(), CniError> {
    let nf = registered(name).map_err(fail)?.ok_or_else(|| check_failed(format!("NF {name} is not registered")))?;
    if !same_pod(&nf, env.netns.as_deref(), &env.ifname) {
        return Err(check_failed(format!("NF {name} is {} in namespace {}, not this pod's", nf.spec.ifname, nf.netns_path.display())));
    }
    if nf.spec.function != conf.function || nf.spec.forward != conf.forward {
        return Err(check_failed(format!(
            "NF {name} was added with function {} and forward {}, the configuration now says function {} and forward {} (DEL and ADD the pod to apply it)",
            nf.spec.function.name(),
            nf.spec.forward,
            conf.function.name(),
            conf.forward
        )));
    }
    if !is_present(&nf).map_err(fail)? {
        return Err(check_failed(format!("NF {name}: its host port {} (ifindex {}) vanished", nf.host_ifname, nf.host_ifindex)));
    }
    if !dataplane::port_attached(nf.host_ifindex) {
        return Err(check_failed(format!("NF {name}: xnf's chain program is not attached to its host port {}", nf.host_ifname)));
    }
    let (ifindex, _, peer, prog) = ns::nf_end(&nf.netns_path, &env.ifname)
        .map_err(|e| CniError::from_anyhow(code::CHECK_FAILED, format!("NF {name}: its end {} is missing", env.ifname), &e))?;
    if ifindex != nf.nf_ifindex || peer != Some(nf.host_ifindex) {
        return Err(check_failed(format!("NF {name}: {} is not the interface ADD adopted (ifindex or peer changed)", env.ifname)));
    }
    if conf.function != Function::None && (prog.is_none() || !dataplane::function_attached(name)) {
        return Err(check_failed(format!("NF {name}: xnf's {} function is not attached to {}", conf.function.name(), env.ifname)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    fn invoke(pairs: &[(&str, &str)], stdin: &str) -> (Value, i32) {
        let (out, status) = run(&env_of(pairs), &mut stdin.as_bytes());
        (serde_json::from_str(&out).unwrap_or(Value::Null), status)
    }

    const ADD: &[(&str, &str)] = &[("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "abc"), ("CNI_NETNS", "/nonexistent"), ("CNI_IFNAME", "eth0")];

    #[test]
    fn version_needs_no_config() {
        let (v, status) = invoke(&[("CNI_COMMAND", "VERSION")], "");
        assert_eq!(status, 0);
        assert_eq!(v, json!({"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0"]}));
    }

    #[test]
    fn config_parsing_defaults_and_keys() {
        let c = parse_conf(br#"{"cniVersion":"1.0.0","name":"n","type":"xnf-cni","prevResult":{"interfaces":[]},"dns":{}}"#).unwrap();
        assert_eq!((c.nf, c.function, c.forward), (None, Function::Pass, false));
        assert!(c.prev_result.is_some());
        let c = parse_conf(br#"{"cniVersion":"0.4.0","name":"n","type":"xnf-cni","nf":"fw","function":"reflect","forward":true}"#).unwrap();
        assert_eq!((c.nf.as_deref(), c.function, c.forward), (Some("fw"), Function::Reflect, true));
        assert_eq!(parse_conf(br#"{"cniVersion":"1.0.0","name":"n","function":"none"}"#).unwrap().function, Function::None);
    }

    #[test]
    fn config_errors_have_the_spec_codes() {
        let code_of = |s: &str| parse_conf(s.as_bytes()).unwrap_err().code;
        assert_eq!(code_of("{not json"), code::DECODE);
        assert_eq!(code_of(r#"{"name":"n"}"#), code::INVALID_CONFIG, "no cniVersion");
        assert_eq!(code_of(r#"{"cniVersion":"1.0.0","name":"n","function":"jump"}"#), code::INVALID_CONFIG);
        assert_eq!(code_of(r#"{"cniVersion":"1.0.0","name":"n","forward":"yes"}"#), code::INVALID_CONFIG);
        assert_eq!(code_of(r#"{"cniVersion":"1.0.0","name":"n","prevResult":[]}"#), code::INVALID_CONFIG);
        assert_eq!(code_of(r#"{"cniVersion":"0.3.1","name":"n"}"#), code::INCOMPATIBLE_VERSION);
    }

    #[test]
    fn env_errors_and_cni_args() {
        let code_of = |p: &[(&str, &str)]| Env::from_lookup(&env_of(p)).unwrap_err().code;
        assert_eq!(code_of(&[]), code::INVALID_ENV);
        assert_eq!(code_of(&[("CNI_COMMAND", "GC")]), code::INVALID_ENV);
        assert_eq!(code_of(&[("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "c"), ("CNI_IFNAME", "eth0")]), code::INVALID_ENV, "ADD without netns");
        assert_eq!(code_of(&[("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "c"), ("CNI_NETNS", "/x")]), code::INVALID_ENV, "no ifname");
        let del = Env::from_lookup(&env_of(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", ""),
            ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=fw-0;junk"),
        ]))
        .unwrap();
        assert_eq!(del.netns, None, "DEL tolerates a namespace that is gone");
        assert_eq!(del.arg("K8S_POD_NAME"), Some("fw-0"));
        assert_eq!(del.arg("junk"), None);
    }

    #[test]
    fn names_from_pods_and_containers() {
        assert_eq!(derive_name(Some("fw-0"), "abc").as_deref(), Some("fw-0"));
        assert_eq!(derive_name(Some("My.Pod"), "abc").as_deref(), Some("my-pod"));
        let (a, b) = (derive_name(Some("web-7d9f8b-xk2lp"), "c").unwrap(), derive_name(Some("web-7d9f8b-q8zrt"), "c").unwrap());
        assert_ne!(a, b, "replicas of a Deployment get different names");
        assert!(a.starts_with("web-7d-") && a.len() == NF_NAME_MAX, "{a}");
        assert_eq!(derive_name(Some("web-7d9f8b-xk2lp"), "c").unwrap(), a, "stable across invocations (ADD and DEL agree)");
        assert_eq!(derive_name(None, "0123456789abcdef0123").as_deref(), Some("0123456789a"));
        assert_eq!(derive_name(Some("--"), "ABCdef").as_deref(), Some("abcdef"));
        assert_eq!(derive_name(None, "--"), None);
        for n in [a, b, derive_name(Some("_x_Y.z__"), "c").unwrap()] {
            check_name("NF", &n, NF_NAME_MAX).unwrap();
        }
    }

    #[test]
    fn error_json_and_early_failures() {
        let e = CniError::new(7, "bad", "why");
        assert_eq!(e.to_json("0.4.0"), json!({"cniVersion": "0.4.0", "code": 7, "msg": "bad", "details": "why"}));
        // ADD without prevResult: refused before touching anything, in the config's version.
        let (v, status) = invoke(ADD, r#"{"cniVersion":"0.4.0","name":"n","type":"xnf-cni"}"#);
        assert_eq!((status, v["code"].as_u64(), v["cniVersion"].as_str()), (1, Some(7), Some("0.4.0")));
        assert!(v["msg"].as_str().unwrap().contains("prevResult"));
        let (v, status) = invoke(ADD, "][");
        assert_eq!((status, v["code"].as_u64(), v["cniVersion"].as_str()), (1, Some(6), Some("1.0.0")));
        let (v, _) = invoke(ADD, r#"{"cniVersion":"1.0.0","name":"n","nf":"Bad Name","prevResult":{}}"#);
        assert_eq!(v["code"], 7);
        assert!(v["details"].as_str().unwrap().contains("NF name"), "{v}");
        let (v, _) = invoke(&[("CNI_COMMAND", "CHECK")], "{}");
        assert_eq!(v["code"], 4);
    }
}
