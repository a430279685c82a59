//! One ping-pong run (the AF_XDP delays paper Fig. 2): a pinger that sends 64-byte probes
//! at a fixed interval and timestamps each when it sends it and when it
//! comes back (both in one process: no clock synchronisation), and a
//! forwarder that bounces them, each on its own thread, pinned to its own
//! CPU, in its own namespace, joined by a veth pair (the two ends of the
//! driver's topology: roles.gen and roles.sink).
//!
//! Three ways to move the frames, the same on both sides:
//! - AF_XDP (xnf-afxdp): the selector hands UDP to port 9 to the socket;
//!   the forwarder is l2fwd;
//! - kernel UDP sockets: the forwarder is a UDP echo;
//! - AF_PACKET raw sockets: the forwarder is an l2fwd on AF_PACKET.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use xnf_afxdp::nfs::L2Fwd;
use xnf_afxdp::selector::AfxdpProgram;
use xnf_afxdp::{Batch, BusyPoll, Emit, Mode, NetworkFunction, RunConfig, SocketConfig, UmemConfig, Verdict, Wait, XskSet};
use xnf_core::class::Class;
use xnf_netns::Netns;
use xnf_packet::PacketBuilder;

use xnf_core::xdp::{XdpLink, XdpMode};

use crate::engine::topology::BuiltTopology;

/// How frames move between the pinger and the forwarder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    Afxdp,
    Udp,
    AfPacket,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Afxdp => "afxdp",
            Method::Udp => "udp",
            Method::AfPacket => "af-packet",
        }
    }
}

/// One configuration of the matrix (the AF_XDP delays paper §VI). For the kernel
/// baselines only `poll_fwd`/`poll_recv` apply (sleep in the kernel or spin).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Config {
    pub method: Method,
    /// Always false on veth (copy mode only); kept so the matrix reads as the seed's.
    pub zero_copy: bool,
    pub busy_poll: bool,
    pub need_wakeup: bool,
    /// The forwarder sleeps in poll() (true) or spins (false).
    pub poll_fwd: bool,
    /// The pinger (receiver) sleeps in poll() until a frame or its next send (true) or spins.
    pub poll_recv: bool,
    pub batch: u32,
}

impl Config {
    pub fn label(&self) -> String {
        match self.method {
            Method::Afxdp => format!(
                "afxdp {}{}{} fwd:{} recv:{} b{}",
                if self.zero_copy { "zc " } else { "" },
                if self.busy_poll { "bp " } else { "" },
                if self.need_wakeup { "nw" } else { "no-nw" },
                if self.poll_fwd { "poll" } else { "spin" },
                if self.poll_recv { "poll" } else { "spin" },
                self.batch
            ),
            m => format!("{} fwd:{} recv:{}", m.name(), if self.poll_fwd { "sleep" } else { "spin" }, if self.poll_recv { "sleep" } else { "spin" }),
        }
    }

    /// The settings as (name, value) pairs, for "parameters always present".
    pub fn params(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![("method", self.method.name().to_string()), ("poll_fwd", self.poll_fwd.to_string()), ("poll_recv", self.poll_recv.to_string())];
        if self.method == Method::Afxdp {
            v.extend([
                ("zero_copy", self.zero_copy.to_string()),
                ("busy_poll", self.busy_poll.to_string()),
                ("need_wakeup", self.need_wakeup.to_string()),
                ("batch", self.batch.to_string()),
            ]);
        }
        v
    }
}

/// The pinger's and the forwarder's ends of one veth pair: roles.gen and
/// roles.sink of the driver's topology (the built-in `pair` by default).
pub struct Path<'a> {
    pub ping: &'a Netns,
    pub fwd: &'a Netns,
    pub ping_if: String,
    pub fwd_if: String,
    /// The ends' IPv4 addresses (the kernel UDP baseline's).
    pub ping_addr: Ipv4Addr,
    pub fwd_addr: Ipv4Addr,
    /// A raw probe (sequence number 0); each send patches in its own.
    probe: Vec<u8>,
}

