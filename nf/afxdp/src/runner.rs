//! Drives the sockets of one UMEM from one thread: reaps completions,
//! keeps the FILL rings stocked, takes batches from RX, hands them to the
//! network function, applies its verdicts, lets generators emit, and wakes
//! the kernel only when it has to — by `poll()` or by spinning.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::nf::{Batch, Emit, NetworkFunction, Slot, Verdict};
use crate::socket::{KernelStats, Socket, SocketConfig};
use crate::umem::{Umem, UmemConfig};

/// How the loop waits when there is nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// `poll()` on the sockets (sleeps; wakes on a frame, costs a wake-up).
    Poll { timeout_ms: i32 },
    /// Spin on the rings (burns the CPU, no wake-up delay).
    Spin,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunConfig {
    /// Packets taken from RX (and emitted) per socket per round.
    pub batch: u32,
    pub wait: Wait,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig { batch: 64, wait: Wait::Poll { timeout_ms: 100 } }
    }
}

/// Counters of one socket, updated by the loop and readable from any thread.
#[derive(Debug, Default)]
pub struct Counters {
    pub rx_packets: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub tx_packets: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// Dropped by the network function's verdict.
    pub nf_dropped: AtomicU64,
    /// Verdict Tx/Forward but the TX ring was full: dropped here.
    pub tx_ring_full: AtomicU64,
    /// Frames to refill FILL with were short (all in flight).
    pub fill_starved: AtomicU64,
    /// Syscalls made to wake the kernel: receive side, send side, poll().
    pub rx_wakeups: AtomicU64,
    pub tx_wakeups: AtomicU64,
    pub polls: AtomicU64,
}

/// A snapshot of [`Counters`] and the kernel's per-socket statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub nf_dropped: u64,
    pub tx_ring_full: u64,
    pub fill_starved: u64,
    pub rx_wakeups: u64,
    pub tx_wakeups: u64,
    pub polls: u64,
    pub kernel: KernelStats,
}

impl Counters {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self, kernel: KernelStats) -> Snapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            rx_packets: g(&self.rx_packets),
            rx_bytes: g(&self.rx_bytes),
            tx_packets: g(&self.tx_packets),
            tx_bytes: g(&self.tx_bytes),
            nf_dropped: g(&self.nf_dropped),
            tx_ring_full: g(&self.tx_ring_full),
            fill_starved: g(&self.fill_starved),
            rx_wakeups: g(&self.rx_wakeups),
            tx_wakeups: g(&self.tx_wakeups),
            polls: g(&self.polls),
            kernel,
        }
    }
}

/// Where every frame of the UMEM is: the sum must be the frame count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Accounting {
    #[serde(rename = "frames")]
    pub total: usize,
    pub free: usize,
    pub fill: usize,
    pub rx: usize,
    pub tx: usize,
    pub completion: usize,
    /// Frames in no ring and not ours. The kernel takes a frame from FILL
    /// to receive into; when it must then drop the packet (RX ring full)
    /// the frame goes to its buffer pool's free list, not back to FILL, and
    /// is used for the next packet. After such drops a few frames (at most
    /// one per receiving CPU) stay there until the socket closes.
    pub kernel_pool: usize,
    /// The kernel reported receive drops, so `kernel_pool` frames are explained.
    pub kernel_dropped: bool,
}

impl Accounting {
    fn in_rings(&self) -> usize {
        self.free + self.fill + self.rx + self.tx + self.completion
    }

    /// Nothing leaked: every frame is in exactly one place, or the few that
    /// are in none sit in the kernel's pool after receive drops.
    pub fn balanced(&self) -> bool {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.in_rings() == self.total || (self.in_rings() < self.total && self.kernel_dropped && self.kernel_pool <= cpus)
    }
}

/// Sockets sharing one UMEM, driven by one thread.
pub struct XskSet {
    // Sockets before the UMEM: they are closed before it is unmapped.
    sockets: Vec<Socket>,
    counters: Vec<Arc<Counters>>,
    umem: Umem,
    run: RunConfig,
    /// FILL target per socket.
    fill_target: u32,
    slots: Vec<Slot>,
    emitted: Vec<(u64, u32)>,
    /// Frames of a batch to send, per target socket (kept to reuse their memory).
    pending: Vec<Vec<(u64, u32)>>,
    /// Frames in a TX ring or in flight, per socket (for draining).
    outstanding: Vec<u64>,
}

