//! `xnf filter`: the commands, their arguments and their output.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Subcommand;
use xnf_core::runtime::watch_period;
use xnf_core::xdp::XdpMode;

use crate::apply::{self, Outcome};
use crate::capture::{capture, CaptureOptions};
use crate::report;

#[derive(Subcommand)]
pub enum FilterCmd {
    /// Attach the filter in front of whatever runs on the interfaces (router, chain, kernel).
    Attach {
        #[arg(required = true, value_name = "IFACE")]
        ifaces: Vec<String>,
        /// XDP mode: native (in the driver) or skb (generic, any device, slow).
        #[arg(long, value_enum, default_value = "native")]
        mode: XdpMode,
    },
    /// Detach the filter; with the last interface, its rules go too.
    Detach {
        #[arg(required = true, value_name = "IFACE")]
        ifaces: Vec<String>,
    },
    /// Converge the rules to a TOML file (checked whole first; see README).
    Apply {
        file: PathBuf,
        /// Roll the change back after SECS seconds unless `xnf filter confirm` follows.
        #[arg(long, value_name = "SECS")]
        confirm_within: Option<u64>,
    },
    /// Keep the change an `apply --confirm-within` made.
    Confirm,
    /// Go back to the rules an unconfirmed change replaced, now.
    Rollback {
        /// Wait SECS seconds first, and do nothing if the change was confirmed meanwhile.
        #[arg(long, value_name = "SECS", hide = true)]
        after: Option<u64>,
    },
    /// Interfaces, their stages, the rules' origin, a pending change.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Per-rule packets, bytes and drops, the reasons, the top dropped sources.
    Stats {
        #[arg(long)]
        json: bool,
        /// Show live rates, refreshed every SECS seconds (default 1).
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "1")]
        watch: Option<f64>,
        /// How many top dropped sources to list.
        #[arg(long, default_value = "10")]
        top: usize,
    },
    /// Write sampled dropped frames to a pcap file until Ctrl-C.
    Capture {
        /// The pcap file to write (`-` for standard output).
        #[arg(short = 'w', value_name = "FILE")]
        write: PathBuf,
        /// Only the drops of rule N (1-based, as `stats` numbers them).
        #[arg(long, value_name = "N")]
        rule: Option<u32>,
        /// At most N frames per second (the rest are not captured).
        #[arg(long, value_name = "N", default_value = "100")]
        max_pps: u64,
        /// Stop after N frames.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Stop after SECS seconds.
        #[arg(long, value_name = "SECS")]
        seconds: Option<f64>,
    },
}

pub fn run(cmd: FilterCmd) -> Result<()> {
    match cmd {
        FilterCmd::Attach { ifaces, mode } => {
            for name in crate::attach(&ifaces, mode)? {
                println!("attached filter to {name}");
            }
            Ok(())
        }
        FilterCmd::Detach { ifaces } => {
            crate::detach(&ifaces)?;
            for name in &ifaces {
                println!("detached filter from {name}");
            }
            Ok(())
        }
        FilterCmd::Apply { file, confirm_within } => apply_cmd(&file, confirm_within),
        FilterCmd::Confirm => {
            apply::confirm()?;
            println!("confirmed");
            Ok(())
        }
        FilterCmd::Rollback { after } => {
            let done = match after {
                Some(s) => apply::rollback_after(s)?,
                None => apply::rollback()?,
            };
            match (done, after) {
                (true, _) => println!("rolled back to the previous rules"),
                (false, None) => anyhow::bail!("no change awaits confirmation (`xnf filter status`)"),
                (false, Some(_)) => println!("the change was confirmed or replaced: nothing to roll back"),
            }
            Ok(())
        }
        FilterCmd::Status { json } => report::status(json),
        FilterCmd::Stats { json, watch, top } => report::stats(json, top, watch_period(watch)?),
        FilterCmd::Capture { write, rule, max_pps, count, seconds } => {
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            xnf_core::runtime::on_interrupt(move |_| s.store(true, Ordering::Relaxed))?;
            let rules = apply::applied()?.and_then(|a| crate::rules::RuleSet::parse(&a.text, &a.origin).ok()).map_or(0, |r| r.rules.len());
            if let Some(n) = rule {
                anyhow::ensure!((1..=rules as u32).contains(&n), "--rule {n}: the applied rules are numbered 1 to {rules} (`xnf filter stats`)");
            }
            let rule = rule.map(|n| n - 1);
            let o = CaptureOptions { rule, max_pps, count, seconds };
            let n = if write.as_os_str() == "-" {
                capture(|| Ok(std::io::stdout().lock()), &o, stop)?
            } else {
                let create = || std::fs::File::create(&write).map(std::io::BufWriter::new).with_context(|| format!("creating {}", write.display()));
                capture(create, &o, stop)?
            };
            eprintln!("{n} dropped frames captured");
            Ok(())
        }
    }
}

fn apply_cmd(file: &std::path::Path, confirm_within: Option<u64>) -> Result<()> {
    let within = confirm_within.map(Duration::from_secs);
    if within.is_some_and(|d| d.is_zero()) {
        anyhow::bail!("--confirm-within needs at least 1 second");
    }
    match apply::apply_file(file, within)? {
        Outcome::Unchanged => println!("{}: unchanged", file.display()),
        Outcome::Applied { rules, lists_loaded } => {
            println!("{}: {rules} rules applied", file.display());
            for l in lists_loaded {
                println!("list @{l} loaded");
            }
            if let Some(secs) = confirm_within {
                let log = xnf_core::state::run_dir()?.join("filter-rollback.log");
                xnf_core::runtime::spawn_detached(&["filter", "rollback", "--after", &secs.to_string()], &log)?;
                println!("rolled back in {secs} s unless `xnf filter confirm`");
            }
        }
    }
    Ok(())
}
