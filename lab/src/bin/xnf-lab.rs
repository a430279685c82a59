//! `xnf-lab`: the lab's commands (`xnf lab --help`), a binary of its own so
//! that what only the lab uses (the HTML report, MRT parsing, progress
//! bars) stays out of the operator's `xnf`. `xnf lab ARGS...` execs
//! `xnf-lab ARGS...` (with argv[0] `xnf lab`); the lab starts xnf commands
//! (`xnf router follow`) with the `xnf` binary beside this one.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand};

/// Build test topologies in namespaces, generate traffic and measure.
#[derive(Parser)]
#[command(name = "xnf-lab", version, propagate_version = true)]
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
    #[command(flatten)]
    Lab(xnf_lab::cli::LabCmd),
    /// Write the man pages of the lab's commands (xnf-lab.1,
    /// xnf-lab-router.1, ...) into a folder; `xnf man` runs this.
    #[command(hide = true)]
    Man {
        /// The folder (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Man { out } => man(&out),
        Command::Lab(cmd) => {
            // Before any thread: under `ip netns exec`, find the host's bpffs.
            xnf_core::state::join_host_mount_ns()?;
            if let Some(ns) = &cli.netns {
                xnf_core::runtime::enter_netns(ns)?;
            }
            xnf_core::runtime::raise_memlock();
            xnf_lab::cli::run(cmd)
        }
    }
}

/// The pages are named as `man xnf-lab-router` finds them; their synopses
/// say `xnf lab router`, as users run them.
fn man(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    fn write(cmd: &clap::Command, dir: &Path, source: &str) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            write(sub, dir, source)?;
        }
        clap_mangen::Man::new(cmd.clone()).source(source).generate_to(dir).map(drop)
    }
    let mut cmd = Cli::command().bin_name("xnf lab").disable_help_subcommand(true);
    cmd.build();
    write(&cmd, dir, &format!("xnf {}", env!("CARGO_PKG_VERSION"))).with_context(|| format!("writing man pages into {}", dir.display()))
}

fn main() -> ExitCode {
    // First, while the path of this binary still leads to it.
    xnf_core::runtime::use_xnf_beside_this_binary();
    let cli = xnf_core::runtime::parse_args::<Cli>("xnf lab");
    xnf_core::runtime::exit_code("xnf lab", run(cli))
}
