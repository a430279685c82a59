//! `xnf lab lb`'s disruption part: F established flows through a service of N backends, one backend removed; which
//! flows change backend, with the connection table and without it, against what `xnf lb plan` expects.
//!
//! No timing, no sampling: the real `xnf lb` program, attached to dut's ingress and egress with its maps, decides
//! every flow. One TCP segment per flow is run through an instance of `lb.bpf.c` loaded on the applied
//! configuration's pinned maps (the ones the attached data plane uses), with `BPF_PROG_TEST_RUN` on dut's ingress,
//! and the backend is read from the outer destination of the IP-in-IP packet that comes out:
//!
//! 1. a SYN per flow under the first file: every flow gets its connection-table entry (and its backend);
//! 2. the second file, without one backend, is applied with `xnf lb apply` as an operator would;
//! 3. the flows' next segment, one of the two variants:
//!    - `with-table`: an ACK per flow — an established connection's next segment;
//!    - `without-table`: a SYN per flow — the lb consults the Maglev table afresh on every SYN, so this is where
//!      every flow would go if no entry existed (a restarted balancer, another instance behind ECMP, entries aged
//!      out).
//!
//! On the lab's one driver: the topology is the driver's (`--topology`, default `line`), dut's egress the lb's port
//! to the backends, whose prefix dut routes to the sink (nothing is sent: each frame is only run through the
//! program); each variant is measured from a freshly attached lb, alternated within each run, and measures itself
//! ([`Running::measure`]): no samples, its outcomes kept for [`Experiment::finish`], which writes the results'
//! `details.disruption` (the first run's; every later run must give the same, the notes say if one did not).
//!
//! A flow *moved* if its backend differs from step 1's. The removed backend's flows must all move; the others
//! that move are the collateral. The thread is pinned to one CPU (`--cpu`, default the last): the connection table
//! keeps an LRU list per CPU, and all flows must fit one CPU's share of it, or evictions would count as disruption.
//!
//! Beside the test runs, unless `--tcp-connections 0`: real TCP connections through the attached data plane to a
//! namespace per backend, the same change, and which connections break ([`super::disruption_tcp`]), in each
//! variant's run after its test runs, on an lb attached afresh; the results' `details.disruption.tcp`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use libbpf_rs::ProgramInput;
use serde::{Deserialize, Serialize};
use xnf_core::xdp::XdpContext;
use xnf_lb::flow::Flow;
use xnf_lb::plan::Table;
use xnf_lb::program::{Counter, LbProgram};
use xnf_netns::{Mac, Netns};
use xnf_packet::{MacAddr, PacketBuilder, TcpFlags};

use super::disruption_tcp::{self, Ends, TcpDisruption, TcpPart};
use super::setup::{self, LbGuard, Mode, Proto, VIP};
use crate::engine::driver::{variant_name, AtPoint, Cpus, Experiment, Measuring, Running, VariantName};
use crate::engine::measure::{Measured, Plan, Timing};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::Results;
use crate::engine::topology::{BuiltTopology, TopologySpec};

/// Most backends: addresses in 198.19.128.0/20.
pub const MAX_BACKENDS: u32 = 4000;
/// The backends' prefix, routed by dut to the sink.
const BACKENDS: &str = "198.19.128.0/20";
/// Client addresses (198.19.16.0/20); more flows by source ports.
const CLIENTS: u32 = 4096;
/// The service's port.
pub(super) const PORT: u16 = 80;

/// `xnf lab lb`'s disruption options.
#[derive(Args, Clone, Debug, Serialize)]
pub struct DisruptionArgs {
    /// Established flows (TCP connections) of the disruption part.
    #[arg(long, default_value_t = 100_000)]
    pub established: u32,
    /// Backends of the disruption part's service; one of them is removed.
    #[arg(long = "disruption-backends", default_value_t = 10)]
    pub disruption_backends: u32,
    /// The backend removed: its place in the service file (1 = the first).
    #[arg(long, default_value_t = 1)]
    pub remove: u32,
    /// Real TCP connections through the attached lb to a namespace per backend, measured beside the test runs (0:
    /// none).
    #[arg(long = "tcp-connections", default_value_t = 1000)]
    pub tcp_connections: u32,
}

