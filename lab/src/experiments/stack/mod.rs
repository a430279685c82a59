//! `xnf lab stack`: the receive-path profiling paper's experiment. UDP from the generator to a
//! socket in the sink namespace (built-in topology `pair`: gen -> sink) at
//! rising offered rates, every interval profiled (`xnf profile`): the
//! kernel's receive path stage by stage against offered load (the seed's
//! Fig. 3), checked against a pinned CPU-bound co-runner's loss (the
//! seed's `openssl speed` inference), and what an XDP network function
//! that drops early skips.
//!
//! On veth the receive runs in softirq on the *sending* CPU. So that the
//! stack's work can be measured apart from the generator, as the seed
//! steers NIC traffic to the co-runner's CPU, RPS hands every packet from
//! the sink's interface to the other CPU ("stack CPU"), where the co-runner
//! spins and the socket's reader runs: the NAPI poll, XDP and GRO stay on
//! the generator's CPU, IP, UDP and the socket queue move to the stack CPU.
//!
//! Variants, on the sink's interface:
//! - `socket`: XDP_PASS, a bound UDP socket read by a thread (counted there);
//! - `no-socket`: XDP_PASS, no socket: the stack drops NO_SOCKET (counted
//!   by the XDP program as passed);
//! - `xdp-drop`: XDP_DROP, the early-drop network function (counted by it).
//!
//! Where iperf3 is installed, an iperf3 baseline at each point: the same
//! offered rates from a user-space sender to iperf3's server on the stack
//! CPU (see [`iperf3`]), variant `iperf3` in the results.

mod iperf3;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::engine::driver::{AtPoint, Common, Cpus, Experiment, Running};
use crate::engine::measure::{self, Counters, Received};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::profiling::ProfileLevel;
use crate::engine::progress::Progress;
use crate::engine::results::Results;
use crate::engine::topology::{BuiltTopology, FunctionKind, TopologySpec};
use crate::engine::{ActionKind, LabAttachment};
use crate::experiments::router::parse_size;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    Socket,
    NoSocket,
    XdpDrop,
}

/// `xnf lab stack`: its own options.
#[derive(Args, Debug, Serialize)]
pub struct Stack {
    /// Frame sizes on the wire, FCS included (64..=1518), or imix; a list sweeps.
    #[arg(long = "size", default_value = "64", value_delimiter = ',', value_parser = parse_size, value_name = "BYTES|imix[,...]")]
    pub sizes: Vec<u32>,
    /// Flows (distinct UDP source ports).
    #[arg(long, default_value_t = 4)]
    pub flows: u32,
    /// Variants to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "socket,no-socket,xdp-drop")]
    pub variants: Vec<Variant>,
    /// The co-runner and the RPS-steered stack here [default: the CPU
    /// after the generator's].
    #[arg(long)]
    pub stack_cpu: Option<usize>,
    /// No iperf3 baseline (measured by default where iperf3 is installed).
    #[arg(long)]
    pub no_iperf3: bool,
    /// The co-runner's rate without traffic, per point (work units/s).
    #[arg(skip)]
    #[serde(skip)]
    baselines: Mutex<Vec<(String, f64)>>,
    /// The running co-runner's counter.
    #[arg(skip)]
    #[serde(skip)]
    corunner: Mutex<Option<Arc<AtomicU64>>>,
    /// The CPUs, once checked.
    #[arg(skip)]
    #[serde(skip)]
    cpus: Mutex<Option<Cpus>>,
    /// The iperf3 baseline: its plan, what it measured until `finish`.
    #[arg(skip)]
    #[serde(skip)]
    iperf3: Mutex<iperf3::Baseline>,
}

/// `xnf lab stack` as the command line gives it.
#[derive(Args)]
pub struct StackArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub stack: Stack,
}

/// The offered rates when neither --load-rates nor --load-curve is given.
const DEFAULT_RATES: [f64; 3] = [100_000.0, 300_000.0, 1_000_000.0];

