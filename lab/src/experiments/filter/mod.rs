//! `xnf lab filter`: the XDP paper §5.1, Fig. 5 — a victim's TCP transactions
//! per second under a UDP flood of rising rate, with no filter and with
//! each filter dropping the flood.
//!
//! **Where things are** (the built-in `line`, gen → dut → sink, or a
//! `--topology` of the same roles in three namespaces):
//! - the victim is the sink namespace: its stack serves TCP
//!   request/response ([`rr`], netperf TCP_RR style) on its address; the
//!   sink's counting XDP program is replaced by XDP_PASS for this;
//! - the client is in gen, so its requests take the flood's path;
//! - the flood comes from the lab's in-kernel generator on gen: 64-byte
//!   UDP from many sources in 198.19.0.0/16 (or spread over a blocklist)
//!   to a port the victim does not serve, paced at each rate of `--rates`,
//!   then as fast as it goes (`max`);
//! - **the filters sit on dut's ingress**, dut standing for the host or
//!   hypervisor in front of the victim (the XDP paper §5.1: "the filter can even
//!   be installed on the hypervisor"). On the victim's own ingress every
//!   flood frame would first cost dut a kernel forward (about 1 µs on the
//!   generator's CPU), a cost no filter behind it can remove: every
//!   variant would stop at dut's forwarding rate and look alike. Without a
//!   filter (`none`) dut forwards the flood and the victim's UDP stack
//!   drops it (no socket on the port), as the seed's unprotected server does.
//!
//! **CPUs**, as the seed's machines: the generator has a CPU of its own
//! (`--cpu`, default the last one) — the attacking machine. The victim's
//! side is the other CPU (`--app-cpu`, default the first): dut's ingress
//! is served there by its NAPI loop, threaded and pinned at real-time
//! priority (`--rx-cpu`, see [`crate::engine::placement`]: the receive queue whose interrupt
//! is on that core), and the server and its client run there too, blocking
//! in `read`; whatever dut forwards to the victim is received on that CPU
//! as well. So the flood and the victim's requests share one receive ring
//! and one core, as on the seed's server (one receive queue, "all packets
//! are processed by the same CPU core"); the flood takes from the victim
//! exactly the CPU its filtering costs, and what overflows the ring
//! (requests included) is lost.
//!
//! **Measured** on the lab's driver ([`crate::engine::driver`]): the
//! points are the `--blocklist` sizes (of prefixes, or of addresses:
//! [`blocklist`]) crossed with the `--rules` counts (the dropping rule
//! last, behind rules the flood does not meet: [`flood`]), at each of
//! which the flood (its blocklist, the SYN flood's listener and answer
//! sink) is set up once
//! ([`experiment`]); per variant and run the variant measures itself
//! ([`probe`]): the flood is started at the first non-zero rate of
//! `--rates` and re-paced for each next one, one interval per rate after
//! a warm-up (`--trial-seconds` at each paced rate, `--seconds` at `max`):
//! the flood rate actually sent, the victim's transactions per second, the
//! flood frames discarded and where, CPU time per discarded frame. Per
//! variant: transactions vs flood rate (the figure), the rate at which
//! they fall to half of the unflooded rate, drops per second and CPU per
//! dropped frame at the maximum rate ([`summary`], the results'
//! `details`); ratios of the drop rates at the maximum (xnf over each
//! other variant). Variants alternate within each run (reversed every
//! other run). Results are the lab's (`--json` → `xnf lab report`).
//!
//! **`--flood syn`**: TCP SYNs to a port the victim listens on (never
//! accepting), answered with SYN cookies by the victim's kernel (`none`),
//! xnf's syn-cookie rule in XDP, or dut's kernel SYNPROXY; the answers
//! are dropped in XDP on gen's interface, the same for every variant.

pub mod blocklist;
pub mod experiment;
pub mod flood;
pub mod probe;
pub mod rr;
pub mod summary;
pub mod variants;
pub mod xdpfilter;

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;

use anyhow::{bail, ensure, Result};
use clap::Args;

