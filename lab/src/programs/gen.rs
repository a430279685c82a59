//! The traffic generator's program (`bpf/gen.bpf.c`), run with
//! `BPF_PROG_TEST_RUN` in live-frame mode: the kernel sends the frames the
//! program returns `XDP_TX` for out of the ingress interface.
//!
//! One template frame (flow 0, the largest size) goes to the kernel; the
//! program gives every frame its size class's length and precomputed
//! headers, then patches ports and addresses of its flow and the checksums
//! incrementally. What it sends is fully determined by [`GenConfig`]: frame
//! `k` sent by one program has the size `sizes[k % sizes.len()]` and the flow
//! `k % flows()`, decomposed by [`GenConfig::flow`].

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramMut};

use crate::skel::gen::types::{gen_addr, gen_class, gen_ctl, gen_limits};
use crate::skel::gen::{GenSkel, GenSkelBuilder};
use xnf_core::maps::{as_bytes, object_storage, sum_percpu};
use xnf_core::xdp::XdpContext;

/// `BPF_F_TEST_XDP_LIVE_FRAMES` (Linux 5.18).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Size classes the program holds (`GEN_CLASSES`).
pub const MAX_CLASSES: usize = gen_limits::GEN_CLASSES.0 as usize;
/// Longest repeating size sequence (`GEN_SEQ`).
pub const MAX_SEQUENCE: usize = gen_limits::GEN_SEQ.0 as usize;
/// Longest frame (without FCS) the program builds: it must fit the page the
/// kernel gives a live frame, with room to spare.
pub const MAX_FRAME: usize = 3000;
/// Bytes the live-frame template has beyond the largest frame sent (see
/// `GenProgram::load`).
const TEMPLATE_SLACK: usize = 2;
/// Most source or destination addresses (entries of a BPF array).
pub const MAX_ADDRS: usize = 1 << 20;

/// Size classes of the AMS-IX packet-size distribution (the xdp-forward thesis, §5.3.7):
/// (wire size with FCS standing for the class, share in tenths of a percent).
/// Each class is represented by its lower bound (the RFC 2544 sizes 64 …
/// 1024) and "larger packets" by the largest untagged frame, 1518. The shares
/// add up to 99.6 %, as published.
pub const AMS_IX_IMIX: [(u16, u32); 6] = [
    (64, 278),   // 64 – 127 B: 27.8 %
    (128, 55),   // 128 – 255 B: 5.5 %
    (256, 28),   // 256 – 511 B: 2.8 %
    (512, 35),   // 512 – 1023 B: 3.5 %
    (1024, 370), // 1024 – 1513 B: 37 %
    (1518, 230), // larger: 23 %
];

/// The IMIX as a repeating sequence of frame lengths without FCS, one
/// frame per tenth of a percent (996 frames), the classes interleaved as
/// evenly as their shares allow (smooth weighted round robin). Sizes below
/// `min_len` (the headers of IPv6 or TCP) are raised to it.
pub fn imix_sequence(min_len: usize) -> Vec<u16> {
    let total: i64 = AMS_IX_IMIX.iter().map(|c| c.1 as i64).sum();
    let mut current = [0i64; AMS_IX_IMIX.len()];
    (0..total)
        .map(|_| {
            for (cur, c) in current.iter_mut().zip(AMS_IX_IMIX) {
                *cur += c.1 as i64;
            }
            let best = (0..current.len()).max_by_key(|&i| (current[i], std::cmp::Reverse(i))).unwrap_or(0);
            current[best] -= total;
            (AMS_IX_IMIX[best].0 as usize - 4).max(min_len) as u16
        })
        .collect()
}

