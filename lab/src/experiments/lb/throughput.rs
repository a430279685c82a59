//! `xnf lab lb`'s throughput part: gen → dut → the backends, dut balancing one VIP over them several ways,
//! alternated within each run by the lab's driver — `xnf lb` in each of its modes (ipip, gue, dsr), Katran's data
//! plane (`katran`, built by scripts/peers.sh --katran DIR; [`super::katran`]) and the kernel with nftables DNAT
//! (`jhash` of the client's address and port, or `numgen` round robin) and forwarding. `xdp-floor` balances nothing:
//! the lab's actions program sends every frame on the way the path does (MACs swapped and XDP_TX, or a devmap
//! redirect to the first backend's port), the most any XDP variant can reach on this path and CPU.
//!
//! **Topology, `--path redirect`** (the default). The built-in line (gen → dut → sink, whose sink stays idle) plus
//! one namespace per backend, each on its own veth pair from dut (`dut:bkI` ↔ `beI:be`, 198.18.(10+I).0/24 or
//! 2001:db8:1II::/64, MTU 1600 so that a 1518-byte frame still fits once encapsulated), counted and dropped by the
//! lab's XDP sink there (an encapsulated packet needs no decapsulation to be counted). Every variant takes the same
//! path out: one veth crossing into the backend's namespace. `xnf lb` is attached to dut's ingress and to every
//! backend port and redirects to the backend's port (the route its lookup finds); the kernel variants forward to
//! the same port after DNAT. DSR needs the backend on the segment of dut's egress: each backend's veth is that
//! segment, its MAC in dut's neighbour table (permanent entries, as for the kernel's forwarding). Katran has no
//! redirect: refused here.
//!
//! **Topology, `--path tx`** (the XDP paper's §5.3 set-up). The backends are behind dut's ingress: dut routes their
//! prefixes via gen (gen's MAC a permanent neighbour), and gen's port runs the lab's sink instead of XDP_PASS. Every
//! variant sends back out of the port the packet came in by: xnf lb and Katran with XDP_TX, the kernel by
//! forwarding (ICMP redirects off). DSR is refused: its backends must be on dut's segment.
//!
//! **Traffic.** TCP ACK segments (or UDP datagrams) to VIP:port from `--flows` distinct clients: up to 1,024
//! addresses from 198.19.1.0 (or 2001:db8:c000::), more flows by source ports; dut routes the clients' prefix back to
//! gen. Each flow sends the same number of packets, so a backend's share of the packets is its share of the flows.
//!
//! **What is counted.** Delivered = the sum of the backends' sinks (on the tx path, gen's sink). Per backend, the
//! full-speed interval's packets (the balance, in the results' `details.backends`; on the tx path Katran's own
//! per-real counters, one share for the others). A run of an `xnf-*` variant in which the lb handed packets to
//! dut's kernel, or dut's kernel forwarded them, is refused: it would be the kernel's rate under xnf's name. `xnf lb`
//! runs with its route cache kept, as the daemon keeps it ([`super::setup::LbGuard`]).
//!
//! **Queues** (`--queues N`, a list sweeps, as for the router): every veth of the topology gets N receive and
//! transmit queues and the generator runs on CPUs 0..N-1, one thread per queue (one queue: on `--cpu`, default the
//! last); the topology is built again when the count changes (the driver's sweep changes it slowest). On veth every
//! stage runs in softirq on the sending CPU, so each CPU carries its queue's share down the whole path; that it did
//! is checked at every full-speed interval ([`super::balance`]). The lb's connection table is one hash with LRU lists
//! per CPU (a flow's entry, made on one CPU, is found from the other), Katran's one LRU per CPU (each CPU learns the
//! flows it sees), conntrack is shared; every counter read (xnf lb's, Katran's per real, the sinks') is per CPU and
//! summed over all of them.

use std::cell::RefCell;
use std::net::IpAddr;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use xnf_netns::Netns;
use xnf_packet::{PacketBuilder, TcpFlags};

