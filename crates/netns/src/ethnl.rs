//! The kernel's ethtool netlink interface (generic netlink family
//! `ethtool`, Linux 5.6+), for the settings the lab sweeps: ring sizes
//! (`ethtool -G`), channels (`-L`) and interrupt coalescing (`-C`), in the
//! calling thread's network namespace. Requests ask for the kernel's
//! extended ack, so a refusal comes with the kernel's own words; a driver
//! without the setting answers `EOPNOTSUPP`, which [`Refusal::Unsupported`]
//! names so that a sweep can skip its points and say so.
//!
//! The messages are a few attributes each: written here rather than
//! through a generic-netlink crate (none of rust-netlink's ethtool crates
//! has a blocking interface).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{bail, Context, Result};

const NETLINK_GENERIC: i32 = 16;
const NETLINK_EXT_ACK: i32 = 11;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `NLMSGERR_ATTR_MSG`: the extended ack's text.
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLM_F_CAPPED: u16 = 0x100;
const NLA_F_NESTED: u16 = 1 << 15;

const GENL_ID_CTRL: u16 = 16;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;

/// `ETHTOOL_A_*_HEADER` (1 in every message) and its `DEV_NAME` (2).
const A_HEADER: u16 = 1;
const A_HEADER_DEV_NAME: u16 = 2;

/// A setting of `ethtool -G/-L/-C`: the message that sets it and its attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    RxRing,
    TxRing,
    RxChannels,
    TxChannels,
    CombinedChannels,
    RxUsecs,
    TxUsecs,
    RxFrames,
    AdaptiveRx,
}

impl Setting {
    /// (SET message, GET message, attribute, the attribute is a u8).
    fn wire(self) -> (u8, u8, u16, bool) {
        match self {
            Setting::RxRing => (16, 15, 6, false),
            Setting::TxRing => (16, 15, 9, false),
            Setting::RxChannels => (18, 17, 6, false),
            Setting::TxChannels => (18, 17, 7, false),
            Setting::CombinedChannels => (18, 17, 9, false),
            Setting::RxUsecs => (20, 19, 2, false),
            Setting::RxFrames => (20, 19, 3, false),
            Setting::TxUsecs => (20, 19, 6, false),
            Setting::AdaptiveRx => (20, 19, 11, true),
        }
    }

    /// The ethtool command line that sets it.
    pub fn ethtool(self) -> &'static str {
        match self {
            Setting::RxRing => "ethtool -G DEV rx N",
            Setting::TxRing => "ethtool -G DEV tx N",
            Setting::RxChannels => "ethtool -L DEV rx N",
            Setting::TxChannels => "ethtool -L DEV tx N",
            Setting::CombinedChannels => "ethtool -L DEV combined N",
            Setting::RxUsecs => "ethtool -C DEV rx-usecs N",
            Setting::RxFrames => "ethtool -C DEV rx-frames N",
            Setting::TxUsecs => "ethtool -C DEV tx-usecs N",
            Setting::AdaptiveRx => "ethtool -C DEV adaptive-rx on|off",
        }
    }
}

/// Why the kernel refused a setting.
#[derive(Debug)]
pub enum Refusal {
    /// The driver does not have it (`EOPNOTSUPP`).
    Unsupported(String),
    /// Anything else: out of range, busy, no such device...
    Other(anyhow::Error),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Refusal::Unsupported(why) => write!(f, "not supported by its driver ({why})"),
            Refusal::Other(e) => write!(f, "{e:#}"),
        }
    }
}

/// A generic netlink socket bound to the `ethtool` family.
pub struct Ethnl {
    fd: OwnedFd,
    family: u16,
    seq: u32,
}

fn attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// The attributes of a message's payload after `skip` bytes: (type, payload).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        if len < 4 || len > b.len() {
            break;
        }
        out.push((u16::from_ne_bytes([b[2], b[3]]) & !NLA_F_NESTED, &b[4..len]));
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    out
}

fn header(dev: &str) -> Vec<u8> {
    let mut name = dev.as_bytes().to_vec();
    name.push(0);
    let mut nested = Vec::new();
    attr(&mut nested, A_HEADER_DEV_NAME, &name);
    nested
}