/// What to generate.
///
/// The template is a complete Ethernet (untagged, or with one 802.1Q tag) /
/// IPv4 or IPv6 (no options or extension headers) / UDP or TCP (no options)
/// frame whose payload is all zeros: the headers of flow 0. A tag is sent
/// as the template has it; every offset behind it is 4 bytes further. Its destination port is the base of the
/// destination ports (the source port is `base_sport`); its addresses are replaced by the first entries of `src_addrs`
/// and `dst_addrs` when those are given.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct GenConfig {
    pub template: Vec<u8>,
    pub ipv6: bool,
    /// Source ports: `base_sport`, `base_sport + 1`, … (at least 1).
    pub flows: u32,
    pub base_sport: u16,
    /// Frame lengths without FCS, sent in this repeating order (e.g.
    /// [`imix_sequence`]); at most [`MAX_CLASSES`] distinct lengths and
    /// [`MAX_SEQUENCE`] entries. Empty: the template's length.
    pub sizes: Vec<u16>,
    /// Destination ports: the template's, then one up each (0 counts as 1).
    pub dst_ports: u32,
    /// Source addresses of the flows (empty: the template's).
    pub src_addrs: Vec<IpAddr>,
    /// Destination addresses of the flows (empty: the template's).
    pub dst_addrs: Vec<IpAddr>,
}

/// The fields of one flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
}

/// Header layout of a template, found by [`GenConfig::layout`].
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// Where the IP header starts: 14, or 18 behind an 802.1Q tag.
    l2: usize,
    tcp: bool,
    l4: usize,
    hdr_len: usize,
}

impl GenConfig {
    fn src_ports(&self) -> u32 {
        self.flows.max(1)
    }

    fn dports(&self) -> u32 {
        self.dst_ports.max(1)
    }

    /// Number of distinct flows: ports × addresses.
    pub fn flow_count(&self) -> u64 {
        self.src_ports() as u64 * self.dports() as u64 * self.src_addrs.len().max(1) as u64 * self.dst_addrs.len().max(1) as u64
    }

    /// The lengths sent, in order (the template's if none are given).
    pub fn size_sequence(&self) -> Vec<u16> {
        if self.sizes.is_empty() {
            vec![self.template.len() as u16]
        } else {
            self.sizes.clone()
        }
    }

    /// Flow `i` (modulo [`flow_count`](Self::flow_count)): the source port
    /// turns fastest, then the destination port, the source address and the
    /// destination address.
    pub fn flow(&self, i: u64) -> Result<Flow> {
        let l = self.layout()?;
        let t = &self.template;
        let (src0, dst0) = template_addrs(t, l.l2, self.ipv6);
        let base_dport = u16::from_be_bytes([t[l.l4 + 2], t[l.l4 + 3]]);
        let mut i = i % self.flow_count();
        let mut digit = |n: u64| {
            let d = i % n;
            i /= n;
            d
        };
        let sport = self.base_sport as u64 + digit(self.src_ports() as u64);
        let dport = base_dport as u64 + digit(self.dports() as u64);
        let s = digit(self.src_addrs.len().max(1) as u64) as usize;
        let d = digit(self.dst_addrs.len().max(1) as u64) as usize;
        Ok(Flow {
            src: self.src_addrs.get(s).copied().unwrap_or(src0),
            dst: self.dst_addrs.get(d).copied().unwrap_or(dst0),
            sport: sport as u16,
            dport: dport as u16,
        })
    }

    fn layout(&self) -> Result<Layout> {
        let t = &self.template;
        let (ethertype, l3) = if self.ipv6 { (0x86dd, 40) } else { (0x0800, 20) };
        let type_at = |at: usize| t.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        ensure!(t.len() >= 14, "template shorter than an Ethernet header");
        // One 802.1Q tag at most: the program's header room (GEN_HDR_MAX)
        // has space for one.
        let l2 = if type_at(12) == Some(0x8100) { 18 } else { 14 };
        ensure!(type_at(l2 - 2) == Some(ethertype), "template is not {} (untagged, or with one 802.1Q tag)", if self.ipv6 { "IPv6" } else { "IPv4" });
        ensure!(t.len() >= l2 + l3 + 8, "template frame shorter than its headers");
        let proto = if self.ipv6 {
            ensure!(t[l2] >> 4 == 6, "template: not an IPv6 header");
            t[l2 + 6]
        } else {
            ensure!(t[l2] == 0x45, "template: IPv4 header must be 20 bytes (no options)");
            t[l2 + 9]
        };
        let l4 = l2 + l3;
        let tcp = match proto {
            17 => false,
            6 => {
                ensure!(t.len() >= l4 + 20 && t[l4 + 12] >> 4 == 5, "template: TCP header must be 20 bytes (no options)");
                true
            }
            p => bail!("template carries IP protocol {p}: UDP or TCP only (no extension headers)"),
        };
        let hdr_len = l4 + if tcp { 20 } else { 8 };
        ensure!(t[hdr_len..].iter().all(|&b| b == 0), "template payload must be zeros (incremental checksums assume it)");
        Ok(Layout { l2, tcp, l4, hdr_len })
    }