impl DisruptionArgs {
    /// Checks the options, naming the flag at fault, before anything is built.
    pub fn check(&self) -> Result<()> {
        let n = self.disruption_backends;
        ensure!((2..=MAX_BACKENDS).contains(&n), "--disruption-backends {n}: 2..={MAX_BACKENDS} (one is removed, one at least must stay)");
        ensure!((1..=n).contains(&self.remove), "--remove {}: a backend's place in the file, 1..={n}", self.remove);
        ensure!(self.established >= 1, "--established 0: give the number of established flows, e.g. 100000");
        let room = ct_room_per_cpu()?;
        ensure!(
            u64::from(self.established) <= room,
            "--established {}: more flows than the lb's connection table keeps on one CPU ({room}); evictions would look like disruption",
            self.established
        );
        let (tcp, most) = (self.tcp_connections, disruption_tcp::MAX_CONNECTIONS);
        ensure!(tcp <= most, "--tcp-connections {tcp}: at most {most} (each holds two descriptors of the lab)");
        ensure!(
            tcp == 0 || n <= disruption_tcp::MAX_BACKENDS,
            "--disruption-backends {n}: the real TCP connections need a namespace per backend, at most {}; give --tcp-connections 0 to leave them out",
            disruption_tcp::MAX_BACKENDS
        );
        Ok(())
    }
}

/// Entries of the lb's connection table one CPU's LRU list holds (the map's size over the possible CPUs).
fn ct_room_per_cpu() -> Result<u64> {
    let cpus = libbpf_rs::num_possible_cpus().context("counting the possible CPUs")?;
    Ok(u64::from(xnf_lb::program::CT_ENTRIES) / cpus.max(1) as u64)
}

/// Backend `i` (1-based) of the disruption part's service.
pub(super) fn backend(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 128, 0)) + i)
}

/// Flow `i`: client 198.19.16.0 + i mod 4096, source port 1024 + i / 4096, to VIP:80 over TCP.
fn flow(i: u32) -> Flow {
    let src = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 16, 0)) + i % CLIENTS);
    Flow { src: IpAddr::V4(src), dst: IpAddr::V4(VIP), proto: xnf_lb::Proto::Tcp, sport: (1024 + i / CLIENTS) as u16, dport: PORT }
}

/// What one step did to the flows, against their backends after the first SYNs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Flows on another backend than before.
    pub moved: u64,
    /// Flows that were on the removed backend, and how many of them moved (all must).
    pub removed_flows: u64,
    pub removed_moved: u64,
    /// Flows whose backend stays, and how many of them moved anyway: the collateral.
    pub kept_flows: u64,
    pub collateral: u64,
    /// Flows per backend, in the file's order (the removed one's 0 after the change).
    pub per_backend: Vec<u64>,
    /// The busiest backend's flows over the mean of the backends serving.
    pub max_over_mean: f64,
    /// Flows whose backend is the one the control plane's model (`xnf_lb::flow`) gives for the file applied.
    pub model_agrees: u64,
    /// The lb's connection-table counters of the step: hits, misses, SYNs decided afresh, stale entries.
    pub ct_hit: u64,
    pub ct_miss: u64,
    pub ct_syn: u64,
    pub ct_stale: u64,
}

impl Outcome {
    pub fn moved_share(&self) -> f64 {
        self.moved as f64 / (self.removed_flows + self.kept_flows).max(1) as f64
    }

    /// Collateral over the flows whose backend stays: the figure the Maglev paper and the issue quote.
    pub fn collateral_share(&self) -> f64 {
        self.collateral as f64 / self.kept_flows.max(1) as f64
    }
}

/// What `xnf lb plan` expects of the change: shares of the hash space.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Planned {
    pub moved: f64,
    /// The removed backend's share (must move).
    pub removed: f64,
    /// Collateral over the kept share.
    pub collateral_of_kept: f64,
    /// The new table: the largest backend share over its ideal.
    pub balance_max: f64,
}

