//! The sockets of the disruption part's real TCP connections ([`super::disruption_tcp`]): a server in each backend
//! namespace that answers every request byte with that byte and its backend's index, and the client connections in
//! gen, all driven with poll(2) from one thread per side (no thread per connection, no fixed sleeps: every wait is a
//! poll for the state it waits for, bounded by a deadline).
//!
//! A request is one byte, the exchange's number; its answer three: the byte, then the backend's index (big-endian
//! u16). A connection whose segment reaches a backend without its socket gets that backend's RST
//! (`ECONNRESET`); one whose segment is lost gets nothing, and times out at the exchange's deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use xnf_netns::Netns;

/// An answer's length: the request byte and the backend's index.
const ANSWER: usize = 3;
/// The listeners' accept queue: every connection of a run may be waiting at once.
const BACKLOG: i32 = 4096;
/// Requests waiting for their answers at most, per exchange.
pub const IN_FLIGHT: usize = 64;

/// What a backend's server counted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections it accepted.
    pub accepted: AtomicU64,
    /// Requests it answered, per exchange (1 and 2).
    pub answered: [AtomicU64; 2],
}

impl Counts {
    pub fn answered(&self, exchange: u8) -> u64 {
        self.answered[usize::from(exchange.clamp(1, 2) - 1)].load(Ordering::SeqCst)
    }
}

/// One backend's server: a thread polling its listener and connections; stopped when dropped.
pub struct Server {
    /// Dropped to stop the thread (its end then reads EOF).
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<Result<()>>>,
    pub counts: Arc<Counts>,
}

impl Server {
    /// Listens on `at` in `ns` and answers as backend `index`.
    pub fn start(ns: &Netns, at: SocketAddr, index: u16) -> Result<Server> {
        let l = ns.bind(move || TcpListener::bind(at)).with_context(|| format!("listening on {at} in {}", ns.name()))?;
        Server::spawn(l, index)
    }

    /// Serves on `l` as backend `index`.
    fn spawn(l: TcpListener, index: u16) -> Result<Server> {
        // SAFETY: listen(2) again on a socket already listening only changes its backlog.
        ensure!(unsafe { libc::listen(l.as_raw_fd(), BACKLOG) } == 0, "listen(2) with a backlog of {BACKLOG}: {}", std::io::Error::last_os_error());
        l.set_nonblocking(true)?;
        let (stop, stopped) = UnixStream::pair().context("a socket pair to stop a server")?;
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let thread = std::thread::Builder::new()
            .name(format!("xnf-lb-server-{index}"))
            .spawn(move || serve(&l, &stopped, index, &c))
            .context("starting a server thread")?;
        Ok(Server { stop: Some(stop), thread: Some(thread), counts })
    }

    /// Stops the thread and returns what it failed with, if anything.
    pub fn stop(mut self) -> Result<()> {
        self.join()
    }

    fn join(&mut self) -> Result<()> {
        drop(self.stop.take());
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("a backend's server thread panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Err(e) = self.join() {
            eprintln!("xnf lab: {e:#}");
        }
    }
}

/// Waits for any of `fds` to become readable (or for `timeout`, None: forever); true if one did.
fn poll_in(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> Result<bool> {
    let ms = timeout.map_or(-1, |t| t.as_millis().clamp(0, i32::MAX as u128) as libc::c_int);
    loop {
        // SAFETY: fds is a valid slice of pollfd for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e).context("poll(2)");
        }
    }
}

fn pollfd(fd: &impl AsRawFd) -> libc::pollfd {
    libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }
}

