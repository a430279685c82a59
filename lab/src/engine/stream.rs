//! A stamped UDP stream: datagrams that carry their send time
//! (CLOCK_MONOTONIC, one clock for every namespace) and which destination
//! of the stream they went to, sent from one namespace and received in
//! another, so that an experiment can say which frames followed which
//! forwarding decision (`fib-change`, `bgp`).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use xnf_netns::Netns;

use crate::experiments::latency::pingpong::now_ns;

/// A received datagram: its send time (ns) and the index of its destination.
pub type Stamp = (u64, u16);

/// The sender and the receiver of stamped datagrams.
pub struct Stream {
    stop: Arc<AtomicBool>,
    /// Received datagrams, newest last.
    received: Arc<Mutex<Vec<Stamp>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Stream {
    /// Sends from `from` in `tx_ns` to each of `dsts` in turn, at most
    /// `rate` datagrams per second; a socket bound to `rx` in `rx_ns`
    /// receives them.
    pub fn start(tx_ns: &Netns, from: IpAddr, rx_ns: &Netns, rx: SocketAddr, dsts: Vec<SocketAddr>, rate: u32) -> Result<Stream> {
        ensure!(!dsts.is_empty() && dsts.len() <= usize::from(u16::MAX), "a stream needs 1 to 65535 destinations");
        let sock = rx_ns.bind(move || UdpSocket::bind(rx)).with_context(|| format!("binding the receiver's socket to {rx}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        let tx = tx_ns.run(move || UdpSocket::bind(SocketAddr::new(from, 0)))?.context("binding the sender's socket")?;
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (s1, s2, r) = (stop.clone(), stop.clone(), received.clone());
        // Paced by sleeping, not spinning: the forwarder's helpers (the
        // route cache's follower) need a CPU of this 2-CPU machine too. The
        // sleeps overshoot, so the rate is at most `rate`; the resolution
        // of a window is one gap.
        let gap = Duration::from_nanos(1_000_000_000 / u64::from(rate.max(1)));
        let sender = std::thread::spawn(move || {
            for (i, to) in dsts.iter().enumerate().cycle() {
                if s1.load(Ordering::Relaxed) {
                    break;
                }
                let mut msg = [0u8; 10];
                msg[..8].copy_from_slice(&now_ns().to_be_bytes());
                msg[8..].copy_from_slice(&(i as u16).to_be_bytes());
                // A full buffer or a refused route is the experiment's
                // business, not the sender's.
                let _ = tx.send_to(&msg, to);
                std::thread::sleep(gap);
            }
        });
        let receiver = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !s2.load(Ordering::Relaxed) {
                if let Ok(10) = sock.recv(&mut buf) {
                    let sent = u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
                    r.lock().unwrap().push((sent, u16::from_be_bytes([buf[8], buf[9]])));
                }
            }
        });
        Ok(Stream { stop, received, threads: vec![sender, receiver] })
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

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}
