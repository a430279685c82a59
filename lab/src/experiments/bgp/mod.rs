//! `xnf lab bgp`: a real routing daemon in the loop. BIRD 2 in a peer
//! namespace announces a table over iBGP to a BIRD on dut, which installs
//! it into dut's kernel; the lab waits (polling dut's table) until all of
//! it is there, then, while the generator's traffic flows gen -> dut ->
//! sink through the variant (kernel, `xnf router attach` as it attaches by
//! default — the route cache — or with `--fib full`), churns the table at
//! a set rate through the peer's BIRD:
//! withdrawals, re-announcements and next-hop changes, as a router sees
//! them. The rate forwarded under churn is measured by the one driver.
//!
//! Churn: part of the table is cut into groups, each announced by two
//! static protocols on the peer, a preferred one (next hop: the sink) and
//! a fallback (next hop: a second address of the sink). One group after
//! the other steps through disabling the preferred one (a next-hop change),
//! the fallback (a withdrawal), enabling the fallback (an announcement) and
//! the preferred one (a next-hop change back) — `--churn` prefix changes
//! per second in all.
//!
//! Stale frames: 16 probe prefixes (/32 or /128 outside the table) churn
//! the same way, but their preferred next hop is the peer itself, their
//! fallback gen (a hairpin back out of dut's ingress) and their withdrawal
//! leaves no route. A stamped UDP stream ([`crate::engine::stream`]) goes
//! from gen to the probes and is received in the peer; a listener on dut's
//! rtnetlink records when each probe's route left the peer. A datagram
//! that reached the peer although it was sent after its route had left it
//! followed a stale decision; sent more than `--window` after the change
//! (as the listener saw it), it counts as **stale**.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::Args;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::RouteNetlinkMessage;
use serde::Serialize;
use xnf_netns::netlink::{group, Events};
use xnf_netns::{Family, Netns, Offload};

use super::fibchange::{Variant, VariantParser};
use super::latency::pingpong::now_ns;
use crate::engine::attach::router_options;
use crate::engine::bird::{Bird, Control, TempDir};
use crate::engine::driver::{variant_name, AtPoint, Cpus, Experiment, Running, VariantName};
use crate::engine::measure::{self, Counters};
use crate::engine::params::{self, Param, Point};
use crate::engine::peers::{self, Peer, PeerGuard};
use crate::engine::progress::Progress;
use crate::engine::results::{Results, Sample};
use crate::engine::routes::{Routes, Table};
use crate::engine::stream::{Stamp, Stream};
use crate::engine::topology::{BuiltTopology, FunctionKind, FunctionSpec, LinkSpec, NamespaceSpec, NeighbourSpec, RouteSpec, TopologySpec};
use crate::engine::{LabAttachment, NfGuard};

/// `rtm_protocol` of routes BIRD installs (RTPROT_BIRD).
const RTPROT_BIRD: u8 = 12;
/// Probe prefixes: addresses in 198.18.8.0/24 (2001:db8:8::/64), local in the peer.
const PROBES: u16 = 16;
const PROBE_PORT: u16 = 9999;
/// Prefixes per churn group: one BIRD command changes this many.
const GROUP: usize = 100;

impl VariantName for Variant {
    fn name(&self) -> String {
        variant_name(self)
    }
}

/// `xnf lab bgp`.
#[derive(Args, Clone, Debug, Serialize)]
pub struct Bgp {
    /// The table BIRD announces: N synthetic prefixes, or a table dump
    /// (one prefix per line or MRT, as for `xnf lab router --routes`).
    #[arg(long, default_value = "100000", value_parser = Routes::parse, value_name = "N|FILE")]
    pub routes: Routes,
    /// Prefix changes per second while traffic flows (withdrawals,
    /// announcements, next-hop changes), e.g. 1000/s; 0: none.
    #[arg(long, default_value = "1000/s", value_parser = parse_rate, value_name = "N[/s]")]
    pub churn: u32,
    /// Prefixes of the table that churn (in groups of 100).
    #[arg(long, default_value_t = 10_000)]
    pub churn_prefixes: usize,
    /// Variants, alternated run by run.
    #[arg(long, value_parser = VariantParser, value_delimiter = ',', default_value = "kernel,xnf,xnf-full")]
    pub variants: Vec<Variant>,
    /// xdp-forward's binary (default: where scripts/peers.sh builds it).
    #[arg(long, value_name = "PATH")]
    pub xdp_forward: Option<std::path::PathBuf>,
    /// Frame size on the wire, FCS included [default: 64; with --ipv6, 66,
    /// the smallest IPv6 UDP frame].
    #[arg(long)]
    pub size: Option<u32>,
    /// Flows, spread over destinations in distinct prefixes of the table.
    #[arg(long, default_value_t = 100)]
    pub flows: u32,
    /// IPv6 instead of IPv4 (table, BGP session, traffic).
    #[arg(long)]
    pub ipv6: bool,
    /// Milliseconds after a probe's route change (as dut's rtnetlink
    /// reported it) within which a datagram may still follow the old route.
    #[arg(long, default_value_t = 10.0)]
    pub window_ms: f64,
    /// Stamped datagrams per second to the probe prefixes (at most).
    #[arg(long, default_value_t = 20_000)]
    pub probe_rate: u32,
    #[arg(skip)]
    #[serde(skip)]
    state: Arc<Mutex<Option<PointState>>>,
    #[arg(skip)]
    #[serde(skip)]
    stale: Arc<Mutex<Vec<StaleResult>>>,
}

