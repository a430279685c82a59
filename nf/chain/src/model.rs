//! What users declare: network functions, chains and their traffic
//! classes, and the checks that keep a set of chains unambiguous.
//!
//! The rule that makes sharing safe: an NF's output has exactly one next
//! hop (the next NF, or routing out), because the data plane decides the
//! next hop from the port a frame comes back on and carries no per-packet
//! chain state. So chains may share an NF only if they continue the same
//! way after it (they may merge, never fork), and the successor graph must
//! have no cycle (an NF listed twice in a chain is the smallest cycle).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
pub use xnf_core::class::MatchSpec;

/// What xnf attaches to the NF's own end of the veth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Function {
    /// XDP_PASS: the NF's Linux stack (or an AF_XDP socket in copy mode, or
    /// a program the user attaches later) handles the frames.
    #[default]
    Pass,
    /// XDP_TX: the bundled reflector sends every frame straight back.
    Reflect,
    /// Nothing: the user's own XDP program is (or will be) attached there.
    None,
}

impl Function {
    pub fn name(self) -> &'static str {
        match self {
            Function::Pass => "pass",
            Function::Reflect => "reflect",
            Function::None => "none",
        }
    }
}

/// Who made an NF: `xnf apply` converges only what is not the CNI plugin's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    #[default]
    Cli,
    Apply,
    Cni,
}

/// A network function: a network namespace and the veth joining it to the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NfSpec {
    pub name: String,
    /// Network namespace: a name from `ip netns` or a path like /proc/PID/ns/net.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// Docker or Podman container name (its network namespace is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Name of the NF's end of the veth, inside its namespace.
    #[serde(default = "default_ifname")]
    pub ifname: String,
    /// RX/TX queues of the veth [default: the number of CPUs].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    #[serde(default)]
    pub function: Function,
    /// Make the NF's Linux stack send what it forwards back to the host
    /// (forwarding on, default routes through the host end).
    #[serde(default)]
    pub forward: bool,
    /// Use the veth `ifname` that already exists there (made by a CNI main
    /// plugin, for instance) instead of creating one.
    #[serde(default)]
    pub existing: bool,
}

pub fn default_ifname() -> String {
    "xnf0".into()
}

/// A chain: traffic classes on an ingress, sent through NFs in order, then routed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainSpec {
    pub name: String,
    pub ingress: String,
    /// Interfaces the chain may route out of in XDP (besides ingresses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
    #[serde(rename = "match", default)]
    pub matches: Vec<MatchSpec>,
    pub nfs: Vec<String>,
    /// Lower first when classes of several chains overlap on an ingress.
    #[serde(default = "default_priority")]
    pub priority: u32,
    /// Frames that may be in a class but whose protocol or ports cannot be
    /// read (later fragments, truncated L4 headers, long IPv6 extension
    /// header chains): into the NFs, or dropped. Never around the NFs.
    #[serde(default, skip_serializing_if = "UnknownL4::is_default")]
    pub unknown_l4: UnknownL4,
}

/// What a chain does with frames that may be in its classes but whose L4
/// header cannot be determined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum UnknownL4 {
    /// Into the chain's NFs, like the class (an NF that reassembles or
    /// inspects fragments decides).
    #[default]
    Nf,
    /// Dropped at the ingress.
    Drop,
}

impl UnknownL4 {
    fn is_default(&self) -> bool {
        *self == UnknownL4::default()
    }
}

pub fn default_priority() -> u32 {
    100
}

/// Names of NFs and chains: they become interface names and pin names.
pub fn check_name(kind: &str, name: &str, max: usize) -> Result<()> {
    ensure!(
        !name.is_empty()
            && name.len() <= max
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            && name.as_bytes()[0].is_ascii_alphanumeric(),
        "{kind} name {name:?}: use 1 to {max} characters from a-z, 0-9, - and _, starting with a letter or digit"
    );
    Ok(())
}

/// Longest NF name: the host end is `xnf-NAME`, 15 characters at most.
pub const NF_NAME_MAX: usize = 11;
pub const CHAIN_NAME_MAX: usize = 32;

