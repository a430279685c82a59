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

/// The `xnf` binary [`spawn_detached`] starts in a binary other than `xnf`
/// (`xnf-lab`): the one beside it, opened by [`use_xnf_beside_this_binary`]
/// (or the path where it was missing).
static XNF_BESIDE: std::sync::OnceLock<std::result::Result<std::fs::File, std::path::PathBuf>> = std::sync::OnceLock::new();

/// For a binary other than `xnf` that starts xnf commands (`xnf-lab`, whose
/// experiments attach the router and so start `xnf router follow`): makes
/// [`spawn_detached`] run the `xnf` binary beside this one rather than
/// this one. Call it first, before `state::join_host_mount_ns`: the binary
/// is opened here, while its path still leads to it. When it is missing,
/// nothing fails yet (most commands start no xnf); `spawn_detached` does,
/// in one line.
pub fn use_xnf_beside_this_binary() {
    let found = std::env::current_exe().map_err(|_| std::path::PathBuf::from("xnf")).and_then(|exe| {
        let xnf = exe.with_file_name("xnf");
        std::fs::File::open(&xnf).map_err(|_| xnf)
    });
    let _ = XNF_BESIDE.set(found);
}

/// Starts `xnf ARGS...`, detached: in a session of its own (it outlives the
/// terminal that started it), stdin closed, output to `log`. Returns its
/// pid. The binary is this very one, or in `xnf-lab` the `xnf` beside it
/// ([`use_xnf_beside_this_binary`]); either way through a link the kernel
/// keeps (`/proc/self/exe`, `/proc/self/fd/N`) rather than a path: under
/// `ip netns exec`, xnf has joined the host's mount namespace
/// (state::join_host_mount_ns), where the path the kernel gives for the
/// binary may lead nowhere (`/debug/xnf` when it lives on a mount of its
/// own, as target/ does in the kernel matrix's guests).
/// Makes `cmd`'s process a session of its own (no terminal's Ctrl-C nor
/// its parent's group reaches it) with no signal blocked: a parent that
/// waits for signals in a thread (on_interrupt) has them blocked, and exec
/// keeps the mask; unblocked, the child dies of SIGTERM like any daemon.
pub fn in_own_session(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid, sigemptyset and sigprocmask are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
}

pub fn spawn_detached(args: &[&str], log: &std::path::Path) -> Result<u32> {
    use std::os::unix::io::AsRawFd;
    use std::os::unix::process::CommandExt;
    let program = match XNF_BESIDE.get() {
        None => "/proc/self/exe".to_string(),
        Some(Ok(xnf)) => format!("/proc/self/fd/{}", xnf.as_raw_fd()),
        Some(Err(missing)) => anyhow::bail!(
            "cannot start `xnf {}`: the xnf binary is not beside this one ({} not found); build it with `cargo build -p xnf`",
            args.join(" "),
            missing.display()
        ),
    };
    let log = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = std::process::Command::new(program);
    cmd.arg0("xnf");
    cmd.args(args).stdin(std::process::Stdio::null()).stdout(log.try_clone()?).stderr(log);
    in_own_session(&mut cmd);
    let child = cmd.spawn().with_context(|| format!("starting `xnf {}`", args.join(" ")))?;
    Ok(child.id())
}

/// Parses the command line of binary `prog` (`xnf`, `xnf lab`); usage
/// errors become one line, like every other error, and exit with status 2
/// (help and version print as usual).
pub fn parse_args<P: clap::Parser>(prog: &str) -> P {
    match P::try_parse() {
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
            eprintln!("{prog}: error: {} (see `{prog} --help`)", parts.join(" "));
            std::process::exit(2);
        }
    }
}

/// The exit status of a command of binary `prog`: success, or failure
/// after one line on stderr with the error and its causes.
pub fn exit_code(prog: &str, result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line per fault (a checker names every fault of a file).
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            for line in msg.join(": ").lines() {
                eprintln!("{prog}: error: {line}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}
