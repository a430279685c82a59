//! `xnf lab afxdp`: user-space packet I/O over AF_XDP against the kernel's
//! own ways of getting packets to user space, on the line topology's dut,
//! variants alternated within each run:
//!
//! - `afxdp-rxdrop`: xnf's AF_XDP runtime (copy mode on veth) receives
//!   every frame on dut's ingress and drops it, counted by the runtime;
//! - `linux-udp`: the kernel delivers the same UDP datagrams to a UDP
//!   socket (recvmmsg, 64 at a time); dut owns the destination address for
//!   this variant, counted by the reader;
//! - `afxdp-l2fwd`: the runtime swaps the MACs and sends every frame back
//!   out of dut's ingress, counted by an XDP sink on gen;
//! - `linux-afpacket`: the same l2fwd over an AF_PACKET socket (recvmmsg,
//!   swap, sendmmsg), counted the same way.
//!
//! The user-space side of every variant runs on one thread pinned to the
//! CPU the generator does not use: the kernel's receive work happens in
//! softirq on the generator's CPU (veth), the application's on the other —
//! so, unlike the other veth experiments, frames can be lost here when the
//! application falls behind (its ring or socket buffer overflows).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use xnf_afxdp::nfs::{L2Fwd, RxDrop};
use xnf_afxdp::selector::AfxdpProgram;
use xnf_afxdp::{Counters, Mode, NetworkFunction, RunConfig, SocketConfig, UmemConfig, Wait, XskSet};
use xnf_netns::Netns;

use crate::engine::driver::{Cpus, Experiment, Running};
use crate::engine::measure::{self, Received};
use crate::engine::params::{self, Param, Point, Value};
use crate::engine::progress::Progress;
use crate::engine::results::{Results, Sample};
use crate::engine::topology::BuiltTopology;
use crate::engine::LabAttachment;
use crate::experiments::router::parse_size;
use xnf_core::xdp::{XdpLink, XdpMode};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// AF_XDP receive and drop (xnf's runtime).
    AfxdpRxdrop,
    /// The kernel's UDP receive path to a socket.
    LinuxUdp,
    /// AF_XDP MAC swap back out (xnf's runtime).
    AfxdpL2fwd,
    /// The same MAC swap over an AF_PACKET socket.
    LinuxAfpacket,
    /// afxdp-rxdrop with the socket bound in zero-copy mode.
    AfxdpRxdropZc,
    /// afxdp-l2fwd with the socket bound in zero-copy mode.
    AfxdpL2fwdZc,
}

impl Variant {
    fn forwards(self) -> bool {
        matches!(self, Variant::AfxdpL2fwd | Variant::LinuxAfpacket | Variant::AfxdpL2fwdZc)
    }
}

/// `xnf lab afxdp`: its own options.
#[derive(Args, Clone, Debug, Serialize)]
pub struct Afxdp {
    /// Frame sizes on the wire, FCS included (64..=1518); a list sweeps.
    #[arg(long = "size", default_value = "64", value_delimiter = ',', value_parser = parse_size, value_name = "BYTES[,...]")]
    pub sizes: Vec<u32>,
    /// Variants to compare. The -zc ones bind their socket in zero-copy
    /// mode: a driver without it (veth) is said once and they are skipped.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "afxdp-rxdrop,linux-udp,afxdp-l2fwd,linux-afpacket,afxdp-rxdrop-zc,afxdp-l2fwd-zc")]
    pub variants: Vec<Variant>,
    /// The application spins instead of sleeping (poll(), blocking recvmmsg) when idle.
    #[arg(long)]
    pub spin: bool,
    /// Packets per batch: AF_XDP RX batch, recvmmsg/sendmmsg vector.
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
}

/// The application's CPU: the one after the generator's.
fn app_cpu(cpus: Cpus) -> usize {
    (cpus.gen + 1) % cpus.count
}

impl crate::engine::driver::VariantName for Variant {
    fn name(&self) -> String {
        crate::engine::driver::variant_name(self)
    }
}

impl Experiment for Afxdp {
    type Variant = Variant;
    const NAME: &'static str = "afxdp";

    fn params(&self) -> Vec<Param> {
        vec![params::size(), params::flows(), params::ipv6()]
    }

    /// One flow of IPv4 UDP datagrams: a socket application sees them all.
    fn sweep(&self) -> Vec<(&'static str, Vec<Value>)> {
        vec![("size", params::values(&self.sizes)), ("flows", params::values(&[1u32])), ("ipv6", params::values(&[false]))]
    }

