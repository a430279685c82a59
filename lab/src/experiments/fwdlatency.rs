//! `xnf lab fwd-latency`: the round-trip time of probes through a
//! forwarder (the container-NF thesis §5.7) — the kernel, `xnf router` (any of its FIB
//! modes) and an `xnf chain` through one NF namespace — with no other
//! traffic and under background load through the same forwarder, on the
//! `line` topology, variants alternated within each run.
//!
//! It is the lab's one driver with one addition: every measured interval
//! runs the latency pinger (a kernel UDP socket in gen, the pinger of `xnf
//! lab latency`) instead of sleeping, so the probes share the forwarder and
//! its queues with the generator's traffic at that interval's rate. The
//! loads are the driver's load steps, given as shares of each variant's
//! full-speed rate (measured first, with probes too: "full") or as fixed
//! rates. The far end of a probe is the sink's XDP program, which turns
//! probes (UDP to port 7) around in place (XDP_TX) and counts and drops
//! everything else: no echo thread to wake. Both directions cross the
//! forwarder: the router is attached to both of dut's ports, the chain
//! variant has a second chain back through the same NF (sink -> gen), and
//! for the kernel both ports run XDP_PASS (frames sent back by XDP_TX into
//! a veth need an XDP program on its peer).
//!
//! Each probe interval also reads what carried the probes: the router's
//! redirects, the chains' routed frames, dut's kernel's `Ip ForwDatagrams`
//! — a variant whose probes dut's kernel forwarded would measure the
//! kernel.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use xnf_chain::model::{ChainSpec, MatchSpec, Origin};
use xnf_netns::Netns;
use xnf_router::AttachOptions;

use super::chain::{self, XnfChain};
use super::latency::pingpong::{pinned_in, udp_pinger};
use super::latency::stats::Summary;
use super::router::{parse_item, parse_size, renamed, routers};
use crate::engine::driver::{Cpus, Experiment, Running, VariantName};
use crate::engine::measure::{self, Counters, Plan};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::{Results, SampleKind};
use crate::engine::topology::{BuiltTopology, TopologySpec};
use crate::engine::{LabAttachment, NfGuard};
use crate::programs::sink::SinkOptions;

/// The UDP port the sink turns around.
pub const ECHO_PORT: u16 = 7;
/// The chain back from the sink to gen, through the same NF.
const BACK: &str = "lab-back";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Variant {
    /// dut's kernel forwards (XDP_PASS on both ports).
    Kernel,
    /// `xnf router`: one of the router experiment's variants.
    Router(&'static str, AttachOptions),
    /// `xnf chain` through one NF namespace (the reflector NF), both ways.
    Chain,
}

impl VariantName for Variant {
    fn name(&self) -> String {
        match self {
            Variant::Kernel => "kernel".into(),
            Variant::Router(n, _) => n.to_string(),
            Variant::Chain => "chain".into(),
        }
    }
}

/// A background load: a share of the variant's full-speed rate, or packets per second.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Load {
    Share(f64),
    Pps(f64),
}

impl Load {
    pub fn label(self) -> String {
        match self {
            Load::Share(0.0) => "0".into(),
            Load::Share(s) => format!("{}%", s * 100.0),
            Load::Pps(p) => format!("{p} pps"),
        }
    }
}

/// `--load` values: `0`, `N%` (of full speed) or packets per second.
pub fn parse_load(s: &str) -> Result<Load, String> {
    let s = s.trim();
    let bad = || format!("`{s}`: a load is 0, a share of full speed (50%) or packets per second (100000)");
    if let Some(pct) = s.strip_suffix('%') {
        let p: f64 = pct.trim().parse().map_err(|_| bad())?;
        return if (0.0..=100.0).contains(&p) { Ok(Load::Share(p / 100.0)) } else { Err(format!("`{s}`: a share is 0..=100%")) };
    }
    match s.parse::<f64>() {
        Ok(0.0) => Ok(Load::Share(0.0)),
        Ok(p) if (1.0..=1e9).contains(&p) => Ok(Load::Pps(p)),
        _ => Err(bad()),
    }
}

