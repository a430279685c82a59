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

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use crate::programs::gen::GenConfig;

use crate::engine::driver::{AtPoint, Cpus, Experiment, Running};
use crate::engine::measure::{self, Counters};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::Results;
use crate::engine::topology::BuiltTopology;
use crate::engine::{nft, LabAttachment, NfGuard, RouterOptions};
use xnf_router::program::FibMode;

/// The ruleset loaded on dut at points with `netfilter` on.
pub const NETFILTER_RULESET: &str = include_str!("../../topologies/router.nft");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The kernel forwards (dut ingress has the XDP_PASS program).
    Kernel,
    /// `xnf router` forwards in XDP (full lookups).
    Xnf,
    /// `xnf router --fib cache` (and its follower).
    XnfCache,
    /// `xnf router --fib cache --no-byte-counters`.
    XnfCacheLean,
    /// `xnf router --fib direct`.
    XnfDirect,
    /// dut drops at XDP ingress: generator + receive cost only.
    DutDrop,
}

/// `xnf lab router`: its own options; every list is a sweep.
#[derive(Args, Clone, Debug, Serialize)]
pub struct Router {
    /// Frame sizes on the wire, FCS included (64..=1518), or imix (the
    /// AMS-IX mix); a list sweeps, e.g. 64,128,256,512,1024,1518,imix.
    #[arg(long = "size", default_value = "64", value_delimiter = ',', value_parser = parse_size, value_name = "BYTES|imix[,...]")]
    pub sizes: Vec<u32>,
    /// Flows (distinct UDP source ports); a list sweeps, e.g. 1,10,100,1000,10000.
    #[arg(long, default_value = "4", value_delimiter = ',', value_parser = parse_item::<u32>, value_name = "N[,N...]")]
    pub flows: Vec<u32>,
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// RX/TX queues per veth = generator CPUs (CPUs 0..N); a list sweeps.
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = parse_item::<u32>, value_name = "N[,N...]")]
    pub queues: Vec<u32>,
    /// Synthetic routes added to dut's table (realistic prefix-length mix,
    /// installed by netlink batches); a list sweeps, e.g. 0,10000,1000000.
    #[arg(long, default_value = "0", value_delimiter = ',', value_parser = parse_item::<u64>, value_name = "N[,N...]")]
    pub routes: Vec<u64>,
    /// Load a realistic netfilter ruleset (conntrack, sets, counters) on
    /// dut: off, on, or both (a sweep).
    #[arg(long, default_value = "off", value_parser = netfilter_points, value_name = "off|on|both")]
    pub netfilter: OffOn,
    /// Variants to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "kernel,xnf,dut-drop")]
    pub variants: Vec<Variant>,
}

impl Experiment for Router {
    type Variant = Variant;
    const NAME: &'static str = "router";

    fn params(&self) -> Vec<Param> {
        params::legacy()
    }

    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![
            ("queues", params::values(&self.queues)),
            ("routes", params::values(&self.routes)),
            ("netfilter", params::values(&self.netfilter.0)),
            ("size", params::values(&self.sizes)),
            ("flows", params::values(&self.flows)),
            ("ipv6", params::values(&[self.ipv6])),
        ]
    }

    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn ratios(&self) -> Vec<(&'static str, &'static str)> {
        vec![("xnf", "kernel"), ("xnf-cache", "kernel"), ("xnf-cache", "xnf"), ("xnf-cache-lean", "xnf")]
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        measure::check_sizes(&self.sizes, self.ipv6)?;
        measure::check_generator(&self.flows, &self.queues, cpus.count)?;
        for &r in &self.routes {
            ensure!(r <= 2_000_000, "--routes {r}: at most 2,000,000");
        }
        if self.netfilter.0.contains(&true) {
            nft::require("--netfilter")?;
        }
        Ok(())
    }

    /// The synthetic routes and the netfilter ruleset of the point; with
    /// routes, the flows go to destinations in distinct prefixes.
    fn at_point<'a>(&'a self, t: &'a BuiltTopology, p: &Point, pg: &Progress) -> Result<AtPoint<'a>> {
        let roles = t.roles()?;
        let (dut, dout) = t.endpoint(&roles.dut_out)?;
        let (count, ipv6, flows) = (p.int("routes")? as u64, p.flag("ipv6")?, p.u32("flows")?);
        let routes = if count > 0 {
            let via = t.addr(&roles.sink, ipv6)?.to_string();
            pg.message(&format!("installing {count} routes"));
            let r = crate::engine::routes::Installed::synthetic(dut, ipv6, count, &via, &dout)?;
            pg.println(&format!("installed {count} synthetic routes in {:.1} s", r.install_seconds()));
            Some(r)
        } else {
            None
        };
        let dsts = match &routes {
            Some(r) => r.targets(flows as usize)?,
            None => Vec::new(),
        };
        let mut notes = Vec::new();
        if !dsts.is_empty() {
            notes.push(format!("the flows go to {} destinations in distinct prefixes of the table", spread(flows, dsts.len())));
        }
        let nft = if p.flag("netfilter")? { Some(Netfilter::load(dut)?) } else { None };
        Ok(AtPoint { traffic: template(t, p, &dsts)?, guard: Box::new((nft, routes)), notes })
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, _: &Point, v: Variant, _: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let (_, dout) = t.endpoint(&roles.dut_out)?;
        let setup = match v {
            Variant::Kernel => Setup::Pass(LabAttachment::pass(dut, &din)?),
            Variant::DutDrop => Setup::Drop(LabAttachment::sink(dut, &din)?),
            Variant::Xnf | Variant::XnfCache | Variant::XnfCacheLean | Variant::XnfDirect => {
                let opts = match v {
                    Variant::XnfCache => RouterOptions { fib: FibMode::Cache, no_bytes: false },
                    Variant::XnfCacheLean => RouterOptions { fib: FibMode::Cache, no_bytes: true },
                    Variant::XnfDirect => RouterOptions { fib: FibMode::Direct, no_bytes: false },
                    _ => RouterOptions::default(),
                };
                Setup::Router(NfGuard::router_with(dut, &[din.clone(), dout.clone()], opts)?)
            }
        };
        Ok(Box::new(Set { setup, dut, din, dout, sink: t.attachment(&roles.sink)? }))
    }

    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        res.notes.push(format!(
            "veth: every stage (generator, dut, sink) runs in softirq on the generating CPU (CPU {}; with N queues CPUs 0..N-1, one generator each); rates are of the whole chain, and dut-drop is the cost of generating and receiving alone.",
            cpus.gen
        ));
        Ok(())
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
        let flows = p.u32("flows")?;
        let d = spread(flows, dsts.len());
        cfg.dst_addrs = dsts[..d as usize].to_vec();
        cfg.flows = flows / d;
    }
    Ok(cfg)
}