use super::balance::{self, distinct, BackendShare, RunCounts, Spread};
use super::setup::{self, Family, LbGuard, Mode, NftGuard, Pick, Proto, MAX_BACKENDS, MAX_SOURCES};
use crate::engine::driver::{variant_name, Cpus, Experiment, Running};
use crate::engine::measure::{self, Counters};
use crate::engine::params::{self, Axis, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::{Results, Sample};
use crate::engine::testrun::{self, Verdict, XdpContext};
use crate::engine::topology::{BuiltTopology, FunctionKind, FunctionSpec, LinkSpec, NamespaceSpec, NeighbourSpec, TopologySpec};
use crate::engine::{nft, LabAttachment};
use crate::experiments::router::{parse_item, parse_size};
use crate::programs::actions::ActionKind;
use crate::programs::gen::GenConfig;

/// Most source ports per client address (1024 … 65534).
const MAX_PORTS: u32 = 64511;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// `xnf lb`, IPv4 in IPv4 to the backend.
    XnfIpip,
    /// `xnf lb`, IPv4 in UDP (GUE) to the backend.
    XnfGue,
    /// `xnf lb`, direct server return: the frame as it came, to the backend's MAC.
    XnfDsr,
    /// nftables DNAT to `jhash ip saddr . sport mod N`, forwarded by dut's kernel.
    NftJhash,
    /// nftables DNAT to `numgen inc mod N` (round robin over new connections), forwarded by dut's kernel.
    NftNumgen,
    /// Katran's data plane (scripts/peers.sh --katran DIR), IP in IP with XDP_TX: `--path tx` only.
    Katran,
    /// No balancing: the least an XDP program that sends every frame on costs on this path (the lab's actions
    /// program: MACs swapped and XDP_TX on `--path tx`, a devmap redirect to the first backend's port on
    /// `--path redirect`). The ceiling of every XDP variant's rate here.
    XdpFloor,
}

/// Where the backends are from dut: the two paths of the XDP paper's load balancer (§5.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    /// Each backend behind a port of its own: the balanced packet leaves by a redirect (the kernel: a forward).
    #[default]
    Redirect,
    /// Behind dut's ingress, through a router on gen's side (the seed's set-up): XDP_TX back out where it came in.
    Tx,
}

impl Variant {
    fn xnf_mode(self) -> Option<Mode> {
        match self {
            Variant::XnfIpip => Some(Mode::Ipip),
            Variant::XnfGue => Some(Mode::Gue),
            Variant::XnfDsr => Some(Mode::Dsr),
            _ => None,
        }
    }

    /// Whether the variant is the kernel's (nftables DNAT, then forwarding).
    fn nft(self) -> bool {
        matches!(self, Variant::NftJhash | Variant::NftNumgen)
    }
}

/// `xnf lab lb`'s throughput options; every list is a sweep.
#[derive(Args, Debug, Default, Serialize)]
pub struct Throughput {
    /// Backends of the service (one namespace and veth pair each, 1..=64); a list sweeps, e.g. 2,4,16.
    #[arg(long, default_value = "4", value_delimiter = ',', value_parser = parse_item::<u32>, value_name = "N[,N...]")]
    pub backends: Vec<u32>,
    /// Flows: distinct clients (up to 1,024 addresses, then source ports of each); a list sweeps, e.g. 1024,100000.
    #[arg(long, default_value = "1024", value_delimiter = ',', value_parser = parse_item::<u32>, value_name = "N[,N...]")]
    pub flows: Vec<u32>,
    /// Frame sizes on the wire, FCS included (64..=1518), or imix; a list sweeps.
    #[arg(long = "size", default_value = "64", value_delimiter = ',', value_parser = parse_size, value_name = "BYTES|imix[,...]")]
    pub sizes: Vec<u32>,
    /// RX/TX queues per veth = generator CPUs (CPUs 0..N-1; one queue: --cpu); a list sweeps, e.g. 1,2.
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = parse_item::<u32>, value_name = "N[,N...]")]
    pub queues: Vec<u32>,
    /// The service's protocol, and the traffic's (TCP: ACK segments of established connections).
    #[arg(long, value_enum, default_value_t = Proto::Tcp)]
    pub proto: Proto,
    /// The service's port.
    #[arg(long, default_value_t = 80)]
    pub port: u16,
    /// Entries of the lb's Maglev table (prime; here and in the disruption part).
    #[arg(long, default_value_t = xnf_lb::DEFAULT_TABLE_SIZE)]
    pub table_size: u32,
    /// Variants to compare (`katran` needs scripts/peers.sh --katran DIR and --path tx; `xdp-floor` balances nothing: the path's ceiling).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "xnf-ipip,xnf-gue,xnf-dsr,nft-jhash,nft-numgen")]
    pub variants: Vec<Variant>,
    /// Where the backends are: behind ports of their own (redirect) or behind dut's ingress (tx).
    #[arg(long, value_enum, default_value_t = Path::Redirect)]
    pub path: Path,
    /// The address family of the VIP, the backends and the clients (Katran: ip6ip6 for IPv6 reals).
    #[arg(long, value_enum, default_value_t = Family::Ipv4)]
    pub family: Family,
    /// Also each XDP variant's own cost: dut's attached program run by BPF_PROG_TEST_RUN over flow 0's frame once
    /// its connection is known (the median of 100,000 calls of one run, on the generating CPU), in the notes.
    #[arg(long)]
    pub cost: bool,
    /// Program costs measured, in the order measured.
    #[arg(skip)]
    #[serde(skip)]
    costs: RefCell<Vec<ProgramCost>>,
    /// Packets per backend of every full-speed interval, in the order measured.
    #[arg(skip)]
    #[serde(skip)]
    shares: RefCell<Vec<BackendShare>>,
}

