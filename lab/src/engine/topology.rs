//! Lab topologies from TOML: namespaces, veth pairs with queue counts,
//! addresses, routes (listed or synthetic), neighbours, sysctls, and which
//! network function runs where. Built-in scenarios are TOML files compiled
//! into the binary (`topologies/*.toml`); `xnf lab up` builds either kind.
//!
//! Names in a file are logical: namespace `dut` becomes `xnf-<pid>-<n>-dut`
//! (unique per run) and an interface without the `xnf` prefix gets it
//! (`eth0` -> `xnfeth0`), so nothing the lab makes can be mistaken for the
//! host's. Endpoints are written `namespace:interface`.
//!
//! The `[roles]` table tells experiments where traffic enters and leaves:
//! the generator's interface, dut's ingress and egress, and the sink's. The
//! generator's addresses and next-hop MAC are read from the built topology.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use xnf_netns::{check_test_addr, Mac, Netns, Topology};

use super::attach::default_router_options;
use super::LabAttachment;

/// Built-in scenarios: (name, what it is, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[("line", include_str!("../../topologies/line.toml")), ("pair", include_str!("../../topologies/pair.toml"))];

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    #[serde(default)]
    pub description: String,
    #[serde(rename = "namespace")]
    pub namespaces: Vec<NamespaceSpec>,
    #[serde(rename = "link", default)]
    pub links: Vec<LinkSpec>,
    #[serde(rename = "route", default)]
    pub routes: Vec<RouteSpec>,
    #[serde(rename = "neighbour", default)]
    pub neighbours: Vec<NeighbourSpec>,
    #[serde(rename = "function", default)]
    pub functions: Vec<FunctionSpec>,
    pub roles: Option<Roles>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSpec {
    pub name: String,
    /// Turns on IPv4 and IPv6 forwarding.
    #[serde(default)]
    pub forwarding: bool,
    /// Any other sysctls, e.g. `"net.ipv4.conf.all.rp_filter" = "0"`.
    #[serde(default)]
    pub sysctl: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// `namespace:interface` of one end.
    pub a: String,
    pub b: String,
    /// RX and TX queues of both ends (default 1).
    pub queues: Option<u32>,
    pub mtu: Option<u32>,
    /// Addresses with prefix length, e.g. `["198.18.0.1/24", "2001:db8::1/64"]`.
    #[serde(default)]
    pub a_addr: Vec<String>,
    #[serde(default)]
    pub b_addr: Vec<String>,
    /// Ends that exist already instead of a veth pair: `DEV` (in the
    /// host's namespace) or `NETNS:DEV`, for `a` and `b`. Both or none.
    /// The lab borrows them and gives them back as it found them
    /// ([`super::borrowed`]).
    pub a_existing: Option<String>,
    pub b_existing: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    pub ns: String,
    /// A prefix (`198.18.1.0/24`), or `synthetic-ipv4` / `synthetic-ipv6`
    /// for `count` generated prefixes with a realistic length mix.
    pub to: String,
    pub via: Option<String>,
    pub dev: Option<String>,
    /// Number of synthetic prefixes (only with `to = "synthetic-..."`).
    pub count: Option<u64>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NeighbourSpec {
    pub ns: String,
    pub ip: String,
    pub dev: String,
    /// A MAC address, or `namespace:interface` to use that interface's MAC.
    pub mac: String,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FunctionKind {
    /// `xnf router` on the listed interfaces, attached as `xnf router
    /// attach` attaches it (the route cache, with its follower).
    Router,
    /// XDP_PASS (lets a veth end receive redirected / XDP_TX frames).
    Pass,
    /// The lab's counting sink (XDP_DROP).
    Sink,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    pub ns: String,
    pub kind: FunctionKind,
    pub interfaces: Vec<String>,
}

/// Where experiments send and count traffic (`namespace:interface` each).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Roles {
    pub gen: String,
    pub dut_in: String,
    pub dut_out: String,
    pub sink: String,
}

/// An interface name as created: `xnf` prefixed unless already.
pub fn ifname(logical: &str) -> String {
    if logical.starts_with("xnf") {
        logical.to_string()
    } else {
        format!("xnf{logical}")
    }
}

pub(crate) fn split_endpoint(ep: &str) -> Result<(&str, &str)> {
    ep.split_once(':')
        .filter(|(ns, dev)| !ns.is_empty() && !dev.is_empty())
        .with_context(|| format!("`{ep}` is not an endpoint: write `namespace:interface`, e.g. `dut:in`"))
}

impl TopologySpec {
    /// Parses TOML; errors carry `origin`, the line and the field.
    pub fn parse(text: &str, origin: &str) -> Result<TopologySpec> {
        let spec: TopologySpec = toml::from_str(text).map_err(|e| xnf_core::files::toml_error(origin, text, &e))?;
        spec.validate().with_context(|| format!("{origin}: invalid topology"))?;
        Ok(spec)
    }

    /// A built-in scenario by name, or else a TOML file at that path.
    pub fn load(name_or_path: &str) -> Result<TopologySpec> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, &format!("built-in topology `{name_or_path}`"));
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
            bail!("no topology `{name_or_path}`: give a TOML file or one of the built-in scenarios: {}", names.join(", "));
        }
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    fn has_ns(&self, ns: &str) -> bool {
        self.namespaces.iter().any(|n| n.name == ns)
    }

    fn has_if(&self, ns: &str, dev: &str) -> bool {
        let dev = ifname(dev);
        self.links.iter().any(|l| [&l.a, &l.b].iter().any(|ep| split_endpoint(ep).is_ok_and(|(n, d)| n == ns && ifname(d) == dev)))
    }

    fn check_endpoint(&self, what: &str, ep: &str) -> Result<()> {
        let (ns, dev) = split_endpoint(ep).with_context(|| what.to_string())?;
        ensure!(self.has_if(ns, dev), "{what}: no link has the end `{ep}`");
        Ok(())
    }

    fn check_ns(&self, what: &str, ns: &str) -> Result<()> {
        ensure!(self.has_ns(ns), "{what}: no [[namespace]] named `{ns}`");
        Ok(())
    }

    fn check_dev(&self, what: &str, ns: &str, dev: &str) -> Result<()> {
        ensure!(self.has_if(ns, dev), "{what}: namespace `{ns}` has no interface `{dev}`");
        Ok(())
    }

    pub fn validate(&self) -> Result<()> {
        ensure!(!self.namespaces.is_empty(), "a topology needs at least one [[namespace]]");
        let mut seen = std::collections::HashSet::new();
        for n in &self.namespaces {
            ensure!(
                !n.name.is_empty() && n.name.len() <= 24 && n.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "namespace name `{}`: use 1-24 letters, digits, `-` or `_`",
                n.name
            );
            ensure!(seen.insert(&n.name), "namespace `{}` is declared twice", n.name);
        }
        let mut ends = std::collections::HashSet::new();
        for (i, l) in self.links.iter().enumerate() {
            let what = format!("link {} ({} <-> {})", i + 1, l.a, l.b);
            for ep in [&l.a, &l.b] {
                let (ns, dev) = split_endpoint(ep).with_context(|| what.clone())?;
                self.check_ns(&what, ns)?;
                let name = ifname(dev);
                ensure!(name.len() <= 15, "{what}: interface name `{name}` is longer than 15 bytes");
                ensure!(
                    name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                    "{what}: interface name `{dev}`: use letters, digits, `-` or `_`"
                );
                ensure!(ends.insert((ns.to_string(), name.clone())), "{what}: `{ep}` is used by two links");
            }
            if let Some(q) = l.queues {
                ensure!((1..=64).contains(&q), "{what}: queues must be 1..=64, not {q}");
            }
            if let Some(mtu) = l.mtu {
                ensure!((68..=65535).contains(&mtu), "{what}: mtu must be 68..=65535");
            }
            ensure!(
                l.a_existing.is_some() == l.b_existing.is_some(),
                "{what}: give both a_existing and b_existing (a link joins two existing interfaces, or the lab makes a veth pair)"
            );
            for a in l.a_addr.iter().chain(&l.b_addr) {
                ensure!(a.contains('/'), "{what}: address `{a}` needs a prefix length, e.g. {a}/24");
                check_test_addr(a).with_context(|| what.clone())?;
            }
        }
        for (i, r) in self.routes.iter().enumerate() {
            let what = format!("route {} (in {} to {})", i + 1, r.ns, r.to);
            self.check_ns(&what, &r.ns)?;
            if let Some(dev) = &r.dev {
                self.check_dev(&what, &r.ns, dev)?;
            }
            if let Some(via) = &r.via {
                check_test_addr(via).with_context(|| what.clone())?;
            }
            match r.to.as_str() {
                "synthetic-ipv4" | "synthetic-ipv6" => {
                    let n = r.count.with_context(|| format!("{what}: synthetic routes need `count`"))?;
                    ensure!((1..=2_000_000).contains(&n), "{what}: count must be 1..=2000000");
                    ensure!(r.via.is_some(), "{what}: synthetic routes need `via` (the next hop)");
                }
                to => {
                    ensure!(r.count.is_none(), "{what}: `count` is only for `to = \"synthetic-ipv4\"` or `\"synthetic-ipv6\"`");
                    ensure!(r.via.is_some() || r.dev.is_some(), "{what}: give `via`, `dev` or both");
                    if !matches!(to, "default" | "0.0.0.0/0" | "::/0") {
                        check_test_addr(to).with_context(|| what.clone())?;
                    }
                }
            }
        }
        for (i, n) in self.neighbours.iter().enumerate() {
            let what = format!("neighbour {} (in {}: {})", i + 1, n.ns, n.ip);
            self.check_ns(&what, &n.ns)?;
            self.check_dev(&what, &n.ns, &n.dev)?;
            check_test_addr(&n.ip).with_context(|| what.clone())?;
            if n.mac.parse::<Mac>().is_err() {
                self.check_endpoint(&format!("{what}: mac is neither a MAC address nor an endpoint"), &n.mac)?;
            }
        }
        for (i, f) in self.functions.iter().enumerate() {
            let what = format!("function {} ({:?} in {})", i + 1, f.kind, f.ns);
            self.check_ns(&what, &f.ns)?;
            ensure!(!f.interfaces.is_empty(), "{what}: list the interfaces it runs on");
            for d in &f.interfaces {
                self.check_dev(&what, &f.ns, d)?;
            }
        }
        if let Some(r) = &self.roles {
            for (what, ep) in [("roles.gen", &r.gen), ("roles.dut_in", &r.dut_in), ("roles.dut_out", &r.dut_out), ("roles.sink", &r.sink)] {
                self.check_endpoint(what, ep)?;
            }
        }
        Ok(())
    }

    /// Sets the queue count of every link (the queues/CPUs sweep).
    pub fn set_queues(&mut self, queues: u32) {
        for l in &mut self.links {
            l.queues = Some(queues);
        }
    }

    /// The addresses configured on an endpoint, with prefix lengths.
    fn cidrs_of(&self, ep_ns: &str, ep_dev: &str) -> Vec<String> {
        let mut out = Vec::new();
        for l in &self.links {
            for (ep, addrs) in [(&l.a, &l.a_addr), (&l.b, &l.b_addr)] {
                if split_endpoint(ep).is_ok_and(|(n, d)| n == ep_ns && ifname(d) == ifname(ep_dev)) {
                    out.extend(addrs.iter().cloned());
                }
            }
        }
        out
    }

    /// The addresses configured on an endpoint.
    fn addrs_of(&self, ep_ns: &str, ep_dev: &str) -> Vec<IpAddr> {
        self.cidrs_of(ep_ns, ep_dev).iter().filter_map(|a| a.split('/').next()?.parse::<IpAddr>().ok()).collect()
    }
}