/// How the pinger waits for answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Wait {
    /// Never sleeps (no wakeup in any RTT; its CPU is always busy).
    Spin,
    /// Sleeps in ppoll() until an answer or its next send (an idle vCPU halts: waking it is in the RTT).
    Sleep,
}

/// `xnf lab fwd-latency`: its own options; sizes and flows are sweeps.
#[derive(Args, Serialize)]
pub struct FwdLatency {
    /// Forwarders: kernel, xnf (what `xnf router attach` attaches: the
    /// route cache, with its follower), xnf-full (--fib full), xnf-direct
    /// (--fib direct), xnf-lean (xnf with --no-byte-counters), chain (`xnf
    /// chain` through one reflector NF).
    #[arg(long, value_delimiter = ',', default_value = "kernel,xnf,xnf-full,chain", value_parser = parse_item::<String>, value_name = "NAME[,NAME...]")]
    pub variants: Vec<String>,
    /// Background loads, each for --trial-seconds with the probes: 0 (the
    /// generator paused), shares of each variant's full-speed rate (50%),
    /// or packets per second (100000); shares and rates do not mix.
    #[arg(long = "load", value_delimiter = ',', default_value = "0,50%,90%", value_parser = parse_load, value_name = "LOAD[,LOAD...]")]
    pub loads: Vec<Load>,
    /// Probes per second (64-byte UDP frames gen -> sink -> gen).
    #[arg(long, default_value_t = 2000)]
    pub probe_rate: u64,
    /// Whether the pinger spins or sleeps between probes and answers.
    #[arg(long, value_enum, default_value = "spin")]
    pub pinger: Wait,
    /// CPU of the pinger [default: the first CPU that is not the generator's].
    #[arg(long)]
    pub ping_cpu: Option<usize>,
    /// Background frame sizes on the wire (64..=1518) or imix; a list sweeps.
    #[arg(long = "size", default_value = "64", value_delimiter = ',', value_parser = parse_size, value_name = "BYTES|imix[,...]")]
    pub sizes: Vec<u32>,
    /// Background flows (distinct UDP source ports); a list sweeps.
    #[arg(long, default_value = "4", value_delimiter = ',', value_parser = parse_item::<u32>, value_name = "N[,N...]")]
    pub flows: Vec<u32>,
    /// The chain variant's NF namespace.
    #[arg(skip)]
    #[serde(skip)]
    nfs: Vec<Netns>,
    /// Every probe interval's RTTs, pooled over the runs.
    #[arg(skip)]
    #[serde(skip)]
    pools: RefCell<Vec<Pool>>,
}

/// The probes of one variant at one point and load, over the runs.
#[derive(Clone, Debug, Default)]
struct Pool {
    variant: String,
    point: Point,
    load: String,
    /// The driver's load step (0: the full-speed interval).
    step: u32,
    /// Mean background rate offered (frames/s; None: full speed).
    offered_pps: Option<f64>,
    sent: u64,
    lost: u64,
    rtts_ns: Vec<u64>,
    forwarded: u64,
    kernel_forwarded: u64,
    intervals: u32,
}

/// One row of the results' `details.rtt`: RTTs in µs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub variant: String,
    pub point: Point,
    /// 0, 50%, 100000 pps, or full (the full-speed interval).
    pub load: String,
    /// Background frames per second offered (None: as fast as it goes).
    pub offered_pps: Option<f64>,
    /// Background the sink received in those intervals (mean Mpps): what
    /// the generator achieved, which a paced generator sharing its CPU
    /// with the forwarding may not.
    pub background_mpps: f64,
    pub intervals: u32,
    pub sent: u64,
    pub lost: u64,
    pub rtt_us: Summary,
    /// Frames the variant's forwarder carried in the probe intervals (router:
    /// redirects; chain: frames routed out; kernel: dut's `Ip ForwDatagrams`).
    pub forwarded: u64,
    /// dut's `Ip ForwDatagrams` in the probe intervals.
    pub kernel_forwarded: u64,
}