    /// Checks everything [`GenProgram::load`] needs; errors say what is wrong.
    pub fn validate(&self) -> Result<()> {
        let l = self.layout()?;
        let t = &self.template;
        let base_dport = u16::from_be_bytes([t[l.l4 + 2], t[l.l4 + 3]]) as u32;
        let sport_room = 65536 - self.base_sport as u32;
        ensure!(
            self.src_ports() <= sport_room,
            "{} flows by source port do not fit the port range: at most {sport_room} source ports from {} (vary destination ports or addresses as well)",
            self.flows,
            self.base_sport
        );
        ensure!(self.dports() <= 65536 - base_dport, "{} destination ports do not fit above {base_dport}: at most {}", self.dst_ports, 65536 - base_dport);
        ensure!(self.flow_count() <= u32::MAX as u64, "{} flows: at most {} (ports × addresses)", self.flow_count(), u32::MAX);
        for (what, list) in [("source", &self.src_addrs), ("destination", &self.dst_addrs)] {
            ensure!(list.len() <= MAX_ADDRS, "{} {what} addresses: at most {MAX_ADDRS}", list.len());
            if let Some(a) = list.iter().find(|a| a.is_ipv6() != self.ipv6) {
                bail!("{what} address {a} is not {}", if self.ipv6 { "IPv6" } else { "IPv4" });
            }
        }
        let seq = self.size_sequence();
        ensure!(seq.len() <= MAX_SEQUENCE, "size sequence of {} frames: at most {MAX_SEQUENCE}", seq.len());
        let classes = distinct(&seq);
        ensure!(classes.len() <= MAX_CLASSES, "{} distinct frame sizes: at most {MAX_CLASSES}", classes.len());
        for &len in &classes {
            ensure!((len as usize) >= l.hdr_len.max(14), "frame length {len} is shorter than the headers ({} bytes)", l.hdr_len);
            ensure!((len as usize) <= MAX_FRAME, "frame length {len}: at most {MAX_FRAME}");
        }
        Ok(())
    }

