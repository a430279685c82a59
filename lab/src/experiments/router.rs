//! `xnf lab router`: kernel forwarding against `xnf router` on the same
//! topology (built-in `line`: gen -> dut -> sink), variants alternated
//! within each run, swept over packet size, flows, queues/CPUs, route-table
//! size and a netfilter ruleset.
//!
//! The generator sends as fast as it can (live frames, XDP_TX into gen's
//! veth); the sink counts in XDP and drops. The forwarded rate is what the
//! sink counts per second. The "dut-drop" variant drops every frame at
//! dut's ingress: the cost of generating and receiving alone, so
//! (1/rate - 1/rate_drop) estimates what forwarding itself costs.
//!
//! On veth, frames are processed in softirq on the *sending* CPU: the
//! generator, dut's receive and forwarding, and the sink's receive all run
//! on the generator's CPU, so the rate is of the whole chain; the CPU split
//! shows where the time went.

use std::net::IpAddr;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use crate::programs::gen::GenConfig;

use crate::engine::measure::{self, Labels, Probe, Timing};
use crate::engine::progress::Progress;
use crate::engine::results::{Point, Results};
use crate::engine::topology::BuiltTopology;
use crate::engine::{nft, LabAttachment, RouterGuard};

/// The ruleset loaded on dut at points with `netfilter` on.
pub const NETFILTER_RULESET: &str = include_str!("../../topologies/router.nft");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The kernel forwards (dut ingress has the XDP_PASS program).
    Kernel,
    /// `xnf router` forwards in XDP.
    Xnf,
    /// dut drops at XDP ingress: generator + receive cost only.
    DutDrop,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Kernel => "kernel",
            Variant::Xnf => "xnf",
            Variant::DutDrop => "dut-drop",
        }
    }
}

/// Options of one `xnf lab router` run; every list is a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    /// Built-in scenario name or TOML file (needs [roles]).
    pub topology: String,
    pub runs: u32,
    pub timing: Timing,
    /// Frame sizes on the wire, FCS included (64 = minimum Ethernet).
    pub sizes: Vec<u32>,
    pub flows: Vec<u32>,
    pub ipv6: bool,
    /// Queues per veth = generator CPUs.
    pub queues: Vec<u32>,
    /// Synthetic routes added to dut's table.
    pub routes: Vec<u64>,
    /// Points without and/or with the netfilter ruleset on dut.
    pub netfilter: Vec<bool>,
    pub variants: Vec<Variant>,
    /// Generator CPUs with one queue (more queues use CPUs 0..queues).
    pub cpu: usize,
    /// Also search each variant's zero-loss rate, with this loss tolerance (%).
    pub zero_loss: Option<f64>,
    /// Offered-load steps for the CPU-vs-load curve (0: none).
    pub load_steps: u32,
}

impl Options {
    /// Checks everything before anything is built.
    pub fn validate(&self, ncpu: usize) -> Result<()> {
        measure::check_options(self.runs, &self.timing, &self.sizes, self.ipv6, self.zero_loss, self.load_steps)?;
        measure::check_generator(&self.flows, &self.queues, self.cpu, ncpu)?;
        ensure!(!self.variants.is_empty(), "--variants: name at least one");
        for &r in &self.routes {
            ensure!(r <= 2_000_000, "--routes {r}: at most 2,000,000");
        }
        if self.netfilter.contains(&true) {
            nft::require("--netfilter")?;
        }
        Ok(())
    }

    fn points(&self) -> Vec<Point> {
        let mut v = Vec::new();
        for &queues in &self.queues {
            for &routes in &self.routes {
                for &netfilter in &self.netfilter {
                    for &size in &self.sizes {
                        for &flows in &self.flows {
                            v.push(Point { size, flows, ipv6: self.ipv6, routes, queues, netfilter });
                        }
                    }
                }
            }
        }
        v
    }
}

/// The generator's frames at `p` ([`measure::udp_traffic`]). With synthetic routes, destinations spread over
/// the table's prefixes inside the lab's range, one per flow.
fn template(t: &BuiltTopology, p: &Point, dsts: &[IpAddr]) -> Result<GenConfig> {
    let mut cfg = measure::udp_traffic(t, p)?;
    if !dsts.is_empty() {
        // Spread the flows over as many destinations (prefixes) as the
        // table offers: d addresses × flows/d source ports, d the largest
        // divisor of the flow count the table can serve, so the number of
        // distinct flows is exactly the point's.
        let d = spread(p.flows, dsts.len());
        cfg.dst_addrs = dsts[..d as usize].to_vec();
        cfg.flows = p.flows / d;
    }
    Ok(cfg)
}