pub fn main(mut a: StackArgs) -> Result<()> {
    if a.common.topology == "line" {
        a.common.topology = "pair".into();
    }
    a.common.profiling.profile = Some(ProfileLevel::Stages);
    if a.common.load_rates.is_empty() && a.common.load_curve == 0 {
        a.common.load_rates = DEFAULT_RATES.to_vec();
    }
    a.stack.iperf3 = Mutex::new(iperf3::Baseline::new(a.stack.no_iperf3, &a.common));
    let r = crate::engine::driver::run(&mut a.stack, &a.common, &mut |line| eprintln!("xnf lab: {line}"))?;
    crate::engine::table::print(&r);
    crate::engine::profiling::print(&r);
    print(&r);
    a.common.write(&r)
}

impl Stack {
    fn stack_cpu(&self, cpus: Cpus) -> usize {
        self.stack_cpu.unwrap_or((cpus.gen + 1) % cpus.count)
    }
}

impl crate::engine::driver::VariantName for Variant {
    fn name(&self) -> String {
        crate::engine::driver::variant_name(self)
    }
}

impl Experiment for Stack {
    type Variant = Variant;
    const NAME: &'static str = "stack";

    fn params(&self) -> Vec<Param> {
        vec![params::size(), params::flows()]
    }

    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![("size", params::values(&self.sizes)), ("flows", params::values(&[self.flows]))]
    }

    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn ratios(&self) -> Vec<(&'static str, &'static str)> {
        vec![("xdp-drop", "socket")]
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        measure::check_sizes(&self.sizes, false)?;
        measure::check_generator(&[self.flows], &[1], cpus.count)?;
        ensure!(cpus.count >= 2, "xnf lab stack needs 2 CPUs: one generates, the other runs the stack and the co-runner");
        let s = self.stack_cpu(cpus);
        ensure!(s < cpus.count && s != cpus.gen, "--stack-cpu {s}: use a CPU other than the generator's ({}) below {}", cpus.gen, cpus.count);
        *self.cpus.lock().expect("lock") = Some(cpus);
        self.iperf3.lock().expect("lock").check();
        Ok(())
    }

    /// The sink's interface gets each variant's program, not the topology's sink.
    fn adapt(&self, spec: &mut TopologySpec) -> Result<()> {
        let roles = spec.roles.clone().context("the topology needs [roles]")?;
        let (ns, dev) = roles.sink.split_once(':').context("sink role: namespace:interface")?;
        spec.functions.retain(|f| !(f.kind == FunctionKind::Sink && f.ns == ns && f.interfaces.iter().any(|i| i == dev)));
        Ok(())
    }

    /// RPS to the stack CPU, the co-runner there, its rate without traffic.
    fn at_point<'a>(&'a self, t: &'a BuiltTopology, p: &Point, pg: &Progress) -> Result<AtPoint<'a>> {
        let roles = t.roles()?;
        let (ns, dev) = t.endpoint(&roles.sink)?;
        let cpus = self.cpus.lock().expect("lock").context("the CPUs were not checked")?;
        let cpu = self.stack_cpu(cpus);
        let rps = format!("/sys/class/net/{dev}/queues/rx-0/rps_cpus");
        ns.exec(&["sh", "-c", &format!("echo {:x} > {rps}", 1u64 << cpu)]).context("steering the sink's receive to the stack CPU (RPS)")?;
        let co = CoRunner::start(cpu)?;
        pg.message("the co-runner's rate without traffic");
        let baseline = co.rate(Duration::from_secs(1));
        let label = params::label(&self.params(), p);
        self.baselines.lock().expect("lock").push((label.clone(), baseline));
        *self.corunner.lock().expect("lock") = Some(co.0.count.clone());
        let mut notes =
            vec![format!("RPS steers the sink's packets to CPU {cpu}, where the co-runner ({:.0} units/s alone) and the socket's reader run", baseline)];
        let path = iperf3::Path {
            gen: t.endpoint(&roles.gen)?.0,
            gen_cpu: cpus.gen,
            sink: ns,
            sink_dev: &dev,
            sink_addr: t.addr(&roles.sink, false)?,
            stack_cpu: cpu,
            corunner: co.0.count.clone(),
        };
        notes.extend(self.iperf3.lock().expect("lock").at(&path, p, &label, p.u32("size")?, pg));
        let traffic = measure::udp_traffic(t, p)?;
        Ok(AtPoint { guard: Box::new(co), traffic: Some(traffic), notes })
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, _: &Point, v: Variant, cpus: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let (ns, dev) = t.endpoint(&roles.sink)?;
        let kind = if v == Variant::XdpDrop { ActionKind::Drop } else { ActionKind::Pass };
        let attachment = LabAttachment::action(ns, &dev, kind, &dev, 0)?;
        let reader = match v {
            Variant::Socket => Some(Reader::start(ns, SocketAddr::new(t.addr(&roles.sink, false)?, 9), self.stack_cpu(cpus))?),
            _ => None,
        };
        let corunner = self.corunner.lock().expect("lock").clone().context("no co-runner at this point")?;
        Ok(Box::new(Run { t, attachment, reader, corunner }))
    }

    /// The iperf3 baseline, the co-runner's baselines, the stack CPU and the table's rows.
    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        self.iperf3.lock().expect("lock").finish(res);
        let b: serde_json::Map<String, serde_json::Value> =
            self.baselines.lock().expect("lock").iter().map(|(l, r)| (l.clone(), serde_json::json!(r))).collect();
        res.details.insert("baselines".into(), serde_json::Value::Object(b));
        if let Some(o) = res.options.as_object_mut() {
            o.insert("stack_cpu_used".into(), serde_json::json!(self.stack_cpu(cpus)));
        }
        let rows = serde_json::to_value(rows(res))?;
        res.details.insert("stack".into(), rows);
        Ok(())
    }
}

