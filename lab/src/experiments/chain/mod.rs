//! `xnf lab chain`: the path of the container-NF thesis (Fig. 8) — host ingress, a chain
//! of network functions in their own namespaces, host egress — measured
//! three ways on the same topology, variants alternated within each run:
//!
//! - `linux`: the Linux-stack baseline of the container-NF thesis §5.5. The same NF
//!   namespaces, joined to dut by plain veth pairs with addresses
//!   (198.18.(100+i).0/24), and nothing but kernel routing: dut's policy
//!   rules send the test traffic from its ingress into NF1 (`ip rule iif
//!   <ingress> to <sink>/32 lookup T1`, T1's default route via NF1), every
//!   NF's kernel forwards it back to dut (its default route is dut's end),
//!   and `ip rule iif <NFi's port> lookup T(i+1)` sends it on to the next;
//!   after the last NF dut's main table routes it to the sink. Neighbour
//!   entries are permanent, so nothing is resolved while measuring.
//! - `xnf`: `xnf chain` steering in XDP through the bundled reflector NFs
//!   (XDP_TX, the seed's stand-in VNF), the last hop routed by xnf's FIB
//!   code straight out of dut's egress.
//! - `xnf-linux-nf`: the same steering, but every NF forwards with its
//!   Linux stack (XDP_PASS + forwarding back to dut): what the steering
//!   gains when the NF itself costs a kernel forward.
//! - `xnf-podman`, `xnf-podman-cni`: `xnf-linux-nf` with every NF a podman
//!   container instead of a plain namespace ([`containers`]): joined by
//!   xnf, or made an NF by `xnf-cni` after the real `ptp` plugin.
//!
//! The chain's length is a parameter of the points (`nfs`), beside packet
//! size, flows and queues; the ratios `xnf / linux` and `xnf-linux-nf /
//! linux` are per point, so per length.
//!
//! NFs and chains are made through the library API on a thread inside dut
//! (state is keyed by that thread's namespace), for each variant and run,
//! and removed afterwards (guards remove them on errors too; on Ctrl-C the
//! lab's namespaces go, and xnf's state of dead namespaces is collected).
//!
//! Where frames are lost inside dut is read from the veth counters of every
//! NF's port in dut ([`hops`]), the same for every variant; for the xnf
//! variants the chain's own counters say how frames went in and out of
//! each NF and left (routed in XDP, or handed to dut's kernel), and dut's
//! `Ip ForwDatagrams` must not move: a run where dut's kernel forwarded
//! the traffic is refused rather than reported as xnf's.

mod containers;
mod hops;

use std::cell::RefCell;
use std::net::IpAddr;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use xnf_netns::Netns;

use crate::engine::driver::{Cpus, Experiment, Running};
use crate::engine::measure::{self, Counters};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::{Results, Sample};
use crate::engine::topology::{BuiltTopology, TopologySpec};
use crate::engine::LabAttachment;
use crate::experiments::router::{parse_item, parse_size};
use hops::{HopLoss, Reading};
use xnf_chain::model::{ChainSpec, Function, MatchSpec, NfSpec, Origin};
use xnf_chain::podman::Podman;

/// Longest chain measured.
pub const MAX_LENGTH: u32 = 8;

/// The chain's name in dut.
pub(crate) const CHAIN: &str = "lab";

/// The NFs' end of their veth, inside their namespaces.
const NF_IF: &str = "xnf0";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Plain kernel routing through the NFs (policy routing in dut).
    Linux,
    /// `xnf chain` steering, reflector NFs (XDP_TX).
    Xnf,
    /// `xnf chain` steering, NFs forwarding with their Linux stack.
    XnfLinuxNf,
    /// `xnf-linux-nf` with NFs in podman containers joined by xnf.
    XnfPodman,
    /// `xnf-linux-nf` with NFs in podman containers on a ptp + xnf-cni network.
    XnfPodmanCni,
}

