//! `xnf apply FILE`: converge the running NFs and chains to a TOML file.
//!
//! Everything xnf made is compared with the file: chains and NFs not in it
//! are removed, changed ones are rebuilt, new ones created; NFs the CNI
//! plugin made belong to the container runtime and are left alone (chains
//! may use them). With nothing to change, nothing is touched.
//!
//! ```toml
//! [[nf]]
//! name = "fw"
//! netns = "fw"          # or container = "fw", or netns = "/proc/PID/ns/net"
//! function = "pass"     # pass | reflect | none
//! forward = true
//!
//! [[chain]]
//! name = "web"
//! ingress = "eth0"
//! egress = ["eth1"]
//! nfs = ["fw"]
//! [[chain.match]]
//! dst = "198.18.16.0/24"
//! proto = "udp"
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

use crate::model::{successors, ChainSpec, NfSpec, Origin};
use crate::registry::{Chain, Locked};
use crate::{build_nf, commit, unbuild_nf};
use xnf_netns::netlink;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainFile {
    #[serde(default)]
    pub nf: Vec<NfSpec>,
    #[serde(default)]
    pub chain: Vec<ChainSpec>,
}

impl ChainFile {
    pub fn parse(text: &str, origin: &str) -> Result<ChainFile> {
        let f: ChainFile = toml::from_str(text).map_err(|e| xnf_core::files::toml_error(origin, text, &e))?;
        let mut seen = BTreeSet::new();
        for n in &f.nf {
            ensure!(seen.insert(&n.name), "{origin}: NF {} is declared twice", n.name);
        }
        let mut seen = BTreeSet::new();
        for c in &f.chain {
            ensure!(seen.insert(&c.name), "{origin}: chain {} is declared twice", c.name);
        }
        Ok(f)
    }
}

/// Converges to `path`; returns what changed (one line each) and warnings.
pub fn apply(path: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    apply_file(&ChainFile::parse(&text, &path.display().to_string())?)
}

/// The NFs and chains xnf made (not the CNI plugin's), as a file that
/// [`apply_file`] converges to without a change.
pub fn running() -> Result<ChainFile> {
    let reg = Locked::open()?.reg;
    let nf = reg.nfs.values().filter(|n| n.origin != Origin::Cni).map(|n| n.spec.clone()).collect();
    let chain = reg.chains.values().map(|c| c.spec.clone()).collect();
    Ok(ChainFile { nf, chain })
}

/// What converging to `file` would change, one line each, changing nothing.
pub fn changes(file: &ChainFile) -> Result<Vec<String>> {
    let reg = Locked::open()?.reg;
    let managed: BTreeMap<&String, _> = reg.nfs.iter().filter(|(_, n)| n.origin != Origin::Cni).collect();
    let mut out = Vec::new();
    for (name, nf) in &managed {
        match file.nf.iter().find(|n| &&n.name == name) {
            None => out.push(format!("nf {name}: deleted")),
            Some(n) if *n != nf.spec => out.push(format!("nf {name}: rebuilt")),
            Some(_) => {}
        }
    }
    out.extend(file.nf.iter().filter(|n| !managed.contains_key(&n.name)).map(|n| format!("nf {}: created", n.name)));
    for (name, c) in &reg.chains {
        match file.chain.iter().find(|x| &x.name == name) {
            None => out.push(format!("chain {name}: deleted")),
            Some(x) if *x != c.spec => out.push(format!("chain {name}: changed")),
            Some(_) => {}
        }
    }
    out.extend(file.chain.iter().filter(|c| !reg.chains.contains_key(&c.name)).map(|c| format!("chain {}: created", c.name)));
    Ok(out)
}