    fn variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn ratios(&self) -> Vec<(&'static str, &'static str)> {
        vec![("afxdp-rxdrop", "linux-udp"), ("afxdp-l2fwd", "linux-afpacket"), ("afxdp-rxdrop-zc", "linux-udp"), ("afxdp-l2fwd-zc", "linux-afpacket")]
    }

    fn check(&self, cpus: Cpus) -> Result<()> {
        ensure!(!self.sizes.contains(&0), "--size imix: this experiment takes fixed sizes");
        measure::check_sizes(&self.sizes, false)?;
        let ncpu = cpus.count;
        ensure!(ncpu >= 2, "xnf lab afxdp needs 2 CPUs: the generator's and the application's (this machine has {ncpu})");
        ensure!((1..=1024).contains(&self.batch), "--batch {}: use 1..=1024", self.batch);
        Ok(())
    }

    /// Frames sent back to gen are counted there by an XDP sink.
    fn built(&mut self, t: &mut BuiltTopology, _: &Progress) -> Result<()> {
        let gen = t.roles()?.gen.clone();
        t.replace_function(&gen, LabAttachment::sink)
    }

    fn set_up<'a>(&'a self, t: &'a BuiltTopology, _: &Point, v: Variant, cpus: Cpus, _: &Progress) -> Result<Box<dyn Running + 'a>> {
        let roles = t.roles()?;
        let (dut, din) = t.endpoint(&roles.dut_in)?;
        let cpu = app_cpu(cpus);
        let mut setup = Setup { dut, _pass: None, local_addr: None, forwarding_off: false };
        let app = match v {
            Variant::AfxdpRxdrop => afxdp_app(dut, &din, cpu, self, Box::new(RxDrop), Mode::Copy)?,
            Variant::AfxdpL2fwd => afxdp_app(dut, &din, cpu, self, Box::new(L2Fwd), Mode::Copy)?,
            Variant::AfxdpRxdropZc => zero_copy(afxdp_app(dut, &din, cpu, self, Box::new(RxDrop), Mode::ZeroCopy))?,
            Variant::AfxdpL2fwdZc => zero_copy(afxdp_app(dut, &din, cpu, self, Box::new(L2Fwd), Mode::ZeroCopy))?,
            Variant::LinuxUdp => {
                // dut owns the generator's destination: the kernel delivers locally.
                let a = format!("{}/32", t.addr(&roles.sink, false)?);
                dut.ip(&["addr", "add", &a, "dev", "lo"])?;
                setup.local_addr = Some(a);
                setup._pass = Some(LabAttachment::pass(dut, &din)?);
                udp_app(dut, cpu, self)?
            }
            Variant::LinuxAfpacket => {
                // The stack sees every frame too; with forwarding off it drops
                // them after its route lookup instead of forwarding to the sink.
                dut.sysctl_set("net.ipv4.ip_forward", "0")?;
                setup.forwarding_off = true;
                setup._pass = Some(LabAttachment::pass(dut, &din)?);
                afpacket_app(dut, &din, cpu, self)?
            }
        };
        Ok(Box::new(Set { v, t, app, setup }))
    }

    fn finish(&mut self, cpus: Cpus, res: &mut Results) -> Result<()> {
        res.notes.push(format!(
            "veth: the generator and the kernel's receive work (XDP, the copy into the UMEM, the UDP or AF_PACKET delivery) run in softirq on CPU {}; the application thread on CPU {} ({}). AF_XDP on veth is copy mode only (the -zc variants need a driver with zero-copy).",
            cpus.gen,
            app_cpu(cpus),
            if self.spin { "spinning" } else { "sleeping in poll()/recvmmsg when idle" }
        ));
        Ok(())
    }
}

/// A zero-copy application, or the kernel's refusal as a variant this
/// driver does not have (the driver skips it, said once).
fn zero_copy(app: Result<App>) -> Result<App> {
    app.map_err(|e| match e.downcast_ref::<xnf_afxdp::ZeroCopyUnsupported>() {
        Some(z) => crate::engine::Unavailable(format!("no AF_XDP zero-copy on this driver ({z})")).into(),
        None => e,
    })
}

/// A user-space application thread in dut: stopped and joined when dropped.
struct App {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<()>>>,
    /// Frames it handled (received, or sent back).
    count: Arc<AtomicU64>,
    counters: Option<Arc<Counters>>,
}