/// Raw probes go to an address nobody owns: neither kernel answers them.
const NOBODY: [u8; 4] = [198, 18, 0, 99];
const PROBE_PORT: u16 = 9;
const ECHO_PORT: u16 = 7;
const MAGIC: &[u8; 4] = b"XNFL";
/// Where the magic and the sequence number sit in a raw probe (UDP payload).
const SEQ_OFF: usize = 14 + 20 + 8;
const FRAME_LEN: usize = 60; // 64 on the wire

/// An endpoint's IPv4 address in the topology.
fn v4(t: &BuiltTopology, ep: &str) -> Result<Ipv4Addr> {
    match t.addr(ep, false)? {
        IpAddr::V4(a) => Ok(a),
        IpAddr::V6(_) => bail!("`{ep}` has no IPv4 address"),
    }
}

impl<'a> Path<'a> {
    /// The path on a built topology: the pinger at roles.gen, the
    /// forwarder at roles.sink.
    pub fn on(t: &'a BuiltTopology) -> Result<Path<'a>> {
        let roles = t.roles()?;
        let ((ping, ping_if), (fwd, fwd_if)) = (t.endpoint(&roles.gen)?, t.endpoint(&roles.sink)?);
        let (ping_addr, fwd_addr) = (v4(t, &roles.gen)?, v4(t, &roles.sink)?);
        let mut payload = MAGIC.to_vec();
        payload.extend(0u32.to_be_bytes());
        let mut probe = PacketBuilder::ethernet(ping.mac(&ping_if)?, fwd.mac(&fwd_if)?)
            .ipv4(ping_addr, NOBODY.into())
            .udp(1024, PROBE_PORT)
            .payload(&payload)
            .frame_len(FRAME_LEN)
            .build();
        // The sequence number changes per probe: IPv4 UDP may go without a checksum.
        probe[14 + 20 + 6] = 0;
        probe[14 + 20 + 7] = 0;
        Ok(Path { ping, fwd, ping_if, fwd_if, ping_addr, fwd_addr, probe })
    }

    /// What the two ends need once built: each other's MAC for good (no
    /// resolution in an RTT), and kernel-sent UDP with whole checksums (a
    /// veth may leave them to an offload that AF_XDP and AF_PACKET readers
    /// never see done).
    pub fn prepare(t: &BuiltTopology) -> Result<()> {
        let p = Path::on(t)?;
        p.ping.neigh_add(&p.fwd_addr.to_string(), p.fwd.mac(&p.fwd_if)?, &p.ping_if)?;
        p.fwd.neigh_add(&p.ping_addr.to_string(), p.ping.mac(&p.ping_if)?, &p.fwd_if)?;
        p.ping.set_offload(&p.ping_if, xnf_netns::Offload::TxChecksum, false)?;
        p.fwd.set_offload(&p.fwd_if, xnf_netns::Offload::TxChecksum, false)
    }

    /// Writes the raw probe with sequence number `seq` into `buf` (its length).
    fn write_probe(&self, buf: &mut [u8], seq: u32) {
        buf.copy_from_slice(&self.probe);
        buf[SEQ_OFF + 4..SEQ_OFF + 8].copy_from_slice(&seq.to_be_bytes());
    }
}

/// The sequence number of a raw probe, if `f` is one.
fn probe_seq(f: &[u8]) -> Option<u32> {
    (f.len() >= SEQ_OFF + 8 && &f[SEQ_OFF..SEQ_OFF + 4] == MAGIC).then(|| u32::from_be_bytes(f[SEQ_OFF + 4..SEQ_OFF + 8].try_into().unwrap()))
}

/// CLOCK_MONOTONIC in nanoseconds (the vDSO: no syscall).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What one run recorded.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    pub rtts_ns: Vec<u64>,
    pub sent: u64,
    pub lost: u64,
}

/// The probes' schedule and their timestamps.
struct Schedule {
    interval_ns: u64,
    count: u64,
    next_ns: u64,
    sent_at: Vec<u64>,
    /// Probes sent so far (the next sequence number).
    sent: u64,
    rtts: Vec<u64>,
    last_send_ns: u64,
}