/// `1000/s` or `1000`.
mod bird;
use bird::{dut_config, peer_config};

fn parse_rate(s: &str) -> Result<u32, String> {
    s.trim().trim_end_matches("/s").trim().parse::<u32>().map_err(|e| format!("`{s}`: {e} (prefix changes per second, e.g. 1000/s)"))
}

/// The addresses of the scenario: dut's and the peer's on their link, the
/// next hops, the probes.
#[derive(Clone, Debug)]
struct Plan {
    ipv6: bool,
    dut: IpAddr,
    peer: IpAddr,
    sink: IpAddr,
    sink2: IpAddr,
    gen: IpAddr,
    probes: Vec<IpAddr>,
}

impl Plan {
    fn new(ipv6: bool) -> Plan {
        let v4 = |c: u8, d: u8| IpAddr::V4(Ipv4Addr::new(198, 18, c, d));
        let v6 = |c: u16, d: u16| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, c, 0, 0, 0, 0, d));
        let a = |c: u8, d: u8| if ipv6 { v6(c.into(), d.into()) } else { v4(c, d) };
        Plan { ipv6, dut: a(2, 1), peer: a(2, 2), sink: a(1, 2), sink2: a(1, 3), gen: a(0, 1), probes: (1..=PROBES).map(|i| a(8, i as u8)).collect() }
    }

    fn host(&self) -> u8 {
        if self.ipv6 {
            128
        } else {
            32
        }
    }

    fn af(&self) -> &'static str {
        if self.ipv6 {
            "ipv6"
        } else {
            "ipv4"
        }
    }
}

/// What a point set up and its variants' runs use.
#[derive(Debug)]
struct PointState {
    plan: Plan,
    ctl: std::path::PathBuf,
    groups: usize,
    group_len: usize,
    /// Routes BIRD installs in dut: the table and the probes.
    total: usize,
}

/// One run's stale count.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StaleResult {
    pub variant: String,
    /// Probe route changes away from the peer seen on dut.
    pub changes: u64,
    /// Datagrams the peer received.
    pub received: u64,
    /// Of those, sent after their route had left the peer.
    pub late: u64,
    /// Of those, sent more than the window after the change.
    pub stale: u64,
    /// The latest such send time after its change, µs.
    pub max_late_us: f64,
    /// Prefix changes per second the churn achieved.
    pub churn_per_s: f64,
    /// Events lost by the listener (its socket overflowed).
    pub overflows: u64,
}

impl Bgp {
    /// `--size`, or the smallest UDP frame of the family.
    fn size(&self) -> u32 {
        self.size.unwrap_or(if self.ipv6 { 66 } else { 64 })
    }
}

impl Experiment for Bgp {
    type Variant = Variant;
    const NAME: &'static str = "bgp";

    fn params(&self) -> Vec<Param> {
        vec![params::size(), params::flows(), params::ipv6(), params::routes()]
    }

    fn sweep(&self) -> Vec<(&'static str, Vec<params::Value>)> {
        vec![
            ("size", params::values(&[self.size()])),
            ("flows", params::values(&[self.flows])),
            ("ipv6", params::values(&[self.ipv6])),
            ("routes", params::values(std::slice::from_ref(&self.routes))),
        ]
    }

    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn ratios(&self) -> Vec<(&str, &str)> {
        let has = |n: &str| self.variants.iter().any(|v| variant_name(v) == n);
        [("xnf", "kernel"), ("xnf-full", "kernel"), ("xnf", "xnf-full"), ("xnf", "xdp-forward")].into_iter().filter(|(a, b)| has(a) && has(b)).collect()
    }

