//! `xnf`: eXpress Network Functions.

use xnf::{afxdp, chain, lab, pass, router, runtime};

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

use router::AttachOptions;
use xnf::xdp_link::XdpMode;

/// XDP network functions: a router on the kernel FIB, and the tools around it.
#[derive(Parser)]
#[command(name = "xnf", version, propagate_version = true)]
struct Cli {
    /// Act in this network namespace: a name from `ip netns` or a path such as
    /// /proc/PID/ns/net. Use this instead of `ip netns exec`, which hides bpffs.
    #[arg(long, value_name = "NAME|PATH")]
    netns: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Forward IPv4/IPv6 in XDP using the kernel's routes and neighbours.
    #[command(subcommand)]
    Router(RouterCmd),
    /// Attach a do-nothing XDP program so a veth end receives redirected frames.
    #[command(subcommand)]
    Pass(PassCmd),
    /// Network functions: network namespaces (containers) joined to the host
    /// by a veth pair that xnf creates and prepares for XDP.
    #[command(subcommand)]
    Nf(NfCmd),
    /// Chains: steer classes of traffic from an ingress through NFs in XDP,
    /// then route them out with the kernel FIB.
    #[command(subcommand)]
    Chain(ChainCmd),
    /// Converge NFs and chains to a TOML file (idempotent: a second run
    /// changes nothing; what the file no longer has is removed).
    Apply {
        /// The file: [[nf]] and [[chain]] tables (see the README).
        file: std::path::PathBuf,
    },
    /// Build test topologies in namespaces, generate traffic and measure.
    #[command(subcommand)]
    Lab(LabCmd),
    /// User-space network functions on AF_XDP sockets: the selected traffic
    /// goes to user space, the rest stays with the kernel.
    #[command(subcommand)]
    Afxdp(AfxdpCmd),
}

#[derive(Subcommand)]
enum AfxdpCmd {
    /// Run a bundled NF (rxdrop, txonly, l2fwd, echo) on AF_XDP sockets of
    /// IFACE's queues, with live statistics, until Ctrl-C or --seconds.
    ///
    /// Example: xnf afxdp run echo --iface eth1 --match proto=udp,dport=7
    Run(Box<afxdp::RunArgs>),
}

#[derive(Subcommand)]
enum NfCmd {
    /// Join a network namespace to the host as an NF: creates the veth pair
    /// (host end xnf-NAME), sets queues and offloads for XDP, and attaches
    /// the NF's function to its end.
    Create {
        /// NF name: 1-11 characters from a-z, 0-9, -, _.
        name: String,
        /// Its network namespace: a name from `ip netns` or a path such as /proc/PID/ns/net.
        #[arg(long, value_name = "NAME|PATH", required_unless_present = "container")]
        netns: Option<String>,
        /// A Docker or Podman container: its network namespace.
        #[arg(long, value_name = "NAME", conflicts_with = "netns")]
        container: Option<String>,
        /// Name of the NF's end of the veth, inside its namespace.
        #[arg(long, default_value = "xnf0")]
        ifname: String,
        /// RX/TX queues of the veth [default: one per CPU].
        #[arg(long)]
        queues: Option<u32>,
        /// What xnf attaches to the NF's end: pass (its Linux stack or your
        /// program handles frames), reflect (XDP_TX every frame back), none
        /// (your own XDP program is attached there).
        #[arg(long, value_enum, default_value = "pass")]
        function: chain::model::Function,
        /// Make the NF's Linux stack forward frames back to the host:
        /// forwarding on, default routes through the host end.
        #[arg(long)]
        forward: bool,
        /// Use the veth IFNAME that already exists in the namespace (made by
        /// a container runtime, say) instead of creating one.
        #[arg(long)]
        existing: bool,
    },
    /// Remove an NF: its veth (if xnf made it) and what xnf attached.
    Delete {
        name: String,
        /// Even while chains use it: they then drop their traffic until an
        /// NF of that name exists again.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum ChainCmd {
    /// Steer traffic matching --match on --ingress through the NFs, in order.
    ///
    /// Example: xnf chain create web --ingress eth0 --egress eth1
    ///   --match dst=198.18.16.0/24,proto=udp --nf fw --nf nat
    Create {
        name: String,
        /// Where the traffic arrives.
        #[arg(long)]
        ingress: String,
        /// An interface the chain may route out of in XDP (repeat); other
        /// egresses work through the kernel.
        #[arg(long)]
        egress: Vec<String>,
        /// A traffic class (repeat for several): key=value pairs from src,
        /// dst (prefixes), proto (udp, tcp, icmp, icmpv6, number), sport,
        /// dport (N or LO-HI), vlan (ID), family (ipv4, ipv6); or `all`.
        #[arg(long = "match", required = true, value_name = "K=V,...")]
        matches: Vec<String>,
        /// The NFs in order (repeat).
        #[arg(long = "nf", required = true, value_name = "NF")]
        nfs: Vec<String>,
        /// Lower wins where classes of chains on one ingress overlap.
        #[arg(long, default_value_t = 100)]
        priority: u32,
    },
    /// Remove a chain; its traffic takes the kernel path again.
    Delete { name: String },
    /// NFs and chains, with their state.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Per chain and hop: packets in, out, dropped by the NF, and how they left.
    Stats {
        #[arg(long)]
        json: bool,
        /// Show rates, refreshed every SECS seconds (default 1).
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "1")]
        watch: Option<f64>,
    },
}