use crate::engine::driver::{self, variant_name, Common, Cpus, Experiment};
use crate::engine::measure::{self, Timing};
use crate::engine::nft;
use crate::engine::params::{Axis, Param};
use blocklist::BlocklistKind;
use flood::Flood;
use variants::Variant;

/// The victim's service port (TCP).
const SERVICE_PORT: u16 = 5001;

/// What the flood is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FloodKind {
    /// 64-byte UDP to a port the victim does not serve: filters drop it.
    #[default]
    Udp,
    /// TCP SYNs to a port the victim listens on (and never accepts from):
    /// the victim's kernel, dut's SYNPROXY or xnf's syn-cookie rule answers
    /// each with a SYN cookie.
    Syn,
}

/// A flood rate: frames per second, or as fast as the generator goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    Pps(u64),
    Max,
}

impl Rate {
    /// As the command line and the results write it: `250000`, `max`.
    pub fn text(self) -> String {
        match self {
            Rate::Max => "max".into(),
            Rate::Pps(r) => r.to_string(),
        }
    }

    /// Measured seconds at this rate: `--seconds` at the maximum (the
    /// driver's full speed), `--trial-seconds` at a paced rate (a load step).
    pub fn seconds(self, t: &Timing) -> f64 {
        match self {
            Rate::Max => t.seconds,
            Rate::Pps(_) => t.trial_seconds,
        }
    }
}

impl serde::Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Rate::Max => f.write_str("max"),
            Rate::Pps(r) => write!(f, "{:.2} Mpps", *r as f64 / 1e6),
        }
    }
}

/// `max`, or frames per second with an optional k / M suffix (250k, 1.5M).
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    if s.eq_ignore_ascii_case("max") {
        return Ok(Rate::Max);
    }
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1e3),
        Some((i, 'm' | 'M')) => (&s[..i], 1e6),
        _ => (s, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v >= 0.0 && (v * mult).is_finite() => Ok(Rate::Pps((v * mult).round() as u64)),
        _ => Err(format!("`{s}` is not a rate: frames per second (250000, 250k, 1.5M) or max")),
    }
}

/// `xnf lab filter`: the options every experiment shares and its own.
#[derive(Args)]
pub struct FilterArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub filter: Filter,
}