impl FwdLatency {
    fn resolve(&self) -> Result<Vec<Variant>> {
        let mut out = Vec::new();
        for name in &self.variants {
            if let Some((_, refusal)) = renamed(name) {
                bail!(refusal);
            }
            let v = match name.as_str() {
                "kernel" => Variant::Kernel,
                "chain" => Variant::Chain,
                n => match routers().into_iter().find(|(r, _)| *r == n) {
                    Some((r, o)) => Variant::Router(r, o),
                    None => {
                        let names: Vec<&str> = routers().iter().map(|(r, _)| *r).collect();
                        bail!("--variants: no variant `{n}` (kernel, {}, chain)", names.join(", "))
                    }
                },
            };
            ensure!(!out.contains(&v), "--variants: {name} named twice");
            out.push(v);
        }
        Ok(out)
    }

    fn ping_cpu(&self, cpus: Cpus) -> usize {
        self.ping_cpu.unwrap_or_else(|| (0..cpus.count).find(|c| *c != cpus.gen).unwrap_or(0))
    }

    /// The load of an interval: full speed, or the load step's; its step.
    fn load_of(&self, kind: SampleKind) -> (String, Option<f64>, u32) {
        match kind {
            SampleKind::Load { offered_pps, step } => {
                (self.loads.get(step as usize - 1).map_or_else(|| format!("{offered_pps:.0} pps"), |l| l.label()), Some(offered_pps), step)
            }
            _ => ("full".into(), None, 0),
        }
    }

    fn record(&self, variant: &str, point: &Point, kind: SampleKind, rtts: super::latency::pingpong::Recorded, fwd: (u64, u64)) {
        let (load, offered, step) = self.load_of(kind);
        let mut pools = self.pools.borrow_mut();
        let i = match pools.iter().position(|p| p.variant == variant && p.point == *point && p.load == load) {
            Some(i) => i,
            None => {
                pools.push(Pool { variant: variant.into(), point: point.clone(), load, step, ..Default::default() });
                pools.len() - 1
            }
        };
        let p = &mut pools[i];
        let n = p.intervals as f64;
        p.offered_pps = offered.map(|o| (p.offered_pps.unwrap_or(0.0) * n + o) / (n + 1.0));
        p.intervals += 1;
        (p.sent, p.lost) = (p.sent + rtts.sent, p.lost + rtts.lost);
        p.rtts_ns.extend(rtts.rtts_ns);
        (p.forwarded, p.kernel_forwarded) = (p.forwarded + fwd.0, p.kernel_forwarded + fwd.1);
    }
}

impl Experiment for FwdLatency {
    type Variant = Variant;
    const NAME: &'static str = "fwd-latency";