/// One variant's program cost at one point (`--cost`).
#[derive(Clone, Debug, Serialize)]
pub struct ProgramCost {
    pub variant: String,
    pub point: Point,
    /// The program the kernel runs on dut's ingress (for xnf: the entry, tail-calling the lb stage).
    pub program: String,
    /// Nanoseconds per run, the median of the calls.
    pub ns: u32,
}

/// dut's program on `din`, run over `frame` by BPF_PROG_TEST_RUN one run per call (a run rewrites the frame, and the
/// kernel runs a repeat over what the last run left) 100,000 times on `cpu`, after one call that makes the flow's
/// connection-table entry; the verdict must be `want` every time. The median of the kernel's per-call durations,
/// which include one clock read (the same for every program).
fn program_cost(dut: &Netns, din: &str, frame: Vec<u8>, cpu: usize, want: Verdict) -> Result<(String, u32)> {
    let din = din.to_string();
    dut.run(move || -> Result<(String, u32)> {
        testrun::pin_thread(cpu)?;
        let ifindex = xnf_netns::netlink::link_by_name(&din)?.ifindex;
        let prog = testrun::Program::open(testrun::attached(ifindex)?)?;
        let ctx = XdpContext { ingress_ifindex: ifindex, rx_queue_index: 0 };
        let mut ns = Vec::with_capacity(COST_CALLS);
        for i in 0..=COST_CALLS {
            let r = prog.run(&frame, ctx, 1)?;
            if r.verdict != want {
                // xnf lb's counters say why (none for Katran: its maps are not ours to read).
                let why = xnf_lb::counters().map(|c| setup::nonzero(&c)).unwrap_or_default();
                bail!("--cost: {} answered {} for flow 0, not {} {why}", prog.name, r.verdict.name(), want.name());
            }
            if i > 0 {
                ns.push(r.ns);
            }
        }
        ns.sort_unstable();
        Ok((prog.name.clone(), ns[ns.len() / 2]))
    })?
}

/// Calls of `--cost` per variant and point.
const COST_CALLS: usize = 100_000;

/// The backend-count parameter.
fn backends_param() -> Param {
    Param {
        name: "backends".into(),
        title: "backends".into(),
        axis: "backends of the service".into(),
        scale: Axis::Linear,
        unit: ("backend".into(), "backends".into()),
        names: Vec::new(),
        quiet: Vec::new(),
        apart: Vec::new(),
    }
}

/// The largest divisor of `flows` that is at most `max`: client addresses, the rest of the flows by source ports.
pub fn sources(flows: u32, max: u32) -> u32 {
    (1..=flows.min(max)).rev().find(|d| flows.is_multiple_of(*d)).unwrap_or(1)
}

impl Throughput {
    fn most_backends(&self) -> u32 {
        self.backends.iter().copied().max().unwrap_or(1)
    }
}

impl crate::engine::driver::VariantName for Variant {
    fn name(&self) -> String {
        crate::engine::driver::variant_name(self)
    }
}

impl Experiment for Throughput {
    type Variant = Variant;
    const NAME: &'static str = "lb";

    fn places_dut(&self) -> bool {
        true
    }

    fn params(&self) -> Vec<Param> {
        vec![params::size(), params::flows(), backends_param(), params::queues()]
    }

