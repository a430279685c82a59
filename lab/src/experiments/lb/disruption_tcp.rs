//! The disruption part with real TCP connections (`--tcp-connections`, issue 40): beside the test runs
//! ([`super::disruption`]), F connections opened from gen to the VIP through `xnf lb` attached in dut, one backend
//! removed with the lb's apply, and each connection asked again: does it still reach its backend?
//!
//! - The service is the test runs' (the same two files, so the same tables and the same plan): backend I is
//!   198.19.128.I. Each is a namespace (`beI`, at most 64) on its own veth pair from dut (`dut:bkI` ↔ `beI:be`,
//!   198.18.(10+I).0/24), with the backend's address and the VIP on its loopback, `xnf lb decap` on its interface
//!   stripping the IP-in-IP header (this kernel has no ipip module; decap is also the XDP program a veth needs to
//!   receive redirected frames), reverse-path filtering off, and a server on VIP:80 that answers each request byte
//!   with the byte and its backend's index. While the connections run, dut routes each backend's address to its
//!   link (host routes, more specific than the test runs' route of the backends' prefix to the sink).
//! - dut: `xnf lb` on its ingress and every backend port (the ports it redirects to), the first file applied.
//!   Replies leave each backend from the VIP straight back to the client through dut's kernel routing (direct
//!   server return): on dut's backend ports they meet the lb, which passes them (no service's VIP), and dut
//!   forwards them to gen (counted: `replies_forwarded`).
//! - Per variant, from a freshly attached lb: F connections from gen (one after the other), a first exchange
//!   telling which backend holds each; the second file (one backend removed) applied in dut as `xnf lb apply`
//!   would; for `without-table` the lb's connection table then emptied — every connection's next segment meets
//!   the Maglev table afresh, as with a restarted balancer or another instance behind ECMP, the test runs' SYN;
//!   then a second exchange on every connection. It *survives* if its answer comes from the same backend; it is
//!   broken on a RST (its segment reached a backend without its socket) or without an answer within 5 s.
//!
//! The removed backend's connections must all break; the others that break are the collateral. Both sides count:
//! the client each connection's fate, the backends the connections they accepted, the requests they answered and
//! the RSTs they sent (`Tcp OutRsts`), decap the packets it stripped after the change. Each run's connections
//! differ (their source ports are the kernel's), so the variants' outcomes are summed over the runs.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::MapCore;
use serde::{Deserialize, Serialize};
use xnf_core::xdp::XdpMode;
use xnf_lb::decap::DecapCounter;
use xnf_lb::flow::Flow;
use xnf_lb::program::Counter;
use xnf_netns::{Netns, Offload};

use super::conns::{make_room_for_files, Clients, Fate, Server};
use super::disruption::{backend, Model, Step, PORT};
use super::setup::{self, Family, LbGuard, VIP};
use crate::engine::driver::variant_name;
use crate::engine::progress::Progress;
use crate::engine::topology::{ifname, BuiltTopology, LinkSpec, NamespaceSpec, NeighbourSpec, RouteSpec, TopologySpec};

/// Most backends with real connections: a namespace and a veth pair each.
pub const MAX_BACKENDS: u32 = setup::MAX_BACKENDS;
/// Most connections: each takes two descriptors of this process (its client and its server end).
pub const MAX_CONNECTIONS: u32 = 10_000;
/// Every connection must have its first answer within this.
const FIRST_WITHIN: Duration = Duration::from_secs(10);
/// After the change, a connection without an answer (nor a RST) within this timed out: a lost segment would have
/// been sent again by then.
const AFTER_WITHIN: Duration = Duration::from_secs(5);

