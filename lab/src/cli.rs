//! Command-line arguments of the lab experiments and `xnf lab up`, and what
//! runs them: options are checked before anything is built, results go to
//! the terminal and, when asked, to JSON / CSV files.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::engine::measure::Timing;
use crate::engine::results::Results;
use crate::experiments::router::{netfilter_points, parse_list, Variant};

#[derive(Subcommand)]
pub enum LabCmd {
    /// Kernel forwarding vs `xnf router`, swept over packet size, flows,
    /// queues, route-table size and a netfilter ruleset.
    ///
    /// Builds the topology (default: the built-in gen -> dut -> sink line),
    /// alternates the variants within each run and reports Mpps (median,
    /// min, max), loss and where it happened, CPU per packet split into
    /// softirq/system/user, and the xnf/kernel ratio. Optionally the
    /// zero-loss rate and the CPU-vs-offered-load curve.
    Router(Box<RouterArgs>),
    /// The raw XDP verdicts on dut's ingress (drop, pass, TX, redirect to a
    /// port, redirect to a CPU) against the Linux stack dropping the same
    /// frames (nftables, prerouting, raw priority): the upper bounds every
    /// network function is compared with (seed 003 §4, xdp-bench).
    Actions(Box<ActionsArgs>),
    /// The NF-chain path of seed 000 (Fig. 8: host ingress -> NF chain ->
    /// host egress) three ways: `linux` (the NFs' and dut's kernels route,
    /// dut steering by policy rules), `xnf` (`xnf chain` steering in XDP,
    /// reflector NFs), `xnf-linux-nf` (xnf steering, NFs forwarding with
    /// their Linux stack), for chains of 1..8 NFs.
    ///
    /// The NFs are lab namespaces hanging off dut in the gen -> dut -> sink
    /// line. Variants (named VARIANT/N for N NFs) alternate within each run;
    /// reports Mpps (median, min, max), CPU per packet, loss and where it
    /// happened hop by hop, dut's kernel forwarding (zero for xnf), and the
    /// ratios to linux. Optionally the zero-loss rate and the load curve.
    Chain(Box<ChainArgs>),
    /// User-space packet I/O: xnf's AF_XDP runtime (rxdrop, l2fwd) against
    /// the kernel delivering the same frames to a UDP socket and to an
    /// AF_PACKET l2fwd, the application on the CPU the generator leaves free.
    Afxdp(Box<AfxdpArgs>),
    /// AF_XDP latency (seed 002): ping-pong between two namespaces over
    /// every combination of busy poll, need_wakeup, poll/spin on each side
    /// and batch size, repeated; every RTT recorded; runs grouped by
    /// k-means (k by silhouette) into clusters shown with the parameters
    /// they share; kernel UDP and AF_PACKET baselines and a saturation
    /// sweep in the same run; the timestamping overhead measured.
    Latency(Box<LatencyArgs>),
    /// The traffic generator on its own: sends UDP or TCP, IPv4 or IPv6,
    /// fixed sizes or IMIX, over many flows, at a rate or as fast as
    /// possible, a count or a time, from one or more pinned CPUs, into an
    /// XDP sink (directly, or through a dut forwarding with the kernel or
    /// xnf). Prints a status line every second, then sent / received /
    /// loss / Mpps per CPU; `--verify` parses every frame at the sink.
    Gen(Box<crate::experiments::gen::GenArgs>),
    /// Build a topology (built-in scenario or TOML file) and keep it up
    /// until Ctrl-C: namespaces, veths, addresses, routes, neighbours,
    /// sysctls and the functions it names.
    Up(UpArgs),
    /// Draws a results file (`--json`) as one self-contained HTML page.
    ///
    /// The page has the machine and options, the ratio and summary tables,
    /// and charts of whatever the file holds: throughput vs each swept
    /// parameter (packet size, flows, routes, cores, netfilter), CPU vs
    /// offered load, loss vs offered rate, or a bar per variant when nothing
    /// was swept. Inline SVG and CSS, no script: open it in any browser.
    Report {
        /// Results written by `xnf lab <experiment> --json FILE`.
        input: std::path::PathBuf,
        /// Where to write the page [default: INPUT with an .html extension].
        #[arg(short, long, value_name = "FILE")]
        output: Option<std::path::PathBuf>,
    },
}

