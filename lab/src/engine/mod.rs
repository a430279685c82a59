//! The lab's engine: what every experiment shares — topologies in
//! namespaces, the generator, programs the lab attaches, measuring, the
//! zero-loss search, results, and the one experiment driver.

pub mod attach;
pub mod cpu;
pub mod generator;
pub mod measure;
pub mod nft;
pub mod progress;
pub mod results;
pub mod routes;
pub mod search;
pub mod table;
pub mod topology;

use anyhow::{Context, Result};

pub use attach::{ActionKind, LabAttachment, RouterGuard};
pub use generator::{split, GenOptions, Generator};

/// Makes Ctrl-C (SIGINT) and SIGTERM remove everything the lab built:
/// the signals are blocked in every thread and a dedicated thread waits for
/// them, deletes the lab's namespaces, collects the pins they leave and exits
/// with status 130. Call before starting any other thread.
pub fn remove_everything_on_interrupt() -> Result<()> {
    xnf_core::runtime::on_interrupt(|sig| {
        eprintln!("\nxnf lab: {sig} received: removing the lab's namespaces");
        if let Err(e) = xnf_netns::cleanup_all() {
            eprintln!("xnf lab: {e:#}");
        }
        xnf_core::state::gc_dead_namespaces();
        std::process::exit(130);
    })
}

/// The topology of `spec` (called `name` in messages) with `queues` RX/TX
/// queues per veth, kept in `built`: built anew only when the queue count
/// changes, the old one removed first.
pub fn topology_with_queues<'a>(built: &'a mut Option<(u32, topology::BuiltTopology)>, spec: &topology::TopologySpec, name: &str, queues: u32, pg: &mut progress::Progress) -> Result<&'a topology::BuiltTopology> {
    if built.as_ref().is_none_or(|(q, _)| *q != queues) {
        drop(built.take());
        let mut s = spec.clone();
        s.set_queues(queues);
        pg.message(&format!("building topology `{name}` with {queues} queue(s)"));
        *built = Some((queues, topology::BuiltTopology::build(&s, &mut |m| pg.message(m))?));
    }
    Ok(&built.as_ref().expect("built above").1)
}

/// An experiment's topology: loaded (built-in name or TOML file) and
/// checked to have the roles experiments measure by, after removing what
/// killed runs left behind (reported through `lines`).
pub fn experiment_topology(name: &str, lines: &mut dyn FnMut(&str)) -> Result<topology::TopologySpec> {
    let spec = topology::TopologySpec::load(name)?;
    spec.roles.as_ref().context("the topology needs a [roles] table (gen, dut_in, dut_out, sink)")?;
    for stale in xnf_netns::cleanup_stale()? {
        lines(&format!("removed {stale}, left by a lab or test run that was killed"));
    }
    Ok(spec)
}

