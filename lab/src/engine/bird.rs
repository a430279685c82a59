//! BIRD 2 (Debian's `bird2`) as the lab runs it: a daemon per namespace,
//! started with its own configuration and control socket in a directory of
//! the run's own (never the system's /etc/bird or its service), in the
//! foreground as the lab's child, and killed by its guard — also on
//! Ctrl-C ([`kill_all`]) and, through the parent-death signal, when the
//! lab itself is killed.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use xnf_netns::Netns;

/// Pids of the daemons running, for the interrupt handler.
static RUNNING: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<i32>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills every daemon still running (Ctrl-C, SIGTERM).
pub fn kill_all() {
    for pid in std::mem::take(&mut *running()) {
        // SAFETY: a pid of our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// A directory of the run's own, removed with everything in it when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Result<TempDir> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xnf-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(TempDir(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `bird` binary, or one line saying how to get it.
fn binary() -> Result<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join("bird")).find(|b| b.is_file()));
    found.context("bird not found: install BIRD 2 (Debian's bird2; scripts/deps.sh does)")
}

/// Refuses, in one line, to go on without BIRD.
pub fn require() -> Result<()> {
    binary().map(|_| ())
}

/// The last line of a file (a daemon's log), for errors.
fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string))
        .unwrap_or_else(|| "nothing in its log".into())
}

/// A BIRD daemon in a lab namespace; killed when dropped.
pub struct Bird {
    name: String,
    child: Child,
    ctl: PathBuf,
    log: PathBuf,
}

impl Bird {
    /// Writes `config` to `dir/NAME.conf`, checks it (`bird -p`), starts
    /// BIRD with it in `ns` and waits until its control socket answers.
    /// `config` should log to [`Bird::log_path`].
    pub fn start(ns: &Netns, dir: &Path, name: &str, config: &str) -> Result<Bird> {
        let bin = binary()?;
        let conf = dir.join(format!("{name}.conf"));
        std::fs::write(&conf, config).with_context(|| format!("writing {}", conf.display()))?;
        let check = std::process::Command::new(&bin).arg("-p").arg("-c").arg(&conf).output().context("running bird -p")?;
        ensure!(check.status.success(), "BIRD refuses the lab's {name} configuration {}: {}", conf.display(), crate::engine::peers::last_line(&check.stderr));
        let (ctl, log) = (dir.join(format!("{name}.ctl")), Self::log_path(dir, name));
        let out = std::fs::File::create(dir.join(format!("{name}.out")))?;
        let mut cmd = ns.command(&bin.to_string_lossy());
        cmd.arg("-f").arg("-c").arg(&conf).arg("-s").arg(&ctl).stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
        // SAFETY: prctl is async-signal-safe. The daemon dies with the
        // thread that starts it — the lab's main thread — even on kill -9.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("starting bird in {}", ns.name()))?;
        running().push(child.id() as i32);
        let mut bird = Bird { name: name.into(), child, ctl, log };
        let t0 = Instant::now();
        while UnixStream::connect(&bird.ctl).is_err() {
            bird.alive()?;
            ensure!(t0.elapsed() < Duration::from_secs(30), "BIRD ({name}) did not open its control socket {} in 30 s", bird.ctl.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(bird)
    }

    pub fn log_path(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.log"))
    }

    /// An error if the daemon has exited, with the last line it logged.
    pub fn alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let out = self.log.with_extension("out");
            let why = if last_line(&out) != "nothing in its log" { last_line(&out) } else { last_line(&self.log) };
            bail!("BIRD ({}) exited ({status}): {why}", self.name);
        }
        Ok(())
    }

    /// A connection to its control socket (what `birdc` talks to).
    pub fn control(&self) -> Result<Control> {
        Control::connect(&self.ctl)
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        running().retain(|p| *p != pid);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection to a BIRD control socket: one command at a time, its
/// reply read to the final line (a code followed by a space).
pub struct Control {
    out: UnixStream,
    replies: BufReader<UnixStream>,
}

impl Control {
    pub fn connect(path: &Path) -> Result<Control> {
        let out = UnixStream::connect(path).with_context(|| format!("connecting to BIRD's control socket {}", path.display()))?;
        let mut c = Control { replies: BufReader::new(out.try_clone()?), out };
        c.reply()?; // the greeting
        Ok(c)
    }

    /// Sends `command` (as birdc would) and returns its reply's text.
    pub fn send(&mut self, command: &str) -> Result<String> {
        writeln!(self.out, "{command}")?;
        self.reply().with_context(|| format!("BIRD command `{command}`"))
    }

    fn reply(&mut self) -> Result<String> {
        let mut text = String::new();
        loop {
            let mut line = String::new();
            ensure!(self.replies.read_line(&mut line)? > 0, "BIRD closed its control socket");
            let code = line.get(..4).filter(|c| c.bytes().all(|b| b.is_ascii_digit()));
            text.push_str(line.get(5..).unwrap_or(""));
            // Codes 8xxx and 9xxx are errors; a space after the code ends the reply.
            if let Some(c) = code {
                ensure!(!c.starts_with('8') && !c.starts_with('9'), "BIRD: {}", line.trim());
                if line.as_bytes().get(4) == Some(&b' ') {
                    return Ok(text);
                }
            }
        }
    }
}
