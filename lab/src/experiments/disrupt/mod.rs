//! `xnf lab disrupt`: what touching a running data plane costs, per event
//! and per variant. A sequenced UDP stream (`--rate` datagrams/s, well
//! below any variant's zero-loss rate) flows gen -> sink through dut, and
//! `--connections` TCP connections from gen to a server in the sink each
//! send a small request every `--request-ms` and read the reply (for xnf
//! through its lb: a service whose two backends are the sink's two
//! addresses, which decaps; with `--lb-flows` UDP flows to a second
//! service, their backends followed across every event). Then one
//! event at a time: for xnf (a box file of filter, lb and router under
//! `xnf daemon`) the daemon killed with -9 or stopped and started again, a
//! whole-box change, a bad file applied, an upgrade (`--upgrade-to`); for
//! the peers doing the same job their own way to change: the kernel's
//! route replaced, an nftables ruleset replaced, xdp-forward and
//! xdp-filter unloaded and loaded again.
//!
//! Per event, from just before it to `--settle-ms` after it: datagrams
//! lost (by sequence number), the longest wait between two at the sink,
//! TCP connections broken (an error or EOF), what dut's kernel forwarded
//! and, for xnf, what its functions' counters say they left to the kernel,
//! by reason. On the lab's one driver: each (variant, event) is one of
//! its variants, set up afresh, the order reversed on every other
//! `--repeat` (the driver's runs), so consecutive events are of different
//! variants; the rows are the results' `details.events`, each event also a
//! sample (sent and received datagrams of its window) for `--csv`.

pub mod counters;
pub mod peers;
pub mod results;
mod set;
pub mod tcp;
pub mod xnf;

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use xnf_netns::{Netns, Offload};

use self::results::EventRow;
use self::set::{second_backend, On, Set};
use self::tcp::{Clients, Server};
use crate::engine::driver::{self, variant_name, AtPoint, Cpus, Experiment, Running, VariantName};
use crate::engine::eventargs::{EventArgs, EventOptions};
use crate::engine::measure::{Plan, Timing};
use crate::engine::params::{Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::Results;
use crate::engine::stream::Stream;
use crate::engine::topology::{BuiltTopology, FunctionKind, FunctionSpec, TopologySpec};
use crate::engine::{nft, peers as peer_tools};

/// The stream's UDP port at the sink (the TCP server's is the lb's
/// service's, [`xnf::TCP_PORT`]).
const UDP_PORT: u16 = 9999;
const TCP_PORT: u16 = xnf::TCP_PORT;
/// dut's spare interface, which the whole-box change gives the router.
const SPARE: [&str; 2] = ["xnfspare0", "xnfspare1"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// A box file (filter, lb, router) under `xnf daemon`.
    Xnf,
    /// The kernel forwards.
    Kernel,
    /// The kernel forwards through an nftables ruleset.
    Nft,
    /// xdp-tools' xdp-forward.
    XdpForward,
    /// xdp-tools' xdp-filter in front of the kernel's forwarding.
    XdpFilter,
}

/// What is done to a running variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Event {
    /// xnf: the daemon killed with -9, started again, ready.
    DaemonKill,
    /// xnf: the daemon stopped (SIGTERM), started again, ready.
    DaemonRestart,
    /// xnf: `xnf apply` of a file changing filter rules, adding an lb
    /// service and a router interface.
    WholeBoxChange,
    /// xnf: `xnf apply` of a file with one bad line (must be refused).
    BadConfig,
    /// xnf: the daemon stopped and started from the other build
    /// (`--upgrade-to PATH`), as the package's upgrade does.
    Upgrade,
    /// xdp-forward, xdp-filter: unloaded and loaded again.
    Reload,
    /// nft: `nft -f` of a changed ruleset (one transaction).
    RulesetChange,
    /// kernel: `ip route replace` of the sink's route, one attribute changed.
    RouteChange,
}

impl Variant {
    pub const ALL: [Variant; 5] = [Variant::Xnf, Variant::Kernel, Variant::Nft, Variant::XdpForward, Variant::XdpFilter];

    pub fn events(self) -> &'static [Event] {
        match self {
            Variant::Xnf => &[Event::DaemonKill, Event::DaemonRestart, Event::WholeBoxChange, Event::BadConfig, Event::Upgrade],
            Variant::Kernel => &[Event::RouteChange],
            Variant::Nft => &[Event::RulesetChange],
            Variant::XdpForward | Variant::XdpFilter => &[Event::Reload],
        }
    }
}

impl Event {
    pub fn name(self) -> String {
        variant_name(&self)
    }
}