/// Converges to `file`; returns what changed (one line each) and warnings.
pub fn apply_file(file: &ChainFile) -> Result<(Vec<String>, Vec<String>)> {
    let mut l = Locked::open()?;
    let reg = &l.reg;

    // What the file wants, against what xnf (not the CNI plugin) made.
    for n in &file.nf {
        if reg.nfs.get(&n.name).is_some_and(|x| x.origin == Origin::Cni) {
            bail!("NF {} belongs to the CNI plugin (a pod's interface); give the file's NF another name", n.name);
        }
    }
    let managed: BTreeMap<&String, _> = reg.nfs.iter().filter(|(_, n)| n.origin != Origin::Cni).collect();
    let wanted: BTreeMap<&String, &NfSpec> = file.nf.iter().map(|n| (&n.name, n)).collect();
    let nf_gone: Vec<String> = managed.iter().filter(|(k, n)| wanted.get(*k) != Some(&&n.spec)).map(|(k, _)| (*k).clone()).collect();
    let nf_new: Vec<&NfSpec> = file.nf.iter().filter(|n| managed.get(&n.name).is_none_or(|x| x.spec != **n)).collect();
    let chain_gone: Vec<String> =
        reg.chains.iter().filter(|(k, c)| file.chain.iter().find(|x| &x.name == *k) != Some(&c.spec)).map(|(k, _)| k.clone()).collect();
    let chain_new: Vec<&ChainSpec> = file.chain.iter().filter(|c| reg.chains.get(&c.name).is_none_or(|x| x.spec != **c)).collect();
    if nf_gone.is_empty() && nf_new.is_empty() && chain_gone.is_empty() && chain_new.is_empty() {
        return Ok((vec!["nothing to change".into()], Vec::new()));
    }

    // Check the whole result before touching anything.
    let names: BTreeSet<String> =
        reg.nfs.iter().filter(|(_, n)| n.origin == Origin::Cni).map(|(k, _)| k.clone()).chain(file.nf.iter().map(|n| n.name.clone())).collect();
    successors(&names, &file.chain.iter().collect::<Vec<_>>())?;
    let links = netlink::links()?;
    for c in &file.chain {
        ensure!(
            links.iter().any(|l| l.name == c.ingress),
            "chain {}: ingress {:?} does not exist in this network namespace (see `ip link`)",
            c.name,
            c.ingress
        );
        for e in &c.egress {
            ensure!(links.iter().any(|l| &l.name == e), "chain {}: egress {e:?} does not exist in this network namespace", c.name);
        }
    }
    for n in &nf_new {
        crate::ns::resolve(n)?;
    }

    let mut changes = Vec::new();
    let mut before = l.reg.clone();
    for c in &chain_gone {
        l.reg.chains.remove(c);
        if !file.chain.iter().any(|x| &x.name == c) {
            changes.push(format!("chain {c}: deleted"));
        }
    }
    // NFs to rebuild or remove lose their ports now (sync), their veths after.
    let mut old_nfs = Vec::new();
    for n in &nf_gone {
        old_nfs.push(l.reg.nfs.remove(n).unwrap());
        if !wanted.contains_key(n) {
            changes.push(format!("nf {n}: deleted"));
        }
    }
    if !nf_gone.is_empty() {
        commit(&mut l, before)?;
        for nf in &old_nfs {
            unbuild_nf(nf)?;
        }
        before = l.reg.clone();
    }
    let mut built = Vec::new();
    for spec in &nf_new {
        let slot = l.reg.free_nf_slot()?;
        match build_nf(spec, Origin::Apply, slot) {
            Ok(nf) => {
                changes.push(format!("nf {}: {}", spec.name, if old_nfs.iter().any(|o| o.spec.name == spec.name) { "rebuilt" } else { "created" }));
                l.reg.nfs.insert(spec.name.clone(), nf.clone());
                built.push(nf);
            }
            Err(e) => {
                built.iter().for_each(|nf| drop(unbuild_nf(nf)));
                l.reg = before;
                let _ = crate::dataplane::sync(&l.reg);
                l.save()?;
                return Err(e);
            }
        }
    }
    for spec in &chain_new {
        let slot = match before.chains.get(&spec.name) {
            Some(c) => c.slot,
            None => l.reg.free_chain_slot()?,
        };
        let replaced = before.chains.contains_key(&spec.name) || chain_gone.contains(&spec.name);
        changes.push(format!("chain {}: {}", spec.name, if replaced { "changed" } else { "created" }));
        l.reg.chains.insert(spec.name.clone(), Chain { spec: (*spec).clone(), slot, origin: Origin::Apply });
    }
    match commit(&mut l, before) {
        Ok(w) => Ok((changes, w)),
        Err(e) => {
            built.iter().for_each(|nf| drop(unbuild_nf(nf)));
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_parses_with_defaults() {
        let f = ChainFile::parse(
            r#"
            [[nf]]
            name = "fw"
            netns = "fw"
            [[chain]]
            name = "web"
            ingress = "eth0"
            nfs = ["fw"]
            [[chain.match]]
            dst = "198.18.16.0/24"
            "#,
            "t.toml",
        )
        .unwrap();
        assert_eq!(f.nf[0].ifname, "xnf0");
        assert_eq!(f.chain[0].priority, 100);
        assert_eq!(f.chain[0].matches[0].dst.as_deref(), Some("198.18.16.0/24"));
    }

    #[test]
    fn bad_files_say_where() {
        let e = ChainFile::parse("[[nf]]\nname = \"fw\"\ncolour = \"red\"\n", "t.toml").unwrap_err().to_string();
        assert!(e.contains("t.toml") && e.contains("colour") && e.contains("line 3"), "{e}");
        let e = ChainFile::parse("[[nf]]\nname = \"a\"\nnetns = \"x\"\n[[nf]]\nname = \"a\"\nnetns = \"y\"\n", "t.toml").unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
    }
}