/// A built topology: the namespaces (removed when dropped) and the
/// functions it attached.
pub struct BuiltTopology {
    pub spec: TopologySpec,
    // Attachments are dropped (detached) before the namespaces.
    attachments: Vec<(String, String, LabAttachment)>,
    routers: Vec<super::NfGuard>,
    // Given back after the functions are detached, before the namespaces go.
    borrowed: Vec<super::borrowed::BorrowGuard>,
    names: HashMap<String, usize>,
    topo: Topology,
    /// The hosts running the namespaces that are not here ([`super::across`]).
    pub(super) hosts: super::hosts::Hosts,
    // Their parts, torn down there after this host's.
    pub(super) remote_parts: Vec<super::across::RemotePart>,
}

/// Maps CPU i to TX queue i of a multi-queue veth (XPS), as NIC drivers do
/// by default: without it the kernel picks a TX queue by flow hash (flow
/// dissector and siphash per packet), and the peer receives on the queue
/// of that number, so half the packets cross to the other CPU's NAPI —
/// a contended ring lock, buffers freed on the CPU that did not allocate
/// them. Measured with `xnf profile` (lab README, "the kernel with two
/// queues"): 2.2x the CPU per packet of one queue without it, the same with it.
fn steer_tx_by_cpu(ns: &Netns, dev: &str, queues: u32) -> Result<()> {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()).min(64) as u32;
    let script: String = (0..queues).map(|i| format!("echo {:x} > /sys/class/net/{dev}/queues/tx-{i}/xps_cpus;", 1u64 << (i % ncpu))).collect();
    ns.exec(&["sh", "-c", &script]).with_context(|| format!("steering {dev}'s TX queues by CPU (XPS) in {}", ns.role()))?;
    Ok(())
}

