//! Offload features through the `SIOCETHTOOL` ioctl, in the calling
//! thread's network namespace (wrap it in [`crate::run_in`] or
//! [`crate::Netns::run`] for another): what `ethtool -k/-K` does for the
//! few features xnf changes, without needing the ethtool program.
//!
//! The legacy per-feature commands suffice: each maps to the same kernel
//! feature bits as ethtool's names (`tx` clears every `tx-checksum-*`).
//! Also the driver's statistics by name, as `ethtool -S` lists them
//! ([`stats`]: a veth's per-queue counters).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{anyhow, bail, Result};

use crate::addr::check_ifname;

const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;
const ETH_FLAG_TXVLAN: u32 = 1 << 7;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
/// The string set of the driver's statistics (`ETH_SS_STATS`).
const ETH_SS_STATS: u32 = 1;
/// The string set of offload feature names (`ETH_SS_FEATURES`).
const ETH_SS_FEATURES: u32 = 4;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_GSTRING_LEN: usize = 32;

/// An offload feature, by what it does; [`Offload::name`] is ethtool's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    /// TX checksumming (`tx`). A veth sender with it on hands
    /// `CHECKSUM_PARTIAL` packets to the peer's XDP, which forwards them
    /// with their checksums never filled in.
    TxChecksum,
    /// TX VLAN tag insertion (`txvlan`). With it on a veth hands XDP frames
    /// whose VLAN tag sits outside the frame, so a redirect loses it.
    TxVlan,
    /// Generic receive offload (`gro`).
    Gro,
}

impl Offload {
    /// ethtool's name of the feature (`ethtool -K DEV NAME on|off`).
    pub fn name(self) -> &'static str {
        match self {
            Offload::TxChecksum => "tx",
            Offload::TxVlan => "txvlan",
            Offload::Gro => "gro",
        }
    }
}

/// `struct ethtool_value`: a command and its one 32-bit argument.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// A socket to send ioctls on (any socket of the namespace will do).
pub(crate) fn ioctl_socket() -> Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        bail!("opening a socket for ethtool ioctls: {}", std::io::Error::last_os_error());
    }
    // SAFETY: fd is a new, valid descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs one ethtool command with argument `data` on `ifname`; returns the data it answers.
fn ethtool(sock: &OwnedFd, ifname: &str, cmd: u32, data: u32) -> std::io::Result<u32> {
    let mut value = EthtoolValue { cmd, data };
    // SAFETY: all-zero is a valid ifreq (a name of NULs, a null pointer).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    // check_ifname keeps the name under IFNAMSIZ with room for the NUL.
    for (dst, src) in req.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL with a valid ifreq pointing at a live ethtool_value.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value.data)
}

/// Runs the ethtool command whose struct (fixed part and variable array)
/// fills `buf` on `ifname`; the kernel writes its answer into `buf`.
pub(crate) fn ethtool_buf(sock: &OwnedFd, ifname: &str, buf: &mut [u64]) -> std::io::Result<()> {
    // SAFETY: all-zero is a valid ifreq (a name of NULs, a null pointer).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_data = buf.as_mut_ptr().cast();
    // SAFETY: SIOCETHTOOL with a valid ifreq pointing at a live buffer the
    // command's struct and array fit in (the caller sized it).
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `buf` as bytes, to read and write the ethtool structs' fields in.
pub(crate) fn bytes_of(buf: &mut [u64]) -> &mut [u8] {
    // SAFETY: any bytes are valid u64s and u8s; the slice covers exactly `buf`.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast(), std::mem::size_of_val(buf)) }
}

pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// What `ethtool -i` says of a device: driver, its version, the
/// firmware's and the bus address (empty where the driver says nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverInfo {
    pub driver: String,
    pub version: String,
    pub firmware: String,
    pub bus: String,
}