impl Schedule {
    fn new(interval_ns: u64, count: u64) -> Schedule {
        Schedule { interval_ns, count, next_ns: now_ns(), sent_at: vec![0; count as usize], sent: 0, rtts: Vec::with_capacity(count as usize), last_send_ns: 0 }
    }

    /// The next probe's sequence number when one is due now.
    fn due(&self, now: u64) -> Option<u32> {
        (self.sent < self.count && now >= self.next_ns).then_some(self.sent as u32)
    }

    fn mark_sent(&mut self, seq: u32, at: u64) {
        self.sent_at[seq as usize] = at;
        self.sent = seq as u64 + 1;
        self.last_send_ns = at;
        // A fixed schedule; after a stall, no burst to catch up.
        self.next_ns = (self.next_ns + self.interval_ns).max(at);
    }

    fn arrived(&mut self, seq: u32, at: u64) {
        if let Some(t) = self.sent_at.get_mut(seq as usize) {
            // 0: never sent; MAX: already answered (a duplicate is not a second RTT).
            if *t != 0 && *t != u64::MAX {
                self.rtts.push(at.saturating_sub(*t));
                *t = u64::MAX;
            }
        }
    }

    fn done(&self, now: u64) -> bool {
        let all_sent = self.all_sent();
        all_sent && (self.rtts.len() as u64 == self.count || now > self.last_send_ns + 200_000_000)
    }

    fn all_sent(&self) -> bool {
        self.sent == self.count
    }

    /// Nanoseconds until the next send, for a sleeping receiver.
    fn wait_ns(&self, now: u64) -> u64 {
        if self.all_sent() {
            return 1_000_000;
        }
        self.next_ns.saturating_sub(now)
    }

    fn finish(self) -> Recorded {
        let sent = self.count;
        let lost = sent - self.rtts.len() as u64;
        Recorded { rtts_ns: self.rtts, sent, lost }
    }
}

/// Sleeps in ppoll() on `fd` for at most `ns` (a frame wakes it earlier).
fn sleep_on(fd: BorrowedFd<'_>, ns: u64) {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ts = libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long };
    // SAFETY: one valid pollfd and timespec.
    unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
}

// ---------------------------------------------------------------- threads

/// What a new thread calls first to enter `ns` and pin itself to `cpu`
/// (the namespace file is opened here, on the caller's thread).
pub fn pinned_in(ns: &Netns, cpu: usize) -> Result<impl FnOnce() -> Result<()> + Send + 'static> {
    let file = std::fs::File::open(ns.path()).context("opening a namespace")?;
    Ok(move || -> Result<()> {
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).context("entering a namespace")?;
        crate::engine::cpu::pin(0, cpu)
    })
}