/// One of the driver's variants: a variant and one of its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    pub variant: Variant,
    pub event: Event,
}

impl VariantName for Case {
    fn name(&self) -> String {
        format!("{}/{}", variant_name(&self.variant), self.event.name())
    }
}

/// `xnf lab disrupt`: its own options.
#[derive(Args, Serialize)]
pub struct Disrupt {
    /// Variants [default: xnf,kernel,nft,xdp-forward,xdp-filter; a peer
    /// whose binary is missing is left out with a note].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub variants: Vec<Variant>,
    /// Events [default: every event of each variant]; each variant runs
    /// those of its own.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub events: Vec<Event>,
    /// Datagrams per second of the stream, well below any variant's
    /// zero-loss rate.
    #[arg(long, default_value_t = 20_000)]
    pub rate: u32,
    /// TCP connections gen -> sink through dut.
    #[arg(long, default_value_t = 100)]
    pub connections: u32,
    /// xnf: lb flows (UDP, a source port each) to a service of two
    /// backends, opened at the start, whose backends are followed across
    /// every event.
    #[arg(long, default_value_t = 200)]
    pub lb_flows: u32,
    /// Milliseconds between one connection's requests.
    #[arg(long, default_value_t = 5)]
    pub request_ms: u64,
    /// Milliseconds measured after each event has ended.
    #[arg(long, default_value_t = 500)]
    pub settle_ms: u64,
    /// Another build of xnf (`make layout-bump` makes one): the upgrade
    /// event restarts the daemon into it (without it, the event is
    /// skipped with a note).
    #[arg(long, value_name = "PATH")]
    pub upgrade_to: Option<PathBuf>,
    /// xdp-forward's binary (default: where scripts/peers.sh builds it).
    #[arg(long, value_name = "PATH")]
    pub xdp_forward: Option<PathBuf>,
    /// xdp-filter's binary (default: where scripts/peers.sh builds it).
    #[arg(long, value_name = "PATH")]
    pub xdp_filter: Option<PathBuf>,
    /// The (variant, event) pairs, in the order of the first repeat.
    #[arg(skip)]
    #[serde(skip)]
    cases: Vec<Case>,
    #[arg(skip)]
    #[serde(skip)]
    notes: Vec<String>,
    #[arg(skip)]
    #[serde(skip)]
    traffic: RefCell<Option<Traffic>>,
    #[arg(skip)]
    #[serde(skip)]
    rows: RefCell<Vec<EventRow>>,
}

/// `xnf lab disrupt`'s command line: the driver's common options, its
/// `--runs` named `--repeat` (default 3), and the experiment's own.
pub type DisruptArgs = EventArgs<Disrupt>;

impl EventOptions for Disrupt {
    const RUNS: (&'static str, &'static str, &'static str, u32, &'static str) =
        ("repeat", "K", "3", 100, "Times each event is repeated; the order of the events is reversed on every other repeat");
    /// (--zero-loss, the load curve and --profile are refused by its plan.)
    const UNUSED: &'static [(&'static str, &'static str, &'static str)] = &[
        ("seconds", "--seconds", "disrupt measures events, not intervals of traffic (--settle-ms is the time after each)"),
        ("warmup", "--warmup", "disrupt measures events, not intervals of traffic (traffic flows before every event)"),
        ("trial_seconds", "--trial-seconds", "disrupt measures events, not intervals of traffic"),
        ("cpu", "--cpu", "disrupt's sender is a paced socket thread, not the generator"),
    ];
    const OUTPUTS: (&'static str, Option<&'static str>) = (
        "Write the results as JSON, the events in its details.events (input of `xnf lab report`)",
        Some("Write one row per event and repeat as CSV (the stream's datagrams sent and received in its window)"),
    );
}

pub fn run(mut a: DisruptArgs) -> Result<()> {
    a.refuse()?;
    a.experiment.resolve()?;
    let r = driver::run(&mut a.experiment, &a.common, &mut |line| eprintln!("xnf lab: {line}"))?;
    a.experiment.print(&r);
    a.common.write(&r)
}

impl Disrupt {
    /// The variants to run: those named (each peer's binary checked), or
    /// the defaults without the peers that are missing (a note each).
    fn chosen_variants(&mut self) -> Result<Vec<Variant>> {
        for (i, v) in self.variants.iter().enumerate() {
            ensure!(!self.variants[..i].contains(v), "--variants: {} named twice", variant_name(v));
        }
        if !self.variants.is_empty() {
            for v in &self.variants {
                self.available(*v)?;
            }
            return Ok(self.variants.clone());
        }
        let mut out = Vec::new();
        for v in Variant::ALL {
            match self.available(v) {
                Ok(()) => out.push(v),
                Err(e) => self.notes.push(format!("{} left out: {e:#}", variant_name(&v))),
            }
        }
        Ok(out)
    }

