//! The kernel's ways to user space the AF_XDP variants are compared with:
//! UDP and AF_PACKET sockets read (and written) a batch at a time, one
//! socket and thread per queue.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{ensure, Context, Result};
use xnf_netns::Netns;

use super::app::{or_report, App, Ready, Started};
use super::Afxdp;

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

/// A kernel-socket application in dut, one thread per queue: the socket
/// `open(i)` makes for queue i, with a large receive buffer, read
/// `--batch` frames at a time with recvmmsg; with `mac_swap`, every frame
/// goes back out with its MACs swapped (sendmmsg) and the frames sent
/// are counted, else those received. The sockets are opened in queue
/// order (a group's member i is queue i's socket).
fn socket_app<F>(dut: &Netns, cpus: &[usize], o: &Afxdp, mac_swap: bool, mut open: impl FnMut(u32) -> F) -> Result<App>
where
    F: FnOnce() -> Result<OwnedFd> + Send + 'static,
{
    let (spin, batch) = (o.spin, o.batch as usize);
    let (app, _) = App::start(dut, cpus, |queue| {
        let open = open(queue);
        move |stop: &AtomicBool, count: &AtomicU64, ready: &Ready| {
            let sock = or_report(open(), ready)?;
            set_int_opt(&sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 32 << 20);
            set_timeout(&sock, spin);
            let _ = ready.send(Ok(Started::default()));
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
        }
    })?;
    Ok(app)
}

/// UDP sockets on port 9 reading everything and counting it: one, or with
/// more queues one per queue in an SO_REUSEPORT group that hands each
/// datagram to the socket of the CPU receiving it — the kernel's
/// counterpart of a socket per queue (the group's hash would mix them).
pub(super) fn udp_app(dut: &Netns, cpus: &[usize], o: &Afxdp) -> Result<App> {
    let queues = cpus.len() as u32;
    socket_app(dut, cpus, o, false, |queue| {
        move || -> Result<OwnedFd> {
            if queues == 1 {
                return Ok(OwnedFd::from(std::net::UdpSocket::bind("0.0.0.0:9").context("binding UDP port 9 in dut")?));
            }
            use nix::sys::socket::{bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
            let fd = socket(AddressFamily::Inet, SockType::Datagram, SockFlag::empty(), None).context("a UDP socket")?;
            setsockopt(&fd, sockopt::ReusePort, &true).context("SO_REUSEPORT")?;
            bind(fd.as_raw_fd(), &SockaddrIn::new(0, 0, 0, 0, 9)).context("binding UDP port 9 in dut")?;
            if queue == 0 {
                steer_by_cpu(&fd, queues)?;
            }
            Ok(fd)
        }
    })
}

/// The reuseport group's choice: member `CPU % queues` (a classic BPF
/// program, as SO_ATTACH_REUSEPORT_CBPF takes; queue i is received on
/// CPU i).
fn steer_by_cpu(fd: &OwnedFd, queues: u32) -> Result<()> {
    let code = [
        libc::sock_filter { code: 0x20, jt: 0, jf: 0, k: (libc::SKF_AD_OFF + libc::SKF_AD_CPU) as u32 }, // A = CPU
        libc::sock_filter { code: 0x94, jt: 0, jf: 0, k: queues },                                       // A %= queues
        libc::sock_filter { code: 0x16, jt: 0, jf: 0, k: 0 },                                            // return A
    ];
    let prog = libc::sock_fprog { len: code.len() as u16, filter: code.as_ptr() as *mut libc::sock_filter };
    const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
    // SAFETY: a valid program for the call's duration.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            &prog as *const _ as *const libc::c_void,
            std::mem::size_of_val(&prog) as u32,
        )
    };
    ensure!(r == 0, "steering the UDP sockets by CPU (SO_ATTACH_REUSEPORT_CBPF): {}", std::io::Error::last_os_error());
    Ok(())
}

/// AF_PACKET sockets on `dev`: receive, swap MACs, send back. With more
/// queues, one per queue in a PACKET_FANOUT_CPU group (member `CPU %
/// queues`, as above).
pub(super) fn afpacket_app(dut: &Netns, dev: &str, cpus: &[usize], o: &Afxdp) -> Result<App> {
    let queues = cpus.len() as u32;
    socket_app(dut, cpus, o, true, |_| {
        let dev = dev.to_string();
        move || -> Result<OwnedFd> {
            let fd = xnf_netns::packet_socket(&dev)?;
            if queues > 1 {
                // Fanout groups are per namespace, and this one is dut's own.
                const PACKET_FANOUT: libc::c_int = 18;
                const PACKET_FANOUT_CPU: libc::c_int = 2;
                let arg: libc::c_int = 0x7866 | (PACKET_FANOUT_CPU << 16);
                // SAFETY: an int option on a valid fd.
                let r = unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_FANOUT, &arg as *const _ as *const libc::c_void, 4) };
                ensure!(r == 0, "joining the AF_PACKET fanout group (PACKET_FANOUT_CPU): {}", std::io::Error::last_os_error());
            }
            Ok(fd)
        }
    })
}
