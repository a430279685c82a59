//! `xnf lab filter` on the lab's driver ([`crate::engine::driver`]):
//!
//! - the topology ([`Experiment::adapt`], [`Experiment::built`]): routes
//!   back to the flood's sources in dut and in the victim (so neither
//!   drops them as unroutable and the victim's stack sees them), the
//!   victim's stack receiving (XDP_PASS instead of the sink's counter),
//!   with `--flood syn` gen's interface left to the answers' sink; then the
//!   victim's request/response service ([`super::rr`]), which runs until
//!   everything is measured;
//! - a point is a `--blocklist` size: the flood ([`AtFlood`]: its frames,
//!   its blocklist, the SYN flood's listener and answer sink) is set up
//!   once for all its runs, without the driver's generator;
//! - a variant is set up on dut's ingress for one run ([`Setup`], dut's
//!   NAPI threaded and pinned after it) and measures itself
//!   ([`Running::measure`]): the flood along `--rates` ([`super::probe`]),
//!   every interval a sample (the samples the driver records) and an
//!   [`Interval`] kept for [`Experiment::finish`], which puts the curves
//!   and intervals into the results' details.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{ensure, Context, Result};
use serde::Serialize;

use super::blocklist::BlocklistKind;
use super::flood::Flood;
use super::summary::{self, Interval};
use super::variants::{Setup, Variant};
use super::{probe, rr, Cores, Filter, FloodKind, Rate, SERVICE_PORT};
use crate::engine::driver::{variant_name, AtPoint, Cpus, Experiment, Measuring, Running, VariantName};
use crate::engine::measure::{self, Plan, Timing};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::placement;
use crate::engine::progress::Progress;
use crate::engine::results::Results;
use crate::engine::topology::{ifname, BuiltTopology, RouteSpec, TopologySpec};
use crate::engine::{LabAttachment, NfGuard};
use crate::programs::gen::GenConfig;

/// Where the flood's sources are (by port: 198.19.0.0/16; a blocklist's:
/// the lab range): routed back towards gen in dut and in the victim.
const SOURCES: &str = "198.18.0.0/15";

impl VariantName for Variant {
    fn name(&self) -> String {
        variant_name(self)
    }
}

impl Experiment for Filter {
    type Variant = Variant;
    const NAME: &'static str = "filter";

    fn params(&self) -> Vec<Param> {
        vec![super::blocklist_param(self.blocklist_kind), super::rules_param(), params::queues()]
    }