impl Variant {
    fn in_containers(self) -> bool {
        matches!(self, Variant::XnfPodman | Variant::XnfPodmanCni)
    }
}

/// `xnf lab chain`: its own options (every list is a sweep), and the NF
/// namespaces and losses hop by hop of a run.
#[derive(Args, Default, Serialize)]
pub struct Chain {
    /// Chain lengths: NFs in the chain (1..=8); a list sweeps.
    #[arg(long = "length", default_value = "1,2,4", value_delimiter = ',', value_parser = parse_item::<u32>, value_name = "N[,N...]")]
    pub lengths: Vec<u32>,
    /// Frame sizes on the wire, FCS included (64..=1518), or imix; a list sweeps.
    #[arg(long = "size", default_value = "64", value_delimiter = ',', value_parser = parse_size, value_name = "BYTES|imix[,...]")]
    pub sizes: Vec<u32>,
    /// Flows (distinct UDP source ports); a list sweeps, e.g. 1,10,100,1000,10000.
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = parse_item::<u32>, value_name = "N[,N...]")]
    pub flows: Vec<u32>,
    /// RX/TX queues per veth (the line's and the NFs') = generator CPUs
    /// (CPUs 0..N); a list sweeps, like the seed's 1, 2, 4, 8 cores.
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = parse_item::<u32>, value_name = "N[,N...]")]
    pub queues: Vec<u32>,
    /// Variants to compare (xnf-podman and xnf-podman-cni run the NFs in
    /// podman containers: podman, runc, containernetworking-plugins and
    /// busybox-static must be installed).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "linux,xnf,xnf-linux-nf")]
    pub variants: Vec<Variant>,
    /// The NFs' namespaces, made once for the longest chain.
    #[arg(skip)]
    #[serde(skip)]
    nfs: Vec<Netns>,
    /// The container variants' private podman in dut.
    #[arg(skip)]
    #[serde(skip)]
    podman: Option<Podman>,
    /// Losses hop by hop, summed over the runs of each variant and point.
    #[arg(skip)]
    #[serde(skip)]
    hops: RefCell<Vec<(String, Point, HopLoss)>>,
}

impl crate::engine::driver::VariantName for Variant {
    fn name(&self) -> String {
        crate::engine::driver::variant_name(self)
    }
}

impl Experiment for Chain {
    type Variant = Variant;
    const NAME: &'static str = "chain";
    const ACROSS_HOSTS: bool = true;

    fn places_dut(&self) -> bool {
        true
    }