/// The disruption part's result (the results' `details.disruption`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Disruption {
    pub flows: u32,
    pub backends: u32,
    pub table_size: u32,
    pub removed: IpAddr,
    /// Runs that measured each variant (each from a fresh lb); all gave these outcomes unless the notes say otherwise.
    #[serde(default)]
    pub runs: u32,
    /// After the first SYNs, under the first file (`moved`, `collateral` are 0).
    pub before: Outcome,
    pub with_table: Outcome,
    pub without_table: Outcome,
    pub plan: Planned,
    /// The real TCP connections (`--tcp-connections`; absent with 0, and in files written before them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpDisruption>,
}

/// How the flows' segment after the change is sent: the driver's variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// An ACK per flow: the connection table holds every established flow.
    WithTable,
    /// A SYN per flow: the Maglev table decides afresh, as with no entry.
    WithoutTable,
}

impl VariantName for Step {
    fn name(&self) -> String {
        variant_name(self)
    }
}

/// One variant's run: its flows' placement before the change and after.
struct Kept {
    step: Step,
    run: u32,
    before: Outcome,
    after: Outcome,
}

/// The disruption part as the driver runs it: its options, the service files and what the control plane expects.
#[derive(Serialize)]
pub struct Part {
    #[serde(flatten)]
    args: DisruptionArgs,
    table_size: u32,
    /// Run without the throughput part: the common options for measuring rates are refused.
    #[serde(skip)]
    alone: bool,
    #[serde(skip)]
    files: [String; 2],
    /// Every backend, in the file's order, and the one removed (its index).
    #[serde(skip)]
    all: Vec<IpAddr>,
    #[serde(skip)]
    removed_at: usize,
    /// The control plane's model of each file: its table and service.
    #[serde(skip)]
    models: [Model; 2],
    #[serde(skip)]
    plan: Planned,
    #[serde(skip)]
    kept: RefCell<Vec<Kept>>,
    /// The real TCP connections, unless `--tcp-connections 0`.
    #[serde(skip)]
    tcp: Option<TcpPart>,
}

/// The control plane's model of a service file: its table and its service.
pub(super) type Model = (Table, xnf_lb::Service);

/// What `xnf lb plan` expects of the change from `files[0]` to `files[1]`, and each file's model.
pub(super) fn plan_of(files: &[String; 2]) -> Result<(Planned, [Model; 2])> {
    let (c1, _) = xnf_lb::Config::parse(&files[0], "lab-before.toml")?;
    let (c2, _) = xnf_lb::Config::parse(&files[1], "lab-after.toml")?;
    let plan = xnf_lb::plan(&c1, &c2)?.into_iter().next().context("the plan has no service")?;
    let d = plan.disruption.context("the plan has no disruption for the changed service")?;
    let planned =
        Planned { moved: d.moved, removed: 1.0 - d.kept, collateral_of_kept: d.collateral_of_kept(), balance_max: plan.balance.map_or(f64::NAN, |b| b.max) };
    Ok((planned, [(Table::of(&c1.services[0])?, c1.services[0].clone()), (Table::of(&c2.services[0])?, c2.services[0].clone())]))
}

/// Checks that `spec` has a dut with an ingress and an egress of its own and the sink behind it, naming the flag.
fn check_topology(spec: &TopologySpec, name: &str) -> Result<()> {
    let bad = || format!("--topology {name}: the disruption part needs a dut with two interfaces (roles dut_in, dut_out) and the sink behind dut_out");
    let r = spec.roles.as_ref().with_context(bad)?;
    let ns = |ep: &str| ep.split(':').next().unwrap_or_default().to_string();
    ensure!(r.dut_in != r.dut_out && ns(&r.dut_in) == ns(&r.dut_out) && ns(&r.sink) != ns(&r.dut_out), bad());
    Ok(())
}