impl BuiltTopology {
    /// Creates everything in order: namespaces and sysctls, links, addresses,
    /// routes, neighbours, functions. On failure all of it is removed.
    ///
    /// Of links, routes, neighbours and functions, only what is in `spec`'s
    /// namespaces is built: a part of a topology across hosts builds its
    /// own ends of the links between hosts, and leaves neighbours whose MAC
    /// is on another host to [`Self::build_across`].
    pub fn build(spec: &TopologySpec, progress: &mut dyn FnMut(&str)) -> Result<BuiltTopology> {
        Self::check_existing(spec)?;
        let mut topo = Topology::new();
        let mut names = HashMap::new();
        for n in &spec.namespaces {
            topo.add(&n.name)?;
            names.insert(n.name.clone(), topo.nodes().len() - 1);
        }
        let mut built = BuiltTopology {
            spec: spec.clone(),
            attachments: Vec::new(),
            routers: Vec::new(),
            borrowed: Vec::new(),
            names,
            topo,
            hosts: Default::default(),
            remote_parts: Vec::new(),
        };
        for n in &spec.namespaces {
            let ns = built.ns(&n.name)?;
            if n.forwarding {
                ns.enable_forwarding()?;
            }
            for (k, v) in &n.sysctl {
                ns.sysctl_set(k, v).with_context(|| format!("namespace {}: sysctl {k}", n.name))?;
            }
        }
        // Given back if the build fails, as the namespaces are removed.
        let mut borrowed = Vec::new();
        for l in &spec.links {
            let (an, ad) = split_endpoint(&l.a)?;
            let (bn, bd) = split_endpoint(&l.b)?;
            // An end on another host is built there.
            let (a, b) = (built.names.contains_key(an).then(|| built.ns(an)).transpose()?, built.names.contains_key(bn).then(|| built.ns(bn)).transpose()?);
            if a.is_none() && b.is_none() {
                continue; // both ends on another host
            }
            let existing = match (&l.a_existing, &l.b_existing) {
                (Some(ea), Some(eb)) => {
                    for (e, ns, dev) in [(ea, a, ad), (eb, b, bd)] {
                        if let Some(ns) = ns {
                            borrowed.push(super::borrowed::borrow(&super::borrowed::Existing::parse(e)?, ns, &ifname(dev))?);
                        }
                    }
                    true
                }
                _ => {
                    let (a, b) = (a.context("a veth pair's ends are on one host")?, b.context("a veth pair's ends are on one host")?);
                    xnf_netns::veth(a, &ifname(ad), b, &ifname(bd), l.queues)?;
                    false
                }
            };
            let ends = [(a, ifname(ad), &l.a_addr), (b, ifname(bd), &l.b_addr)];
            for (ns, dev, addrs) in ends.into_iter().filter_map(|(ns, d, x)| Some((ns?, d, x))) {
                if let (true, Some(q)) = (existing, l.queues) {
                    ns.run(|| xnf_netns::devsettings::DevSettings::set_queues(&dev, q)).with_context(|| format!("{dev} in {}", ns.role()))??;
                }
                let mut batch = ns.batch();
                if let Some(mtu) = l.mtu {
                    batch.set_mtu(&dev, mtu)?;
                }
                batch.link_up(&dev)?;
                for addr in addrs {
                    batch.addr_add(&dev, addr)?;
                }
                batch.apply().with_context(|| format!("configuring {} in {}", dev, ns.role()))?;
                // Not on a borrowed interface: its XPS masks are not recorded.
                if let (false, Some(q)) = (existing, l.queues.filter(|&q| q > 1)) {
                    steer_tx_by_cpu(ns, &dev, q)?;
                }
            }
        }
        built.borrowed = borrowed;
        for r in spec.routes.iter().filter(|r| built.names.contains_key(&r.ns)) {
            let ns = built.ns(&r.ns)?;
            let dev = r.dev.as_deref().map(ifname);
            match r.to.as_str() {
                "synthetic-ipv4" | "synthetic-ipv6" => {
                    let count = r.count.unwrap_or(0);
                    progress(&format!("installing {count} synthetic routes in {}", r.ns));
                    super::routes::install_synthetic(ns, r.to == "synthetic-ipv6", count, r.via.as_deref().unwrap_or_default(), dev.as_deref())?;
                }
                to => ns.route_add(to, r.via.as_deref(), dev.as_deref()).with_context(|| format!("route in {} to {to}", r.ns))?,
            }
        }
        for n in spec.neighbours.iter().filter(|n| built.names.contains_key(&n.ns) && !built.mac_elsewhere(&n.mac)) {
            let mac = match n.mac.parse::<Mac>() {
                Ok(m) => m,
                Err(_) => built.mac(&n.mac)?,
            };
            built.ns(&n.ns)?.neigh_add(&n.ip, mac, &ifname(&n.dev))?;
        }
        let (mut attachments, mut routers) = (Vec::new(), Vec::new());
        for f in spec.functions.iter().filter(|f| built.names.contains_key(&f.ns)) {
            let ns = built.ns(&f.ns)?;
            let devs: Vec<String> = f.interfaces.iter().map(|d| ifname(d)).collect();
            match f.kind {
                FunctionKind::Pass | FunctionKind::Sink => {
                    for d in devs {
                        let a = LabAttachment::of_kind(f.kind, ns, &d)?;
                        attachments.push((f.ns.clone(), d, a));
                    }
                }
                FunctionKind::Router => routers.push(super::NfGuard::router(ns, &devs, default_router_options())?),
            }
        }
        (built.attachments, built.routers) = (attachments, routers);
        Ok(built)
    }