    /// Every axis in every point: the blocklist sizes, then the rule
    /// counts; queues change slowest (the topology is rebuilt once per count).
    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![("queues", params::values(&self.queues)), ("blocklist", params::values(&self.blocklist)), ("rules", params::values(&self.rules))]
    }

    fn variants(&self) -> Vec<Variant> {
        self.resolve().0
    }

    /// Discarded flood frames per second at the maximum: xnf over each other variant.
    fn ratios(&self) -> Vec<(&str, &str)> {
        let v = self.resolve().0;
        if !v.contains(&Variant::Xnf) {
            return Vec::new();
        }
        v.iter().filter(|o| **o != Variant::Xnf).map(|o| ("xnf", o.as_str())).collect()
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        self.check_options(cpus)
    }

    /// The flood's rates are `--rates`: the common load curve and zero-loss
    /// search are refused; profiling is honoured (a twin of each flooded interval).
    fn plan(&self, common: Plan) -> Result<Plan> {
        ensure!(common.load.count() == 0, "--load-curve / --load-rates: xnf lab filter's offered rates are its flood --rates");
        ensure!(common.zero_loss.is_none(), "--zero-loss: not measured by xnf lab filter (its flood rates are --rates)");
        Ok(common)
    }

    /// Every rate: its warm-up, its interval and a little reading; a
    /// profiled twin of each flooded one.
    fn planned_seconds(&self, t: &Timing, plan: &Plan) -> f64 {
        let twin = |r: Rate| if plan.profile.is_some() && r != Rate::Pps(0) { r.seconds(t) + 0.5 } else { 0.0 };
        self.rates.iter().map(|&r| t.warmup + r.seconds(t) + 0.2 + twin(r)).sum()
    }

    /// Routes back to the flood's sources: in dut via gen, in the victim
    /// via dut's egress. Refuses a topology without dut between gen and
    /// the victim in namespaces of their own.
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let roles = spec.roles.clone().context("--topology: xnf lab filter needs a [roles] table")?;
        let ns = |ep: &str| ep.split_once(':').map_or(ep, |(n, _)| n).to_string();
        let (gen, dut, sink) = (ns(&roles.gen), ns(&roles.dut_in), ns(&roles.sink));
        ensure!(
            ns(&roles.dut_out) == dut && gen != dut && sink != dut && gen != sink,
            "--topology: xnf lab filter needs gen, dut and the victim (sink) in namespaces of their own, dut's ingress and egress in one (as the built-in line)"
        );
        let via =
            |ep: &str| ipv4_of(spec, ep).with_context(|| format!("--topology: `{ep}` has no IPv4 address (the flood's sources are routed back through it)"));
        let (to_gen, to_dut) = (via(&roles.gen)?, via(&roles.dut_out)?);
        for (ns, via) in [(dut, to_gen), (sink, to_dut)] {
            spec.routes.push(RouteSpec { ns, to: SOURCES.into(), via: Some(via), dev: None, count: None });
        }
        Ok(())
    }

    /// The victim's stack receives; a SYN flood's answers get gen's
    /// interface to themselves (a sink, set up per point); the victim's
    /// service starts (again, on a rebuild).
    fn built(&mut self, t: &mut BuiltTopology, pg: &Progress) -> Result<()> {
        if let (false, Some(why)) = (self.told, self.resolve().1) {
            pg.println(&why);
        }
        self.told = true;
        let roles = t.roles()?.clone();
        t.replace_function(&roles.sink, LabAttachment::pass)?;
        if self.flood == FloodKind::Syn && t.attachment(&roles.gen).is_ok() {
            t.remove_function(&roles.gen)?;
        }
        if let Some(old) = self.rr.take() {
            old.stop().context("the victim's request/response service")?;
        }
        // The queue count the driver built this topology with.
        let queues = t.spec.links.iter().filter_map(|l| l.queues).max().unwrap_or(1);
        let app = self.cores(queues)?.app;
        let addr = SocketAddr::new(t.addr(&roles.sink, false)?, SERVICE_PORT);
        self.rr = Some(rr::RrService::start(t.endpoint(&roles.sink)?.0, addr, t.endpoint(&roles.gen)?.0, app, app)?);
        Ok(())
    }

    fn at_point<'a>(&'a self, t: &'a BuiltTopology, p: &Point, pg: &Progress) -> Result<AtPoint<'a>> {
        pg.message(&format!("preparing the flood ({})", params::label(&self.params(), p)));
        let at = AtFlood::new(self, t, u64::try_from(p.int("blocklist")?)?, p.u32("rules")?)?;
        let mut notes = Vec::new();
        if at.flood.sources.len() < self.sources as usize {
            notes.push(format!("the flood comes from {} sources (--sources {}): one per address of the list", at.flood.sources.len(), self.sources));
        }
        *self.at.borrow_mut() = Some(Rc::new(at));
        let mut point = AtPoint::without_traffic(PointGuard(self));
        point.notes = notes;
        Ok(point)
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, p: &Point, v: Variant, _: Cpus, pg: &Progress) -> Result<Box<dyn Running + 'a>> {
        pg.message("setting up");
        let at = self.at.borrow().clone().context("no flood set up at this point")?;
        let cores = self.cores(p.u32("queues")?)?;
        let (dut, din) = t.endpoint(&t.roles()?.dut_in)?;
        let setup = Setup::new(v, dut, &din, &at.flood, self.xdp_filter.as_deref()).with_context(|| v.name())?;
        // Threaded NAPI needs the NAPI an XDP program brings, and every
        // XDP change makes its thread again.
        placement::serve_threaded(dut, &din)?;
        let threads = placement::threads_of(&din)?;
        ensure!(threads.len() >= cores.rx.len(), "{din} has {} NAPI thread(s) for {} queues", threads.len(), cores.rx.len());
        for (i, pid) in threads.into_iter().enumerate() {
            // Real-time, as a softirq would be: the victim shares the CPU.
            placement::pin(pid, cores.rx[i % cores.rx.len()], Some(placement::PRIORITY)).with_context(|| format!("{din}'s NAPI thread {pid}"))?;
        }
        Ok(Box::new(Run { setup, exp: self, t, at, cores }))
    }

    /// The victim's service stopped (its failure fails the run); the
    /// curves and intervals into the details; notes.
    fn finish(&mut self, _: Cpus, res: &mut Results) -> Result<()> {
        if let Some(rr) = self.rr.take() {
            rr.stop().context("the victim's request/response service")?;
        }
        let names: Vec<String> = self.resolve().0.iter().map(VariantName::name).collect();
        let cores = self.queues.iter().map(|&q| Ok((q, self.cores(q)?))).collect::<Result<Vec<_>>>()?;
        summary::finish(res, &names, self.intervals.take(), &cores);
        res.notes.extend(self.notes());
        if self.flood == FloodKind::Syn {
            res.notes.push("--flood syn: a discarded frame is a SYN answered with a cookie (by xnf in XDP, by dut's SYNPROXY, or by the victim's kernel; counted at the victim as TcpExt SyncookiesSent + ListenDrops), so drop Mpps is SYNs answered per second and ns/drop the CPU per answer".into());
        }
        Ok(())
    }

    /// The figure as tables (per point: transactions by flood rate, then
    /// each variant's half rate, drops and CPU per drop).
    fn print(&self, r: &Results) {
        summary::print(r);
    }
}