    /// The headers of flow 0 in a frame of `len` bytes: lengths set and
    /// checksums computed (over zero payload).
    fn class_header(&self, l: Layout, len: usize) -> Vec<u8> {
        let mut h = self.template[..l.hdr_len].to_vec();
        h[l.l4..l.l4 + 2].copy_from_slice(&self.base_sport.to_be_bytes());
        if let Some(&a) = self.src_addrs.first() {
            put_addr(&mut h, l.l2, self.ipv6, true, a);
        }
        if let Some(&a) = self.dst_addrs.first() {
            put_addr(&mut h, l.l2, self.ipv6, false, a);
        }
        let l4_len = (len - l.l4) as u16;
        let proto = if l.tcp { 6u16 } else { 17 };
        let ip = l.l2;
        let pseudo = if self.ipv6 {
            h[ip + 4..ip + 6].copy_from_slice(&l4_len.to_be_bytes());
            words(&h[ip + 8..ip + 40]) + l4_len as u32 + proto as u32
        } else {
            h[ip + 2..ip + 4].copy_from_slice(&((len - ip) as u16).to_be_bytes());
            h[ip + 10..ip + 12].fill(0);
            let c = !fold(words(&h[ip..ip + 20]));
            h[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
            words(&h[ip + 12..ip + 20]) + l4_len as u32 + proto as u32
        };
        let check_at = l.l4 + if l.tcp { 16 } else { 6 };
        if !l.tcp {
            h[l.l4 + 4..l.l4 + 6].copy_from_slice(&l4_len.to_be_bytes());
        }
        h[check_at..check_at + 2].fill(0);
        let mut c = !fold(pseudo + words(&h[l.l4..]));
        if !l.tcp && c == 0 {
            c = 0xffff;
        }
        h[check_at..check_at + 2].copy_from_slice(&c.to_be_bytes());
        h
    }
}

fn distinct(seq: &[u16]) -> Vec<u16> {
    let mut v = seq.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

/// The addresses of a template whose IP header starts at `ip`.
fn template_addrs(t: &[u8], ip: usize, ipv6: bool) -> (IpAddr, IpAddr) {
    if ipv6 {
        let a: [u8; 16] = t[ip + 8..ip + 24].try_into().unwrap_or_default();
        let b: [u8; 16] = t[ip + 24..ip + 40].try_into().unwrap_or_default();
        (a.into(), b.into())
    } else {
        let a: [u8; 4] = t[ip + 12..ip + 16].try_into().unwrap_or_default();
        let b: [u8; 4] = t[ip + 16..ip + 20].try_into().unwrap_or_default();
        (a.into(), b.into())
    }
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Writes an address into headers whose IP header starts at `ip`.
fn put_addr(h: &mut [u8], ip: usize, ipv6: bool, src: bool, a: IpAddr) {
    let at = ip
        + match (ipv6, src) {
            (false, true) => 12,
            (false, false) => 16,
            (true, true) => 8,
            (true, false) => 24,
        };
    let b = addr_bytes(a);
    h[at..at + b.len()].copy_from_slice(&b);
}

/// One's complement sum of big-endian 16-bit words, not folded.
fn words(b: &[u8]) -> u32 {
    b.chunks(2).map(|w| u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]) as u32).sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The entries of an address array: each address and the checksum delta
/// (RFC 1624, ~old + new, folded) from the first one. The delta is summed in
/// network byte order like the program does (byte order does not matter to
/// one's complement sums as long as every operand has the same).
fn addr_entries(list: &[IpAddr]) -> Vec<gen_addr> {
    let first = list.first().map(|&a| addr_bytes(a)).unwrap_or_default();
    let ne_words = |b: &[u8]| -> u32 { b.chunks(2).map(|w| u16::from_ne_bytes([w[0], w[1]]) as u32).sum() };
    let not_first: u32 = first.chunks(2).map(|w| !u16::from_ne_bytes([w[0], w[1]]) as u32).sum();
    list.iter()
        .map(|&a| {
            let b = addr_bytes(a);
            let mut e = gen_addr::default();
            for (i, w) in b.chunks(4).enumerate() {
                e.addr[i] = u32::from_ne_bytes(w.try_into().unwrap_or_default());
            }
            // 0 and 0xffff are the same in one's complement; 0xffff keeps
            // the sum away from the one value a real checksum sum never is.
            let d = fold(not_first + ne_words(&b));
            e.delta = if d == 0 { 0xffff } else { d as u32 };
            e
        })
        .collect()
}

pub struct GenProgram {
    skel: GenSkel<'static>,
    frame: Vec<u8>,
}

impl GenProgram {
    pub fn load(cfg: &GenConfig) -> Result<Self> {
        cfg.validate()?;
        let l = cfg.layout()?;
        let t = &cfg.template;
        let seq = cfg.size_sequence();
        let classes = distinct(&seq);
        let mut open = GenSkelBuilder::default().open(object_storage()).context("opening the generator BPF object")?;
        for (map, list) in [(&mut open.maps.srcs, &cfg.src_addrs), (&mut open.maps.dsts, &cfg.dst_addrs)] {
            map.set_max_entries(list.len().max(1) as u32)?;
        }
        let ro = open.maps.rodata_data.as_deref_mut().context("generator has no rodata")?;
        ro.ipv6 = cfg.ipv6 as u8;
        ro.vlan = (l.l2 == 18) as u8;
        ro.tcp = l.tcp as u8;
        ro.seq_len = seq.len() as u32;
        ro.n_sports = cfg.src_ports();
        ro.n_dports = cfg.dports();
        ro.n_srcs = cfg.src_addrs.len().max(1) as u32;
        ro.n_dsts = cfg.dst_addrs.len().max(1) as u32;
        ro.base_sport = cfg.base_sport;
        ro.base_dport = u16::from_be_bytes([t[l.l4 + 2], t[l.l4 + 3]]);
        for (i, &len) in classes.iter().enumerate() {
            let hdr = cfg.class_header(l, len as usize);
            let mut c = gen_class { len: len as u32, ..Default::default() };
            c.hdr[..hdr.len()].copy_from_slice(&hdr);
            ro.classes[i] = c;
        }
        for (i, len) in seq.iter().enumerate() {
            ro.seq[i] = classes.iter().position(|c| c == len).unwrap_or(0) as u8;
        }
        let skel = open.load().context("loading the generator program")?;
        for (map, list) in [(&skel.maps.srcs, &cfg.src_addrs), (&skel.maps.dsts, &cfg.dst_addrs)] {
            for (i, e) in addr_entries(list).iter().enumerate() {
                map.update(&(i as u32).to_ne_bytes(), as_bytes(e), MapFlags::ANY).context("filling the generator's address table")?;
            }
        }
        // The live-frame template: flow 0's headers, 2 bytes longer than
        // the largest size, so the program changes every frame's length.
        // The kernel rebuilds a recycled frame's length from the program's
        // only when the program changed it: a receiver that shrank the
        // frame (an XDP_TX'd SYN-ACK) would otherwise leave its own length
        // on the page, and the next frame would go out cut short.
        let largest = *classes.last().unwrap_or(&(t.len() as u16)) as usize;
        let mut frame = vec![0u8; largest + TEMPLATE_SLACK];
        frame[..l.hdr_len].copy_from_slice(&cfg.class_header(l, largest));
        Ok(Self { skel, frame })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_gen
    }

    /// Handles on the counters and the rate, usable from other threads.
    pub fn control(&self) -> Result<GenControl> {
        Ok(GenControl { state: MapHandle::try_from(&self.skel.maps.state)?, ctl: MapHandle::try_from(&self.skel.maps.ctl)? })
    }

    /// Runs the program over `count` frames for `ifindex` (in the calling
    /// thread's network namespace), on the calling CPU; the ones it passes
    /// (all, without a rate or limit) are sent. Blocks until done.
    pub fn send(&self, ifindex: u32, count: u32) -> Result<()> {
        self.send_on(ifindex, 0, count).map(|_| ())
    }

    /// [`send`](Self::send) as if received on rx queue `queue` (which the
    /// device must have). Returns the kernel's time per try in nanoseconds:
    /// the run itself, without the teardown that follows every call.
    pub fn send_on(&self, ifindex: u32, queue: u32, count: u32) -> Result<u32> {
        let ctx = XdpContext { ingress_ifindex: ifindex, rx_queue_index: queue }.to_bytes(self.frame.len());
        // SAFETY: zeroed opts with sz set is the libbpf idiom; buffers outlive the call.
        let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
        opts.data_in = self.frame.as_ptr().cast();
        opts.data_size_in = self.frame.len() as u32;
        opts.ctx_in = ctx.as_ptr().cast();
        opts.ctx_size_in = ctx.len() as u32;
        opts.repeat = count as _;
        opts.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
        // SAFETY: valid program fd and opts.
        let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(self.prog().as_fd().as_raw_fd(), &mut opts) };
        if rc < 0 {
            let err = std::io::Error::from_raw_os_error(-rc);
            if -rc == libc::EINVAL {
                xnf_core::features::Feature::LiveFrames.require()?;
                bail!("live-frame BPF_PROG_TEST_RUN refused ({err}): the device has no rx queue {queue}");
            }
            bail!("live-frame BPF_PROG_TEST_RUN failed: {err}");
        }
        Ok(opts.duration)
    }
}

/// Reads and steers a running generator from any thread.
pub struct GenControl {
    state: MapHandle,
    ctl: MapHandle,
}

impl GenControl {
    /// Frames sent (returned `XDP_TX`) so far, summed over CPUs.
    pub fn sent(&self) -> Result<u64> {
        Ok(sum_percpu::<1>(&self.state, 0)?[0])
    }