    fn params(&self) -> Vec<Param> {
        vec![params::size(), params::flows(), params::queues(), params::nfs()]
    }

    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        // Queues slowest: the topology is rebuilt for each queue count.
        vec![
            ("queues", params::values(&self.queues)),
            ("size", params::values(&self.sizes)),
            ("flows", params::values(&self.flows)),
            ("nfs", params::values(&self.lengths)),
        ]
    }

    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn ratios(&self) -> Vec<(&'static str, &'static str)> {
        vec![("xnf", "linux"), ("xnf-linux-nf", "linux"), ("xnf-podman", "xnf-linux-nf"), ("xnf-podman-cni", "xnf-linux-nf")]
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        measure::check_sizes(&self.sizes, false)?;
        ensure!(!self.lengths.is_empty(), "--length: give at least one chain length");
        for &n in &self.lengths {
            ensure!((1..=MAX_LENGTH).contains(&n), "--length {n}: a chain has 1..={MAX_LENGTH} NFs (max {MAX_LENGTH})");
        }
        for (i, n) in self.lengths.iter().enumerate() {
            ensure!(!self.lengths[..i].contains(n), "--length {n} is listed twice");
        }
        if self.variants.contains(&Variant::XnfPodmanCni) {
            ensure!(self.queues == [1], "--variants xnf-podman-cni: the ptp plugin makes single-queue veths; run it with --queues 1");
        }
        measure::check_generator(&self.flows, &self.queues, cpus.count)
    }

    /// Traffic comes back to dut from the NFs on other ports than its
    /// routes would send it: no reverse-path filter there.
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let dut_ns = spec.roles.as_ref().context("no [roles]")?.dut_in.split(':').next().unwrap_or_default().to_string();
        let ns =
            spec.namespaces.iter_mut().find(|n| n.name == dut_ns).with_context(|| format!("the topology has no namespace {dut_ns} for its dut_in role"))?;
        for k in ["net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter"] {
            ns.sysctl.insert(k.into(), "0".into());
        }
        Ok(())
    }

    /// The NF namespaces, once; their veths are made per variant with the
    /// point's queue count.
    fn built(&mut self, t: &mut BuiltTopology, pg: &Progress) -> Result<()> {
        if self.nfs.is_empty() {
            let longest = self.lengths.iter().copied().max().unwrap_or(1);
            pg.message(&format!("making {longest} NF namespaces"));
            self.nfs = nf_namespaces(longest)?;
        }
        if self.podman.is_none() && self.variants.iter().any(|v| v.in_containers()) {
            pg.message("setting up podman and its busybox image");
            let (dut, _) = t.endpoint(&t.roles()?.dut_in)?;
            self.podman = Some(containers::podman(dut)?);
        }
        Ok(())
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, p: &Point, v: Variant, _: Cpus, pg: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let (_, dout) = t.endpoint(&roles.dut_out)?;
        let sink_addr = t.addr(&roles.sink, false)?;
        let (n, queues) = (p.u32("nfs")?, p.u32("queues")?);
        let (mut linux, mut xnf, mut started) = (None, None, None);
        let mut ports: Vec<String> = (1..=n).map(port).collect();
        match v {
            Variant::Linux => linux = Some(setup_linux(dut, &din, &dout, &self.nfs, n, queues, sink_addr)?),
            _ => {
                if v.in_containers() {
                    let pm = self.podman.as_ref().context("podman was not set up")?;
                    started = Some(containers::start(pm, n, v == Variant::XnfPodmanCni)?);
                }
                let (c, warnings) = match (v, &started) {
                    // The runtime's ADD made the NFs on ptp's veths.
                    (Variant::XnfPodmanCni, _) => {
                        ports = containers::host_ports(dut, n)?;
                        chain_only(dut, &din, &dout, n, sink_addr)?
                    }
                    (_, Some(c)) => {
                        let netns = (1..=n).map(|i| c.netns(i)).collect::<Result<Vec<_>>>()?;
                        setup_xnf(dut, &din, &dout, &netns, queues, sink_addr, v)?
                    }
                    _ => {
                        let netns: Vec<String> = self.nfs.iter().take(n as usize).map(|ns| ns.path().display().to_string()).collect();
                        setup_xnf(dut, &din, &dout, &netns, queues, sink_addr, v)?
                    }
                };
                warnings.iter().for_each(|w| pg.println(&format!("xnf chain: {w}")));
                xnf = Some(c);
            }
        }
        let sink = t.received(&roles.sink)?;
        let readings = RefCell::new(Vec::new());
        Ok(Box::new(ChainRun { exp: self, v, ports, point: p.clone(), dut, din, dout, sink, readings, linux, xnf, containers: started }))
    }

    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        self.podman = None;
        self.nfs.clear();
        // xnf's run files of dut, which is gone now.
        xnf_core::state::gc_dead_namespaces();
        res.notes.push(format!(
            "veth, at points where dut shares the generators' CPUs (--dut-cpu shared, or no CPU left for it): the generator, dut, every NF and the sink run in softirq on the generating CPU (CPU {}; with N queues CPUs 0..N-1, one generator each); rates are of the whole path.",
            cpus.gen
        ));
        let hops = self.hops.take();
        for (v, p, h) in &hops {
            res.notes.push(h.note(v, &res.label(p)));
        }
        let details = hops.into_iter().map(|(variant, point, h)| serde_json::json!({"variant": variant, "point": point, "hops": h})).collect();
        res.details.insert("hops".into(), serde_json::Value::Array(details));
        Ok(())
    }

    fn print(&self, r: &Results) {
        print_by_length(r, &self.variants);
    }
}