/// Checks a set of chains against the NFs that exist and returns each NF's
/// successor (`None`: routed out). Errors name the chain and the NF.
pub fn successors(nfs: &BTreeSet<String>, chains: &[&ChainSpec]) -> Result<BTreeMap<String, Option<String>>> {
    let mut next: BTreeMap<String, (Option<String>, String)> = BTreeMap::new();
    for c in chains {
        check_name("chain", &c.name, CHAIN_NAME_MAX)?;
        ensure!(!c.nfs.is_empty(), "chain {}: give at least one NF (--nf NAME)", c.name);
        ensure!(!c.matches.is_empty(), "chain {}: give at least one traffic class (--match ...)", c.name);
        for m in &c.matches {
            m.class().with_context(|| format!("chain {}: match {m}", c.name))?;
        }
        let mut seen = BTreeSet::new();
        for nf in &c.nfs {
            ensure!(nfs.contains(nf), "chain {}: unknown NF {nf:?} (create it first: `xnf nf create {nf} --netns NS`)", c.name);
            ensure!(seen.insert(nf), "chain {}: NF {nf} appears twice, which would be a cycle (frames would loop through it); use a second NF", c.name);
        }
        for (i, nf) in c.nfs.iter().enumerate() {
            let succ = c.nfs.get(i + 1).cloned();
            if let Some((other, owner)) = next.get(nf) {
                if *other != succ {
                    let say = |s: &Option<String>| s.clone().map_or("routing out".to_string(), |n| format!("NF {n}"));
                    bail!(
                        "chain {}: NF {nf} would be followed by {} here but by {} in chain {owner}; an NF's output has one \
                         next hop, so chains may share an NF only if they continue the same way after it (give chain {} its own NF)",
                        c.name,
                        say(&succ),
                        say(other),
                        c.name
                    );
                }
            } else {
                next.insert(nf.clone(), (succ, c.name.clone()));
            }
        }
    }
    // Cannot happen once the above holds (every chain ends at an NF that
    // routes out); kept so that a future rule change cannot make loops.
    for start in next.keys() {
        let mut at = start.clone();
        let mut steps = 0;
        while let Some((Some(n), owner)) = next.get(&at) {
            steps += 1;
            if n == start || steps > next.len() {
                bail!("chain {owner}: NF {at} -> {n} closes a cycle through NF {start} across chains; frames would loop forever");
            }
            at = n.clone();
        }
    }
    Ok(next.into_iter().map(|(k, (s, _))| (k, s)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(name: &str, nfs: &[&str]) -> ChainSpec {
        ChainSpec {
            name: name.into(),
            ingress: "in".into(),
            matches: vec![MatchSpec::default()],
            nfs: nfs.iter().map(|s| s.to_string()).collect(),
            priority: 100,
            ..Default::default()
        }
    }

    fn names(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn successors_of_a_line_and_of_merging_chains() {
        let nfs = names(&["a", "b", "c", "d"]);
        let (x, y) = (chain("x", &["a", "b", "c"]), chain("y", &["d", "b", "c"]));
        let s = successors(&nfs, &[&x, &y]).unwrap();
        assert_eq!(s["a"], Some("b".into()));
        assert_eq!(s["d"], Some("b".into()));
        assert_eq!(s["c"], None);
    }

    #[test]
    fn forks_cycles_and_unknown_nfs_are_refused() {
        let nfs = names(&["a", "b", "c"]);
        let err = |cs: &[ChainSpec]| successors(&nfs, &cs.iter().collect::<Vec<_>>()).unwrap_err().to_string();
        assert!(err(&[chain("x", &["a", "b"]), chain("y", &["a", "c"])]).contains("one next hop"));
        assert!(err(&[chain("x", &["a", "b"]), chain("y", &["a"])]).contains("routing out"));
        assert!(err(&[chain("x", &["a", "b", "a"])]).contains("appears twice"));
        assert!(err(&[chain("x", &["a", "b"]), chain("y", &["b", "a"])]).contains("next hop"));
        assert!(err(&[chain("x", &["a", "zz"])]).contains("unknown NF \"zz\""));
        assert!(err(&[chain("x", &[])]).contains("at least one NF"));
        assert!(err(&[chain("Bad Name", &["a"])]).contains("chain name"));
    }

    #[test]
    fn no_cycle_can_form_across_chains() {
        // a -> b -> c -> a would need every NF on it to have a successor,
        // but each chain through it ends at an NF that routes out.
        let nfs = names(&["a", "b", "c"]);
        let cs = [chain("x", &["a", "b"]), chain("y", &["c", "a"]), chain("z", &["b", "c"])];
        assert!(successors(&nfs, &cs.iter().collect::<Vec<_>>()).is_err());
    }

    #[test]
    fn match_parsing() {
        let m = MatchSpec::parse("dst=198.18.16.0/24,proto=udp,dport=5000-5001").unwrap();
        assert_eq!(m.to_string(), "dst=198.18.16.0/24,proto=udp,dport=5000-5001");
        assert_eq!(MatchSpec::parse("all").unwrap(), MatchSpec::default());
        assert_eq!(MatchSpec::parse("vlan=100 family=ipv6").unwrap().vlan, Some(100));
        for (bad, why) in [
            ("dst=198.18.16.1/24", "host bits"),
            ("colour=red", "unknown key"),
            ("dport=80", "ports need"),
            ("proto=udp,dport=9-1", "empty"),
            ("src=198.18.0.0/15,dst=2001:db8::/32", "different IP versions"),
            ("family=ipv6,dst=198.18.0.0/15", "family"),
            ("vlan=5000", "VLAN"),
            ("proto=xyz", "proto"),
            ("dst", "key=value"),
        ] {
            let e = format!("{:#}", MatchSpec::parse(bad).unwrap_err());
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn name_rules() {
        assert!(check_name("NF", "fw-1", NF_NAME_MAX).is_ok());
        assert!(check_name("NF", "much-too-long", NF_NAME_MAX).is_err());
        assert!(check_name("NF", "", NF_NAME_MAX).is_err());
        assert!(check_name("NF", "Fw", NF_NAME_MAX).is_err());
        assert!(check_name("NF", "-x", NF_NAME_MAX).is_err());
    }
}
