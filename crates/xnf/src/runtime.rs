//! Process set-up every xnf binary does before acting.

use anyhow::{Context, Result};

pub fn enter_netns(ns: &str) -> Result<()> {
    let path = if ns.contains('/') { ns.to_string() } else { format!("/run/netns/{ns}") };
    let f = std::fs::File::open(&path).with_context(|| format!("no network namespace {ns:?} ({path} not found; see `ip netns`)"))?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).with_context(|| format!("entering network namespace {ns} (are you root?)"))
}

/// BPF memory is charged to the memory cgroup since Linux 5.11; before, it
/// counted against RLIMIT_MEMLOCK. Raise the limit when we may, never fail.
pub fn raise_memlock() {
    let inf = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: plain syscall with a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &inf) } != 0 && !kernel_at_least(5, 11) {
        eprintln!("xnf: warning: cannot raise RLIMIT_MEMLOCK on a kernel older than 5.11; large maps may fail to load");
    }
}

pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let Ok(u) = nix::sys::utsname::uname() else { return true };
    let rel = u.release().to_string_lossy().into_owned();
    let mut it = rel.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse::<u32>().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (major, minor)
}