impl App {
    fn finish(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the application thread panicked"),
            None => Ok(()),
        }
    }

    fn handled(&self) -> u64 {
        match &self.counters {
            Some(c) => c.rx_packets.load(Ordering::Relaxed),
            None => self.count.load(Ordering::Relaxed),
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

type Ready = mpsc::Sender<Result<Option<Arc<Counters>>>>;

/// Passes a set-up result through, handing the error itself to the
/// waiting spawner when it failed (its kind is what the spawner decides
/// by: zero-copy refused); the thread ends with a note of that.
fn or_report<T>(r: Result<T>, ready: &Ready) -> Result<T> {
    r.map_err(|e| {
        let _ = ready.send(Err(e));
        anyhow::anyhow!("the set-up failed (its error went to the lab)")
    })
}

/// Runs `body` on a new thread in `ns`, pinned to `cpu`; `body` reports
/// readiness (or its set-up error) through the channel before its loop.
fn spawn_app<F>(ns: &Netns, cpu: usize, body: F) -> Result<App>
where
    F: FnOnce(&AtomicBool, &AtomicU64, &Ready) -> Result<()> + Send + 'static,
{
    let enter = crate::experiments::latency::pingpong::pinned_in(ns, cpu)?;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let (s2, c2) = (stop.clone(), count.clone());
    let handle = std::thread::spawn(move || -> Result<()> {
        or_report(enter(), &tx)?;
        body(&s2, &c2, &tx)
    });
    let counters = rx.recv().context("the application thread ended before it was ready")??;
    Ok(App { stop, handle: Some(handle), count, counters })
}

/// xnf's AF_XDP runtime with `nf` on queue 0 of `dev`, selector attached.
fn afxdp_app(dut: &Netns, dev: &str, cpu: usize, o: &Afxdp, nf: Box<dyn NetworkFunction>, mode: Mode) -> Result<App> {
    let (dev, spin, batch) = (dev.to_string(), o.spin, o.batch);
    spawn_app(dut, cpu, move |stop, _count, ready| {
        let r = (|| -> Result<_> {
            let link = xnf_netns::netlink::link_by_name(&dev)?;
            let prog = AfxdpProgram::load()?;
            prog.set_rules(&[], false)?;
            let run = RunConfig { batch, wait: if spin { Wait::Spin } else { Wait::Poll { timeout_ms: 100 } } };
            let mut set = XskSet::new(UmemConfig::default(), &SocketConfig { mode, ..Default::default() }, run, &[(link.ifindex, dev.clone(), 0)])?;
            prog.add_socket(0, set.sockets()[0].fd())?;
            if nf.receives() {
                set.fill_rings()?;
            }
            let xdp = XdpLink::create(prog.prog().as_fd(), link.ifindex, &dev, XdpMode::Native)?;
            Ok((prog, set, xdp))
        })();
        let (prog, mut set, xdp) = or_report(r, ready)?;
        let _ = ready.send(Ok(Some(set.counters()[0].clone())));
        let mut nf = nf;
        set.run(nf.as_mut(), stop)?;
        drop(xdp); // no new frames while the UMEM is counted
        drop(prog); // the socket out of the XSKMAP before it closes
        let acc = set.settled_accounting();
        ensure!(acc.balanced(), "AF_XDP UMEM accounting does not balance after the run: {acc:?}");
        Ok(())
    })
}

fn set_int_opt(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) {
    // SAFETY: valid int option on a valid fd.
    unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, &v as *const _ as *const libc::c_void, 4) };
}

fn set_timeout(fd: &OwnedFd, spin: bool) {
    // Spinning readers poll without blocking; sleeping ones wake every 100 ms to see the stop flag.
    if spin {
        // SAFETY: fcntl on a valid fd.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    } else {
        let timeout = nix::sys::time::TimeVal::new(0, 100_000);
        nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &timeout).expect("SO_RCVTIMEO on a socket of ours");
    }
}

/// Buffers and headers for recvmmsg/sendmmsg of `n` frames.
struct MsgBatch {
    bufs: Vec<Vec<u8>>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

impl MsgBatch {
    fn new(n: usize) -> Box<MsgBatch> {
        let mut b = Box::new(MsgBatch { bufs: (0..n).map(|_| vec![0u8; 2048]).collect(), iovs: Vec::with_capacity(n), hdrs: Vec::with_capacity(n) });
        for i in 0..n {
            let p = b.bufs[i].as_mut_ptr();
            b.iovs.push(libc::iovec { iov_base: p as *mut libc::c_void, iov_len: 2048 });
        }
        for i in 0..n {
            // SAFETY: zeroed msghdr, then pointing at our iovec.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut b.iovs[i] as *mut libc::iovec;
            h.msg_hdr.msg_iovlen = 1;
            b.hdrs.push(h);
        }
        b
    }