    /// Checks, before anything is built, that every existing interface of
    /// `spec`'s namespaces can be borrowed.
    /// A host's interfaces are named once: a second link over one would
    /// find it gone (checked per host: two hosts may name the same port).
    pub fn check_existing(spec: &TopologySpec) -> Result<()> {
        let mut seen = Vec::new();
        for l in &spec.links {
            for (ep, e) in [(&l.a, &l.a_existing), (&l.b, &l.b_existing)] {
                if let (Some(e), true) = (e, spec.has_ns(split_endpoint(ep)?.0)) {
                    let existing = super::borrowed::Existing::parse(e)?;
                    ensure!(!seen.contains(&existing), "existing interface {existing} is named by two links' ends: a port carries one link");
                    super::borrowed::check(&existing)?;
                    seen.push(existing);
                }
            }
        }
        Ok(())
    }

    /// Whether `mac` names an endpoint whose namespace is not built here.
    fn mac_elsewhere(&self, mac: &str) -> bool {
        mac.parse::<Mac>().is_err() && split_endpoint(mac).is_ok_and(|(ns, _)| !self.names.contains_key(ns))
    }

    /// The attachment (sink or pass) the topology's functions put on `ns:dev`.
    pub fn attachment(&self, ep: &str) -> Result<&LabAttachment> {
        self.here(ep)?;
        let (ns, dev) = split_endpoint(ep)?;
        self.attachments
            .iter()
            .find(|(n, d, _)| n == ns && *d == ifname(dev))
            .map(|(_, _, a)| a)
            .with_context(|| format!("the topology runs no sink or pass function on `{ep}`: add a [[function]] for it"))
    }

