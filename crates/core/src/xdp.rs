//! XDP verdicts, and attachment through a pinned `bpf_link`: the program stays attached
//! after xnf exits, a later xnf finds it by its pin, and replacing the
//! program is one atomic `BPF_LINK_UPDATE` (no window without a program).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use anyhow::{bail, Context, Result};

crate::c_enum! {
    /// XDP verdicts, as the program returns them (`enum xdp_action`).
    pub enum Verdict: crate::abi::types::xdp_action {
        Aborted = XDP_ABORTED => "aborted",
        Drop = XDP_DROP => "drop",
        Pass = XDP_PASS => "pass",
        Tx = XDP_TX => "tx",
        Redirect = XDP_REDIRECT => "redirect",
    }
}

/// The `struct xdp_md` handed to the program as its context.
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpContext {
    pub ingress_ifindex: u32,
    pub rx_queue_index: u32,
}

impl XdpContext {
    /// The context as the kernel reads it, for a frame of `data_len` bytes.
    pub fn to_bytes(self, data_len: usize) -> [u8; 24] {
        // data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex
        let fields = [0, data_len as u32, 0, self.ingress_ifindex, self.rx_queue_index, 0];
        let mut out = [0u8; 24];
        for (chunk, v) in out.chunks_exact_mut(4).zip(fields) {
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
        out
    }
}

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
        let fd = unsafe { libbpf_sys::bpf_link_create(prog.as_fd().as_raw_fd(), ifindex as i32, libbpf_sys::BPF_XDP, &opts) };
        if fd < 0 {
            let err = io::Error::from_raw_os_error(-fd);
            crate::features::Feature::XdpLink.require()?;
            let why = match (-fd, mode) {
                (libc::EOPNOTSUPP, XdpMode::Native) => format!("the driver of {ifname} has no native XDP support; use --mode skb (slower)"),
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

    /// The XDP link that holds program `prog_id` on `ifindex`, whoever
    /// holds the link (a process's fd, a pin): the program id is unique,
    /// so an ifindex of another namespace cannot be mistaken for this one.
    pub fn holding(prog_id: u32, ifindex: u32) -> Result<Option<XdpLink>> {
        let mut id = 0u32;
        // SAFETY: plain syscalls on ids; every fd returned is owned below.
        while unsafe { libbpf_sys::bpf_link_get_next_id(id, &mut id) } == 0 {
            let fd = unsafe { libbpf_sys::bpf_link_get_fd_by_id(id) };
            if fd < 0 {
                continue; // gone meanwhile
            }
            let link = XdpLink { fd: unsafe { OwnedFd::from_raw_fd(fd) } };
            if link.info().is_ok_and(|(i, p)| i == ifindex && p == prog_id) {
                return Ok(Some(link));
            }
        }
        Ok(None)
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

/// Frames redirected (or sent with XDP_TX) into a veth are only received if
/// its peer runs an XDP program: a warning naming the fix when `link` is a
/// veth whose peer has none, or whose peer xnf cannot see.
pub fn veth_peer_warning(link: &xnf_netns::netlink::Link, links: &[xnf_netns::netlink::Link]) -> Option<String> {
    let peer = link.parent?;
    if link.parent_netnsid.is_none() {
        let p = links.iter().find(|l| l.ifindex == peer)?;
        return p.xdp_prog_id.is_none().then(|| {
            format!(
                "{}'s veth peer {} has no XDP program: frames xnf redirects into {} stall there. \
                 Attach one: `xnf pass attach {}` (or the router)",
                link.name, p.name, link.name, p.name
            )
        });
    }
    Some(format!(
        "{} is a veth whose peer (ifindex {peer}) lives in another network namespace: frames xnf redirects into {} \
         are only received if that peer has an XDP program; run `xnf --netns <that namespace> pass attach <peer>` there",
        link.name, link.name
    ))
}
