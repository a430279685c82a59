//! `xnf lab router`: kernel forwarding against `xnf router` on the same
//! topology (built-in `line`: gen -> dut -> sink), variants alternated
//! within each run, swept over packet size, flows, queues/CPUs, route-table
//! size, a netfilter ruleset and 802.1Q tags on either side of dut
//! ([`crate::engine::vlan`]).
//!
//! The generator sends as fast as it can (live frames, XDP_TX into gen's
//! veth); the sink counts in XDP and drops. The forwarded rate is what the
//! sink counts per second. The "dut-drop" variant drops every frame at
//! dut's ingress: the cost of generating and receiving alone, so
//! (1/rate - 1/rate_drop) estimates what forwarding itself costs; the
//! "dut-redirect" variant redirects every frame to dut's egress with no
//! lookup at all, the ceiling of any forwarder here. Peers —
//! xdp-tools' xdp-forward, or any forwarder given by an attach and a detach
//! command (`--peer`) — are variants like the others ([`crate::engine::peers`]).
//!
//! On veth, frames are processed in softirq on the *sending* CPU: the
//! generator, dut's receive and forwarding, and the sink's receive all run
//! on the generator's CPU, so the rate is of the whole chain; the CPU split
//! shows where the time went.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use xnf_core::xdp::XdpMode;
use xnf_router::program::FibMode;
use xnf_router::AttachOptions;

use crate::engine::attach::{default_router_options, router_options};
use crate::engine::driver::{AtPoint, Cpus, Experiment, Running, VariantName};
use crate::engine::measure::{self, Counters};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::peers::{self, Peer, PeerGuard};
use crate::engine::progress::Progress;
use crate::engine::results::{Results, Sample};
use crate::engine::routes::{Installed, Routes, Table};
use crate::engine::topology::BuiltTopology;
use crate::engine::vlan::{self, Pattern, Tagged};
use crate::engine::{nft, LabAttachment, NfGuard};
use crate::programs::actions::ActionKind;
use crate::programs::gen::GenConfig;
use crate::programs::sink::SinkOptions;

/// The ruleset loaded on dut at points with `netfilter` on.
pub const NETFILTER_RULESET: &str = include_str!("../../topologies/router.nft");

