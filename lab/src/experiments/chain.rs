//! `xnf lab chain`: the path of seed 000 (Fig. 8) — host ingress, a chain
//! of network functions in their own namespaces, host egress — measured
//! three ways on the same topology, variants alternated within each run:
//!
//! - `linux`: the Linux-stack baseline of seed 000 §5.5. The same NF
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
//!
//! Variants are named `VARIANT/N` for a chain of N NFs (`linux/2`,
//! `xnf/2`, ...): the results' points carry packet size and flows, the
//! chain length lives in the variant's name.
//!
//! NFs and chains are made through the library API on a thread inside dut
//! (state is keyed by that thread's namespace), for each variant and run,
//! and removed afterwards (guards remove them on errors too; on Ctrl-C the
//! lab's namespaces go, and xnf's state of dead namespaces is collected).
//!
//! Where frames are lost inside dut is read from the veth counters of every
//! NF's port in dut (to NF i = its tx, back from NF i = its rx), the same
//! for every variant; for the xnf variants the chain's own counters say how
//! frames left (routed in XDP, or handed to dut's kernel), and dut's
//! `Ip ForwDatagrams` must not move: a run where dut's kernel forwarded
//! the traffic is refused rather than reported as xnf's.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::IpAddr;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use xnf_netns::Netns;

use crate::engine::measure::{self, Labels, Probe, Timing};
use crate::engine::progress::Progress;
use crate::engine::results::{Point, Results};
use crate::engine::topology::BuiltTopology;
use crate::engine::LabAttachment;
use xnf_chain::model::{ChainSpec, Function, MatchSpec, NfSpec, Origin};

/// Longest chain measured.
pub const MAX_LENGTH: u32 = 8;

/// The chain's name in dut.
const CHAIN: &str = "lab";

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
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Linux => "linux",
            Variant::Xnf => "xnf",
            Variant::XnfLinuxNf => "xnf-linux-nf",
        }
    }

    /// The name of this variant with a chain of `n` NFs, as in the results.
    pub fn label(self, n: u32) -> String {
        format!("{}/{n}", self.name())
    }
}

/// Options of one `xnf lab chain` run; every list is a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    pub topology: String,
    pub runs: u32,
    pub timing: Timing,
    /// Frame sizes on the wire, FCS included.
    pub sizes: Vec<u32>,
    pub flows: Vec<u32>,
    /// Queues per veth = generator CPUs (the seed's cores, Table 11).
    pub queues: Vec<u32>,
    /// Chain lengths (NFs per chain).
    pub lengths: Vec<u32>,
    pub variants: Vec<Variant>,
    /// The generator's CPU with one queue (more queues use CPUs 0..queues).
    pub cpu: usize,
    pub zero_loss: Option<f64>,
    pub load_steps: u32,
}

impl Options {
    /// Checks everything before anything is built.
    pub fn validate(&self, ncpu: usize) -> Result<()> {
        measure::check_options(self.runs, &self.timing, &self.sizes, false, self.zero_loss, self.load_steps)?;
        ensure!(!self.lengths.is_empty(), "--length: give at least one chain length");
        for &n in &self.lengths {
            ensure!((1..=MAX_LENGTH).contains(&n), "--length {n}: a chain has 1..={MAX_LENGTH} NFs (max {MAX_LENGTH})");
        }
        for (i, n) in self.lengths.iter().enumerate() {
            ensure!(!self.lengths[..i].contains(n), "--length {n} is listed twice");
        }
        measure::check_generator(&self.flows, &self.queues, self.cpu, ncpu)?;
        ensure!(!self.variants.is_empty(), "--variants: name at least one");
        Ok(())
    }

    fn points(&self) -> Vec<Point> {
        let mut v = Vec::new();
        for &queues in &self.queues {
            for &size in &self.sizes {
                for &flows in &self.flows {
                    v.push(Point { size, flows, ipv6: false, routes: 0, queues, netfilter: false });
                }
            }
        }
        v
    }
}

