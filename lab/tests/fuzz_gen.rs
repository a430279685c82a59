//! Differential fuzzing of the generator's frames (`bpf/gen.bpf.c`, its
//! maps filled by `programs/gen.rs`) against our packet builder: random
//! generator configurations — IPv4 or IPv6, UDP or TCP with random header
//! fields, size sequences (one size, up to eight, the IMIX), source and
//! destination address lists (none, one, hundreds, with carries in every
//! word), source and destination port ranges up to the ends of the port
//! space, some aimed at a checksum of zero, and frame limits raised while
//! it runs — each run over successive pages as a receiver leaves them
//! (any length, anything in the headers). Frame n sent must be exactly
//! what `PacketBuilder` makes of the template's fields with size
//! `sizes[n % len]` and the n-th flow of the odometer (source port
//! fastest, then destination port, source address, destination address),
//! its IPv4 header and L4 checksums verified on their own (RFC 1071 over
//! the pseudo-header); frames beyond a limit are dropped untouched and do
//! not count. A million frames, a new configuration every few thousand.
//!
//! A quarter of the templates carry one 802.1Q tag (any VLAN ID and
//! priority), which every frame keeps, its fields 4 bytes further.
//!
//! Not covered: the rate (it paces by the clock; lab_gen measures it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fastrand::Rng;
use xnf_lab::programs::gen::{imix_sequence, GenConfig, GenControl, GenProgram, MAX_CLASSES, MAX_FRAME, MAX_SEQUENCE};
use xnf_packet::checksum::{verify, verify_transport_v4, verify_transport_v6};
use xnf_packet::{MacAddr, PacketBuilder, TcpFlags};
use xnf_testrun::frames::hex;
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

const NO_DEV: XdpContext = XdpContext { ingress_ifindex: 0, rx_queue_index: 0 };
/// Frames per configuration: each block loads its own program.
const BLOCK: u64 = 4096;

/// The template's fields besides the flow: what every frame keeps.
#[derive(Clone, Debug)]
struct Template {
    src_mac: MacAddr,
    dst_mac: MacAddr,
    ipv6: bool,
    /// TCP: flags, sequence, acknowledgement, window; `None`: UDP.
    tcp: Option<(u8, u32, u32, u16)>,
    ttl: u8,
    dscp: u8,
    ecn: u8,
    ident: u16,
    dont_frag: bool,
    flow_label: u32,
    /// One 802.1Q tag (VLAN ID, priority), or none.
    vlan: Option<(u16, u8)>,
}

/// One flow's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Flow {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
}

impl Template {
    /// Where the IP header starts.
    fn l3(&self) -> usize {
        if self.vlan.is_some() {
            18
        } else {
            14
        }
    }

    fn hdr_len(&self) -> usize {
        self.l3() + if self.ipv6 { 40 } else { 20 } + if self.tcp.is_some() { 20 } else { 8 }
    }

    /// The frame of `len` bytes the builder makes for `f`: zero payload.
    fn frame(&self, f: &Flow, len: usize) -> Vec<u8> {
        let e = PacketBuilder::ethernet(self.src_mac, self.dst_mac);
        let e = if let Some((vid, pcp)) = self.vlan { e.vlan_pcp(vid, pcp) } else { e };
        let b = e.ip(f.src, f.dst).ttl(self.ttl).dscp(self.dscp).ecn(self.ecn);
        let b = if self.ipv6 { b.flow_label(self.flow_label) } else { b.ident(u32::from(self.ident)).dont_frag(self.dont_frag) };
        let b = match self.tcp {
            Some((flags, seq, ack, window)) => b.tcp(f.sport, f.dport, TcpFlags(flags)).seq(seq).ack(ack).window(window),
            None => b.udp(f.sport, f.dport),
        };
        b.frame_len(len).build()
    }
}

/// A configuration: the template's fields, its flow 0 (the template's
/// addresses and ports) and the generator's settings.
#[derive(Clone, Debug)]
struct Plan {
    t: Template,
    template_flow: Flow,
    template_len: usize,
    cfg: GenConfig,
    /// (limit set before frame 0, frame before which it is lifted).
    limit: Option<(u64, u64)>,
}

impl Plan {
    fn sizes(&self) -> Vec<u16> {
        if self.cfg.sizes.is_empty() {
            vec![self.template_len as u16]
        } else {
            self.cfg.sizes.clone()
        }
    }