/// `xnf router` as variants: the name and how it is attached. `xnf` is
/// what `xnf router attach` attaches (the router's default FIB mode, the
/// route cache, with its follower), `xnf-lean` the same with
/// --no-byte-counters. Another FIB mode or option is one more line.
pub fn routers() -> [(&'static str, AttachOptions); 4] {
    let default = default_router_options();
    [
        ("xnf", default),
        ("xnf-full", router_options(FibMode::Full)),
        ("xnf-direct", router_options(FibMode::Direct)),
        ("xnf-lean", AttachOptions { no_bytes: true, ..default }),
    ]
}

/// A router variant's old name (`xnf` was --fib full and the route cache
/// `xnf-cache` until the lab named its variants after what the commands
/// do by default): its new name, and the refusal in one line that says it.
pub fn renamed(name: &str) -> Option<(&'static str, String)> {
    let (new, what) = match name {
        "xnf-cache" => ("xnf", "what `xnf router attach` attaches"),
        "xnf-cache-lean" => ("xnf-lean", "what `xnf router attach --no-byte-counters` attaches"),
        _ => return None,
    };
    Some((new, format!("--variants: `{name}` is now `{new}` ({what}; `xnf-full` is --fib full)")))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The kernel forwards (dut ingress has the XDP_PASS program).
    Kernel,
    /// `xnf router` forwards in XDP: one of [`routers`].
    Xnf(&'static str, AttachOptions),
    /// dut drops at XDP ingress: generator + receive cost only.
    DutDrop,
    /// dut redirects every frame to its egress with no lookup and no
    /// rewrite (the lab's raw-verdict program): the ceiling any forwarder
    /// reaches on this topology.
    DutRedirect,
    /// A forwarder from outside xnf: xdp-forward or a `--peer`.
    Peer(Peer),
}

impl VariantName for Variant {
    fn name(&self) -> String {
        match self {
            Variant::Kernel => "kernel".into(),
            Variant::Xnf(name, _) => name.to_string(),
            Variant::DutDrop => "dut-drop".into(),
            Variant::DutRedirect => "dut-redirect".into(),
            Variant::Peer(p) => p.name.clone(),
        }
    }
}

/// The names of the built-in variants, peers included: what `--variants`
/// takes besides the `--peer`s, and what a `--peer` may not be called.
fn built_in_names() -> Vec<&'static str> {
    let mut names = vec!["kernel", "dut-drop", "dut-redirect"];
    names.extend(routers().map(|(n, _)| n));
    names.extend(peers::BUILT_IN.iter().map(|(n, _)| *n));
    names
}

/// `xnf lab router`: its own options; every list is a sweep.
#[derive(Args, Clone, Debug, Serialize)]
pub struct Router {
    /// Frame sizes on the wire, FCS included (64..=1518), or imix (the
    /// AMS-IX mix); a list sweeps, e.g. 64,128,256,512,1024,1518,imix
    /// [default: the smallest UDP frame: 64 for IPv4; 66 for IPv6, 70 with
    /// a tagged ingress].
    #[arg(long = "size", value_delimiter = ',', value_parser = parse_size, value_name = "BYTES|imix[,...]")]
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
    /// Routes added to dut's table (by netlink batches): N synthetic
    /// prefixes (the public BGP table's length mix), or FILE, a table dump:
    /// one prefix per line (# comments) or an MRT RIB dump, gzipped or not
    /// (real IPv6 prefixes are moved into 2001:db8::/32); a list sweeps,
    /// e.g. 0,10000,1000000,bgp.txt.
    #[arg(long, default_value = "0", value_delimiter = ',', value_parser = Routes::parse, value_name = "N|FILE[,...]")]
    pub routes: Vec<Routes>,
    /// Load a realistic netfilter ruleset (conntrack, sets, counters) on
    /// dut: off, on, or both (a sweep).
    #[arg(long, default_value = "off", value_parser = netfilter_points, value_name = "off|on|both")]
    pub netfilter: OffOn,
    /// 802.1Q tags on dut's sides; a list sweeps: none (untagged in and
    /// out), in (gen -> dut tagged, VLAN 100), out (dut -> sink tagged,
    /// VLAN 200), both. The tag is inside --size (the frame gen sends);
    /// frames grow by it when dut adds one (out), shrink when it takes one
    /// off (in). Tagged patterns need 802.1Q (module 8021q): on a kernel
    /// without it the run is refused before anything is built.
    #[arg(long = "vlan", default_value = "none", value_delimiter = ',', value_parser = Pattern::parse, value_name = "none|in|out|both[,...]")]
    #[serde(skip_serializing_if = "untagged_only")]
    pub vlan: Vec<Pattern>,
    /// XDP mode of every program on dut (the routers, xdp-forward, the
    /// lab's pass, drop and redirect programs); a list sweeps: native (in
    /// the driver), skb (generic XDP, after the kernel made an skb; the
    /// container-NF thesis Fig. 7). A --peer gets it as {mode}.
    #[arg(long = "xdp-mode", default_value = "native", value_delimiter = ',', value_parser = parse_mode, value_name = "native|skb[,...]")]
    #[serde(skip_serializing_if = "native_only")]
    pub xdp_mode: Vec<String>,
    /// Variants to compare: kernel, xnf (what `xnf router attach` attaches:
    /// the route cache, with its follower), xnf-full (--fib full),
    /// xnf-direct (--fib direct), xnf-lean (xnf with --no-byte-counters),
    /// dut-drop, dut-redirect (every frame redirected to the egress, no
    /// lookup: this topology's ceiling), xdp-forward, xdp-forward-direct
    /// (xdp-tools' xdp-forward, fib mode full / direct), or a --peer's name.
    #[arg(long, value_delimiter = ',', default_value = "kernel,xnf,dut-drop", value_parser = parse_item::<String>, value_name = "NAME[,NAME...]")]
    pub variants: Vec<String>,
    /// A forwarder from outside xnf, measured as variant NAME (also name it
    /// in --variants): two shell commands run in dut's network namespace
    /// (only that namespace switched), the attach before each of its runs,
    /// the detach after; {ns}, {in}, {out} become dut's namespace, ingress
    /// and egress ({{ and }} are literal braces). Repeatable.
    #[arg(long = "peer", value_parser = Peer::parse, value_name = "NAME=ATTACH;DETACH")]
    pub peers: Vec<Peer>,
    /// xdp-forward's binary, for the xdp-forward variants [default:
    /// $XNF_PEERS/sbin/xdp-forward, XNF_PEERS defaulting to /opt/xnf/peers,
    /// where scripts/peers.sh builds it].
    #[arg(long, value_name = "PATH")]
    pub xdp_forward: Option<PathBuf>,
}

impl Router {
    /// The variants asked for, resolved: built-ins, the built-in peers
    /// (whose binary must exist), the --peers; each refusal one line.
    fn resolve(&self) -> Result<Vec<Variant>> {
        let builtins = built_in_names();
        for (i, p) in self.peers.iter().enumerate() {
            ensure!(
                !builtins.contains(&p.name.as_str()),
                "--peer {}: a built-in variant has that name (built-in: {}); pick another",
                p.name,
                builtins.join(", ")
            );
            ensure!(!self.peers[..i].iter().any(|q| q.name == p.name), "--peer {}: defined twice", p.name);
            ensure!(self.variants.contains(&p.name), "--peer {}: not in --variants, so never measured (add it, e.g. --variants kernel,xnf,{})", p.name, p.name);
        }
        let mut out: Vec<Variant> = Vec::new();
        for name in &self.variants {
            if let Some((_, refusal)) = renamed(name) {
                bail!(refusal);
            }
            let v = if name == "kernel" {
                Variant::Kernel
            } else if name == "dut-drop" {
                Variant::DutDrop
            } else if name == "dut-redirect" {
                Variant::DutRedirect
            } else if let Some((n, opts)) = routers().into_iter().find(|(n, _)| n == name) {
                Variant::Xnf(n, opts)
            } else if let Some(p) = self.peers.iter().find(|p| &p.name == name) {
                Variant::Peer(p.clone())
            } else if peers::BUILT_IN.iter().any(|(n, _)| n == name) {
                let bin = peers::xdp_forward_binary(self.xdp_forward.as_deref())?;
                Variant::Peer(Peer::built_in(name, &bin).expect("a built-in peer's name"))
            } else {
                bail!("--variants: no variant `{name}` (built-in: {}; or define it with --peer '{name}=ATTACH;DETACH')", builtins.join(", "));
            };
            ensure!(!out.contains(&v), "--variants: {name} named twice");
            out.push(v);
        }
        Ok(out)
    }

    /// `--size`, or the smallest UDP frame of the family (and tag).
    fn sizes(&self) -> Vec<u32> {
        match (self.sizes.is_empty(), self.ipv6) {
            (false, _) => self.sizes.clone(),
            (true, false) => vec![64],
            (true, true) if self.vlan.iter().any(|p| p.ingress_vid().is_some()) => vec![70],
            (true, true) => vec![66],
        }
    }

    /// Whether some point has a tagged side.
    fn tagged(&self) -> bool {
        !untagged_only(&self.vlan)
    }

    /// Whether `name` is a peer's, built-in or --peer.
    fn is_peer(&self, name: &str) -> bool {
        self.peers.iter().any(|p| p.name == name) || peers::BUILT_IN.iter().any(|(n, _)| *n == name)
    }
}

impl Experiment for Router {
    type Variant = Variant;
    const NAME: &'static str = "router";
    const ACROSS_HOSTS: bool = true;

    fn places_dut(&self) -> bool {
        true
    }

    fn params(&self) -> Vec<Param> {
        let mut p = params::legacy();
        // Described only when swept: untagged results read as they did.
        if self.tagged() {
            p.push(params::vlan());
        }
        if !native_only(&self.xdp_mode) {
            p.push(params::xdp_mode());
        }
        p
    }

    /// Untagged alone, the points have no `vlan`: they read as they always did.
    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        let mut s = vec![("queues", params::values(&self.queues)), ("routes", params::values(&self.routes)), ("netfilter", params::values(&self.netfilter.0))];
        if self.tagged() {
            s.push(("vlan", params::values(&self.vlan)));
        }
        if !native_only(&self.xdp_mode) {
            s.push(("xdp-mode", self.xdp_mode.iter().map(|m| Value::from(m.as_str())).collect()));
        }
        s.extend([("size", params::values(&self.sizes())), ("flows", params::values(&self.flows)), ("ipv6", params::values(&[self.ipv6]))]);
        s
    }

    fn variants(&self) -> Vec<Variant> {
        // check() has refused what does not resolve.
        self.resolve().unwrap_or_default()
    }

    /// Every router variant against the kernel and against every peer;
    /// the route cache's variants (xnf, xnf-lean) also against full
    /// lookups (xnf-full); routers and peers against the ceiling
    /// (dut-redirect) when it is measured.
    fn ratios(&self) -> Vec<(&str, &str)> {
        let asked = || self.variants.iter().map(String::as_str);
        let mut against: Vec<&str> = asked().filter(|n| *n == "kernel" || self.is_peer(n)).collect();
        // The kernel first: the ratio every run of this experiment has had.
        against.sort_by_key(|n| *n != "kernel");
        let built = routers();
        let fib = |n: &str| built.iter().find(|(r, _)| *r == n).map(|(_, o)| o.fib);
        let xnfs = || asked().filter(|n| fib(n).is_some());
        let mut out: Vec<(&str, &str)> = xnfs().flat_map(|x| against.iter().map(move |d| (x, *d))).collect();
        if asked().any(|n| n == "xnf-full") {
            out.extend(asked().filter(|n| fib(n) == Some(FibMode::Cache)).map(|c| (c, "xnf-full")));
        }
        if asked().any(|n| n == "dut-redirect") {
            out.extend(xnfs().chain(asked().filter(|n| self.is_peer(n))).map(|x| (x, "dut-redirect")));
        }
        out
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        self.resolve()?;
        measure::check_sizes(&self.sizes(), self.ipv6)?;
        measure::check_generator(&self.flows, &self.queues, cpus.count)?;
        for r in &self.routes {
            r.check(2_000_000)?;
        }
        if self.netfilter.0.contains(&true) {
            nft::require("--netfilter")?;
        }
        for (i, m) in self.xdp_mode.iter().enumerate() {
            ensure!(!self.xdp_mode[..i].contains(m), "--xdp-mode: {m} named twice");
        }
        self.check_vlan()
    }

    /// The routes (synthetic or a table file) and the netfilter ruleset of
    /// the point; with routes, the flows go to destinations in distinct
    /// prefixes.
    fn at_point<'a>(&'a self, t: &'a BuiltTopology, p: &Point, pg: &Progress) -> Result<AtPoint<'a>> {
        let roles = t.roles()?;
        let (dut, dout) = t.endpoint(&roles.dut_out)?;
        let (ipv6, flows) = (p.flag("ipv6")?, p.u32("flows")?);
        // First: the routes go through the egress's VLAN device.
        let tagged = Tagged::new(t, Pattern::of(p)?)?;
        let dout = tagged.device(&dout);
        let source = Routes::from_value(p.get("routes").context("the point has no routes")?)?;
        let mut notes = Vec::new();
        let routes = match Table::load(&source, ipv6)? {
            Some(table) => {
                let via = t.addr(&roles.sink, ipv6)?.to_string();
                pg.message(&format!("installing {} routes ({})", table.set.len(), table.about));
                let r = Installed::new(dut, table.set, &via, &dout)?;
                pg.println(&format!("installed {} in {:.1} s", table.about, r.install_seconds()));
                notes.push(format!("routes: {}, installed in {:.1} s", table.about, r.install_seconds()));
                Some(r)
            }
            None => None,
        };
        let dsts = match &routes {
            Some(r) => r.targets(flows as usize)?,
            None => Vec::new(),
        };
        if !dsts.is_empty() {
            notes.push(format!("the flows go to {} destinations in distinct prefixes of the table", spread(flows, dsts.len())));
        }
        let nft = if p.flag("netfilter")? { Some(Netfilter::load(dut)?) } else { None };
        // Dropped in order: the VLAN devices last, after what uses them.
        Ok(AtPoint { traffic: Some(template(t, p, &dsts)?), guard: Box::new((nft, routes, tagged)), notes })
    }

    /// With tagged points, the sink also counts the tags it sees
    /// ([`vlan::TagCheck`]).
    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        if self.tagged() {
            let sink = t.roles()?.sink.clone();
            t.replace_function(&sink, |ns, dev| LabAttachment::sink_with(ns, dev, SinkOptions { count_tags: Some(vlan::SINK_VID), ..Default::default() }))?;
        }
        Ok(())
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, p: &Point, v: Variant, _: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        // What arrives must carry the pattern's egress tag, from a forwarder.
        let forwards = matches!(v, Variant::Kernel | Variant::Xnf(..) | Variant::Peer(_));
        let tags = match self.tagged() && forwards {
            true => Some(vlan::TagCheck::start(Pattern::of(p)?, &v.name(), t.attachment(&roles.sink)?.sink_counter()?)?),
            false => None,
        };
        let sink = t.received(&roles.sink)?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let (_, dout) = t.endpoint(&roles.dut_out)?;
        let mode = mode_of(p);
        let setup = match v {
            Variant::Kernel => Setup::Ingress(LabAttachment::pass_in(dut, &din, mode)?),
            Variant::DutDrop => Setup::Drop(LabAttachment::sink_in(dut, &din, mode)?),
            Variant::DutRedirect => Setup::Ingress(LabAttachment::action_in(dut, &din, ActionKind::Redirect, &dout, 0, mode)?),
            Variant::Xnf(_, opts) => Setup::Router(NfGuard::router(dut, &[din.clone(), dout.clone()], AttachOptions { mode, ..opts })?),
            Variant::Peer(p) => Setup::Peer(PeerGuard::attach_in(&p, dut, &din, &dout, mode)?),
        };
        Ok(Box::new(Set { setup, dut, din, dout, sink, tags }))
    }

    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        res.notes.push(format!(
            "veth, at points where dut shares the generators' CPUs (--dut-cpu shared, or no CPU left for it): every stage (generator, dut, sink) runs in softirq on the generating CPU (CPU {}; with N queues CPUs 0..N-1, one generator each); rates are of the whole chain, and dut-drop is the cost of generating and receiving alone. Where dut has a CPU of its own, the rate is dut's (or the generator's, if slower) and `dut ns/pkt` its CPU alone.",
            cpus.gen
        ));
        if self.tagged() {
            res.notes.push(format!(
                "vlan: tagged sides are VLAN devices on dut's veths (VLAN {} from gen, {} to the sink) holding the veths' addresses; the tag is inside the generated frame's size",
                vlan::GEN_VID,
                vlan::SINK_VID
            ));
        }
        for v in self.resolve()? {
            if v == Variant::DutRedirect && self.tagged() {
                res.notes.push("dut-redirect at tagged points: frames leave as they came, tag or none (no rewrite): the ceiling of moving a frame, not a forwarder of the pattern".into());
            }
            if let Variant::Peer(p) = v {
                res.notes.push(format!("{}: attached by `{}`, detached by `{}`, in dut's network namespace", p.name, p.attach, p.detach));
            }
        }
        Ok(())
    }
}