/// The forwarder, running until dropped.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Forwarder {
    pub fn start(p: &Path, c: &Config, cpu: usize) -> Result<Forwarder> {
        let enter = pinned_in(p.fwd, cpu)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let (tx, rx) = mpsc::channel::<Result<(), String>>();
        let (c, dev, addr) = (*c, p.fwd_if.clone(), p.fwd_addr);
        let handle = std::thread::spawn(move || -> Result<()> {
            let r = enter().and_then(|()| forwarder_body(&c, (&dev, addr), &s2, &tx));
            if let Err(e) = &r {
                let _ = tx.send(Err(format!("{e:#}")));
            }
            r
        });
        match rx.recv() {
            Ok(Ok(())) => Ok(Forwarder { stop, handle: Some(handle) }),
            // The thread's own error, not its text: a caller tells a
            // driver without zero-copy by its type.
            Ok(Err(e)) => match handle.join() {
                Ok(Err(err)) => Err(err.context("the forwarder")),
                _ => bail!("the forwarder: {e}"),
            },
            Err(_) => bail!("the forwarder ended before it was ready"),
        }
    }

    pub fn stop(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the forwarder panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn afxdp_socket_config(c: &Config) -> SocketConfig {
    SocketConfig {
        rx_size: 512,
        tx_size: 512,
        fill_size: 1024,
        comp_size: 512,
        mode: if c.zero_copy { Mode::ZeroCopy } else { Mode::Copy },
        need_wakeup: c.need_wakeup,
        busy_poll: c.busy_poll.then_some(BusyPoll { usecs: 20, budget: c.batch.max(8), prefer: true }),
    }
}

/// One side's AF_XDP socket behind the selector. Fields drop in order: the
/// program detached, the program (taking the socket out of its XSKMAP, see
/// `AfxdpProgram`), then the socket closed.
struct Side {
    _xdp: XdpLink,
    _prog: AfxdpProgram,
    set: XskSet,
}

/// The selector taking UDP to port 9 to queue 0's socket, attached to `dev`.
fn afxdp_side(dev: &str, c: &Config, wait: Wait) -> Result<Side> {
    let link = xnf_netns::netlink::link_by_name(dev)?;
    let prog = AfxdpProgram::load()?;
    prog.set_rules(&[Class { proto: Some(17), dport: Some((PROBE_PORT, PROBE_PORT)), ..Default::default() }], false)?;
    let mut set = XskSet::new(
        UmemConfig { frame_size: 4096, frame_count: 2048, headroom: 0 },
        &afxdp_socket_config(c),
        RunConfig { batch: c.batch, wait },
        &[(link.ifindex, dev.to_string(), 0)],
    )?;
    prog.add_socket(0, set.sockets()[0].fd())?;
    set.fill_rings()?; // both sides receive
    let xdp = XdpLink::create(prog.prog().as_fd(), link.ifindex, dev, XdpMode::Native)?;
    Ok(Side { _xdp: xdp, _prog: prog, set })
}

fn forwarder_body(c: &Config, (dev, addr): (&str, Ipv4Addr), stop: &AtomicBool, ready: &mpsc::Sender<Result<(), String>>) -> Result<()> {
    match c.method {
        Method::Afxdp => {
            let wait = if c.poll_fwd { Wait::Poll { timeout_ms: 50 } } else { Wait::Spin };
            let mut side = afxdp_side(dev, c, wait)?;
            let _ = ready.send(Ok(()));
            side.set.run(&mut L2Fwd, stop)
        }
        Method::Udp => {
            let s = std::net::UdpSocket::bind((addr, ECHO_PORT)).context("binding the UDP echo")?;
            set_blocking(s.as_fd(), c.poll_fwd);
            let _ = ready.send(Ok(()));
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    let _ = s.send_to(&buf[..n], from);
                }
            }
            Ok(())
        }
        Method::AfPacket => {
            let s = xnf_netns::packet_socket(dev)?;
            set_blocking(s.as_fd(), c.poll_fwd);
            let _ = ready.send(Ok(()));
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: buf is valid for its length.
                let n = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
                if n > 0 {
                    xnf_afxdp::nfs::swap_macs(&mut buf[..n as usize]);
                    // SAFETY: as above.
                    unsafe { libc::send(s.as_raw_fd(), buf.as_ptr() as *const libc::c_void, n as usize, 0) };
                }
            }
            Ok(())
        }
    }
}

/// Blocking with a 50 ms timeout (so the stop flag is seen), or non-blocking for spinning.
fn set_blocking(fd: BorrowedFd<'_>, blocking: bool) {
    if blocking {
        let timeout = nix::sys::time::TimeVal::new(0, 50_000);
        nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &timeout).expect("SO_RCVTIMEO on a socket of ours");
    } else {
        // SAFETY: fcntl on a valid fd.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    }
}

// ---------------------------------------------------------------- pinger

/// The AF_XDP pinger as a network function: emits due probes, timestamps arrivals.
struct AfxdpPinger<'a> {
    sched: Schedule,
    path: &'a Path<'a>,
}