/// What the second exchange did to the connections (summed over runs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TcpOutcome {
    pub connections: u64,
    /// Connections the removed backend held, and how many of them broke (all must).
    pub removed_connections: u64,
    pub removed_broken: u64,
    /// Connections the other backends held, and how many of them broke anyway: the collateral.
    pub kept_connections: u64,
    pub collateral: u64,
    /// Fates on the client: answered by the same backend, reset, no answer in time, answered by another backend
    /// (cannot happen over TCP), anything else (EOF, another error).
    pub survived: u64,
    pub reset: u64,
    pub timed_out: u64,
    pub wrong_backend: u64,
    pub failed: u64,
    /// Connections per backend (the file's order) as the clients' first answers tell.
    pub per_backend: Vec<u64>,
    /// The backends' own counts: connections accepted, requests answered before and after the change.
    pub accepted: Vec<u64>,
    pub answered_before: Vec<u64>,
    pub answered_after: Vec<u64>,
    /// Packets each backend's decap stripped during the second exchange (the removed one's must be 0).
    pub decapsulated_after: Vec<u64>,
    /// RSTs the backends sent during the second exchange (`Tcp OutRsts`).
    pub backend_rsts: u64,
    /// Connections whose first backend is the one the control plane's model gives, and whose fate it predicted
    /// (broken if removed with the table; without it, broken if the new table gives another backend).
    pub model_before: u64,
    pub model_agrees: u64,
    /// Connection-table entries emptied after the change (`without-table`).
    pub flushed: u64,
    /// The lb's connection-table counters during the second exchange.
    pub ct_hit: u64,
    pub ct_miss: u64,
    pub ct_syn: u64,
    pub ct_stale: u64,
    /// Over the whole variant: the lb's redirects to backends, service packets it left to dut's kernel (must be 0),
    /// and what dut's kernel forwarded (the replies: SYN-ACKs, answers, ACKs, RSTs).
    pub lb_redirected: u64,
    pub lb_to_kernel: u64,
    pub replies_forwarded: u64,
    /// TCP segments gen and the backends sent again over the variant (`Tcp RetransSegs`): a segment lost on the way.
    pub retransmitted: u64,
}

impl TcpOutcome {
    pub fn broken(&self) -> u64 {
        self.connections - self.survived
    }

    pub fn broken_share(&self) -> f64 {
        self.broken() as f64 / self.connections.max(1) as f64
    }

    /// Collateral over the connections whose backend stays (as the test runs' figure).
    pub fn collateral_share(&self) -> f64 {
        self.collateral as f64 / self.kept_connections.max(1) as f64
    }

    /// Adds another run's outcome (per-backend counts element by element).
    fn add(&mut self, o: &TcpOutcome) {
        let sum = |a: &mut Vec<u64>, b: &Vec<u64>| {
            a.resize(a.len().max(b.len()), 0);
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        };
        for (a, b) in [
            (&mut self.per_backend, &o.per_backend),
            (&mut self.accepted, &o.accepted),
            (&mut self.answered_before, &o.answered_before),
            (&mut self.answered_after, &o.answered_after),
            (&mut self.decapsulated_after, &o.decapsulated_after),
        ] {
            sum(a, b);
        }
        for (a, b) in [
            (&mut self.connections, o.connections),
            (&mut self.removed_connections, o.removed_connections),
            (&mut self.removed_broken, o.removed_broken),
            (&mut self.kept_connections, o.kept_connections),
            (&mut self.collateral, o.collateral),
            (&mut self.survived, o.survived),
            (&mut self.reset, o.reset),
            (&mut self.timed_out, o.timed_out),
            (&mut self.wrong_backend, o.wrong_backend),
            (&mut self.failed, o.failed),
            (&mut self.backend_rsts, o.backend_rsts),
            (&mut self.model_before, o.model_before),
            (&mut self.model_agrees, o.model_agrees),
            (&mut self.flushed, o.flushed),
            (&mut self.ct_hit, o.ct_hit),
            (&mut self.ct_miss, o.ct_miss),
            (&mut self.ct_syn, o.ct_syn),
            (&mut self.ct_stale, o.ct_stale),
            (&mut self.lb_redirected, o.lb_redirected),
            (&mut self.lb_to_kernel, o.lb_to_kernel),
            (&mut self.replies_forwarded, o.replies_forwarded),
            (&mut self.retransmitted, o.retransmitted),
        ] {
            *a += b;
        }
    }
}

/// The real connections' result (the results' `details.disruption.tcp`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TcpDisruption {
    /// Connections per variant and run.
    pub connections: u32,
    pub backends: u32,
    pub removed: IpAddr,
    /// Runs summed in each variant's outcome.
    pub runs: u32,
    pub with_table: TcpOutcome,
    pub without_table: TcpOutcome,
}