pub(crate) fn nf_name(i: u32) -> String {
    format!("nf{i}")
}

/// NF i's port in dut: the host end xnf makes (`xnf-nfI`), and the name
/// the linux variant gives its own veth, so every variant is counted on
/// the same names.
fn port(i: u32) -> String {
    xnf_chain::host_ifname(&nf_name(i))
}

/// The linux variant's addresses on NF i's link: (dut's end, the NF's end).
fn link_addrs(i: u32) -> (String, String) {
    (format!("198.18.{}.1", 100 + i), format!("198.18.{}.2", 100 + i))
}

/// Routing table (and rule preference) that sends traffic into NF i.
fn table(i: u32) -> u32 {
    1000 + i
}

/// The NFs' namespaces (lab namespaces: `xnf-<pid>-<n>-nfI`), made once for
/// the longest chain; a chain of n NFs uses the first n. Forwarding on,
/// reverse-path filtering and ICMP redirects off, for the variants whose
/// NFs forward with their kernel.
pub(crate) fn nf_namespaces(count: u32) -> Result<Vec<Netns>> {
    (1..=count)
        .map(|i| {
            let ns = Netns::new(&nf_name(i))?;
            ns.enable_forwarding()?;
            for (k, v) in [
                ("net.ipv4.conf.all.rp_filter", "0"),
                ("net.ipv4.conf.default.rp_filter", "0"),
                ("net.ipv4.conf.all.send_redirects", "0"),
                ("net.ipv4.conf.default.send_redirects", "0"),
            ] {
                ns.sysctl_set(k, v)?;
            }
            Ok(ns)
        })
        .collect()
}

/// The linux variant on dut: veths, addresses, permanent neighbours and
/// policy routing through the first `n` NFs; XDP_PASS on dut's ingress so
/// the generator's frames are received. Removed when dropped.
struct LinuxChain<'a> {
    dut: &'a Netns,
    /// NF links made so far.
    links: u32,
    /// Rules and tables installed so far.
    rules: u32,
    _pass: Option<LabAttachment>,
}

impl Drop for LinuxChain<'_> {
    fn drop(&mut self) {
        let mut lines = Vec::new();
        for i in 1..=self.rules {
            lines.push(format!("rule del pref {}", table(i)));
            lines.push(format!("route flush table {}", table(i)));
        }
        // The NFs' ends, addresses, routes and neighbours go with the links.
        for i in 1..=self.links {
            lines.push(format!("link del {}", port(i)));
        }
        if let Err(e) = self.dut.ip_batch(&lines) {
            eprintln!("xnf lab: removing the linux chain from {}: {e:#}", self.dut.name());
        }
    }
}

/// XPS by CPU on `dev` in `ns`.
fn xps(ns: &Netns, dev: &str) -> Result<()> {
    let d = dev.to_string();
    xnf_netns::run_in(&ns.path(), move || xnf_chain::xps_per_cpu(&d))?.with_context(|| format!("XPS on {dev} in {}", ns.name()))
}