/// The largest divisor of `flows` that is at most `targets`.
fn spread(flows: u32, targets: usize) -> u32 {
    (1..=flows.min(targets as u32)).rev().find(|d| flows.is_multiple_of(*d)).unwrap_or(1)
}

/// A variant set up on dut; dropping it tears it down.
enum Setup {
    Attachment(LabAttachment),
    // Held for its Drop (detach).
    Router(#[allow(dead_code)] RouterGuard),
}

fn setup(t: &BuiltTopology, v: Variant) -> Result<Setup> {
    let roles = t.roles()?;
    let (dut, din) = t.endpoint(&roles.dut_in)?;
    let (_, dout) = t.endpoint(&roles.dut_out)?;
    Ok(match v {
        Variant::Kernel => Setup::Attachment(LabAttachment::pass(dut, &din)?),
        Variant::DutDrop => Setup::Attachment(LabAttachment::sink(dut, &din)?),
        Variant::Xnf => Setup::Router(RouterGuard::attach(dut, &[din, dout])?),
    })
}

/// Loads the netfilter ruleset on dut for as long as it lives.
struct Netfilter<'a>(&'a xnf_netns::Netns);

impl<'a> Netfilter<'a> {
    fn load(ns: &'a xnf_netns::Netns) -> Result<Self> {
        nft::nft(ns, &["-f", "-"], Some(NETFILTER_RULESET)).context("loading the netfilter ruleset")?;
        Ok(Netfilter(ns))
    }
}

impl Drop for Netfilter<'_> {
    fn drop(&mut self) {
        // dut is the lab's own namespace: its whole ruleset is ours.
        let _ = nft::nft(self.0, &["flush", "ruleset"], None);
    }
}

/// Measures one variant at one point: full speed, then the load curve and
/// the zero-loss search when asked for.
#[allow(clippy::too_many_arguments)]
fn measure_variant(t: &BuiltTopology, o: &Options, l: &Labels, v: Variant, dsts: &[IpAddr], res: &mut Results, zl: &mut Vec<(String, Point, f64)>, pg: &mut Progress) -> Result<()> {
    let roles = t.roles()?;
    let _setup = setup(t, v)?;
    let (gen_ns, gen_if) = t.endpoint(&roles.gen)?;
    let gens = measure::start_generators(gen_ns, &gen_if, &template(t, &l.point, dsts)?, &measure::gen_cpus(o.cpu, l.point.queues), 0)?;
    let sink = t.attachment(&roles.sink)?;
    let (dut, din) = t.endpoint(&roles.dut_in)?;
    let (_, dout) = t.endpoint(&roles.dut_out)?;
    let drop_at_dut = match &_setup {
        Setup::Attachment(a) if v == Variant::DutDrop => Some(a),
        _ => None,
    };
    let probe = Probe {
        gens: &gens,
        dut_in: (dut, din),
        dut_out: drop_at_dut.is_none().then_some((dut, dout)),
        received: match drop_at_dut {
            Some(a) => Box::new(|| a.packets()),
            None => Box::new(|| sink.packets()),
        },
        on_read: None,
    };
    measure::record(res, zl, l, measure::variant(&probe, l, &o.timing, o.load_steps, o.zero_loss, pg)?);
    drop(probe);
    gens.stop()?;
    Ok(())
}