impl Part {
    /// Checks the options (with the throughput part's `--table-size` and the common `--topology`), naming the flag
    /// at fault, and prepares the two service files and the plan, before anything is built.
    pub fn new(args: DisruptionArgs, table_size: u32, alone: bool, topology: &str) -> Result<Part> {
        args.check()?;
        xnf_lb::maglev::check_size(table_size).map_err(|e| anyhow::anyhow!("--table-size: {e:#}"))?;
        let n = args.disruption_backends;
        ensure!(n <= table_size, "--disruption-backends {n}: more than the --table-size {table_size} entries");
        check_topology(&TopologySpec::load(topology)?, topology)?;
        let all: Vec<IpAddr> = (1..=n).map(|i| IpAddr::V4(backend(i))).collect();
        let removed_at = args.remove as usize - 1;
        let kept: Vec<IpAddr> = all.iter().copied().filter(|b| *b != all[removed_at]).collect();
        let file = |backends: &[IpAddr]| setup::service_file(IpAddr::V4(VIP), Proto::Tcp, PORT, Mode::Ipip, table_size, backends);
        let files = [file(&all), file(&kept)];
        let (plan, models) = plan_of(&files)?;
        let tcp = TcpPart::new(args.tcp_connections, n)?;
        Ok(Part { args, table_size, alone, files, all, removed_at, models, plan, kept: RefCell::new(Vec::new()), tcp })
    }

    /// What one step did to the flows: `after[i]` is flow i's backend (an index into `all`), `before` step 1's.
    fn outcome(&self, before: &[usize], after: &[usize], ct: [u64; 4], model: &Model) -> Outcome {
        let mut o = Outcome { per_backend: vec![0; self.all.len()], ..Default::default() };
        for (i, (&was, &is)) in before.iter().zip(after).enumerate() {
            let moved = was != is;
            o.moved += moved as u64;
            if was == self.removed_at {
                o.removed_flows += 1;
                o.removed_moved += moved as u64;
            } else {
                o.kept_flows += 1;
                o.collateral += moved as u64;
            }
            o.per_backend[is] += 1;
            o.model_agrees += (flow(i as u32).backend(&model.1, &model.0) == Some(self.all[is])) as u64;
        }
        let serving: Vec<u64> =
            o.per_backend.iter().enumerate().filter(|(i, _)| model.0.backends().iter().any(|b| b.0 == self.all[*i])).map(|(_, &c)| c).collect();
        let mean = serving.iter().sum::<u64>() as f64 / serving.len().max(1) as f64;
        o.max_over_mean = serving.iter().copied().max().unwrap_or(0) as f64 / mean.max(1.0);
        [o.ct_hit, o.ct_miss, o.ct_syn, o.ct_stale] = ct;
        o
    }

    /// The first run's outcome of `step`: (before, after).
    fn first(&self, step: Step) -> Result<(Outcome, Outcome)> {
        let kept = self.kept.borrow();
        let k = kept.iter().find(|k| k.step == step).with_context(|| format!("the {} variant was not measured", variant_name(&step)))?;
        Ok((k.before.clone(), k.after.clone()))
    }
}

/// The backends' parameter.
fn backends_param() -> Param {
    let mut p = Param::plain("backends", &Value::from(1u32));
    p.unit = ("backend".into(), "backends".into());
    p
}

impl Experiment for Part {
    type Variant = Step;
    const NAME: &'static str = "lb";