#[allow(clippy::too_many_arguments)]
fn setup_linux<'a>(dut: &'a Netns, din: &str, dout: &str, nfs: &[Netns], n: u32, queues: u32, sink: IpAddr) -> Result<LinuxChain<'a>> {
    let mut c = LinuxChain { dut, links: 0, rules: 0, _pass: None };
    for i in 1..=n {
        let nf = &nfs[i as usize - 1];
        let (host_addr, nf_addr) = link_addrs(i);
        xnf_netns::veth(dut, &port(i), nf, NF_IF, Some(queues))?;
        c.links = i;
        let (host_mac, nf_mac) = (dut.mac(&port(i))?, nf.mac(NF_IF)?);
        dut.batch()
            .link_up(&port(i))?
            .addr_add(&port(i), &format!("{host_addr}/24"))?
            .neigh_add(&nf_addr, nf_mac, &port(i))?
            .apply()
            .with_context(|| format!("configuring {} in dut", port(i)))?;
        nf.batch()
            .link_up(NF_IF)?
            .addr_add(NF_IF, &format!("{nf_addr}/24"))?
            .neigh_add(&host_addr, host_mac, NF_IF)?
            .route_add("default", Some(&host_addr), Some(NF_IF))?
            .apply()
            .with_context(|| format!("configuring {NF_IF} in {}", nf.name()))?;
        nf.sysctl_set(&format!("net/ipv4/conf/{NF_IF}/rp_filter"), "0")?;
        dut.sysctl_set(&format!("net/ipv4/conf/{}/rp_filter", port(i)), "0")?;
        // Every kernel transmit on the queue of its CPU, as xnf sets up its
        // NFs (see chain::ns::xps_per_cpu): the baseline gets the same tuning.
        xps(nf, NF_IF)?;
        xps(dut, &port(i))?;
    }
    xps(dut, dout)?;
    for i in 1..=n {
        let from = if i == 1 { din.to_string() } else { port(i - 1) };
        let (_, nf_addr) = link_addrs(i);
        c.rules = i;
        dut.ip_batch(&[
            format!("rule add pref {} iif {from} to {sink}/32 lookup {}", table(i), table(i)),
            format!("route add default via {nf_addr} dev {} table {}", port(i), table(i)),
        ])
        .with_context(|| format!("policy routing into NF {i}"))?;
    }
    c._pass = Some(LabAttachment::pass(dut, din)?);
    Ok(c)
}

/// An xnf chain and its NFs in dut, made through the library on a thread
/// inside dut; removed by [`XnfChain::remove`], or when dropped.
pub(crate) struct XnfChain<'a> {
    dut: &'a Netns,
    chain: bool,
    nfs: Vec<String>,
}

impl XnfChain<'_> {
    fn remove_all(&mut self) -> Result<()> {
        let (chain, nfs) = (std::mem::take(&mut self.chain), std::mem::take(&mut self.nfs));
        self.dut.run(move || -> Result<()> {
            let mut first_err = None;
            if chain {
                if let Err(e) = xnf_chain::chain_delete(CHAIN) {
                    first_err.get_or_insert(e);
                }
            }
            for nf in nfs.iter().rev() {
                if let Err(e) = xnf_chain::nf_delete(nf, true) {
                    first_err.get_or_insert(e);
                }
            }
            first_err.map_or(Ok(()), Err)
        })?
    }

    pub(crate) fn remove(mut self) -> Result<()> {
        self.remove_all().context("removing the xnf chain")
    }
}

impl Drop for XnfChain<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.remove_all() {
            eprintln!("xnf lab: removing the xnf chain from {}: {e:#}", self.dut.name());
        }
    }
}

/// NFs in the namespaces at `netns` (NF i in the i-th) and the chain
/// through them. Also returns the warnings of `xnf nf create` / `xnf chain
/// create` worth showing.
pub(crate) fn setup_xnf<'a>(
    dut: &'a Netns,
    din: &str,
    dout: &str,
    netns: &[String],
    queues: u32,
    sink: IpAddr,
    v: Variant,
) -> Result<(XnfChain<'a>, Vec<String>)> {
    let (function, forward) = match v {
        Variant::Xnf => (Function::Reflect, false),
        _ => (Function::Pass, true),
    };
    let mut c = XnfChain { dut, chain: false, nfs: Vec::new() };
    let mut warnings = Vec::new();
    for (i, path) in (1..).zip(netns) {
        let spec = NfSpec {
            name: nf_name(i),
            netns: Some(path.clone()),
            container: None,
            ifname: NF_IF.into(),
            queues: Some(queues),
            function,
            forward,
            existing: false,
        };
        warnings.extend(dut.run(move || xnf_chain::nf_create(spec, Origin::Cli))?.with_context(|| format!("creating NF {}", nf_name(i)))?);
        c.nfs.push(nf_name(i));
    }
    warnings.extend(create_chain(&mut c, din, dout, netns.len() as u32, sink)?);
    Ok((c, warnings))
}

