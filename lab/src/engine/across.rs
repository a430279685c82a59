//! A topology across hosts ([`super::hosts`]): each host builds its part,
//! and what the driver and the experiments read of the generator's and the
//! sink's ends goes to the host that runs them. Everything else — dut's
//! set-up, placement, knobs, profiles — runs here, on dut's host, as on
//! one host.

use std::sync::Arc;

use anyhow::{Context, Result};
use xnf_netns::Netns;

use super::hosts::{Hosts, RemoteHost};
use super::hoststeps::Step;
use super::measure::Received;
use super::topology::{split_endpoint, BuiltTopology, FunctionKind, TopologySpec};
use super::{Generator, LabAttachment};
use crate::programs::gen::GenConfig;

/// A host's part of the topology, torn down there when dropped.
pub struct RemotePart(Arc<RemoteHost>);

impl Drop for RemotePart {
    fn drop(&mut self) {
        if let Err(e) = self.0.call::<()>(&Step::Teardown) {
            eprintln!("xnf lab: {e:#}");
        }
    }
}

/// `spec` with only the namespaces in `names` (links, routes, neighbours
/// and functions are filtered by [`BuiltTopology::build`]).
fn part(spec: &TopologySpec, names: &[String]) -> TopologySpec {
    let mut p = spec.clone();
    p.namespaces.retain(|n| names.contains(&n.name));
    p
}

impl BuiltTopology {
    /// Builds `spec` across `hosts`: every host's existing interfaces are
    /// checked before anything is built anywhere; then the hosts build
    /// their parts, this host its own, and the neighbours whose MAC is on
    /// another host are added last. Without hosts: [`Self::build`].
    pub fn build_across(spec: &TopologySpec, hosts: &Hosts, progress: &mut dyn FnMut(&str)) -> Result<BuiltTopology> {
        if hosts.is_empty() {
            return Self::build(spec, progress);
        }
        let elsewhere: Vec<String> = spec.namespaces.iter().filter(|n| hosts.of(&n.name).is_some()).map(|n| n.name.clone()).collect();
        let here: Vec<String> = spec.namespaces.iter().map(|n| n.name.clone()).filter(|n| !elsewhere.contains(n)).collect();
        let parts: Vec<(Arc<RemoteHost>, TopologySpec)> = hosts.all().iter().map(|h| (h.clone(), part(spec, &hosts.namespaces_of(h)))).collect();
        Self::check_existing(&part(spec, &here))?;
        for (h, p) in &parts {
            h.call::<()>(&Step::Check { spec: p.clone() })?;
        }
        let mut remote_parts = Vec::new();
        for (h, p) in &parts {
            progress(&format!("building namespaces {} on host `{}`", h_names(p), h.name));
            h.call::<()>(&Step::Build { spec: p.clone() })?;
            remote_parts.push(RemotePart(h.clone()));
        }
        let mut t = Self::build(&part(spec, &here), progress)?;
        (t.spec, t.hosts, t.remote_parts) = (spec.clone(), hosts.clone(), remote_parts);
        for n in &spec.neighbours {
            let mac_ns = split_endpoint(&n.mac).map(|(ns, _)| ns).unwrap_or_default();
            if n.mac.parse::<xnf_netns::Mac>().is_ok() || hosts.of(mac_ns).map(Arc::as_ptr) == hosts.of(&n.ns).map(Arc::as_ptr) {
                continue; // built with its namespace's part
            }
            let mac = t.mac(&n.mac)?;
            match hosts.of(&n.ns) {
                Some(h) => h.call(&Step::Neighbour { ns: n.ns.clone(), ip: n.ip.clone(), dev: n.dev.clone(), mac: mac.to_string() })?,
                None => t.ns(&n.ns)?.neigh_add(&n.ip, mac, &super::topology::ifname(&n.dev))?,
            }
        }
        Ok(t)
    }

    /// The host running endpoint `ep`'s namespace, if not this one.
    pub fn host_of(&self, ep: &str) -> Result<Option<&Arc<RemoteHost>>> {
        Ok(self.hosts.of(split_endpoint(ep)?.0))
    }

    /// Starts the generator on endpoint `ep` (this host or another): one
    /// thread per CPU of `cpus`, as [`super::measure::start_generators`].
    pub fn start_generators(&self, ep: &str, cfg: &GenConfig, cpus: &[usize], rate: u64) -> Result<Generator> {
        match self.host_of(ep)? {
            Some(h) => Generator::on_host(h.clone(), ep, cfg, cpus, rate),
            None => {
                let (ns, dev) = self.endpoint(ep)?;
                super::measure::start_generators(ns, &dev, cfg, cpus, rate)
            }
        }
    }

    /// Reads the frames the sink or pass function on `ep` counted.
    pub fn received(&self, ep: &str) -> Result<Received<'_>> {
        Ok(match self.host_of(ep)? {
            Some(h) => {
                let (h, ep) = (h.clone(), ep.to_string());
                Box::new(move || h.call(&Step::Packets { ep: ep.clone() }))
            }
            None => {
                let a = self.attachment(ep)?;
                Box::new(move || a.packets())
            }
        })
    }

    /// Replaces the function on `ep` (this host or another) by the lab's
    /// counting sink or its pass program.
    pub fn set_function(&mut self, ep: &str, kind: FunctionKind) -> Result<()> {
        match self.host_of(ep)?.cloned() {
            Some(h) => h.call(&Step::Function { ep: ep.into(), kind }),
            None => self.replace_function(ep, |ns, dev| LabAttachment::of_kind(kind, ns, dev)),
        }
    }

    /// Where endpoint `ep` is, to read its driver's counters.
    pub fn at(&self, ep: &str) -> Result<(At<'_>, String)> {
        Ok(match self.host_of(ep)? {
            Some(h) => (At::Host(h, ep.to_string()), super::topology::ifname(split_endpoint(ep)?.1)),
            None => {
                let (ns, dev) = self.endpoint(ep)?;
                (At::Here(ns), dev)
            }
        })
    }
}

/// An interface's place: a namespace here, or an endpoint on another host.
pub enum At<'a> {
    Here(&'a Netns),
    Host(&'a Arc<RemoteHost>, String),
}

impl At<'_> {
    /// The driver's counters (`ethtool -S`).
    pub fn ethtool_stats(&self, dev: &str) -> Result<Vec<(String, u64)>> {
        match self {
            At::Here(ns) => ns.ethtool_stats(dev),
            At::Host(h, ep) => h.call(&Step::EthtoolStats { ep: ep.clone() }),
        }
    }

    /// Its namespace's role, with the host when not here (`tester/gen`).
    pub fn role(&self) -> String {
        match self {
            At::Here(ns) => ns.role().to_string(),
            At::Host(h, ep) => format!("{}/{}", h.name, split_endpoint(ep).map(|(ns, _)| ns).unwrap_or_default()),
        }
    }

    /// What the interface is (driver, firmware, bus, NUMA node).
    pub fn nic(&self, role: &str, dev: &str) -> Result<super::results::Nic> {
        match self {
            At::Here(ns) => super::hoststeps::nic_of(role, ns, dev),
            At::Host(h, ep) => h.call(&Step::Nic { role: role.into(), ep: ep.clone() }).context("reading its driver information"),
        }
    }
}

fn h_names(p: &TopologySpec) -> String {
    p.namespaces.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ")
}