    /// Queues change slowest: the topology is built once per queue count.
    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![
            ("queues", params::values(&self.queues)),
            ("size", params::values(&self.sizes)),
            ("flows", params::values(&self.flows)),
            ("backends", params::values(&self.backends)),
        ]
    }

    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn ratios(&self) -> Vec<(&'static str, &'static str)> {
        let mut r = vec![("xnf-ipip", "katran"), ("xnf-ipip", "xdp-floor"), ("katran", "xdp-floor")];
        for n in ["xnf-ipip", "xnf-gue", "xnf-dsr", "katran"] {
            for d in ["nft-jhash", "nft-numgen"] {
                r.push((n, d));
            }
        }
        r
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        measure::check_sizes(&self.sizes, false)?;
        measure::check_queues(&self.queues, cpus.count)?;
        if self.family.v6() {
            let (least, l4) = if self.proto == Proto::Tcp { (78, 20) } else { (66, 8) };
            if let Some(s) = self.sizes.iter().find(|&&s| s != 0 && s < least) {
                bail!(
                    "--size {s}: IPv6 {} needs at least {least} bytes on the wire (14 + 40 + {l4} + FCS): give --size {least} or more",
                    self.proto.name().to_uppercase()
                );
            }
        }
        ensure!(!self.backends.is_empty() && !self.flows.is_empty(), "--backends and --flows: give at least one value each");
        for &b in &self.backends {
            ensure!((1..=MAX_BACKENDS).contains(&b), "--backends {b}: 1..={MAX_BACKENDS} (each is a namespace with a /24 of its own)");
            ensure!(b <= self.table_size, "--backends {b}: more than the --table-size {} entries", self.table_size);
        }
        for &f in &self.flows {
            ensure!(f >= 1, "--flows {f}: at least 1");
            let ports = f / sources(f, MAX_SOURCES);
            ensure!(
                ports <= MAX_PORTS,
                "--flows {f}: made of {} client addresses × {ports} source ports, more ports than 1024..65535 holds: give a multiple of 1024 (at most {})",
                sources(f, MAX_SOURCES),
                MAX_SOURCES * MAX_PORTS
            );
        }
        xnf_lb::maglev::check_size(self.table_size).context("--table-size")?;
        if self.variants.contains(&Variant::Katran) {
            ensure!(self.path == Path::Tx, "katran: its data plane sends only with XDP_TX (no redirect): measure it with --path tx");
            super::katran::object()?;
        }
        if self.path == Path::Tx && self.variants.contains(&Variant::XnfDsr) {
            bail!("xnf-dsr: with --path tx the backends are behind a router on gen's side, and DSR needs them on dut's segment: leave it out or use --path redirect");
        }
        ensure!(self.port != 0, "--port 0: give the service's port, 1..=65535");
        if self.variants.iter().any(|v| v.nft()) {
            nft::require("the nft-jhash and nft-numgen variants")?;
            let most = self.flows.iter().copied().max().unwrap_or(0);
            let max: u64 = std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(u64::MAX);
            ensure!(
                u64::from(most) <= max,
                "--flows {most}: more than conntrack holds here (net.netfilter.nf_conntrack_max = {max}); the nft variants would drop new flows"
            );
        }
        Ok(())
    }

    /// One namespace per backend on its own link from dut (see the module's doc); conntrack liberal about TCP
    /// windows, so the generator's repeated segments of a flow are never marked invalid (and left un-NATed).
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let roles = spec.roles.clone().context("the topology needs a [roles] table")?;
        let dut = roles.dut_in.split(':').next().unwrap_or_default().to_string();
        let ns = spec.namespaces.iter_mut().find(|n| n.name == dut).with_context(|| format!("the topology has no namespace {dut} for its dut_in role"))?;
        ns.forwarding = true;
        ns.sysctl.insert("net.netfilter.nf_conntrack_tcp_be_liberal".into(), "1".into());
        if self.path == Path::Tx {
            // The kernel variants forward out of the port they came in by: no ICMP redirects to gen for each flow.
            ns.sysctl.insert("net.ipv4.conf.all.send_redirects".into(), "0".into());
            return count_at_gen(spec, &roles.gen);
        }
        for i in 1..=self.most_backends() {
            let be = format!("be{i}");
            spec.namespaces.push(NamespaceSpec { name: be.clone(), forwarding: false, sysctl: Default::default() });
            let f = self.family;
            let len = if f.v6() { 64 } else { 24 };
            spec.links.push(LinkSpec {
                a: format!("{dut}:bk{i}"),
                b: format!("{be}:be"),
                queues: None,
                mtu: Some(1600),
                a_addr: vec![f.gateway_cidr(i)],
                b_addr: vec![format!("{}/{len}", f.backend(i))],
                a_existing: None,
                b_existing: None,
            });
            spec.neighbours.push(NeighbourSpec { ns: dut.clone(), ip: f.backend(i).to_string(), dev: format!("bk{i}"), mac: format!("{be}:be") });
            spec.functions.push(FunctionSpec { ns: be, kind: FunctionKind::Sink, interfaces: vec!["be".into()] });
        }
        Ok(())
    }

    /// dut routes the clients back to gen, and on the tx path the backends' prefixes too, gen's MAC known up front.
    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let gen = t.addr(&roles.gen, self.family.v6())?.to_string();
        dut.route_add(self.family.client_prefix(), Some(&gen), Some(&din)).context("routing the clients' prefix back to gen in dut")?;
        if self.path == Path::Tx {
            dut.neigh_add(&gen, t.mac(&roles.gen)?, &din).context("giving dut gen's MAC")?;
            for i in 1..=self.most_backends() {
                dut.route_add(&self.family.backend_net(i), Some(&gen), Some(&din)).context("routing a backend's prefix to gen in dut")?;
            }
        }
        Ok(())
    }

    fn at_point<'a>(&'a self, t: &'a BuiltTopology, p: &Point, _: &Progress) -> Result<crate::engine::driver::AtPoint<'a>> {
        let flows = p.u32("flows")?;
        let n = sources(flows, MAX_SOURCES);
        let mut at = crate::engine::driver::AtPoint::traffic(traffic(t, p, self.family, self.proto, self.port)?);
        let ports = flows / n;
        at.notes.push(format!(
            "{flows} flows: {n} client address{} × {ports} source port{}",
            if n == 1 { "" } else { "es" },
            if ports == 1 { "" } else { "s" }
        ));
        Ok(at)
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, p: &Point, v: Variant, cpus: Cpus, pg: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let n = p.u32("backends")?;
        let backends: Vec<IpAddr> = (1..=n).map(|i| self.family.backend(i)).collect();
        let sinks = match self.path {
            Path::Redirect => (1..=n).map(|i| t.attachment(&format!("be{i}:be"))).collect::<Result<Vec<_>>>()?,
            Path::Tx => vec![t.attachment(&roles.gen)?],
        };
        let (mut lb, mut kernel, mut katran, mut floor) = (None, None, None, None);
        match v.xnf_mode() {
            None if v == Variant::XdpFloor => {
                let (kind, to) = match self.path {
                    Path::Tx => (ActionKind::Tx, String::new()),
                    Path::Redirect => (ActionKind::Redirect, crate::engine::topology::ifname("bk1")),
                };
                floor = Some(LabAttachment::action(dut, &din, kind, &to, 0)?);
            }
            None if v == Variant::Katran => {
                let gateway = t.mac(&roles.gen)?;
                let svc = super::katran::Service { vip: self.family.vip(), port: self.port, proto: self.proto.number(), reals: backends.clone(), gateway };
                katran = Some(super::katran::KatranGuard::attach(dut, &din, svc)?);
            }
            Some(mode) => {
                let mut ifaces = vec![din.clone()];
                if self.path == Path::Redirect {
                    ifaces.extend((1..=self.most_backends()).map(|i| crate::engine::topology::ifname(&format!("bk{i}"))));
                }
                let file = setup::service_file(self.family.vip(), self.proto, self.port, mode, self.table_size, &backends);
                let (g, warnings) = LbGuard::new(dut, &ifaces, &file)?;
                warnings.iter().for_each(|w| pg.println(&format!("xnf lb: {w}")));
                lb = Some(g);
            }
            None => {
                let pick = if v == Variant::NftJhash { Pick::Jhash } else { Pick::Numgen };
                // dut's ingress must run XDP to receive the generator's XDP_TX-ed frames; this one passes them up.
                let pass = LabAttachment::pass(dut, &din)?;
                let rules = NftGuard::load(dut, self.family, &setup::nft_ruleset(self.family, self.proto, self.port, pick, &backends))?;
                kernel = Some((rules, pass));
            }
        }
        if self.cost && kernel.is_none() {
            let want = if self.path == Path::Tx { Verdict::Tx } else { Verdict::Redirect };
            let (program, ns) = program_cost(dut, &din, traffic(t, p, self.family, self.proto, self.port)?.template, cpus.gen, want)?;
            self.costs.borrow_mut().push(ProgramCost { variant: variant_name(&v), point: p.clone(), program, ns });
        }
        let queues = p.u32("queues")?;
        let gen_cpus = measure::gen_cpus(cpus.gen, queues);
        // Counted from here on (after --cost's test runs, which dut's program counts but no sink sees).
        let delivered = sinks.iter().map(|s| s.packets()).sum::<Result<u64>>()?;
        let per_real = katran.as_ref().map(|k| k.per_real()).transpose()?.unwrap_or_default();
        let sent = lb.as_ref().map(|g| g.counters().map(|c| lb_sent(&c))).transpose()?;
        let start = Start { delivered, per_real, sent };
        Ok(Box::new(LbRun {
            exp: self,
            v,
            point: p.clone(),
            dut,
            din,
            sinks,
            queues,
            gen_cpus,
            start,
            readings: RefCell::new(Vec::new()),
            lb,
            kernel,
            katran,
            floor,
        }))
    }

    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        if self.path == Path::Tx {
            res.notes.push("path tx: the backends are behind dut's ingress (routed via gen); every variant sends back out of dut's ingress, counted by a sink on gen's port.".into());
        }
        if self.variants.contains(&Variant::Katran) {
            res.notes.push(format!("katran: {} ({})", super::katran::object()?.display(), super::katran::build_note()));
        }
        res.notes.push(format!(
            "veth: the generator, dut and the backends' sinks run in softirq on the generating CPU (CPU {}; with N queues CPUs 0..N-1, one generator each, whose frames take the queue of its number); rates are of the whole path.",
            cpus.gen
        ));
        res.notes.push(
            "nft-jhash and nft-numgen differ only in a connection's first packet (NAT rules see no other): at steady state both are conntrack's lookup, the NAT rewrite and a kernel forward per packet.".into(),
        );
        let costs = self.costs.take();
        for (v, p) in distinct(&costs, |c| (&c.variant, &c.point)) {
            let ns: Vec<String> = costs.iter().filter(|c| c.variant == v && c.point == p).map(|c| c.ns.to_string()).collect();
            res.notes.push(format!(
                "program cost by test run, {v}, {}: {} ns per run (cached flow; median of 100,000 test runs, one clock read included)",
                res.label(&p),
                ns.join(", ")
            ));
        }
        res.details.insert("program_cost".into(), serde_json::to_value(&costs)?);
        let shares = self.shares.take();
        balance::spread_notes(&shares, |q| measure::gen_cpus(cpus.gen, q), res);
        balance::count_notes(&shares, res);
        for (v, p) in distinct(&shares, |s| (&s.variant, &s.point)) {
            let of: Vec<&BackendShare> = shares.iter().filter(|s| s.variant == v && s.point == p).collect();
            if let Some(s) = of.iter().find(|s| s.packets.contains(&0)) {
                res.notes.push(format!("{v}, {}: a backend received nothing in a full-speed interval ({:?})", res.label(&p), s.packets));
            }
        }
        res.details.insert("backends".into(), serde_json::to_value(&shares)?);
        Ok(())
    }

    fn print(&self, r: &Results) {
        balance::print_balance(r);
    }
}