    /// Flow `n` by the odometer, from the plan's own lists.
    fn flow(&self, n: u64) -> Flow {
        let c = &self.cfg;
        let digits = [u64::from(c.flows.max(1)), u64::from(c.dst_ports.max(1)), c.src_addrs.len().max(1) as u64, c.dst_addrs.len().max(1) as u64];
        let mut n = n % digits.iter().product::<u64>();
        let mut d = [0u64; 4];
        for (d, base) in d.iter_mut().zip(digits) {
            *d = n % base;
            n /= base;
        }
        Flow {
            sport: (u64::from(c.base_sport) + d[0]) as u16,
            dport: (u64::from(self.template_flow.dport) + d[1]) as u16,
            src: c.src_addrs.get(d[2] as usize).copied().unwrap_or(self.template_flow.src),
            dst: c.dst_addrs.get(d[3] as usize).copied().unwrap_or(self.template_flow.dst),
        }
    }

    /// Frame `n` the generator must send.
    fn frame(&self, n: u64) -> Vec<u8> {
        let sizes = self.sizes();
        self.t.frame(&self.flow(n), sizes[(n % sizes.len() as u64) as usize] as usize)
    }
}

/// An address with carries in its words now and then: all ones, zeros,
/// or random words.
fn address(rng: &mut Rng, ipv6: bool) -> IpAddr {
    let word = |r: &mut Rng| match r.u8(..8) {
        0 => 0xffff,
        1 => 0,
        2 => 0xfffe,
        _ => r.u16(..),
    };
    if ipv6 {
        IpAddr::V6(Ipv6Addr::from(std::array::from_fn::<u16, 8, _>(|_| word(rng))))
    } else {
        let (a, b) = (word(rng), word(rng));
        IpAddr::V4(Ipv4Addr::from((u32::from(a) << 16) | u32::from(b)))
    }
}

fn addresses(rng: &mut Rng, ipv6: bool) -> Vec<IpAddr> {
    let n = match rng.u8(..100) {
        0..=39 => 0,
        40..=59 => 1,
        60..=89 => rng.usize(2..20),
        _ => rng.usize(20..400),
    };
    let mut v: Vec<IpAddr> = (0..n).map(|_| address(rng, ipv6)).collect();
    if n > 2 && rng.bool() {
        // A repeated address (the lists allow it).
        v[n - 1] = v[0];
    }
    v
}

/// A count of ports from `base` on that fits the port space: one, a few,
/// many, or all that are left.
fn port_count(rng: &mut Rng, base: u16) -> u32 {
    let room = 65536 - u32::from(base);
    match rng.u8(..100) {
        0..=29 => 1,
        30..=69 => rng.u32(1..=room.min(50)),
        70..=89 => rng.u32(1..=room),
        _ => room,
    }
}

fn port_base(rng: &mut Rng) -> u16 {
    [0, 1, 1024, 65535, 65534, 65000, rng.u16(..), rng.u16(..)][rng.usize(..8)]
}

/// Frame lengths: empty (the template's), one or up to eight sizes in a
/// sequence of up to 1024, or the IMIX.
fn sizes(rng: &mut Rng, min: usize) -> Vec<u16> {
    let len = |r: &mut Rng| -> u16 {
        let v = [min, min + 1, 60, 64, 1514, 1518, MAX_FRAME, r.usize(min..=MAX_FRAME), r.usize(min..200)][r.usize(..9)];
        v.max(min) as u16
    };
    match rng.u8(..100) {
        0..=14 => vec![],
        15..=29 => vec![len(rng)],
        30..=44 => imix_sequence(min),
        _ => {
            let classes: Vec<u16> = (0..rng.usize(1..=MAX_CLASSES)).map(|_| len(rng)).collect();
            let n = if rng.u8(..5) == 0 { MAX_SEQUENCE } else { rng.usize(1..=64) };
            (0..n).map(|_| classes[rng.usize(..classes.len())]).collect()
        }
    }
}

fn mac(rng: &mut Rng) -> MacAddr {
    let mut m = [0u8; 6];
    rng.fill(&mut m);
    MacAddr(m)
}

