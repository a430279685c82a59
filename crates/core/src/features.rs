//! Run-time probes of the kernel features xnf uses or measures against.
//!
//! xnf claims Linux 6.1 and newer, but kernels are configured differently:
//! Debian's 6.1 has kprobes, 802.1Q, IPVS and ipip as modules, while other
//! builds leave them out. Each probe asks the running kernel itself (BTF,
//! a throwaway program or map, tracefs, the module tree), never its version
//! number, and a missing feature becomes one line naming the feature, the
//! kernel and what to do. `xnf features` prints them all; the kernel matrix
//! (scripts/kernels.sh) checks every answer on each kernel it boots.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use anyhow::{bail, Result};

/// A kernel feature, named as `xnf features` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    XdpLink,
    DevmapHash,
    Xskmap,
    LiveFrames,
    SyncookieHelpers,
    Tracepoints,
    Kprobes,
    Vlan,
    Ipvs,
    Ipip,
}

impl Feature {
    pub const ALL: [Feature; 10] = [
        Feature::XdpLink,
        Feature::DevmapHash,
        Feature::Xskmap,
        Feature::LiveFrames,
        Feature::SyncookieHelpers,
        Feature::Tracepoints,
        Feature::Kprobes,
        Feature::Vlan,
        Feature::Ipvs,
        Feature::Ipip,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Feature::XdpLink => "xdp-link",
            Feature::DevmapHash => "devmap-hash",
            Feature::Xskmap => "xskmap",
            Feature::LiveFrames => "live-frames",
            Feature::SyncookieHelpers => "syncookie-helpers",
            Feature::Tracepoints => "tracepoints",
            Feature::Kprobes => "kprobes",
            Feature::Vlan => "8021q",
            Feature::Ipvs => "ipvs",
            Feature::Ipip => "ipip",
        }
    }

    /// What provides it: the release that added it, or the config option.
    pub fn provided_by(self) -> &'static str {
        match self {
            Feature::XdpLink => "Linux 5.9 (BPF links for XDP, BPF_LINK_UPDATE)",
            Feature::DevmapHash => "Linux 5.4 (BPF_MAP_TYPE_DEVMAP_HASH)",
            Feature::Xskmap => "Linux 4.18 (BPF_MAP_TYPE_XSKMAP)",
            Feature::LiveFrames => "Linux 5.18 (BPF_F_TEST_XDP_LIVE_FRAMES)",
            Feature::SyncookieHelpers => "Linux 6.0 (bpf_tcp_raw_gen_syncookie_ipv4/6 in XDP)",
            Feature::Tracepoints => "CONFIG_TRACEPOINTS with tracefs (napi, net, skb, xdp events)",
            Feature::Kprobes => "CONFIG_KPROBES and CONFIG_KPROBE_EVENTS",
            Feature::Vlan => "CONFIG_VLAN_8021Q (module 8021q)",
            Feature::Ipvs => "CONFIG_IP_VS (module ip_vs)",
            Feature::Ipip => "CONFIG_NET_IPIP (module ipip)",
        }
    }

    /// Who in xnf needs it.
    pub fn used_by(self) -> &'static str {
        match self {
            Feature::XdpLink => "every attached network function",
            Feature::DevmapHash => "router and chain redirects",
            Feature::Xskmap => "AF_XDP network functions",
            Feature::LiveFrames => "the lab's traffic generator",
            Feature::SyncookieHelpers => "SYN cookies in XDP",
            Feature::Tracepoints => "receive-path stages (profiler)",
            Feature::Kprobes => "kprobe-based receive-path stages",
            Feature::Vlan => "routing between VLAN devices",
            Feature::Ipvs => "the load balancer's kernel baseline",
            Feature::Ipip => "ipip-decapsulating load-balancer backends",
        }
    }

    /// The feature called `name` (as printed).
    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Asks the running kernel. `Err` says what was missing.
    pub fn probe(self) -> Result<(), String> {
        match self {
            Feature::XdpLink => btf_enum_has("bpf_link_type", "BPF_LINK_TYPE_XDP"),
            Feature::DevmapHash => map_type(libbpf_sys::BPF_MAP_TYPE_DEVMAP_HASH),
            Feature::Xskmap => map_type(libbpf_sys::BPF_MAP_TYPE_XSKMAP),
            Feature::LiveFrames => live_frames(),
            Feature::SyncookieHelpers => {
                helper(libbpf_sys::BPF_FUNC_tcp_raw_gen_syncookie_ipv4).and_then(|()| helper(libbpf_sys::BPF_FUNC_tcp_raw_gen_syncookie_ipv6))
            }
            Feature::Tracepoints => tracepoints(),
            Feature::Kprobes => kprobes(),
            Feature::Vlan => module("8021q", Some("/proc/net/vlan")),
            Feature::Ipvs => module("ip_vs", Some("/proc/net/ip_vs")),
            Feature::Ipip => module("ipip", None),
        }
    }

    /// `Ok` if the kernel has it; otherwise the one-line error xnf reports.
    pub fn require(self) -> Result<()> {
        match self.probe() {
            Ok(()) => Ok(()),
            Err(why) => bail!("{}", Missing { feature: self, why }),
        }
    }
}

