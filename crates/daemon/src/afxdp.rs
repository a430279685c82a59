//! The box file's `[[afxdp]]` applications, each an `xnf afxdp run`
//! process of this daemon's: started at start and on each reload that adds
//! or changes one (changed: another command line), stopped when the file
//! drops or changes it (SIGINT, up to 5 s to finish, then SIGKILL), and
//! started again when it exits, after 1 s doubling up to 30 s.
//!
//! Each runs in a session of its own and outlives the daemon: nothing here
//! stops it when the daemon stops or is killed (no PDEATHSIG; the unit's
//! `KillMode=process`), since its selector is attached by a link its own
//! process holds and stopping it would take the function away. What runs
//! is recorded under the run folder ([`xnf_config::afxdp::Record`]), and a
//! daemon started again adopts a process whose recorded pid lives with the
//! recorded command line instead of starting a second one.
//!
//! Log lines: `xnf daemon: event=afxdp name=NAME state=started|exited|restarting|stopped pid=PID ...`.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use xnf_config::afxdp::{self as rec, App, Record};

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a stopped application has to finish (its report, the link
/// dropped) before SIGKILL.
const STOP_WAIT: Duration = Duration::from_secs(5);

fn log(name: &str, state: &str, rest: &str) {
    crate::log("afxdp", &format!("name={name} state={state}{}{rest}", if rest.is_empty() { "" } else { " " }));
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn save(r: &Record) {
    if let Err(e) = rec::write_record(r) {
        log(&r.app.name, "error", &format!("error={:?}", format!("{e:#}")));
    }
}

enum Proc {
    /// Started by this daemon, which reaps it.
    Child(Child),
    /// Left running by a daemon before this one: watched by pid and
    /// command line (its exit is reaped by whoever inherited it).
    Adopted,
    /// Not running; started (again) at that instant.
    Down(Instant),
}

struct Slot {
    rec: Record,
    proc: Proc,
    /// The wait before the next start after an exit.
    backoff: Duration,
    /// When its process started (or was adopted).
    since: Instant,
    /// Its interface is missing (said once).
    waiting: bool,
}

impl Slot {
    fn new(rec: Record, proc: Proc) -> Slot {
        Slot { rec, proc, backoff: FIRST_BACKOFF, since: Instant::now(), waiting: false }
    }

    fn pid(&self) -> Option<u32> {
        match &self.proc {
            Proc::Child(c) => Some(c.id()),
            Proc::Adopted => self.rec.up().then_some(self.rec.pid),
            Proc::Down(_) => None,
        }
    }

    /// Starts its process, or schedules another try.
    fn start(&mut self) {
        let name = self.rec.app.name.clone();
        let iface = &self.rec.app.interface;
        if !xnf_netns::netlink::links().map(|l| l.iter().any(|l| &l.name == iface)).unwrap_or(true) {
            if !self.waiting {
                log(&name, "waiting", &format!("note=\"{iface} does not exist (yet): started when it appears\""));
            }
            self.waiting = true;
            self.proc = Proc::Down(Instant::now() + FIRST_BACKOFF);
            return;
        }
        self.waiting = false;
        match spawn(&self.rec.argv) {
            Ok(child) => {
                self.rec.pid = child.id();
                self.rec.started = now_secs();
                self.since = Instant::now();
                save(&self.rec);
                log(&name, "started", &format!("pid={} argv={:?}", child.id(), self.rec.argv.join(" ")));
                self.proc = Proc::Child(child);
            }
            Err(e) => self.exited(None, &format!("error={:?}", format!("{e:#}"))),
        }
    }

    /// Its process is gone: started again after the backoff.
    fn exited(&mut self, pid: Option<u32>, how: &str) {
        let name = &self.rec.app.name;
        let pid = pid.map_or("none".into(), |p| p.to_string());
        log(name, "exited", &format!("pid={pid} {how}"));
        // One that ran a while is not crash-looping: its wait starts over.
        if self.since.elapsed() >= MAX_BACKOFF {
            self.backoff = FIRST_BACKOFF;
        }
        self.rec.restarts += 1;
        save(&self.rec);
        log(name, "restarting", &format!("pid={pid} delay={}s restarts={}", self.backoff.as_secs(), self.rec.restarts));
        self.proc = Proc::Down(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }
}

/// `xnf afxdp run ...` by this very binary, as `argv` (`argv[0]` is `xnf`):
/// in a session of its own (a Ctrl-C to the daemon's terminal is not its),
/// signals unblocked, its output in the daemon's stderr.
fn spawn(argv: &[String]) -> anyhow::Result<Child> {
    use std::os::fd::AsFd;
    let err = std::io::stderr().as_fd().try_clone_to_owned()?;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0(&argv[0]).args(&argv[1..]).stdin(Stdio::null()).stdout(Stdio::from(err)).stderr(Stdio::inherit());
    xnf_core::runtime::in_own_session(&mut cmd);
    Ok(cmd.spawn()?)
}

fn signal(pid: u32, sig: libc::c_int) {
    if pid > 0 {
        // SAFETY: kill(2) of a process checked alive with its command line.
        unsafe { libc::kill(pid as libc::pid_t, sig) };
    }
}

/// Stops the slots' processes: SIGINT to all, up to [`STOP_WAIT`] for
/// them to finish, SIGKILL to the rest.
fn stop_all(mut slots: Vec<Slot>) {
    for s in &slots {
        s.pid().into_iter().for_each(|p| signal(p, libc::SIGINT));
    }
    let t0 = Instant::now();
    let gone = |s: &mut Slot| match &mut s.proc {
        Proc::Child(c) => !matches!(c.try_wait(), Ok(None)),
        Proc::Adopted => !s.rec.up(),
        Proc::Down(_) => true,
    };
    while !slots.iter_mut().all(gone) && t0.elapsed() < STOP_WAIT {
        std::thread::sleep(Duration::from_millis(50));
    }
    for s in &mut slots {
        let pid = s.rec.pid;
        let how = match &mut s.proc {
            Proc::Down(_) => "was-down",
            Proc::Child(c) => match c.try_wait() {
                Ok(None) => {
                    let _ = c.kill();
                    let _ = c.wait();
                    "SIGKILL"
                }
                _ => "SIGINT",
            },
            Proc::Adopted if s.rec.up() => {
                signal(pid, libc::SIGKILL);
                "SIGKILL"
            }
            Proc::Adopted => "SIGINT",
        };
        log(&s.rec.app.name, "stopped", &format!("pid={pid} by={how}"));
    }
}

/// The applications this daemon supervises.
#[derive(Default)]
pub struct Supervisor {
    slots: BTreeMap<String, Slot>,
}

impl Supervisor {
    /// What a daemon before this one recorded: a process still running
    /// with its recorded command line is adopted, not started again.
    pub fn adopt() -> Supervisor {
        let records = rec::records().unwrap_or_else(|e| {
            crate::log("afxdp", &format!("state=error error={:?}", format!("reading the records: {e:#}")));
            Vec::new()
        });
        let mut slots = BTreeMap::new();
        for r in records {
            let proc = if r.up() {
                log(&r.app.name, "started", &format!("pid={} adopted=yes", r.pid));
                Proc::Adopted
            } else {
                Proc::Down(Instant::now())
            };
            slots.insert(r.app.name.clone(), Slot::new(r, proc));
        }
        Supervisor { slots }
    }

    /// Runs what `want` says: stops what it drops or changes, starts what
    /// it adds or changes.
    pub fn converge(&mut self, want: &[App]) {
        let stale: Vec<String> =
            self.slots.iter().filter(|(n, s)| !want.iter().any(|a| &a.name == *n && a.argv() == s.rec.argv)).map(|(n, _)| n.clone()).collect();
        let stopping: Vec<Slot> = stale.iter().filter_map(|n| self.slots.remove(n)).collect();
        let restarts: BTreeMap<String, u64> = stopping.iter().map(|s| (s.rec.app.name.clone(), s.rec.restarts)).collect();
        stop_all(stopping);
        for n in stale.iter().filter(|n| !want.iter().any(|a| &a.name == *n)) {
            if let Err(e) = rec::remove_record(n) {
                log(n, "error", &format!("error={:?}", format!("{e:#}")));
            }
        }
        for a in want {
            if !self.slots.contains_key(&a.name) {
                let r = Record { app: a.clone(), argv: a.argv(), pid: 0, started: 0, restarts: restarts.get(&a.name).copied().unwrap_or(0) };
                save(&r);
                self.slots.insert(a.name.clone(), Slot::new(r, Proc::Down(Instant::now())));
            }
        }
        self.tick();
    }

    /// Notices exits and starts what is due; every turn of the loop.
    pub fn tick(&mut self) {
        for s in self.slots.values_mut() {
            let exited = match &mut s.proc {
                Proc::Child(c) => match c.try_wait() {
                    Ok(None) => None,
                    Ok(Some(status)) => Some((c.id(), format!("status={:?}", status.to_string()))),
                    Err(e) => Some((c.id(), format!("error={:?}", e.to_string()))),
                },
                Proc::Adopted => (!s.rec.up()).then(|| (s.rec.pid, "status=unknown adopted=yes".to_string())),
                Proc::Down(at) => {
                    if *at <= Instant::now() {
                        s.start();
                    }
                    continue;
                }
            };
            if let Some((pid, how)) = exited {
                s.exited(Some(pid), &how);
            }
        }
    }
}