impl Filter {
    /// What the results say about the rule counts and the list's kind.
    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let variants = self.resolve().0;
        if self.rules.iter().any(|&n| n > 1) {
            notes.push("--rules N: every filter holds N rules, the one that drops the flood last, after N-1 it does not meet (UDP to ports 10000 and up): xnf N-1 rules `proto = \"udp\", dport = P, action = \"drop\"`; nftables N-1 rules of its chain, one each — a linear list as a user writes it, not a set, which would be one lookup whatever N".into());
            if variants.iter().any(|v| matches!(v, Variant::XdpFilter | Variant::XdpFilterIp)) {
                notes.push("--rules N with xdp-filter: its N-1 ports go into its port bitmap (one array lookup per frame): its cost is flat in N by design, unlike a rule list".into());
            }
            if variants.contains(&Variant::XdpFilterIp) {
                notes.push("xdp-filter-ip with --rules > 1 loads --features ipv4,udp at every point, which xdp-filter serves with its full program (xdpfilt_alw_all: Ethernet and port lookups besides the addresses)".into());
            }
        }
        if self.blocklist_kind == BlocklistKind::Addresses && self.blocklist.iter().any(|&b| b > 0) {
            notes.push("--blocklist-kind addresses: the list is N distinct single addresses (a slice in the lab range, where the flood's sources are drawn from, the rest over global unicast space): xnf a list of /32s (its LPM trie), nftables a plain set (type ipv4_addr, a hash, no intervals)".into());
            if variants.contains(&Variant::XdpFilterIp) {
                notes.push(format!(
                    "xdp-filter-ip: `xdp-filter load --features ipv4`, the first address by `xdp-filter ip ADDR --mode src`, the rest written into its pinned filter_ipv4 map in batches with the value layout of its source (xdp-tools 1.6.3), checked against the entry its own command wrote; the map holds at most {} addresses",
                    super::xdpfilter::IPV4_ENTRIES
                ));
            }
        }
        notes
    }
}