/// Explains a failure (`err`) by the first of `needs` this kernel lacks,
/// if any: a verifier or map-creation error then reads as the missing
/// feature it is. Otherwise `err` as it was.
pub fn explain(err: anyhow::Error, needs: &[Feature]) -> anyhow::Error {
    for f in needs {
        if let Err(e) = f.require() {
            return e;
        }
    }
    err
}

/// A missing feature, as one line.
pub struct Missing {
    pub feature: Feature,
    pub why: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let f_ = self.feature;
        write!(
            f,
            "this kernel (Linux {}) lacks {}, needed by {}: {}; it comes with {} (`xnf features` lists what this kernel has)",
            kernel_release(),
            f_.name(),
            f_.used_by(),
            self.why,
            f_.provided_by()
        )
    }
}

#[derive(serde::Serialize)]
struct Row {
    feature: &'static str,
    present: bool,
    missing: Option<String>,
    provided_by: &'static str,
    used_by: &'static str,
}

/// `xnf features`: probes every feature and prints a table (or JSON); with
/// `require`, fails on the first named feature the kernel lacks.
pub fn command(json: bool, require: &[String]) -> Result<()> {
    let wanted: Vec<Feature> = require
        .iter()
        .map(|n| {
            Feature::from_name(n).ok_or_else(|| {
                let names: Vec<&str> = Feature::ALL.iter().map(|f| f.name()).collect();
                anyhow::anyhow!("unknown feature {n:?}; the features are {}", names.join(", "))
            })
        })
        .collect::<Result<_>>()?;
    if !wanted.is_empty() {
        return wanted.iter().try_for_each(|f| f.require());
    }
    let rows: Vec<Row> = Feature::ALL
        .into_iter()
        .map(|f| {
            let p = f.probe();
            Row { feature: f.name(), present: p.is_ok(), missing: p.err(), provided_by: f.provided_by(), used_by: f.used_by() }
        })
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!("Linux {}", kernel_release());
    println!("{:<18} {:<4} {:<44} PROVIDED BY / WHY MISSING", "FEATURE", "HAS", "USED BY");
    for r in rows {
        let why = r.missing.unwrap_or_else(|| r.provided_by.to_owned());
        println!("{:<18} {:<4} {:<44} {}", r.feature, if r.present { "yes" } else { "no" }, r.used_by, why);
    }
    Ok(())
}

/// `uname -r`.
pub fn kernel_release() -> String {
    nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_else(|_| "?".into())
}

fn errno_text(rc: i32) -> String {
    io::Error::from_raw_os_error(rc.abs()).to_string()
}

fn map_type(t: libbpf_sys::bpf_map_type) -> Result<(), String> {
    // SAFETY: plain probe call; NULL opts is allowed.
    match unsafe { libbpf_sys::libbpf_probe_bpf_map_type(t, std::ptr::null()) } {
        1 => Ok(()),
        0 => Err("the map type is unknown to the kernel".into()),
        rc => Err(format!("probing the map type failed: {}", errno_text(rc))),
    }
}

fn helper(id: libbpf_sys::bpf_func_id) -> Result<(), String> {
    // SAFETY: plain probe call; NULL opts is allowed.
    let rc = unsafe { libbpf_sys::libbpf_probe_bpf_helper(libbpf_sys::BPF_PROG_TYPE_XDP, id, std::ptr::null()) };
    match rc {
        1 => Ok(()),
        0 => Err(format!("XDP programs cannot call BPF helper {id}")),
        rc => Err(format!("probing BPF helper {id} failed: {}", errno_text(rc))),
    }
}

/// Whether the kernel's BTF has `value` in `enum name`.
fn btf_enum_has(name: &str, value: &str) -> Result<(), String> {
    // SAFETY: libbpf returns an owned BTF object or NULL with errno set.
    let btf = unsafe { libbpf_sys::btf__load_vmlinux_btf() };
    if btf.is_null() {
        return Err(format!("no kernel BTF ({})", io::Error::last_os_error()));
    }
    let found = (|| {
        let cname = CString::new(name).ok()?;
        // SAFETY: btf is valid; the returned type lives as long as btf.
        unsafe {
            let id = libbpf_sys::btf__find_by_name_kind(btf, cname.as_ptr(), libbpf_sys::BTF_KIND_ENUM);
            if id < 0 {
                return Some(false);
            }
            let t = libbpf_sys::btf__type_by_id(btf, id as u32);
            let vlen = ((*t).info & 0xffff) as usize;
            // BTF lays an enum's values out right after its btf_type.
            let vals = t.add(1) as *const libbpf_sys::btf_enum;
            Some((0..vlen).any(|i| {
                let n = libbpf_sys::btf__name_by_offset(btf, (*vals.add(i)).name_off);
                !n.is_null() && std::ffi::CStr::from_ptr(n).to_bytes() == value.as_bytes()
            }))
        }
    })();
    // SAFETY: btf came from libbpf and is freed once.
    unsafe { libbpf_sys::btf__free(btf) };
    match found {
        Some(true) => Ok(()),
        _ => Err(format!("the kernel's BTF has no {value}")),
    }
}