/// Backend `i`'s namespace, as the topology names it.
fn backend_ns(i: u32) -> String {
    format!("be{i}")
}

/// The test runs' service as the connections use it: the two files, every backend in the file's order, the one
/// removed (its index), each file's model.
pub struct Service<'a> {
    pub files: &'a [String; 2],
    pub all: &'a [IpAddr],
    pub removed_at: usize,
    pub models: &'a [Model; 2],
}

/// The real connections as the disruption part runs them.
pub struct TcpPart {
    connections: u32,
    backends: u32,
    kept: RefCell<Vec<(Step, TcpOutcome)>>,
}

impl TcpPart {
    /// None with `--tcp-connections 0`; the options were checked by `DisruptionArgs::check`.
    pub fn new(connections: u32, backends: u32) -> Result<Option<TcpPart>> {
        if connections == 0 {
            return Ok(None);
        }
        make_room_for_files(2 * u64::from(connections) + 256, connections)?;
        Ok(Some(TcpPart { connections, backends, kept: RefCell::new(Vec::new()) }))
    }

    /// A namespace per backend on its own link from dut (addresses, dut's permanent neighbour entry, the route
    /// back), reverse-path filtering off in dut and the backends.
    pub fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let roles = spec.roles.clone().context("the topology needs a [roles] table")?;
        let dut = roles.dut_in.split(':').next().unwrap_or_default().to_string();
        let no_rpf: std::collections::BTreeMap<String, String> =
            ["all", "default"].iter().map(|c| (format!("net.ipv4.conf.{c}.rp_filter"), "0".to_string())).collect();
        let ns = spec.namespaces.iter_mut().find(|n| n.name == dut).with_context(|| format!("the topology has no namespace {dut} for its dut_in role"))?;
        ns.forwarding = true;
        ns.sysctl.extend(no_rpf.clone());
        for i in 1..=self.backends {
            let be = backend_ns(i);
            spec.namespaces.push(NamespaceSpec { name: be.clone(), forwarding: false, sysctl: no_rpf.clone() });
            spec.links.push(LinkSpec {
                a: format!("{dut}:bk{i}"),
                b: format!("{be}:be"),
                queues: None,
                mtu: Some(1600),
                a_addr: vec![Family::Ipv4.gateway_cidr(i)],
                b_addr: vec![format!("{}/24", setup::backend(i))],
                a_existing: None,
                b_existing: None,
            });
            spec.neighbours.push(NeighbourSpec { ns: dut.clone(), ip: setup::backend(i).to_string(), dev: format!("bk{i}"), mac: format!("{be}:be") });
            let via = Some(setup::backend_gateway(i).to_string());
            spec.routes.push(RouteSpec { ns: be, to: "198.18.0.0/15".into(), via, dev: None, count: None });
        }
        Ok(())
    }

    /// The backend's address and the VIP on every backend's loopback; whole checksums from gen and the backends (a
    /// veth sender's partial ones would reach the other end bad through XDP).
    pub fn built(&self, t: &BuiltTopology) -> Result<()> {
        let (gen, gen_if) = t.endpoint(&t.roles()?.gen)?;
        gen.set_offload(&gen_if, Offload::TxChecksum, false).context("gen's TX checksumming off")?;
        for i in 1..=self.backends {
            let ns = t.ns(&backend_ns(i))?;
            ns.batch()
                .addr_add("lo", &format!("{}/32", backend(i)))?
                .addr_add("lo", &format!("{VIP}/32"))?
                .apply()
                .context("a backend's addresses on its loopback")?;
            ns.set_offload(&ifname("be"), Offload::TxChecksum, false).context("a backend's TX checksumming off")?;
        }
        Ok(())
    }

    /// `xnf lb decap` on every backend's interface, for the point's runs.
    pub fn decap(&self, t: &BuiltTopology) -> Result<DecapGuard> {
        let mut g = DecapGuard { attached: Vec::new() };
        for i in 1..=self.backends {
            let ns = t.ns(&backend_ns(i))?;
            let dev = ifname("be");
            let d = dev.clone();
            ns.run(move || xnf_lb::decap::attach(&[d], XdpMode::Native, 0))?.with_context(|| format!("attaching xnf lb decap in {}", ns.name()))?;
            g.attached.push((ns.path(), ns.name().to_string(), dev));
        }
        Ok(g)
    }

    /// What a variant's run needs of the topology.
    pub fn ends<'a>(&self, t: &'a BuiltTopology) -> Result<Ends<'a>> {
        let r = t.roles()?;
        let ((gen, _), (dut, din)) = (t.endpoint(&r.gen)?, t.endpoint(&r.dut_in)?);
        let mut ifaces = vec![din];
        ifaces.extend((1..=self.backends).map(|i| ifname(&format!("bk{i}"))));
        let backends = (1..=self.backends).map(|i| t.ns(&backend_ns(i))).collect::<Result<Vec<_>>>()?;
        Ok(Ends { gen, client: t.addr(&r.gen, false)?, dut, ifaces, backends })
    }

    /// The planned time of a variant: the connections, opened one after the other, and the lb attached.
    pub fn planned_seconds(&self) -> f64 {
        1.5 + f64::from(self.connections) * 0.5e-3
    }

    /// One variant's run: the connections, the change, the second exchange; its outcome kept for [`Self::result`].
    pub fn measure(&self, svc: &Service, e: &Ends, step: Step, pg: &Progress) -> Result<()> {
        let (n, f) = (svc.all.len(), self.connections);
        pg.message(&format!("{f} TCP connections to {VIP}:{PORT} through the lb, then {} removed", svc.all[svc.removed_at]));
        let _routes = HostRoutes::add(e.dut, n as u32)?;
        let (lb, warnings) = LbGuard::new(e.dut, &e.ifaces, &svc.files[0])?;
        warnings.iter().for_each(|w| pg.println(&format!("xnf lb: {w}")));
        let servers =
            e.backends.iter().enumerate().map(|(i, ns)| Server::start(ns, SocketAddr::new(VIP.into(), PORT), i as u16)).collect::<Result<Vec<_>>>()?;
        let (lb0, fwd0, re0) = (lb.counters()?, forwarded(e.dut)?, retransmitted(e)?);
        let state = || format!("xnf lb {}", lb.counters().map(|c| setup::nonzero(&c)).unwrap_or_default());
        let mut clients = Clients::connect(e.gen, SocketAddr::new(VIP.into(), PORT), f).with_context(state)?;
        let first = clients.exchange(1, FIRST_WITHIN);
        let before: Vec<usize> = first.iter().filter_map(|x| if let Fate::Answered(b) = x { Some(usize::from(*b)).filter(|&b| b < n) } else { None }).collect();
        if before.len() != first.len() {
            bail!("before the change only {} of {f} TCP connections had their answer ({}); {}", before.len(), fates(&first), state());
        }
        // The servers count an answer after sending it: wait for their count to catch up with the clients'.
        let answered = |x: u8| servers.iter().map(|s| s.counts.answered(x)).sum::<u64>();
        wait_for(|| answered(1) >= u64::from(f), Duration::from_secs(5))
            .with_context(|| format!("the backends answered {} of {f} first requests", answered(1)))?;
        let answered_before: Vec<u64> = servers.iter().map(|s| s.counts.answered(1)).collect();
        let (rst0, decap0, c0) = (rsts(&e.backends)?, decapsulated(&e.backends)?, lb.counters()?);

        let second = svc.files[1].clone();
        e.dut.run(move || xnf_lb::apply_text(&second, "lab-after.toml"))?.context("applying the service file without the removed backend")?;
        let flushed = if step == Step::WithoutTable { e.dut.run(empty_connection_table)?? } else { 0 };
        let after = clients.exchange(2, AFTER_WITHIN);

        let survived = after.iter().zip(&before).filter(|(x, b)| **x == Fate::Answered(**b as u16)).count() as u64;
        // The servers' count catches up with the answers the clients read (a count short of them is reported as is).
        let _ = wait_for(|| answered(2) >= survived, Duration::from_secs(2));
        let (c1, rst1, decap1) = (lb.counters()?, rsts(&e.backends)?, decapsulated(&e.backends)?);
        let (fwd1, re1) = (forwarded(e.dut)?, retransmitted(e)?);
        let ct = |k: Counter| c1[k as usize] - c0[k as usize];
        let mut o = TcpOutcome {
            connections: u64::from(f),
            per_backend: count_per(&before, n),
            accepted: servers.iter().map(|s| s.counts.accepted.load(std::sync::atomic::Ordering::SeqCst)).collect(),
            answered_before,
            answered_after: servers.iter().map(|s| s.counts.answered(2)).collect(),
            decapsulated_after: decap1.iter().zip(&decap0).map(|(a, b)| a - b).collect(),
            backend_rsts: rst1 - rst0,
            flushed,
            ct_hit: ct(Counter::CtHit),
            ct_miss: ct(Counter::CtMiss),
            ct_syn: ct(Counter::CtSyn),
            ct_stale: ct(Counter::CtStale),
            lb_redirected: c1[Counter::Redirect as usize] - lb0[Counter::Redirect as usize],
            lb_to_kernel: to_kernel(&c1) - to_kernel(&lb0),
            replies_forwarded: fwd1 - fwd0,
            retransmitted: re1 - re0,
            ..Default::default()
        };
        for ((x, &b), &port) in after.iter().zip(&before).zip(&clients.ports) {
            let ok = *x == Fate::Answered(b as u16);
            match x {
                Fate::Answered(_) if ok => o.survived += 1,
                Fate::Answered(_) => o.wrong_backend += 1,
                Fate::Reset => o.reset += 1,
                Fate::TimedOut => o.timed_out += 1,
                Fate::Failed => o.failed += 1,
            }
            if b == svc.removed_at {
                o.removed_connections += 1;
                o.removed_broken += u64::from(!ok);
            } else {
                o.kept_connections += 1;
                o.collateral += u64::from(!ok);
            }
            let flow = Flow { src: e.client, dst: IpAddr::V4(VIP), proto: xnf_lb::Proto::Tcp, sport: port, dport: PORT };
            let model = |m: &Model| flow.backend(&m.1, &m.0);
            o.model_before += u64::from(model(&svc.models[0]) == Some(svc.all[b]));
            let expect_kept = match step {
                Step::WithTable => b != svc.removed_at,
                Step::WithoutTable => model(&svc.models[1]) == Some(svc.all[b]),
            };
            o.model_agrees += u64::from(expect_kept == ok);
        }
        drop(clients);
        for s in servers {
            s.stop()?;
        }
        drop(lb);
        self.kept.borrow_mut().push((step, o));
        Ok(())
    }

    /// Each variant's outcomes summed over its runs.
    pub fn result(&self, runs: u32, removed: IpAddr) -> Result<TcpDisruption> {
        let kept = self.kept.borrow();
        let sum = |step: Step| -> Result<TcpOutcome> {
            let mut o = TcpOutcome::default();
            let mut any = false;
            for (_, k) in kept.iter().filter(|(s, _)| *s == step) {
                o.add(k);
                any = true;
            }
            ensure!(any, "the {} variant made no TCP connections", variant_name(&step));
            Ok(o)
        };
        Ok(TcpDisruption {
            connections: self.connections,
            backends: self.backends,
            removed,
            runs,
            with_table: sum(Step::WithTable)?,
            without_table: sum(Step::WithoutTable)?,
        })
    }
}

