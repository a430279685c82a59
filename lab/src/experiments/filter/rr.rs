//! The victim's service: TCP request/response in the style of netperf's
//! TCP_RR (the XDP paper §5.1 measured with netperf; Debian has no netperf).
//! One connection; the client writes one byte, the server answers with one
//! byte, and the client sends the next request as soon as the answer is
//! read. Both sides block in `read` (neither spins) with Nagle off, and
//! each runs on one thread pinned to the CPU it is given. The transactions
//! completed are counted by the client.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use xnf_netns::Netns;

/// How long a blocked `read` waits before looking at the stop flag: a
/// flood may stall the connection (retransmissions) for longer than that.
const POLL: Duration = Duration::from_millis(200);

/// A running server and client; stopped (and joined) when dropped.
pub struct RrService {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    threads: Vec<JoinHandle<Result<()>>>,
}

impl RrService {
    /// Listens on `addr` in `server_ns`, connects to it from `client_ns`
    /// and starts the transactions; the server thread runs on
    /// `server_cpu`, the client's on `client_cpu`.
    pub fn start(server_ns: &Netns, addr: SocketAddr, client_ns: &Netns, server_cpu: usize, client_cpu: usize) -> Result<Self> {
        // Sockets belong to the namespace they were made in, whatever
        // thread uses them later.
        let listener = server_ns.run(move || TcpListener::bind(addr))?.with_context(|| format!("listening on {addr} in {}", server_ns.name()))?;
        let stream = client_ns
            .run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(3)))?
            .with_context(|| format!("connecting to the victim's service {addr} from {}: is the path through dut up?", client_ns.name()))?;
        let (conn, _) = listener.accept().context("accepting the client's connection")?;
        let mut me = RrService { stop: Arc::new(AtomicBool::new(false)), done: Arc::new(AtomicU64::new(0)), threads: Vec::new() };
        let stop = me.stop.clone();
        me.threads.push(std::thread::spawn(move || serve(conn, server_cpu, &stop)));
        let (stop, done) = (me.stop.clone(), me.done.clone());
        me.threads.push(std::thread::spawn(move || ask(stream, client_cpu, &stop, &done)));
        Ok(me)
    }

    /// Transactions completed so far.
    pub fn transactions(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// True while both sides are still running (neither failed).
    pub fn alive(&self) -> bool {
        self.threads.iter().all(|t| !t.is_finished())
    }

    /// Stops both sides; reports the first failure of either.
    pub fn stop(mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().map_err(|_| anyhow::anyhow!("a request/response thread panicked"))??;
        }
        Ok(self.transactions())
    }
}

impl Drop for RrService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn prepare(s: &TcpStream, cpu: usize) -> Result<()> {
    crate::engine::cpu::pin(0, cpu)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(POLL))?;
    Ok(())
}

/// Reads one byte, waiting across timeouts until it comes, the peer
/// closes (false) or `stop` is set (false).
fn read_one(s: &mut TcpStream, stop: &AtomicBool) -> Result<bool> {
    let mut b = [0u8; 1];
    loop {
        match s.read(&mut b) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e).context("reading from the request/response connection"),
        }
    }
}

/// The server: answers every byte with one byte until the client closes.
fn serve(mut s: TcpStream, cpu: usize, stop: &AtomicBool) -> Result<()> {
    prepare(&s, cpu)?;
    while read_one(&mut s, stop)? {
        s.write_all(b"r").context("answering a request")?;
    }
    Ok(())
}

/// The client: one request at a time, the next as soon as the answer is in.
fn ask(mut s: TcpStream, cpu: usize, stop: &AtomicBool, done: &AtomicU64) -> Result<()> {
    prepare(&s, cpu)?;
    while !stop.load(Ordering::Relaxed) {
        s.write_all(b"q").context("sending a request")?;
        if !read_one(&mut s, stop)? {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            bail!("the victim's service closed the connection");
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
    // Closing tells the server to end.
    drop(s);
    Ok(())
}
