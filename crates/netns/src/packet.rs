//! Raw frames on an interface: an AF_PACKET socket that sends frames as
//! they are (trailers, bad checksums, any ethertype) and receives every
//! frame the interface sees. Used by the lab's AF_PACKET baselines and by
//! tests that need frames no socket API would build.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{bail, Result};

/// An AF_PACKET socket bound to `dev` (in the calling thread's network
/// namespace) for every ethertype; it does not receive what it sends.
pub fn packet_socket(dev: &str) -> Result<OwnedFd> {
    let ifindex = crate::netlink::link_by_name(dev)?.ifindex;
    let proto = (libc::ETH_P_ALL as u16).to_be() as i32;
    // SAFETY: plain socket(2).
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto) };
    if raw < 0 {
        bail!("AF_PACKET socket: {} (run as root)", std::io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    let s = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: zeroed sockaddr_ll, then the fields bind needs.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = proto as u16;
    sa.sll_ifindex = ifindex as i32;
    // SAFETY: valid sockaddr_ll.
    if unsafe { libc::bind(s.as_raw_fd(), &sa as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32) } < 0 {
        bail!("binding AF_PACKET to {dev}: {}", std::io::Error::last_os_error());
    }
    let one: libc::c_int = 1;
    // SAFETY: PACKET_IGNORE_OUTGOING (23) with an int.
    unsafe { libc::setsockopt(s.as_raw_fd(), libc::SOL_PACKET, 23, &one as *const _ as *const libc::c_void, 4) };
    Ok(s)
}

/// Sends one frame as it is on an AF_PACKET socket.
pub fn send_frame(s: &OwnedFd, frame: &[u8]) -> Result<()> {
    // SAFETY: frame is a valid buffer for its length.
    let n = unsafe { libc::send(s.as_raw_fd(), frame.as_ptr() as *const libc::c_void, frame.len(), 0) };
    if n != frame.len() as isize {
        bail!("AF_PACKET send of {} bytes: {}", frame.len(), std::io::Error::last_os_error());
    }
    Ok(())
}
