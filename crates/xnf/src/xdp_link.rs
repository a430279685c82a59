//! XDP attachment through a pinned `bpf_link`: the program stays attached
//! after xnf exits, a later xnf finds it by its pin, and replacing the
//! program is one atomic `BPF_LINK_UPDATE` (no window without a program).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Where the program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// In the driver, before an skb exists (the fast one).
    Native,
    /// Generic XDP, after the skb is built; works on any device, slowly.
    Skb,
}

impl XdpMode {
    pub fn name(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Skb => "skb",
        }
    }

    fn flags(self) -> u32 {
        match self {
            XdpMode::Skb => 1 << 1,    // XDP_FLAGS_SKB_MODE
            XdpMode::Native => 1 << 2, // XDP_FLAGS_DRV_MODE
        }
    }
}

/// An XDP link, open by fd.
pub struct XdpLink {
    fd: OwnedFd,
}

fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes()).context("path contains a NUL byte")
}

/// Pins any BPF object (program, map, link) open as `fd` at `path`.
pub fn pin_fd(fd: impl AsFd, path: &Path) -> Result<()> {
    let c = cpath(path)?;
    // SAFETY: valid fd and C string.
    let rc = unsafe { libbpf_sys::bpf_obj_pin(fd.as_fd().as_raw_fd(), c.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc)).with_context(|| format!("pinning at {}", path.display()));
    }
    Ok(())
}

/// Opens a pinned BPF object.
pub fn open_pinned(path: &Path) -> Result<OwnedFd> {
    let c = cpath(path)?;
    // SAFETY: valid C string.
    let fd = unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) };
    if fd < 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("opening pinned {}", path.display()));
    }
    // SAFETY: new fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl XdpLink {
    /// Attaches `prog_fd` to `ifindex` in `mode`. `ifname` is for messages.
    pub fn create(prog: impl AsFd, ifindex: u32, ifname: &str, mode: XdpMode) -> Result<Self> {
        // SAFETY: zeroed opts with sz set is the documented libbpf idiom.
        let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _;
        opts.flags = mode.flags();
        // SAFETY: valid fd and opts.
        let fd = unsafe {
            libbpf_sys::bpf_link_create(prog.as_fd().as_raw_fd(), ifindex as i32, libbpf_sys::BPF_XDP, &opts)
        };
        if fd < 0 {
            let err = io::Error::from_raw_os_error(-fd);
            let why = match (-fd, mode) {
                (libc::EOPNOTSUPP, XdpMode::Native) => format!(
                    "the driver of {ifname} has no native XDP support; use --mode skb (slower)"
                ),
                (libc::EEXIST | libc::EBUSY, _) => format!(
                    "{ifname} already has an XDP program that xnf does not manage; remove it first \
                     (`ip link set dev {ifname} xdp off`)"
                ),
                (libc::EINVAL | libc::ERANGE, XdpMode::Native) => format!(
                    "the driver of {ifname} refused native XDP ({err}); a too-large MTU or LRO is the usual \
                     cause, see `dmesg`; --mode skb works regardless"
                ),
                _ => format!("attaching XDP to {ifname} failed: {err}"),
            };
            bail!(why);
        }
        // SAFETY: the kernel returned a new fd that we now own.
        Ok(Self { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Opens a pinned link.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self { fd: open_pinned(path).context("opening a pinned XDP link")? })
    }

    pub fn pin(&self, path: &Path) -> Result<()> {
        pin_fd(&self.fd, path).context("pinning an XDP link")
    }

    /// Atomically replaces the attached program.
    pub fn update(&self, prog: impl AsFd) -> Result<()> {
        // SAFETY: valid fds; NULL opts means no expected-old-program check.
        let rc = unsafe { libbpf_sys::bpf_link_update(self.fd.as_raw_fd(), prog.as_fd().as_raw_fd(), std::ptr::null()) };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(-rc)).context("replacing the attached program (BPF_LINK_UPDATE)");
        }
        Ok(())
    }

    /// Detaches the program now, even if other references to the link exist.
    pub fn detach(&self) -> Result<()> {
        // SAFETY: valid fd.
        let rc = unsafe { libbpf_sys::bpf_link_detach(self.fd.as_raw_fd()) };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(-rc)).context("detaching the XDP link");
        }
        Ok(())
    }

    /// `(ifindex, program id)`; ifindex 0 once the device is gone.
    pub fn info(&self) -> Result<(u32, u32)> {
        let info = libbpf_rs::query::LinkInfo::from_fd(self.fd.as_fd()).context("reading link info")?;
        let ifindex = match info.info {
            libbpf_rs::query::LinkTypeInfo::Xdp(x) => x.ifindex,
            _ => bail!("pinned link is not an XDP link"),
        };
        Ok((ifindex, info.prog_id))
    }
}