    fn check(&self, _: Cpus) -> Result<()> {
        ensure!(self.routes != Routes::Count(0), "--routes 0: BIRD needs a table to announce");
        if self.variants.contains(&Variant::XdpForward) {
            peers::xdp_forward_binary(self.xdp_forward.as_deref())?;
        }
        self.routes.check(2_000_000)?;
        measure::check_sizes(&[self.size()], self.ipv6)?;
        ensure!((1..=65536).contains(&self.flows), "--flows {}: 1 to 65536", self.flows);
        ensure!(self.churn <= 1_000_000, "--churn {}/s: at most 1000000/s", self.churn);
        ensure!(self.churn_prefixes >= 1, "--churn-prefixes {}: at least 1", self.churn_prefixes);
        ensure!(self.window_ms > 0.0, "--window-ms {}: must be positive", self.window_ms);
        ensure!((1000..=1_000_000).contains(&self.probe_rate), "--probe-rate {}: 1000 to 1000000 datagrams/s", self.probe_rate);
        crate::engine::bird::require()?;
        Ok(())
    }

    /// The peer: a namespace on a third link of dut, running BIRD and
    /// receiving the probes; dut knows the sink's second address.
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let roles = spec.roles.clone().context("bgp needs a topology with [roles]")?;
        let dut = roles.dut_in.split(':').next().unwrap_or("dut").to_string();
        ensure!(!spec.namespaces.iter().any(|n| n.name == "peer"), "the topology has a namespace `peer` already: bgp adds its own");
        spec.namespaces.push(NamespaceSpec { name: "peer".into(), forwarding: false, sysctl: Default::default() });
        spec.links.push(LinkSpec {
            a: format!("{dut}:peer"),
            b: "peer:peer".into(),
            queues: None,
            mtu: None,
            a_addr: vec!["198.18.2.1/24".into(), "2001:db8:2::1/64".into()],
            b_addr: vec!["198.18.2.2/24".into(), "2001:db8:2::2/64".into()],
            a_existing: None,
            b_existing: None,
        });
        for (to, via) in [("198.18.0.0/15", "198.18.2.1"), ("2001:db8::/32", "2001:db8:2::1")] {
            spec.routes.push(RouteSpec { ns: "peer".into(), to: to.into(), via: Some(via.into()), dev: None, count: None });
        }
        let (_, out) = roles.dut_out.split_once(':').context("roles.dut_out")?;
        for ip in ["198.18.1.3", "2001:db8:1::3"] {
            spec.neighbours.push(NeighbourSpec { ns: dut.clone(), ip: ip.into(), dev: out.into(), mac: roles.sink.clone() });
        }
        // Frames redirected into a veth need an XDP program on its peer.
        spec.functions.push(FunctionSpec { ns: "peer".into(), kind: FunctionKind::Pass, interfaces: vec!["peer".into()] });
        Ok(())
    }

    /// The probes are local in the peer; gen's datagrams carry their
    /// checksums (a veth sender's partial ones would arrive bad).
    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        let peer = t.ns("peer")?;
        peer.ip(&["link", "set", "lo", "up"])?;
        peer.ip(&["route", "add", "local", "198.18.8.0/24", "dev", "lo"])?;
        peer.ip(&["-6", "route", "add", "local", "2001:db8:8::/64", "dev", "lo"])?;
        let (gen, gen_if) = t.endpoint(&t.roles()?.gen.clone())?;
        gen.set_offload(&gen_if, Offload::TxChecksum, false)?;
        Ok(())
    }

    fn at_point<'a>(&'a self, t: &'a BuiltTopology, p: &Point, pg: &Progress) -> Result<AtPoint<'a>> {
        let plan = Plan::new(self.ipv6);
        let table = Table::load(&self.routes, self.ipv6)?.context("no table")?;
        let dir = TempDir::new("bird")?;
        let prefixes = table.set.prefixes();
        let churned = self.churn_prefixes.min(prefixes.len());
        let group_len = GROUP.min(churned);
        let groups = churned / group_len;
        // Every k-th prefix churns: the groups spread over the table.
        let step = prefixes.len() / (groups * group_len);
        let (mut fixed, mut grouped) = (Vec::new(), vec![Vec::new(); groups]);
        for (i, net) in prefixes.iter().enumerate() {
            match (i % step == 0).then_some(i / step).filter(|k| *k < groups * group_len) {
                Some(k) => grouped[k / group_len].push(*net),
                None => fixed.push(*net),
            }
        }
        std::fs::write(dir.path().join("table.conf"), fixed.iter().map(|n| format!("route {n} blackhole;\n")).collect::<String>())?;
        let peer_conf = peer_config(&plan, dir.path(), &grouped);
        let dut_conf = dut_config(&plan, dir.path());
        let total = prefixes.len() + plan.probes.len();
        pg.message(&format!("starting BIRD in peer and dut: {}", table.about));
        let t0 = Instant::now();
        let mut peer = Bird::start(t.ns("peer")?, dir.path(), "peer", &peer_conf)?;
        let (dut, _) = t.endpoint(&t.roles()?.dut_in)?;
        let mut dutd = Bird::start(dut, dir.path(), "dut", &dut_conf)?;
        let family = if self.ipv6 { Family::V6 } else { Family::V4 };
        // Poll dut's table: traffic starts only once BIRD has installed all of it.
        let limit = Duration::from_secs(60 + total as u64 / 2000);
        loop {
            let n = dut.route_count(family, Some(RTPROT_BIRD))?;
            if n >= total {
                break;
            }
            peer.alive()?;
            dutd.alive()?;
            ensure!(
                t0.elapsed() < limit,
                "BIRD installed {n} of {total} routes in dut in {} s (see {})",
                limit.as_secs(),
                Bird::log_path(dir.path(), "dut").display()
            );
            pg.message(&format!("BIRD: {n} of {total} routes in dut's kernel ({:.0} s)", t0.elapsed().as_secs_f64()));
            std::thread::sleep(Duration::from_millis(200));
        }
        let secs = t0.elapsed().as_secs_f64();
        pg.println(&format!("BIRD installed {total} routes ({}, + {} probes) in dut's kernel in {secs:.1} s", table.about, plan.probes.len()));
        let dsts = crate::engine::routes::targets(&table.set, self.flows as usize)?;
        let traffic = super::router::template(t, p, &dsts)?;
        let notes = vec![
            format!(
                "routes: {} + {} probe prefixes, announced by BIRD over iBGP and installed in dut's kernel by BIRD in {secs:.1} s",
                table.about,
                plan.probes.len()
            ),
            format!("the flows go to {} destinations in distinct prefixes of the table", super::router::spread(self.flows, dsts.len())),
            format!("churn: {} prefixes in {groups} groups of {group_len}, {}/s prefix changes while measuring", groups * group_len, self.churn),
        ];
        *self.state.lock().unwrap() = Some(PointState { plan, ctl: dir.path().join("peer.ctl"), groups, group_len, total });
        Ok(AtPoint { traffic: Some(traffic), guard: Box::new((dutd, peer, dir)), notes })
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, _: &Point, v: Variant, _: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let (_, dout) = t.endpoint(&roles.dut_out)?;
        let (_, dpeer) = t.endpoint(&format!("{}:peer", roles.dut_in.split(':').next().unwrap_or("dut")))?;
        let guard = match v {
            Variant::Kernel => Setup::Pass(LabAttachment::pass(dut, &din)?),
            Variant::Xnf | Variant::XnfFull => {
                let fib = v.fib().expect("a router variant");
                Setup::Router(NfGuard::router(dut, &[din.clone(), dout.clone(), dpeer], router_options(fib))?)
            }
            Variant::XdpForward => {
                // On the peer's link too: the probes leave by it.
                let bin = peers::xdp_forward_binary(self.xdp_forward.as_deref())?;
                let peer = Peer::built_in_on("xdp-forward", &bin, &[&dpeer]).expect("a built-in peer");
                Setup::Peer(PeerGuard::attach(&peer, dut, &din, &dout)?)
            }
        };
        let state = self.state.lock().unwrap();
        let st = state.as_ref().context("no point set up")?;
        let listener = Listener::start(dut, &st.plan)?;
        let (gen, _) = t.endpoint(&roles.gen)?;
        let any: IpAddr = if self.ipv6 { Ipv6Addr::UNSPECIFIED.into() } else { Ipv4Addr::UNSPECIFIED.into() };
        let dsts = st.plan.probes.iter().map(|a| SocketAddr::new(*a, PROBE_PORT)).collect();
        let stream = Stream::start(gen, st.plan.gen, t.ns("peer")?, SocketAddr::new(any, PROBE_PORT), dsts, self.probe_rate)?;
        stream.wait_delivered(PROBES as usize * 4).context("the probes do not reach the peer through dut")?;
        let churn = Churn::start(Control::connect(&st.ctl)?, st.groups, st.group_len, self.churn)?;
        Ok(Box::new(Set {
            guard,
            dut,
            din,
            dout,
            sink: t.attachment(&roles.sink)?,
            listener,
            stream,
            churn,
            total: st.total,
            family: if self.ipv6 { Family::V6 } else { Family::V4 },
            window_ns: (self.window_ms * 1e6) as u64,
            name: variant_name(&v),
            out: self.stale.clone(),
            ctl: st.ctl.clone(),
        }))
    }

    fn finish(&mut self, _: Cpus, res: &mut Results) -> Result<()> {
        let stale = self.stale.lock().unwrap();
        for r in stale.iter() {
            res.notes.push(format!(
                "{}: {} probe route changes, {} of {} stamped datagrams followed a route that had left the peer (latest {:.0} µs after the change), {} stale (more than {} ms after it); churn {:.0}/s{}",
                r.variant, r.changes, r.late, r.received, r.max_late_us, r.stale, self.window_ms, r.churn_per_s,
                if r.overflows > 0 { format!("; the listener lost events {} times", r.overflows) } else { String::new() }
            ));
        }
        res.details.insert("stale".into(), serde_json::to_value(&*stale)?);
        res.details.insert("window_ms".into(), self.window_ms.into());
        Ok(())
    }

    fn print(&self, _: &Results) {
        let stale = self.stale.lock().unwrap();
        println!("\nstale decisions (probe prefixes churned away from the peer; window {} ms after dut's rtnetlink notification):", self.window_ms);
        println!("{:<10} {:>8} {:>10} {:>8} {:>12} {:>8} {:>10}", "variant", "changes", "received", "late", "max late µs", "stale", "churn/s");
        for r in stale.iter() {
            println!("{:<10} {:>8} {:>10} {:>8} {:>12.0} {:>8} {:>10.0}", r.variant, r.changes, r.received, r.late, r.max_late_us, r.stale, r.churn_per_s);
        }
    }
}