    fn params(&self) -> Vec<Param> {
        vec![params::size(), params::flows()]
    }

    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![("size", params::values(&self.sizes)), ("flows", params::values(&self.flows))]
    }

    fn variants(&self) -> Vec<Variant> {
        self.resolve().unwrap_or_default()
    }

    fn ratios(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        self.resolve()?;
        ensure!(!self.loads.is_empty(), "--load: give at least one load, e.g. 0,50%,90%");
        ensure!((1..=100_000).contains(&self.probe_rate), "--probe-rate {}: use 1..=100000 probes per second", self.probe_rate);
        let ping = self.ping_cpu(cpus);
        ensure!(ping < cpus.count, "--ping-cpu {ping}: this machine has {} CPUs", cpus.count);
        ensure!(ping != cpus.gen, "--ping-cpu {ping} is the generator's CPU (--cpu): pick another");
        measure::check_sizes(&self.sizes, false)?;
        measure::check_generator(&self.flows, &[1], cpus.count)
    }

    /// The loads are this experiment's: the common load options are refused.
    fn plan(&self, common: Plan) -> Result<Plan> {
        ensure!(common.load.count() == 0, "--load-curve / --load-rates: fwd-latency takes its loads from --load");
        ensure!(common.zero_loss.is_none(), "--zero-loss: not measured by fwd-latency (use xnf lab router)");
        let pps = self.loads.iter().any(|l| matches!(l, Load::Pps(_)));
        ensure!(
            !pps || self.loads.iter().all(|l| matches!(l, Load::Pps(_)) || *l == Load::Share(0.0)),
            "--load: give shares of full speed (0,50%,90%) or rates (0,100000), not both"
        );
        let (mut shares, mut rates) = (Vec::new(), Vec::new());
        for l in &self.loads {
            match *l {
                Load::Share(s) => (shares.push(s), rates.push(0.0)),
                Load::Pps(p) => (shares.push(0.0), rates.push(p)),
            };
        }
        let load = if pps { measure::Load { pps: rates, ..Default::default() } } else { measure::Load { shares, ..Default::default() } };
        Ok(Plan { load, ..common })
    }

    /// dut as the chain experiment has it (no reverse-path filter: the
    /// chain's frames come back from the NF's port).
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        chain::Chain::default().adapt(spec)
    }

    /// The reflecting sink; permanent neighbours between gen and dut (no
    /// resolution while measuring); whole checksums from gen's kernel (a
    /// veth hands partial ones to XDP, which forwards them unfinished);
    /// the NF namespace for the chain.
    fn built(&mut self, t: &mut BuiltTopology, pg: &Progress) -> Result<()> {
        let roles = t.roles()?.clone();
        t.replace_function(&roles.sink, |ns, dev| LabAttachment::sink_with(ns, dev, SinkOptions { reflect_port: Some(ECHO_PORT), ..Default::default() }))?;
        let ((gen, gen_if), (dut, din)) = (t.endpoint(&roles.gen)?, t.endpoint(&roles.dut_in)?);
        gen.neigh_add(&t.addr(&roles.dut_in, false)?.to_string(), t.mac(&roles.dut_in)?, &gen_if)?;
        dut.neigh_add(&t.addr(&roles.gen, false)?.to_string(), t.mac(&roles.gen)?, &din)?;
        gen.set_offload(&gen_if, xnf_netns::Offload::TxChecksum, false)?;
        if self.nfs.is_empty() && self.variants.iter().any(|v| v == "chain") {
            pg.message("making the NF namespace");
            self.nfs = chain::nf_namespaces(1)?;
        }
        Ok(())
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, p: &Point, v: Variant, cpus: Cpus, pg: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let ((dut, din), (_, dout)) = (t.endpoint(&roles.dut_in)?, t.endpoint(&roles.dut_out)?);
        let (gen, sink) = (t.addr(&roles.gen, false)?, t.addr(&roles.sink, false)?);
        let mut s = Set {
            exp: self,
            variant: v.name(),
            point: p.clone(),
            gen: t.endpoint(&roles.gen)?.0,
            from: gen,
            to: sink,
            ping_cpu: self.ping_cpu(cpus),
            dut,
            din: din.clone(),
            dout: dout.clone(),
            sink: t.attachment(&roles.sink)?,
            fwd: Forwarder::Kernel(Vec::new()),
        };
        s.fwd = match v {
            Variant::Kernel => Forwarder::Kernel(vec![LabAttachment::pass(dut, &din)?, LabAttachment::pass(dut, &dout)?]),
            Variant::Router(_, opts) => Forwarder::Router(NfGuard::router(dut, &[din.clone(), dout.clone()], opts)?),
            Variant::Chain => {
                let (c, mut warnings) = chain::setup_xnf(dut, &din, &dout, &[self.nfs[0].path().display().to_string()], 1, sink, chain::Variant::Xnf)?;
                let back = BackChain::create(dut, &dout, &din, gen, &mut warnings)?;
                warnings.iter().filter(|w| !w.contains("lives in another network namespace")).for_each(|w| pg.println(&format!("xnf chain: {w}")));
                Forwarder::Chain(back, c)
            }
        };
        Ok(Box::new(s))
    }

    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        self.nfs.clear();
        xnf_core::state::gc_dead_namespaces();
        let rows: Vec<Row> = self
            .pools
            .take()
            .into_iter()
            .map(|p| Row {
                rtt_us: Summary::of_ns(&p.rtts_ns),
                background_mpps: background(res, &p),
                variant: p.variant,
                point: p.point,
                load: p.load,
                offered_pps: p.offered_pps,
                intervals: p.intervals,
                sent: p.sent,
                lost: p.lost,
                forwarded: p.forwarded,
                kernel_forwarded: p.kernel_forwarded,
            })
            .collect();
        res.details.insert("rtt".into(), serde_json::to_value(&rows)?);
        let ping = self.ping_cpu(cpus);
        res.notes.push(match self.pinger {
            Wait::Spin => format!("pinger: a kernel UDP socket in gen on CPU {ping}, spinning (never sleeps: no wakeup in its RTTs; CPU {ping} is always busy)"),
            Wait::Sleep => format!("pinger: a kernel UDP socket in gen on CPU {ping}, sleeping in ppoll() between probes and answers (an idle vCPU halts: its wakeup is in the RTTs)"),
        });
        res.notes.push(format!(
            "echo: the sink's XDP program turns probes around (XDP_TX) in softirq: no thread sleeps or spins there. Forwarders run in softirq on the CPU that sent the frame into the veth: the probes' on CPU {ping} when idle, on the generator's CPU {} once it keeps the ring busy. The generator spins on CPU {} even at load 0 (paused: 1 frame/s), so that CPU never halts.",
            cpus.gen, cpus.gen
        ));
        res.notes.push(format!("probes: {} per second for the whole of each measured interval (--seconds at full speed, --trial-seconds at each load); RTT from send to answer in the pinger (one clock); lost = no answer 200 ms after the last send. Load shares are of what the variant delivered at full speed; bg Mpps is what the sink received.", self.probe_rate));
        res.notes.push("dut's port counters count the probes too (both ways), the sink does not: in the samples the loss before dut is low, and after dut high, by the probes of the interval.".into());
        Ok(())
    }

    fn print(&self, r: &Results) {
        print(r);
    }
}

