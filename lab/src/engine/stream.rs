//! A stamped UDP stream: datagrams that carry their send time
//! (CLOCK_MONOTONIC, one clock for every namespace), which destination of
//! the stream they went to and their sequence number, sent from one
//! namespace and received in another, so that an experiment can say which
//! frames followed which forwarding decision (`fib-change`, `bgp`) or, by
//! sequence number, which were lost and how long the receiver waited
//! between two (`disrupt`, [`Stream::sequenced`]).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use xnf_netns::Netns;

use crate::experiments::latency::pingpong::now_ns;

/// A received datagram: its send time (ns) and the index of its destination.
pub type Stamp = (u64, u16);

/// A received datagram of a sequenced stream: its sequence number and
/// when it arrived (ns, CLOCK_MONOTONIC).
pub type Arrival = (u64, u64);

/// A datagram: send time, destination index, sequence number.
const LEN: usize = 18;

/// The sender and the receiver of stamped datagrams.
pub struct Stream {
    stop: Arc<AtomicBool>,
    /// Received datagrams, newest last (not kept by a sequenced stream).
    received: Arc<Mutex<Vec<Stamp>>>,
    /// A sequenced stream's arrivals, in the order received.
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    /// Datagrams sent so far: the next one's sequence number.
    sent: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// How the sender spaces datagrams.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pacing {
    /// One gap of sleep after each datagram: at most the rate (the sleeps
    /// overshoot), and one gap is the resolution of a window.
    Sleep,
    /// Each datagram at its own deadline, late ones sent at once: the rate
    /// itself on average (a sequenced stream's loss is against it).
    Deadline,
}

/// A window of a sequenced stream ([`Stream::window`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Window {
    /// Sequence numbers in the window.
    pub sent: u64,
    /// Of them, received (each counted once).
    pub received: u64,
    /// The longest time between two consecutive arrivals, the last one
    /// before the window and the first one after it included (ns).
    pub longest_gap_ns: u64,
}

impl Window {
    pub fn lost(&self) -> u64 {
        self.sent - self.received
    }
}

impl Stream {
    /// Sends from `from` in `tx_ns` to each of `dsts` in turn, at most
    /// `rate` datagrams per second; a socket bound to `rx` in `rx_ns`
    /// receives them.
    pub fn start(tx_ns: &Netns, from: IpAddr, rx_ns: &Netns, rx: SocketAddr, dsts: Vec<SocketAddr>, rate: u32) -> Result<Stream> {
        Self::launch(tx_ns, from, rx_ns, rx, dsts, rate, Pacing::Sleep)
    }

    /// A sequenced stream to `rx` at `rate` datagrams per second on
    /// average: every arrival is kept by sequence number ([`Stream::window`]).
    pub fn sequenced(tx_ns: &Netns, from: IpAddr, rx_ns: &Netns, rx: SocketAddr, rate: u32) -> Result<Stream> {
        Self::launch(tx_ns, from, rx_ns, rx, vec![rx], rate, Pacing::Deadline)
    }