/// On the tx path the balanced packets come back to gen: its port counts them with the lab's sink instead of
/// passing them up.
fn count_at_gen(spec: &mut TopologySpec, gen: &str) -> Result<()> {
    let (ns, dev) = gen.split_once(':').context("roles.gen is not namespace:interface")?;
    let f = spec
        .functions
        .iter_mut()
        .find(|f| f.ns == ns && f.interfaces.iter().any(|i| i == dev))
        .with_context(|| format!("--path tx: the topology runs no function on gen's port {gen} to turn into a sink"))?;
    ensure!(f.interfaces.len() == 1, "--path tx: the function on {gen} serves other ports too");
    f.kind = FunctionKind::Sink;
    Ok(())
}

/// The generator's frames at `p`: TCP ACK segments (seq 1, ack 1) or UDP datagrams from `flows` clients to VIP:port,
/// addressed to dut's ingress MAC.
pub fn traffic(t: &BuiltTopology, p: &Point, family: Family, proto: Proto, port: u16) -> Result<GenConfig> {
    let roles = t.roles()?;
    let (size, flows) = (p.u32("size")?, p.u32("flows")?);
    let n = sources(flows, MAX_SOURCES);
    let (len, sizes) = match size {
        0 => (1514, crate::programs::gen::imix_sequence(if family.v6() { 74 } else { 60 })),
        s => (s as usize - 4, Vec::new()),
    };
    let b = PacketBuilder::ethernet(t.mac(&roles.gen)?, t.mac(&roles.dut_in)?).ip(family.client(0), family.vip());
    let b = match proto {
        Proto::Tcp => b.tcp(1024, port, TcpFlags::ACK).seq(1).ack(1),
        Proto::Udp => b.udp(1024, port),
    };
    let template = b.frame_len(len).try_build()?;
    let src_addrs = (0..n).map(|k| family.client(k)).collect();
    Ok(GenConfig { template, flows: flows / n, base_sport: 1024, sizes, src_addrs, ipv6: family.v6(), ..Default::default() })
}

