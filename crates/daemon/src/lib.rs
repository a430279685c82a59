//! `xnf daemon`: one resident process per network namespace that keeps the
//! box as its file says. It applies the file at start — adopting what is
//! pinned and attached already, which an apply of the same file leaves
//! untouched — and again on SIGHUP or when the file changes, checked
//! first: a file that does not check keeps the running configuration, one
//! log line per fault. It follows the router (the VLAN, MAC and source
//! tables, the route cache's lease and generations, neighbour
//! confirmation: the follower's loop, in a thread of its own instead of
//! an `xnf router follow` process), the same neighbour confirmation for
//! the chain's exit and the lb (`neigh`), and decap's local addresses,
//! serves `/metrics`, `/healthz` and `/readyz`, and tells systemd when it is ready and alive (`Type=notify`,
//! watchdog). It supervises the file's `[[afxdp]]` applications, each an
//! `xnf afxdp run` process (`afxdp`), which outlive it.
//!
//! The data plane never needs it: programs and maps are pinned. Killed
//! (even with -9), forwarding goes on; what degrades until it is back is
//! what the follower keeps current — the route cache's lease lapses within
//! about a second and the router looks every route up in the kernel's FIB
//! again (slower, never wrong), VLAN devices, MAC and address changes are
//! not picked up, and STALE neighbours it sends to are not confirmed (the
//! kernel probes them and may drop them) — and nothing reloads the file.
//!
//! Log lines are `xnf daemon: event=NAME key=value ...`.

mod afxdp;
mod http;
mod metrics;
mod neigh;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use sd_notify::NotifyState;
use xnf_config::{ApplyOptions, BoxConfig};

pub use metrics::{gather, Family};

/// One scrape of this network namespace's metrics, as `/metrics` serves
/// it (Prometheus text): for measuring what a scrape costs.
pub fn scrape() -> Result<String> {
    metrics::render(&metrics::registry(), false)
}

/// `xnf daemon`'s options.
#[derive(clap::Args)]
pub struct DaemonArgs {
    /// The box file.
    #[arg(long, default_value = xnf_config::cli::DEFAULT_FILE)]
    pub config: PathBuf,
}

static RELOAD: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomics here: the loop does the work.
    if sig == libc::SIGHUP {
        RELOAD.store(true, Ordering::SeqCst);
    } else {
        STOP.store(true, Ordering::SeqCst);
    }
}