/// Runs the experiment.
pub fn run(o: &Options, pg_lines: &mut dyn FnMut(&str)) -> Result<Results> {
    let ncpu = crate::engine::cpu::sample()?.len();
    o.validate(ncpu)?;
    let spec = crate::engine::experiment_topology(&o.topology, pg_lines)?;
    let points = o.points();
    let per_variant = measure::planned_seconds(&o.timing, o.load_steps, o.zero_loss.is_some());
    let mut pg = Progress::new(per_variant * (points.len() * o.variants.len() * o.runs as usize) as f64);
    let mut res = Results::new("router", o);
    let mut zl = Vec::new();
    let mut built: Option<(u32, BuiltTopology)> = None;
    for (pi, point) in points.iter().enumerate() {
        let t = crate::engine::topology_with_queues(&mut built, &spec, &o.topology, point.queues, &mut pg)?;
        let roles = t.roles()?.clone();
        let (dut, dout) = t.endpoint(&roles.dut_out)?;
        let routes = if point.routes > 0 {
            let via = t.addr(&roles.sink, point.ipv6)?.to_string();
            pg.message(&format!("installing {} routes", point.routes));
            let r = crate::engine::routes::Installed::synthetic(dut, point.ipv6, point.routes, &via, &dout)?;
            pg.println(&format!("installed {} synthetic routes in {:.1} s", point.routes, r.install_seconds()));
            Some(r)
        } else {
            None
        };
        let dsts = match &routes {
            Some(r) => r.targets(point.flows as usize)?,
            None => Vec::new(),
        };
        if !dsts.is_empty() {
            let d = spread(point.flows, dsts.len());
            res.notes.push(format!("{}: the flows go to {d} destinations in distinct prefixes of the table", point.label()));
        }
        let _nft = if point.netfilter { Some(Netfilter::load(dut)?) } else { None };
        for run in 0..o.runs {
            for v in measure::alternated(&o.variants, run) {
                let l = Labels { variant: v.name().into(), point: point.clone(), run };
                pg.set_prefix(format!("point {}/{} ({}), run {}/{}, {}", pi + 1, points.len(), point.label(), run + 1, o.runs, v.name()));
                measure_variant(t, o, &l, v, &dsts, &mut res, &mut zl, &mut pg)?;
                pg.advance(per_variant);
            }
        }
    }
    drop(built);
    pg.finish();
    res.summarize(&zl);
    res.add_ratios("xnf", "kernel");
    res.notes.push(format!(
        "veth: every stage (generator, dut, sink) runs in softirq on the generating CPU (CPU {}; with N queues CPUs 0..N-1, one generator each); rates are of the whole chain, and dut-drop is the cost of generating and receiving alone.",
        o.cpu
    ));
    Ok(res)
}

/// Parses a comma-separated list ("64,128,1518").
pub fn parse_list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>, String>
where
    T::Err: std::fmt::Display,
{
    s.split(',').map(|x| x.trim().parse::<T>().map_err(|e| format!("`{x}`: {e}"))).collect()
}

/// `--netfilter` values: off, on, or both (a sweep).
pub fn netfilter_points(v: &str) -> Result<Vec<bool>> {
    Ok(match v {
        "off" => vec![false],
        "on" => vec![true],
        "both" => vec![false, true],
        _ => bail!("--netfilter takes off, on or both"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            topology: "line".into(),
            runs: 1,
            timing: Timing { warmup: 0.0, seconds: 1.0, trial_seconds: 1.0 },
            sizes: vec![64, 1518],
            flows: vec![1, 100],
            ipv6: false,
            queues: vec![1],
            routes: vec![0],
            netfilter: vec![false],
            variants: vec![Variant::Kernel, Variant::Xnf],
            cpu: 0,
            zero_loss: None,
            load_steps: 0,
        }
    }

    #[test]
    fn points_are_the_cartesian_product_of_the_sweeps() {
        let p = opts().points();
        assert_eq!(p.len(), 4);
        assert_eq!((p[0].size, p[0].flows), (64, 1));
        assert_eq!((p[3].size, p[3].flows), (1518, 100));
    }

    #[test]
    fn bad_options_are_refused_with_the_flag_named() {
        let check = |f: &dyn Fn(&mut Options), want: &str| {
            let mut o = opts();
            f(&mut o);
            let e = format!("{:#}", o.validate(2).unwrap_err());
            assert!(e.contains(want), "{e} lacks {want}");
        };
        check(&|o| o.sizes = vec![63], "--size 63");
        check(&|o| o.sizes = vec![1519], "--size 1519");
        check(&|o| o.flows = vec![70000], "--flows 70000");
        check(&|o| o.flows = vec![0], "--flows 0");
        check(&|o| o.queues = vec![3], "--queues 3");
        check(&|o| o.runs = 0, "--runs");
        check(&|o| o.cpu = 2, "--cpu 2");
        check(&|o| o.zero_loss = Some(100.0), "--zero-loss");
        check(&|o| o.timing.seconds = 0.0, "--seconds");
        check(&|o| (o.ipv6, o.sizes) = (true, vec![64]), "IPv6");
        assert!(opts().validate(2).is_ok());
    }

    #[test]
    fn flows_spread_over_destinations_keep_their_count() {
        assert_eq!(spread(10000, 20000), 10000);
        assert_eq!(spread(10000, 3000), 2500);
        assert_eq!(spread(7, 5), 1);
        assert_eq!(spread(1, 0), 1);
    }

    #[test]
    fn lists_parse_and_name_the_bad_element() {
        assert_eq!(parse_list::<u32>("64, 128,1518").unwrap(), vec![64, 128, 1518]);
        assert!(parse_list::<u32>("64,-5").unwrap_err().contains("`-5`"));
        assert_eq!(netfilter_points("both").unwrap(), vec![false, true]);
        assert!(netfilter_points("maybe").is_err());
    }
}
