//! XDP programs the lab attaches to its namespaces' interfaces for the
//! length of an experiment (sink, pass, the raw verdicts, the router), each
//! detached when its guard is dropped.

use anyhow::{Context, Result};
use xnf_core::xdp::{XdpLink, XdpMode};
use xnf_netns::netlink::link_by_name;
use xnf_netns::Netns;
use xnf_router::program::FibMode;

pub use crate::programs::actions::ActionKind;
use crate::programs::actions::{Action, ActionCounters, ActionsProgram};
use crate::programs::sink::{SinkCounter, SinkOptions, SinkProgram};

/// An XDP program attached by the lab to one interface in a namespace;
/// detached when dropped (the link is not pinned).
pub struct LabAttachment {
    _link: XdpLink,
    counter: Option<SinkCounter>,
    actions: Option<ActionCounters>,
}

impl LabAttachment {
    /// Attaches the counting, dropping sink program to `dev` in `ns`.
    pub fn sink(ns: &Netns, dev: &str) -> Result<Self> {
        Self::attach(ns, dev, Some(SinkOptions::default()), XdpMode::Native)
    }

    /// The sink in XDP `mode` (skb: generic XDP, after the kernel made an skb).
    pub fn sink_in(ns: &Netns, dev: &str, mode: XdpMode) -> Result<Self> {
        Self::attach(ns, dev, Some(SinkOptions::default()), mode)
    }

    /// The sink with options: counts per frame length, a capture of every
    /// frame (read through [`sink_counter`](Self::sink_counter)).
    pub fn sink_with(ns: &Netns, dev: &str, opts: SinkOptions) -> Result<Self> {
        Self::attach(ns, dev, Some(opts), XdpMode::Native)
    }

    /// Attaches the XDP_PASS program to `dev` in `ns` (a veth end that must
    /// receive XDP_TX/redirected frames but otherwise use the kernel path).
    /// A topology's function on `dev`: the counting sink or pass (the
    /// router is not an attachment: [`NfGuard::router`]).
    pub fn of_kind(kind: super::topology::FunctionKind, ns: &Netns, dev: &str) -> Result<Self> {
        match kind {
            super::topology::FunctionKind::Sink => Self::sink(ns, dev),
            super::topology::FunctionKind::Pass => Self::pass(ns, dev),
            super::topology::FunctionKind::Router => anyhow::bail!("the router is attached by NfGuard::router, not as a lab attachment"),
        }
    }

    pub fn pass(ns: &Netns, dev: &str) -> Result<Self> {
        Self::attach(ns, dev, None, XdpMode::Native)
    }

    /// XDP_PASS in XDP `mode`.
    pub fn pass_in(ns: &Netns, dev: &str, mode: XdpMode) -> Result<Self> {
        Self::attach(ns, dev, None, mode)
    }

    fn attach(ns: &Netns, dev: &str, sink: Option<SinkOptions>, mode: XdpMode) -> Result<Self> {
        let dev = dev.to_string();
        // Programs cannot leave the thread that loaded them; the link and
        // the counter handle (plain fds) can.
        ns.run(move || -> Result<Self> {
            let ifindex = link_by_name(&dev)?.ifindex;
            if let Some(opts) = sink {
                let prog = SinkProgram::load_with(opts)?;
                let link = XdpLink::create(prog.prog(), ifindex, &dev, mode)?;
                Ok(LabAttachment { _link: link, counter: Some(prog.counter()?), actions: None })
            } else {
                let prog = xnf_pass::PassProgram::load()?;
                let link = XdpLink::create(prog.prog(), ifindex, &dev, mode)?;
                Ok(LabAttachment { _link: link, counter: None, actions: None })
            }
        })?
    }

    /// Attaches the raw-verdict program to `dev` in `ns`; a redirect goes
    /// to `to_dev` (in `ns`), a CPU redirect to `cpu`.
    pub fn action(ns: &Netns, dev: &str, action: ActionKind, to_dev: &str, cpu: u32) -> Result<Self> {
        Self::action_in(ns, dev, action, to_dev, cpu, XdpMode::Native)
    }

    /// [`action`](Self::action) in XDP `mode`.
    pub fn action_in(ns: &Netns, dev: &str, action: ActionKind, to_dev: &str, cpu: u32, mode: XdpMode) -> Result<Self> {
        let (dev, to_dev) = (dev.to_string(), to_dev.to_string());
        ns.run(move || -> Result<Self> {
            let ifindex = link_by_name(&dev)?.ifindex;
            let action = match action {
                ActionKind::Drop => Action::Drop,
                ActionKind::Pass => Action::Pass,
                ActionKind::Tx => Action::Tx,
                ActionKind::Redirect => Action::Redirect { ifindex: link_by_name(&to_dev)?.ifindex },
                ActionKind::Cpumap => Action::Cpumap { cpu },
            };
            let prog = ActionsProgram::load(action)?;
            let link = XdpLink::create(prog.prog(), ifindex, &dev, mode)?;
            Ok(LabAttachment { _link: link, counter: None, actions: Some(prog.counters()?) })
        })?
    }