fn install_signals() {
    for sig in [libc::SIGHUP, libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to atomics (async-signal-safe).
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

fn log(event: &str, rest: &str) {
    eprintln!("xnf daemon: event={event}{}{rest}", if rest.is_empty() { "" } else { " " });
}

fn notify(states: &[NotifyState]) {
    // Not under systemd (no NOTIFY_SOCKET): nothing to tell.
    let _ = sd_notify::notify(states);
}

/// The file's content, to see that it changed (an editor may replace it).
fn fingerprint(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

/// Checks and applies `path`; on a file that does not check, or an apply
/// that failed (and rolled itself back), the running configuration stays.
fn apply(path: &Path) -> Result<BoxConfig> {
    let cfg = xnf_config::load(path).map_err(|errors| {
        for e in &errors {
            log("check", &format!("result=error error={e:?}"));
        }
        anyhow::anyhow!("{}: {} error(s), the running configuration stays", path.display(), errors.len())
    })?;
    let opts = ApplyOptions { own_follower: true, wait_for_interfaces: true, ..Default::default() };
    let (lines, warnings) = xnf_config::apply(&cfg, opts)?;
    for w in warnings {
        log("warning", &format!("message={w:?}"));
    }
    let changed: Vec<&String> = lines.iter().filter(|l| *l != "nothing to change").collect();
    log("apply", &format!("result=ok changes={}", changed.len()));
    for l in changed {
        log("change", &format!("what={l:?}"));
    }
    Ok(cfg)
}

/// State and programs a build before this one left are moved to this
/// build's first, in place (`xnf upgrade`): a package upgrade restarts the
/// daemon, and the apply that follows then finds its own layouts.
fn upgrade() -> Result<()> {
    let done = xnf_config::upgrade::upgrade().inspect_err(|e| log("upgrade", &format!("result=error error={:?}", format!("{e:#}"))))?;
    for r in &done {
        let maps: Vec<String> = r.migrated.iter().map(|m| format!("{}:{}+{}", m.name, m.copied, m.caught_up)).collect();
        log("upgrade", &format!("result=ok nf={} swapped={} migrated={:?} resumed={}", r.nf, r.swapped.len(), maps.join(","), r.resumed));
    }
    Ok(())
}

/// The interfaces of `cfg` that exist now: when this changes, the daemon
/// applies again (one that appeared gets its functions; one that went
/// lost them with its device).
fn present(cfg: &BoxConfig) -> std::collections::BTreeSet<String> {
    let named = xnf_config::interfaces(cfg);
    let links = xnf_netns::netlink::links().unwrap_or_default();
    named.into_iter().filter(|n| links.iter().any(|l| &l.name == n)).collect()
}

/// This namespace's addresses, to see when decap's local addresses must
/// follow (decap reads them at attach and on refresh only).
fn addresses() -> Vec<std::net::IpAddr> {
    let mut a: Vec<std::net::IpAddr> = xnf_netns::netlink::addresses().unwrap_or_default().into_iter().map(|x| x.addr).collect();
    a.sort();
    a
}

/// decap's local addresses rewritten, when decap runs here.
fn refresh_decap() {
    if xnf_core::lifecycle::Lifecycle::<xnf_lb::Decap>::maps().ok().flatten().is_none() {
        return;
    }
    match xnf_lb::decap::refresh() {
        Ok(c) if c.added.is_empty() && c.removed.is_empty() => {}
        Ok(c) => log("decap-locals", &format!("added={} removed={} total={}", c.added.len(), c.removed.len(), c.total)),
        Err(e) => log("decap-locals", &format!("result=error error={:?}", format!("{e:#}"))),
    }
}

/// The router's follower, in a thread of this process, whenever the
/// router runs here and nobody else follows it.
#[derive(Default)]
struct Follower(Option<std::thread::JoinHandle<()>>);

impl Follower {
    fn keep(&mut self) {
        if self.0.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let router = xnf_core::lifecycle::Lifecycle::<xnf_router::Router>::maps().ok().flatten().is_some();
        if !router || xnf_router::follower_pid().is_some() {
            return;
        }
        log("follower", "state=started");
        self.0 = std::thread::Builder::new()
            .name("xnf-follow".into())
            .spawn(|| {
                if let Err(e) = xnf_router::run_follower() {
                    log("follower", &format!("state=failed error={:?}", format!("{e:#}")));
                }
            })
            .ok();
    }
}

/// Runs until SIGTERM or SIGINT.
pub fn run(args: DaemonArgs) -> Result<()> {
    install_signals();
    let path = args.config;
    upgrade()?;
    let cfg = apply(&path)?;
    let health = Arc::new(http::Health::default());
    health.beat.store(http::now(), Ordering::Relaxed);
    http::serve(cfg.daemon.listen, health.clone())?;
    log("listen", &format!("address={}", cfg.daemon.listen));
    health.ready.store(true, Ordering::Relaxed);
    let mut follower = Follower::default();
    follower.keep();
    neigh::spawn();
    neigh::spawn_lb_cache();
    let mut apps = afxdp::Supervisor::adopt();
    apps.converge(&cfg.afxdp);
    notify(&[NotifyState::Ready, NotifyState::Status("applied")]);
    let watchdog = sd_notify::watchdog_enabled().map(|d| d / 2);
    let (mut last_dog, mut last_check) = (Instant::now(), Instant::now());
    let mut seen = fingerprint(&path);
    let mut listen = cfg.daemon.listen;
    let mut cfg = cfg;
    let mut here = present(&cfg);
    let mut addrs = addresses();
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(250));
        health.beat.store(http::now(), Ordering::Relaxed);
        if watchdog.is_some_and(|d| last_dog.elapsed() >= d) {
            notify(&[NotifyState::Watchdog]);
            last_dog = Instant::now();
        }
        let hup = RELOAD.swap(false, Ordering::SeqCst);
        let (mut changed, mut links) = (false, false);
        if last_check.elapsed() >= Duration::from_secs(1) {
            last_check = Instant::now();
            let now = fingerprint(&path);
            changed = now != seen;
            seen = now;
            let now = present(&cfg);
            links = now != here;
            here = now;
            let now = addresses();
            if now != addrs {
                addrs = now;
                refresh_decap();
            }
        }
        if hup || changed || links {
            let cause = if hup {
                "sighup"
            } else if changed {
                "file-changed"
            } else {
                "interfaces-changed"
            };
            log("reload", &format!("cause={cause}"));
            notify(&[NotifyState::Reloading]);
            match apply(&path) {
                Ok(c) => {
                    health.ready.store(true, Ordering::Relaxed);
                    if c.daemon.listen != listen {
                        log("listen", &format!("address={} note=\"a new address takes effect at restart\"", c.daemon.listen));
                        listen = c.daemon.listen;
                    }
                    here = present(&c);
                    apps.converge(&c.afxdp);
                    cfg = c;
                    notify(&[NotifyState::Ready, NotifyState::Status("applied")]);
                }
                Err(e) => {
                    log("reload", &format!("result=error error={:?}", format!("{e:#}")));
                    notify(&[NotifyState::Ready, NotifyState::Status("reload failed: running configuration kept")]);
                }
            }
        }
        follower.keep();
        apps.tick();
    }
    // The AF_XDP applications too: each holds its selector's link.
    log("stop", "note=\"the data plane and the AF_XDP applications stay\"");
    notify(&[NotifyState::Stopping]);
    Ok(())
}