    fn params(&self) -> Vec<Param> {
        vec![params::flows(), backends_param()]
    }

    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![("flows", params::values(&[self.args.established])), ("backends", params::values(&[self.args.disruption_backends]))]
    }

    fn variants(&self) -> Vec<Step> {
        vec![Step::WithTable, Step::WithoutTable]
    }

    fn ratios(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }

    /// Checked by [`Part::new`].
    fn check(&self, _: Cpus) -> Result<()> {
        Ok(())
    }

    /// Nothing of the driver's own measurement; alone, the common options for it are refused (with the throughput
    /// part they are its).
    fn plan(&self, common: Plan) -> Result<Plan> {
        if self.alone {
            ensure!(common.zero_loss.is_none(), "--zero-loss: the disruption part measures no rates (--part throughput does)");
            ensure!(common.load.count() == 0, "--load-curve / --load-rates: the disruption part measures no rates (--part throughput does)");
            ensure!(common.profile.is_none(), "--profile: the disruption part profiles nothing (--part throughput does)");
        }
        Ok(Plan::default())
    }

    /// The lb attached and applied twice, two test runs per flow (about 7 µs each here, with the frame built), and
    /// the real connections.
    fn planned_seconds(&self, _: &Timing, _: &Plan) -> f64 {
        1.0 + 2.0 * f64::from(self.args.established) * 7e-6 + self.tcp.as_ref().map_or(0.0, TcpPart::planned_seconds)
    }

    /// With real connections, a namespace per backend ([`disruption_tcp`]).
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        self.tcp.as_ref().map_or(Ok(()), |t| t.adapt(spec))
    }

    /// dut routes the backends' prefix to the sink, which it knows (the lb's FIB lookup needs the neighbour).
    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        let r = t.roles()?;
        let (dut, dout) = t.endpoint(&r.dut_out)?;
        let sink = t.addr(&r.sink, false)?.to_string();
        dut.ip(&["neigh", "replace", &sink, "lladdr", &t.mac(&r.sink)?.to_string(), "dev", &dout, "nud", "permanent"])
            .context("dut's neighbour entry for the sink")?;
        dut.route_add(BACKENDS, Some(&sink), Some(&dout)).context("routing the backends' prefix to the sink in dut")?;
        self.tcp.as_ref().map_or(Ok(()), |tcp| tcp.built(t))
    }

    /// No generator: every frame is run through the program (the real connections' backends decapsulate).
    fn at_point<'a>(&'a self, t: &'a BuiltTopology, _: &Point, pg: &Progress) -> Result<AtPoint<'a>> {
        let (n, removed) = (self.args.disruption_backends, self.all[self.removed_at]);
        pg.message(&format!("disruption: {} flows over {n} backends, then backend {removed} removed", self.args.established));
        let decap = self.tcp.as_ref().map(|tcp| tcp.decap(t)).transpose()?;
        Ok(AtPoint::without_traffic(decap))
    }

    /// `xnf lb` attached to dut's ingress and egress, the first file applied.
    fn set_up<'a>(&'a self, t: &'a BuiltTopology, _: &Point, step: Step, cpus: Cpus, pg: &Progress) -> Result<Box<dyn Running + 'a>> {
        let r = t.roles()?;
        let ((dut, din), (_, dout)) = (t.endpoint(&r.dut_in)?, t.endpoint(&r.dut_out)?);
        let (lb, warnings) = LbGuard::new(dut, &[din.clone(), dout], &self.files[0])?;
        warnings.iter().for_each(|w| pg.println(&format!("xnf lb: {w}")));
        let tcp = self.tcp.as_ref().map(|tcp| tcp.ends(t)).transpose()?;
        let (gen_mac, din_mac, lb) = (t.mac(&r.gen)?, t.mac(&r.dut_in)?, RefCell::new(Some(lb)));
        Ok(Box::new(Run { part: self, step, dut, din, gen_mac, din_mac, cpu: cpus.gen, lb, tcp }))
    }

    /// The first run's outcomes as the results' `details.disruption`, the later runs checked against them.
    fn finish(&mut self, _: Cpus, res: &mut Results) -> Result<()> {
        // xnf's run files of the namespaces, which are gone now.
        xnf_core::state::gc_dead_namespaces();
        let ((before, with_table), (before_syn, without_table)) = (self.first(Step::WithTable)?, self.first(Step::WithoutTable)?);
        if before != before_syn {
            res.notes.push("disruption: the flows' backends before the change differed between the variants (the lb decided the same SYNs differently)".into());
        }
        let runs = self.kept.borrow().iter().map(|k| k.run + 1).max().unwrap_or(0);
        for k in self.kept.borrow().iter() {
            let want = if k.step == Step::WithTable { &with_table } else { &without_table };
            if k.before != before || k.after != *want {
                res.notes.push(format!(
                    "disruption: run {} of {} differs from run 1: {} moved, {} collateral (run 1: {}, {})",
                    k.run + 1,
                    variant_name(&k.step),
                    k.after.moved,
                    k.after.collateral,
                    want.moved,
                    want.collateral
                ));
            }
        }
        let d = Disruption {
            flows: self.args.established,
            backends: self.args.disruption_backends,
            table_size: self.table_size,
            removed: self.all[self.removed_at],
            runs,
            before,
            with_table,
            without_table,
            plan: self.plan.clone(),
            tcp: self.tcp.as_ref().map(|t| t.result(runs, self.all[self.removed_at])).transpose()?,
        };
        res.notes.push(format!(
            "disruption: {} flows, {} backends, one removed: with the connection table {:.3} % moved ({} of the removed backend's {} flows, collateral {}); without it {:.3} % ({} collateral, {:.3} % of the kept flows; plan {:.3} %)",
            d.flows,
            d.backends,
            100.0 * d.with_table.moved_share(),
            d.with_table.removed_moved,
            d.with_table.removed_flows,
            d.with_table.collateral,
            100.0 * d.without_table.moved_share(),
            d.without_table.collateral,
            100.0 * d.without_table.collateral_share(),
            100.0 * d.plan.collateral_of_kept
        ));
        if let Some(t) = &d.tcp {
            let (w, wo) = (&t.with_table, &t.without_table);
            res.notes.push(format!(
                "disruption, real TCP connections: {} per variant and run, {} run(s); with the connection table {} broken ({} of the removed backend's {}, collateral {}); without it {} ({} of {}, collateral {}, {:.3} % of the kept connections; plan {:.3} %)",
                t.connections,
                t.runs,
                w.broken(),
                w.removed_broken,
                w.removed_connections,
                w.collateral,
                wo.broken(),
                wo.removed_broken,
                wo.removed_connections,
                wo.collateral,
                100.0 * wo.collateral_share(),
                100.0 * d.plan.collateral_of_kept
            ));
        }
        res.details.insert("disruption".into(), serde_json::to_value(&d)?);
        Ok(())
    }
}