    /// Replaces the sink or pass function on `ep` by what `attach` makes
    /// (e.g. [`LabAttachment::sink`]). The old program is detached first:
    /// an interface has one XDP program.
    pub fn replace_function(&mut self, ep: &str, attach: impl FnOnce(&Netns, &str) -> Result<LabAttachment>) -> Result<()> {
        let (ns, dev) = self.remove_function(ep)?;
        let a = attach(self.ns(&ns)?, &dev).with_context(|| format!("replacing the function on `{ep}`"))?;
        self.attachments.push((ns, dev, a));
        Ok(())
    }

    /// Detaches the sink or pass function on `ep` (leaving the interface
    /// to an experiment's own program); returns its namespace and device.
    pub fn remove_function(&mut self, ep: &str) -> Result<(String, String)> {
        self.here(ep)?;
        let (ns, dev) = split_endpoint(ep)?;
        let dev = ifname(dev);
        let i = self
            .attachments
            .iter()
            .position(|(n, d, _)| n == ns && *d == dev)
            .with_context(|| format!("the topology runs no sink or pass function on `{ep}`: add a [[function]] for it"))?;
        drop(self.attachments.remove(i));
        Ok((ns.to_string(), dev))
    }

    /// Fails, in one line, for an endpoint on another host.
    fn here(&self, ep: &str) -> Result<()> {
        self.ns(split_endpoint(ep)?.0).map(drop)
    }