/// The chain through NFs 1..=n that exist already (made by a runtime's ADD).
fn chain_only<'a>(dut: &'a Netns, din: &str, dout: &str, n: u32, sink: IpAddr) -> Result<(XnfChain<'a>, Vec<String>)> {
    let mut c = XnfChain { dut, chain: false, nfs: Vec::new() };
    let warnings = create_chain(&mut c, din, dout, n, sink)?;
    Ok((c, warnings))
}

fn create_chain(c: &mut XnfChain<'_>, din: &str, dout: &str, n: u32, sink: IpAddr) -> Result<Vec<String>> {
    let spec = ChainSpec {
        name: CHAIN.into(),
        ingress: din.into(),
        egress: vec![dout.into()],
        matches: vec![MatchSpec { dst: Some(format!("{sink}/32")), ..Default::default() }],
        nfs: (1..=n).map(nf_name).collect(),
        priority: 100,
        unknown_l4: Default::default(),
    };
    let mut warnings = c.dut.run(move || xnf_chain::chain_create(spec, Origin::Cli))?.context("creating the chain")?;
    c.chain = true;
    // The egress's peer (the sink) is in another namespace, where xnf cannot
    // see its XDP program: the lab attached one, so that warning is moot.
    warnings.retain(|w| !w.contains("lives in another network namespace"));
    Ok(warnings)
}

/// A variant with a chain of `n` NFs set up at a point for one run.
struct ChainRun<'a> {
    exp: &'a Chain,
    v: Variant,
    /// The NFs' ends in dut, in chain order.
    ports: Vec<String>,
    point: Point,
    dut: &'a Netns,
    din: String,
    dout: String,
    sink: crate::engine::measure::Received<'a>,
    /// dut's counters at every reading of the probe; the first two
    /// bracket the full-speed interval (measured first).
    readings: RefCell<Vec<Reading>>,
    linux: Option<LinuxChain<'a>>,
    xnf: Option<XnfChain<'a>>,
    /// The container variants' containers, removed after the chain.
    containers: Option<containers::Containers<'a>>,
}

impl Running for ChainRun<'_> {
    fn counters(&self) -> Result<Counters<'_>> {
        let with_chain = self.v != Variant::Linux;
        Ok(Counters {
            dut_in: (self.dut, self.din.clone()),
            dut_out: Some((self.dut, self.dout.clone())),
            received: Box::new(|| (self.sink)()),
            // Every reading of the probe also reads dut's counters.
            on_read: Some(Box::new(move || {
                self.readings.borrow_mut().push(hops::read_dut(self.dut, with_chain)?);
                Ok(())
            })),
            corunner: None,
            during: None,
        })
    }

    /// Refuses an xnf run whose traffic dut's kernel forwarded, keeps the
    /// losses hop by hop, and removes the chain.
    fn finish(mut self: Box<Self>, samples: &[Sample]) -> Result<()> {
        let max = samples.first().context("no full-speed sample")?;
        let r = self.readings.take();
        ensure!(r.len() >= 2, "dut's counters were read {} time(s) during the measurement", r.len());
        let hops = hops::hop_loss(&r[0], &r[1], &self.din, &self.dout, &self.ports, max.received);
        if self.v != Variant::Linux && hops.forwarded > (max.received as i64 / 100).max(100) {
            bail!(
                "dut's kernel forwarded {} packets while the chain was to steer all {} in XDP: the measurement would be of kernel forwarding",
                hops.forwarded,
                max.received
            );
        }
        let variant = crate::engine::driver::variant_name(&self.v);
        let mut all = self.exp.hops.borrow_mut();
        match all.iter_mut().find(|(v, p, _)| *v == variant && *p == self.point) {
            Some(h) => h.2.add(&hops),
            None => all.push((variant, self.point.clone(), hops)),
        }
        if let Some(x) = self.xnf.take() {
            x.remove()?;
        }
        if let Some(c) = self.containers.take() {
            c.remove()?;
        }
        drop(self.linux.take());
        Ok(())
    }
}