/// The throughput part's results with the disruption part's details and notes.
pub fn merge(r: &mut Results, d: Results) {
    r.details.extend(d.details);
    for n in d.notes {
        if !r.notes.contains(&n) {
            r.notes.push(n);
        }
    }
}

/// A variant set up for one run: the lb attached in dut, the first file applied.
struct Run<'a> {
    part: &'a Part,
    step: Step,
    dut: &'a Netns,
    din: String,
    gen_mac: Mac,
    din_mac: Mac,
    cpu: usize,
    /// The test runs' lb (detached before the real connections attach theirs).
    lb: RefCell<Option<LbGuard>>,
    tcp: Option<Ends<'a>>,
}

impl Running for Run<'_> {
    /// A SYN per flow, the second file applied, the variant's segment per flow; the outcomes kept.
    fn measure(&self, m: Measuring) -> Result<Measured> {
        let p = self.part;
        let (flows, cpu, second) = (p.args.established, self.cpu, &p.files[1]);
        let (gen_mac, din_mac) = (self.gen_mac, self.din_mac);
        let index: HashMap<IpAddr, usize> = p.all.iter().enumerate().map(|(i, b)| (*b, i)).collect();
        m.pg.message(&format!("a SYN per flow, the backend removed, then {}", if self.step == Step::WithTable { "an ACK per flow" } else { "a SYN per flow" }));
        let (din, syn_after) = (&self.din, self.step == Step::WithoutTable);
        let steps = self.dut.run(|| -> Result<[(Vec<usize>, [u64; 4]); 2]> {
            pin_to(cpu)?;
            let prog = xnf_lb::pinned_program()?;
            let ifindex = xnf_netns::netlink::link_by_name(din)?.ifindex;
            let step = |syn: bool| -> Result<(Vec<usize>, [u64; 4])> {
                let c0 = xnf_lb::counters()?;
                let picked = (0..flows).map(|i| decide(&prog, ifindex, gen_mac, din_mac, &flow(i), syn, &index)).collect::<Result<Vec<_>>>()?;
                let c1 = xnf_lb::counters()?;
                let ct = [Counter::CtHit, Counter::CtMiss, Counter::CtSyn, Counter::CtStale].map(|k| c1[k as usize] - c0[k as usize]);
                Ok((picked, ct))
            };
            let before = step(true)?;
            xnf_lb::apply_text(second, "lab-after.toml").context("applying the service file without the removed backend")?;
            Ok([before, step(syn_after)?])
        })??;
        let [(b0, ct0), (b1, ct1)] = steps;
        let before = p.outcome(&b0, &b0, ct0, &p.models[0]);
        let after = p.outcome(&b0, &b1, ct1, &p.models[1]);
        p.kept.borrow_mut().push(Kept { step: self.step, run: m.labels.run, before, after });
        if let (Some(tcp), Some(ends)) = (&p.tcp, &self.tcp) {
            drop(self.lb.borrow_mut().take());
            let svc = disruption_tcp::Service { files: &p.files, all: &p.all, removed_at: p.removed_at, models: &p.models };
            tcp.measure(&svc, ends, self.step, m.pg)?;
        }
        Ok(Measured { samples: Vec::new(), zero_loss: None, profiled: Vec::new() })
    }
}

