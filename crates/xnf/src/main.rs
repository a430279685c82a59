//! `xnf`: eXpress Network Functions.

mod lab;
mod netlink;
mod pass;
mod router;
mod state;
mod xdp_link;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use router::AttachOptions;
use xdp_link::XdpMode;

/// XDP network functions: a router on the kernel FIB, and the tools around it.
#[derive(Parser)]
#[command(name = "xnf", version, propagate_version = true)]
struct Cli {
    /// Act in this network namespace: a name from `ip netns` or a path such as
    /// /proc/PID/ns/net. Use this instead of `ip netns exec`, which hides bpffs.
    #[arg(long, global = true, value_name = "NAME|PATH")]
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
    /// Build test topologies in namespaces, generate traffic and measure.
    #[command(subcommand)]
    Lab(LabCmd),
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

fn enter_netns(ns: &str) -> Result<()> {
    let path = if ns.contains('/') { ns.to_string() } else { format!("/run/netns/{ns}") };
    let f = std::fs::File::open(&path).with_context(|| format!("no network namespace {ns:?} ({path} not found; see `ip netns`)"))?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).with_context(|| format!("entering network namespace {ns} (are you root?)"))
}

/// BPF memory is charged to the memory cgroup since Linux 5.11; before, it
/// counted against RLIMIT_MEMLOCK. Raise the limit when we may, never fail.
fn raise_memlock() {
    let inf = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: plain syscall with a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &inf) } != 0 && !kernel_at_least(5, 11) {
        eprintln!("xnf: warning: cannot raise RLIMIT_MEMLOCK on a kernel older than 5.11; large maps may fail to load");
    }
}

fn kernel_at_least(major: u32, minor: u32) -> bool {
    let Ok(u) = nix::sys::utsname::uname() else { return true };
    let rel = u.release().to_string_lossy().into_owned();
    let mut it = rel.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse::<u32>().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (major, minor)
}

fn run(cli: Cli) -> Result<()> {
    if let Some(ns) = &cli.netns {
        enter_netns(ns)?;
    }
    raise_memlock();
    match cli.command {
        Command::Router(cmd) => run_router(cmd),
        Command::Pass(PassCmd::Attach { iface, mode }) => pass::attach(&iface, mode),
        Command::Pass(PassCmd::Detach { iface }) => pass::detach(&iface),
        Command::Lab(cmd) => run_lab(cmd),
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
        RouterCmd::Stats { json, watch } => {
            let watch = match watch {
                Some(s) if !(s > 0.0 && s.is_finite()) => anyhow::bail!("--watch needs a positive number of seconds"),
                Some(s) => Some(Duration::from_secs_f64(s)),
                None => None,
            };
            router::report::stats(json, watch)
        }
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