impl NetworkFunction for AfxdpPinger<'_> {
    fn name(&self) -> &str {
        "pinger"
    }

    fn process(&mut self, batch: &mut Batch<'_>) {
        let at = now_ns();
        for i in 0..batch.len() {
            if let Some(seq) = probe_seq(batch.packet(i)) {
                self.sched.arrived(seq, at);
            }
            batch.set(i, Verdict::Drop);
        }
    }

    fn emit(&mut self, out: &mut Emit<'_>) {
        let now = now_ns();
        if let Some(seq) = self.sched.due(now) {
            let at = now_ns();
            if out.push_with(FRAME_LEN as u32, |b| self.path.write_probe(b, seq)) {
                self.sched.mark_sent(seq, at);
            }
        }
    }
}

/// Runs the pinger for `count` probes every `interval_ns` (on this thread,
/// which must be in the pinger's namespace).
fn pinger_body(p: &Path, c: &Config, interval_ns: u64, count: u64) -> Result<Recorded> {
    match c.method {
        Method::Afxdp => {
            let mut side = afxdp_side(&p.ping_if, c, Wait::Spin)?;
            let fd = side.set.sockets()[0].fd().try_clone_to_owned()?;
            let mut nf = AfxdpPinger { sched: Schedule::new(interval_ns, count), path: p };
            loop {
                let work = side.set.step(&mut nf)?;
                let now = now_ns();
                if nf.sched.done(now) {
                    break;
                }
                if work == 0 && c.poll_recv {
                    sleep_on(fd.as_fd(), nf.sched.wait_ns(now));
                }
            }
            Ok(nf.sched.finish())
        }
        Method::Udp => {
            let (from, to) = ((p.ping_addr, 0).into(), (p.fwd_addr, ECHO_PORT).into());
            udp_pinger(from, to, interval_ns, count, c.poll_recv)
        }
        Method::AfPacket => {
            let s = xnf_netns::packet_socket(&p.ping_if)?;
            set_blocking(s.as_fd(), false);
            let mut frame = vec![0u8; FRAME_LEN];
            let mut buf = [0u8; 2048];
            let send = |seq: u32| {
                p.write_probe(&mut frame, seq);
                // SAFETY: frame is a valid buffer.
                unsafe { libc::send(s.as_raw_fd(), frame.as_ptr() as *const libc::c_void, frame.len(), 0) > 0 }
            };
            let recv = || {
                // SAFETY: buf is valid for its length.
                let n = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
                (n > 0).then(|| probe_seq(&buf[..n as usize]))
            };
            Ok(socket_pinger(Schedule::new(interval_ns, count), s.as_fd(), c.poll_recv, send, recv))
        }
    }
}

/// The kernel UDP pinger (on this thread, in the namespace that owns
/// `from`): `count` probes from `from` to the echo at `to`, one every
/// `interval_ns`, each a 60-byte frame on the wire; sleeping in ppoll()
/// between sends and answers when `poll`, else spinning. Also the pinger
/// of `xnf lab fwd-latency`, whose echo is the reflecting sink.
pub fn udp_pinger(from: std::net::SocketAddr, to: std::net::SocketAddr, interval_ns: u64, count: u64, poll: bool) -> Result<Recorded> {
    let s = std::net::UdpSocket::bind(from).context("binding the pinger's UDP socket")?;
    s.connect(to)?;
    s.set_nonblocking(true)?;
    // The same 60-byte frame on the wire: 14 + 20 + 8 + 18 bytes of payload.
    let mut msg = [0u8; 18];
    msg[..4].copy_from_slice(MAGIC);
    let mut buf = [0u8; 64];
    let send = |seq: u32| {
        msg[4..8].copy_from_slice(&seq.to_be_bytes());
        s.send(&msg).is_ok()
    };
    let recv = || {
        let n = s.recv(&mut buf).ok()?;
        Some((n >= 8 && &buf[..4] == MAGIC).then(|| u32::from_be_bytes(buf[4..8].try_into().unwrap())))
    };
    Ok(socket_pinger(Schedule::new(interval_ns, count), s.as_fd(), poll, send, recv))
}