/// Where one socket goes: (ifindex, ifname, queue).
pub type Binding = (u32, String, u32);

impl XskSet {
    /// Opens one socket per binding over a new UMEM (the first registers
    /// it, the others share it).
    pub fn new(umem_cfg: UmemConfig, sock_cfg: &SocketConfig, run: RunConfig, bindings: &[Binding]) -> Result<XskSet> {
        ensure!(!bindings.is_empty(), "no queue to bind a socket to");
        ensure!(run.batch >= 1 && run.batch <= sock_cfg.rx_size, "--batch {}: use 1..=--rx-ring ({})", run.batch, sock_cfg.rx_size);
        let umem = Umem::new(umem_cfg)?;
        let mut sockets: Vec<Socket> = Vec::new();
        for (ifindex, ifname, queue) in bindings {
            let s =
                Socket::new(&umem, *ifindex, ifname, *queue, sock_cfg, sockets.first()).with_context(|| format!("AF_XDP socket on {ifname} queue {queue}"))?;
            sockets.push(s);
        }
        // Half the frames may sit in FILL rings; the rest carry packets
        // being processed and sent.
        let fill_target = (umem_cfg.frame_count / 2 / bindings.len() as u32).min(sock_cfg.fill_size).max(1);
        let n = sockets.len();
        Ok(XskSet {
            sockets,
            counters: (0..n).map(|_| Arc::new(Counters::default())).collect(),
            umem,
            run,
            fill_target,
            slots: Vec::with_capacity(run.batch as usize),
            emitted: Vec::with_capacity(run.batch as usize),
            pending: vec![Vec::with_capacity(run.batch as usize); n],
            outstanding: vec![0; n],
        })
    }

    pub fn sockets(&self) -> &[Socket] {
        &self.sockets
    }

    /// Fills every socket's FILL ring now. A set that receives calls it
    /// before the program that redirects to its sockets is attached: the
    /// frames that arrive before the first [`XskSet::step`] would otherwise
    /// find no buffer, and the kernel drops them (`rx_fill_ring_empty`:
    /// the first frames of a run, lost now and then in the tests).
    pub fn fill_rings(&mut self) -> Result<()> {
        (0..self.sockets.len()).try_for_each(|i| self.refill(i))
    }

    pub fn counters(&self) -> Vec<Arc<Counters>> {
        self.counters.clone()
    }

    pub fn snapshot(&self, i: usize) -> Result<Snapshot> {
        Ok(self.counters[i].snapshot(self.sockets[i].kernel_stats()?))
    }

    /// Where the frames are right now.
    pub fn accounting(&self) -> Accounting {
        let total = self.umem.config().frame_count as usize;
        let mut a = Accounting { total, free: self.umem.free_frames(), fill: 0, rx: 0, tx: 0, completion: 0, kernel_pool: 0, kernel_dropped: false };
        for s in &self.sockets {
            a.fill += s.fill.occupied() as usize;
            a.rx += s.rx.occupied() as usize;
            a.tx += s.tx.occupied() as usize;
            a.completion += s.comp.occupied() as usize;
            a.kernel_dropped |= s.kernel_stats().is_ok_and(|k| k.rx_ring_full + k.rx_dropped > 0);
        }
        a.kernel_pool = total.saturating_sub(a.in_rings());
        a
    }

    /// The accounting once frames in motion have landed: a frame the kernel
    /// has taken from FILL but not yet put in RX is in neither for a
    /// moment, so an unbalanced reading is retried a few times. Detach the
    /// XDP program (or empty the XSKMAP) first so no new frame arrives.
    pub fn settled_accounting(&self) -> Accounting {
        let mut a = self.accounting();
        for _ in 0..20 {
            if a.balanced() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
            a = self.accounting();
        }
        a
    }

