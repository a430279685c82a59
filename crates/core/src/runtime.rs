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

/// The period of a `--watch [SECS]` option.
pub fn watch_period(watch: Option<f64>) -> Result<Option<std::time::Duration>> {
    match watch {
        Some(s) if !(s > 0.0 && s.is_finite()) => anyhow::bail!("--watch needs a positive number of seconds"),
        Some(s) => Ok(Some(std::time::Duration::from_secs_f64(s))),
        None => Ok(None),
    }
}

/// Prints warnings, one line each.
pub fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("xnf: warning: {w}");
    }
}

/// Runs `f` with the signal's name when SIGINT (Ctrl-C) or SIGTERM arrives:
/// both are blocked in the calling thread (and so in every thread it starts
/// afterwards; call this before starting any), and one thread waits for
/// them. `f` decides what stopping means: set a flag, or clean up and exit.
pub fn on_interrupt(f: impl FnOnce(&str) + Send + 'static) -> Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().context("blocking SIGINT/SIGTERM")?;
    std::thread::spawn(move || {
        if let Ok(sig) = set.wait() {
            f(sig.as_str());
        }
    });
    Ok(())
}

/// Starts this very binary as `xnf ARGS...`, detached: in a session of its
/// own (it outlives the terminal that started it), stdin closed, output to
/// `log`. Returns its pid. Through the kernel's link to the binary rather
/// than a path: under `ip netns exec`, xnf has joined the host's mount
/// namespace (state::join_host_mount_ns), where the path the kernel gives
/// for the binary may lead nowhere (`/debug/xnf` when it lives on a mount
/// of its own, as target/ does in the kernel matrix's guests).
pub fn spawn_detached(args: &[&str], log: &std::path::Path) -> Result<u32> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg0("xnf");
    cmd.args(args).stdin(std::process::Stdio::null()).stdout(log.try_clone()?).stderr(log);
    // SAFETY: setsid, sigemptyset and sigprocmask are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            // A parent that waits for signals in a thread (on_interrupt)
            // has them blocked, and exec keeps the mask: unblocked, the
            // child dies of SIGTERM like any daemon.
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = cmd.spawn().with_context(|| format!("starting `xnf {}`", args.join(" ")))?;
    Ok(child.id())
}