/// `ifname`'s driver information (`ETHTOOL_GDRVINFO`).
pub fn driver_info(ifname: &str) -> Result<DriverInfo> {
    check_ifname(ifname)?;
    let sock = ioctl_socket()?;
    // struct ethtool_drvinfo: cmd, then driver, version, fw_version and
    // bus_info of 32 bytes each, then more than this reads.
    let mut buf = [0u64; 25];
    put_u32(bytes_of(&mut buf), 0, ETHTOOL_GDRVINFO);
    ethtool_buf(&sock, ifname, &mut buf).map_err(|e| explain(e, ifname, "reading driver information"))?;
    let b = bytes_of(&mut buf);
    let text = |i: usize| {
        let raw = &b[4 + 32 * i..4 + 32 * (i + 1)];
        String::from_utf8_lossy(&raw[..raw.iter().position(|&c| c == 0).unwrap_or(32)]).into_owned()
    };
    Ok(DriverInfo { driver: text(0), version: text(1), firmware: text(2), bus: text(3) })
}

/// How many strings string set `set` of `ifname` has (None: the driver
/// has no such set).
pub(crate) fn string_count(sock: &OwnedFd, ifname: &str, set: u32) -> Result<Option<usize>> {
    // struct ethtool_sset_info: cmd, reserved, sset_mask (u64), a count per set asked.
    let mut info = [0u64; 3];
    let b = bytes_of(&mut info);
    put_u32(b, 0, ETHTOOL_GSSET_INFO);
    b[8..16].copy_from_slice(&(1u64 << set).to_ne_bytes());
    ethtool_buf(sock, ifname, &mut info).map_err(|e| explain(e, ifname, "reading the driver's string sets"))?;
    let b = bytes_of(&mut info);
    if u64::from_ne_bytes(b[8..16].try_into().expect("8 bytes")) & (1 << set) == 0 {
        return Ok(None);
    }
    Ok(Some(get_u32(b, 16) as usize))
}

/// The driver's statistics of `ifname` by name, in the driver's order
/// (`ethtool -S IFNAME`): a veth's `rx_queue_N_xdp_packets` and the like.
/// Empty when the driver keeps none.
pub fn stats(ifname: &str) -> Result<Vec<(String, u64)>> {
    check_ifname(ifname)?;
    let sock = ioctl_socket()?;
    let err = |e| explain(e, ifname, "reading the driver's statistics");
    let Some(n) = string_count(&sock, ifname, ETH_SS_STATS)? else { return Ok(Vec::new()) };
    // struct ethtool_gstrings: cmd, string_set, len, then len names of 32 bytes.
    let mut names = vec![0u64; (12 + n * ETH_GSTRING_LEN).div_ceil(8)];
    let b = bytes_of(&mut names);
    put_u32(b, 0, ETHTOOL_GSTRINGS);
    put_u32(b, 4, ETH_SS_STATS);
    put_u32(b, 8, n as u32);
    ethtool_buf(&sock, ifname, &mut names).map_err(err)?;
    // struct ethtool_stats: cmd, n_stats, then n_stats u64 values.
    let mut values = vec![0u64; 1 + n];
    let b = bytes_of(&mut values);
    put_u32(b, 0, ETHTOOL_GSTATS);
    put_u32(b, 4, n as u32);
    ethtool_buf(&sock, ifname, &mut values).map_err(err)?;
    let got = (get_u32(bytes_of(&mut values), 4) as usize).min(n).min(get_u32(bytes_of(&mut names), 8) as usize);
    let text = &bytes_of(&mut names)[12..];
    Ok((0..got)
        .map(|i| {
            let raw = &text[i * ETH_GSTRING_LEN..(i + 1) * ETH_GSTRING_LEN];
            let name = String::from_utf8_lossy(&raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())]).into_owned();
            (name, values[1 + i])
        })
        .collect())
}