    /// Sets the rate per generating CPU (0: as fast as possible); the
    /// running program sees it on its next frame.
    pub fn set_rate(&self, pps: u64) -> Result<()> {
        self.ctl.update(&gen_ctl::GEN_CTL_RATE.0.to_ne_bytes(), &pps.to_ne_bytes(), MapFlags::ANY).context("setting the generator's rate")
    }

    /// Sets how many frames go back to back each time a rate's schedule
    /// lets one go (0 or 1: evenly spaced; at most 64, a live-frame batch):
    /// the same average rate, in bursts a receiver polls together.
    pub fn set_burst(&self, frames: u64) -> Result<()> {
        self.ctl.update(&gen_ctl::GEN_CTL_BURST.0.to_ne_bytes(), &frames.to_ne_bytes(), MapFlags::ANY).context("setting the generator's burst")
    }

    /// Sets how many frames each CPU may send in all (0: no limit); frames
    /// beyond are dropped by the program, before any device sees them.
    pub fn set_limit(&self, frames: u64) -> Result<()> {
        self.ctl.update(&gen_ctl::GEN_CTL_LIMIT.0.to_ne_bytes(), &frames.to_ne_bytes(), MapFlags::ANY).context("setting the generator's limit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imix_has_the_ams_ix_shares_interleaved() {
        let seq = imix_sequence(60);
        assert_eq!(seq.len(), 996);
        for (wire, share) in AMS_IX_IMIX {
            assert_eq!(seq.iter().filter(|&&l| l == wire - 4).count() as u32, share, "{wire} B");
        }
        // Interleaved: the largest class (37 %) never comes 4 times running.
        assert!(!seq.windows(4).any(|w| w.iter().all(|&l| l == 1020)));
        assert_eq!(imix_sequence(74).iter().filter(|&&l| l == 74).count(), 278, "64 B raised to the TCP/IPv6 minimum");
    }

    #[test]
    fn a_tagged_template_has_every_field_4_bytes_further() {
        use xnf_packet::{MacAddr, PacketBuilder};
        let build = |vid: Option<u16>, sport: u16, src: IpAddr, dst: IpAddr, len: usize| {
            let e = PacketBuilder::ethernet(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
            let e = if let Some(v) = vid { e.vlan(v) } else { e };
            e.ip(src, dst).udp(sport, 9).frame_len(len).build()
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (ipv6, s, d, s2) in
            [(false, ip("198.18.0.1"), ip("198.18.1.2"), ip("198.18.0.9")), (true, ip("2001:db8::1"), ip("2001:db8:1::2"), ip("2001:db8::9"))]
        {
            let plain = GenConfig { template: build(None, 1, s, d, 120), ipv6, flows: 4, base_sport: 1024, src_addrs: vec![s2, s], ..Default::default() };
            let tagged = GenConfig { template: build(Some(100), 1, s, d, 124), ..plain.clone() };
            let (lp, lt) = (plain.layout().unwrap(), tagged.layout().unwrap());
            assert_eq!((lp.l2, lt.l2, lt.l4, lt.hdr_len), (14, 18, lp.l4 + 4, lp.hdr_len + 4));
            // Bytes exact: the builder's headers of flow 0 at that length...
            let h = tagged.class_header(lt, 100);
            assert_eq!(h, build(Some(100), 1024, s2, d, 100)[..lt.hdr_len]);
            // ...which are the untagged frame's, 4 bytes shorter, with the tag inserted.
            let mut p = plain.class_header(lp, 96);
            p.splice(12..12, [0x81, 0x00, 0x00, 100]);
            assert_eq!(h, p);
            assert_eq!(tagged.flow(4 + 1).unwrap(), Flow { src: s, dst: d, sport: 1025, dport: 9 });
            assert_eq!(template_addrs(&tagged.template, lt.l2, ipv6), (s, d));
        }
    }

    #[test]
    fn address_deltas_are_zero_for_the_first_and_exact_for_others() {
        let a: Vec<IpAddr> = ["198.18.0.1", "198.18.0.2", "198.19.255.255"].iter().map(|s| s.parse().unwrap()).collect();
        let e = addr_entries(&a);
        assert_eq!(e[0].delta, 0xffff);
        // 198.18.0.1 -> 198.18.0.2: +1 in the last word (as network-order words).
        let d = fold(!u16::from_be_bytes([0, 1]) as u32 + u16::from_be_bytes([0, 2]) as u32);
        assert_eq!(u16::from_ne_bytes((e[1].delta as u16).to_be_bytes()), d);
    }
}