/// What a variant's run uses: the client's namespace and address, dut and the lb's interfaces there (its ingress,
/// then the backends' ports), the backends' namespaces in the file's order.
pub struct Ends<'a> {
    gen: &'a Netns,
    client: IpAddr,
    dut: &'a Netns,
    ifaces: Vec<String>,
    backends: Vec<&'a Netns>,
}

/// dut's host routes to the backends' addresses over their links, removed when dropped (the test runs route the
/// backends' prefix to the sink).
struct HostRoutes<'a> {
    dut: &'a Netns,
    n: u32,
}

impl<'a> HostRoutes<'a> {
    fn add(dut: &'a Netns, n: u32) -> Result<HostRoutes<'a>> {
        let mut b = dut.batch();
        for i in 1..=n {
            b.route_add(&format!("{}/32", backend(i)), Some(&setup::backend(i).to_string()), Some(&ifname(&format!("bk{i}"))))?;
        }
        // Owned from here on: a failed apply leaves none, or some, removed by the guard.
        let g = HostRoutes { dut, n };
        b.apply().context("routing the backends' addresses to their links in dut")?;
        Ok(g)
    }
}

impl Drop for HostRoutes<'_> {
    fn drop(&mut self) {
        for i in 1..=self.n {
            // A route a failed apply never added is not there to remove.
            let _ = self.dut.route_del(&format!("{}/32", backend(i)));
        }
    }
}