/// Runs a `xnf lab` command.
pub fn run(cmd: LabCmd) -> Result<()> {
    crate::engine::remove_everything_on_interrupt()?;
    match cmd {
        LabCmd::Report { input, output } => {
            let out = crate::report::run(&input, output.as_deref())?;
            eprintln!("xnf lab: wrote {}", out.display());
            Ok(())
        }
        LabCmd::Router(a) => router(*a),
        LabCmd::Actions(a) => actions(*a),
        LabCmd::Chain(a) => chain(*a),
        LabCmd::Afxdp(a) => afxdp(*a),
        LabCmd::Latency(a) => latency(*a),
        LabCmd::Gen(a) => crate::experiments::gen::run(*a),
        LabCmd::Up(a) => up(a),
    }
}

/// Options every experiment shares.
#[derive(Args, Debug)]
pub struct Common {
    /// Topology: a built-in scenario (line, pair) or a TOML file with [roles].
    #[arg(long, default_value = "line", value_name = "NAME|FILE")]
    pub topology: String,
    /// Repetitions; variants alternate within each.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Measured seconds per variant and run at full speed.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Seconds of traffic before each measured interval (discarded).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// CPU the generator runs on with one queue (default: the last one).
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Also search each variant's highest rate with at most PCT % loss
    /// (RFC 2544 style: step halved on each change of direction, the first
    /// interval after a rate change discarded).
    #[arg(long, value_name = "PCT", num_args = 0..=1, default_missing_value = "0")]
    pub zero_loss: Option<f64>,
    /// Also measure CPU and loss at STEPS offered rates up to each variant's
    /// full-speed rate (the CPU-vs-offered-load curve).
    #[arg(long, value_name = "STEPS", num_args = 0..=1, default_missing_value = "10", default_value_t = 0)]
    pub load_curve: u32,
    /// Measured seconds per offered-rate step or search trial.
    #[arg(long, default_value_t = 2.0)]
    pub trial_seconds: f64,
    /// Write every sample, the summary, ratios and the machine as JSON
    /// (input of `xnf lab report`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write every sample as CSV (one row per sample, machine included).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

impl Common {
    pub fn timing(&self) -> Timing {
        Timing { warmup: self.warmup, seconds: self.seconds, trial_seconds: self.trial_seconds }
    }

    pub fn cpu(&self) -> Result<usize> {
        let ncpu = crate::engine::cpu::sample()?.len();
        Ok(self.cpu.unwrap_or(ncpu.saturating_sub(1)))
    }