    /// Packets counted by a sink attachment.
    pub fn packets(&self) -> Result<u64> {
        self.sink_counter()?.packets()
    }

    /// A sink attachment's counters (per CPU, per length) and capture.
    pub fn sink_counter(&self) -> Result<&SinkCounter> {
        self.counter.as_ref().context("not a sink attachment")
    }

    /// Frames an action attachment acted on, and those its CPUMAP program
    /// received on the remote CPU.
    pub fn action_counts(&self) -> Result<(u64, u64)> {
        let c = self.actions.as_ref().context("not an action attachment")?;
        Ok((c.acted()?, c.remote()?))
    }
}

/// The router as the lab attaches it unless told otherwise: native XDP,
/// byte counters on, routes looked up by `fib`.
pub const fn router_options(fib: FibMode) -> xnf_router::AttachOptions {
    xnf_router::AttachOptions { mode: XdpMode::Native, fib, no_bytes: false }
}

/// The router as `xnf router attach` attaches it given no option: the
/// router's own default FIB mode ([`FibMode::default`], the route cache;
/// [`NfGuard::router`] starts its follower), so that the lab's `xnf` is
/// what users get.
pub fn default_router_options() -> xnf_router::AttachOptions {
    router_options(FibMode::default())
}

/// A network function (`xnf router`, `xnf filter`) attached to interfaces
/// in a lab namespace through its library, from a thread inside that
/// namespace, as the CLI would run there; detached when dropped.
pub struct NfGuard {
    ns: std::path::PathBuf,
    ifaces: Vec<String>,
    what: &'static str,
    detach: fn(&[String]) -> Result<()>,
    /// The router's follower; killed first.
    follower: Option<i32>,
}

impl NfGuard {
    /// The router on `ifaces` with `opts`, with its follower started, as
    /// `xnf router attach` does (it keeps the neighbours the router sends to
    /// confirmed, whatever the FIB mode). The route cache needs the
    /// follower's lease: with `--fib cache` the guard waits until it holds
    /// it, so that measuring starts with the cache in use.
    pub fn router(ns: &Netns, ifaces: &[String], opts: xnf_router::AttachOptions) -> Result<Self> {
        let names = ifaces.to_vec();
        ns.run(move || xnf_router::attach(&names, opts))?.with_context(|| format!("attaching the router in {}", ns.name()))?;
        let mut guard = NfGuard { ns: ns.path(), ifaces: ifaces.to_vec(), what: "router", detach: xnf_router::detach, follower: None };
        guard.follower = ns.run(xnf_router::spawn_follower)??;
        if opts.fib == FibMode::Cache {
            let t0 = std::time::Instant::now();
            while !ns.run(|| xnf_router::open_maps().and_then(|(_, m)| m.cache_ctl()).is_ok_and(|c| c.lease_until > 0))? {
                anyhow::ensure!(t0.elapsed().as_secs() < 60, "the router's follower in {} took no lease on the route cache in 60 s (see its log)", ns.name());
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        Ok(guard)
    }

    /// The filter on `ifaces`, its rules converged to `rules` (a rule
    /// file's text; `origin` names it in errors). If the rules fail, the
    /// filter is detached again before the error is returned.
    pub fn filter(ns: &Netns, ifaces: &[String], rules: &str, origin: &str) -> Result<Self> {
        let names = ifaces.to_vec();
        ns.run(move || xnf_filter::attach(&names, XdpMode::Native))?.with_context(|| format!("attaching the filter in {}", ns.name()))?;
        // The guard exists from here on, so a failing apply detaches.
        let guard = NfGuard { ns: ns.path(), ifaces: ifaces.to_vec(), what: "filter", detach: xnf_filter::detach, follower: None };
        let (text, origin2) = (rules.to_string(), origin.to_string());
        ns.run(move || xnf_filter::apply_text(&text, &origin2))?.with_context(|| format!("applying {origin} to the filter in {}", ns.name()))?;
        Ok(guard)
    }
}

impl Drop for NfGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.follower.take() {
            // SAFETY: kill and reap the follower this guard started (our
            // child), before the detach it would otherwise race.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        let (names, detach) = (std::mem::take(&mut self.ifaces), self.detach);
        match xnf_netns::run_in(&self.ns, move || detach(&names)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) | Err(e) => eprintln!("xnf lab: detaching the {} in {}: {e:#}", self.what, self.ns.display()),
        }
    }
}
