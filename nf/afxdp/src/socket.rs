//! AF_XDP sockets over the kernel ABI (`<linux/if_xdp.h>`): ring sizes,
//! copy or zero-copy, `XDP_USE_NEED_WAKEUP`, busy polling, and errors that
//! name the setting the kernel refused.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{bail, ensure, Context, Result};

use crate::ring::Ring;
use crate::umem::Umem;

/// Socket options of the busy-polling family (<asm-generic/socket.h>).
const SO_BUSY_POLL: libc::c_int = 46;
const SO_PREFER_BUSY_POLL: libc::c_int = 69;
const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

/// How frames reach the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Zero-copy where the driver has it, else copy.
    Auto,
    /// The kernel copies every frame between its buffers and the UMEM
    /// (the only mode veth and generic XDP have).
    Copy,
    /// The driver DMAs straight into the UMEM; refused where unsupported.
    ZeroCopy,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Copy => "copy",
            Mode::ZeroCopy => "zero-copy",
        }
    }
}

/// Busy polling (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`):
/// the application's syscalls run the driver's NAPI loop instead of waiting
/// for its softirq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusyPoll {
    /// `SO_BUSY_POLL`: microseconds a syscall may spin in the driver.
    pub usecs: u32,
    /// `SO_BUSY_POLL_BUDGET`: packets per busy-poll round.
    pub budget: u32,
    /// `SO_PREFER_BUSY_POLL`: keep softirq processing off while the application polls.
    pub prefer: bool,
}

/// Everything settable on one socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketConfig {
    pub rx_size: u32,
    pub tx_size: u32,
    pub fill_size: u32,
    pub comp_size: u32,
    pub mode: Mode,
    /// `XDP_USE_NEED_WAKEUP`: the kernel says when it needs a syscall.
    pub need_wakeup: bool,
    pub busy_poll: Option<BusyPoll>,
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig { rx_size: 2048, tx_size: 2048, fill_size: 4096, comp_size: 2048, mode: Mode::Auto, need_wakeup: true, busy_poll: None }
    }
}

impl SocketConfig {
    pub fn validate(&self) -> Result<()> {
        for (flag, n) in [("--rx-ring", self.rx_size), ("--tx-ring", self.tx_size), ("--fill-ring", self.fill_size), ("--comp-ring", self.comp_size)] {
            ensure!(n.is_power_of_two() && n >= 2, "{flag} {n}: ring sizes are powers of two (64, 512, 2048, ...)");
        }
        if let Some(b) = self.busy_poll {
            ensure!(b.budget >= 1 && b.budget <= 65535, "--busy-poll-budget {}: use 1..65535", b.budget);
        }
        Ok(())
    }
}

/// One AF_XDP socket bound to one queue of one interface.
pub struct Socket {
    fd: OwnedFd,
    pub(crate) fill: Ring<u64>,
    pub(crate) comp: Ring<u64>,
    pub(crate) rx: Ring<libc::xdp_desc>,
    pub(crate) tx: Ring<libc::xdp_desc>,
    pub ifindex: u32,
    pub ifname: String,
    pub queue: u32,
    /// What the bind ended up with.
    pub zero_copy: bool,
    pub need_wakeup: bool,
    pub busy_poll: Option<BusyPoll>,
}

fn os_err<T>(what: impl FnOnce(&io::Error) -> String) -> Result<T> {
    let e = io::Error::last_os_error();
    bail!("{}: {e}", what(&e))
}

