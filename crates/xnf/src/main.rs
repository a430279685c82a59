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
    /// Kernel forwarding vs `xnf router` on a gen -> dut -> sink veth line.
    Router {
        /// Repetitions; variants alternate within each.
        #[arg(long, default_value_t = 3)]
        runs: u32,
        /// Measured seconds per variant and run.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Seconds of traffic before measuring.
        #[arg(long, default_value_t = 1.0)]
        warmup: f64,
        /// Flows (distinct UDP source ports).
        #[arg(long, default_value_t = 4)]
        flows: u32,
        /// Frame size on the wire in bytes, FCS included (64..=1518).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// IPv6 instead of IPv4.
        #[arg(long)]
        ipv6: bool,
        /// CPU the generator runs on (default: the last one).
        #[arg(long)]
        cpu: Option<usize>,
        /// Also search each variant's highest rate with at most PCT % loss
        /// (binary search, step halved on each change of direction).
        #[arg(long, value_name = "PCT", num_args = 0..=1, default_missing_value = "0")]
        zero_loss: Option<f64>,
        /// Measured seconds per search trial (after a discarded warm-up).
        #[arg(long, default_value_t = 2.0)]
        trial_seconds: f64,
        /// Also write every sample and the summary as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<std::path::PathBuf>,
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
        LabCmd::Router { runs, seconds, warmup, flows, size, ipv6, cpu, zero_loss, trial_seconds, json } => {
            let ncpu = lab::cpu::sample()?.len();
            let cpu = cpu.unwrap_or(ncpu.saturating_sub(1));
            let opts = lab::router::Options { runs, seconds, warmup, flows, size, ipv6, cpu, zero_loss, trial_seconds };
            let report = lab::router::run(&opts, &mut |line| eprintln!("xnf lab: {line}"))?;
            lab::router::print(&report);
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&report)?)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("xnf lab: wrote {}", path.display());
            }
            Ok(())
        }
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