    /// Runs `nf` until `stop` is set, then drains: the frames already in
    /// the RX rings are processed, and every frame handed to a TX ring is
    /// waited for (up to a second) so the accounting balances.
    pub fn run(&mut self, nf: &mut dyn NetworkFunction, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::Relaxed) {
            if self.step(nf)? == 0 {
                self.wait()?;
            }
        }
        self.finish_received(nf)?;
        self.drain()
    }

    /// What the sockets had received when stopped is still the NF's (Ctrl-C
    /// must not leave frames the kernel delivered uncounted), at most a
    /// ring's worth per socket: traffic still arriving is not waited for.
    fn finish_received(&mut self, nf: &mut dyn NetworkFunction) -> Result<()> {
        if !nf.receives() {
            return Ok(());
        }
        for i in 0..self.sockets.len() {
            let mut left = self.sockets[i].rx.size() as usize;
            while left > 0 {
                match self.receive(i, nf)? {
                    0 => break,
                    n => left = left.saturating_sub(n),
                }
            }
        }
        Ok(())
    }

    /// One round over every socket without waiting: completions reaped,
    /// FILL topped up, a batch received and processed, the NF's packets
    /// emitted. Returns the frames moved (0: idle). For callers with their
    /// own loop (a pinger timing its sends, say).
    pub fn step(&mut self, nf: &mut dyn NetworkFunction) -> Result<usize> {
        let mut n = 0;
        for i in 0..self.sockets.len() {
            n += self.complete(i);
            if nf.receives() {
                self.refill(i)?;
                n += self.receive(i, nf)?;
            }
            n += self.emit(i, nf)?;
        }
        Ok(n)
    }

    /// Frames the kernel has sent come back to the free list.
    fn complete(&mut self, i: usize) -> usize {
        let s = &mut self.sockets[i];
        let n = s.comp.available(s.comp.size());
        for k in 0..n {
            self.umem.free(s.comp.read(k));
        }
        s.comp.release(n);
        self.outstanding[i] -= n as u64;
        n as usize
    }

    /// Tops the FILL ring up to its target from the free list.
    fn refill(&mut self, i: usize) -> Result<()> {
        let s = &mut self.sockets[i];
        let in_fill = s.fill.occupied();
        if in_fill < self.fill_target {
            let want = (self.fill_target - in_fill).min(s.fill.free(self.fill_target - in_fill));
            let have = want.min(self.umem.free_frames() as u32);
            if have < want {
                Counters::add(&self.counters[i].fill_starved, 1);
            }
            for k in 0..have {
                s.fill.write(k, self.umem.alloc().expect("counted free frames"));
            }
            if have > 0 {
                s.fill.submit(have);
            }
        }
        // With need_wakeup the kernel sets the flag when it stopped taking
        // frames; with busy polling this call is what runs the driver.
        if (s.need_wakeup && s.fill.needs_wakeup()) || s.busy_poll.is_some() {
            s.kick_rx().context("waking the kernel's receive side")?;
            Counters::add(&self.counters[i].rx_wakeups, 1);
        }
        Ok(())
    }

    fn receive(&mut self, i: usize, nf: &mut dyn NetworkFunction) -> Result<usize> {
        let s = &mut self.sockets[i];
        let n = s.rx.available(self.run.batch);
        if n == 0 {
            return Ok(0);
        }
        self.slots.clear();
        let mut bytes = 0u64;
        for k in 0..n {
            let d = s.rx.read(k);
            bytes += d.len as u64;
            self.slots.push(Slot { addr: d.addr, len: d.len, verdict: Verdict::Drop });
        }
        s.rx.release(n);
        let c = &self.counters[i];
        Counters::add(&c.rx_packets, n as u64);
        Counters::add(&c.rx_bytes, bytes);
        let mut slots = std::mem::take(&mut self.slots);
        nf.process(&mut Batch { umem: &mut self.umem, slots: &mut slots, socket: i });
        self.apply(i, &slots)?;
        self.slots = slots;
        Ok(n as usize)
    }

    /// Sends or frees every packet of a processed batch: one pass sorts
    /// them by target socket, then each target gets one reservation, one
    /// submit and one doorbell.
    fn apply(&mut self, from: usize, slots: &[Slot]) -> Result<()> {
        let n = self.sockets.len();
        let mut pending = std::mem::take(&mut self.pending);
        pending.iter_mut().for_each(Vec::clear);
        for s in slots {
            match s.verdict {
                Verdict::Tx => pending[from].push((s.addr, s.len)),
                Verdict::Forward(t) if t < n => pending[t].push((s.addr, s.len)),
                // Drop, or a socket the set does not have.
                _ => {
                    Counters::add(&self.counters[from].nf_dropped, 1);
                    self.umem.free(s.addr);
                }
            }
        }
        let r = (0..n).filter(|&t| !pending[t].is_empty()).try_for_each(|t| self.transmit(t, &pending[t], from));
        self.pending = pending;
        r
    }

    /// Puts `frames` on socket `target`'s TX ring and rings the kernel.
    /// Frames the ring has no room for are freed and counted as
    /// `tx_ring_full` of socket `from`.
    fn transmit(&mut self, target: usize, frames: &[(u64, u32)], from: usize) -> Result<()> {
        let s = &mut self.sockets[target];
        let room = (s.tx.free(frames.len() as u32) as usize).min(frames.len());
        let mut bytes = 0u64;
        for (k, &(addr, len)) in frames[..room].iter().enumerate() {
            s.tx.write(k as u32, libc::xdp_desc { addr, len, options: 0 });
            bytes += len as u64;
        }
        s.tx.submit(room as u32);
        for &(addr, _) in &frames[room..] {
            Counters::add(&self.counters[from].tx_ring_full, 1);
            self.umem.free(addr);
        }
        self.outstanding[target] += room as u64;
        Counters::add(&self.counters[target].tx_packets, room as u64);
        Counters::add(&self.counters[target].tx_bytes, bytes);
        if room > 0 {
            self.kick(target)?;
        }
        Ok(())
    }

    fn emit(&mut self, i: usize, nf: &mut dyn NetworkFunction) -> Result<usize> {
        let room = self.sockets[i].tx.free(self.run.batch).min(self.run.batch) as usize;
        if room == 0 {
            return Ok(0);
        }
        let mut out = std::mem::take(&mut self.emitted);
        out.clear();
        nf.emit(&mut Emit { umem: &mut self.umem, out: &mut out, room, socket: i });
        let r = self.transmit(i, &out, i);
        let n = out.len();
        self.emitted = out;
        r.map(|()| n)
    }

    /// The TX doorbell: copy mode always needs it, zero-copy with
    /// need_wakeup only when the kernel asks. In copy mode one `sendto`
    /// sends at most 32 frames (the kernel's per-call budget), so it rings
    /// until the ring is empty or the kernel stops taking frames.
    fn kick(&mut self, i: usize) -> Result<()> {
        let s = &self.sockets[i];
        if s.zero_copy {
            if !s.need_wakeup || s.tx.needs_wakeup() {
                s.kick_tx().with_context(|| format!("sending on {} queue {}", s.ifname, s.queue))?;
                Counters::add(&self.counters[i].tx_wakeups, 1);
            }
            return Ok(());
        }
        let mut left = s.tx.occupied();
        while left > 0 {
            s.kick_tx().with_context(|| format!("sending on {} queue {}", s.ifname, s.queue))?;
            Counters::add(&self.counters[i].tx_wakeups, 1);
            let now = s.tx.occupied();
            if now >= left {
                break; // the kernel took nothing (device busy): the next round retries
            }
            left = now;
        }
        Ok(())
    }

    fn wait(&mut self) -> Result<()> {
        match self.run.wait {
            Wait::Spin => std::hint::spin_loop(),
            Wait::Poll { timeout_ms } => {
                // POLLOUT too while frames are out: a generator whose TX ring
                // is full sleeps until the kernel has made room.
                let mut fds: Vec<libc::pollfd> = self
                    .sockets
                    .iter()
                    .zip(&self.outstanding)
                    .map(|(s, &out)| libc::pollfd { fd: s.fd().as_raw_fd(), events: libc::POLLIN | if out > 0 { libc::POLLOUT } else { 0 }, revents: 0 })
                    .collect();
                // SAFETY: fds is a valid array of pollfd.
                let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
                if rc < 0 {
                    let e = std::io::Error::last_os_error();
                    ensure!(e.raw_os_error() == Some(libc::EINTR), "poll() on the AF_XDP sockets: {e}");
                }
                for c in &self.counters {
                    Counters::add(&c.polls, 1);
                }
            }
        }
        Ok(())
    }

    /// Waits for every frame given to a TX ring to come back.
    fn drain(&mut self) -> Result<()> {
        let t0 = Instant::now();
        while self.outstanding.iter().any(|&o| o > 0) && t0.elapsed() < Duration::from_secs(1) {
            for i in 0..self.sockets.len() {
                if self.outstanding[i] > 0 {
                    self.sockets[i].kick_tx().ok();
                }
                self.complete(i);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}