fn plan(rng: &mut Rng) -> Plan {
    let ipv6 = rng.bool();
    let tcp = rng.bool().then(|| (rng.u8(..), rng.u32(..), rng.u32(..), rng.u16(..)));
    let t = Template {
        src_mac: mac(rng),
        dst_mac: mac(rng),
        ipv6,
        tcp,
        ttl: rng.u8(..),
        dscp: rng.u8(..64),
        ecn: rng.u8(..4),
        ident: rng.u16(..),
        dont_frag: rng.bool(),
        flow_label: rng.u32(..1 << 20),
        vlan: (rng.u8(..4) == 0).then(|| (rng.u16(..4096), rng.u8(..8))),
    };
    let min = t.hdr_len();
    let dport = port_base(rng);
    let template_flow = Flow { src: address(rng, ipv6), dst: address(rng, ipv6), sport: rng.u16(..), dport };
    let sizes = sizes(rng, min);
    let template_len = rng.usize(min..=MAX_FRAME.min(min + 200));
    let base_sport = port_base(rng);
    let mut cfg = GenConfig {
        template: vec![],
        ipv6,
        flows: port_count(rng, base_sport),
        base_sport,
        sizes,
        dst_ports: if rng.u8(..4) == 0 { 0 } else { port_count(rng, dport) },
        src_addrs: addresses(rng, ipv6),
        dst_addrs: addresses(rng, ipv6),
    };
    // At most 2^32 - 1 flows (validate): fewer ports, then fewer addresses.
    while cfg.flow_count() > u64::from(u32::MAX) {
        if cfg.dst_ports > 1 {
            cfg.dst_ports /= 16;
        } else if cfg.flows > 1 {
            cfg.flows /= 16;
        } else {
            cfg.dst_addrs.truncate(cfg.dst_addrs.len() / 2);
        }
    }
    let mut p = Plan { t, template_flow, template_len, cfg, limit: None };
    if rng.u8(..10) == 0 {
        // Aim flow k's L4 checksum at zero: its source port is what the
        // sum with port 0 lacks (RFC 1071: x + ~x = 0xffff).
        let missing = |p: &Plan, k: u64| {
            let mut f = p.flow(k);
            f.sport = 0;
            let frame = p.t.frame(&f, p.sizes()[(k % p.sizes().len() as u64) as usize] as usize);
            let at = min - if p.t.tcp.is_some() { 4 } else { 2 };
            u16::from_be_bytes([frame[at], frame[at + 1]])
        };
        let mut k = rng.u16(..=(p.cfg.flows.max(1) - 1).min(100) as u16);
        let mut m = missing(&p, u64::from(k));
        if m < k {
            (k, m) = (0, missing(&p, 0));
        }
        p.cfg.base_sport = m - k;
        p.cfg.flows = p.cfg.flows.min(65536 - u32::from(m - k));
    }
    p.cfg.template = p.t.frame(&p.template_flow, p.template_len);
    if rng.u8(..5) == 0 {
        let limit = rng.u64(1..BLOCK / 2);
        p.limit = Some((limit, limit + rng.u64(..200)));
    }
    p
}

/// The checksums of a frame whose IP header starts at `ip` checked on
/// their own, and its lengths.
fn checks(f: &[u8], ip: usize, ipv6: bool, tcp: bool) -> Result<(), String> {
    let be = |at: usize| u16::from_be_bytes([f[at], f[at + 1]]) as usize;
    let l4 = ip + if ipv6 { 40 } else { 20 };
    let proto = if tcp { 6 } else { 17 };
    if f.len() < l4 + 8 {
        return Err(format!("{} bytes: shorter than its headers", f.len()));
    }
    let seg = &f[l4..];
    let ok = if ipv6 {
        let a = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&f[at..at + 16]).unwrap());
        if be(ip + 4) != seg.len() {
            return Err(format!("IPv6 payload length {} in a {}-byte frame", be(ip + 4), f.len()));
        }
        verify_transport_v6(a(ip + 8), a(ip + 24), proto, seg)
    } else {
        let a = |at: usize| Ipv4Addr::from(<[u8; 4]>::try_from(&f[at..at + 4]).unwrap());
        let h = &f[ip..ip + 20];
        if be(ip + 2) != f.len() - ip || !verify(h) {
            return Err(format!("IPv4 header: total length {} of {}, checksum {}", be(ip + 2), f.len() - ip, if verify(h) { "right" } else { "wrong" }));
        }
        verify_transport_v4(a(ip + 12), a(ip + 16), proto, seg)
    };
    if !ok {
        return Err("L4 checksum wrong".into());
    }
    if !tcp && (be(l4 + 6) == 0 || be(l4 + 4) != seg.len()) {
        return Err(format!("UDP checksum {:#06x}, length {} of {}", be(l4 + 6), be(l4 + 4), seg.len()));
    }
    Ok(())
}

/// A page as a receiver may leave it: any length, anything in the headers
/// (receivers rewrite headers, never the zero payload); or the last frame
/// sent, rewritten so.
fn page(rng: &mut Rng, last: &[u8], hdr: usize) -> Vec<u8> {
    let mut f = if rng.bool() && !last.is_empty() { last.to_vec() } else { vec![0u8; rng.usize(14..=MAX_FRAME)] };
    if rng.bool() {
        f.resize(rng.usize(14..=MAX_FRAME), 0);
    }
    for _ in 0..rng.usize(..8) {
        let at = rng.usize(..hdr.min(f.len()));
        f[at] = rng.u8(..);
    }
    f
}

/// The configuration of one block and the program running it.
struct Block {
    index: u64,
    plan: Plan,
    prog: GenProgram,
    ctl: GenControl,
    /// Frames run in this block, frames sent, the limit now.
    runs: u64,
    sent: u64,
    limit: u64,
    /// The program's `sent` counter after the last frame.
    counter: u64,
    /// Frames sent with an L4 checksum field of 0 or 0xffff.
    zero_csums: u64,
    last: Vec<u8>,
}