/// The server's loop: accepts, answers every request byte, forgets connections that end; returns when `stopped`
/// reads EOF (its other end dropped).
fn serve(l: &TcpListener, stopped: &UnixStream, index: u16, counts: &Counts) -> Result<()> {
    let mut conns: Vec<TcpStream> = Vec::new();
    let mut buf = [0u8; 256];
    let [hi, lo] = index.to_be_bytes();
    loop {
        let mut fds: Vec<libc::pollfd> = [pollfd(stopped), pollfd(l)].into_iter().chain(conns.iter().map(pollfd)).collect();
        poll_in(&mut fds, None)?;
        if fds[0].revents != 0 {
            // Reset, not closed: a FIN the client no longer answers would be sent again for seconds, into the next
            // variant's lb.
            conns.iter().for_each(abort);
            return Ok(());
        }
        if fds[1].revents != 0 {
            loop {
                match l.accept() {
                    Ok((c, _)) => {
                        c.set_nonblocking(true)?;
                        c.set_nodelay(true)?;
                        counts.accepted.fetch_add(1, Ordering::SeqCst);
                        conns.push(c);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted || e.kind() == ErrorKind::ConnectionAborted => {}
                    Err(e) => return Err(e).context("accept(2)"),
                }
            }
        }
        let mut gone = Vec::new();
        // The connections polled (those accepted below come after them).
        for (i, c) in conns.iter_mut().enumerate().take(fds.len() - 2).filter(|(i, _)| fds[i + 2].revents != 0) {
            'conn: loop {
                match c.read(&mut buf) {
                    Ok(0) => {
                        gone.push(i);
                        break;
                    }
                    Ok(n) => {
                        for &b in &buf[..n] {
                            if c.write_all(&[b, hi, lo]).is_err() {
                                gone.push(i);
                                break 'conn;
                            }
                            counts.answered[usize::from(b.clamp(1, 2) - 1)].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        gone.push(i);
                        break;
                    }
                }
            }
        }
        for i in gone.into_iter().rev() {
            conns.swap_remove(i);
        }
    }
}

/// What became of a connection's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Answered by the backend of this index.
    Answered(u16),
    /// Reset (`ECONNRESET`, `EPIPE`): a backend without its socket answered with a RST.
    Reset,
    /// Closed by the other end (EOF), or another error.
    Failed,
    /// Neither answer nor error within the exchange's time.
    TimedOut,
}

/// The client connections, open in gen; aborted (RST, no TIME_WAIT left behind) when dropped.
pub struct Clients {
    conns: Vec<TcpStream>,
    /// Each connection's source port.
    pub ports: Vec<u16>,
    /// Bytes of the answer read so far, per connection.
    got: Vec<Vec<u8>>,
}

impl Clients {
    /// Opens `n` connections from `gen` to `to`, one after the other (each within 3 s).
    pub fn connect(gen: &Netns, to: SocketAddr, n: u32) -> Result<Clients> {
        let conns = gen.run(move || -> Result<Vec<TcpStream>> {
            (0..n).map(|i| TcpStream::connect_timeout(&to, Duration::from_secs(3)).with_context(|| format!("connection {} of {n} to {to}", i + 1))).collect()
        })??;
        Clients::of(conns)
    }

    /// Connections already open.
    fn of(conns: Vec<TcpStream>) -> Result<Clients> {
        let mut ports = Vec::with_capacity(conns.len());
        for c in &conns {
            c.set_nonblocking(true)?;
            c.set_nodelay(true)?;
            ports.push(c.local_addr()?.port());
        }
        let got = vec![Vec::new(); conns.len()];
        Ok(Clients { conns, ports, got })
    }

    /// Sends request `byte` on every connection and waits until each has its answer or its error, or `within` has
    /// passed since its request (it then timed out). At most [`IN_FLIGHT`] requests wait at once: a burst of
    /// every connection's request would overflow the veth rings on the way (256 frames each), and the segments
    /// lost there would be sent again — losses of the lab's making, not the balancer's.
    pub fn exchange(&mut self, byte: u8, within: Duration) -> Vec<Fate> {
        let n = self.conns.len();
        let mut fates: Vec<Option<Fate>> = vec![None; n];
        let mut sent: Vec<Instant> = Vec::with_capacity(n);
        let mut buf = [0u8; ANSWER];
        loop {
            let mut pending: Vec<usize> = (0..sent.len()).filter(|&i| fates[i].is_none()).collect();
            while pending.len() < IN_FLIGHT && sent.len() < n {
                let i = sent.len();
                self.got[i].clear();
                sent.push(Instant::now());
                match self.conns[i].write_all(&[byte]) {
                    Ok(()) => pending.push(i),
                    Err(e) => fates[i] = Some(fate_of(&e)),
                }
            }
            let Some(first) = pending.iter().map(|&i| sent[i] + within).min() else { break };
            let left = first.saturating_duration_since(Instant::now());
            if left.is_zero() {
                pending.iter().filter(|&&i| sent[i] + within <= first).for_each(|&i| fates[i] = Some(Fate::TimedOut));
                continue;
            }
            let mut fds: Vec<libc::pollfd> = pending.iter().map(|&i| pollfd(&self.conns[i])).collect();
            if !poll_in(&mut fds, Some(left)).unwrap_or(false) {
                continue;
            }
            for (&i, _) in pending.iter().zip(&fds).filter(|(_, fd)| fd.revents != 0) {
                let want = ANSWER - self.got[i].len();
                fates[i] = match self.conns[i].read(&mut buf[..want]) {
                    Ok(0) => Some(Fate::Failed),
                    Ok(k) => {
                        self.got[i].extend_from_slice(&buf[..k]);
                        match self.got[i][..] {
                            [b, hi, lo] if b == byte => {
                                // Acknowledged now, not delayed onto the next request: between exchanges no
                                // segment is on its way, and after a change nothing but the request is.
                                quickack(&self.conns[i]);
                                Some(Fate::Answered(u16::from_be_bytes([hi, lo])))
                            }
                            [_, _, _] => Some(Fate::Failed),
                            _ => None,
                        }
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => None,
                    Err(e) => Some(fate_of(&e)),
                };
            }
        }
        fates.into_iter().map(|f| f.unwrap_or(Fate::TimedOut)).collect()
    }
}

fn fate_of(e: &std::io::Error) -> Fate {
    if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) {
        Fate::Reset
    } else {
        Fate::Failed
    }
}