/// The mean rate (Mpps) the sink received in the pool's intervals.
fn background(res: &Results, p: &Pool) -> f64 {
    let at = |k: SampleKind| match k {
        SampleKind::Max => p.step == 0,
        SampleKind::Load { step, .. } => step == p.step,
        SampleKind::Search { .. } => false,
    };
    let m: Vec<f64> = res.samples.iter().filter(|s| s.variant == p.variant && s.point == p.point && at(s.kind)).map(|s| s.mpps).collect();
    m.iter().sum::<f64>() / m.len().max(1) as f64
}

/// The chain back from the sink to gen through the same NF (its output is
/// routed out either way, so the two chains merge there); deleted when
/// dropped, before the chain there and its NF.
struct BackChain<'a>(&'a Netns);

impl<'a> BackChain<'a> {
    fn create(dut: &'a Netns, ingress: &str, egress: &str, to: IpAddr, warnings: &mut Vec<String>) -> Result<Self> {
        let spec = ChainSpec {
            name: BACK.into(),
            ingress: ingress.into(),
            egress: vec![egress.into()],
            matches: vec![MatchSpec { dst: Some(format!("{to}/32")), ..Default::default() }],
            nfs: vec![chain::nf_name(1)],
            priority: 100,
            unknown_l4: Default::default(),
        };
        warnings.extend(dut.run(move || xnf_chain::chain_create(spec, Origin::Cli))?.context("creating the chain back")?);
        Ok(BackChain(dut))
    }
}