impl Router {
    /// `--vlan`: each pattern once, IPv6 sizes with room for the tag, and
    /// a kernel that can make VLAN devices (probed last: it builds one).
    fn check_vlan(&self) -> Result<()> {
        for (i, p) in self.vlan.iter().enumerate() {
            ensure!(!self.vlan[..i].contains(p), "--vlan: {p} named twice");
        }
        if self.ipv6 && self.vlan.iter().any(|p| p.ingress_vid().is_some()) {
            if let Some(s) = self.sizes().iter().find(|s| (1..70).contains(*s)) {
                bail!("--size {s}: tagged IPv6 UDP (--vlan in or both) needs at least 70 bytes on the wire (14 + 4 + 40 + 8 + FCS)");
            }
        }
        vlan::require_8021q(&self.vlan)
    }
}

/// The XDP mode of point `p` (native unless swept).
fn mode_of(p: &Point) -> XdpMode {
    match p.get("xdp-mode") {
        Some(Value::Text(m)) if m == "skb" => XdpMode::Skb,
        _ => XdpMode::Native,
    }
}

/// `--xdp-mode native` alone: points read as they always did.
fn native_only(m: &[String]) -> bool {
    m.iter().all(|m| m == "native")
}

/// A `--xdp-mode` value.
fn parse_mode(s: &str) -> Result<String, String> {
    match s.trim() {
        m @ ("native" | "skb") => Ok(m.into()),
        m => Err(format!("`{m}`: give native or skb")),
    }
}