    /// Writes the files asked for.
    pub fn write(&self, r: &Results) -> Result<()> {
        if let Some(path) = &self.json {
            r.write_json(path)?;
            eprintln!("xnf lab: wrote {} (draw it with `xnf lab report {}`)", path.display(), path.display());
        }
        if let Some(path) = &self.csv {
            let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            r.write_csv(&mut f)?;
            eprintln!("xnf lab: wrote {}", path.display());
        }
        Ok(())
    }
}

/// `xnf lab router`.
#[derive(Args, Debug)]
pub struct RouterArgs {
    #[command(flatten)]
    pub common: Common,
    /// Frame sizes on the wire, FCS included (64..=1518), or imix (the
    /// AMS-IX mix); a list sweeps, e.g. 64,128,256,512,1024,1518,imix.
    #[arg(long = "size", default_value = "64", value_parser = parse_sizes, value_name = "BYTES|imix[,...]")]
    pub sizes: Vec<Vec<u32>>,
    /// Flows (distinct UDP source ports); a list sweeps, e.g. 1,10,100,1000,10000.
    #[arg(long, default_value = "4", value_parser = parse_list::<u32>, value_name = "N[,N...]")]
    pub flows: Vec<Vec<u32>>,
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// RX/TX queues per veth = generator CPUs (CPUs 0..N); a list sweeps.
    #[arg(long, default_value = "1", value_parser = parse_list::<u32>, value_name = "N[,N...]")]
    pub queues: Vec<Vec<u32>>,
    /// Synthetic routes added to dut's table (realistic prefix-length mix,
    /// installed by netlink batches); a list sweeps, e.g. 0,10000,1000000.
    #[arg(long, default_value = "0", value_parser = parse_list::<u64>, value_name = "N[,N...]")]
    pub routes: Vec<Vec<u64>>,
    /// Load a realistic netfilter ruleset (conntrack, sets, counters) on
    /// dut: off, on, or both (a sweep).
    #[arg(long, default_value = "off", value_name = "off|on|both")]
    pub netfilter: String,
    /// Variants to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "kernel,xnf,dut-drop")]
    pub variants: Vec<Variant>,
}

pub fn router(a: RouterArgs) -> Result<()> {
    let c = &a.common;
    let opts = crate::experiments::router::Options {
        topology: c.topology.clone(),
        runs: c.runs,
        timing: c.timing(),
        sizes: a.sizes.into_iter().flatten().collect(),
        flows: a.flows.into_iter().flatten().collect(),
        ipv6: a.ipv6,
        queues: a.queues.into_iter().flatten().collect(),
        routes: a.routes.into_iter().flatten().collect(),
        netfilter: netfilter_points(&a.netfilter)?,
        variants: a.variants,
        cpu: c.cpu()?,
        zero_loss: c.zero_loss,
        load_steps: c.load_curve,
    };
    let r = crate::experiments::router::run(&opts, &mut |line| eprintln!("xnf lab: {line}"))?;
    crate::engine::table::print(&r);
    c.write(&r)
}

/// `xnf lab actions`.
#[derive(Args, Debug)]
pub struct ActionsArgs {
    #[command(flatten)]
    pub common: Common,
    /// Frame sizes on the wire, FCS included (64..=1518), or imix; a list sweeps.
    #[arg(long = "size", default_value = "64", value_parser = parse_sizes, value_name = "BYTES|imix[,...]")]
    pub sizes: Vec<Vec<u32>>,
    /// Flows (distinct UDP source ports).
    #[arg(long, default_value_t = 4)]
    pub flows: u32,
    /// IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Variants to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "xdp-drop,xdp-pass,xdp-tx,xdp-redirect,xdp-cpumap,linux-drop")]
    pub variants: Vec<crate::experiments::actions::Variant>,
}

pub fn actions(a: ActionsArgs) -> Result<()> {
    let c = &a.common;
    let opts = crate::experiments::actions::Options {
        topology: c.topology.clone(),
        runs: c.runs,
        timing: c.timing(),
        sizes: a.sizes.into_iter().flatten().collect(),
        flows: a.flows,
        ipv6: a.ipv6,
        variants: a.variants,
        cpu: c.cpu()?,
        zero_loss: c.zero_loss,
        load_steps: c.load_curve,
    };
    let r = crate::experiments::actions::run(&opts, &mut |line| eprintln!("xnf lab: {line}"))?;
    crate::engine::table::print(&r);
    c.write(&r)
}

/// `xnf lab afxdp`.
#[derive(Args, Debug)]
pub struct AfxdpArgs {
    #[command(flatten)]
    pub common: Common,
    /// Frame sizes on the wire, FCS included (64..=1518); a list sweeps.
    #[arg(long = "size", default_value = "64", value_parser = parse_sizes, value_name = "BYTES[,...]")]
    pub sizes: Vec<Vec<u32>>,
    /// Variants to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "afxdp-rxdrop,linux-udp,afxdp-l2fwd,linux-afpacket")]
    pub variants: Vec<crate::experiments::afxdp::Variant>,
    /// The application spins instead of sleeping (poll(), blocking recvmmsg) when idle.
    #[arg(long)]
    pub spin: bool,
    /// Packets per batch: AF_XDP RX batch, recvmmsg/sendmmsg vector.
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
}

pub fn afxdp(a: AfxdpArgs) -> Result<()> {
    let c = &a.common;
    let sizes: Vec<u32> = a.sizes.into_iter().flatten().collect();
    anyhow::ensure!(!sizes.contains(&0), "--size imix: this experiment takes fixed sizes");
    let opts = crate::experiments::afxdp::Options {
        topology: c.topology.clone(),
        runs: c.runs,
        timing: c.timing(),
        sizes,
        variants: a.variants,
        cpu: c.cpu()?,
        spin: a.spin,
        batch: a.batch,
        zero_loss: c.zero_loss,
        load_steps: c.load_curve,
    };
    let r = crate::experiments::afxdp::run(&opts, &mut |line| eprintln!("xnf lab: {line}"))?;
    crate::engine::table::print(&r);
    c.write(&r)
}

/// `xnf lab latency`.
#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// Probes per second in the matrix runs (64-byte frames, one at a time
    /// while the RTT is below the interval).
    #[arg(long, default_value_t = 5000)]
    pub rate: u64,
    /// Probes per run.
    #[arg(long, default_value_t = 2000)]
    pub count: u64,
    /// Runs of every configuration (in a shuffled order each time).
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Batch sizes in the matrix.
    #[arg(long = "batch", value_delimiter = ',', default_value = "1,64", value_name = "N[,N...]")]
    pub batches: Vec<u32>,
    /// Largest number of clusters tried.
    #[arg(long, default_value_t = 8)]
    pub max_k: usize,
    /// Probe rates of the saturation sweep (empty string: no sweep).
    #[arg(long, value_delimiter = ',', default_value = "10000,50000,100000,200000,400000", value_name = "PPS[,PPS...]")]
    pub saturation: Vec<String>,
    /// CPU of the pinger (sender and receiver) [default: the last one].
    #[arg(long)]
    pub ping_cpu: Option<usize>,
    /// CPU of the forwarder [default: the first one].
    #[arg(long, default_value_t = 0)]
    pub fwd_cpu: usize,
    /// Seed of the run order and of k-means.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write every RTT, the summaries and the clusters as JSON (input of `xnf lab report`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Measure nothing: cluster the runs of a results file again (with this
    /// --max-k and --seed) and print them.
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,
}