/// Changes to the probes' routes as dut's rtnetlink reports them:
/// (time read, probe index, whether the route now leads to the peer).
type Change = (u64, u16, bool);

/// A thread in dut reading route notifications for the probes.
struct Listener {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Vec<Change>, u64)>,
}

impl Listener {
    fn start(dut: &Netns, plan: &Plan) -> Result<Listener> {
        let g = if plan.ipv6 { group::IPV6_ROUTE } else { group::IPV4_ROUTE };
        let mut events = dut.run(move || Events::subscribe(&[g]))??;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let plan = plan.clone();
        let thread = std::thread::spawn(move || {
            let (mut changes, mut overflows) = (Vec::new(), 0);
            // Each datagram stamped as it is read (not after the whole
            // burst): the change is no later than that.
            let mut next = || -> Result<Option<(u64, xnf_netns::netlink::Batch)>> {
                while !s2.load(Ordering::Relaxed) {
                    if let Some(b) = events.recv()? {
                        return Ok(Some((now_ns(), b)));
                    }
                    events.wait(Duration::from_millis(50))?;
                }
                Ok(None)
            };
            while let Ok(Some((t, batch))) = next() {
                overflows += u64::from(batch.overflowed);
                for m in &batch.messages {
                    let (msg, added) = match m {
                        RouteNetlinkMessage::NewRoute(r) => (r, true),
                        RouteNetlinkMessage::DelRoute(r) => (r, false),
                        _ => continue,
                    };
                    if let Some((i, gw)) = probe_route(&plan, msg) {
                        changes.push((t, i, added && gw == Some(plan.peer)));
                    }
                }
            }
            (changes, overflows)
        });
        Ok(Listener { stop, thread })
    }