impl Drop for BackChain<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.run(|| xnf_chain::chain_delete(BACK)).and_then(|r| r) {
            eprintln!("xnf lab: removing the chain {BACK} from {}: {e:#}", self.0.name());
        }
    }
}

/// A variant on dut; dropping it tears it down (the chain back first).
enum Forwarder<'a> {
    Kernel(#[allow(dead_code)] Vec<LabAttachment>),
    Router(#[allow(dead_code)] NfGuard),
    Chain(#[allow(dead_code)] BackChain<'a>, XnfChain<'a>),
}

struct Set<'a> {
    exp: &'a FwdLatency,
    variant: String,
    point: Point,
    gen: &'a Netns,
    from: IpAddr,
    to: IpAddr,
    ping_cpu: usize,
    dut: &'a Netns,
    din: String,
    dout: String,
    sink: &'a LabAttachment,
    fwd: Forwarder<'a>,
}

impl Set<'_> {
    /// (frames the variant's forwarder carried, frames dut's kernel forwarded) so far.
    fn forwarded(&self) -> Result<(u64, u64)> {
        let kernel = self.dut.snmp()?.value("Ip", "ForwDatagrams")?;
        let own = match &self.fwd {
            Forwarder::Kernel(_) => kernel,
            Forwarder::Router(_) => self.dut.run(|| -> Result<u64> {
                use xnf_core::xdp::Verdict;
                let (_, maps) = xnf_router::open_maps()?;
                maps.ifaces()?.iter().map(|(slot, _)| maps.stats(*slot).map(|s| s.packets(Verdict::Redirect) + s.packets(Verdict::Tx))).sum()
            })??,
            Forwarder::Chain(..) => self.dut.run(|| -> Result<u64> {
                // A chain's exit counters are its last NF's: the NF both
                // chains share counts both directions, so one chain says all.
                Ok(xnf_chain::counters()?.chains.iter().find(|c| c.name == chain::CHAIN).map_or(0, |c| c.routed))
            })??,
        };
        Ok((own, kernel))
    }

    /// Probes for the whole interval (`secs`), the generator sending at its rate.
    fn probe(&self, kind: SampleKind, secs: f64) -> Result<()> {
        let rate = self.exp.probe_rate;
        let count = ((rate as f64 * secs).ceil() as u64).max(1);
        let (from, to) = (SocketAddr::new(self.from, 0), SocketAddr::new(self.to, ECHO_PORT));
        let poll = self.exp.pinger == Wait::Sleep;
        let enter = pinned_in(self.gen, self.ping_cpu)?;
        let before = self.forwarded()?;
        let rec = std::thread::scope(|s| s.spawn(move || enter().and_then(|()| udp_pinger(from, to, 1_000_000_000 / rate, count, poll))).join())
            .map_err(|_| anyhow::anyhow!("the pinger panicked"))??;
        let after = self.forwarded()?;
        self.exp.record(&self.variant, &self.point, kind, rec, (after.0.saturating_sub(before.0), after.1.saturating_sub(before.1)));
        Ok(())
    }
}

impl Running for Set<'_> {
    fn counters(&self) -> Result<Counters<'_>> {
        Ok(Counters {
            dut_in: (self.dut, self.din.clone()),
            dut_out: Some((self.dut, self.dout.clone())),
            received: Box::new(|| self.sink.packets()),
            on_read: None,
            corunner: None,
            during: Some(Box::new(|kind, secs| self.probe(kind, secs))),
        })
    }

    fn finish(self: Box<Self>, _: &[crate::engine::results::Sample]) -> Result<()> {
        match self.fwd {
            Forwarder::Chain(back, c) => {
                drop(back);
                c.remove()
            }
            _ => Ok(()),
        }
    }
}

/// The RTT rows of a results file (`details.rtt`).
pub fn rows(r: &Results) -> Vec<Row> {
    r.details.get("rtt").and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default()
}