pub fn latency(a: LatencyArgs) -> Result<()> {
    if let Some(from) = &a.from {
        let mut r = crate::experiments::latency::LatencyResults::read(from)?;
        anyhow::ensure!((2..=20).contains(&a.max_k), "--max-k {}: use 2..=20", a.max_k);
        r.runs.iter_mut().for_each(|x| x.cluster = None);
        r.clustering = crate::experiments::latency::cluster(&mut r.runs, a.max_k, a.seed);
        crate::experiments::latency::print(&r);
        if let Some(path) = &a.json {
            r.write_json(path)?;
        }
        return Ok(());
    }
    let ncpu = crate::engine::cpu::sample()?.len();
    let saturation_rates = a
        .saturation
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().map_err(|_| anyhow::anyhow!("--saturation {s}: not a rate in probes per second")))
        .collect::<Result<Vec<_>>>()?;
    let o = crate::experiments::latency::Options {
        rate: a.rate,
        count: a.count,
        repeats: a.repeats,
        batches: a.batches,
        max_k: a.max_k,
        saturation_rates,
        ping_cpu: a.ping_cpu.unwrap_or(ncpu.saturating_sub(1)),
        fwd_cpu: a.fwd_cpu,
        seed: a.seed,
    };
    let r = crate::experiments::latency::run(&o, &mut |line| eprintln!("xnf lab: {line}"))?;
    crate::experiments::latency::print(&r);
    if let Some(path) = &a.json {
        r.write_json(path)?;
        eprintln!("xnf lab: wrote {} (draw it with `xnf lab report {}`)", path.display(), path.display());
    }
    Ok(())
}