/// The error of an ethtool command on `ifname`, saying what to check.
pub(crate) fn explain(e: std::io::Error, ifname: &str, what: &str) -> anyhow::Error {
    let why = match e.raw_os_error() {
        Some(libc::ENODEV) => "no such interface in this network namespace (see `ip link`)".to_owned(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => format!("its driver cannot change this ({e})"),
        Some(libc::EPERM) => format!("{e}: needs root (CAP_NET_ADMIN)"),
        _ => e.to_string(),
    };
    anyhow!("{what} on {ifname}: {why}")
}

/// Whether `offload` is on for `ifname`.
pub fn offload(ifname: &str, offload: Offload) -> Result<bool> {
    check_ifname(ifname)?;
    let sock = ioctl_socket()?;
    let what = format!("reading {}", offload.name());
    let get = |cmd| ethtool(&sock, ifname, cmd, 0).map_err(|e| explain(e, ifname, &what));
    Ok(match offload {
        Offload::TxChecksum => get(ETHTOOL_GTXCSUM)? != 0,
        Offload::Gro => get(ETHTOOL_GGRO)? != 0,
        Offload::TxVlan => get(ETHTOOL_GFLAGS)? & ETH_FLAG_TXVLAN != 0,
    })
}

/// Turns `offload` on or off for `ifname` (`ethtool -K IFNAME NAME on|off`).
pub fn set_offload(ifname: &str, offload: Offload, on: bool) -> Result<()> {
    check_ifname(ifname)?;
    let sock = ioctl_socket()?;
    let what = format!("turning {} {}", offload.name(), if on { "on" } else { "off" });
    let run = |cmd, data| ethtool(&sock, ifname, cmd, data).map_err(|e| explain(e, ifname, &what));
    match offload {
        Offload::TxChecksum => run(ETHTOOL_STXCSUM, u32::from(on)).map(drop),
        Offload::Gro => run(ETHTOOL_SGRO, u32::from(on)).map(drop),
        Offload::TxVlan => {
            // SFLAGS sets every flag feature at once (LRO, VLAN, ntuple,
            // hash): change only ours, and only if it differs.
            let flags = run(ETHTOOL_GFLAGS, 0)?;
            let wanted = if on { flags | ETH_FLAG_TXVLAN } else { flags & !ETH_FLAG_TXVLAN };
            if wanted != flags {
                run(ETHTOOL_SFLAGS, wanted)?;
            }
            Ok(())
        }
    }
}

/// Turns the offload feature ethtool calls `name` (`ethtool -k` lists
/// them: `rx-vlan-offload`, `generic-receive-offload`, ...) on or off.
/// Returns false, changing nothing, when the driver cannot change it
/// (`[fixed]` in `ethtool -k`).
pub fn set_feature(ifname: &str, name: &str, on: bool) -> Result<bool> {
    check_ifname(ifname)?;
    let sock = ioctl_socket()?;
    let n = string_count(&sock, ifname, ETH_SS_FEATURES)?.ok_or_else(|| anyhow!("{ifname}: its driver lists no features"))?;
    let mut names = vec![0u64; (12 + n * ETH_GSTRING_LEN).div_ceil(8)];
    let b = bytes_of(&mut names);
    put_u32(b, 0, ETHTOOL_GSTRINGS);
    put_u32(b, 4, ETH_SS_FEATURES);
    put_u32(b, 8, n as u32);
    ethtool_buf(&sock, ifname, &mut names).map_err(|e| explain(e, ifname, "reading feature names"))?;
    let text = &bytes_of(&mut names)[12..];
    let bit = (0..n)
        .find(|i| {
            let raw = &text[i * ETH_GSTRING_LEN..(i + 1) * ETH_GSTRING_LEN];
            &raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())] == name.as_bytes()
        })
        .ok_or_else(|| anyhow!("{ifname} has no feature `{name}` (ethtool -k {ifname} lists them)"))?;
    let blocks = feature_blocks(&sock, ifname)?.unwrap_or_default();
    let (block, mask) = (bit / 32, 1u32 << (bit % 32));
    if blocks.get(block).is_none_or(|(available, _)| available & mask == 0) {
        return Ok(false);
    }
    let blocks = blocks.len();
    // struct ethtool_sfeatures: cmd, size, then per block {valid, requested}.
    let mut set = vec![0u64; (2 + 2 * blocks).div_ceil(2)];
    let b = bytes_of(&mut set);
    put_u32(b, 0, ETHTOOL_SFEATURES);
    put_u32(b, 4, blocks as u32);
    put_u32(b, 8 + 8 * block, mask);
    put_u32(b, 12 + 8 * block, if on { mask } else { 0 });
    ethtool_buf(&sock, ifname, &mut set).map_err(|e| explain(e, ifname, &format!("turning {name} {}", if on { "on" } else { "off" })))?;
    Ok(true)
}