/// A variant set up at a point for one run: `xnf lb` attached and applied, or nftables and the pass program.
struct LbRun<'a> {
    exp: &'a Throughput,
    v: Variant,
    point: Point,
    dut: &'a Netns,
    din: String,
    sinks: Vec<&'a LabAttachment>,
    /// Receive queues of dut's ingress, and the generator's CPUs.
    queues: u32,
    gen_cpus: Vec<usize>,
    /// The counters when the variant was set up.
    start: Start,
    /// At every reading of the probe: each backend's packets, dut's `Ip ForwDatagrams` and the spread over queues
    /// and CPUs; the first two bracket the full-speed interval (measured first).
    readings: RefCell<Vec<(Vec<u64>, u64, Spread)>>,
    lb: Option<LbGuard>,
    kernel: Option<(NftGuard<'a>, LabAttachment)>,
    katran: Option<super::katran::KatranGuard>,
    floor: Option<LabAttachment>,
}

/// The counters of a run when its variant is set up: the sinks', Katran's per real, xnf lb's packets sent.
struct Start {
    delivered: u64,
    per_real: Vec<u64>,
    sent: Option<u64>,
}

/// The packets xnf lb sent on (XDP_TX and redirects), summed over CPUs.
fn lb_sent(c: &xnf_lb::program::Counters) -> u64 {
    c[xnf_lb::program::Counter::Tx as usize] + c[xnf_lb::program::Counter::Redirect as usize]
}

