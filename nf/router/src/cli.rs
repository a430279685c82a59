//! `xnf router`: the commands, their arguments and their output.

use anyhow::Result;
use clap::Subcommand;
use xnf_core::runtime::{warn, watch_period};
use xnf_core::xdp::XdpMode;

use crate::program::FibMode;
use crate::{follow, report, AttachOptions};

#[derive(Subcommand)]
pub enum RouterCmd {
    /// Attach the router to interfaces (again with other --fib: replace atomically).
    Attach {
        #[arg(required = true, value_name = "IFACE")]
        ifaces: Vec<String>,
        /// XDP mode: native (in the driver) or skb (generic, any device, slow).
        #[arg(long, value_enum, default_value = "native")]
        mode: XdpMode,
        /// How to look routes up: cache (the default: full lookups
        /// remembered per destination, kept exact by the kernel and the
        /// follower), full (the kernel's lookup, every packet) or direct
        /// (the main table only, no policy rules). With --no-follow the
        /// default is full.
        #[arg(long, value_enum)]
        fib: Option<FibMode>,
        /// Count packets and reasons only, no bytes (a few cycles less per packet).
        #[arg(long)]
        no_byte_counters: bool,
        /// Do not start the background follower of kernel changes (VLANs,
        /// MACs, sources; with --fib cache the cache then stays unused).
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
    /// Follow kernel changes: keep VLAN, MAC and source tables current and
    /// the route cache exact (attach starts it).
    Follow,
}

pub fn run(cmd: RouterCmd) -> Result<()> {
    match cmd {
        RouterCmd::Attach { ifaces, mode, fib, no_byte_counters, no_follow } => {
            // The cache needs its follower: without one, full lookups.
            // FibMode's default is the route cache; the lab's `xnf` variant
            // takes the same default.
            let fib = fib.unwrap_or(if no_follow { FibMode::Full } else { FibMode::default() });
            let opts = AttachOptions { mode, fib, no_bytes: no_byte_counters };
            let mut report = crate::attach(&ifaces, opts)?;
            if fib == FibMode::Cache && no_follow && follow::running_pid().is_none() {
                report.warnings.push("--fib cache without a follower: the cache stays unused (lookups go to the FIB) until `xnf router follow` runs".into());
            }
            warn(&report.warnings);
            for name in &report.attached {
                println!("attached router to {name}");
            }
            for name in &report.replaced {
                println!("replaced router program on {name}");
            }
            if !no_follow {
                follow::spawn()?;
            }
            Ok(())
        }
        RouterCmd::Detach { ifaces } => {
            crate::detach(&ifaces)?;
            for name in &ifaces {
                println!("detached router from {name}");
            }
            Ok(())
        }
        RouterCmd::Status { json } => report::status(json),
        RouterCmd::Stats { json, watch } => report::stats(json, watch_period(watch)?),
        RouterCmd::Follow => follow::run(),
    }
}