    fn launch(tx_ns: &Netns, from: IpAddr, rx_ns: &Netns, rx: SocketAddr, dsts: Vec<SocketAddr>, rate: u32, pacing: Pacing) -> Result<Stream> {
        ensure!(!dsts.is_empty() && dsts.len() <= usize::from(u16::MAX), "a stream needs 1 to 65535 destinations");
        let sock = rx_ns.bind(move || UdpSocket::bind(rx)).with_context(|| format!("binding the receiver's socket to {rx}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        if pacing == Pacing::Deadline {
            roomy(&sock);
        }
        let tx = tx_ns.run(move || UdpSocket::bind(SocketAddr::new(from, 0)))?.context("binding the sender's socket")?;
        let stop = Arc::new(AtomicBool::new(false));
        let (received, arrivals, sent) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicU64::new(0)));
        // Paced by sleeping, not spinning: the forwarder's helpers (the
        // route cache's follower) need a CPU of this 2-CPU machine too.
        let gap = Duration::from_nanos(1_000_000_000 / u64::from(rate.max(1)));
        let (s1, n) = (stop.clone(), sent.clone());
        let sender = std::thread::spawn(move || send(&tx, &dsts, gap, pacing, &s1, &n));
        let (s2, r, a) = (stop.clone(), received.clone(), arrivals.clone());
        let sequenced = pacing == Pacing::Deadline;
        let receiver = std::thread::spawn(move || receive(&sock, sequenced, &s2, &r, &a));
        Ok(Stream { stop, received, arrivals, sent, threads: vec![sender, receiver] })
    }

    /// Waits until `n` datagrams sent from now on have arrived.
    pub fn wait_delivered(&self, n: usize) -> Result<()> {
        let t = now_ns();
        let t0 = std::time::Instant::now();
        loop {
            let got = self.received.lock().unwrap().iter().rev().take_while(|s| s.0 > t).count();
            if got >= n {
                return Ok(());
            }
            ensure!(t0.elapsed() < Duration::from_secs(10), "no stamped traffic arrived ({got} of {n} datagrams in 10 s)");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The send time of the last datagram sent after `t0` that arrived,
    /// and how many did; forgets everything received.
    pub fn after(&self, t0: u64) -> (Option<u64>, u64) {
        let late: Vec<u64> = self.take().into_iter().map(|s| s.0).filter(|s| *s > t0).collect();
        (late.iter().max().copied(), late.len() as u64)
    }

    /// The send time of the first datagram sent after `t0` that arrived,
    /// if one has (nothing is forgotten).
    pub fn first_after(&self, t0: u64) -> Option<u64> {
        self.received.lock().unwrap().iter().map(|s| s.0).filter(|s| *s > t0).min()
    }

    /// Everything received since the last call.
    pub fn take(&self) -> Vec<Stamp> {
        std::mem::take(&mut *self.received.lock().unwrap())
    }

    /// Datagrams sent so far: the sequence number the next one gets.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// Waits up to `timeout` for a datagram numbered `seq` or later to
    /// arrive; whether one did.
    pub fn wait_for(&self, seq: u64, timeout: Duration) -> bool {
        let t0 = std::time::Instant::now();
        loop {
            if self.arrivals.lock().unwrap().iter().rev().any(|a| a.0 >= seq) {
                return true;
            }
            if t0.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Sequence numbers `from..to` of a sequenced stream: how many were
    /// received and the longest wait between arrivals ([`window`]).
    pub fn window(&self, from: u64, to: u64) -> Window {
        window(&self.arrivals.lock().unwrap(), from, to)
    }

    /// Forgets the arrivals of sequence numbers below `seq` (a long run
    /// would keep 16 bytes per datagram otherwise).
    pub fn forget_before(&self, seq: u64) {
        self.arrivals.lock().unwrap().retain(|a| a.0 >= seq);
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Gives a sequenced stream's receiver room for a second of datagrams
/// (8 MiB, past `net.core.rmem_max` as root may): on this 2-CPU machine
/// the receiving thread waits for a CPU for tens of milliseconds while a
/// daemon starts, and the default buffer (about 270 datagrams) would
/// overflow, losses that are the lab's, not the forwarder's.
fn roomy(sock: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 8 << 20;
    // SAFETY: setsockopt on a socket we own, with an int option value.
    let set = |opt| unsafe { libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, opt, (&size as *const libc::c_int).cast(), 4) == 0 };
    if !set(libc::SO_RCVBUFFORCE) && !set(libc::SO_RCVBUF) {
        eprintln!("xnf lab: the stream's receiver keeps its default buffer: {}", std::io::Error::last_os_error());
    }
}

/// The sender's loop: each datagram stamped, numbered and sent to the next
/// destination, spaced by `gap` as `pacing` says.
fn send(tx: &UdpSocket, dsts: &[SocketAddr], gap: Duration, pacing: Pacing, stop: &AtomicBool, sent: &AtomicU64) {
    let gap_ns = gap.as_nanos() as u64;
    let mut next = now_ns();
    for (i, to) in dsts.iter().enumerate().cycle() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let seq = sent.load(Ordering::Relaxed);
        let mut msg = [0u8; LEN];
        msg[..8].copy_from_slice(&now_ns().to_be_bytes());
        msg[8..10].copy_from_slice(&(i as u16).to_be_bytes());
        msg[10..].copy_from_slice(&seq.to_be_bytes());
        // A full buffer or a refused route is the experiment's
        // business, not the sender's: the datagram counts as sent.
        let _ = tx.send_to(&msg, to);
        sent.store(seq + 1, Ordering::SeqCst);
        match pacing {
            Pacing::Sleep => std::thread::sleep(gap),
            Pacing::Deadline => {
                next += gap_ns;
                let now = now_ns();
                if now < next {
                    std::thread::sleep(Duration::from_nanos(next - now));
                } else if now - next > 100_000_000 {
                    // Descheduled for long: start afresh rather than send
                    // a burst of the datagrams missed.
                    next = now;
                }
            }
        }
    }
}

/// The receiver's loop: stamps kept for an unsequenced stream, arrivals for
/// a sequenced one.
fn receive(sock: &UdpSocket, sequenced: bool, stop: &AtomicBool, received: &Mutex<Vec<Stamp>>, arrivals: &Mutex<Vec<Arrival>>) {
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        if let Ok(LEN) = sock.recv(&mut buf) {
            let at = now_ns();
            let sent = u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
            if sequenced {
                arrivals.lock().unwrap().push((u64::from_be_bytes(buf[10..LEN].try_into().expect("8 bytes")), at));
            } else {
                received.lock().unwrap().push((sent, u16::from_be_bytes([buf[8], buf[9]])));
            }
        }
    }
}

/// Sequence numbers `from..to` among `arrivals` (in the order received):
/// how many arrived, each once, and the longest time between consecutive
/// arrivals from the last one numbered below `from` to the first one
/// numbered `to` or later.
pub fn window(arrivals: &[Arrival], from: u64, to: u64) -> Window {
    let mut seen = vec![false; to.saturating_sub(from) as usize];
    let first = arrivals.iter().rposition(|a| a.0 < from).unwrap_or(0);
    let (mut last, mut gap) = (None::<u64>, 0);
    for &(seq, at) in &arrivals[first..] {
        if let Some(l) = last {
            gap = gap.max(at.saturating_sub(l));
        }
        last = Some(at);
        if (from..to).contains(&seq) {
            seen[(seq - from) as usize] = true;
        } else if seq >= to {
            break;
        }
    }
    Window { sent: seen.len() as u64, received: seen.iter().filter(|s| **s).count() as u64, longest_gap_ns: gap }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_losses_by_sequence_and_the_longest_wait_between_arrivals() {
        // 10 sent each ms; 4 and 5 lost, 7 arrived twice.
        let arr: Vec<Arrival> = [0, 1, 2, 3, 6, 7, 7, 8, 9].iter().map(|&s| (s, s * 1_000_000 + if s >= 6 { 500_000 } else { 0 })).collect();
        let w = window(&arr, 2, 9);
        assert_eq!((w.sent, w.received, w.lost()), (7, 5, 2));
        assert_eq!(w.longest_gap_ns, 3_500_000, "from 3's arrival to 6's");
        let w = window(&arr, 6, 10);
        assert_eq!((w.sent, w.received, w.longest_gap_ns), (4, 4, 3_500_000), "the gap before the window's first arrival counts");
        assert_eq!(window(&arr, 20, 25).lost(), 5, "none arrived");
        assert_eq!(window(&[], 0, 0), Window::default());
    }
}