/// Runs one TCP segment of `f` (a SYN, or an ACK of an established connection) through the lb on dut's ingress and
/// returns the backend it went to (an index into `index`'s backends), read from the outer IPv4 destination.
fn decide(prog: &LbProgram, ifindex: u32, src: MacAddr, dst: MacAddr, f: &Flow, syn: bool, index: &HashMap<IpAddr, usize>) -> Result<usize> {
    let flags = if syn { TcpFlags::SYN } else { TcpFlags::ACK };
    let frame = PacketBuilder::ethernet(src, dst).ip(f.src, f.dst).tcp(f.sport, f.dport, flags).seq(1).ack(u32::from(!syn)).frame_len(60).try_build()?;
    let mut ctx = XdpContext { ingress_ifindex: ifindex, rx_queue_index: 0 }.to_bytes(frame.len());
    let mut out = vec![0u8; frame.len() + 256];
    let input = ProgramInput { context_in: Some(&mut ctx), data_in: Some(&frame), data_out: Some(&mut out), repeat: 1, ..Default::default() };
    let res = prog.prog().test_run(input).context("BPF_PROG_TEST_RUN of the lb program")?;
    let len = res.data.map(|d| d.len()).unwrap_or(0);
    let verdict = res.return_value;
    // XDP_TX (3) or XDP_REDIRECT (4): sent to a backend in XDP.
    if verdict != 3 && verdict != 4 {
        let c = xnf_lb::counters()?;
        bail!(
            "the lb returned XDP verdict {verdict} for {}:{} -> {}:{} instead of sending it to a backend ({})",
            f.src,
            f.sport,
            f.dst,
            f.dport,
            setup::passed_reasons(&c)
        );
    }
    ensure!(len >= 34 && out[12..14] == [0x08, 0x00] && out[23] == 4, "the lb's output for {}:{} is no IPv4-in-IPv4 packet", f.src, f.sport);
    let outer = IpAddr::V4(Ipv4Addr::new(out[30], out[31], out[32], out[33]));
    index.get(&outer).copied().with_context(|| format!("the lb sent {}:{} to {outer}, which is no backend of the service", f.src, f.sport))
}