/// `xnf lb decap` attached in the backends' namespaces; detached (its pins removed) when dropped.
pub struct DecapGuard {
    attached: Vec<(PathBuf, String, String)>,
}

impl Drop for DecapGuard {
    fn drop(&mut self) {
        for (path, name, dev) in self.attached.drain(..) {
            match xnf_netns::run_in(&path, move || xnf_lb::decap::detach(&[dev])) {
                Ok(Ok(())) => {}
                Ok(Err(e)) | Err(e) => eprintln!("xnf lab: detaching xnf lb decap in {name}: {e:#}"),
            }
        }
    }
}

/// Polls `done` every millisecond until it holds, for `within` at most.
fn wait_for(done: impl Fn() -> bool, within: Duration) -> Result<()> {
    let t0 = Instant::now();
    while !done() {
        ensure!(t0.elapsed() < within, "not within {} s", within.as_secs_f64());
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn count_per(of: &[usize], n: usize) -> Vec<u64> {
    let mut c = vec![0; n];
    of.iter().for_each(|&b| c[b] += 1);
    c
}

/// The fates in a few words (`990 answered, 10 reset`).
fn fates(f: &[Fate]) -> String {
    let n = |p: fn(&Fate) -> bool| f.iter().filter(|x| p(x)).count();
    format!(
        "{} answered, {} reset, {} timed out, {} failed",
        n(|x| matches!(x, Fate::Answered(_))),
        n(|x| *x == Fate::Reset),
        n(|x| *x == Fate::TimedOut),
        n(|x| *x == Fate::Failed)
    )
}

/// dut's forwarded IPv4 packets.
fn forwarded(dut: &Netns) -> Result<u64> {
    dut.snmp()?.value("Ip", "ForwDatagrams")
}

/// The TCP segments gen and the backends sent again, summed.
fn retransmitted(e: &Ends) -> Result<u64> {
    std::iter::once(e.gen).chain(e.backends.iter().copied()).map(|ns| ns.snmp()?.value("Tcp", "RetransSegs")).sum()
}

/// The RSTs the backends sent, summed.
fn rsts(backends: &[&Netns]) -> Result<u64> {
    backends.iter().map(|ns| ns.snmp()?.value("Tcp", "OutRsts")).sum()
}

/// Packets each backend's decap stripped of an IPv4 outer header.
fn decapsulated(backends: &[&Netns]) -> Result<Vec<u64>> {
    backends.iter().map(|ns| Ok(ns.run(xnf_lb::decap::counters)??[DecapCounter::Ipip as usize])).collect()
}

/// Service packets the lb left to dut's kernel, every reason summed.
fn to_kernel(c: &xnf_lb::program::Counters) -> u64 {
    [Counter::NoRoute, Counter::FwdDisabled, Counter::NoNeigh, Counter::NotManaged, Counter::NoSource, Counter::Error, Counter::NoPorts]
        .iter()
        .map(|&k| c[k as usize])
        .sum()
}

/// Empties the lb's connection table in the calling thread's namespace; returns how many entries it held.
fn empty_connection_table() -> Result<u64> {
    let maps = xnf_lb::open_maps()?;
    let keys: Vec<Vec<u8>> = maps.conntrack.keys().collect();
    for k in &keys {
        // An entry the LRU evicted meanwhile is gone anyway.
        let _ = maps.conntrack.delete(k);
    }
    ensure!(maps.conntrack.keys().next().is_none(), "the lb's connection table is not empty after deleting its {} entries", keys.len());
    Ok(keys.len() as u64)
}

/// Prints the real connections' table, after the test runs'.
pub fn print(t: &TcpDisruption, p: &super::disruption::Planned) {
    println!(
        "\nreal TCP connections: {} per run ({} run{}) from gen to {VIP}:{PORT} through xnf lb attached in dut (ipip), {} backend namespaces (xnf lb decap, replies straight back through dut's kernel), backend {} removed",
        t.connections,
        t.runs,
        if t.runs == 1 { "" } else { "s" },
        t.backends,
        t.removed
    );
    println!(
        "{:<34} {:>8} {:>19} {:>19} {:>7} {:>9} {:>14} {:>13}",
        "", "broken", "removed's broken", "collateral / kept", "reset", "timed out", "backends' RSTs", "model agrees"
    );
    let pct = |x: u64, of: u64| 100.0 * x as f64 / of.max(1) as f64;
    let row = |what: &str, o: &TcpOutcome| {
        println!(
            "{what:<34} {:>7.3}% {:>9} ({:>5.1} %) {:>9} ({:.3} %) {:>7} {:>9} {:>14} {:>11.2} %",
            100.0 * o.broken_share(),
            o.removed_broken,
            pct(o.removed_broken, o.removed_connections),
            o.collateral,
            100.0 * o.collateral_share(),
            o.reset,
            o.timed_out,
            o.backend_rsts,
            pct(o.model_agrees, o.connections)
        );
    };
    row("with the connection table", &t.with_table);
    row("without it (table emptied)", &t.without_table);
    println!(
        "{:<34} {:>7.3}% {:>9} ({:>5.1} %) {:>9} ({:.3} %)",
        "xnf lb plan (share of hash space)",
        100.0 * p.moved,
        "",
        100.0 * p.removed,
        "",
        100.0 * p.collateral_of_kept
    );
    let (w, wo) = (&t.with_table, &t.without_table);
    println!(
        "(with the table and without: the backends accepted {} and {} connections and answered {} and {} after the change; dut's kernel forwarded {} and {} replies; the lb left {} and {} service packets to the kernel; {} and {} segments were sent again; without the table {} entries were emptied)",
        w.accepted.iter().sum::<u64>(),
        wo.accepted.iter().sum::<u64>(),
        w.answered_after.iter().sum::<u64>(),
        wo.answered_after.iter().sum::<u64>(),
        w.replies_forwarded,
        wo.replies_forwarded,
        w.lb_to_kernel,
        wo.lb_to_kernel,
        w.retransmitted,
        wo.retransmitted,
        wo.flushed
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_add_up_over_runs() {
        let one = TcpOutcome { connections: 10, survived: 8, kept_connections: 9, collateral: 1, per_backend: vec![4, 6], ..Default::default() };
        let mut sum = TcpOutcome::default();
        sum.add(&one);
        sum.add(&one);
        assert_eq!((sum.connections, sum.broken(), sum.per_backend.clone()), (20, 4, vec![8, 12]));
        assert!((sum.collateral_share() - 1.0 / 9.0).abs() < 1e-12 && (sum.broken_share() - 0.2).abs() < 1e-12);
    }

    #[test]
    fn the_part_puts_a_namespace_per_backend_into_the_topology() {
        assert!(TcpPart::new(0, 4).unwrap().is_none());
        let p = TcpPart::new(100, 4).unwrap().unwrap();
        let mut spec = TopologySpec::load("line").unwrap();
        let (namespaces, links) = (spec.namespaces.len(), spec.links.len());
        p.adapt(&mut spec).unwrap();
        assert_eq!((spec.namespaces.len(), spec.links.len()), (namespaces + 4, links + 4));
        spec.validate().unwrap();
        let dut = spec.namespaces.iter().find(|n| n.name == "dut").unwrap();
        assert_eq!(dut.sysctl.get("net.ipv4.conf.all.rp_filter").map(String::as_str), Some("0"));
        assert!(spec.links.iter().any(|l| l.a == "dut:bk4" && l.b == "be4:be" && l.b_addr == ["198.18.14.2/24"]));
    }
}