    fn stop(self) -> (Vec<Change>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// The probe a route message is about, and its gateway.
fn probe_route(plan: &Plan, m: &RouteMessage) -> Option<(u16, Option<IpAddr>)> {
    if m.header.destination_prefix_length != plan.host() {
        return None;
    }
    let (mut dst, mut gw) = (None, None);
    for a in &m.attributes {
        let ip = |r: &RouteAddress| match r {
            RouteAddress::Inet(a) => Some(IpAddr::V4(*a)),
            RouteAddress::Inet6(a) => Some(IpAddr::V6(*a)),
            _ => None,
        };
        match a {
            RouteAttribute::Destination(r) => dst = ip(r),
            RouteAttribute::Gateway(r) => gw = ip(r),
            _ => {}
        }
    }
    let i = plan.probes.iter().position(|p| Some(*p) == dst)?;
    Some((i as u16, gw))
}

/// Classifies received datagrams against the probes' changes: (late,
/// stale, latest lateness in ns). A datagram is late when the last change
/// of its probe before its send time took the route away from the peer,
/// stale when that change is more than `window` ns older than it.
///
/// A change is stamped when the listener reads it, up to a scheduling
/// delay after the kernel made it: a datagram sent less than `window`
/// before the stamp of a change that brought the route back to the peer
/// may have followed the new route, and is not counted (CI once saw the
/// kernel itself "late" by three datagrams sent in the millisecond before
/// such a stamp, on a machine busy with other tests).
pub fn classify(changes: &[Change], received: &[Stamp], window: u64) -> (u64, u64, u64) {
    let (mut late, mut stale, mut max) = (0, 0, 0);
    for &(sent, i) in received {
        let of_probe = || changes.iter().filter(move |c| c.1 == i);
        let last = of_probe().filter(|c| c.0 <= sent).max_by_key(|c| c.0);
        let next = of_probe().filter(|c| c.0 > sent).min_by_key(|c| c.0);
        if matches!(next, Some(&(back, _, true)) if back - sent <= window) {
            continue;
        }
        if let Some(&(at, _, false)) = last {
            late += 1;
            max = max.max(sent - at);
            stale += u64::from(sent - at > window);
        }
    }
    (late, stale, max)
}

/// The churn: a thread stepping through the groups' and probes' protocols
/// over the peer's control socket.
struct Churn {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<(u64, f64, Control)>>,
}

impl Churn {
    fn start(mut ctl: Control, groups: usize, group_len: usize, rate: u32) -> Result<Churn> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || -> Result<(u64, f64, Control)> {
            let t0 = Instant::now();
            let (mut changed, mut k) = (0u64, 0usize);
            // One group command and one probe command per tick: `rate`
            // prefix changes per second.
            let tick = if rate == 0 { None } else { Some(Duration::from_secs_f64(group_len as f64 / f64::from(rate))) };
            while !s.load(Ordering::Relaxed) {
                let Some(tick) = tick else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                // Each group in turn, each turn one step: preferred off
                // (next hop changes), fallback off (withdrawn), fallback on
                // (announced), preferred on (next hop back).
                let step = |name: String, phase: usize| match phase {
                    0 => format!("disable {name}p"),
                    1 => format!("disable {name}a"),
                    2 => format!("enable {name}a"),
                    _ => format!("enable {name}p"),
                };
                ctl.send(&step(format!("g{}_", k % groups), (k / groups) % 4))?;
                ctl.send(&step(format!("p{}_", k % PROBES as usize), (k / PROBES as usize) % 4))?;
                changed += group_len as u64;
                k += 1;
                let due = t0 + tick * k as u32;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            Ok((changed, t0.elapsed().as_secs_f64(), ctl))
        });
        Ok(Churn { stop, thread })
    }

    /// Stops it; every protocol enabled again. Prefix changes per second.
    fn stop(self) -> Result<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let (changed, secs, mut ctl) = self.thread.join().map_err(|_| anyhow::anyhow!("the churn thread panicked"))??;
        ctl.send("enable all")?;
        Ok(changed as f64 / secs.max(1e-9))
    }
}