/// The largest divisor of `flows` that is at most `targets`.
fn spread(flows: u32, targets: usize) -> u32 {
    (1..=flows.min(targets as u32)).rev().find(|d| flows.is_multiple_of(*d)).unwrap_or(1)
}

/// A variant set up on dut; dropping it tears it down.
enum Setup {
    Pass(#[allow(dead_code)] LabAttachment),
    Drop(LabAttachment),
    // Held for its Drop (detach).
    Router(#[allow(dead_code)] NfGuard),
}

struct Set<'a> {
    setup: Setup,
    dut: &'a xnf_netns::Netns,
    din: String,
    dout: String,
    sink: &'a LabAttachment,
}

impl Running for Set<'_> {
    /// Forwarded frames are counted at the sink; dut-drop's by its own
    /// program, dut sending nothing.
    fn counters(&self) -> Result<Counters<'_>> {
        let (dut_out, received): (_, measure::Received) = match &self.setup {
            Setup::Drop(a) => (None, Box::new(|| a.packets())),
            _ => (Some((self.dut, self.dout.clone())), Box::new(|| self.sink.packets())),
        };
        Ok(Counters { dut_in: (self.dut, self.din.clone()), dut_out, received, on_read: None, corunner: None })
    }
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

/// One element of a comma-separated list ("64,128,1518"), named when bad.
pub fn parse_item<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    s.trim().parse::<T>().map_err(|e| format!("`{s}`: {e}"))
}

/// A size: bytes or `imix` (stored as 0).
pub fn parse_size(s: &str) -> Result<u32, String> {
    match s.trim() {
        "imix" | "IMIX" => Ok(0),
        n => n.parse::<u32>().map_err(|e| format!("`{n}`: {e} (sizes are bytes on the wire, e.g. 64, or imix)")),
    }
}

/// The points without and/or with a ruleset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct OffOn(pub Vec<bool>);

/// `--netfilter` values: off, on, or both (a sweep).
pub fn netfilter_points(v: &str) -> Result<OffOn, String> {
    Ok(OffOn(match v {
        "off" => vec![false],
        "on" => vec![true],
        "both" => vec![false, true],
        _ => return Err("--netfilter takes off, on or both".into()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver;

    fn opts(args: &[&str]) -> Router {
        driver::parse_options(args).unwrap()
    }

    #[test]
    fn points_are_the_cartesian_product_of_the_sweeps() {
        let p = driver::points(&opts(&["--size", "64,1518", "--flows", "1,100"]));
        assert_eq!(p.len(), 4);
        assert_eq!((p[0].int("size").unwrap(), p[0].int("flows").unwrap()), (64, 1));
        assert_eq!((p[3].int("size").unwrap(), p[3].int("flows").unwrap()), (1518, 100));
        // The JSON of a point is what it always was.
        assert_eq!(serde_json::to_string(&p[0]).unwrap(), r#"{"size":64,"flows":1,"ipv6":false,"routes":0,"queues":1,"netfilter":false}"#);
        let q = driver::points(&opts(&["--queues", "1,2", "--netfilter", "both"]));
        let order: Vec<(i64, bool)> = q.iter().map(|p| (p.int("queues").unwrap(), p.flag("netfilter").unwrap())).collect();
        assert_eq!(order, [(1, false), (1, true), (2, false), (2, true)], "queues change slowest: the topology is rebuilt once");
    }

    #[test]
    fn bad_options_are_refused_with_the_flag_named() {
        let cpus = Cpus { gen: 0, count: 2 };
        for (args, want) in [
            (&["--size", "63"][..], "--size 63"),
            (&["--size", "1519"][..], "--size 1519"),
            (&["--flows", "70000"][..], "--flows 70000"),
            (&["--flows", "0"][..], "--flows 0"),
            (&["--queues", "3"][..], "--queues 3"),
            (&["--routes", "2000001"][..], "--routes 2000001"),
            (&["--ipv6", "--size", "64"][..], "IPv6"),
        ] {
            let e = format!("{:#}", opts(args).check(cpus).unwrap_err());
            assert!(e.contains(want), "{e} lacks {want}");
        }
        assert!(opts(&[]).check(cpus).is_ok());
        assert!(driver::parse_options::<Router>(&["--size", "64,x"]).is_err());
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
        assert_eq!(opts(&["--size", "64, 128,imix"]).sizes, vec![64, 128, 0]);
        assert!(parse_item::<u32>("-5").unwrap_err().contains("`-5`"));
        assert_eq!(netfilter_points("both").unwrap().0, vec![false, true]);
        assert!(netfilter_points("maybe").is_err());
    }
}
