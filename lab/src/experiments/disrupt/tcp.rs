//! The TCP side of `xnf lab disrupt`: a server in the sink namespace that
//! echoes what each connection sends, and connections from gen that each
//! send a small request every few milliseconds and read the reply. A
//! connection is broken when it sees an error or EOF (a reset, a timeout
//! of the kernel's retransmissions): what an operator's change must never
//! do to established traffic.
//!
//! One thread per connection on each side: a thread blocked in a read
//! costs nothing, and the code stays a plain loop. Sockets time their
//! reads out every 200 ms so that the threads see the stop flag.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use xnf_netns::Netns;

/// A request and its reply.
const MSG: usize = 16;
/// How often a blocked read looks at the stop flag.
const TICK: Duration = Duration::from_millis(200);

/// The echo server: every connection it accepts echoes until EOF.
pub struct Server {
    stop: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Listens on `at` in `ns`.
    pub fn start(ns: &Netns, at: SocketAddr) -> Result<Server> {
        let l = ns.bind(move || TcpListener::bind(at)).with_context(|| format!("listening on {at}"))?;
        // Polled, so that the accept loop sees the stop flag.
        l.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let threads = Arc::new(Mutex::new(Vec::new()));
        let (s, t) = (stop.clone(), threads.clone());
        let accept = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => {
                        let s = s.clone();
                        t.lock().unwrap().push(std::thread::spawn(move || echo(c, &s)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Server { stop, threads, accept: Some(accept) })
    }
}

/// Echoes what `c` sends until EOF, an error or the stop flag.
fn echo(mut c: TcpStream, stop: &AtomicBool) {
    let _ = (c.set_nonblocking(false), c.set_read_timeout(Some(TICK)), c.set_nodelay(true));
    let mut buf = [0u8; 256];
    while !stop.load(Ordering::Relaxed) {
        match c.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if c.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(_) => return,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        for t in std::mem::take(&mut *self.threads.lock().unwrap()) {
            let _ = t.join();
        }
    }
}

/// What the connections counted.
#[derive(Default)]
struct Tally {
    /// Connections that saw an error or EOF.
    broken: AtomicU64,
    /// Replies read, over all connections.
    replies: AtomicU64,
}

/// `n` connections to the server, each a request every `every`.
pub struct Clients {
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    threads: Vec<JoinHandle<()>>,
    pub connections: u32,
}

impl Clients {
    /// Opens `n` connections from `ns` to `to` and starts their traffic;
    /// returns once every connection has had a reply.
    pub fn open(ns: &Netns, to: SocketAddr, n: u32, every: Duration) -> Result<Clients> {
        let conns = ns.run(move || (0..n).map(|_| TcpStream::connect_timeout(&to, Duration::from_secs(3))).collect::<std::io::Result<Vec<_>>>())?;
        let conns = conns.with_context(|| format!("connecting to {to}"))?;
        let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
        let threads = conns
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let (s, t) = (stop.clone(), tally.clone());
                // Spread over the interval, so that requests do not come in bursts.
                let offset = every * i as u32 / n.max(1);
                std::thread::spawn(move || converse(c, every, offset, &s, &t))
            })
            .collect();
        let c = Clients { stop, tally, threads, connections: n };
        c.wait_replies(u64::from(n))?;
        Ok(c)
    }

    /// Connections broken so far.
    pub fn broken(&self) -> u64 {
        self.tally.broken.load(Ordering::SeqCst)
    }

    /// Waits until `n` more replies have arrived (10 s at most).
    pub fn wait_replies(&self, n: u64) -> Result<()> {
        let (r0, t0) = (self.tally.replies.load(Ordering::SeqCst), Instant::now());
        while self.tally.replies.load(Ordering::SeqCst) < r0 + n {
            ensure!(t0.elapsed() < Duration::from_secs(10), "the TCP connections got no replies ({} broken)", self.broken());
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

/// One connection's loop: a request every `every`, then its reply.
fn converse(mut c: TcpStream, every: Duration, offset: Duration, stop: &AtomicBool, tally: &Tally) {
    let _ = (c.set_read_timeout(Some(TICK)), c.set_nodelay(true));
    std::thread::sleep(offset);
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let msg = [seq.to_be_bytes(), seq.to_be_bytes()].concat();
        if c.write_all(&msg).is_err() || !reply(&mut c, stop) {
            if !stop.load(Ordering::Relaxed) {
                tally.broken.fetch_add(1, Ordering::SeqCst);
            }
            return;
        }
        tally.replies.fetch_add(1, Ordering::SeqCst);
        seq += 1;
        std::thread::sleep(every);
    }
}

/// Reads one reply; false on an error or EOF (or the stop flag).
fn reply(c: &mut TcpStream, stop: &AtomicBool) -> bool {
    let mut buf = [0u8; MSG];
    let mut got = 0;
    while got < MSG {
        match c.read(&mut buf[got..]) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