    fn recv(&mut self, fd: &OwnedFd) -> usize {
        for (h, iov) in self.hdrs.iter_mut().zip(&mut self.iovs) {
            iov.iov_len = 2048;
            h.msg_len = 0;
        }
        // SAFETY: hdrs point at live iovecs and buffers.
        let n = unsafe { libc::recvmmsg(fd.as_raw_fd(), self.hdrs.as_mut_ptr(), self.hdrs.len() as u32, 0, std::ptr::null_mut()) };
        n.max(0) as usize
    }

    /// Sends the first `n` received frames back, each at its received length.
    fn send(&mut self, fd: &OwnedFd, n: usize) -> usize {
        for i in 0..n {
            self.iovs[i].iov_len = self.hdrs[i].msg_len as usize;
        }
        // SAFETY: hdrs point at live iovecs and buffers.
        let sent = unsafe { libc::sendmmsg(fd.as_raw_fd(), self.hdrs.as_mut_ptr(), n as u32, 0) };
        sent.max(0) as usize
    }
}

/// A kernel-socket application in dut: the socket `open` makes, with a
/// large receive buffer, read `--batch` frames at a time with recvmmsg;
/// with `mac_swap`, every frame goes back out with its MACs swapped
/// (sendmmsg) and the frames sent are counted, else those received.
fn socket_app(dut: &Netns, cpu: usize, o: &Afxdp, mac_swap: bool, open: impl FnOnce() -> Result<OwnedFd> + Send + 'static) -> Result<App> {
    let (spin, batch) = (o.spin, o.batch as usize);
    spawn_app(dut, cpu, move |stop, count, ready| {
        let sock = or_report(open(), ready)?;
        set_int_opt(&sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 32 << 20);
        set_timeout(&sock, spin);
        let _ = ready.send(Ok(None));
        let mut b = MsgBatch::new(batch);
        while !stop.load(Ordering::Relaxed) {
            let n = b.recv(&sock);
            let handled = if mac_swap && n > 0 {
                b.bufs.iter_mut().take(n).for_each(|buf| xnf_afxdp::nfs::swap_macs(buf));
                b.send(&sock, n)
            } else {
                n
            };
            count.fetch_add(handled as u64, Ordering::Relaxed);
        }
        Ok(())
    })
}

/// A UDP socket on port 9 reading everything and counting it.
fn udp_app(dut: &Netns, cpu: usize, o: &Afxdp) -> Result<App> {
    socket_app(dut, cpu, o, false, || Ok(OwnedFd::from(std::net::UdpSocket::bind("0.0.0.0:9").context("binding UDP port 9 in dut")?)))
}

/// An AF_PACKET socket on `dev`: receive, swap MACs, send back.
fn afpacket_app(dut: &Netns, dev: &str, cpu: usize, o: &Afxdp) -> Result<App> {
    let dev = dev.to_string();
    socket_app(dut, cpu, o, true, move || xnf_netns::packet_socket(&dev))
}

/// What a variant put on dut besides its application; removed when dropped.
struct Setup<'a> {
    dut: &'a Netns,
    _pass: Option<LabAttachment>,
    local_addr: Option<String>,
    forwarding_off: bool,
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        if let Some(a) = &self.local_addr {
            let _ = self.dut.ip(&["addr", "del", a, "dev", "lo"]);
        }
        if self.forwarding_off {
            let _ = self.dut.sysctl_set("net.ipv4.ip_forward", "1");
        }
    }
}

/// A variant's application and what it put on dut.
struct Set<'a> {
    v: Variant,
    t: &'a BuiltTopology,
    app: App,
    // Dropped after the application.
    setup: Setup<'a>,
}

impl Running for Set<'_> {
    /// Forwarded frames are counted by the sink on gen, received ones by
    /// the application.
    fn counters(&self) -> Result<measure::Counters<'_>> {
        let roles = self.t.roles()?;
        let (dut, din) = self.t.endpoint(&roles.dut_in)?;
        let received: Received = if self.v.forwards() {
            let back = self.t.attachment(&roles.gen)?;
            Box::new(move || back.packets())
        } else {
            Box::new(|| Ok(self.app.handled()))
        };
        Ok(measure::Counters {
            dut_in: (dut, din.clone()),
            dut_out: self.v.forwards().then_some((dut, din)),
            received,
            on_read: None,
            corunner: None,
            during: None,
        })
    }

    fn finish(self: Box<Self>, _: &[Sample]) -> Result<()> {
        let Set { app, setup, v, .. } = *self;
        app.finish().with_context(|| format!("{}: the application", crate::engine::driver::variant_name(&v)))?;
        drop(setup);
        Ok(())
    }
}