impl Ethnl {
    /// Opens the socket and resolves the family (in this thread's namespace).
    pub fn open() -> Result<Ethnl> {
        // SAFETY: plain socket(2); the fd is owned below.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, NETLINK_GENERIC) };
        if fd < 0 {
            bail!("opening a generic netlink socket: {}", std::io::Error::last_os_error());
        }
        // SAFETY: fd is new and ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let one: i32 = 1;
        // SAFETY: valid fd and option value. Without extended acks the
        // kernel's reasons are lost; refusals still come as errnos.
        unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_NETLINK, NETLINK_EXT_ACK, (&one as *const i32).cast(), 4) };
        let mut nl = Ethnl { fd, family: GENL_ID_CTRL, seq: 0 };
        let mut name_attr = Vec::new();
        attr(&mut name_attr, CTRL_ATTR_FAMILY_NAME, b"ethtool\0");
        let reply =
            nl.request(CTRL_CMD_GETFAMILY, 0, &name_attr).map_err(|r| anyhow::anyhow!("{r}")).context("looking up the ethtool netlink family (Linux 5.6+)")?;
        let id = attrs(&reply).into_iter().find(|(k, _)| *k == CTRL_ATTR_FAMILY_ID).context("the kernel's family lookup gave no id")?;
        nl.family = u16::from_ne_bytes([id.1[0], id.1[1]]);
        Ok(nl)
    }

    /// Sends one request (`cmd` with `payload` attributes, flags beyond
    /// REQUEST|ACK) and returns the reply's attributes (empty for an ack).
    fn request(&mut self, cmd: u8, flags: u16, payload: &[u8]) -> Result<Vec<u8>, Refusal> {
        self.seq += 1;
        let len = 16 + 4 + payload.len();
        let mut msg = Vec::with_capacity(len);
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&self.family.to_ne_bytes());
        msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
        msg.extend_from_slice(&self.seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&[cmd, 1, 0, 0]);
        msg.extend_from_slice(payload);
        // SAFETY: sending a buffer we own on a valid fd (to the kernel: no address needed for netlink send).
        if unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) } < 0 {
            return Err(Refusal::Other(anyhow::anyhow!("sending to netlink: {}", std::io::Error::last_os_error())));
        }
        let mut data = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            // SAFETY: receiving into a buffer we own.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(Refusal::Other(anyhow::anyhow!("receiving from netlink: {}", std::io::Error::last_os_error())));
            }
            let mut b = &buf[..n as usize];
            while b.len() >= 16 {
                let mlen = (u32::from_ne_bytes(b[0..4].try_into().expect("4")) as usize).min(b.len());
                let (kind, mflags) = (u16::from_ne_bytes([b[4], b[5]]), u16::from_ne_bytes([b[6], b[7]]));
                let body = &b[16..mlen];
                match kind {
                    NLMSG_ERROR => return ack(body, mflags).map(|()| data),
                    NLMSG_DONE => return Ok(data),
                    _ => data.extend_from_slice(&body[4.min(body.len())..]),
                }
                b = &b[mlen.next_multiple_of(4).min(b.len())..];
            }
        }
    }

    /// Sets `setting` of `dev` to `value`.
    pub fn set(&mut self, dev: &str, setting: Setting, value: u32) -> Result<(), Refusal> {
        let (set, _, kind, byte) = setting.wire();
        let mut payload = Vec::new();
        attr(&mut payload, A_HEADER | NLA_F_NESTED, &header(dev));
        if byte {
            attr(&mut payload, kind, &[u8::from(value != 0)]);
        } else {
            attr(&mut payload, kind, &value.to_ne_bytes());
        }
        self.request(set, 0, &payload).map(drop)
    }

    /// `setting` of `dev` as the kernel reports it.
    pub fn get(&mut self, dev: &str, setting: Setting) -> Result<u32, Refusal> {
        let (_, get, kind, byte) = setting.wire();
        let mut payload = Vec::new();
        attr(&mut payload, A_HEADER | NLA_F_NESTED, &header(dev));
        let reply = self.request(get, 0, &payload)?;
        let (_, v) = attrs(&reply).into_iter().find(|(k, _)| *k == kind).ok_or_else(|| Refusal::Unsupported("the driver reports no such value".into()))?;
        Ok(if byte { u32::from(v[0]) } else { u32::from_ne_bytes(v[..4].try_into().expect("a u32 attribute")) })
    }
}

/// An `NLMSG_ERROR` body: 0 is an ack; else the errno and the kernel's message.
fn ack(body: &[u8], flags: u16) -> Result<(), Refusal> {
    let errno = -i32::from_ne_bytes(body[0..4].try_into().expect("4"));
    if errno == 0 {
        return Ok(());
    }
    // The extended ack's attributes follow the request's header (capped) or whole request.
    let mut msg = String::new();
    if flags & NLM_F_ACK_TLVS != 0 {
        let req_len = if flags & NLM_F_CAPPED != 0 { 16 } else { u32::from_ne_bytes(body[4..8].try_into().expect("4")) as usize };
        if let Some(tlvs) = body.get(4 + req_len..) {
            if let Some((_, m)) = attrs(tlvs).into_iter().find(|(k, _)| *k == NLMSGERR_ATTR_MSG) {
                msg = String::from_utf8_lossy(m).trim_end_matches('\0').to_string();
            }
        }
    }
    let err = std::io::Error::from_raw_os_error(errno);
    let why = if msg.is_empty() { err.to_string() } else { format!("{msg}: {err}") };
    Err(if errno == libc::EOPNOTSUPP { Refusal::Unsupported(why) } else { Refusal::Other(anyhow::anyhow!(why)) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ifname, veth, Netns};

    #[test]
    fn a_veth_takes_channels_and_refuses_rings_as_unsupported() {
        let ns = Netns::new("ethnl").unwrap();
        let (a, b) = (ifname("a"), ifname("b"));
        veth(&ns, &a, &ns, &b, Some(4)).unwrap();
        ns.run(|| {
            let mut nl = Ethnl::open().unwrap();
            nl.set(&a, Setting::RxChannels, 2).unwrap();
            assert_eq!(nl.get(&a, Setting::RxChannels).unwrap(), 2);
            nl.set(&a, Setting::RxChannels, 4).unwrap();
            assert_eq!(nl.get(&a, Setting::RxChannels).unwrap(), 4);
            assert!(matches!(nl.set(&a, Setting::RxRing, 1024), Err(Refusal::Unsupported(_))), "veth has no rings");
            assert!(matches!(nl.set(&a, Setting::RxUsecs, 50), Err(Refusal::Unsupported(_))), "veth has no coalescing");
            match nl.set(&a, Setting::RxChannels, 64) {
                Err(Refusal::Other(e)) => assert!(!e.to_string().contains('\n'), "{e}"),
                r => panic!("64 channels on a 4-queue veth: {r:?}"),
            }
            assert!(matches!(nl.set("xnfnosuch", Setting::RxChannels, 1), Err(Refusal::Other(_))));
        })
        .unwrap();
    }
}