fn setopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: v points at a live T of the size passed.
    let rc = unsafe { libc::setsockopt(fd, level, name, v as *const T as *const libc::c_void, std::mem::size_of::<T>() as libc::socklen_t) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Statistics the kernel keeps per socket (`XDP_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KernelStats {
    /// Dropped for other reasons (e.g. frames too large for a UMEM frame).
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// A frame for the socket found the RX ring full: dropped.
    pub rx_ring_full: u64,
    /// The kernel found the FILL ring empty when a frame came: dropped.
    pub rx_fill_ring_empty: u64,
    pub tx_ring_empty: u64,
}

impl Socket {
    /// Creates a socket on `queue` of `ifindex` (in this thread's network
    /// namespace) over `umem`. `shared` is the socket that registered the
    /// UMEM when this one shares it (XDP_SHARED_UMEM: one UMEM, its own
    /// FILL and COMPLETION rings on another queue).
    pub fn new(umem: &Umem, ifindex: u32, ifname: &str, queue: u32, cfg: &SocketConfig, shared: Option<&Socket>) -> Result<Socket> {
        cfg.validate()?;
        // SAFETY: plain socket(2).
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return os_err(|e| {
                if e.raw_os_error() == Some(libc::EAFNOSUPPORT) {
                    "creating an AF_XDP socket: this kernel has no AF_XDP (CONFIG_XDP_SOCKETS)".into()
                } else {
                    "creating an AF_XDP socket".into()
                }
            });
        }
        // SAFETY: a new fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let r = fd.as_raw_fd();
        if shared.is_none() {
            let reg = umem.reg();
            if let Err(e) = setopt(r, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg) {
                let c = umem.config();
                bail!(
                    "registering the UMEM ({} frames of {} bytes, headroom {}): {e}{}",
                    c.frame_count,
                    c.frame_size,
                    c.headroom,
                    match e.raw_os_error() {
                        Some(libc::ENOMEM) | Some(libc::ENOBUFS) => " — the kernel could not pin that much memory: use fewer --frames",
                        Some(libc::EINVAL) => " — check --frame-size (power of two, 2048..page size) and --headroom",
                        _ => "",
                    }
                );
            }
        }
        let ring_opt = |name: libc::c_int, n: u32, flag: &str| -> Result<()> {
            setopt(r, libc::SOL_XDP, name, &(n as libc::c_int)).with_context(|| format!("{flag} {n}: the kernel refused the ring size"))
        };
        ring_opt(libc::XDP_UMEM_FILL_RING, cfg.fill_size, "--fill-ring")?;
        ring_opt(libc::XDP_UMEM_COMPLETION_RING, cfg.comp_size, "--comp-ring")?;
        ring_opt(libc::XDP_RX_RING, cfg.rx_size, "--rx-ring")?;
        ring_opt(libc::XDP_TX_RING, cfg.tx_size, "--tx-ring")?;

        // SAFETY: zeroed plain-data struct filled by getsockopt.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: off is large enough for len bytes.
        if unsafe { libc::getsockopt(r, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS, &mut off as *mut _ as *mut libc::c_void, &mut len) } < 0 {
            return os_err(|_| "reading the ring offsets (XDP_MMAP_OFFSETS)".into());
        }
        let b = fd.as_fd();
        let map = |what: &str, e: io::Error| anyhow::anyhow!("mapping the {what} ring: {e}");
        let fill = Ring::map(b, &off.fr, cfg.fill_size, libc::XDP_UMEM_PGOFF_FILL_RING as i64, true).map_err(|e| map("FILL", e))?;
        let comp = Ring::map(b, &off.cr, cfg.comp_size, libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64, false).map_err(|e| map("COMPLETION", e))?;
        let rx = Ring::map(b, &off.rx, cfg.rx_size, libc::XDP_PGOFF_RX_RING, false).map_err(|e| map("RX", e))?;
        let tx = Ring::map(b, &off.tx, cfg.tx_size, libc::XDP_PGOFF_TX_RING, true).map_err(|e| map("TX", e))?;

        if let Some(bp) = cfg.busy_poll {
            let opt = |name: libc::c_int, v: libc::c_int, what: &str| -> Result<()> {
                setopt(r, libc::SOL_SOCKET, name, &v).map_err(|e| {
                    let why = match e.raw_os_error() {
                        Some(libc::ENOPROTOOPT) => " (the kernel lacks it: busy polling of AF_XDP needs Linux 5.11)",
                        Some(libc::EPERM) => " (needs CAP_NET_ADMIN)",
                        _ => "",
                    };
                    anyhow::anyhow!("busy poll: setting {what} = {v}: {e}{why}")
                })
            };
            opt(SO_PREFER_BUSY_POLL, bp.prefer as libc::c_int, "SO_PREFER_BUSY_POLL")?;
            opt(SO_BUSY_POLL, bp.usecs as libc::c_int, "SO_BUSY_POLL")?;
            opt(SO_BUSY_POLL_BUDGET, bp.budget as libc::c_int, "SO_BUSY_POLL_BUDGET")?;
        }

        let mut s =
            Socket { fd, fill, comp, rx, tx, ifindex, ifname: ifname.into(), queue, zero_copy: false, need_wakeup: cfg.need_wakeup, busy_poll: cfg.busy_poll };
        if let Some(first) = shared {
            // A socket sharing a UMEM may not name a mode or need_wakeup
            // (the kernel refuses any flag but XDP_SHARED_UMEM): it gets
            // the first socket's.
            s.bind(libc::XDP_SHARED_UMEM, Some(first.fd.as_raw_fd()))
                .map_err(|e| bind_error(&e, if first.zero_copy { libc::XDP_ZEROCOPY } else { libc::XDP_COPY }, ifname, queue, cfg))?;
            s.zero_copy = first.zero_copy;
            s.need_wakeup = first.need_wakeup;
            return Ok(s);
        }
        let flags: u16 = if cfg.need_wakeup { libc::XDP_USE_NEED_WAKEUP } else { 0 };
        let modes: &[u16] = match cfg.mode {
            Mode::Copy => &[libc::XDP_COPY],
            Mode::ZeroCopy => &[libc::XDP_ZEROCOPY],
            Mode::Auto => &[libc::XDP_ZEROCOPY, libc::XDP_COPY],
        };
        let mut last = None;
        for &m in modes {
            match s.bind(flags | m, None) {
                Ok(()) => {
                    s.zero_copy = m == libc::XDP_ZEROCOPY;
                    return Ok(s);
                }
                Err(e) => last = Some((m, e)),
            }
        }
        let (m, e) = last.expect("at least one mode tried");
        Err(bind_error(&e, m, ifname, queue, cfg))
    }

    /// Binds to the queue. A socket just closed on that queue keeps it busy
    /// for a moment (the kernel releases the queue's buffer pool from a
    /// work queue), so EBUSY is retried for up to a second before it counts.
    fn bind(&self, flags: u16, shared_fd: Option<RawFd>) -> io::Result<()> {
        let t0 = std::time::Instant::now();
        loop {
            match self.bind_once(flags, shared_fd) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && t0.elapsed() < std::time::Duration::from_secs(1) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => return r,
            }
        }
    }

    fn bind_once(&self, flags: u16, shared_fd: Option<RawFd>) -> io::Result<()> {
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: self.ifindex,
            sxdp_queue_id: self.queue,
            sxdp_shared_umem_fd: shared_fd.unwrap_or(0) as u32,
        };
        // SAFETY: sa is a valid sockaddr_xdp of the size passed.
        let rc =
            unsafe { libc::bind(self.fd.as_raw_fd(), &sa as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Kicks the kernel to send what the TX ring holds (copy mode always
    /// needs it; with need_wakeup only when the flag is up).
    pub fn kick_tx(&self) -> io::Result<()> {
        // SAFETY: sendto with no buffer is the AF_XDP TX doorbell.
        let rc = unsafe { libc::sendto(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            // The kernel is busy or out of room for a moment: the next kick sends.
            if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) | Some(libc::ENETDOWN)) {
                return Ok(());
            }
            return Err(e);
        }
        Ok(())
    }

    /// Wakes the receive side (the FILL ring's need_wakeup; with busy
    /// polling this is what runs the driver's poll loop).
    pub fn kick_rx(&self) -> io::Result<()> {
        // SAFETY: recvfrom with no buffer is the AF_XDP RX doorbell.
        let rc = unsafe { libc::recvfrom(self.fd.as_raw_fd(), std::ptr::null_mut(), 0, libc::MSG_DONTWAIT, std::ptr::null_mut(), std::ptr::null_mut()) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENETDOWN)) {
                return Ok(());
            }
            return Err(e);
        }
        Ok(())
    }

    /// The kernel's counters of this socket.
    pub fn kernel_stats(&self) -> Result<KernelStats> {
        kernel_stats(self.fd())
    }
}

/// The kernel's counters of the AF_XDP socket `fd` (any descriptor of it,
/// so a reporting thread can hold a `dup` while another drives the rings).
pub fn kernel_stats(fd: BorrowedFd<'_>) -> Result<KernelStats> {
    // SAFETY: zeroed plain-data struct filled by getsockopt.
    let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
    // SAFETY: st is large enough for len bytes.
    if unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_XDP, libc::XDP_STATISTICS, &mut st as *mut _ as *mut libc::c_void, &mut len) } < 0 {
        return os_err(|_| "reading XDP_STATISTICS".into());
    }
    Ok(KernelStats {
        rx_dropped: st.rx_dropped,
        rx_invalid_descs: st.rx_invalid_descs,
        tx_invalid_descs: st.tx_invalid_descs,
        rx_ring_full: st.rx_ring_full,
        rx_fill_ring_empty: st.rx_fill_ring_empty_descs,
        tx_ring_empty: st.tx_ring_empty_descs,
    })
}

/// What a failed bind means, in terms of the setting to change.
/// A bind refused because the driver has no AF_XDP zero-copy: a caller
/// that sweeps zero-copy skips its configurations on this error.
#[derive(Debug)]
pub struct ZeroCopyUnsupported(pub String);

impl std::fmt::Display for ZeroCopyUnsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ZeroCopyUnsupported {}

fn bind_error(e: &io::Error, mode: u16, ifname: &str, queue: u32, cfg: &SocketConfig) -> anyhow::Error {
    let zc = mode == libc::XDP_ZEROCOPY;
    let hint = match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::EPROTONOSUPPORT) if zc => {
            return ZeroCopyUnsupported(format!(
                "zero-copy: the driver of {ifname} has no AF_XDP zero-copy support (veth and generic XDP have copy mode only); use --copy ({e})"
            ))
            .into();
        }
        Some(libc::EBUSY) => format!("queue {queue} of {ifname} already has an AF_XDP socket (or a zero-copy pool): one socket per queue"),
        Some(libc::EINVAL) => format!(
            "queue {queue}: {ifname} has no such queue (see `ethtool -l {ifname}`), or a flag combination the kernel refuses (mode {}, need_wakeup {})",
            if zc { "zero-copy" } else { "copy" },
            cfg.need_wakeup
        ),
        Some(libc::ENODEV) | Some(libc::ENXIO) => format!("{ifname} does not exist in this network namespace"),
        Some(libc::ENETDOWN) => format!("{ifname} is down: `ip link set {ifname} up`"),
        _ => format!("binding to {ifname} queue {queue} in {} mode", if zc { "zero-copy" } else { "copy" }),
    };
    anyhow::anyhow!("{hint} ({e})")
}