impl Running for LbRun<'_> {
    fn counters(&self) -> Result<Counters<'_>> {
        Ok(Counters {
            dut_in: (self.dut, self.din.clone()),
            dut_out: None,
            received: Box::new(|| self.sinks.iter().map(|s| s.packets()).sum()),
            on_read: Some(Box::new(move || {
                let per = self.sinks.iter().map(|s| s.packets()).collect::<Result<Vec<_>>>()?;
                let forwarded =
                    if self.exp.family.v6() { self.dut.snmp()?.value("Ip6", "OutForwDatagrams")? } else { self.dut.snmp()?.value("Ip", "ForwDatagrams")? };
                let spread = Spread::read(self.dut, &self.din, self.queues, &self.sinks)?;
                self.readings.borrow_mut().push((per, forwarded, spread));
                Ok(())
            })),
            corunner: None,
            during: None,
        })
    }

    /// Keeps the full-speed interval's packets per backend; refuses an xnf run whose packets dut's kernel handled.
    fn finish(mut self: Box<Self>, samples: &[Sample]) -> Result<()> {
        let max = samples.first().context("no full-speed sample")?;
        let r = self.readings.take();
        ensure!(r.len() >= 2, "the backends' counters were read {} time(s) during the measurement", r.len());
        let mut packets: Vec<u64> = r[1].0.iter().zip(&r[0].0).map(|(b, a)| b - a).collect();
        let forwarded = r[1].1.saturating_sub(r[0].1);
        let spread = r[1].2.since(&r[0].2);
        spread.check(&self.gen_cpus)?;
        let limit = (max.received / 100).max(100);
        let (mut sent, mut ct_entries) = (None, None);
        if let Some(lb) = &self.lb {
            let c = lb.counters()?;
            sent = Some(lb_sent(&c) - self.start.sent.unwrap_or(0));
            ct_entries = Some(lb.ct_entries()?);
            let passed = c[xnf_lb::program::Counter::Pass as usize];
            if passed > limit || forwarded > limit {
                bail!(
                    "xnf lb handed {passed} packets to dut's kernel ({}) and the kernel forwarded {forwarded}, of {} delivered: the measurement would be of kernel forwarding",
                    setup::passed_reasons(&c),
                    max.received
                );
            }
        }
        if let Some(k) = &self.katran {
            // On the tx path one sink counts every backend's packets; Katran's own per-real counters split them.
            // They cover the whole run (all rates), so they give shares, not the interval's packets.
            packets = k.per_real()?.iter().zip(self.start.per_real.iter().chain(std::iter::repeat(&0))).map(|(b, a)| b - a).collect();
            sent = Some(packets.iter().sum());
            ensure!(!packets.contains(&0), "katran sent nothing to a real ({packets:?}): its ring or reals are not as loaded");
        }
        if self.floor.is_some() {
            // Everything goes one way (to gen, or to the first backend): one share, not a balance.
            packets = vec![packets.iter().sum()];
        }
        let mean = packets.iter().sum::<u64>() as f64 / packets.len().max(1) as f64;
        let max_over_mean = packets.iter().copied().max().unwrap_or(0) as f64 / mean.max(1.0);
        let variant = variant_name(&self.v);
        let Spread { queues, cpus } = spread;
        let run = RunCounts { delivered: self.sinks.iter().map(|s| s.packets()).sum::<Result<u64>>()? - self.start.delivered, sent, ct_entries };
        self.exp.shares.borrow_mut().push(BackendShare { variant, point: self.point.clone(), packets, max_over_mean, forwarded, queues, cpus, run });
        drop(self.lb.take());
        drop(self.kernel.take());
        drop(self.katran.take());
        drop(self.floor.take());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::driver;

    fn opts(args: &[&str]) -> Throughput {
        driver::parse_options(args).unwrap()
    }

    #[test]
    fn bad_options_are_refused_with_the_flag_named() {
        let cpus = Cpus { gen: 1, count: 2 };
        for (args, want) in [
            (&["--backends", "0"][..], "--backends 0"),
            (&["--backends", "65"][..], "--backends 65"),
            (&["--flows", "0"][..], "--flows 0"),
            (&["--flows", "100003"][..], "--flows 100003"),
            (&["--table-size", "65536"][..], "not prime"),
            (&["--port", "0"][..], "--port 0"),
            (&["--size", "63"][..], "--size 63"),
            (&["--family", "ipv6"][..], "--size 64: IPv6 TCP needs at least 78"),
        ] {
            let e = format!("{:#}", opts(args).check(cpus).unwrap_err());
            assert!(e.contains(want), "{args:?}: {e} lacks {want}");
        }
        assert!(opts(&["--variants", "xnf-ipip,xnf-gue,xnf-dsr"]).check(cpus).is_ok());
        let e = format!("{:#}", opts(&["--variants", "xnf-ipip,katran"]).check(cpus).unwrap_err());
        assert!(e.contains("katran: ") && e.contains("--path tx"), "{e}");
        let e = format!("{:#}", opts(&["--variants", "xnf-dsr", "--path", "tx"]).check(cpus).unwrap_err());
        assert!(e.starts_with("xnf-dsr: ") && e.contains("on dut's segment"), "{e}");
        assert!(opts(&["--variants", "xnf-ipip,nft-jhash", "--path", "tx"]).check(cpus).is_ok());
    }

    #[test]
    fn queues_are_checked_against_the_cpus_on_every_path_and_family() {
        let cpus = Cpus { gen: 1, count: 2 };
        for (args, want) in [
            (&["--queues", "3"][..], "--queues 3: must be 1..=2 (one generator CPU per queue; this machine has 2 CPUs)"),
            (&["--queues", "1,0"][..], "--queues 0: must be 1..=2"),
            (&["--queues", "2,3", "--path", "tx", "--variants", "xnf-ipip,nft-jhash"][..], "--queues 3"),
        ] {
            let e = format!("{:#}", opts(args).check(cpus).unwrap_err());
            assert!(e.starts_with(want) && !e.contains('\n'), "{args:?}: {e}");
        }
        assert!(driver::parse_options::<Throughput>(&["--queues", "1,x"]).unwrap_err().to_string().contains("`x`"));
        for args in [
            &["--queues", "1,2"][..],
            &["--queues", "2", "--path", "tx", "--variants", "xnf-ipip,xnf-gue,nft-jhash,nft-numgen"][..],
            &["--queues", "2", "--family", "ipv6", "--size", "78"][..],
            &["--queues", "2", "--family", "ipv6", "--size", "78", "--path", "tx", "--variants", "xnf-ipip,nft-jhash"][..],
        ] {
            opts(args).check(cpus).unwrap_or_else(|e| panic!("{args:?}: {e:#}"));
        }
        assert!(format!("{:#}", opts(&["--queues", "2"]).check(Cpus { gen: 0, count: 1 }).unwrap_err()).starts_with("--queues 2: must be 1..=1"));
    }

    #[test]
    fn points_carry_the_queues_which_change_slowest() {
        let t = opts(&["--queues", "1,2", "--backends", "2,4"]);
        let p = driver::points(&t);
        let order: Vec<(i64, i64)> = p.iter().map(|p| (p.int("queues").unwrap(), p.int("backends").unwrap())).collect();
        assert_eq!(order, [(1, 2), (1, 4), (2, 2), (2, 4)], "queues change slowest: the topology is built once per count");
        assert_eq!(serde_json::to_string(&p[3]).unwrap(), r#"{"size":64,"flows":1024,"backends":4,"queues":2}"#);
        assert_eq!(params::label(&t.params(), &p[3]), "64 B, 1024 flows, 4 backends, 2 queues");
        assert_eq!(params::label(&t.params(), &p[0]), "64 B, 1024 flows, 2 backends", "one queue, as labels always read");
        // Recorded with the options, and one queue by default.
        assert_eq!(serde_json::to_value(&t).unwrap()["queues"], serde_json::json!([1, 2]));
        assert!(driver::points(&opts(&[])).iter().all(|p| p.int("queues").unwrap() == 1));
    }

    #[test]
    fn flows_are_addresses_then_ports_and_points_carry_the_backends() {
        assert_eq!(sources(1024, 1024), 1024);
        assert_eq!(sources(100_000, 1024), 1000);
        assert_eq!(sources(10, 1024), 10);
        let t = opts(&["--backends", "2,4"]);
        let p = driver::points(&t);
        assert_eq!(p.len(), 2);
        assert_eq!(params::label(&t.params(), &p[1]), "64 B, 1024 flows, 4 backends");
        assert_eq!(t.ratios().len(), 11);
        assert_eq!(driver::variant_name(&Variant::NftNumgen), "nft-numgen");
    }
}