/// The RTT table: per point, variant and load.
pub fn print(r: &Results) {
    println!("\nround-trip time through the forwarder (µs, probes pooled over the runs):");
    println!(
        "{:<18} {:<15} {:>10} {:>13} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12}",
        "point", "variant", "load", "offered Mpps", "bg Mpps", "median", "p99", "p99.9", "mean", "std", "max", "lost/sent"
    );
    for x in rows(r) {
        let s = &x.rtt_us;
        let offered = x.offered_pps.map_or("full".to_string(), |o| format!("{:.3}", o / 1e6));
        println!(
            "{:<18} {:<15} {:>10} {:>13} {:>8.3} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>12}",
            r.label(&x.point),
            x.variant,
            x.load,
            offered,
            x.background_mpps,
            s.median,
            s.p99,
            s.p999,
            s.mean,
            s.std,
            s.max,
            format!("{}/{}", x.lost, x.sent)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver;

    fn opts(args: &[&str]) -> FwdLatency {
        driver::parse_options(args).unwrap()
    }

    #[test]
    fn loads_parse_and_become_the_drivers_plan() {
        assert_eq!(parse_load("50%").unwrap(), Load::Share(0.5));
        assert_eq!(parse_load("0").unwrap(), Load::Share(0.0));
        assert_eq!(parse_load("1e5").unwrap(), Load::Pps(1e5));
        for bad in ["101%", "x", "-1", "0.5"] {
            assert!(parse_load(bad).unwrap_err().contains(bad), "{bad}");
        }
        let p = opts(&[]).plan(Plan::default()).unwrap();
        assert_eq!(p.load.shares, [0.0, 0.5, 0.9]);
        assert_eq!(p.load.count(), 3);
        let p = opts(&["--load", "0,100000"]).plan(Plan::default()).unwrap();
        assert_eq!(p.load.pps, [0.0, 1e5]);
        assert_eq!(opts(&["--load", "0,50%,1e5"]).load_of(SampleKind::Load { offered_pps: 1e5, step: 3 }).0, "100000 pps");
        assert_eq!(opts(&[]).load_of(SampleKind::Load { offered_pps: 1e6, step: 2 }), ("50%".to_string(), Some(1e6), 2));
        assert_eq!(opts(&[]).load_of(SampleKind::Max).0, "full");
    }

    #[test]
    fn bad_options_are_refused_with_one_line_naming_the_flag() {
        let cpus = Cpus { gen: 1, count: 2 };
        for (args, want) in [
            (&["--variants", "bogus"][..], "--variants: no variant `bogus`"),
            (&["--variants", "xnf,xnf"][..], "xnf named twice"),
            (&["--variants", "kernel,xnf-cache-lean"][..], "--variants: `xnf-cache-lean` is now `xnf-lean`"),
            (&["--probe-rate", "0"][..], "--probe-rate 0"),
            (&["--ping-cpu", "1"][..], "--ping-cpu 1 is the generator's CPU"),
            (&["--ping-cpu", "5"][..], "--ping-cpu 5"),
            (&["--size", "63"][..], "--size 63"),
        ] {
            let e = format!("{:#}", opts(args).check(cpus).unwrap_err());
            assert!(e.contains(want) && !e.contains('\n'), "{args:?}: {e}");
        }
        let e = opts(&["--load", "50%,100000"]).plan(Plan::default()).unwrap_err().to_string();
        assert!(e.contains("not both"), "{e}");
        let common = Plan { zero_loss: Some(0.0), ..Default::default() };
        assert!(opts(&[]).plan(common).unwrap_err().to_string().contains("--zero-loss"));
        assert!(opts(&[]).check(cpus).is_ok());
        assert_eq!(opts(&[]).ping_cpu(cpus), 0);
        let names: Vec<String> = opts(&[]).resolve().unwrap().iter().map(VariantName::name).collect();
        assert_eq!(names, ["kernel", "xnf", "xnf-full", "chain"]);
    }
}
