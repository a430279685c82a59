//! The chain state of one network namespace, kept as JSON in
//! `/run/xnf/net-<inode>/chain.json` and changed under a file lock, so
//! concurrent commands (a CNI runtime starts pods in parallel) see each
//! other's changes. The BPF maps are derived from it (see `dataplane`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::model::{ChainSpec, NfSpec, Origin};
use xnf_core::state::{self, StateLock};

/// An NF as created: its spec and what xnf made for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nf {
    pub spec: NfSpec,
    pub origin: Origin,
    /// Data-plane slot (NF table, counters).
    pub slot: u32,
    /// The namespace file it was found at, and that namespace's inode.
    pub netns_path: PathBuf,
    pub netns_inode: u64,
    /// Host end of the veth.
    pub host_ifname: String,
    pub host_ifindex: u32,
    pub host_mac: [u8; 6],
    /// NF end of the veth.
    pub nf_ifindex: u32,
    pub nf_mac: [u8; 6],
    /// xnf created the veth (and deletes it with the NF).
    pub created_veth: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    pub spec: ChainSpec,
    pub slot: u32,
    #[serde(default)]
    pub origin: Origin,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registry {
    pub nfs: BTreeMap<String, Nf>,
    pub chains: BTreeMap<String, Chain>,
}

impl Registry {
    /// Lowest slot below `max` that none of `used` holds.
    pub fn free_slot(used: impl Iterator<Item = u32>, max: u32, what: &str) -> Result<u32> {
        let used: std::collections::BTreeSet<u32> = used.collect();
        (0..max).find(|s| !used.contains(s)).with_context(|| format!("all {max} {what} slots are in use; delete some first"))
    }

    pub fn free_nf_slot(&self) -> Result<u32> {
        Self::free_slot(self.nfs.values().map(|n| n.slot), crate::program::MAX_NFS, "NF")
    }

    pub fn free_chain_slot(&self) -> Result<u32> {
        Self::free_slot(self.chains.values().map(|c| c.slot), crate::program::MAX_CHAINS, "chain")
    }

    /// Chains that go through NF `name`.
    pub fn chains_with(&self, name: &str) -> Vec<String> {
        self.chains.values().filter(|c| c.spec.nfs.iter().any(|n| n == name)).map(|c| c.spec.name.clone()).collect()
    }
}

/// The registry, read under the chain's state lock, held until this is dropped.
pub struct Locked {
    _lock: StateLock,
    path: PathBuf,
    pub reg: Registry,
}

impl Locked {
    pub fn open() -> Result<Locked> {
        let lock = xnf_core::lifecycle::Lifecycle::<crate::program::Chain>::lock()?;
        let path = state::run_dir()?.join("chain.json");
        let reg = match std::fs::read_to_string(&path) {
            Ok(s) => serde_json::from_str(&s).with_context(|| format!("{} is corrupt; remove it and recreate the chains", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Registry::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(Locked { _lock: lock, path, reg })
    }

    /// Writes the registry (atomically: a reader sees the old or the new one).
    pub fn save(&self) -> Result<()> {
        if self.reg == Registry::default() {
            let _ = std::fs::remove_file(&self.path);
            return Ok(());
        }
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&self.reg)?).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path).with_context(|| format!("replacing {}", self.path.display()))
    }
}