    /// Whether `v` can run here: its binary, nft.
    fn available(&self, v: Variant) -> Result<()> {
        match v {
            Variant::XdpForward => peer_tools::xdp_forward_binary(self.xdp_forward.as_deref()).map(drop),
            Variant::XdpFilter => peer_tools::binary("xdp-filter", "--xdp-filter", self.xdp_filter.as_deref()).map(drop),
            Variant::Nft => nft::require("the nft variant"),
            Variant::Xnf => xnf::xnf_binary().map(drop),
            Variant::Kernel => Ok(()),
        }
    }

    /// The cases: each chosen variant's events that `--events` names,
    /// interleaved variant by variant; the options checked.
    fn resolve(&mut self) -> Result<()> {
        ensure!((1000..=1_000_000).contains(&self.rate), "--rate {}: 1000 to 1000000 datagrams/s", self.rate);
        ensure!((1..=1000).contains(&self.connections), "--connections {}: 1 to 1000", self.connections);
        ensure!((1..=1000).contains(&self.request_ms), "--request-ms {}: 1 to 1000", self.request_ms);
        ensure!((50..=60_000).contains(&self.settle_ms), "--settle-ms {}: 50 to 60000", self.settle_ms);
        if let Some(p) = &self.upgrade_to {
            ensure!(p.is_file(), "--upgrade-to {}: no such file", p.display());
        }
        for (i, e) in self.events.iter().enumerate() {
            ensure!(!self.events[..i].contains(e), "--events: {} named twice", e.name());
        }
        let variants = self.chosen_variants()?;
        let wanted = |e: &Event| self.events.is_empty() || self.events.contains(e);
        for e in &self.events {
            if !variants.iter().any(|v| v.events().contains(e)) {
                let of: Vec<String> = Variant::ALL.iter().filter(|v| v.events().contains(e)).map(variant_name).collect();
                bail!("--events: {} is an event of {}, which --variants leaves out", e.name(), of.join(", "));
            }
        }
        let mut per: Vec<Vec<Case>> = Vec::new();
        for v in variants {
            let mut cases: Vec<Case> = v.events().iter().filter(|e| wanted(e)).map(|&event| Case { variant: v, event }).collect();
            if self.upgrade_to.is_none() && cases.iter().any(|c| c.event == Event::Upgrade) {
                cases.retain(|c| c.event != Event::Upgrade);
                self.notes.push("upgrade: skipped (no --upgrade-to PATH)".into());
            }
            let evs: Vec<String> = v.events().iter().map(|e| e.name()).collect();
            ensure!(!cases.is_empty(), "--events: none of {}'s events ({}) is named", variant_name(&v), evs.join(", "));
            per.push(cases);
        }
        // The results' options say what ran.
        self.variants = per.iter().map(|c| c[0].variant).collect();
        self.events = per.iter().flatten().map(|c| c.event).collect();
        // Round robin: no two consecutive events of one variant.
        let longest = per.iter().map(Vec::len).max().unwrap_or(0);
        self.cases = (0..longest).flat_map(|i| per.iter().filter_map(move |c| c.get(i).copied())).collect();
        Ok(())
    }
}

/// The point's traffic: the sequenced stream and the TCP server; the
/// sink as the lb's backends (its decap removed after the traffic, before
/// the topology goes).
struct Traffic {
    stream: Stream,
    _server: Server,
    _backends: crate::engine::peers::PeerGuard,
}

/// Stops the point's traffic when dropped.
struct Flowing<'a>(&'a RefCell<Option<Traffic>>);

impl Drop for Flowing<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.0.borrow_mut().take() {
            t.stream.stop();
        }
    }
}

/// The topology's roles as disrupt uses them.
struct Line<'a> {
    gen: &'a Netns,
    dut: &'a Netns,
    sink: &'a Netns,
    din: String,
    dout: String,
    gen_ip: IpAddr,
    dut_in_ip: IpAddr,
    sink_ip: IpAddr,
}