/// `ifname`'s offload features, (available, requested) per 32 (None:
/// the driver lists none).
pub(crate) fn feature_blocks(sock: &OwnedFd, ifname: &str) -> Result<Option<Vec<(u32, u32)>>> {
    let Some(n) = string_count(sock, ifname, ETH_SS_FEATURES)? else { return Ok(None) };
    let blocks = n.div_ceil(32);
    // struct ethtool_gfeatures: cmd, size, then per block {available, requested, active, never_changed}.
    let mut buf = vec![0u64; (2 + 4 * blocks).div_ceil(2)];
    let b = bytes_of(&mut buf);
    put_u32(b, 0, ETHTOOL_GFEATURES);
    put_u32(b, 4, blocks as u32);
    ethtool_buf(sock, ifname, &mut buf).map_err(|e| explain(e, ifname, "reading offload features"))?;
    let b = bytes_of(&mut buf);
    Ok(Some((0..blocks).map(|i| (get_u32(b, 8 + 16 * i), get_u32(b, 8 + 16 * i + 4))).collect()))
}

/// Turns off TX checksum offload and TX VLAN offload on `ifname`: what a
/// veth whose frames XDP redirects onwards needs (see [`Offload`]).
pub fn offloads_off(ifname: &str) -> Result<()> {
    set_offload(ifname, Offload::TxChecksum, false)?;
    set_offload(ifname, Offload::TxVlan, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ifname, veth, Netns};

    #[test]
    fn offloads_toggle_and_read_back() {
        let ns = Netns::new("ethtool").unwrap();
        let (a, b) = (ifname("a"), ifname("b"));
        veth(&ns, &a, &ns, &b, None).unwrap();
        ns.run(|| {
            for o in [Offload::TxChecksum, Offload::TxVlan, Offload::Gro] {
                for on in [false, true, false] {
                    set_offload(&a, o, on).unwrap();
                    assert_eq!(offload(&a, o).unwrap(), on, "{}", o.name());
                }
            }
            set_offload(&a, Offload::TxChecksum, true).unwrap();
            set_offload(&a, Offload::TxVlan, true).unwrap();
            offloads_off(&a).unwrap();
            assert!(!offload(&a, Offload::TxChecksum).unwrap() && !offload(&a, Offload::TxVlan).unwrap());
            // The peer is untouched.
            assert!(offload(&b, Offload::TxChecksum).unwrap());
            let err = format!("{:#}", set_offload("xnfnosuch", Offload::Gro, true).unwrap_err());
            assert!(err.contains("xnfnosuch") && err.contains("no such interface"), "{err}");
            assert!(!err.contains('\n'), "{err}");
        })
        .unwrap();
    }

    #[test]
    fn a_veths_driver_is_named() {
        let ns = Netns::new("drvinfo").unwrap();
        let (a, b) = (ifname("a"), ifname("b"));
        veth(&ns, &a, &ns, &b, None).unwrap();
        let info = ns.run(move || driver_info(&a).unwrap()).unwrap();
        assert_eq!((info.driver.as_str(), info.bus.as_str()), ("veth", ""), "{info:?}");
    }

    #[test]
    fn a_veths_statistics_name_its_queues() {
        let ns = Netns::new("ethstats").unwrap();
        let (a, b) = (ifname("a"), ifname("b"));
        veth(&ns, &a, &ns, &b, Some(2)).unwrap();
        ns.run(|| {
            let s = stats(&a).unwrap();
            for q in ["rx_queue_0_xdp_packets", "rx_queue_1_xdp_packets", "tx_queue_1_xdp_xmit"] {
                assert_eq!(s.iter().find(|(n, _)| n == q).map(|(_, v)| *v), Some(0), "{q} in {s:?}");
            }
            let err = format!("{:#}", stats("xnfnosuch").unwrap_err());
            assert!(err.contains("xnfnosuch") && err.contains("no such interface") && !err.contains('\n'), "{err}");
        })
        .unwrap();
    }
}
