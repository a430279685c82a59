//! The lab's engine: what every experiment shares — topologies in
//! namespaces, the generator, programs the lab attaches, measuring, the
//! zero-loss search, results, and the one experiment driver.

pub mod across;
pub mod attach;
pub mod bird;
pub mod borrowed;
pub mod cpu;
pub mod driver;
pub mod eventargs;
pub mod generator;
pub mod hosts;
pub mod hoststeps;
pub mod knobs;
pub mod measure;
pub mod mrt;
pub mod nft;
pub mod params;
pub mod peers;
pub mod placement;
pub mod profiling;
pub mod progress;
pub mod results;
pub mod routes;
pub mod search;
pub mod stream;
pub mod table;
pub mod testrun;
pub mod topology;
pub mod vlan;

use anyhow::Result;

/// What this driver or machine does not have — a knob (`--nic rx-ring` on
/// veth), a variant (AF_XDP zero-copy on veth) — as the code that meets it
/// says it, with the kernel's answer: the driver says it once and skips
/// the points or runs that need it.
#[derive(Debug)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unavailable {}

pub use attach::{ActionKind, LabAttachment, NfGuard};
pub use generator::{split, GenOptions, Generator};

/// Makes Ctrl-C (SIGINT) and SIGTERM remove everything the lab built:
/// the signals are blocked in every thread and a dedicated thread waits for
/// them, deletes the lab's namespaces, collects the pins they leave and exits
/// with status 130. Call before starting any other thread.
pub fn remove_everything_on_interrupt() -> Result<()> {
    xnf_core::runtime::on_interrupt(|sig| {
        INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
        eprintln!("\nxnf lab: {sig} received: removing the lab's namespaces");
        // Before the namespaces go: the commands run inside them.
        peers::detach_pending();
        bird::kill_all();
        // Before the namespaces go: a borrowed veth would go with them.
        borrowed::restore_pending();
        xnf_chain::podman::remove_live();
        if let Err(e) = xnf_netns::cleanup_all() {
            eprintln!("xnf lab: {e:#}");
        }
        xnf_core::state::gc_dead_namespaces();
        std::process::exit(130);
    })
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What the lab's command ended with, unless an interrupt is being handled:
/// the namespaces vanishing under the experiment make it fail, and that
/// error must not exit before the handler, which removes everything and
/// exits with status 130.
pub fn unless_interrupted(r: Result<()>) -> Result<()> {
    if r.is_err() && INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    r
}

/// Removes what lab and test runs that were killed left behind, saying so
/// through `lines`.
pub fn remove_stale(lines: &mut dyn FnMut(&str)) -> Result<()> {
    // Before the namespaces go: a borrowed veth would go with them.
    let held = borrowed::restore_stale(lines)?;
    for stale in xnf_netns::cleanup_stale_except(&held)? {
        lines(&format!("removed {stale}, left by a lab or test run that was killed"));
    }
    // Containers of a killed run's podman (chain's container variants).
    let roots = xnf_chain::podman::stale_roots();
    if !roots.is_empty() {
        let scratch = xnf_netns::Netns::new("podgc")?;
        for root in roots {
            xnf_chain::podman::remove_root(&root, &scratch.path());
            lines(&format!("removed podman root {} and its containers, left by a lab run that was killed", root.display()));
        }
    }
    Ok(())
}