/// `xnf lab filter`'s own options, and what it keeps while it runs (see
/// [`experiment`]; the results record the options as resolved).
#[derive(Args)]
pub struct Filter {
    /// Flood rates in frames per second (k and M suffixes), in the order
    /// measured; `max` is as fast as the generator goes. Each paced rate
    /// (0 included) is measured for --trial-seconds, `max` for --seconds.
    #[arg(long, value_delimiter = ',', default_value = "0,250k,500k,1M,2M,max", value_parser = parse_rate, value_name = "PPS|max[,...]")]
    pub rates: Vec<Rate>,
    /// The flood: udp, or syn (a SYN flood; variants none, xnf, nft-synproxy).
    #[arg(long, value_enum, default_value_t = FloodKind::Udp)]
    pub flood: FloodKind,
    /// Variants to compare [default: none,xnf,nft-ingress,nft-raw, and
    /// xdp-filter (by port) or xdp-filter-ip (--blocklist-kind addresses)
    /// when scripts/peers.sh has built it; with --flood syn:
    /// none,xnf,nft-synproxy].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub variants: Option<Vec<Variant>>,
    /// Blocklist sizes (a list sweeps): 0 drops the flood by its UDP port;
    /// N > 0 drops by a list of N prefixes shaped like the BGP table, the
    /// flood's sources spread over it (xnf: an LPM list; nftables: an
    /// interval set).
    #[arg(long, value_delimiter = ',', default_value = "0", value_name = "N[,N...]")]
    pub blocklist: Vec<u64>,
    /// What a blocklist holds: prefixes (BGP-like), or distinct single
    /// addresses (xnf: /32s; nftables: a plain address set; xdp-filter-ip:
    /// its address map, at most 10000).
    #[arg(long, value_enum, default_value_t = BlocklistKind::Prefixes)]
    pub blocklist_kind: BlocklistKind,
    /// Rules in every filter (a list sweeps): the one that drops the flood
    /// last, after N-1 that it does not meet (UDP to other ports; nftables:
    /// one rule each; xdp-filter: ports of its bitmap). --flood udp only.
    #[arg(long, value_delimiter = ',', default_value = "1", value_name = "N[,N...]")]
    pub rules: Vec<u32>,
    /// Paced flood frames sent back to back (1..=64; 1: evenly spaced).
    /// On veth the receiver runs on the sending CPU: evenly spaced frames
    /// are polled one at a time, at a cost per frame a NIC's batches do not
    /// have, and the rates asked for are not reached.
    #[arg(long, default_value_t = 32)]
    pub burst: u64,
    /// Flood source addresses (one flow each).
    #[arg(long, default_value_t = 1024)]
    pub sources: u32,
    /// The flood's UDP destination port (one the victim does not serve).
    #[arg(long, default_value_t = 9)]
    pub port: u16,
    /// RX/TX queues per veth (a list sweeps): the flood comes from one
    /// generator per queue (CPUs 0..N-1 when more than one), and dut's
    /// ingress is served by a CPU per queue (--rx-cpu). More than one
    /// queue needs twice as many CPUs (or an --rx-cpu given).
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = crate::experiments::router::parse_item::<u32>, value_name = "N[,N...]")]
    pub queues: Vec<u32>,
    /// The CPU of the victim's server and its client [default: with one
    /// queue the first one other than the generator's (--cpu); with more,
    /// the first receive CPU: the flood is received where the victim runs].
    #[arg(long)]
    pub app_cpu: Option<usize>,
    /// The CPU that serves dut's ingress (its threaded NAPI loop, at
    /// real-time priority: the receive queue's core); with N queues, queue
    /// i's on this CPU + i [default: with one queue the application's, so
    /// the flood is received where the victim runs; with N, CPU N, the
    /// first after the generators].
    #[arg(long)]
    pub rx_cpu: Option<usize>,
    /// xdp-filter's binary [default: $XNF_PEERS/sbin/xdp-filter, XNF_PEERS
    /// defaulting to /opt/xnf/peers, where scripts/peers.sh builds it].
    #[arg(long, value_name = "PATH")]
    pub xdp_filter: Option<PathBuf>,
    /// The machine's CPUs, once the options are checked.
    #[arg(skip)]
    cpus: Cell<Option<Cpus>>,
    /// The victim's request/response service, started on every build of the topology.
    #[arg(skip)]
    rr: Option<rr::RrService>,
    /// Why xdp-filter is left out of the default variants, once said.
    #[arg(skip)]
    told: bool,
    /// The flood set up at the point being measured ([`experiment`]).
    #[arg(skip)]
    at: RefCell<Option<Rc<experiment::AtFlood>>>,
    /// Every measured interval, for the results' details.
    #[arg(skip)]
    intervals: RefCell<Vec<summary::Interval>>,
}

/// The CPUs of the experiment at a queue count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cores {
    /// The generators' (one queue: the driver's `--cpu`).
    pub gen: Vec<usize>,
    /// The victim's server and client.
    pub app: usize,
    /// dut's ingress NAPI threads, queue i's at i.
    pub rx: Vec<usize>,
}

impl Cores {
    /// In words, for the results' notes.
    pub fn describe(&self) -> String {
        let list = |c: &[usize]| c.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let shared = self.rx.iter().any(|c| self.gen.contains(c));
        format!(
            "the generator{} on CPU {}; dut's ingress served on CPU {} (threaded NAPI, queue i on the i-th, real-time priority: its time shows as system, not softirq){}; the victim's server and its client on CPU {}, blocking in read",
            if self.gen.len() > 1 { "s run" } else { " runs" },
            list(&self.gen),
            list(&self.rx),
            if shared { ", sharing the generators' CPUs as --rx-cpu says: the flood's cost and the filter's are not apart" } else { "" },
            self.app
        )
    }
}