fn nf_name(i: u32) -> String {
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
fn nf_namespaces(count: u32) -> Result<Vec<Netns>> {
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
    xnf_chain::ns::run_in(&ns.path(), move || xnf_chain::ns::xps_per_cpu(&d)).with_context(|| format!("XPS on {dev} in {}", ns.name()))
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
struct XnfChain<'a> {
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

    fn remove(mut self) -> Result<()> {
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

/// Also returns the warnings of `xnf nf create` / `xnf chain create` worth showing.
#[allow(clippy::too_many_arguments)]
fn setup_xnf<'a>(dut: &'a Netns, din: &str, dout: &str, nfs: &[Netns], n: u32, queues: u32, sink: IpAddr, v: Variant) -> Result<(XnfChain<'a>, Vec<String>)> {
    let (function, forward) = match v {
        Variant::Xnf => (Function::Reflect, false),
        _ => (Function::Pass, true),
    };
    let mut c = XnfChain { dut, chain: false, nfs: Vec::new() };
    let mut warnings = Vec::new();
    for i in 1..=n {
        let spec = NfSpec {
            name: nf_name(i),
            netns: Some(nfs[i as usize - 1].path().display().to_string()),
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
    let spec = ChainSpec {
        name: CHAIN.into(),
        ingress: din.into(),
        egress: vec![dout.into()],
        matches: vec![MatchSpec { dst: Some(format!("{sink}/32")), ..Default::default() }],
        nfs: (1..=n).map(nf_name).collect(),
        priority: 100,
        unknown_l4: Default::default(),
    };
    warnings.extend(dut.run(move || xnf_chain::chain_create(spec, Origin::Cli))?.context("creating the chain")?);
    c.chain = true;
    // The egress's peer (the sink) is in another namespace, where xnf cannot
    // see its XDP program: the lab attached one, so that warning is moot.
    warnings.retain(|w| !w.contains("lives in another network namespace"));
    Ok((c, warnings))
}

/// Counters in dut at one instant: every interface's (rx, tx) packets,
/// `Ip ForwDatagrams`, and (xnf variants) the chain's own counters.
#[derive(Clone, Debug, Default)]
struct Reading {
    devs: BTreeMap<String, (u64, u64)>,
    forwarded: u64,
    chain: Option<ChainCounts>,
}

#[derive(Clone, Copy, Debug, Default)]
struct ChainCounts {
    matched: u64,
    routed: u64,
    to_kernel: u64,
}

fn read_dut(dut: &Netns, chain: bool) -> Result<Reading> {
    let devs = dut.all_link_stats()?.into_iter().map(|(name, l)| (name, (l.rx_packets, l.tx_packets))).collect();
    let forwarded = dut.snmp()?.value("Ip", "ForwDatagrams")?;
    let chain = if chain {
        dut.run(|| -> Result<Option<ChainCounts>> {
            let reg = xnf_chain::registry::Locked::open()?.reg;
            Ok(xnf_chain::report::snapshot(&reg)?.chains.iter().find(|c| c.name == CHAIN).map(|c| ChainCounts {
                matched: c.matched,
                routed: c.routed,
                to_kernel: c.to_kernel.values().sum(),
            }))
        })??
    } else {
        None
    };
    Ok(Reading { devs, forwarded, chain })
}

/// Where the frames that entered dut but did not leave it were lost, hop by
/// hop, in one interval; the segments add up to the sample's `in_dut`.
#[derive(Clone, Debug, Default)]
struct HopLoss {
    /// (where, frames): "into NF1", "in NF1", "into NF2", ..., "NFn -> egress".
    segments: Vec<(String, i64)>,
    /// Frames dut's kernel forwarded.
    forwarded: i64,
    chain: Option<(i64, i64, i64)>,
    received: u64,
}

fn hop_loss(a: &Reading, b: &Reading, din: &str, dout: &str, n: u32, received: u64) -> HopLoss {
    let d = |dev: &str, tx: bool| -> i64 {
        let get = |r: &Reading| r.devs.get(dev).map(|c| if tx { c.1 } else { c.0 }).unwrap_or(0) as i64;
        get(b) - get(a)
    };
    let mut segments = Vec::new();
    let mut back = d(din, false);
    for i in 1..=n {
        let to = d(&port(i), true);
        segments.push((format!("into NF{i}"), back - to));
        back = d(&port(i), false);
        segments.push((format!("in NF{i}"), to - back));
    }
    segments.push((format!("NF{n} -> egress"), back - d(dout, true)));
    let chain = match (a.chain, b.chain) {
        (Some(x), Some(y)) => Some(((y.matched - x.matched) as i64, (y.routed - x.routed) as i64, (y.to_kernel - x.to_kernel) as i64)),
        _ => None,
    };
    HopLoss { segments, forwarded: b.forwarded as i64 - a.forwarded as i64, chain, received }
}

impl HopLoss {
    fn add(&mut self, o: &HopLoss) {
        if self.segments.is_empty() {
            *self = o.clone();
            return;
        }
        for (s, x) in self.segments.iter_mut().zip(&o.segments) {
            s.1 += x.1;
        }
        self.forwarded += o.forwarded;
        self.received += o.received;
        if let (Some(s), Some(x)) = (&mut self.chain, o.chain) {
            (s.0, s.1, s.2) = (s.0 + x.0, s.1 + x.1, s.2 + x.2);
        }
    }

    fn note(&self, label: &str, point: &Point, runs: u32) -> String {
        let segs: Vec<String> = self.segments.iter().map(|(w, x)| format!("{w} {x}")).collect();
        let total: i64 = self.segments.iter().map(|s| s.1).sum();
        let per = self.forwarded as f64 / self.received.max(1) as f64;
        let mut s = format!(
            "{label}, {}: lost inside dut in {runs} full-speed interval(s): {total} ({}); dut's kernel forwarded {} ({per:.2} per received packet)",
            point.label(),
            segs.join(", "),
            self.forwarded
        );
        if let Some((m, r, k)) = self.chain {
            s += &format!("; chain: matched {m}, routed in XDP {r}, to dut's kernel {k}");
        }
        s
    }
}

/// Measures one variant with a chain of `n` NFs at one point.
#[allow(clippy::too_many_arguments)]
fn measure_variant(
    t: &BuiltTopology,
    nfs: &[Netns],
    o: &Options,
    l: &Labels,
    v: Variant,
    n: u32,
    res: &mut Results,
    zl: &mut Vec<(String, Point, f64)>,
    pg: &mut Progress,
) -> Result<HopLoss> {
    let roles = t.roles()?;
    let (dut, din) = t.endpoint(&roles.dut_in)?;
    let (_, dout) = t.endpoint(&roles.dut_out)?;
    let sink_addr = t.addr(&roles.sink, false)?;
    let (mut linux, mut xnf) = (None, None);
    match v {
        Variant::Linux => linux = Some(setup_linux(dut, &din, &dout, nfs, n, l.point.queues, sink_addr)?),
        _ => {
            let (c, warnings) = setup_xnf(dut, &din, &dout, nfs, n, l.point.queues, sink_addr, v)?;
            warnings.iter().for_each(|w| pg.println(&format!("xnf chain: {w}")));
            xnf = Some(c);
        }
    }
    let (gen_ns, gen_if) = t.endpoint(&roles.gen)?;
    let gens = measure::start_generators(gen_ns, &gen_if, &measure::udp_traffic(t, &l.point)?, &measure::gen_cpus(o.cpu, l.point.queues), 0)?;
    let sink = t.attachment(&roles.sink)?;
    // Every reading of the probe also reads dut's counters; the first two
    // bracket the full-speed interval (measure::variant measures it first).
    let readings = RefCell::new(Vec::new());
    let with_chain = v != Variant::Linux;
    let probe = Probe {
        gens: &gens,
        dut_in: (dut, din.clone()),
        dut_out: Some((dut, dout.clone())),
        received: Box::new(|| sink.packets()),
        on_read: Some(Box::new(|| {
            readings.borrow_mut().push(read_dut(dut, with_chain)?);
            Ok(())
        })),
    };
    let (samples, rate) = measure::variant(&probe, l, &o.timing, o.load_steps, o.zero_loss, pg)?;
    drop(probe);
    // Paused before stopping: a live-frame call sized while paused (cheap
    // tries) would otherwise run its many tries at full speed before the
    // stop flag is seen, tens of seconds on a slow path.
    gens.set_rate(1)?;
    gens.stop()?;
    let max = samples.first().context("no full-speed sample")?;
    let r = readings.into_inner();
    ensure!(r.len() >= 2, "dut's counters were read {} time(s) during the measurement", r.len());
    let hops = hop_loss(&r[0], &r[1], &din, &dout, n, max.received);
    if v != Variant::Linux && hops.forwarded > (max.received as i64 / 100).max(100) {
        bail!(
            "{}: dut's kernel forwarded {} packets while the chain was to steer all {} in XDP: the measurement would be of kernel forwarding",
            l.variant,
            hops.forwarded,
            max.received
        );
    }
    measure::record(res, zl, l, (samples, rate));
    if let Some(x) = xnf.take() {
        x.remove()?;
    }
    drop(linux.take());
    Ok(hops)
}

/// Runs the experiment.
pub fn run(o: &Options, lines: &mut dyn FnMut(&str)) -> Result<Results> {
    let ncpu = crate::engine::cpu::sample()?.len();
    o.validate(ncpu)?;
    let mut spec = crate::engine::experiment_topology(&o.topology, lines)?;
    // Traffic comes back to dut from the NFs on other ports than its routes
    // would send it: no reverse-path filter there.
    let dut_ns = spec.roles.as_ref().context("no [roles]")?.dut_in.split(':').next().unwrap_or_default().to_string();
    let ns = spec.namespaces.iter_mut().find(|n| n.name == dut_ns).with_context(|| format!("the topology has no namespace {dut_ns} for its dut_in role"))?;
    for k in ["net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter"] {
        ns.sysctl.insert(k.into(), "0".into());
    }
    let points = o.points();
    let per_variant = measure::planned_seconds(&o.timing, o.load_steps, o.zero_loss.is_some());
    let total = points.len() * o.lengths.len() * o.variants.len() * o.runs as usize;
    let mut pg = Progress::new(per_variant * total as f64);
    let mut built: Option<(u32, BuiltTopology)> = None;
    let longest = o.lengths.iter().copied().max().unwrap_or(1);
    pg.message(&format!("making {longest} NF namespaces"));
    let nfs = nf_namespaces(longest)?;
    let mut res = Results::new("chain", o);
    let mut zl = Vec::new();
    let mut hops: BTreeMap<(u32, usize, String), HopLoss> = BTreeMap::new();
    for (pi, point) in points.iter().enumerate() {
        // The NFs' veths are made per variant with the point's queue count.
        let t = crate::engine::topology_with_queues(&mut built, &spec, &o.topology, point.queues, &mut pg)?;
        for &n in &o.lengths {
            for run in 0..o.runs {
                for v in measure::alternated(&o.variants, run) {
                    let l = Labels { variant: v.label(n), point: point.clone(), run };
                    pg.set_prefix(format!("point {}/{} ({}), {n} NF(s), run {}/{}, {}", pi + 1, points.len(), point.label(), run + 1, o.runs, v.name()));
                    let h = measure_variant(t, &nfs, o, &l, v, n, &mut res, &mut zl, &mut pg)?;
                    let key = (n, pi, v.name().to_string());
                    hops.entry(key).or_default().add(&h);
                    pg.advance(per_variant);
                }
            }
        }
    }
    drop(nfs);
    drop(built);
    // xnf's run files of dut, which is gone now.
    xnf_core::state::gc_dead_namespaces();
    pg.finish();
    res.summarize(&zl);
    for &n in &o.lengths {
        res.add_ratios(&Variant::Xnf.label(n), &Variant::Linux.label(n));
        res.add_ratios(&Variant::XnfLinuxNf.label(n), &Variant::Linux.label(n));
    }
    res.notes.push(format!(
        "variant/N: a chain of N NFs. veth: the generator, dut, every NF and the sink run in softirq on the generating CPU (CPU {}; with N queues CPUs 0..N-1, one generator each); rates are of the whole path.",
        o.cpu
    ));
    for ((n, pi, v), h) in &hops {
        res.notes.push(h.note(&format!("{v}/{n}"), &points[*pi], o.runs));
    }
    Ok(res)
}

/// The summary by chain length: one row per point and length, the
/// variants side by side, then the ratios to linux.
pub fn print_by_length(r: &Results, o: &Options) {
    let points = o.points();
    println!("\nby chain length (median Mpps; zero-loss Mpps; ns/packet all CPUs; softirq ns/packet):");
    print!("{:<22} {:>3}", "point", "NFs");
    for v in &o.variants {
        print!(" {:>36}", v.name());
    }
    println!("  ratios to linux");
    for p in &points {
        for &n in &o.lengths {
            print!("{:<22} {:>3}", p.label(), n);
            for v in &o.variants {
                let cell = r
                    .summary_of(&v.label(n), p)
                    .map(|s| {
                        let zl = s.zero_loss_mpps.map_or("-".to_string(), |z| format!("{z:.3}"));
                        format!("{:.3} ({:.3}-{:.3}); {zl}; {:.0}; {:.0}", s.median_mpps, s.min_mpps, s.max_mpps, s.median_ns_per_packet, s.median_softirq_ns_per_packet)
                    })
                    .unwrap_or_else(|| "-".into());
                print!(" {cell:>36}");
            }
            let ratios: Vec<String> = r
                .ratios
                .iter()
                .filter(|q| &q.point == p && q.denominator == Variant::Linux.label(n))
                .map(|q| format!("{} {:.2}x", q.numerator.split('/').next().unwrap_or(""), q.ratio))
                .collect();
            println!("  {}", ratios.join(", "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            topology: "line".into(),
            runs: 1,
            timing: Timing { warmup: 0.0, seconds: 1.0, trial_seconds: 1.0 },
            sizes: vec![64],
            flows: vec![1, 100],
            queues: vec![1],
            lengths: vec![1, 2, 4],
            variants: vec![Variant::Linux, Variant::Xnf, Variant::XnfLinuxNf],
            cpu: 0,
            zero_loss: None,
            load_steps: 0,
        }
    }

    #[test]
    fn bad_options_are_refused_with_the_flag_named() {
        let check = |f: &dyn Fn(&mut Options), want: &str| {
            let mut o = opts();
            f(&mut o);
            let e = format!("{:#}", o.validate(2).unwrap_err());
            assert!(e.contains(want), "{e} lacks {want}");
        };
        check(&|o| o.lengths = vec![0], "--length 0");
        check(&|o| o.lengths = vec![9], "(max 8)");
        check(&|o| o.lengths = vec![], "--length");
        check(&|o| o.lengths = vec![2, 2], "--length 2 is listed twice");
        check(&|o| o.flows = vec![0], "--flows 0");
        check(&|o| o.sizes = vec![63], "--size 63");
        check(&|o| o.cpu = 2, "--cpu 2");
        check(&|o| o.queues = vec![3], "--queues 3");
        check(&|o| o.queues = vec![0], "--queues 0");
        check(&|o| o.variants = vec![], "--variants");
        assert!(opts().validate(2).is_ok());
    }

    #[test]
    fn variants_carry_the_chain_length() {
        assert_eq!(Variant::XnfLinuxNf.label(4), "xnf-linux-nf/4");
        assert_eq!(port(3), "xnf-nf3");
        assert_eq!(link_addrs(8), ("198.18.108.1".into(), "198.18.108.2".into()));
        assert_eq!(opts().points().len(), 2);
    }

    #[test]
    fn hop_losses_add_up() {
        // (Parsing /proc/net/dev and snmp is xnf-netns's, tested there.)
        let a = Reading::default();
        let mut b = Reading::default();
        b.devs.insert("xnfin".into(), (100, 0));
        b.devs.insert("xnf-nf1".into(), (95, 97));
        b.devs.insert("xnf-nf2".into(), (90, 94));
        b.devs.insert("xnfout".into(), (0, 88));
        let h = hop_loss(&a, &b, "xnfin", "xnfout", 2, 88);
        let segs: Vec<i64> = h.segments.iter().map(|s| s.1).collect();
        assert_eq!(segs, vec![3, 2, 1, 4, 2]);
        assert_eq!(segs.iter().sum::<i64>(), 100 - 88);
    }
}
