//! Command-line arguments of the lab experiments and `xnf lab up`, and what
//! runs them: options are checked before anything is built, results go to
//! the terminal and, when asked, to JSON / CSV files.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

pub use crate::engine::driver::Common;
use crate::engine::driver::Experiment;
use crate::experiments::{actions::Actions, afxdp::Afxdp, chain::Chain, fwdlatency::FwdLatency, router::Router};

#[derive(Subcommand)]
pub enum LabCmd {
    /// Kernel forwarding vs `xnf router` (and xdp-forward, or any forwarder
    /// given by --peer), swept over packet size, flows, queues, route-table
    /// size and a netfilter ruleset.
    ///
    /// Builds the topology (default: the built-in gen -> dut -> sink line),
    /// alternates the variants within each run and reports Mpps (median,
    /// min, max), loss and where it happened, CPU per packet split into
    /// softirq/system/user, and the ratios of each xnf variant to the
    /// kernel and to each peer. Optionally the zero-loss rate and the
    /// CPU-vs-offered-load curve.
    Router(Box<Run<Router>>),
    /// The raw XDP verdicts on dut's ingress (drop, pass, TX, redirect to a
    /// port, redirect to a CPU) against the Linux stack dropping the same
    /// frames (nftables, prerouting, raw priority): the upper bounds every
    /// network function is compared with (the XDP paper §4, xdp-bench).
    Actions(Box<Run<Actions>>),
    /// The NF-chain path of the container-NF thesis (Fig. 8: host ingress -> NF chain ->
    /// host egress) three ways: `linux` (the NFs' and dut's kernels route,
    /// dut steering by policy rules), `xnf` (`xnf chain` steering in XDP,
    /// reflector NFs), `xnf-linux-nf` (xnf steering, NFs forwarding with
    /// their Linux stack), for chains of 1..8 NFs.
    ///
    /// The NFs are lab namespaces hanging off dut in the gen -> dut -> sink
    /// line. The chain length is swept like the other parameters; variants
    /// alternate within each run; reports Mpps (median, min, max), CPU per
    /// packet, loss and where it happened hop by hop, dut's kernel
    /// forwarding (zero for xnf), and the ratios to linux per point.
    /// Optionally the zero-loss rate and the load curve.
    Chain(Box<Run<Chain>>),
    /// User-space packet I/O: xnf's AF_XDP runtime (rxdrop, l2fwd) against
    /// the kernel delivering the same frames to a UDP socket and to an
    /// AF_PACKET l2fwd, the application on the CPU the generator leaves free.
    Afxdp(Box<Run<Afxdp>>),
    /// The XDP paper §5.1 (Fig. 5): a victim's TCP request/response
    /// transactions per second under a UDP flood of rising rate, with no
    /// filter and with each filter on dut's ingress dropping the flood —
    /// `xnf filter` (XDP), nftables at the netdev ingress hook and at raw
    /// prerouting, xdp-tools' xdp-filter — by port, or by a blocklist of
    /// up to millions of prefixes (`--blocklist`).
    ///
    /// Reports transactions/s against the flood rate actually sent (the
    /// figure), the rate that halves them, drops per second and CPU per
    /// dropped frame, and the ratios of the drop rates at the maximum.
    Filter(Box<crate::experiments::filter::FilterArgs>),
    /// The XDP paper §5.3: a VIP balanced over N backend namespaces by `xnf lb`
    /// (ipip, gue, dsr) and by the kernel (nftables DNAT over jhash or
    /// numgen, then forwarding), variants alternated within each run; and
    /// the disruption when one backend of N is removed under established
    /// flows, with and without the connection table.
    ///
    /// Reports Mpps delivered to the backends (median, min, max), CPU per
    /// packet, the balance over backends and the ratios xnf / nft
    /// (optionally the zero-loss rate and the load curve); then, from the
    /// real lb program run over every flow (BPF_PROG_TEST_RUN), the share
    /// of flows that changed backend — the removed backend's and the
    /// collateral — against what `xnf lb plan` expects.
    Lb(Box<crate::experiments::lb::LbArgs>),
    /// The receive-path profiling paper: UDP to a socket in the sink namespace at rising offered
    /// rates (--load-rates, default 0.1, 0.3, 1 Mpps), every interval
    /// profiled (`xnf profile`): the receive path's stages per packet by
    /// offered rate, checked against a CPU-bound co-runner's loss on the
    /// CPU the stack is steered to (RPS), and what an XDP network function
    /// dropping early skips (variants socket, no-socket, xdp-drop).
    ///
    /// The default topology is `pair` (gen -> sink); flame graphs with --flame DIR.
    Stack(Box<crate::experiments::stack::StackArgs>),
    /// AF_XDP latency (the AF_XDP delays paper): ping-pong between two namespaces over
    /// every combination of busy poll, need_wakeup, poll/spin on each side
    /// and batch size, repeated; every RTT recorded; runs grouped by
    /// k-means (k by silhouette) into clusters shown with the parameters
    /// they share; kernel UDP and AF_PACKET baselines and a saturation
    /// sweep in the same run; the timestamping overhead measured.
    Latency(Box<crate::experiments::latency::LatencyArgs>),
    /// Round-trip time through a forwarder (the container-NF thesis §5.7): probes gen ->
    /// dut -> sink -> dut -> gen through the kernel, `xnf router` (xnf: as
    /// `xnf router attach` attaches it, the route cache; xnf-full: --fib
    /// full; ...) and an `xnf chain` through one NF namespace,
    /// with no other traffic and under background load from the generator
    /// through the same forwarder (shares of each variant's full-speed
    /// rate, or fixed rates), variants alternated within each run.
    ///
    /// Reports per variant and load the RTT's median, p99, p99.9, mean,
    /// standard deviation and the probes lost, what carried them (the
    /// forwarder's counters, dut's kernel's), the background rates as the
    /// router experiment does, and whether the pinger spins or sleeps (the
    /// echo is the sink's XDP program: nothing sleeps there).
    FwdLatency(Box<Run<FwdLatency>>),
    /// How long frames follow a route that has changed: a stamped UDP
    /// stream gen -> sink through dut while the lab replaces the sink's
    /// route on dut (and restores it), --changes times per variant, the
    /// variants (kernel, xnf: the route cache, as `xnf router attach`
    /// attaches it; xnf-full: --fib full; xdp-forward) alternated.
    /// Reports per variant the window — from the change to the send time
    /// of the last datagram that still followed the old route — median,
    /// p90 and max, and the stale datagrams per change. With --change
    /// nexthop-mac the sink changes its MAC silently instead, and the
    /// report is how long until traffic reached the new MAC, if it did.
    FibChange(Box<crate::experiments::fibchange::FibChangeArgs>),
    /// What touching a running data plane costs: a sequenced UDP stream
    /// (--rate) and --connections TCP connections gen -> sink through dut
    /// (for xnf through its lb, with --lb-flows UDP flows) while one event
    /// at a time is done to it — xnf's daemon killed or restarted, a
    /// whole-box change, a bad file applied, an upgrade to another build
    /// (--upgrade-to); the kernel's route replaced, an nftables ruleset
    /// replaced, xdp-forward and xdp-filter reloaded — each --repeat
    /// times, variants alternated event by event. Reports per event and
    /// variant (mean and max) the datagrams lost by sequence number, the
    /// longest gap at the sink, TCP connections broken, lb connections and
    /// flows moved to another backend, what dut's kernel forwarded and
    /// what xnf's counters left to it, by reason.
    Disrupt(Box<crate::experiments::disrupt::DisruptArgs>),
    /// A real routing daemon in the loop: BIRD 2 in a peer namespace
    /// announces a table (--routes N synthetic prefixes or a dump file)
    /// over iBGP to a BIRD on dut that installs it into dut's kernel; the
    /// lab waits until dut's table holds all of it, then churns it
    /// (withdrawals, announcements, next-hop changes, --churn per second)
    /// while traffic flows through the variants (kernel, xnf: the route
    /// cache, as `xnf router attach` attaches it; xnf-full: --fib full;
    /// xdp-forward), alternated run by run. Reports Mpps under churn and the
    /// stamped probe datagrams that followed a route after it had changed:
    /// late, and stale (more than --window-ms after the change).
    Bgp(Box<Run<crate::experiments::bgp::Bgp>>),
    /// The traffic generator on its own: sends UDP or TCP, IPv4 or IPv6,
    /// fixed sizes or IMIX, over many flows, at a rate or as fast as
    /// possible, a count or a time, from one or more pinned CPUs, into an
    /// XDP sink (directly, or through a dut forwarding with the kernel or
    /// xnf). Prints a status line every second, then sent / received /
    /// loss / Mpps per CPU; `--verify` parses every frame at the sink.
    Gen(Box<crate::experiments::gen::GenArgs>),
    /// A program's own cost per frame by BPF_PROG_TEST_RUN: each variant
    /// — empty (the test run's floor), xnf (`xnf filter` with the rules,
    /// as attached: its entry program tail-calling the filter stage; the
    /// stage alone as xnf-stage), xdp-tools' xdp-filter — attached to a
    /// veth in a lab namespace as a user attaches it, the program on that
    /// interface found by its id and run over one fixed frame millions of
    /// times on one CPU.
    ///
    /// Swept over the rule-set size (--rules: N-1 rules the frame does not
    /// meet, then the one that drops it) and the frame (--frame flood,
    /// pass); each call's verdict is checked (XDP_DROP for the flood).
    /// Reports ns per frame (median, min, max over --runs, variants
    /// alternated) and the differences xnf - xdp-filter and against empty.
    /// The program alone: no driver, the same frame every time.
    Cost(Box<crate::experiments::cost::CostArgs>),
    /// What one Prometheus scrape of `xnf daemon` costs on a large box
    /// (256 filter rules, 100 lb services x 10 backends, 4 chains by
    /// default): milliseconds per scrape, min, median, p90, max.
    Scrape(Box<crate::experiments::scrape::ScrapeArgs>),
    /// Build a topology (built-in scenario or TOML file) and keep it up
    /// until Ctrl-C: namespaces, veths, addresses, routes, neighbours,
    /// sysctls and the functions it names.
    Up(UpArgs),
    /// This host's steps for a lab run on another host (`--hosts`): started
    /// there by `xnf lab` over ssh, it builds this host's part of the
    /// topology, runs the generator and reads counters as asked on its
    /// standard input, and removes everything it built when that input
    /// ends (the lab done, killed, or the connection lost).
    Host,
    /// Draws a results file (`--json`) as one self-contained HTML page.
    ///
    /// The page has the machine and options, the ratio and summary tables,
    /// and charts of whatever the file holds: throughput vs each swept
    /// parameter (packet size, flows, routes, cores, chain length, ...), CPU
    /// vs offered load, loss vs offered rate, or a bar per variant when
    /// nothing was swept. Inline SVG and CSS, no script: open it in any browser.
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
    crate::engine::unless_interrupted(match cmd {
        LabCmd::Report { input, output } => {
            let out = crate::report::run(&input, output.as_deref())?;
            eprintln!("xnf lab: wrote {}", out.display());
            Ok(())
        }
        LabCmd::Router(a) => experiment(*a),
        LabCmd::Actions(a) => experiment(*a),
        LabCmd::Chain(a) => experiment(*a),
        LabCmd::Afxdp(a) => experiment(*a),
        LabCmd::Filter(a) => crate::experiments::filter::main(*a),
        LabCmd::Lb(a) => crate::experiments::lb::main(*a),
        LabCmd::Stack(a) => crate::experiments::stack::main(*a),
        LabCmd::Latency(a) => crate::experiments::latency::run::main(*a),
        LabCmd::FwdLatency(a) => experiment(*a),
        LabCmd::Gen(a) => crate::experiments::gen::run(*a),
        LabCmd::Scrape(a) => crate::experiments::scrape::run(*a),
        LabCmd::Cost(a) => crate::experiments::cost::run(*a),
        LabCmd::FibChange(a) => crate::experiments::fibchange::run(*a),
        LabCmd::Disrupt(a) => crate::experiments::disrupt::run(*a),
        LabCmd::Bgp(a) => experiment(*a),
        LabCmd::Up(a) => up(a),
        LabCmd::Host => crate::engine::hoststeps::serve(),
    })
}

/// An experiment's command line: the common options and its own.
#[derive(Args)]
pub struct Run<E: Args> {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub experiment: E,
}

/// Runs an experiment: tables on the terminal, files when asked.
fn experiment<E: Experiment + Args>(mut a: Run<E>) -> Result<()> {
    let r = crate::engine::driver::run(&mut a.experiment, &a.common, &mut |line| eprintln!("xnf lab: {line}"))?;
    crate::engine::table::print(&r);
    a.experiment.print(&r);
    crate::engine::profiling::print(&r);
    a.common.write(&r)
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
    /// Build the namespaces the file puts on other hosts there, over SSH
    /// (as the experiments' --hosts).
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<std::path::PathBuf>,
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
    let hosts = match &a.hosts {
        Some(path) => {
            let file = crate::engine::hosts::HostsFile::load(path)?;
            file.check(&spec).with_context(|| format!("{}: does not fit topology `{}`", path.display(), a.topology))?;
            crate::engine::hosts::Hosts::connect(&file, &mut |m| eprintln!("xnf lab: {m}"))?
        }
        None => Default::default(),
    };
    let t = crate::engine::topology::BuiltTopology::build_across(&spec, &hosts, &mut |m| eprintln!("xnf lab: {m}"))?;
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