impl Filter {
    /// The variants asked for, or the default ones; and why xdp-filter is
    /// left out of the default, if it is.
    fn resolve(&self) -> (Vec<Variant>, Option<String>) {
        if let Some(v) = &self.variants {
            return (v.clone(), None);
        }
        if self.flood == FloodKind::Syn {
            return (vec![Variant::None, Variant::Xnf, Variant::NftSynproxy], None);
        }
        let mut v = vec![Variant::None, Variant::Xnf, Variant::NftIngress, Variant::NftRaw];
        let (unlisted, listed) = (self.blocklist.iter().all(|&b| b == 0), self.blocklist.iter().all(|&b| b > 0));
        let addresses = self.blocklist_kind == BlocklistKind::Addresses;
        let left_out = |why: &str| Some(format!("xdp-filter left out of the default variants: {why}"));
        let why = match variants::xdp_filter_binary(self.xdp_filter.as_deref()) {
            Ok(_) if unlisted => {
                v.push(Variant::XdpFilter);
                None
            }
            Ok(_) if !addresses => left_out("it has no prefix lists (--blocklist; xdp-filter-ip takes --blocklist-kind addresses)"),
            Ok(_) if !listed => left_out("--blocklist mixes 0 (by port: xdp-filter) and lists (xdp-filter-ip)"),
            Ok(_) if self.blocklist.iter().any(|&b| b > xdpfilter::IPV4_ENTRIES) => {
                left_out(&format!("xdp-filter-ip holds at most {} addresses (its filter_ipv4 map)", xdpfilter::IPV4_ENTRIES))
            }
            Ok(_) => {
                v.push(Variant::XdpFilterIp);
                None
            }
            Err(e) => left_out(&format!("{e}")),
        };
        (v, why)
    }

    /// The generators', the application's and the receive CPUs at
    /// `queues` queues. One queue: the generator on `--cpu`, the victim
    /// and dut's ingress on another. More: the generators on CPUs 0..N-1
    /// (a veth's queue is the sending CPU's), dut's N queues on CPUs of
    /// their own after them, unless `--rx-cpu` says where.
    fn cores_of(&self, cpus: Cpus, queues: u32) -> Result<Cores> {
        let (ncpu, n) = (cpus.count, queues as usize);
        let app = match (self.app_cpu, n) {
            (Some(a), _) => a,
            (None, 1) => usize::from(cpus.gen == 0) % ncpu,
            (None, _) => self.rx_cpu.unwrap_or(n),
        };
        if n > 1 && self.rx_cpu.is_none() {
            ensure!(
                2 * n <= ncpu,
                "--queues {n} needs {} CPUs: {n} generators (CPUs 0..{}) and {n} serving dut's queues (this machine has {ncpu}; --rx-cpu R puts dut's queues on CPUs R.. anyway)",
                2 * n,
                n - 1
            );
        }
        ensure!(app < ncpu, "--app-cpu {app} does not exist (this machine has {ncpu})");
        let rx0 = self.rx_cpu.unwrap_or(if n == 1 { app } else { n });
        ensure!(
            rx0 + n <= ncpu,
            "--rx-cpu {rx0}{}: CPU {} does not exist (this machine has {ncpu})",
            if n > 1 { format!(" with {n} queues") } else { String::new() },
            rx0 + n - 1
        );
        Ok(Cores { gen: measure::gen_cpus(cpus.gen, queues), app, rx: (rx0..rx0 + n).collect() })
    }

    /// The CPUs at `queues` queues, the machine's as
    /// [`check`](Experiment::check) found them.
    fn cores(&self, queues: u32) -> Result<Cores> {
        let cpus = self.cpus.get().ok_or_else(|| anyhow::anyhow!("the options are not checked yet"))?;
        self.cores_of(cpus, queues)
    }