impl<'a> Line<'a> {
    fn of(t: &'a BuiltTopology) -> Result<Line<'a>> {
        let r = t.roles()?;
        let ((gen, _), (dut, din), (_, dout), (sink, _)) = (t.endpoint(&r.gen)?, t.endpoint(&r.dut_in)?, t.endpoint(&r.dut_out)?, t.endpoint(&r.sink)?);
        let (gen_ip, dut_in_ip, sink_ip) = (t.addr(&r.gen, false)?, t.addr(&r.dut_in, false)?, t.addr(&r.sink, false)?);
        Ok(Line { gen, dut, sink, din, dout, gen_ip, dut_in_ip, sink_ip })
    }
}

fn param(name: &str, one: &str, many: &str) -> Param {
    let mut p = Param::plain(name, &Value::from(1u32));
    p.unit = (one.into(), many.into());
    p
}

impl Experiment for Disrupt {
    type Variant = Case;
    const NAME: &'static str = "disrupt";

    fn params(&self) -> Vec<Param> {
        vec![param("rate", "datagram/s", "datagrams/s"), param("connections", "TCP connection", "TCP connections")]
    }

    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![("rate", vec![Value::from(self.rate)]), ("connections", vec![Value::from(self.connections)])]
    }

    fn variants(&self) -> Vec<Case> {
        self.cases.clone()
    }

    fn ratios(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }

    /// Checked by [`Disrupt::resolve`], before the driver.
    fn check(&self, _: Cpus) -> Result<()> {
        Ok(())
    }

    fn plan(&self, common: Plan) -> Result<Plan> {
        ensure!(common.zero_loss.is_none(), "--zero-loss: disrupt measures no rates (xnf lab router does)");
        ensure!(common.load.count() == 0, "--load-curve / --load-rates: disrupt offers no load but its stream (--rate)");
        ensure!(common.profile.is_none(), "--profile: disrupt profiles nothing");
        Ok(Plan::default())
    }

    /// A variant set up and taken down, the event, its settling time.
    fn planned_seconds(&self, _: &Timing, _: &Plan) -> f64 {
        2.0 + self.settle_ms as f64 / 1000.0
    }