/// The first IPv4 address the topology gives the endpoint `ep` (`ns:dev`).
fn ipv4_of(spec: &TopologySpec, ep: &str) -> Option<String> {
    let (ns, dev) = ep.split_once(':')?;
    let same = |end: &str| end.split_once(':').is_some_and(|(n, d)| n == ns && ifname(d) == ifname(dev));
    let addrs = spec.links.iter().flat_map(|l| [(&l.a, &l.a_addr), (&l.b, &l.b_addr)]).filter(|(end, _)| same(end)).flat_map(|(_, a)| a.iter());
    addrs.filter_map(|a| a.split('/').next()).find(|a| a.parse::<std::net::Ipv4Addr>().is_ok()).map(str::to_string)
}

/// The options as the results record them: the variants, and the CPUs,
/// as resolved (the common ones are the driver's).
impl Serialize for Filter {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Recorded<'a> {
            rates: &'a [Rate],
            flood: FloodKind,
            variants: Vec<String>,
            blocklist: &'a [u64],
            blocklist_kind: BlocklistKind,
            rules: &'a [u32],
            queues: &'a [u32],
            burst: u64,
            sources: u32,
            port: u16,
            app_cpu: Option<usize>,
            rx_cpu: Option<usize>,
            xdp_filter: Option<&'a Path>,
        }
        // As at the first queue count (the notes give every count's).
        let cores = self.cpus.get().and_then(|c| self.cores_of(c, self.queues[0]).ok());
        Recorded {
            rates: &self.rates,
            flood: self.flood,
            variants: self.resolve().0.iter().map(VariantName::name).collect(),
            blocklist: &self.blocklist,
            blocklist_kind: self.blocklist_kind,
            rules: &self.rules,
            queues: &self.queues,
            burst: self.burst,
            sources: self.sources,
            port: self.port,
            app_cpu: cores.as_ref().map(|c| c.app).or(self.app_cpu),
            rx_cpu: cores.as_ref().map(|c| c.rx[0]).or(self.rx_cpu),
            xdp_filter: self.xdp_filter.as_deref(),
        }
        .serialize(s)
    }
}

/// The flood at one point, for all its runs; dropping it removes its
/// blocklist file, the SYN flood's listener and its answers' sink.
pub struct AtFlood {
    pub flood: Flood,
    /// The generator's frames.
    pub traffic: GenConfig,
    /// The SYN flood's port has a listener that never accepts: its queue
    /// fills and the victim's kernel answers with cookies.
    _listener: Option<TcpListener>,
    /// With a SYN flood, gen's interface drops the answers in XDP.
    _replies: Option<NfGuard>,
    /// Holds the blocklist's file (removed after it, with the flood).
    _dir: TempDir,
}

impl AtFlood {
    fn new(f: &Filter, t: &BuiltTopology, size: u64, rules: u32) -> Result<AtFlood> {
        let roles = t.roles()?;
        let (victim, victim_ip) = (t.endpoint(&roles.sink)?.0, t.addr(&roles.sink, false)?);
        let dir = TempDir::new()?;
        let flood = if size == 0 { Flood::by_port(f.port, f.sources)? } else { Flood::by_blocklist(f.port, f.blocklist_kind, size, f.sources, &dir.0)? };
        let mut flood = flood.with_rules(rules, SERVICE_PORT);
        flood.rules_swept = f.rules.iter().any(|&n| n > 1);
        flood.syn = f.flood == FloodKind::Syn;
        let (mut listener, mut replies) = (None, None);
        if flood.syn {
            let at = SocketAddr::new(victim_ip, f.port);
            listener = Some(victim.run(move || TcpListener::bind(at))?.with_context(|| format!("listening on {at} in the victim"))?);
            let (gen, gen_if) = t.endpoint(&roles.gen)?;
            replies = Some(NfGuard::filter(gen, std::slice::from_ref(&gen_if), &Flood::reply_sink_rules(), "xnf lab filter's SYN-ACK sink")?);
        }
        let traffic = flood.traffic(t, victim_ip)?;
        Ok(AtFlood { flood, traffic, _listener: listener, _replies: replies, _dir: dir })
    }
}