#[derive(Subcommand)]
enum LabCmd {
    /// Kernel forwarding vs `xnf router`, swept over packet size, flows,
    /// queues, route-table size and a netfilter ruleset.
    ///
    /// Builds the topology (default: the built-in gen -> dut -> sink line),
    /// alternates the variants within each run and reports Mpps (median,
    /// min, max), loss and where it happened, CPU per packet split into
    /// softirq/system/user, and the xnf/kernel ratio. Optionally the
    /// zero-loss rate and the CPU-vs-offered-load curve.
    Router(Box<lab::cli::RouterArgs>),
    /// The raw XDP verdicts on dut's ingress (drop, pass, TX, redirect to a
    /// port, redirect to a CPU) against the Linux stack dropping the same
    /// frames (nftables, prerouting, raw priority): the upper bounds every
    /// network function is compared with (seed 003 §4, xdp-bench).
    Actions(Box<lab::cli::ActionsArgs>),
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
    Chain(Box<lab::cli::ChainArgs>),
    /// User-space packet I/O: xnf's AF_XDP runtime (rxdrop, l2fwd) against
    /// the kernel delivering the same frames to a UDP socket and to an
    /// AF_PACKET l2fwd, the application on the CPU the generator leaves free.
    Afxdp(Box<lab::cli::AfxdpArgs>),
    /// AF_XDP latency (seed 002): ping-pong between two namespaces over
    /// every combination of busy poll, need_wakeup, poll/spin on each side
    /// and batch size, repeated; every RTT recorded; runs grouped by
    /// k-means (k by silhouette) into clusters shown with the parameters
    /// they share; kernel UDP and AF_PACKET baselines and a saturation
    /// sweep in the same run; the timestamping overhead measured.
    Latency(Box<lab::cli::LatencyArgs>),
    /// The traffic generator on its own: sends UDP or TCP, IPv4 or IPv6,
    /// fixed sizes or IMIX, over many flows, at a rate or as fast as
    /// possible, a count or a time, from one or more pinned CPUs, into an
    /// XDP sink (directly, or through a dut forwarding with the kernel or
    /// xnf). Prints a status line every second, then sent / received /
    /// loss / Mpps per CPU; `--verify` parses every frame at the sink.
    Gen(Box<lab::gen::GenArgs>),
    /// Build a topology (built-in scenario or TOML file) and keep it up
    /// until Ctrl-C: namespaces, veths, addresses, routes, neighbours,
    /// sysctls and the functions it names.
    Up(lab::cli::UpArgs),
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

#[derive(Clone, Copy, ValueEnum)]
enum Fib {
    /// Full lookup: policy rules, then tables (what the kernel does).
    Full,
    /// Skip policy rules; main table only (`BPF_FIB_LOOKUP_DIRECT`, faster).
    Direct,
}

#[derive(Subcommand)]
enum RouterCmd {
    /// Attach the router to interfaces (again with other --fib: replace atomically).
    Attach {
        #[arg(required = true, value_name = "IFACE")]
        ifaces: Vec<String>,
        /// XDP mode: native (in the driver) or skb (generic, any device, slow).
        #[arg(long, value_enum, default_value = "native")]
        mode: XdpMode,
        /// How to look routes up.
        #[arg(long, value_enum, default_value = "full")]
        fib: Fib,
        /// Do not start the background follower of VLAN/MAC changes.
        #[arg(long)]
        no_follow: bool,
    },
    /// Detach the router; the kernel forwards these interfaces' traffic again.
    Detach {
        #[arg(required = true, value_name = "IFACE")]
        ifaces: Vec<String>,
    },
    /// Show attached interfaces, the VLAN table and the follower.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Packets and bytes per verdict, and why packets took the kernel path.
    Stats {
        #[arg(long)]
        json: bool,
        /// Show live rates, refreshed every SECS seconds (default 1).
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "1")]
        watch: Option<f64>,
    },
    /// Follow link events and keep VLAN and MAC tables current (attach starts it).
    Follow,
}

#[derive(Subcommand)]
enum PassCmd {
    /// Attach xnf's XDP_PASS program to IFACE.
    Attach {
        iface: String,
        #[arg(long, value_enum, default_value = "native")]
        mode: XdpMode,
    },
    /// Detach it.
    Detach { iface: String },
}