    pub fn ns(&self, name: &str) -> Result<&Netns> {
        if let Some(h) = self.hosts.of(name) {
            bail!("namespace `{name}` runs on host `{}`: this step of the experiment does not run across hosts", h.name);
        }
        let i = self.names.get(name).with_context(|| format!("no namespace `{name}` in this topology"))?;
        Ok(&self.topo.nodes()[*i])
    }

    /// The namespace and (created) interface name of `ns:dev`.
    pub fn endpoint(&self, ep: &str) -> Result<(&Netns, String)> {
        let (ns, dev) = split_endpoint(ep)?;
        Ok((self.ns(ns)?, ifname(dev)))
    }

    pub fn mac(&self, ep: &str) -> Result<Mac> {
        if let Some(h) = self.host_of(ep)? {
            return Ok(h.call::<String>(&super::hoststeps::Step::Mac { ep: ep.into() })?.parse()?);
        }
        let (ns, dev) = self.endpoint(ep)?;
        ns.mac(&dev)
    }

    /// The first configured address of the family on an endpoint.
    pub fn addr(&self, ep: &str, ipv6: bool) -> Result<IpAddr> {
        let (ns, dev) = split_endpoint(ep)?;
        self.spec
            .addrs_of(ns, dev)
            .into_iter()
            .find(|a| a.is_ipv6() == ipv6)
            .with_context(|| format!("`{ep}` has no {} address in the topology", if ipv6 { "IPv6" } else { "IPv4" }))
    }

    /// The addresses the topology configures on an endpoint, with their
    /// prefix lengths (`198.18.0.2/24`).
    pub fn cidrs(&self, ep: &str) -> Vec<String> {
        split_endpoint(ep).map(|(ns, dev)| self.spec.cidrs_of(ns, dev)).unwrap_or_default()
    }

    pub fn roles(&self) -> Result<&Roles> {
        self.spec.roles.as_ref().context("this topology has no [roles] table: experiments need roles.gen, dut_in, dut_out and sink")
    }