impl Block {
    fn new(seed: u64, index: u64) -> Block {
        let mut rng = Rng::with_seed(seed ^ index.wrapping_mul(0x2545_f491_4f6c_dd1d).rotate_left(23));
        let plan = plan(&mut rng);
        let prog = GenProgram::load(&plan.cfg).unwrap_or_else(|e| panic!("block {index}: loading {:?}: {e:#}", plan.cfg));
        let ctl = prog.control().unwrap();
        let limit = plan.limit.map_or(0, |(l, _)| l);
        ctl.set_limit(limit).unwrap();
        Block { index, plan, prog, ctl, runs: 0, sent: 0, limit, counter: 0, zero_csums: 0, last: vec![] }
    }

    /// Runs the next frame over `input`; checks it if `check`.
    fn step(&mut self, input: &[u8], check: bool) -> Result<(), String> {
        if self.plan.limit.is_some_and(|(_, lift)| lift == self.runs) {
            self.limit = 0;
            self.ctl.set_limit(0).unwrap();
        }
        self.runs += 1;
        let r = run_xdp(self.prog.prog(), input, NO_DEV).map_err(|e| format!("test run failed: {e:#}"))?;
        let counter = self.ctl.sent().unwrap();
        let delta = counter - self.counter;
        self.counter = counter;
        let n = self.sent;
        let send = self.limit == 0 || n < self.limit;
        if send {
            self.sent += 1;
            let at = self.plan.t.hdr_len() - if self.plan.t.tcp.is_some() { 4 } else { 2 };
            if r.frame.get(at..at + 2).is_some_and(|c| c == [0, 0] || c == [0xff, 0xff]) {
                self.zero_csums += 1;
            }
            self.last = r.frame.clone();
        }
        if !check {
            return Ok(());
        }
        let mut problems = Vec::new();
        let (want, want_frame) = if send { (Verdict::Tx, self.plan.frame(n)) } else { (Verdict::Drop, input.to_vec()) };
        if r.verdict != want || delta != u64::from(send) {
            problems.push(format!("{} counting {delta}; the model says {} counting {}", r.verdict.name(), want.name(), u8::from(send)));
        }
        if r.frame != want_frame {
            problems.push(format!("sent {}\n    model {}", hex(&r.frame), hex(&want_frame)));
        }
        if send && r.verdict == Verdict::Tx {
            if let Err(e) = checks(&r.frame, self.plan.t.l3(), self.plan.t.ipv6, self.plan.t.tcp.is_some()) {
                problems.push(e);
            }
            if n.is_multiple_of(16) {
                let f = self.plan.cfg.flow(n).map_err(|e| format!("GenConfig::flow({n}): {e:#}"))?;
                let m = self.plan.flow(n);
                if (f.src, f.dst, f.sport, f.dport) != (m.src, m.dst, m.sport, m.dport) {
                    problems.push(format!("GenConfig::flow({n}) is {f:?}; the odometer says {m:?}"));
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("block {} frame {n} sent (run {}): {}\n    plan {:?}", self.index, self.runs - 1, problems.join("; "), self.plan))
        }
    }
}

#[test]
fn the_generator_sends_exactly_the_builders_frames() {
    xnf_testrun::pin_to_current_cpu();
    let fuzz = Fuzz::from_env("lab gen", DEFAULT_FRAMES);
    let mut index = fuzz.first;
    let mut block: Option<Block> = None;
    let (mut blocks, mut sent, mut dropped, mut zero_csums) = (0u64, 0u64, 0u64, 0u64);
    fuzz.run(|rng| {
        let i = index;
        index += 1;
        let (b, k) = (i / BLOCK, i % BLOCK);
        if block.as_ref().is_none_or(|x| x.index != b) {
            let mut fresh = Block::new(fuzz.seed, b);
            // Reproducing a frame in the middle of a block: run the
            // frames before it (what they are does not change the state).
            for _ in 0..k {
                fresh.step(&[0u8; 60], false).expect("the frames before");
            }
            blocks += 1;
            zero_csums += block.as_ref().map_or(0, |x| x.zero_csums);
            block = Some(fresh);
        }
        let b = block.as_mut().expect("a block");
        let input = page(rng, &b.last, b.plan.t.hdr_len());
        let before = b.sent;
        let verdict = b.step(&input, true);
        if b.sent > before {
            sent += 1;
        } else {
            dropped += 1;
        }
        (input, verdict)
    });
    zero_csums += block.as_ref().map_or(0, |x| x.zero_csums);
    eprintln!("fuzz lab gen: {blocks} configurations, {sent} frames sent ({zero_csums} with an L4 checksum of zero), {dropped} dropped beyond a limit");
}