/// Loads `r0 = XDP_DROP; exit`: the smallest XDP program, for probes.
pub fn drop_program() -> io::Result<OwnedFd> {
    let insn = |code: u8, imm: i32| libbpf_sys::bpf_insn { code, _bitfield_align_1: [], _bitfield_1: libbpf_sys::bpf_insn::new_bitfield_1(0, 0), off: 0, imm };
    let insns = [insn(0xb7, 1 /* mov64 r0, XDP_DROP */), insn(0x95, 0 /* exit */)];
    let license = c"Dual MIT/GPL";
    // SAFETY: valid instructions, license and NULL opts.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(libbpf_sys::BPF_PROG_TYPE_XDP, std::ptr::null(), license.as_ptr(), insns.as_ptr(), insns.len() as _, std::ptr::null_mut())
    };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs the drop program once as a live frame on loopback: kernels before
/// 5.18 refuse the flag with EINVAL, and a dropped frame goes nowhere.
fn live_frames() -> Result<(), String> {
    const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
    let prog = drop_program().map_err(|e| format!("loading a two-instruction XDP program failed: {e}"))?;
    let mut frame = [0u8; 64];
    frame[12] = 0x08; // an IPv4 ethertype, so nothing treats it as odd
                      // SAFETY: zeroed opts with sz set is the documented libbpf idiom.
    let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
    opts.data_in = frame.as_ptr().cast();
    opts.data_size_in = frame.len() as u32;
    opts.repeat = 1;
    opts.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
    // SAFETY: valid fd and opts pointing at live buffers.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    match rc {
        0 => Ok(()),
        rc => Err(format!("BPF_PROG_TEST_RUN refused BPF_F_TEST_XDP_LIVE_FRAMES: {}", errno_text(rc))),
    }
}

/// The tracepoints the receive-path stages read, in tracefs (mounted if needed).
fn tracepoints() -> Result<(), String> {
    let root = tracefs()?;
    let missing: Vec<&str> = ["napi/napi_poll", "net/netif_receive_skb", "net/napi_gro_receive_entry", "skb/kfree_skb", "xdp/xdp_redirect"]
        .into_iter()
        .filter(|e| !Path::new(&format!("{root}/events/{e}/id")).exists())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("tracefs has no {}", missing.join(", ")))
    }
}

/// kprobes reach BPF through the perf `kprobe` event source (CONFIG_KPROBE_EVENTS).
fn kprobes() -> Result<(), String> {
    if !Path::new("/sys/bus/event_source/devices/kprobe/type").exists() {
        return Err("no kprobe event source in /sys/bus/event_source/devices".into());
    }
    // SAFETY: plain probe call; NULL opts is allowed.
    match unsafe { libbpf_sys::libbpf_probe_bpf_prog_type(libbpf_sys::BPF_PROG_TYPE_KPROBE, std::ptr::null()) } {
        1 => Ok(()),
        _ => Err("kprobe BPF programs are refused".into()),
    }
}

/// Finds tracefs, mounting it at /sys/kernel/tracing if it is not there.
pub fn tracefs() -> Result<&'static str, String> {
    const AT: &str = "/sys/kernel/tracing";
    if Path::new(&format!("{AT}/events")).exists() {
        return Ok(AT);
    }
    nix::mount::mount(Some("nodev"), AT, Some("tracefs"), nix::mount::MsFlags::empty(), None::<&str>)
        .map_err(|e| format!("tracefs is not mounted and mounting it at {AT} failed: {e}"))?;
    Ok(AT)
}

/// A kernel part that may be built in or a loadable module: present when
/// loaded or built in (`/sys/module/NAME`, or `marker`), or when the running
/// kernel's module tree has it (modprobe loads it on first use).
fn module(name: &str, marker: Option<&str>) -> Result<(), String> {
    if Path::new(&format!("/sys/module/{name}")).exists() || marker.is_some_and(|m| Path::new(m).exists()) {
        return Ok(());
    }
    let dir = format!("/lib/modules/{}", kernel_release());
    let listed = |file: &str, pat: &str| std::fs::read_to_string(format!("{dir}/{file}")).is_ok_and(|t| t.lines().any(|l| l.contains(pat)));
    let ko = format!("/{name}.ko");
    if listed("modules.builtin", &ko) || listed("modules.dep", &ko) {
        return Ok(());
    }
    Err(format!("not built in, and no {name} module in {dir}"))
}

/// Loads a module the kernel has but has not loaded yet (`modprobe NAME`).
pub fn load_module(name: &str) -> Result<()> {
    if Path::new(&format!("/sys/module/{name}")).exists() {
        return Ok(());
    }
    let out = std::process::Command::new("modprobe").arg(name).output();
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => bail!("modprobe {name} failed: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => bail!("running modprobe {name} failed ({e}): apt-get install kmod"),
    }
}