fn run(cli: Cli) -> Result<()> {
    if let Some(ns) = &cli.netns {
        runtime::enter_netns(ns)?;
    }
    runtime::raise_memlock();
    match cli.command {
        Command::Router(cmd) => run_router(cmd),
        Command::Pass(PassCmd::Attach { iface, mode }) => pass::attach(&iface, mode),
        Command::Pass(PassCmd::Detach { iface }) => pass::detach(&iface),
        Command::Lab(cmd) => run_lab(cmd),
        Command::Afxdp(AfxdpCmd::Run(a)) => afxdp::run(*a),
        Command::Nf(cmd) => run_nf(cmd),
        Command::Chain(cmd) => run_chain(cmd),
        Command::Apply { file } => {
            let (changes, warnings) = chain::apply::apply(&file)?;
            warn(&warnings);
            changes.iter().for_each(|c| println!("{c}"));
            Ok(())
        }
    }
}

fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("xnf: warning: {w}");
    }
}

fn watch_period(watch: Option<f64>) -> Result<Option<Duration>> {
    match watch {
        Some(s) if !(s > 0.0 && s.is_finite()) => anyhow::bail!("--watch needs a positive number of seconds"),
        Some(s) => Ok(Some(Duration::from_secs_f64(s))),
        None => Ok(None),
    }
}

fn run_nf(cmd: NfCmd) -> Result<()> {
    match cmd {
        NfCmd::Create { name, netns, container, ifname, queues, function, forward, existing } => {
            let spec = chain::model::NfSpec { name: name.clone(), netns, container, ifname, queues, function, forward, existing };
            warn(&chain::nf_create(spec, chain::model::Origin::Cli)?);
            println!("created NF {name} (port {})", chain::host_ifname(&name));
            Ok(())
        }
        NfCmd::Delete { name, force } => {
            warn(&chain::nf_delete(&name, force)?);
            println!("deleted NF {name}");
            Ok(())
        }
    }
}

fn run_chain(cmd: ChainCmd) -> Result<()> {
    match cmd {
        ChainCmd::Create { name, ingress, egress, matches, nfs, priority } => {
            let matches = matches.iter().map(|m| chain::model::MatchSpec::parse(m)).collect::<Result<Vec<_>>>()?;
            let spec = chain::model::ChainSpec { name: name.clone(), ingress, egress, matches, nfs, priority };
            warn(&chain::chain_create(spec, chain::model::Origin::Cli)?);
            println!("created chain {name}");
            Ok(())
        }
        ChainCmd::Delete { name } => {
            warn(&chain::chain_delete(&name)?);
            println!("deleted chain {name}");
            Ok(())
        }
        ChainCmd::List { json } => chain::report::list(json),
        ChainCmd::Stats { json, watch } => chain::report::stats(json, watch_period(watch)?),
    }
}

fn run_lab(cmd: LabCmd) -> Result<()> {
    lab::remove_everything_on_interrupt()?;
    match cmd {
        LabCmd::Report { input, output } => {
            let out = lab::report::run(&input, output.as_deref())?;
            eprintln!("xnf lab: wrote {}", out.display());
            Ok(())
        }
        LabCmd::Router(a) => lab::cli::router(*a),
        LabCmd::Actions(a) => lab::cli::actions(*a),
        LabCmd::Chain(a) => lab::cli::chain(*a),
        LabCmd::Afxdp(a) => lab::cli::afxdp(*a),
        LabCmd::Latency(a) => lab::cli::latency(*a),
        LabCmd::Gen(a) => lab::gen::run(*a),
        LabCmd::Up(a) => lab::cli::up(a),
    }
}

fn run_router(cmd: RouterCmd) -> Result<()> {
    match cmd {
        RouterCmd::Attach { ifaces, mode, fib, no_follow } => {
            let opts = AttachOptions { mode, fib_direct: matches!(fib, Fib::Direct) };
            let report = router::attach(&ifaces, opts)?;
            for w in &report.warnings {
                eprintln!("xnf: warning: {w}");
            }
            for name in &report.attached {
                println!("attached router to {name}");
            }
            for name in &report.replaced {
                println!("replaced router program on {name}");
            }
            if !no_follow {
                router::follow::spawn()?;
            }
            Ok(())
        }
        RouterCmd::Detach { ifaces } => {
            router::detach(&ifaces)?;
            for name in &ifaces {
                println!("detached router from {name}");
            }
            Ok(())
        }
        RouterCmd::Status { json } => router::report::status(json),
        RouterCmd::Stats { json, watch } => router::report::stats(json, watch_period(watch)?),
        RouterCmd::Follow => router::follow::run(),
    }
}

/// Parses the command line; usage errors become one line, like every other
/// error (help and version print as usual).
fn parse_args() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let text = e.render().to_string();
            let parts: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .map(|l| l.strip_prefix("error: ").unwrap_or(l))
                .collect();
            eprintln!("xnf: error: {} (see `xnf --help`)", parts.join(" "));
            std::process::exit(2);
        }
    }
}

fn main() -> ExitCode {
    let cli = parse_args();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the message and its causes.
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("xnf: error: {}", msg.join(": "));
            ExitCode::FAILURE
        }
    }
}