/// Pins the calling thread to `cpu`: every segment then meets the same per-CPU LRU list.
fn pin_to(cpu: usize) -> Result<()> {
    // SAFETY: a plain syscall on this thread with a zeroed, then filled cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        ensure!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0, "pinning to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Prints the disruption table.
pub fn print(d: &Disruption) {
    println!(
        "\ndisruption: {} established TCP flows, {} backends, backend {} removed, Maglev table of {} entries (xnf lb, ipip, BPF_PROG_TEST_RUN)",
        d.flows, d.backends, d.removed, d.table_size
    );
    println!("{:<34} {:>8} {:>19} {:>19} {:>16} {:>13}", "", "moved", "removed's flows", "collateral / kept", "balance max/mean", "model agrees");
    let pct = |x: u64, of: u64| 100.0 * x as f64 / of.max(1) as f64;
    let row = |what: &str, o: &Outcome, model: bool| {
        let agrees = if model { format!("{:.2} %", pct(o.model_agrees, u64::from(d.flows))) } else { "-".into() };
        println!(
            "{what:<34} {:>7.3}% {:>9} ({:>5.1} %) {:>9} ({:.3} %) {:>16.3} {:>13}",
            100.0 * o.moved_share(),
            o.removed_moved,
            pct(o.removed_moved, o.removed_flows),
            o.collateral,
            100.0 * o.collateral_share(),
            o.max_over_mean,
            agrees
        );
    };
    let b = &d.before;
    println!(
        "{:<34} {:>8} {:>9} ({:>5.1} %) {:>19} {:>16.3} {:>13}",
        "before (SYN per flow)",
        "-",
        b.removed_flows,
        pct(b.removed_flows, u64::from(d.flows)),
        "-",
        b.max_over_mean,
        format!("{:.2} %", pct(b.model_agrees, u64::from(d.flows)))
    );
    row("with the connection table (ACK)", &d.with_table, false);
    row("without it (SYN: the table afresh)", &d.without_table, true);
    let p = &d.plan;
    println!(
        "{:<34} {:>7.3}% {:>9} ({:>5.1} %) {:>9} ({:.3} %) {:>16.3} {:>13}",
        "xnf lb plan (share of hash space)",
        100.0 * p.moved,
        "",
        100.0 * p.removed,
        "",
        100.0 * p.collateral_of_kept,
        p.balance_max,
        "-"
    );
    let (w, wo) = (&d.with_table, &d.without_table);
    println!(
        "(removed's flows: moved of those on the removed backend, and their share of all flows for `before` and the plan; the plan's balance is the largest share over its ideal; connection table with: {} hits, {} stale; without: {} SYNs decided afresh)",
        w.ct_hit, w.ct_stale, wo.ct_syn
    );
    if let Some(t) = &d.tcp {
        disruption_tcp::print(t, &d.plan);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_are_distinct_and_backends_in_their_prefix() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..20_000 {
            assert!(seen.insert(flow(i)), "flow {i} repeats");
        }
        assert_eq!(flow(4096).sport, 1025);
        assert_eq!((backend(1).to_string(), backend(4000).to_string()), ("198.19.128.1".into(), "198.19.143.160".into()));
    }

    #[test]
    fn options_are_checked_naming_the_flag() {
        let a = |e, n, r| DisruptionArgs { established: e, disruption_backends: n, remove: r, tcp_connections: 1000 };
        let tcp = |n, c| DisruptionArgs { tcp_connections: c, ..a(10, n, 1) };
        for (args, want) in [
            (a(10, 1, 1), "--disruption-backends 1"),
            (a(10, 4, 5), "--remove 5"),
            (a(0, 4, 1), "--established 0"),
            (a(10_000_000, 4, 1), "--established 10000000"),
            (tcp(65, 10), "--disruption-backends 65: the real TCP connections need a namespace per backend, at most 64; give --tcp-connections 0"),
            (tcp(4, 10_001), "--tcp-connections 10001: "),
        ] {
            let e = format!("{:#}", args.check().unwrap_err());
            assert!(e.contains(want), "{e} lacks {want}");
        }
        assert!(a(100_000, 10, 1).check().is_ok());
        assert!(tcp(1000, 0).check().is_ok() && tcp(64, 10_000).check().is_ok());
    }

    #[test]
    fn the_part_checks_the_shared_options_and_alone_refuses_what_it_does_not_measure() {
        let a = DisruptionArgs { established: 1000, disruption_backends: 10, remove: 1, tcp_connections: 0 };
        for (table, topology, want) in [(65536, "line", "--table-size: "), (7, "line", "--disruption-backends 10: "), (65537, "pair", "--topology pair: ")] {
            let e = format!("{:#}", Part::new(a.clone(), table, true, topology).err().expect("refused"));
            assert!(e.starts_with(want), "{e}");
        }
        let zero_loss = || Plan { zero_loss: Some(0.0), ..Default::default() };
        let alone = Part::new(a.clone(), 65537, true, "line").unwrap();
        assert!(alone.plan(zero_loss()).unwrap_err().to_string().starts_with("--zero-loss: "));
        assert!(Part::new(a, 65537, false, "line").unwrap().plan(zero_loss()).is_ok(), "with the throughput part the options are its");
        assert_eq!(alone.variants().iter().map(VariantName::name).collect::<Vec<_>>(), ["with-table", "without-table"]);
        assert!((alone.plan.removed - 0.1).abs() < 0.01, "one backend of ten: {:?}", alone.plan);
        assert_eq!(crate::engine::driver::points(&alone).len(), 1);
    }
}
