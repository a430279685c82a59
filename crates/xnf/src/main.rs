//! `xnf`: eXpress Network Functions. This crate only composes the commands
//! of each network function and of the lab, and reports errors in one line;
//! everything they do lives in their own crates (see the README's layout).

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// XDP network functions: a router on the kernel FIB, a DDoS filter, chains of NFs in
/// containers, user-space NFs over AF_XDP, and the lab that measures them.
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
    Router(xnf_router::cli::RouterCmd),
    /// A DDoS filter and firewall in XDP: prefixes and lists, ports, TCP
    /// flags, ICMP types, VLANs, lengths; drop, pass, count, rate-limit.
    #[command(subcommand)]
    Filter(xnf_filter::cli::FilterCmd),
    /// A Layer-4 load balancer in XDP: Maglev tables, a connection table,
    /// IPIP, GUE or DSR; `plan` before `apply`; `decap` for backends.
    #[command(subcommand)]
    Lb(xnf_lb::cli::LbCmd),
    /// Attach a do-nothing XDP program so a veth end receives redirected frames.
    #[command(subcommand)]
    Pass(xnf_pass::cli::PassCmd),
    /// Network functions: network namespaces (containers) joined to the host
    /// by a veth pair that xnf creates and prepares for XDP.
    #[command(subcommand)]
    Nf(xnf_chain::cli::NfCmd),
    /// Chains: steer classes of traffic from an ingress through NFs in XDP,
    /// then route them out with the kernel FIB.
    #[command(subcommand)]
    Chain(xnf_chain::cli::ChainCmd),
    /// Converge NFs and chains to a TOML file (idempotent: a second run
    /// changes nothing; what the file no longer has is removed).
    Apply {
        /// The file: [[nf]] and [[chain]] tables (see nf/chain/README.md).
        file: std::path::PathBuf,
    },
    /// Where the kernel's network path spends its time: stages of the
    /// receive path from tracepoints, drops by reason, NAPI and XDP per
    /// device, sampled stacks and a flame graph.
    Profile(xnf_profile::cli::ProfileArgs),
    /// Build test topologies in namespaces, generate traffic and measure.
    #[command(subcommand)]
    Lab(xnf_lab::cli::LabCmd),
    /// User-space network functions on AF_XDP sockets: the selected traffic
    /// goes to user space, the rest stays with the kernel.
    #[command(subcommand)]
    Afxdp(xnf_afxdp::cli::AfxdpCmd),
    /// Probe the running kernel for the features xnf uses: BPF links, map
    /// types, live frames, tracepoints, kprobes, 802.1Q, IPVS, ipip.
    Features {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Print nothing; fail with one line naming the first of these
        /// features the kernel lacks (repeatable), e.g. --require kprobes.
        #[arg(long, value_name = "FEATURE")]
        require: Vec<String>,
    },
}

fn run(cli: Cli) -> Result<()> {
    // Before any thread: under `ip netns exec`, find the host's bpffs.
    xnf_core::state::join_host_mount_ns()?;
    if let Some(ns) = &cli.netns {
        xnf_core::runtime::enter_netns(ns)?;
    }
    xnf_core::runtime::raise_memlock();
    match cli.command {
        Command::Router(cmd) => xnf_router::cli::run(cmd),
        Command::Filter(cmd) => xnf_filter::cli::run(cmd),
        Command::Lb(cmd) => xnf_lb::cli::run(cmd),
        Command::Pass(cmd) => xnf_pass::cli::run(cmd),
        Command::Nf(cmd) => xnf_chain::cli::nf(cmd),
        Command::Chain(cmd) => xnf_chain::cli::chain(cmd),
        Command::Apply { file } => xnf_chain::cli::apply(&file),
        Command::Lab(cmd) => xnf_lab::cli::run(cmd),
        Command::Profile(a) => xnf_profile::cli::run(a),
        Command::Afxdp(cmd) => xnf_afxdp::cli::run(cmd),
        Command::Features { json, require } => xnf_core::features::command(json, &require),
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