/// `xnf lab chain`.
#[derive(Args, Debug)]
pub struct ChainArgs {
    #[command(flatten)]
    pub common: Common,
    /// Chain lengths: NFs in the chain (1..=8); a list sweeps.
    #[arg(long = "length", default_value = "1,2,4", value_parser = parse_list::<u32>, value_name = "N[,N...]")]
    pub lengths: Vec<Vec<u32>>,
    /// Frame sizes on the wire, FCS included (64..=1518), or imix; a list sweeps.
    #[arg(long = "size", default_value = "64", value_parser = parse_sizes, value_name = "BYTES|imix[,...]")]
    pub sizes: Vec<Vec<u32>>,
    /// Flows (distinct UDP source ports); a list sweeps, e.g. 1,10,100,1000,10000.
    #[arg(long, default_value = "1", value_parser = parse_list::<u32>, value_name = "N[,N...]")]
    pub flows: Vec<Vec<u32>>,
    /// RX/TX queues per veth (the line's and the NFs') = generator CPUs
    /// (CPUs 0..N); a list sweeps, like the seed's 1, 2, 4, 8 cores.
    #[arg(long, default_value = "1", value_parser = parse_list::<u32>, value_name = "N[,N...]")]
    pub queues: Vec<Vec<u32>>,
    /// Variants to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "linux,xnf,xnf-linux-nf")]
    pub variants: Vec<crate::experiments::chain::Variant>,
}

pub fn chain(a: ChainArgs) -> Result<()> {
    let c = &a.common;
    let opts = crate::experiments::chain::Options {
        topology: c.topology.clone(),
        runs: c.runs,
        timing: c.timing(),
        sizes: a.sizes.into_iter().flatten().collect(),
        flows: a.flows.into_iter().flatten().collect(),
        queues: a.queues.into_iter().flatten().collect(),
        lengths: a.lengths.into_iter().flatten().collect(),
        variants: a.variants,
        cpu: c.cpu()?,
        zero_loss: c.zero_loss,
        load_steps: c.load_curve,
    };
    let r = crate::experiments::chain::run(&opts, &mut |line| eprintln!("xnf lab: {line}"))?;
    crate::engine::table::print(&r);
    crate::experiments::chain::print_by_length(&r, &opts);
    c.write(&r)
}

/// Sizes: numbers or `imix` (stored as 0).
pub fn parse_sizes(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(|x| match x.trim() {
            "imix" | "IMIX" => Ok(0),
            n => n.parse::<u32>().map_err(|e| format!("`{n}`: {e} (sizes are bytes on the wire, e.g. 64, or imix)")),
        })
        .collect()
}

/// `xnf lab up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// A built-in scenario (line, pair) or a TOML topology file.
    #[arg(default_value = "line", value_name = "NAME|FILE")]
    pub topology: String,
    /// Only parse and check the topology; build nothing.
    #[arg(long)]
    pub check: bool,
    /// Print the built-in scenario's TOML (a starting point for your own).
    #[arg(long)]
    pub print: bool,
}

pub fn up(a: UpArgs) -> Result<()> {
    if a.print {
        let (_, text) = crate::engine::topology::BUILTIN
            .iter()
            .find(|(n, _)| *n == a.topology)
            .with_context(|| format!("--print shows built-in scenarios only: {}", builtin_names()))?;
        print!("{text}");
        return Ok(());
    }
    let spec = crate::engine::topology::TopologySpec::load(&a.topology)?;
    if a.check {
        println!("{}: valid ({} namespaces, {} links)", a.topology, spec.namespaces.len(), spec.links.len());
        return Ok(());
    }
    let t = crate::engine::topology::BuiltTopology::build(&spec, &mut |m| eprintln!("xnf lab: {m}"))?;
    println!("{}\n\n{:<8} {:<28} interfaces", spec.description, "name", "namespace");
    for line in t.describe() {
        println!("{line}");
    }
    println!("\nUp until Ctrl-C (then everything is removed). Try: ip -n <namespace> addr");
    // Ctrl-C is handled by the lab's signal thread, which removes the
    // namespaces and exits.
    loop {
        std::thread::park();
    }
}

fn builtin_names() -> String {
    crate::engine::topology::BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}