/// The summary by chain length: one row per point and length, the
/// variants side by side, then the ratios (to linux; the container
/// variants' to xnf-linux-nf).
pub fn print_by_length(r: &Results, variants: &[Variant]) {
    let mut points: Vec<Point> = Vec::new();
    let mut lengths: Vec<i64> = Vec::new();
    for s in &r.summary {
        let p = s.point.without("nfs");
        if !points.contains(&p) {
            points.push(p);
        }
        if let Ok(n) = s.point.int("nfs") {
            if !lengths.contains(&n) {
                lengths.push(n);
            }
        }
    }
    let names: Vec<String> = variants.iter().map(crate::engine::driver::variant_name).collect();
    println!("\nby chain length (median Mpps; zero-loss Mpps; ns/packet all CPUs; softirq ns/packet):");
    print!("{:<22} {:>3}", "point", "NFs");
    for v in &names {
        print!(" {v:>36}");
    }
    println!("  ratios");
    for p in &points {
        for &n in &lengths {
            let at = p.clone().with("nfs", Value::Int(n));
            print!("{:<22} {:>3}", r.label(p), n);
            for v in &names {
                let cell = r
                    .summary_of(v, &at)
                    .map(|s| {
                        let zl = s.zero_loss_mpps.map_or("-".to_string(), |z| format!("{z:.3}"));
                        format!(
                            "{:.3} ({:.3}-{:.3}); {zl}; {:.0}; {:.0}",
                            s.median_mpps, s.min_mpps, s.max_mpps, s.median_ns_per_packet, s.median_softirq_ns_per_packet
                        )
                    })
                    .unwrap_or_else(|| "-".into());
                print!(" {cell:>36}");
            }
            let ratios: Vec<String> = r.ratios.iter().filter(|q| q.point == at).map(|q| format!("{}/{} {:.2}x", q.numerator, q.denominator, q.ratio)).collect();
            println!("  {}", ratios.join(", "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver;

    fn opts(args: &[&str]) -> Chain {
        driver::parse_options(args).unwrap()
    }

    #[test]
    fn bad_options_are_refused_with_the_flag_named() {
        let cpus = Cpus { gen: 0, count: 2 };
        for (args, want) in [
            (&["--length", "0"][..], "--length 0"),
            (&["--length", "9"][..], "(max 8)"),
            (&["--length", "2,2"][..], "--length 2 is listed twice"),
            (&["--flows", "0"][..], "--flows 0"),
            (&["--size", "63"][..], "--size 63"),
            (&["--queues", "3"][..], "--queues 3"),
            (&["--queues", "0"][..], "--queues 0"),
        ] {
            let e = format!("{:#}", opts(args).check(cpus).unwrap_err());
            assert!(e.contains(want), "{e} lacks {want}");
        }
        assert!(opts(&[]).check(cpus).is_ok());
    }

    #[test]
    fn the_chain_length_is_a_parameter_of_the_points() {
        let c = opts(&["--flows", "1,100"]);
        let p = driver::points(&c);
        assert_eq!(p.len(), 6, "2 flow counts × 3 lengths");
        let labels: Vec<String> = p.iter().take(3).map(|p| params::label(&c.params(), p)).collect();
        assert_eq!(labels, ["64 B, 1 flow, 1 NF", "64 B, 1 flow, 2 NFs", "64 B, 1 flow, 4 NFs"], "the length changes fastest");
        assert_eq!(driver::variant_name(&Variant::XnfLinuxNf), "xnf-linux-nf");
        assert_eq!(port(3), "xnf-nf3");
        assert_eq!(link_addrs(8), ("198.18.108.1".into(), "198.18.108.2".into()));
    }
}