    /// The stream's and the connections' ends pass frames to their
    /// kernels (frames redirected into a veth need an XDP program on its
    /// peer), dut sits between them.
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let r = spec.roles.clone().context("disrupt needs a topology with [roles]")?;
        let split = |ep: &str| ep.split_once(':').map(|(n, d)| (n.to_string(), d.to_string())).with_context(|| format!("the role `{ep}` is no ns:dev"));
        let ((gen, gen_if), (dut, _), (out_ns, _), (sink, sink_if)) = (split(&r.gen)?, split(&r.dut_in)?, split(&r.dut_out)?, split(&r.sink)?);
        ensure!(
            out_ns == dut && r.dut_in != r.dut_out && gen != dut && sink != dut,
            "--topology: disrupt needs a dut between gen and sink (roles dut_in and dut_out: two interfaces of a namespace of their own)"
        );
        for f in &mut spec.functions {
            f.interfaces.retain(|d| !((f.ns == gen && *d == gen_if) || (f.ns == sink && *d == sink_if)));
        }
        spec.functions.retain(|f| !f.interfaces.is_empty());
        // The sink's XDP program is `xnf lb decap` (see `built`).
        spec.functions.push(FunctionSpec { ns: gen, kind: FunctionKind::Pass, interfaces: vec![gen_if] });
        Ok(())
    }

    /// Whole checksums from both ends (a veth sender's partial ones arrive
    /// bad through XDP), and dut's spare interface for the box change.
    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        let r = t.roles()?.clone();
        for ep in [&r.gen, &r.sink] {
            let (ns, dev) = t.endpoint(ep)?;
            ns.set_offload(&dev, Offload::TxChecksum, false)?;
        }
        let (dut, _) = t.endpoint(&r.dut_in)?;
        dut.ip(&["link", "add", SPARE[0], "type", "veth", "peer", "name", SPARE[1]]).context("dut's spare interface")?;
        SPARE.iter().try_for_each(|d| dut.link_up(d))
    }

    /// The stream and the TCP server, for all of the point's events.
    fn at_point<'a>(&'a self, t: &'a BuiltTopology, _: &Point, pg: &Progress) -> Result<AtPoint<'a>> {
        let l = Line::of(t)?;
        pg.message(&format!("sequenced stream gen -> sink, {} datagrams/s; TCP server in sink", self.rate));
        // Any address: the sink's own (the peers' connections) and the VIP
        // (xnf's, through the lb).
        let server = Server::start(l.sink, SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), TCP_PORT))?;
        // First: the decap is also the XDP program the sink's veth needs
        // to receive the frames dut redirects.
        let (_, sink_if) = t.endpoint(&t.roles()?.sink)?;
        let addrs = (l.sink_ip.to_string(), second_backend(l.sink_ip)?.to_string(), l.dut_in_ip.to_string());
        let backends = xnf::backends_up((l.gen, l.dut, l.sink), &sink_if, (&addrs.0, &addrs.1, &addrs.2))?;
        let stream = Stream::sequenced(l.gen, l.gen_ip, l.sink, SocketAddr::new(l.sink_ip, UDP_PORT), self.rate)?;
        *self.traffic.borrow_mut() = Some(Traffic { stream, _server: server, _backends: backends });
        Ok(AtPoint::without_traffic(Flowing(&self.traffic)))
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, _: &Point, c: Case, _: Cpus, pg: &Progress) -> Result<Box<dyn Running + 'a>> {
        let l = Line::of(t)?;
        pg.message(&format!("setting up {}", variant_name(&c.variant)));
        let on = self.attach(&l, c.variant)?;
        let every = Duration::from_millis(self.request_ms);
        // xnf's connections go to the lb's service; a peer has no lb.
        let to = match on {
            On::Xnf(_) => SocketAddr::new(xnf::FLOWS_VIP.parse()?, TCP_PORT),
            On::Peer(_) => SocketAddr::new(l.sink_ip, TCP_PORT),
        };
        let clients = Clients::open(l.gen, to, self.connections, every)?;
        let flows = match on {
            On::Xnf(_) => self.open_flows(&l)?,
            On::Peer(_) => Vec::new(),
        };
        Ok(Box::new(Set { exp: self, case: c, gen: l.gen, dut: l.dut, sink: l.sink, clients, flows, on }))
    }

    fn finish(&mut self, _: Cpus, res: &mut Results) -> Result<()> {
        let mut rows = std::mem::take(&mut *self.rows.borrow_mut());
        rows.iter_mut().for_each(EventRow::summarize);
        res.details.insert("events".into(), serde_json::to_value(&rows)?);
        // A fixed-rate stream's Mpps says nothing here: the events' rows do.
        res.summary.clear();
        res.notes.append(&mut self.notes);
        res.notes.push(format!(
            "each event measured from just before it to {} ms after it ended; the sender keeps {} datagrams/s on average (late ones sent at once)",
            self.settle_ms, self.rate
        ));
        Ok(())
    }

    fn print(&self, r: &Results) {
        results::print(&results::rows(r), self.rate);
        for n in &r.notes {
            println!("note: {n}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver::parse_options;

    fn parse(a: &[&str]) -> Result<DisruptArgs, clap::Error> {
        parse_options::<DisruptArgs>(a)
    }

    #[test]
    fn cases_interleave_the_variants_and_each_runs_its_own_events() {
        let mut a = parse(&["--variants", "xnf,kernel,nft", "--events", "daemon-kill,bad-config,route-change,ruleset-change"]).unwrap();
        assert_eq!(a.common.runs, 3, "--repeat defaults to 3");
        a.experiment.resolve().unwrap();
        let names: Vec<String> = a.experiment.cases.iter().map(Case::name).collect();
        assert_eq!(names, ["xnf/daemon-kill", "kernel/route-change", "nft/ruleset-change", "xnf/bad-config"]);
        let mut a = parse(&["--variants", "xnf", "--events", "upgrade,daemon-kill"]).unwrap();
        a.experiment.resolve().unwrap();
        assert_eq!(a.experiment.cases.len(), 1);
        assert_eq!(a.experiment.notes, ["upgrade: skipped (no --upgrade-to PATH)"]);
    }

    #[test]
    fn bad_options_are_refused_in_one_line_naming_the_flag() {
        assert!(parse(&["--repeat", "2", "--runs", "3"]).is_err(), "one count, two names");
        assert!(parse(&["--events", "explode"]).is_err());
        for (args, want) in [
            (&["--rate", "10"][..], "--rate 10"),
            (&["--connections", "0"][..], "--connections 0"),
            (&["--variants", "kernel,kernel"][..], "--variants: kernel named twice"),
            (&["--variants", "kernel", "--events", "daemon-kill"][..], "--events: daemon-kill is an event of xnf, which --variants leaves out"),
            (&["--variants", "kernel,nft", "--events", "route-change"][..], "--events: none of nft's events (ruleset-change) is named"),
            (&["--upgrade-to", "/nonexistent/xnf"][..], "--upgrade-to /nonexistent/xnf"),
            (&["--variants", "xdp-forward", "--xdp-forward", "/nonexistent/xdp-forward"][..], "xdp-forward: /nonexistent/xdp-forward not found"),
        ] {
            let e = parse(args).unwrap().experiment.resolve().unwrap_err().to_string();
            assert!(e.starts_with(want) && !e.contains('\n'), "{args:?}: {e}");
        }
    }
}
