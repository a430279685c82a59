//! The box's commands: `xnf check`, `diff`, `apply`, `confirm`,
//! `rollback`, `show`. The binary only parses them and calls [`run`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Subcommand;

use crate::file::BoxConfig;

/// Where the box's file is unless one is named.
pub const DEFAULT_FILE: &str = "/etc/xnf/xnf.toml";

#[derive(Subcommand)]
pub enum BoxCmd {
    /// Check a box file whole without touching anything: every error, one
    /// per line, naming file, line and field.
    Check {
        /// The box file.
        #[arg(default_value = DEFAULT_FILE)]
        file: PathBuf,
    },
    /// What applying a box file would change, per network function and
    /// object (the lb's flows that move included); changes nothing.
    Diff {
        #[arg(default_value = DEFAULT_FILE)]
        file: PathBuf,
    },
    /// Converge the box to its file, all or nothing across network
    /// functions: on any failure the box is put back as it was. A second
    /// run changes nothing and says so. What the file leaves out is removed.
    Apply {
        #[arg(default_value = DEFAULT_FILE)]
        file: PathBuf,
        /// Roll back by itself after SECS unless `xnf confirm` comes first.
        #[arg(long, value_name = "SECS")]
        confirm_within: Option<u64>,
    },
    /// Keep the change an `apply --confirm-within` made.
    Confirm,
    /// Put back the box a pending `apply --confirm-within` replaced.
    Rollback {
        /// Wait SECS first, and roll back only if the change is still pending.
        #[arg(long, value_name = "SECS")]
        after: Option<u64>,
    },
    /// The running configuration, as a file that `xnf apply` takes (and
    /// converges to without a change).
    Show,
    /// The whole box: what runs, what the file says and what differs, and
    /// a change awaiting confirmation.
    Status {
        #[arg(default_value = DEFAULT_FILE)]
        file: PathBuf,
    },
    /// After installing another xnf: move every network function's pinned
    /// state and programs in this network namespace to this build's, in
    /// place — maps of a changed layout copied, each interface's stage
    /// swapped in one update, never a detach. A rerun finishes an upgrade
    /// that was interrupted. `xnf daemon` does this when it starts.
    Upgrade {
        /// Print what was done as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Reads and checks `path`, or fails with every error, one line each.
fn load(path: &Path) -> Result<BoxConfig> {
    crate::file::load(path).map_err(|errors| {
        for e in &errors {
            eprintln!("{e}");
        }
        anyhow::anyhow!("{}: {} error(s), nothing changed", path.display(), errors.len())
    })
}

pub fn run(cmd: BoxCmd) -> Result<()> {
    match cmd {
        BoxCmd::Check { file } => {
            load(&file)?;
            println!("{}: ok", file.display());
        }
        BoxCmd::Diff { file } => {
            let lines = crate::apply::diff(&load(&file)?)?;
            if lines.is_empty() {
                println!("nothing to change");
            }
            lines.iter().for_each(|l| println!("{l}"));
        }
        BoxCmd::Apply { file, confirm_within } => {
            let want = load(&file)?;
            let opts = crate::apply::ApplyOptions { confirm_within: confirm_within.map(Duration::from_secs), ..Default::default() };
            let (lines, warnings) = crate::apply::apply(&want, opts)?;
            warnings.iter().for_each(|w| eprintln!("xnf: warning: {w}"));
            lines.iter().for_each(|l| println!("{l}"));
            if !want.afxdp.is_empty() {
                eprintln!(
                    "xnf: note: the file's {} [[afxdp]] application(s) run under `xnf daemon`, which starts and supervises them; `xnf apply` does not",
                    want.afxdp.len()
                );
            }
            if let Some(secs) = confirm_within {
                let log = xnf_core::state::run_dir()?.join("box-rollback.log");
                xnf_core::runtime::spawn_detached(&["rollback", "--after", &secs.to_string()], &log)?;
                println!("rolls back in {secs} s unless `xnf confirm`");
            }
        }
        BoxCmd::Confirm => {
            crate::apply::confirm()?;
            println!("confirmed");
        }
        BoxCmd::Rollback { after } => {
            let done = match after {
                Some(s) => crate::apply::rollback_after(s)?,
                None => crate::apply::rollback()?,
            };
            match (done, after) {
                (true, _) => println!("rolled back"),
                (false, Some(_)) => println!("nothing to roll back: the change was confirmed or replaced"),
                (false, None) => bail!("no change awaits confirmation"),
            }
        }
        BoxCmd::Show => print!("{}", crate::apply::show()?),
        BoxCmd::Status { file } => crate::apply::status(&file)?.iter().for_each(|l| println!("{l}")),
        BoxCmd::Upgrade { json } => {
            let done = crate::upgrade::upgrade()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&done)?);
            } else {
                crate::upgrade::lines(&done).iter().for_each(|l| println!("{l}"));
            }
        }
    }
    Ok(())
}
