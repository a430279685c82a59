//! The application in dut: a thread per queue, each with its socket, and
//! for AF_XDP the program steering each queue to its socket.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use anyhow::{ensure, Context, Result};
use xnf_afxdp::selector::AfxdpProgram;
use xnf_afxdp::{Counters, Mode, NetworkFunction, RunConfig, SocketConfig, UmemConfig, Wait, XskSet};
use xnf_core::xdp::{XdpLink, XdpMode};
use xnf_netns::Netns;

use super::Afxdp;

/// A zero-copy application, or the kernel's refusal as a variant this
/// driver does not have (the driver skips it, said once).
pub(super) fn zero_copy(app: Result<App>) -> Result<App> {
    app.map_err(|e| match e.downcast_ref::<xnf_afxdp::ZeroCopyUnsupported>() {
        Some(z) => crate::engine::Unavailable(format!("no AF_XDP zero-copy on this driver ({z})")).into(),
        None => e,
    })
}

/// The user-space application in dut: one thread per queue, each with its
/// own socket (and for AF_XDP its own UMEM, as xdpsock runs one per
/// queue), and for AF_XDP the program steering each queue to its socket.
/// Stopped when dropped: the program first, then the threads.
pub(super) struct App {
    /// Detached before the threads stop: no frame arrives while a
    /// thread's UMEM is counted, and every socket is out of the XSKMAP
    /// before it closes (see [`AfxdpProgram`]).
    xdp: Option<(XdpLink, AfxdpProgram)>,
    stop: Arc<AtomicBool>,
    workers: Vec<Worker>,
}

/// One queue's thread.
struct Worker {
    handle: Option<JoinHandle<Result<()>>>,
    /// Frames it handled (received, or sent back), kernel-socket variants.
    count: Arc<AtomicU64>,
    /// The runtime's counters, AF_XDP variants.
    counters: Option<Arc<Counters>>,
}

impl Worker {
    fn handled(&self) -> u64 {
        match &self.counters {
            Some(c) => c.rx_packets.load(Ordering::Relaxed),
            None => self.count.load(Ordering::Relaxed),
        }
    }
}

/// What a thread hands the lab once set up.
#[derive(Default)]
pub(super) struct Started {
    counters: Option<Arc<Counters>>,
    /// A duplicate of its AF_XDP socket, for the XSKMAP.
    xsk: Option<OwnedFd>,
}

pub(super) type Ready = mpsc::Sender<Result<Started>>;

impl App {
    /// Starts one thread per CPU of `cpus` (queue i's on `cpus[i]`) in
    /// `ns`, one after the other: `body(i)` is queue i's, and reports
    /// readiness (or its set-up error) through the channel before its
    /// loop. Returns the AF_XDP sockets the threads handed over, in order.
    pub(super) fn start<F>(ns: &Netns, cpus: &[usize], mut body: impl FnMut(u32) -> F) -> Result<(App, Vec<OwnedFd>)>
    where
        F: FnOnce(&AtomicBool, &AtomicU64, &Ready) -> Result<()> + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let mut app = App { xdp: None, stop: stop.clone(), workers: Vec::new() };
        let mut xsks = Vec::new();
        for (queue, &cpu) in cpus.iter().enumerate() {
            let enter = crate::experiments::latency::pingpong::pinned_in(ns, cpu)?;
            let count = Arc::new(AtomicU64::new(0));
            let (tx, rx) = mpsc::channel();
            let (s2, c2, f) = (stop.clone(), count.clone(), body(queue as u32));
            let handle = std::thread::spawn(move || -> Result<()> {
                or_report(enter(), &tx)?;
                f(&s2, &c2, &tx)
            });
            app.workers.push(Worker { handle: Some(handle), count, counters: None });
            let started = rx.recv().context("the application thread ended before it was ready")??;
            app.workers.last_mut().expect("pushed above").counters = started.counters;
            xsks.extend(started.xsk);
        }
        Ok((app, xsks))
    }

    /// Stops everything; the first thread's error, if any.
    pub(super) fn finish(mut self) -> Result<()> {
        self.stop_all().into_iter().next().map_or(Ok(()), Err)
    }

    fn stop_all(&mut self) -> Vec<anyhow::Error> {
        drop(self.xdp.take());
        self.stop.store(true, Ordering::Relaxed);
        let joined = self.workers.iter_mut().filter_map(|w| w.handle.take()).map(|h| h.join());
        joined.filter_map(|r| r.unwrap_or_else(|_| Err(anyhow::anyhow!("the application thread panicked"))).err()).collect()
    }

    pub(super) fn handled(&self) -> u64 {
        self.workers.iter().map(Worker::handled).sum()
    }

    /// Each queue's frames, in order.
    pub(super) fn per_queue(&self) -> Vec<u64> {
        self.workers.iter().map(Worker::handled).collect()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.stop_all();
    }
}