enum Setup {
    Pass(#[allow(dead_code)] LabAttachment),
    Router(#[allow(dead_code)] NfGuard),
    Peer(#[allow(dead_code)] PeerGuard),
}

struct Set<'a> {
    guard: Setup,
    dut: &'a Netns,
    din: String,
    dout: String,
    sink: &'a LabAttachment,
    listener: Listener,
    stream: Stream,
    churn: Churn,
    total: usize,
    family: Family,
    window_ns: u64,
    name: String,
    out: Arc<Mutex<Vec<StaleResult>>>,
    ctl: std::path::PathBuf,
}

impl Running for Set<'_> {
    fn counters(&self) -> Result<Counters<'_>> {
        let received: measure::Received = Box::new(|| self.sink.packets());
        Ok(Counters {
            dut_in: (self.dut, self.din.clone()),
            dut_out: Some((self.dut, self.dout.clone())),
            received,
            on_read: None,
            during: None,
            corunner: None,
        })
    }

    /// Churn stopped, the stream read and classified; then the table is
    /// whole again (every route back, the probes at the peer) before the
    /// next variant starts.
    fn finish(self: Box<Self>, _: &[Sample]) -> Result<()> {
        let s = *self;
        let churn_per_s = s.churn.stop()?;
        let received = s.stream.take();
        s.stream.stop();
        let t0 = Instant::now();
        while s.dut.route_count(s.family, Some(RTPROT_BIRD))? < s.total {
            ensure!(
                t0.elapsed() < Duration::from_secs(60),
                "the table did not come back whole in dut within 60 s after the churn (see BIRD's logs next to {})",
                s.ctl.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let (changes, overflows) = s.listener.stop();
        let (late, stale, max) = classify(&changes, &received, s.window_ns);
        let r = StaleResult {
            variant: s.name,
            changes: changes.iter().filter(|c| !c.2).count() as u64,
            received: received.len() as u64,
            late,
            stale,
            max_late_us: max as f64 / 1000.0,
            churn_per_s,
            overflows,
        };
        s.out.lock().unwrap().push(r);
        drop(s.guard);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver;

    #[test]
    fn late_and_stale_datagrams_are_told_apart() {
        // Probe 0 leaves the peer at 1000 and is back at 5000; probe 1 never moves.
        let changes = [(1000, 0, false), (5000, 0, true)];
        let received = [(900, 0), (1500, 0), (2500, 0), (6000, 0), (2000, 1)];
        assert_eq!(classify(&changes, &received, 1000), (2, 1, 1500));
        assert_eq!(classify(&changes, &received, 2000), (2, 0, 1500));
        assert_eq!(classify(&[], &received, 1), (0, 0, 0));
        // Sent 5 before the stamp of the change back: within a window of
        // 10 it may have followed the new route; within 1 it is late.
        assert_eq!(classify(&changes, &[(4995, 0)], 10), (0, 0, 0));
        assert_eq!(classify(&changes, &[(4995, 0)], 1), (1, 1, 3995));
    }

    #[test]
    fn options_parse_and_bad_ones_are_refused() {
        let o: Bgp = driver::parse_options(&["--churn", "500/s", "--routes", "1000"]).unwrap();
        assert_eq!((o.churn, o.routes.clone()), (500, Routes::Count(1000)));
        assert!(driver::parse_options::<Bgp>(&["--churn", "fast"]).is_err());
        // The frame size follows the family unless given.
        let size = |args: &[&str]| driver::parse_options::<Bgp>(args).unwrap().size();
        assert_eq!((size(&[]), size(&["--ipv6"]), size(&["--ipv6", "--size", "128"])), (64, 66, 128));
        let cpus = Cpus { gen: 0, count: 2 };
        for (args, want) in [
            (&["--routes", "0"][..], "--routes 0"),
            (&["--flows", "0"][..], "--flows 0"),
            (&["--probe-rate", "5"][..], "--probe-rate 5"),
            (&["--ipv6", "--size", "64"][..], "IPv6 UDP needs at least 66"),
        ] {
            let e = format!("{:#}", driver::parse_options::<Bgp>(args).unwrap().check(cpus).unwrap_err());
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn the_peer_announces_groups_and_probes_with_their_next_hops() {
        let plan = Plan::new(false);
        let groups = vec![vec!["203.0.113.0/24".parse().unwrap()]];
        let c = peer_config(&plan, std::path::Path::new("/tmp/x"), &groups);
        assert!(c.contains("protocol static g0_p { ipv4 { preference 200; }; route 203.0.113.0/24 blackhole; }"), "{c}");
        assert!(c.contains("protocol static p15_a { ipv4 { preference 100; }; route 198.18.8.16/32 blackhole; }"), "{c}");
        assert!(c.contains("bgp_next_hop = 198.18.0.1") && c.contains("bgp_next_hop = 198.18.1.3"), "{c}");
        assert!(dut_config(&Plan::new(true), std::path::Path::new("/tmp/x")).contains("neighbor 2001:db8:2::2 as 64512"));
    }
}