struct Run<'a> {
    t: &'a BuiltTopology,
    attachment: LabAttachment,
    reader: Option<Reader>,
    corunner: Arc<AtomicU64>,
}

impl Running for Run<'_> {
    fn counters(&self) -> Result<Counters<'_>> {
        let roles = self.t.roles()?;
        let (ns, dev) = self.t.endpoint(&roles.sink)?;
        let received: Received = match &self.reader {
            Some(r) => Box::new(|| Ok(r.0.count.load(Ordering::Relaxed))),
            None => Box::new(|| Ok(self.attachment.action_counts()?.0)),
        };
        Ok(Counters {
            dut_in: (ns, dev),
            dut_out: None,
            received,
            on_read: None,
            corunner: Some(Box::new(|| Ok(self.corunner.load(Ordering::Relaxed)))),
            during: None,
        })
    }
}

/// A thread counting into `count` until told to stop (when dropped).
struct Counting {
    count: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Counting {
    /// Runs `body(count, stop)` in a thread pinned to `cpu`; returns once it is pinned.
    fn spawn(cpu: usize, body: impl FnOnce(&AtomicU64, &AtomicBool) + Send + 'static) -> Result<Counting> {
        let (count, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (c, s) = (count.clone(), stop.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let pinned = crate::engine::cpu::pin(0, cpu);
            let ok = pinned.is_ok();
            let _ = tx.send(pinned);
            if ok {
                body(&c, &s);
            }
        });
        rx.recv().context("starting a thread")??;
        Ok(Counting { count, stop, thread: Some(thread) })
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A CPU-bound thread pinned to one CPU, counting work units (a fixed
/// number of multiply-adds each): what the network leaves it is its rate.
struct CoRunner(Counting);

impl CoRunner {
    fn start(cpu: usize) -> Result<CoRunner> {
        Ok(CoRunner(Counting::spawn(cpu, |c, s| {
            let mut x = 1u64;
            while !s.load(Ordering::Relaxed) {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
                }
                c.fetch_add(1, Ordering::Relaxed);
            }
        })?))
    }

    /// Units per second over `d`.
    fn rate(&self, d: Duration) -> f64 {
        let (a, t0) = (self.0.count.load(Ordering::Relaxed), Instant::now());
        std::thread::sleep(d);
        (self.0.count.load(Ordering::Relaxed) - a) as f64 / t0.elapsed().as_secs_f64()
    }
}

/// The socket's reader: a thread in the sink namespace on the stack CPU,
/// counting datagrams.
struct Reader(Counting);

impl Reader {
    fn start(ns: &xnf_netns::Netns, addr: SocketAddr, cpu: usize) -> Result<Reader> {
        let sock = ns.bind(move || UdpSocket::bind(addr)).with_context(|| format!("binding the sink's socket to {addr}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        Ok(Reader(Counting::spawn(cpu, move |c, s| {
            let mut buf = [0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                if sock.recv(&mut buf).is_ok() {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
        })?))
    }
}

/// The receive-path profiling paper's table: per variant and offered rate, the stage times per
/// packet, the stack CPU's softirq per packet from the profile, and what
/// the co-runner lost per packet.
pub fn print(r: &Results) {
    let rows = rows(r);
    if rows.is_empty() {
        return;
    }
    println!("\nthe receive path by offered rate (NET_RX softirq ns per frame the sink polled; stack CPU = the RPS target, where the co-runner spins):");
    println!(
        "{:<10} {:>8} {:>9} {:>7} {:>7} {:>7} {:>7} {:>8} {:>9} {:>10} {:>6}",
        "variant", "offered", "delivered", "driver", "gro", "ip-rcv", "local", "softirq", "stack-cpu", "co-runner", "ratio"
    );
    for x in &rows {
        println!(
            "{:<10} {:>8.3} {:>9.3} {:>7.0} {:>7.0} {:>7.0} {:>7.0} {:>8.0} {:>9.0} {:>10.0} {:>6.2}",
            x.variant,
            x.offered_mpps,
            x.mpps,
            x.driver,
            x.gro,
            x.ip_rcv,
            x.local,
            x.softirq,
            x.stack_cpu_softirq,
            x.corunner_ns,
            x.corunner_ns / x.stack_cpu_softirq
        );
    }
    println!("(Mpps; ip-rcv includes route; co-runner = the co-runner's lost share of the stack CPU per frame offered, the receive-path profiling paper's `openssl speed` inference; ratio = co-runner / stack-cpu softirq: above 1 is time the stages do not see: the reader, the scheduler, waking the CPU)");
}

/// One row of [`print`].
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub variant: String,
    pub offered_mpps: f64,
    /// Delivered (socket) or counted (others), in the profiled interval.
    pub mpps: f64,
    pub driver: f64,
    pub gro: f64,
    /// ip-rcv and route.
    pub ip_rcv: f64,
    pub local: f64,
    pub softirq: f64,
    pub stack_cpu_softirq: f64,
    pub corunner_ns: f64,
}

/// Rows from the profiled load steps (run 1 of each variant and rate).
pub fn rows(r: &Results) -> Vec<Row> {
    let base = |label: &str| r.details.get("baselines").and_then(|b| b.get(label)).and_then(|v| v.as_f64());
    let stack_cpu = r.options.get("stack_cpu_used").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
    r.profiles
        .iter()
        .filter(|p| p.offered_pps.is_some())
        .map(|p| {
            let label = r.label(&p.point);
            // Per frame the sink's NAPI polled: what the stack handled,
            // delivered or not (at overload most are dropped).
            let polled = p.profile.devices.iter().map(|d| d.work).max().unwrap_or(0).max(1) as f64;
            let per = |ns: u64| ns as f64 / polled;
            let on_cpu = p.profile.per_cpu.iter().find(|c| c.cpu == stack_cpu).map_or(0, |c| c.softirq_ns);
            let corunner_ns = match (base(&label), p.corunner_per_s) {
                (Some(b), Some(c)) => (1.0 - c / b).max(0.0) * 1e9 / p.offered_pps.unwrap_or(1.0),
                _ => f64::NAN,
            };
            Row {
                variant: p.variant.clone(),
                offered_mpps: p.offered_pps.unwrap_or(0.0) / 1e6,
                mpps: p.profiled_mpps,
                driver: per(p.profile.stage_ns("driver")),
                gro: per(p.profile.stage_ns("gro")),
                ip_rcv: per(p.profile.stage_ns("ip-rcv") + p.profile.stage_ns("route")),
                local: per(p.profile.stage_ns("local")),
                softirq: per(p.profile.softirq_ns),
                stack_cpu_softirq: per(on_cpu),
                corunner_ns,
            }
        })
        .collect()
}