impl Drop for Clients {
    /// Aborts every connection: a RST, no TIME_WAIT holding gen's ports for the next run.
    fn drop(&mut self) {
        self.conns.iter().for_each(abort);
    }
}

/// Sends `c`'s pending acknowledgement now (TCP_QUICKACK).
fn quickack(c: &TcpStream) {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt with a valid int of its size, on an open socket.
    unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Makes closing `c` abort it (SO_LINGER 0): a RST at once, nothing left to send again.
fn abort(c: &TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt with a valid linger struct of its size, on an open socket.
    unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// Raises the soft limit of open files towards the hard one so that `need` descriptors fit; fails naming
/// `--tcp-connections` if they cannot.
pub fn make_room_for_files(need: u64, connections: u32) -> Result<()> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        ensure!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0, "getrlimit(RLIMIT_NOFILE): {}", std::io::Error::last_os_error());
        if lim.rlim_cur < need && lim.rlim_max > lim.rlim_cur {
            lim.rlim_cur = lim.rlim_max.min(need.max(lim.rlim_cur));
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        }
    }
    ensure!(
        lim.rlim_cur >= need,
        "--tcp-connections {connections}: needs about {need} open files (each connection's two ends), {} allowed here (ulimit -n)",
        lim.rlim_cur
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In this process's own namespace, over loopback: a server's answers name its backend, a connection reset by
    /// its peer is told apart from one that gets no answer, and the server counts both exchanges.
    #[test]
    fn answers_resets_and_timeouts_are_told_apart() {
        let answering = TcpListener::bind("127.0.0.1:0").unwrap();
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let (a, s) = (answering.local_addr().unwrap(), silent.local_addr().unwrap());
        let server = Server::spawn(answering, 7).unwrap();
        let conns = [a, a, s, s].iter().map(|to| TcpStream::connect(to).unwrap()).collect();
        let mut c = Clients::of(conns).unwrap();
        assert_eq!((c.conns.len(), c.ports.iter().filter(|&&p| p != 0).count()), (4, 4));
        // One of the silent listener's connections accepted and aborted: its peer sees a RST.
        let (victim, _) = silent.accept().unwrap();
        abort(&victim);
        drop(victim);
        let t0 = Instant::now();
        let fates = c.exchange(1, Duration::from_millis(300));
        assert_eq!(fates, [Fate::Answered(7), Fate::Answered(7), Fate::Reset, Fate::TimedOut]);
        assert!(t0.elapsed() >= Duration::from_millis(300), "the silent connection waited for the deadline");
        assert_eq!(c.exchange(2, Duration::from_millis(100)), [Fate::Answered(7), Fate::Answered(7), Fate::Reset, Fate::TimedOut]);
        let counts = server.counts.clone();
        server.stop().unwrap();
        assert_eq!((counts.accepted.load(Ordering::SeqCst), counts.answered(1), counts.answered(2)), (2, 2, 2));
    }
}