    /// Checks its own options (the driver has checked the common ones);
    /// keeps the CPUs.
    fn check_options(&self, cpus: Cpus) -> Result<()> {
        let (variants, _) = self.resolve();
        ensure!(!variants.is_empty(), "--variants: name at least one");
        ensure!(!self.rates.is_empty(), "--rates: give at least one (e.g. 0,1M,max)");
        ensure!((1..=64).contains(&self.burst), "--burst {}: use 1..=64 frames (64 is a live-frame batch)", self.burst);
        ensure!(self.port != SERVICE_PORT, "--port {}: that is the victim's service port; the flood must go to a port it does not serve", self.port);
        if variants.iter().any(|v| matches!(v, Variant::NftIngress | Variant::NftRaw)) {
            nft::require("nft-ingress and nft-raw")?;
        }
        let syn = self.flood == FloodKind::Syn;
        if syn {
            ensure!(self.blocklist.iter().all(|&b| b == 0), "--flood syn: syn-cookie rules match by port, not by a --blocklist");
            if let Some(v) = variants.iter().find(|v| matches!(v, Variant::NftIngress | Variant::NftRaw | Variant::XdpFilter | Variant::XdpFilterIp)) {
                bail!("--flood syn: {} would drop the SYNs of real clients too; compare none, xnf and nft-synproxy", variant_name(v));
            }
        }
        if variants.contains(&Variant::NftSynproxy) {
            ensure!(syn, "nft-synproxy answers SYNs: use it with --flood syn");
            nft::require("nft-synproxy")?;
        }
        let max_rules = xnf_filter::program::MAX_RULES;
        ensure!(!self.rules.is_empty(), "--rules: give at least one count (e.g. 1,10,100)");
        if let Some(n) = self.rules.iter().find(|n| !(1..=max_rules).contains(*n)) {
            bail!("--rules {n}: use 1..={max_rules} (the dropping rule counts; xnf filter holds at most {max_rules} rules)");
        }
        ensure!(!syn || self.rules.iter().all(|&n| n == 1), "--flood syn: --rules sweeps the rules a UDP flood meets before its drop; leave it at 1");
        let listed = self.blocklist.iter().any(|&b| b > 0);
        if variants.contains(&Variant::XdpFilter) {
            ensure!(
                !listed || self.blocklist_kind == BlocklistKind::Addresses,
                "xdp-filter matches single addresses, not prefixes: leave it out of --variants with --blocklist"
            );
            ensure!(!listed, "xdp-filter drops by port: with --blocklist use xdp-filter-ip (its address map)");
            variants::xdp_filter_binary(self.xdp_filter.as_deref())?;
        }
        if variants.contains(&Variant::XdpFilterIp) {
            ensure!(self.blocklist_kind == BlocklistKind::Addresses, "xdp-filter-ip matches single addresses, not prefixes: add --blocklist-kind addresses");
            ensure!(!self.blocklist.contains(&0), "xdp-filter-ip drops by a list of addresses: give --blocklist sizes above 0 (by port is xdp-filter)");
            let room = xdpfilter::IPV4_ENTRIES;
            if let Some(n) = self.blocklist.iter().find(|&&b| b > room) {
                bail!("--blocklist {n}: xdp-filter-ip holds at most {room} addresses (xdp-filter's filter_ipv4 map); leave it out of --variants above that");
            }
            variants::xdp_filter_binary(self.xdp_filter.as_deref())?;
        }
        Flood::by_port(self.port, self.sources)?;
        measure::check_queues(&self.queues, cpus.count)?;
        for &q in &self.queues {
            self.cores_of(cpus, q)?;
        }
        self.cpus.set(Some(cpus));
        Ok(())
    }
}

/// The first parameter of this experiment's points: the blocklist's size,
/// in entries of `kind`.
pub fn blocklist_param(kind: BlocklistKind) -> Param {
    let mut p = Param::plain("blocklist", &0u64.into());
    p.title = "blocklist size".into();
    let (one, many) = match kind {
        BlocklistKind::Prefixes => ("prefix", "prefixes"),
        BlocklistKind::Addresses => ("address", "addresses"),
    };
    p.axis = format!("{many} in the blocklist (log scale)");
    p.scale = Axis::Log;
    p.unit = (one.into(), many.into());
    p.names = vec![(0u64.into(), "by port".into())];
    p
}

/// The second: the rules in every filter, the dropping one last (1, the
/// default, is left out of labels).
pub fn rules_param() -> Param {
    let mut p = Param::plain("rules", &1u32.into());
    p.title = "rule count".into();
    p.axis = "rules in the filter, the dropping one last (log scale)".into();
    p.scale = Axis::Log;
    p.unit = ("rule".into(), "rules".into());
    p.quiet = vec![1u32.into()];
    p
}

