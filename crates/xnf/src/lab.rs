//! `xnf lab ARGS...` runs the lab, a binary of its own (`xnf-lab`, so
//! that its report, MRT and progress-bar dependencies stay out of `xnf`),
//! the way git runs `git-NAME`: the `xnf-lab` beside this binary, else the
//! first on PATH, exec'd in place of this process, so that its signals,
//! Ctrl-C, exit status and pid (which names its namespaces) are the lab's.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The lab's binary.
pub const BINARY: &str = "xnf-lab";

/// What `xnf lab` says when there is no lab to run.
pub const NOT_INSTALLED: &str = "xnf lab is not installed: build it with `cargo build -p xnf-lab` or install the xnf-lab package";

/// The `xnf-lab` binary: beside this one, else the first on PATH (empty
/// entries, the working directory, are not searched).
pub fn find() -> Option<PathBuf> {
    let beside = std::env::current_exe().ok().map(|exe| exe.with_file_name(BINARY));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path = std::env::split_paths(&path).filter(|d| !d.as_os_str().is_empty()).map(|d| d.join(BINARY));
    beside.into_iter().chain(on_path).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Replaces this process with `xnf-lab [--netns NS] ARGS...`; returns only
/// when that fails (not found: [`NOT_INSTALLED`]). Its argv[0] is `xnf lab`,
/// so its usage lines say what the user typed.
pub fn exec(netns: Option<&str>, args: &[OsString]) -> Result<()> {
    let bin = find().context(NOT_INSTALLED)?;
    let mut cmd = std::process::Command::new(&bin);
    cmd.arg0("xnf lab");
    if let Some(ns) = netns {
        cmd.arg("--netns").arg(ns);
    }
    let err = cmd.args(args).exec();
    Err(err).with_context(|| format!("running {}", bin.display()))
}