/// Passes a set-up result through, handing the error itself to the
/// waiting spawner when it failed (its kind is what the spawner decides
/// by: zero-copy refused); the thread ends with a note of that.
pub(super) fn or_report<T>(r: Result<T>, ready: &Ready) -> Result<T> {
    r.map_err(|e| {
        let _ = ready.send(Err(e));
        anyhow::anyhow!("the set-up failed (its error went to the lab)")
    })
}

/// xnf's AF_XDP runtime on `dev`: one socket per queue, each over its
/// own UMEM and driven by its own thread running `nf()`; the selector
/// puts every socket in its queue's XSKMAP slot and is attached last,
/// once every FILL ring is full.
pub(super) fn afxdp_app(dut: &Netns, dev: &str, cpus: &[usize], o: &Afxdp, nf: fn() -> Box<dyn NetworkFunction>, mode: Mode) -> Result<App> {
    let (spin, batch) = (o.spin, o.batch);
    let (mut app, xsks) = App::start(dut, cpus, |queue| {
        let (dev, mut nf) = (dev.to_string(), nf());
        move |stop: &AtomicBool, _: &AtomicU64, ready: &Ready| {
            let r = (|| -> Result<_> {
                let link = xnf_netns::netlink::link_by_name(&dev)?;
                let run = RunConfig { batch, wait: if spin { Wait::Spin } else { Wait::Poll { timeout_ms: 100 } } };
                let mut set = XskSet::new(UmemConfig::default(), &SocketConfig { mode, ..Default::default() }, run, &[(link.ifindex, dev.clone(), queue)])?;
                if nf.receives() {
                    set.fill_rings()?;
                }
                let xsk = set.sockets()[0].fd().try_clone_to_owned()?;
                Ok((set, xsk))
            })();
            let (mut set, xsk) = or_report(r, ready)?;
            let _ = ready.send(Ok(Started { counters: Some(set.counters()[0].clone()), xsk: Some(xsk) }));
            set.run(nf.as_mut(), stop)?;
            // The lab detached the program and emptied the XSKMAP before
            // setting `stop`: no frame is on its way into this UMEM.
            let acc = set.settled_accounting();
            ensure!(acc.balanced(), "AF_XDP UMEM accounting of queue {queue} does not balance after the run: {acc:?}");
            Ok(())
        }
    })?;
    let prog = AfxdpProgram::load()?;
    prog.set_rules(&[], false)?;
    for (queue, xsk) in xsks.iter().enumerate() {
        prog.add_socket(queue as u32, xsk)?;
    }
    // Our duplicates close here: each socket stays open in its thread.
    drop(xsks);
    let (fd, dev) = (prog.prog().as_fd().try_clone_to_owned()?, dev.to_string());
    let xdp = dut.run(move || -> Result<XdpLink> {
        let link = xnf_netns::netlink::link_by_name(&dev)?;
        XdpLink::create(fd.as_fd(), link.ifindex, &dev, XdpMode::Native)
    })??;
    app.xdp = Some((xdp, prog));
    Ok(app)
}