/// The pinger's loop over a kernel socket: send each probe when it is due,
/// take every answer waiting (`recv`: None when there is none, Some(None)
/// for a frame that is not a probe), sleep in ppoll() until the next send or
/// an answer when `poll`, else spin.
fn socket_pinger(
    mut sched: Schedule,
    fd: BorrowedFd<'_>,
    poll: bool,
    mut send: impl FnMut(u32) -> bool,
    mut recv: impl FnMut() -> Option<Option<u32>>,
) -> Recorded {
    loop {
        let now = now_ns();
        if let Some(seq) = sched.due(now) {
            let at = now_ns();
            if send(seq) {
                sched.mark_sent(seq, at);
            }
        }
        while let Some(got) = recv() {
            let at = now_ns();
            if let Some(seq) = got {
                sched.arrived(seq, at);
            }
        }
        let now = now_ns();
        if sched.done(now) {
            return sched.finish();
        }
        if poll {
            sleep_on(fd, sched.wait_ns(now));
        }
    }
}

/// One run: forwarder up, `count` probes at `rate_pps`, forwarder down.
pub fn run(p: &Path, c: &Config, rate_pps: u64, count: u64, ping_cpu: usize, fwd_cpu: usize) -> Result<Recorded> {
    let fwd = Forwarder::start(p, c, fwd_cpu)?;
    let enter = pinned_in(p.ping, ping_cpu)?;
    let interval = 1_000_000_000 / rate_pps.max(1);
    let r = std::thread::scope(|s| s.spawn(|| enter().and_then(|()| pinger_body(p, c, interval, count))).join())
        .map_err(|_| anyhow::anyhow!("the pinger panicked"))?;
    fwd.stop()?;
    r
}

/// What the timestamps cost: one clock read, and the pinger's own
/// bookkeeping around an RTT over an in-memory "path" (send = push to a
/// queue, receive = pop) — the floor under every RTT recorded.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Overhead {
    pub clock_read_ns: f64,
    pub loop_rtt_ns: f64,
}

pub fn measure_overhead() -> Overhead {
    let n = 1_000_000u64;
    let t0 = now_ns();
    let mut x = 0u64;
    for _ in 0..n {
        x = x.wrapping_add(now_ns());
    }
    std::hint::black_box(x);
    let clock = (now_ns() - t0) as f64 / n as f64;
    let mut sched = Schedule::new(0, 100_000);
    let mut q = VecDeque::new();
    loop {
        let now = now_ns();
        if let Some(seq) = sched.due(now) {
            let at = now_ns();
            q.push_back(seq);
            sched.mark_sent(seq, at);
        }
        while let Some(seq) = q.pop_front() {
            sched.arrived(seq, now_ns());
        }
        if sched.done(now_ns()) {
            break;
        }
    }
    let r = sched.finish();
    let mean = r.rtts_ns.iter().sum::<u64>() as f64 / r.rtts_ns.len().max(1) as f64;
    Overhead { clock_read_ns: clock, loop_rtt_ns: mean }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_counts_each_probe_once_and_losses() {
        let mut s = Schedule::new(0, 3);
        let now = now_ns();
        assert_eq!(s.due(now), Some(0));
        s.mark_sent(0, now);
        assert_eq!(s.due(now_ns()), Some(1));
        s.mark_sent(1, now + 10);
        s.mark_sent(2, now + 20);
        assert_eq!(s.due(now_ns()), None);
        s.arrived(0, now + 1000);
        s.arrived(0, now + 5000); // a duplicate
        s.arrived(7, now + 5000); // not ours
        s.arrived(2, now + 1020);
        assert!(!s.done(now + 1100), "waits for the last probe");
        assert!(s.done(now + 20 + 300_000_000), "gives up 200 ms after the last send");
        let r = s.finish();
        assert_eq!((r.rtts_ns, r.sent, r.lost), (vec![1000, 1000], 3, 1));
    }

    #[test]
    fn overhead_is_small_and_positive() {
        let o = measure_overhead();
        assert!(o.clock_read_ns > 0.0 && o.clock_read_ns < 10_000.0, "{o:?}");
        assert!(o.loop_rtt_ns > 0.0 && o.loop_rtt_ns < 1_000_000.0, "{o:?}");
    }
}