/// `xnf lab filter`: runs it on the lab's driver, prints the tables (the
/// figure's, then the lab's summary), writes the files asked for.
pub fn main(mut a: FilterArgs) -> Result<()> {
    let r = driver::run(&mut a.filter, &a.common, &mut |line| eprintln!("xnf lab: {line}"))?;
    summary::header(&r);
    a.filter.print(&r);
    crate::engine::table::print_summary(&r);
    crate::engine::profiling::print(&r);
    a.common.write(&r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::measure::Plan;

    #[test]
    fn rates_read_with_suffixes_and_max() {
        assert_eq!(parse_rate("250k"), Ok(Rate::Pps(250_000)));
        assert_eq!(parse_rate("1.5M"), Ok(Rate::Pps(1_500_000)));
        assert_eq!(parse_rate("0"), Ok(Rate::Pps(0)));
        assert_eq!(parse_rate("MAX"), Ok(Rate::Max));
        assert!(parse_rate("fast").unwrap_err().contains("not a rate"));
        assert!(parse_rate("-1").is_err());
    }

    fn args(list: &[&str]) -> FilterArgs {
        driver::parse_options(list).unwrap()
    }

    const CPUS: Cpus = Cpus { gen: 1, count: 2 };

    fn refusal(list: &[&str]) -> String {
        let a = args(list);
        let e = a.common.validate(2).and_then(|c| a.filter.check(c)).and_then(|()| a.filter.plan(a.common.plan()).map(drop));
        format!("{:#}", e.unwrap_err())
    }

    #[test]
    fn options_are_checked_naming_the_flag() {
        let a = args(&["--variants", "none"]);
        assert_eq!(a.filter.rates, [Rate::Pps(0), Rate::Pps(250_000), Rate::Pps(500_000), Rate::Pps(1_000_000), Rate::Pps(2_000_000), Rate::Max]);
        a.filter.check(CPUS).unwrap();
        for (list, want) in [
            (&["--runs", "0"][..], "--runs"),
            (&["--port", "5001"][..], "--port 5001"),
            (&["--sources", "0"][..], "--sources"),
            (&["--burst", "65"][..], "--burst 65"),
            (&["--cpu", "2"][..], "--cpu 2"),
            (&["--app-cpu", "2"][..], "--app-cpu 2"),
            (&["--rx-cpu", "2"][..], "--rx-cpu 2: CPU 2 does not exist"),
            (&["--queues", "2"][..], "--queues 2 needs 4 CPUs"),
            (&["--queues", "2", "--rx-cpu", "1"][..], "--rx-cpu 1 with 2 queues: CPU 2 does not exist"),
            (&["--queues", "3"][..], "--queues 3"),
            (&["--variants", "xdp-filter", "--blocklist", "1000"][..], "not prefixes"),
            (&["--variants", "xdp-filter", "--blocklist", "1000", "--blocklist-kind", "addresses"][..], "use xdp-filter-ip"),
            (&["--variants", "xdp-filter-ip", "--blocklist", "1000"][..], "--blocklist-kind addresses"),
            (&["--variants", "xdp-filter-ip", "--blocklist", "0,1000", "--blocklist-kind", "addresses"][..], "above 0"),
            (&["--variants", "xdp-filter-ip", "--blocklist", "20000", "--blocklist-kind", "addresses"][..], "--blocklist 20000"),
            (&["--rules", "0"][..], "--rules 0"),
            (&["--rules", "1,100000"][..], "--rules 100000"),
            (&["--flood", "syn", "--variants", "xnf", "--rules", "1,10"][..], "--flood syn: --rules"),
            (&["--flood", "syn", "--variants", "nft-ingress"][..], "--flood syn: nft-ingress"),
            (&["--flood", "syn", "--variants", "xnf", "--blocklist", "1000"][..], "--blocklist"),
            (&["--variants", "nft-synproxy"][..], "--flood syn"),
            (&["--load-curve"][..], "--load-curve"),
            (&["--load-rates", "1000"][..], "--load-rates"),
            (&["--zero-loss"][..], "--zero-loss"),
        ] {
            let e = refusal(list);
            assert!(e.contains(want) && !e.contains('\n'), "{list:?}: {e}");
        }
        assert_eq!(args(&["--flood", "syn"]).filter.resolve().0, [Variant::None, Variant::Xnf, Variant::NftSynproxy]);
        let f = args(&[]).filter;
        assert_eq!(f.cores_of(CPUS, 1).unwrap(), Cores { gen: vec![1], app: 0, rx: vec![0] });
        assert_eq!(f.cores_of(Cpus { gen: 0, count: 2 }, 1).unwrap(), Cores { gen: vec![0], app: 1, rx: vec![1] });
        assert_eq!(args(&["--rx-cpu", "1"]).filter.cores_of(CPUS, 1).unwrap().rx, [1]);
        let eight = Cpus { gen: 7, count: 8 };
        assert_eq!(f.cores_of(eight, 2).unwrap(), Cores { gen: vec![0, 1], app: 2, rx: vec![2, 3] }, "dut's queues after the generators");
        assert_eq!(args(&["--rx-cpu", "4"]).filter.cores_of(eight, 4).unwrap(), Cores { gen: vec![0, 1, 2, 3], app: 4, rx: vec![4, 5, 6, 7] });
        assert_eq!(args(&["--rx-cpu", "0"]).filter.cores_of(CPUS, 2).unwrap(), Cores { gen: vec![0, 1], app: 0, rx: vec![0, 1] }, "given: shared");
        assert!(f.plan(Plan::default()).is_ok());
        let a = args(&["--variants", "xnf", "--rules", "1,10", "--blocklist", "0,1000", "--blocklist-kind", "addresses"]);
        a.filter.check(CPUS).unwrap();
        assert_eq!(a.filter.rules, [1, 10]);
        let max = xnf_filter::program::MAX_RULES.to_string();
        args(&["--variants", "xnf", "--rules", &max]).filter.check(CPUS).unwrap();
    }

    #[test]
    fn xdp_filter_ip_is_a_default_only_for_lists_of_addresses_it_can_hold() {
        let peers = Some(std::path::PathBuf::from("/bin/true"));
        let resolved = |list: &[&str]| {
            let mut f = args(list).filter;
            f.xdp_filter.clone_from(&peers);
            f.resolve()
        };
        assert!(resolved(&[]).0.contains(&Variant::XdpFilter));
        let (v, why) = resolved(&["--blocklist", "1000", "--blocklist-kind", "addresses"]);
        assert!(v.contains(&Variant::XdpFilterIp) && !v.contains(&Variant::XdpFilter) && why.is_none(), "{v:?}");
        for list in [
            &["--blocklist", "1000"][..],
            &["--blocklist", "0,1000", "--blocklist-kind", "addresses"],
            &["--blocklist", "20000", "--blocklist-kind", "addresses"],
        ] {
            let (v, why) = resolved(list);
            assert!(!v.contains(&Variant::XdpFilterIp) && !v.contains(&Variant::XdpFilter), "{list:?}: {v:?}");
            assert!(why.is_some_and(|w| w.starts_with("xdp-filter left out") && !w.contains('\n')), "{list:?}");
        }
    }

    #[test]
    fn each_rate_is_measured_for_its_seconds() {
        let t = Timing { warmup: 1.0, seconds: 5.0, trial_seconds: 2.0 };
        assert_eq!((Rate::Max.seconds(&t), Rate::Pps(0).seconds(&t), Rate::Pps(1000).seconds(&t)), (5.0, 2.0, 2.0));
        let f = args(&["--rates", "0,1M,max"]).filter;
        let plain = f.planned_seconds(&t, &Plan::default());
        assert!((plain - (2.0 * 3.2 + 6.2)).abs() < 1e-9, "{plain}");
        // Profiled: a twin of each flooded interval.
        let profile = Plan { profile: args(&["--profile", "counts"]).common.profiling.options(), ..Default::default() };
        let profiled = f.planned_seconds(&t, &profile);
        assert!((profiled - plain - (2.5 + 5.5)).abs() < 1e-9, "{profiled}");
    }
}