/// `--vlan none` alone: no point is tagged.
fn untagged_only(v: &[Pattern]) -> bool {
    v.iter().all(|p| *p == Pattern::None)
}

/// The generator's frames at `p` ([`measure::udp_traffic`]). With synthetic routes, destinations spread over
/// the table's prefixes inside the lab's range, one per flow.
pub(crate) fn template(t: &BuiltTopology, p: &Point, dsts: &[IpAddr]) -> Result<GenConfig> {
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
pub(crate) fn spread(flows: u32, targets: usize) -> u32 {
    (1..=flows.min(targets as u32)).rev().find(|d| flows.is_multiple_of(*d)).unwrap_or(1)
}

/// A variant set up on dut; dropping it tears it down.
enum Setup {
    // A program on dut's ingress whose frames the sink counts (kernel:
    // XDP_PASS; dut-redirect: the raw redirect), held for its Drop.
    Ingress(#[allow(dead_code)] LabAttachment),
    Drop(LabAttachment),
    // Held for its Drop (detach).
    Router(#[allow(dead_code)] NfGuard),
    Peer(PeerGuard),
}

struct Set<'a> {
    setup: Setup,
    dut: &'a xnf_netns::Netns,
    din: String,
    dout: String,
    sink: measure::Received<'a>,
    tags: Option<vlan::TagCheck<'a>>,
}

impl Running for Set<'_> {
    /// Forwarded frames are counted at the sink; dut-drop's by its own
    /// program, dut sending nothing.
    fn counters(&self) -> Result<Counters<'_>> {
        let (dut_out, received): (_, measure::Received) = match &self.setup {
            Setup::Drop(a) => (None, Box::new(|| a.packets())),
            _ => (Some((self.dut, self.dout.clone())), Box::new(|| (self.sink)())),
        };
        Ok(Counters { dut_in: (self.dut, self.din.clone()), dut_out, received, on_read: None, corunner: None, during: None })
    }

    /// A peer's detach command runs here, so its failure fails the run:
    /// what it left on dut would be measured with the next variant. Then
    /// the tags: frames of the wrong pattern fail it too.
    fn finish(self: Box<Self>, _: &[Sample]) -> Result<()> {
        if let Setup::Peer(g) = self.setup {
            g.detach()?;
        }
        self.tags.map_or(Ok(()), |t| t.check())
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
            (&["--routes", "/nonexistent/table.txt"][..], "--routes /nonexistent/table.txt: cannot read it"),
            (&["--ipv6", "--size", "64"][..], "IPv6"),
        ] {
            let e = format!("{:#}", opts(args).check(cpus).unwrap_err());
            assert!(e.contains(want), "{e} lacks {want}");
        }
        assert!(opts(&[]).check(cpus).is_ok());
        assert!(driver::parse_options::<Router>(&["--size", "64,x"]).is_err());
    }

    #[test]
    fn vlan_patterns_sweep_and_are_left_out_untagged() {
        let p = driver::points(&opts(&["--vlan", "none,both"]));
        assert_eq!(p.len(), 2);
        assert_eq!(serde_json::to_string(&p[1]).unwrap(), r#"{"size":64,"flows":4,"ipv6":false,"routes":0,"queues":1,"netfilter":false,"vlan":"both"}"#);
        let swept = opts(&["--vlan", "none,both"]).params();
        assert_eq!(params::label(&swept, &p[1]), "64 B, 4 flows, IPv4, tagged in and out");
        assert_eq!(params::label(&swept, &p[0]), "64 B, 4 flows, IPv4");
        assert!(!opts(&[]).params().iter().any(|q| q.name == "vlan"), "untagged: vlan is not a described parameter");
        assert_eq!(Pattern::of(&p[1]).unwrap(), Pattern::Both);
        // --vlan none alone: points and recorded options as they always were.
        assert!(driver::points(&opts(&["--vlan", "none"])).iter().all(|p| p.get("vlan").is_none()));
        let record = |a: &[&str]| serde_json::to_value(opts(a)).unwrap();
        assert!(record(&[]).get("vlan").is_none());
        assert_eq!(record(&["--vlan", "in,out"])["vlan"], serde_json::json!(["in", "out"]));
    }

    #[test]
    fn tagged_patterns_need_802_1q_and_room_for_the_tag() {
        let cpus = Cpus { gen: 0, count: 2 };
        for (args, want) in
            [(&["--vlan", "in,in"][..], "--vlan: in named twice"), (&["--vlan", "both", "--ipv6", "--size", "66,128"][..], "--size 66: tagged IPv6 UDP")]
        {
            let e = format!("{:#}", opts(args).check(cpus).unwrap_err());
            assert!(e.contains(want) && !e.contains('\n'), "{args:?}: {e}");
        }
        assert!(driver::parse_options::<Router>(&["--vlan", "in,qinq"]).unwrap_err().to_string().contains("none, in, out or both"));
        assert!(opts(&["--ipv6", "--size", "66", "--vlan", "none"]).check(cpus).is_ok(), "untagged: no tag to make room for");
        // The rest is the kernel's to say: refused in one line without 802.1Q.
        let r = opts(&["--vlan", "none,out"]).check(cpus);
        match xnf_core::features::Feature::Vlan.probe() {
            Ok(()) => r.unwrap(),
            Err(_) => {
                let e = format!("{:#}", r.unwrap_err());
                assert!(e.starts_with("--vlan out: this kernel has no 802.1Q support") && e.contains("only --vlan none runs here") && !e.contains('\n'), "{e}");
            }
        }
    }

    #[test]
    fn xdp_modes_sweep_and_are_left_out_when_native() {
        let p = driver::points(&opts(&["--xdp-mode", "native,skb"]));
        assert_eq!(p.len(), 2);
        assert_eq!((mode_of(&p[0]), mode_of(&p[1])), (XdpMode::Native, XdpMode::Skb));
        assert_eq!(params::label(&opts(&["--xdp-mode", "native,skb"]).params(), &p[1]), "64 B, 4 flows, IPv4, generic XDP");
        assert!(driver::points(&opts(&[])).iter().all(|p| p.get("xdp-mode").is_none()), "native alone: points as they were");
        assert!(serde_json::to_value(opts(&[])).unwrap().get("xdp_mode").is_none());
        let e = format!("{:#}", opts(&["--xdp-mode", "skb,skb"]).check(Cpus { gen: 1, count: 2 }).unwrap_err());
        assert!(e.contains("--xdp-mode: skb named twice"), "{e}");
        assert!(driver::parse_options::<Router>(&["--xdp-mode", "hw"]).is_err());
    }

    #[test]
    fn flows_spread_over_destinations_keep_their_count() {
        assert_eq!(spread(10000, 20000), 10000);
        assert_eq!(spread(10000, 3000), 2500);
        assert_eq!(spread(7, 5), 1);
        assert_eq!(spread(1, 0), 1);
    }

    #[test]
    fn variants_resolve_to_built_ins_and_peers() {
        let peer = "fwd=xnf router attach {in} {out} --fib direct --no-follow;xnf router detach {in} {out}";
        let r = opts(&["--variants", "kernel, xnf-direct,fwd,dut-drop", "--peer", peer]);
        let names: Vec<String> = r.resolve().unwrap().iter().map(VariantName::name).collect();
        assert_eq!(names, ["kernel", "xnf-direct", "fwd", "dut-drop"]);
        assert!(matches!(r.resolve().unwrap()[1], Variant::Xnf(_, o) if o.fib == FibMode::Direct));
        assert_eq!(r.ratios(), [("xnf-direct", "kernel"), ("xnf-direct", "fwd")]);
        // The default: the kernel, what `xnf router attach` attaches, dut-drop.
        let d = opts(&[]);
        assert_eq!(d.resolve().unwrap(), [Variant::Kernel, Variant::Xnf("xnf", router_options(FibMode::default())), Variant::DutDrop]);
        assert_eq!(d.ratios(), [("xnf", "kernel")]);
        let lean = opts(&["--variants", "xnf-lean"]).resolve().unwrap();
        assert_eq!(lean, [Variant::Xnf("xnf-lean", AttachOptions { no_bytes: true, ..router_options(FibMode::default()) })]);
        // Every router variant against the kernel (first) and each peer;
        // the route cache (xnf) also against full lookups (xnf-full).
        let r = opts(&["--variants", "xdp-forward,xnf,kernel,xnf-full", "--xdp-forward", "/bin/true"]);
        assert_eq!(r.ratios(), [("xnf", "kernel"), ("xnf", "xdp-forward"), ("xnf-full", "kernel"), ("xnf-full", "xdp-forward"), ("xnf", "xnf-full")]);
        let Variant::Peer(p) = &r.resolve().unwrap()[0] else { panic!("xdp-forward is a peer") };
        // The ceiling: routers and peers against it, the cache against full lookups.
        let r = opts(&["--variants", "xnf,fwd,dut-redirect,xnf-full,xnf-lean", "--peer", peer]);
        assert_eq!(r.resolve().unwrap()[2], Variant::DutRedirect);
        assert_eq!(
            r.ratios(),
            [
                ("xnf", "fwd"),
                ("xnf-full", "fwd"),
                ("xnf-lean", "fwd"),
                ("xnf", "xnf-full"),
                ("xnf-lean", "xnf-full"),
                ("xnf", "dut-redirect"),
                ("xnf-full", "dut-redirect"),
                ("xnf-lean", "dut-redirect"),
                ("fwd", "dut-redirect")
            ]
        );
        // Without full lookups asked, nothing to compare the cache with.
        assert_eq!(opts(&["--variants", "xnf,xnf-lean,kernel"]).ratios(), [("xnf", "kernel"), ("xnf-lean", "kernel")]);
        assert!(p.attach.starts_with("/bin/true load") && p.attach.contains("--fib-mode full"), "{}", p.attach);
    }

    #[test]
    fn bad_variants_and_peers_are_refused_with_one_line() {
        let cpus = Cpus { gen: 0, count: 2 };
        for (args, want) in [
            (&["--variants", "bogus"][..], "no variant `bogus`"),
            (&["--variants", "kernel,kernel"][..], "kernel named twice"),
            (&["--variants", "xnf", "--peer", "kernel=a;b"][..], "--peer kernel: a built-in variant"),
            // The old names of the route cache's variants say the new ones.
            (&["--variants", "kernel,xnf-cache"][..], "--variants: `xnf-cache` is now `xnf` (what `xnf router attach` attaches; `xnf-full` is --fib full)"),
            (&["--variants", "xnf-cache-lean"][..], "--variants: `xnf-cache-lean` is now `xnf-lean`"),
            (&["--variants", "xdp-forward", "--peer", "xdp-forward=a;b"][..], "--peer xdp-forward: a built-in variant"),
            (&["--variants", "f", "--peer", "f=a;b", "--peer", "f=c;d"][..], "--peer f: defined twice"),
            (&["--peer", "f=a;b"][..], "--peer f: not in --variants"),
            (&["--variants", "xdp-forward-direct", "--xdp-forward", "/nonexistent/xdp-forward"][..], "run scripts/peers.sh"),
        ] {
            let e = format!("{:#}", opts(args).check(cpus).unwrap_err());
            assert!(e.contains(want) && !e.contains('\n'), "{args:?}: {e}");
        }
        // Which is true while the router's default is the route cache.
        assert_eq!(FibMode::default(), FibMode::Cache, "`xnf-cache` is now `xnf`: say otherwise in renamed()");
        // Definitions are refused as the command line is parsed.
        for bad in ["f=a", "f=load {dev};b", "f= ;b"] {
            assert!(driver::parse_options::<Router>(&["--peer", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists_parse_and_name_the_bad_element() {
        assert_eq!(opts(&["--size", "64, 128,imix"]).sizes(), vec![64, 128, 0]);
        // Unless given, the smallest UDP frame of the family (and tag).
        let default = |a: &[&str]| opts(a).sizes();
        assert_eq!(
            (default(&[]), default(&["--ipv6"]), default(&["--ipv6", "--vlan", "none,in"]), default(&["--vlan", "both"])),
            (vec![64], vec![66], vec![70], vec![64])
        );
        assert!(parse_item::<u32>("-5").unwrap_err().contains("`-5`"));
        assert_eq!(netfilter_points("both").unwrap().0, vec![false, true]);
        assert!(netfilter_points("maybe").is_err());
    }
}