    /// What was built, for `xnf lab up`: one line per namespace.
    pub fn describe(&self) -> Vec<String> {
        self.spec
            .namespaces
            .iter()
            .filter_map(|n| {
                let place = match self.hosts.of(&n.name) {
                    Some(h) => format!("on host `{}`", h.name),
                    None => self.ns(&n.name).ok()?.name().to_string(),
                };
                let devs: Vec<String> = self
                    .spec
                    .links
                    .iter()
                    .flat_map(|l| [&l.a, &l.b])
                    .filter_map(|ep| split_endpoint(ep).ok())
                    .filter(|(ns, _)| *ns == n.name)
                    .map(|(_, d)| ifname(d))
                    .collect();
                Some(format!("{:<8} {:<28} {}", n.name, place, devs.join(" ")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        format!("{:#}", TopologySpec::parse(text, "t.toml").unwrap_err())
    }

    const TWO: &str = r#"
[[namespace]]
name = "a"
[[namespace]]
name = "b"
[[link]]
a = "a:x"
b = "b:y"
a_addr = ["198.18.0.1/24"]
b_addr = ["198.18.0.2/24"]
"#;

    #[test]
    fn builtins_parse_and_have_roles() {
        for (name, _) in BUILTIN {
            let spec = TopologySpec::load(name).unwrap();
            assert!(spec.roles.is_some(), "{name}");
            assert!(!spec.description.is_empty(), "{name}");
        }
    }

    #[test]
    fn unknown_field_names_the_line_and_field() {
        let e = err(&format!("{TWO}\n[[route]]\nns = \"a\"\nto = \"198.18.1.0/24\"\nvai = \"198.18.0.2\"\n"));
        assert!(e.contains("t.toml") && e.contains("line 15") && e.contains("unknown field `vai`"), "{e}");
    }

    #[test]
    fn syntax_error_names_the_line() {
        let e = err("[[namespace]]\nname = \"a\nx");
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn wrong_type_names_the_field() {
        let e = err(&TWO.replace("a = \"a:x\"", "a = \"a:x\"\nqueues = \"two\""));
        assert!(e.contains("queues") && e.contains("line"), "{e}");
    }

    #[test]
    fn semantic_errors_say_what_to_fix() {
        assert!(err(&TWO.replace("b = \"b:y\"", "b = \"c:y\"")).contains("no [[namespace]] named `c`"));
        assert!(err(&TWO.replace("198.18.0.2/24", "10.0.0.2/24")).contains("not a test address"));
        assert!(err(&TWO.replace("198.18.0.2/24", "198.18.0.2")).contains("needs a prefix length"));
        assert!(err(&TWO.replace("b = \"b:y\"", "b = \"b\"")).contains("namespace:interface"));
        assert!(err(&TWO.replace("b = \"b:y\"", "b = \"b:averyveryverylongname\"")).contains("longer than 15"));
        assert!(err(&format!("{TWO}[[route]]\nns=\"a\"\nto=\"synthetic-ipv4\"\nvia=\"198.18.0.2\"\n")).contains("need `count`"));
        assert!(err(&format!("{TWO}[roles]\ngen=\"a:x\"\ndut_in=\"b:y\"\ndut_out=\"b:z\"\nsink=\"b:y\"\n")).contains("roles.dut_out"));
        assert!(err(&format!("{TWO}[[namespace]]\nname = \"a\"\n")).contains("declared twice"));
    }

    #[test]
    fn unknown_scenario_lists_the_builtins() {
        let e = format!("{:#}", TopologySpec::load("no-such-scenario").unwrap_err());
        assert!(e.contains("line") && e.contains("pair"), "{e}");
    }

    #[test]
    fn interface_names_get_the_prefix_once() {
        assert_eq!(ifname("eth0"), "xnfeth0");
        assert_eq!(ifname("xnfin"), "xnfin");
    }

    #[test]
    fn builds_the_line_and_removes_it() {
        let spec = TopologySpec::load("line").unwrap();
        let names: Vec<String>;
        {
            let t = BuiltTopology::build(&spec, &mut |_| {}).unwrap();
            let roles = t.roles().unwrap().clone();
            let gen = t.endpoint(&roles.gen).unwrap().0;
            let (dut, _) = t.endpoint(&roles.dut_in).unwrap();
            let sink_v4 = t.addr(&roles.sink, false).unwrap();
            let forwarded = || dut.snmp().unwrap().value("Ip", "ForwDatagrams").unwrap();
            let (f0, c0) = (forwarded(), t.attachment(&roles.sink).unwrap().packets().unwrap());
            gen.run(move || {
                let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
                for _ in 0..5 {
                    s.send_to(b"xnf", (sink_v4, 9)).unwrap();
                }
            })
            .unwrap();
            // At least: dut's fresh interface may also send IPv6 router
            // solicitations or MLD reports, which the sink counts too.
            let counted = || t.attachment(&roles.sink).unwrap().packets().unwrap() - c0;
            let t0 = std::time::Instant::now();
            while (forwarded() - f0 < 5 || counted() < 5) && t0.elapsed() < std::time::Duration::from_secs(5) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert_eq!(forwarded() - f0, 5, "dut's kernel forwarded the datagrams");
            let counted = counted();
            assert!(counted >= 5, "the sink counted {counted} of the 5 datagrams");
            names = spec.namespaces.iter().map(|n| t.ns(&n.name).unwrap().name().to_string()).collect();
        }
        let live = xnf_netns::live_namespaces();
        for n in names {
            assert!(!live.contains(&n), "{n} left behind");
        }
    }
}
