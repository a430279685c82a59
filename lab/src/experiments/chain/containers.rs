//! `xnf lab chain`'s NFs in real containers: a private podman
//! ([`xnf_chain::podman`]: CNI backend, runc, a busybox image, its root in
//! a temporary folder) runs in dut's network namespace and starts one
//! container per NF, for each run of a container variant:
//!
//! - `xnf-podman`: containers with no network of their own (`--network
//!   none`); xnf joins each to dut as `xnf nf create --container` does
//!   (its own veth, `--queues` queues, XPS), on the namespace podman gives.
//! - `xnf-podman-cni`: containers on a CNI network of the real `ptp` plugin
//!   with `xnf-cni` chained after it, as a Kubernetes node would run them:
//!   each container becomes an NF when the runtime calls ADD, on the veth
//!   `ptp` made (one queue), and stops being one at DEL.
//!
//! Both forward with the container's Linux stack, like `xnf-linux-nf`'s
//! plain namespaces: the ratio to that variant is what a container costs
//! on the data path.

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use serde_json::json;
use xnf_chain::podman::Podman;
use xnf_netns::Netns;

use super::nf_name;

/// The CNI network of `xnf-podman-cni`, named after this process (the
/// runtime's result cache, /var/lib/cni/results, is the host's), and its
/// addresses (host-local).
fn network() -> String {
    format!("xnflab-{}", std::process::id())
}
const SUBNET: &str = "198.18.96.0/24";

/// A private podman in `dut`, with the CNI network of `xnf-podman-cni`.
pub(super) fn podman(dut: &Netns) -> Result<Podman> {
    let pm = Podman::new(&dut.path(), "lab", &xnf_cni()?).context("setting up podman for the container variants")?;
    pm.network(&network(), json!({"type": "ptp", "ipMasq": false, "ipam": pm.ipam(SUBNET)}), true)?;
    Ok(pm)
}

/// `xnf-cni` of this build: beside the running `xnf-lab` (and `xnf`).
fn xnf_cni() -> Result<PathBuf> {
    let bin = std::env::current_exe().context("finding the running binary")?.with_file_name("xnf-cni");
    ensure!(bin.exists(), "{} is missing: the container variants need it (cargo build -p xnf builds it beside xnf)", bin.display());
    Ok(bin)
}

/// The containers of one run, NF i's named `nfI` (what xnf-cni names its
/// NF after); removed when dropped, which for `xnf-podman-cni` is the
/// runtime's DEL that removes the NFs.
pub(super) struct Containers<'a> {
    pm: &'a Podman,
    names: Vec<String>,
}

impl Containers<'_> {
    /// Network namespace file of NF i's container (1-based).
    pub(super) fn netns(&self, i: u32) -> Result<String> {
        let pid = self.pm.inspect(&nf_name(i), "{{.State.Pid}}")?;
        Ok(format!("/proc/{pid}/ns/net"))
    }

    pub(super) fn remove(mut self) -> Result<()> {
        self.remove_all()
    }

    fn remove_all(&mut self) -> Result<()> {
        if self.names.is_empty() {
            return Ok(());
        }
        let mut args = vec!["rm", "--force", "--time", "0"];
        let names = std::mem::take(&mut self.names);
        args.extend(names.iter().map(String::as_str));
        self.pm.ok(&args).map(drop).context("removing the NF containers")
    }
}

impl Drop for Containers<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.remove_all() {
            eprintln!("xnf lab: {e:#}");
        }
    }
}

/// Starts `n` containers, on the CNI network when `cni`, else on none.
pub(super) fn start(pm: &Podman, n: u32, cni: bool) -> Result<Containers<'_>> {
    let mut c = Containers { pm, names: Vec::new() };
    let net = if cni { network() } else { "none".into() };
    for i in 1..=n {
        pm.start(&nf_name(i), &net).with_context(|| format!("starting NF {i}'s container"))?;
        c.names.push(nf_name(i));
    }
    Ok(c)
}

/// NF i's end in dut (1..=n) as the registry has it: the veth `ptp` made.
pub(super) fn host_ports(dut: &Netns, n: u32) -> Result<Vec<String>> {
    dut.run(move || -> Result<Vec<String>> {
        (1..=n).map(|i| xnf_chain::nf_host_port(&nf_name(i))?.with_context(|| format!("the runtime's ADD made no NF {}", nf_name(i)))).collect()
    })?
}
