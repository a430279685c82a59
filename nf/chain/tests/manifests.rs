//! The Kubernetes manifests under deploy/kubernetes: valid YAML, every
//! document a named object, the conflists they carry valid JSON with
//! xnf-cni chained after a main plugin (and accepted by xnf-cni's own
//! parser), the DaemonSet installing into the node's CNI folders, the
//! example chain a valid `xnf apply` file naming the example pod. No
//! kubelet or kubectl is involved.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use xnf_chain::cni::{derive_name, parse_conf};
use xnf_chain::ChainFile;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

/// Every document of a YAML file.
fn documents(name: &str) -> Vec<serde_yaml::Value> {
    let text = std::fs::read_to_string(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let docs: Vec<serde_yaml::Value> =
        serde_yaml::Deserializer::from_str(&text).map(|d| serde_yaml::Value::deserialize(d).unwrap_or_else(|e| panic!("{name}: {e}"))).collect();
    for d in &docs {
        for k in ["apiVersion", "kind"] {
            assert!(d[k].as_str().is_some_and(|s| !s.is_empty()), "{name}: a document without {k}");
        }
        assert!(d["metadata"]["name"].as_str().is_some(), "{name}: {} without a name", d["kind"].as_str().unwrap());
    }
    docs
}

fn of_kind<'a>(docs: &'a [serde_yaml::Value], kind: &str) -> &'a serde_yaml::Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"))
}

/// A conflist: xnf-cni last, after a main plugin, its own keys accepted by xnf-cni.
fn check_conflist(text: &str) {
    let c: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("conflist is not JSON: {e}\n{text}"));
    let plugins = c["plugins"].as_array().expect("plugins");
    assert!(plugins.len() >= 2 && plugins[0]["type"] != "xnf-cni", "xnf-cni is chained: a main plugin first");
    let mut last = plugins.last().unwrap().clone();
    assert_eq!(last["type"], "xnf-cni");
    last["cniVersion"] = c["cniVersion"].clone();
    last["name"] = c["name"].clone();
    parse_conf(last.to_string().as_bytes()).unwrap_or_else(|e| panic!("xnf-cni refuses its entry: {e:?}"));
}

#[test]
fn daemonset_installs_the_plugin_and_its_conflist_on_every_node() {
    let docs = documents("xnf-cni-daemonset.yaml");
    let cm = of_kind(&docs, "ConfigMap");
    let conflists: Vec<&str> =
        cm["data"].as_mapping().unwrap().iter().filter(|(k, _)| k.as_str().unwrap().ends_with(".conflist")).map(|(_, v)| v.as_str().unwrap()).collect();
    assert_eq!(conflists.len(), 1);
    check_conflist(conflists[0]);
    let ds = of_kind(&docs, "DaemonSet");
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(ds["spec"]["selector"]["matchLabels"], ds["spec"]["template"]["metadata"]["labels"], "the selector matches the pods");
    let host_paths: Vec<&str> = spec["volumes"].as_sequence().unwrap().iter().filter_map(|v| v["hostPath"]["path"].as_str()).collect();
    assert_eq!(host_paths, ["/opt/cni/bin", "/etc/cni/net.d"]);
    let init = &spec["initContainers"][0];
    let cmd = init["command"].as_sequence().unwrap().iter().map(|s| s.as_str().unwrap()).collect::<Vec<_>>().join(" ");
    assert!(cmd.contains("/opt/cni/bin/xnf-cni") && cmd.contains("/etc/cni/net.d"), "{cmd}");
    let mounts: Vec<&str> = init["volumeMounts"].as_sequence().unwrap().iter().map(|m| m["mountPath"].as_str().unwrap()).collect();
    assert!(mounts.contains(&"/opt/cni/bin") && mounts.contains(&"/etc/cni/net.d"), "{mounts:?}");
}

#[test]
fn example_nf_pod_and_chain_agree() {
    let docs = documents("example-nf.yaml");
    check_conflist(of_kind(&docs, "NetworkAttachmentDefinition")["spec"]["config"].as_str().unwrap());
    let sts = of_kind(&docs, "StatefulSet");
    let net = sts["spec"]["template"]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].as_str().unwrap();
    assert_eq!(net, of_kind(&docs, "NetworkAttachmentDefinition")["metadata"]["name"].as_str().unwrap());
    // The pod's name (StatefulSet NAME-0) is the NF's name xnf-cni derives.
    let pod = format!("{}-0", sts["metadata"]["name"].as_str().unwrap());
    let nf = derive_name(Some(&pod), "c").unwrap();
    let text = std::fs::read_to_string(dir().join("example-chain.toml")).unwrap();
    let file = ChainFile::parse(&text, "example-chain.toml").unwrap();
    assert_eq!(file.chain.len(), 1);
    assert_eq!(file.chain[0].nfs, [nf], "the chain goes through the example pod");
}
