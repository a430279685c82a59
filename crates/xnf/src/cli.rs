//! The command line of `xnf`: one subcommand per network function (each
//! defined in its own crate), the box's file (`check`, `diff`, `apply`,
//! `confirm`, `rollback`, `show`), `profile`, `features`, the
//! documentation (`completions`, the hidden `man`) and `lab`, which runs
//! the `xnf-lab` binary.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// XDP network functions: a router on the kernel FIB, a DDoS filter, chains of NFs in
/// containers, user-space NFs over AF_XDP, and the lab that measures them.
#[derive(Parser)]
#[command(name = "xnf", version, propagate_version = true)]
pub struct Cli {
    /// Act in this network namespace: a name from `ip netns` or a path such as
    /// /proc/PID/ns/net. Use this instead of `ip netns exec`, which hides bpffs.
    #[arg(long, value_name = "NAME|PATH")]
    pub netns: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    /// The box's one file: check, diff, apply, confirm, rollback, show.
    #[command(flatten)]
    Box(xnf_config::cli::BoxCmd),
    /// Keep the box as its file says: apply it at start and on SIGHUP or a
    /// change, follow the router, serve /metrics, /healthz and /readyz
    /// (systemd Type=notify). The data plane never needs it.
    Daemon(xnf_daemon::DaemonArgs),
    /// Where the kernel's network path spends its time: stages of the
    /// receive path from tracepoints, drops by reason, NAPI and XDP per
    /// device, sampled stacks and a flame graph.
    Profile(xnf_profile::cli::ProfileArgs),
    /// Build test topologies in namespaces, generate traffic and measure (runs the xnf-lab binary).
    ///
    /// `xnf lab ARGS...` runs `xnf-lab ARGS...`: the one beside this binary,
    /// else the one on PATH. `xnf lab --help` lists the experiments.
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Lab {
        /// An experiment and its options, or --help.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
        args: Vec<OsString>,
    },
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
    /// Print a shell's completion script for xnf to stdout.
    ///
    /// bash: `xnf completions bash > /etc/bash_completion.d/xnf`;
    /// zsh: `xnf completions zsh > /usr/local/share/zsh/site-functions/_xnf`;
    /// fish: `xnf completions fish > ~/.config/fish/completions/xnf.fish`.
    Completions {
        /// The shell.
        shell: crate::docs::Shell,
    },
    /// Write the man pages of xnf and of every subcommand (xnf.1,
    /// xnf-router.1, xnf-router-attach.1, ...; and the lab's, by xnf-lab)
    /// into a folder.
    #[command(hide = true)]
    Man {
        /// The folder (created if missing), e.g. /usr/local/share/man/man1.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// Runs a command line of `xnf`.
pub fn run(cli: Cli) -> Result<()> {
    // The documentation needs nothing set up, and the lab sets itself up.
    if !matches!(cli.command, Command::Completions { .. } | Command::Man { .. } | Command::Lab { .. }) {
        // Before any thread: under `ip netns exec`, find the host's bpffs.
        xnf_core::state::join_host_mount_ns()?;
        if let Some(ns) = &cli.netns {
            xnf_core::runtime::enter_netns(ns)?;
        }
        xnf_core::runtime::raise_memlock();
    }
    match cli.command {
        Command::Router(cmd) => xnf_router::cli::run(cmd),
        Command::Filter(cmd) => xnf_filter::cli::run(cmd),
        Command::Lb(cmd) => xnf_lb::cli::run(cmd),
        Command::Pass(cmd) => xnf_pass::cli::run(cmd),
        Command::Nf(cmd) => xnf_chain::cli::nf(cmd),
        Command::Chain(cmd) => xnf_chain::cli::chain(cmd),
        Command::Box(cmd) => xnf_config::cli::run(cmd),
        Command::Daemon(a) => xnf_daemon::run(a),
        Command::Profile(a) => xnf_profile::cli::run(a),
        Command::Lab { args } => crate::lab::exec(cli.netns.as_deref(), &args),
        Command::Afxdp(cmd) => xnf_afxdp::cli::run(cmd),
        Command::Features { json, require } => xnf_core::features::command(json, &require),
        Command::Completions { shell } => crate::docs::completions(shell, &mut std::io::stdout().lock()),
        Command::Man { out } => crate::docs::man(&out),
    }
}

/// The clap command of `xnf`, for man pages, completions and tests.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