/// Held for a point's runs; dropping it takes the point's flood down.
struct PointGuard<'a>(&'a Filter);

impl Drop for PointGuard<'_> {
    fn drop(&mut self) {
        drop(self.0.at.take());
    }
}

/// A folder for a point's blocklist, removed with everything in it.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        let p = std::env::temp_dir().join(format!("xnf-lab-filter-{}", std::process::id()));
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A variant set up for one run; dropping it removes it from dut.
struct Run<'a> {
    setup: Setup<'a>,
    exp: &'a Filter,
    t: &'a BuiltTopology,
    at: Rc<AtFlood>,
    cores: Cores,
}

impl Run<'_> {
    /// Where the flood comes from and where it is counted.
    fn path(&self) -> Result<probe::Path<'_>> {
        let roles = self.t.roles()?;
        let (gen, gen_if) = self.t.endpoint(&roles.gen)?;
        let ((dut, din), (_, dout)) = (self.t.endpoint(&roles.dut_in)?, self.t.endpoint(&roles.dut_out)?);
        Ok(probe::Path {
            gen: (gen, gen_if),
            gen_cpus: &self.cores.gen,
            burst: self.exp.burst,
            dut: (dut, din, dout),
            victim: self.t.endpoint(&roles.sink)?.0,
            rr: self.exp.rr.as_ref().context("the victim's request/response service is not running")?,
            traffic: &self.at.traffic,
            syn: self.at.flood.syn,
        })
    }
}

impl Running for Run<'_> {
    /// Every rate of `--rates` in turn, the flood running throughout; the
    /// samples go to the driver, the intervals to the experiment.
    fn measure(&self, m: Measuring) -> Result<measure::Measured> {
        let rates = &self.exp.rates;
        let pg = m.pg;
        let say = &mut |i: usize, twin: bool| pg.message(&format!("flood {}{}", rates[i], if twin { ", profiling" } else { "" }));
        let measured = self.path()?.measure(m.labels, &self.setup, rates, m.timing, m.plan.profile.as_ref(), say)?;
        let (mut samples, mut profiled) = (Vec::new(), Vec::new());
        let mut intervals = self.exp.intervals.borrow_mut();
        for (i, x) in measured.into_iter().enumerate() {
            if let Some((twin, prof)) = x.twin {
                profiled.push((x.sample.clone(), twin, prof));
            }
            intervals.push(Interval::of(&x.sample, i, rates[i], x.extra));
            samples.push(x.sample);
        }
        Ok(measure::Measured { samples, zero_loss: None, profiled })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_gets_routes_back_to_the_floods_sources_and_a_pair_is_refused() {
        let f: super::super::FilterArgs = crate::engine::driver::parse_options(&[]).unwrap();
        let mut line = TopologySpec::load("line").unwrap();
        let before = line.routes.len();
        f.filter.adapt(&mut line).unwrap();
        let added: Vec<(&str, &str, Option<&str>)> = line.routes[before..].iter().map(|r| (r.ns.as_str(), r.to.as_str(), r.via.as_deref())).collect();
        assert_eq!(added, [("dut", SOURCES, Some("198.18.0.1")), ("sink", SOURCES, Some("198.18.1.1"))]);
        let e = f.filter.adapt(&mut TopologySpec::load("pair").unwrap()).unwrap_err().to_string();
        assert!(e.starts_with("--topology") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn xnf_is_compared_with_every_other_variant() {
        let f: super::super::FilterArgs = crate::engine::driver::parse_options(&["--variants", "none,xnf,nft-raw"]).unwrap();
        assert_eq!(f.filter.ratios(), [("xnf", "none"), ("xnf", "nft-raw")]);
        let f: super::super::FilterArgs = crate::engine::driver::parse_options(&["--variants", "none,nft-raw"]).unwrap();
        assert!(f.filter.ratios().is_empty());
    }
}
