//! `xnf lab`: topologies in namespaces, an in-kernel generator, an XDP
//! sink, and experiments that compare xnf with the kernel doing the same job.

pub mod cpu;
pub mod router;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use xnf_bpf::gen::{GenConfig, GenProgram};
use xnf_bpf::pass::PassProgram;
use xnf_bpf::sink::SinkProgram;
use xnf_netns::Netns;

use crate::xdp_link::{XdpLink, XdpMode};

/// Makes Ctrl-C (SIGINT) and SIGTERM remove everything the lab built:
/// the signals are blocked in every thread and a dedicated thread waits for
/// them, deletes the lab's namespaces, collects the pins they leave and exits
/// with status 130. Call before starting any other thread.
pub fn remove_everything_on_interrupt() -> Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().context("blocking SIGINT/SIGTERM")?;
    std::thread::spawn(move || {
        let sig = set.wait();
        eprintln!("\nxnf lab: {} received: removing the lab's namespaces", sig.map(|s| s.as_str()).unwrap_or("signal"));
        if let Err(e) = xnf_netns::cleanup_all() {
            eprintln!("xnf lab: {e:#}");
        }
        crate::state::gc_dead_namespaces();
        std::process::exit(130);
    });
    Ok(())
}

/// An XDP program attached by the lab to one interface in a namespace;
/// detached when dropped (the link is not pinned).
pub struct LabAttachment {
    _link: XdpLink,
    counts: Option<MapHandle>,
}

impl LabAttachment {
    /// Attaches the counting, dropping sink program to `dev` in `ns`.
    pub fn sink(ns: &Netns, dev: &str) -> Result<Self> {
        let dev = dev.to_string();
        ns.run(move || -> Result<Self> {
            let ifindex = crate::netlink::link_by_name(&dev)?.ifindex;
            let prog = SinkProgram::load()?;
            let link = XdpLink::create(prog.prog(), ifindex, &dev, XdpMode::Native)?;
            let counts = MapHandle::try_from(prog.counts_map())?;
            Ok(LabAttachment { _link: link, counts: Some(counts) })
        })?
    }

    /// Attaches the XDP_PASS program to `dev` in `ns` (a veth end that must
    /// receive XDP_TX/redirected frames but otherwise use the kernel path).
    pub fn pass(ns: &Netns, dev: &str) -> Result<Self> {
        let dev = dev.to_string();
        ns.run(move || -> Result<Self> {
            let ifindex = crate::netlink::link_by_name(&dev)?.ifindex;
            let prog = PassProgram::load()?;
            let link = XdpLink::create(prog.prog(), ifindex, &dev, XdpMode::Native)?;
            Ok(LabAttachment { _link: link, counts: None })
        })?
    }

    /// Packets counted by a sink attachment.
    pub fn packets(&self) -> Result<u64> {
        let map = self.counts.as_ref().context("not a sink attachment")?;
        let per_cpu = map.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
        Ok(per_cpu.iter().map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap())).sum())
    }
}

/// The live-frame generator running on one pinned CPU until stopped.
pub struct Generator {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    thread: Option<JoinHandle<Result<()>>>,
}

/// Seconds one BPF_PROG_TEST_RUN call should last. Every live-frame run
/// ends with a teardown that waits (an RCU grace period, measured at ~30%
/// of the time with 40 ms calls): long calls amortise it; the stop flag is
/// checked between calls, so this is also how long stopping may take.
const GEN_CALL_SECS: f64 = 0.5;

impl Generator {
    /// Starts sending `cfg` out of `dev` in `ns`, from CPU `cpu`.
    pub fn start(ns: &Netns, dev: &str, cfg: GenConfig, cpu: usize) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (stop2, sent2) = (stop.clone(), sent.clone());
        let path = ns.path();
        let dev = dev.to_string();
        let thread = std::thread::spawn(move || -> Result<()> {
            let f = std::fs::File::open(&path)?;
            nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).context("entering the generator's namespace")?;
            let mut set = nix::sched::CpuSet::new();
            set.set(cpu)?;
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).context("pinning the generator")?;
            let ifindex = crate::netlink::link_by_name(&dev)?.ifindex;
            let prog = GenProgram::load(&cfg)?;
            let mut chunk: u32 = 1 << 14;
            while !stop2.load(Ordering::Relaxed) {
                let t0 = std::time::Instant::now();
                prog.send(ifindex, chunk)?;
                sent2.fetch_add(chunk as u64, Ordering::Relaxed);
                // Size the next call to last about GEN_CALL_SECS.
                let secs = t0.elapsed().as_secs_f64().max(1e-4);
                chunk = ((chunk as f64 * GEN_CALL_SECS / secs) as u32).clamp(1 << 14, 1 << 26);
            }
            Ok(())
        });
        Ok(Generator { stop, sent, thread: Some(thread) })
    }

    /// Frames handed to the interface so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops and reports whether the generator failed.
    pub fn stop(mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let res = self.thread.take().unwrap().join().map_err(|_| anyhow::anyhow!("generator thread panicked"))?;
        res.map(|()| self.sent())
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
