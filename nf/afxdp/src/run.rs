//! `xnf afxdp run`: a user-space network function on AF_XDP sockets, with
//! the selector program in front of them and live statistics.

use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use xnf_core::class::MatchSpec;
use xnf_core::xdp::{XdpLink, XdpMode};
use xnf_netns::netlink;
use xnf_packet::{MacAddr, PacketBuilder};

use crate::nfs::{Echo, L2Fwd, RxDrop, TxOnly};
use crate::selector::{AfxdpProgram, Reason};
use crate::{kernel_stats, Accounting, BusyPoll, Counters, Mode, NetworkFunction, RunConfig, Snapshot, SocketConfig, UmemConfig, Wait, XskSet};

/// Where frames go that may be in a class but whose L4 header is unreadable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownL4 {
    /// To user space, like the class.
    User,
    /// Dropped.
    Drop,
}

/// The bundled network functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NfKind {
    /// Receive and drop.
    Rxdrop,
    /// Send copies of one UDP frame (a generator); receives nothing.
    Txonly,
    /// Swap the MAC addresses and send every frame back.
    L2fwd,
    /// Answer UDP (addresses and ports swapped) and ICMP/ICMPv6 echo requests.
    Echo,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The network function.
    #[arg(value_enum)]
    pub nf: NfKind,
    /// Interface whose queues the sockets bind to.
    #[arg(long)]
    pub iface: String,
    /// RX/TX queues to open a socket on (one UMEM shared by all).
    #[arg(long = "queue", value_delimiter = ',', default_value = "0", value_name = "Q[,Q...]")]
    pub queues: Vec<u32>,
    /// Hand only this traffic to user space (repeat for several classes,
    /// first match wins; keys as in `xnf chain create --match`); the rest
    /// stays with the kernel. Without it, everything on the queues goes to user space.
    #[arg(long = "match", value_name = "K=V,...")]
    pub matches: Vec<String>,
    /// Frames that may be in a class but whose protocol or ports cannot be
    /// read (later fragments, truncated L4 headers, long IPv6 extension
    /// header chains): to user space, or dropped. Never to the kernel
    /// behind the NF's back.
    #[arg(long, value_enum, default_value = "user")]
    pub unknown_l4: UnknownL4,
    /// Copy mode (the kernel copies each frame; the only mode veth has).
    #[arg(long, conflicts_with = "zero_copy")]
    pub copy: bool,
    /// Zero-copy mode; refused where the driver lacks it. Default: zero-copy when possible, else copy.
    #[arg(long)]
    pub zero_copy: bool,
    /// Do not set XDP_USE_NEED_WAKEUP (the kernel is then kicked every round).
    #[arg(long)]
    pub no_need_wakeup: bool,
    /// Busy poll: SO_BUSY_POLL microseconds (with SO_PREFER_BUSY_POLL).
    #[arg(long, value_name = "USECS")]
    pub busy_poll: Option<u32>,
    /// SO_BUSY_POLL_BUDGET: packets per busy-poll round.
    #[arg(long, default_value_t = 64, requires = "busy_poll")]
    pub busy_poll_budget: u32,
    /// Spin on the rings instead of sleeping in poll() when idle.
    #[arg(long)]
    pub spin: bool,
    /// Packets per RX batch (and per TX batch for txonly).
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// UMEM frame size (power of two, 2048 up to the page size).
    #[arg(long, default_value_t = 4096)]
    pub frame_size: u32,
    /// UMEM frames.
    #[arg(long = "frames", default_value_t = 8192)]
    pub frame_count: u32,
    /// Headroom the kernel leaves before each received packet.
    #[arg(long, default_value_t = 0)]
    pub headroom: u32,
    #[arg(long, default_value_t = 2048)]
    pub rx_ring: u32,
    #[arg(long, default_value_t = 2048)]
    pub tx_ring: u32,
    #[arg(long, default_value_t = 4096)]
    pub fill_ring: u32,
    #[arg(long, default_value_t = 2048)]
    pub comp_ring: u32,
    /// Where the selector program runs (veth has native XDP).
    #[arg(long, value_enum, default_value = "native")]
    pub mode: XdpMode,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Live statistics every SECS seconds (0: none).
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    pub interval: f64,
    /// Print the final statistics (and the UMEM accounting) as JSON.
    #[arg(long)]
    pub json: bool,
    /// txonly: frame size on the wire, FCS included (64..=1518).
    #[arg(long, default_value_t = 64)]
    pub size: u32,
    /// txonly: frames to send (default: until stopped).
    #[arg(long)]
    pub count: Option<u64>,
    /// txonly: destination MAC (default: the peer's, for a veth in this namespace; else broadcast).
    #[arg(long)]
    pub dst_mac: Option<String>,
    /// txonly: source and destination address (IPv4 or IPv6).
    #[arg(long, default_value = "198.18.0.1")]
    pub src: IpAddr,
    #[arg(long, default_value = "198.18.0.2")]
    pub dst: IpAddr,
    /// txonly: UDP destination port.
    #[arg(long, default_value_t = 9)]
    pub dport: u16,
}

/// What `--json` prints when the NF stops.
#[derive(Debug, Serialize)]
pub struct Report {
    pub nf: NfKind,
    pub iface: String,
    pub seconds: f64,
    pub sockets: Vec<SocketReport>,
    /// Frames per selector reason (to-user, no-socket, no-match, ...).
    pub selector: Vec<(String, u64)>,
    pub umem: UmemReport,
}

#[derive(Debug, Serialize)]
pub struct SocketReport {
    pub queue: u32,
    pub zero_copy: bool,
    pub need_wakeup: bool,
    pub busy_poll: bool,
    /// The runtime's counters, and the kernel's under `kernel`.
    #[serde(flatten)]
    pub stats: Snapshot,
}

#[derive(Debug, Serialize)]
pub struct UmemReport {
    #[serde(flatten)]
    pub accounting: Accounting,
    /// Every frame is in exactly one place (or, after receive drops, in the
    /// kernel's pool): nothing leaked.
    pub balanced: bool,
}

impl RunArgs {
    fn socket_config(&self) -> SocketConfig {
        SocketConfig {
            rx_size: self.rx_ring,
            tx_size: self.tx_ring,
            fill_size: self.fill_ring,
            comp_size: self.comp_ring,
            mode: if self.copy {
                Mode::Copy
            } else if self.zero_copy {
                Mode::ZeroCopy
            } else {
                Mode::Auto
            },
            need_wakeup: !self.no_need_wakeup,
            busy_poll: self.busy_poll.map(|usecs| BusyPoll { usecs, budget: self.busy_poll_budget, prefer: true }),
        }
    }

    fn umem_config(&self) -> UmemConfig {
        UmemConfig { frame_size: self.frame_size, frame_count: self.frame_count, headroom: self.headroom }
    }

    /// Everything that can be checked before touching the system.
    pub fn validate(&self) -> Result<()> {
        self.umem_config().validate()?;
        self.socket_config().validate()?;
        ensure!(self.batch >= 1 && self.batch <= self.rx_ring, "--batch {}: use 1..=--rx-ring ({})", self.batch, self.rx_ring);
        ensure!(!self.queues.is_empty(), "--queue: name at least one queue");
        for (i, q) in self.queues.iter().enumerate() {
            ensure!(!self.queues[..i].contains(q), "--queue {q} is listed twice");
            ensure!(*q < crate::selector::MAX_QUEUES, "--queue {q}: at most {} queues", crate::selector::MAX_QUEUES);
        }
        ensure!((64..=1518).contains(&self.size), "--size {}: frames on the wire are 64..=1518 bytes", self.size);
        ensure!(self.size - 4 <= self.frame_size, "--size {}: larger than a UMEM frame (--frame-size {})", self.size, self.frame_size);
        ensure!(self.src.is_ipv4() == self.dst.is_ipv4(), "--src {} and --dst {} are of different IP versions", self.src, self.dst);
        if let Some(s) = self.seconds {
            ensure!(s > 0.0, "--seconds {s}: must be positive");
        }
        ensure!(self.interval >= 0.0, "--interval {}: must be 0 or more", self.interval);
        ensure!(self.matches.len() <= crate::selector::MAX_RULES, "--match: at most {} classes", crate::selector::MAX_RULES);
        for m in &self.matches {
            MatchSpec::parse(m).with_context(|| format!("--match {m}"))?;
        }
        Ok(())
    }
}

fn parse_mac(s: &str) -> Result<MacAddr> {
    let b: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16)).collect::<Result<_, _>>().with_context(|| format!("--dst-mac {s}: not a MAC address"))?;
    ensure!(b.len() == 6, "--dst-mac {s}: not a MAC address");
    Ok(MacAddr(b.try_into().unwrap()))
}

/// The frame txonly sends: UDP from the interface's MAC, a 4-byte sequence
/// number at the start of the payload. Returns the frame and that offset.
fn txonly_frame(a: &RunArgs, link: &netlink::Link) -> Result<(Vec<u8>, usize)> {
    let src = MacAddr(link.mac.context("the interface has no MAC address")?);
    let dst = match &a.dst_mac {
        Some(m) => parse_mac(m)?,
        None => link
            .parent
            .filter(|_| link.kind.as_deref() == Some("veth") && link.parent_netnsid.is_none())
            .and_then(|p| netlink::links().ok()?.into_iter().find(|l| l.ifindex == p)?.mac)
            .map(MacAddr)
            .unwrap_or(MacAddr([0xff; 6])),
    };
    let frame = PacketBuilder::ethernet(src, dst).ip(a.src, a.dst).udp(1024, a.dport).frame_len(a.size as usize - 4).build();
    let l4 = if a.src.is_ipv4() { 14 + 20 } else { 14 + 40 };
    // The UDP checksum covers the payload, and the sequence number changes
    // it: send it as "no checksum" over IPv4; IPv6 needs one, so its
    // sequence number is left out.
    let mut frame = frame;
    if a.src.is_ipv4() {
        frame[l4 + 6] = 0;
        frame[l4 + 7] = 0;
        return Ok((frame, l4 + 8));
    }
    Ok((frame, usize::MAX))
}

fn make_nf(a: &RunArgs, link: &netlink::Link) -> Result<Box<dyn NetworkFunction>> {
    Ok(match a.nf {
        NfKind::Rxdrop => Box::new(RxDrop),
        NfKind::L2fwd => Box::new(L2Fwd),
        NfKind::Echo => Box::new(Echo),
        NfKind::Txonly => {
            let (frame, off) = txonly_frame(a, link)?;
            Box::new(TxOnly::new(frame, (off != usize::MAX).then_some(off), a.count))
        }
    })
}

/// Runs the NF until stopped; prints live and final statistics.
pub fn run(a: RunArgs) -> Result<()> {
    a.validate()?;
    let link = netlink::link_by_name(&a.iface)?;
    ensure!(!link.loopback, "{}: AF_XDP needs an Ethernet interface, not the loopback", a.iface);
    let rules = a.matches.iter().map(|m| MatchSpec::parse(m)?.class()).collect::<Result<Vec<_>>>()?;
    let mut nf = make_nf(&a, &link)?;
    // Before anything is attached: a Ctrl-C from then on stops the run
    // and still gets its report (the default action would kill it).
    let stop = Arc::new(AtomicBool::new(false));
    let on_stop = stop.clone();
    xnf_core::runtime::on_interrupt(move |_| on_stop.store(true, Ordering::Relaxed))?;

    let prog = AfxdpProgram::load()?;
    prog.set_rules(&rules, a.unknown_l4 == UnknownL4::Drop)?;
    let bindings: Vec<_> = a.queues.iter().map(|&q| (link.ifindex, a.iface.clone(), q)).collect();
    let run_cfg = RunConfig { batch: a.batch, wait: if a.spin { Wait::Spin } else { Wait::Poll { timeout_ms: 100 } } };
    let mut set = XskSet::new(a.umem_config(), &a.socket_config(), run_cfg, &bindings)?;
    for s in set.sockets() {
        prog.add_socket(s.queue, s.fd())?;
    }
    if nf.receives() {
        set.fill_rings()?;
    }
    // Attached after the sockets are in the map and their FILL rings
    // filled: no selected frame finds an empty slot or no buffer.
    let link_guard = XdpLink::create(prog.prog().as_fd(), link.ifindex, &a.iface, a.mode)?;
    if link.kind.as_deref() == Some("veth") {
        eprintln!("xnf afxdp: {} is a veth: copy mode, and busy polling does not engage there", a.iface);
    }
    let modes: Vec<String> = set.sockets().iter().map(|s| format!("queue {} {}", s.queue, if s.zero_copy { "zero-copy" } else { "copy" })).collect();
    eprintln!(
        "xnf afxdp: {} on {} ({}), need_wakeup {}, busy poll {}, {}, batch {}; {}",
        nf.name(),
        a.iface,
        modes.join(", "),
        !a.no_need_wakeup,
        a.busy_poll.map_or("off".into(), |u| format!("{u} us / budget {}", a.busy_poll_budget)),
        if a.spin { "spinning" } else { "poll()" },
        a.batch,
        if rules.is_empty() { "all traffic on these queues".to_string() } else { format!("{} class(es), the rest to the kernel", rules.len()) }
    );

    let counters = set.counters();
    let stat_fds: Vec<OwnedFd> = set.sockets().iter().map(|s| s.fd().try_clone_to_owned()).collect::<std::io::Result<_>>()?;
    let t0 = Instant::now();
    let reporter = {
        let (stop, counters, seconds, interval) = (stop.clone(), counters.clone(), a.seconds, a.interval);
        std::thread::spawn(move || live(&stop, &counters, &stat_fds, seconds, interval, t0))
    };
    let result = set.run(nf.as_mut(), &stop);
    stop.store(true, Ordering::Relaxed);
    let _ = reporter.join();
    let elapsed = t0.elapsed().as_secs_f64();
    drop(link_guard); // the queues go back to the kernel
    result?;

    let acc = set.settled_accounting();
    let stats = prog.stats()?;
    let report = Report {
        nf: a.nf,
        iface: a.iface.clone(),
        seconds: elapsed,
        sockets: set
            .sockets()
            .iter()
            .enumerate()
            .map(|(i, s)| -> Result<SocketReport> {
                Ok(SocketReport {
                    queue: s.queue,
                    zero_copy: s.zero_copy,
                    need_wakeup: s.need_wakeup,
                    busy_poll: s.busy_poll.is_some(),
                    stats: set.snapshot(i)?,
                })
            })
            .collect::<Result<_>>()?,
        selector: Reason::ALL.iter().map(|r| (r.name().to_string(), stats.get(*r))).collect(),
        umem: UmemReport { accounting: acc, balanced: acc.balanced() },
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    ensure!(report.umem.balanced, "UMEM accounting does not balance: {:?} — frames leaked", report.umem);
    Ok(())
}

/// Live lines: per socket pps in/out, the kernel's ring-full and
/// fill-empty drops, wakeups; until stopped or `seconds` are up.
fn live(stop: &AtomicBool, counters: &[Arc<Counters>], fds: &[OwnedFd], seconds: Option<f64>, interval: f64, t0: Instant) {
    let snap = |i: usize| counters[i].snapshot(kernel_stats(fds[i].as_fd()).unwrap_or_default());
    let mut last: Vec<Snapshot> = (0..counters.len()).map(snap).collect();
    let mut last_t = Instant::now();
    let mut next = interval;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        let el = t0.elapsed().as_secs_f64();
        if seconds.is_some_and(|s| el >= s) {
            stop.store(true, Ordering::Relaxed);
            break;
        }
        if interval <= 0.0 || el < next {
            continue;
        }
        next += interval;
        let dt = last_t.elapsed().as_secs_f64();
        last_t = Instant::now();
        for (i, l) in last.iter_mut().enumerate() {
            let n = snap(i);
            let rate = |a: u64, b: u64| (a - b) as f64 / dt;
            eprintln!(
                "q{i}: in {:>10.0} pps  out {:>10.0} pps  nf-drop {:>8.0}/s  ring-full {:>6}  fill-empty {:>6}  wakeups rx {:>7.0}/s tx {:>7.0}/s  polls {:>7.0}/s",
                rate(n.rx_packets, l.rx_packets),
                rate(n.tx_packets, l.tx_packets),
                rate(n.nf_dropped, l.nf_dropped),
                n.kernel.rx_ring_full - l.kernel.rx_ring_full,
                n.kernel.rx_fill_ring_empty - l.kernel.rx_fill_ring_empty,
                rate(n.rx_wakeups, l.rx_wakeups),
                rate(n.tx_wakeups, l.tx_wakeups),
                rate(n.polls, l.polls),
            );
            *l = n;
        }
    }
}

fn print_report(r: &Report) {
    println!("{} on {} for {:.1} s", format!("{:?}", r.nf).to_lowercase(), r.iface, r.seconds);
    for s in &r.sockets {
        println!(
            "  queue {} ({}): rx {} pkts / {} B, tx {} pkts / {} B, nf-dropped {}, tx-ring-full {}, kernel: ring-full {}, fill-empty {}, dropped {}; wakeups rx {} tx {}, polls {}",
            s.queue,
            if s.zero_copy { "zero-copy" } else { "copy" },
            s.stats.rx_packets,
            s.stats.rx_bytes,
            s.stats.tx_packets,
            s.stats.tx_bytes,
            s.stats.nf_dropped,
            s.stats.tx_ring_full,
            s.stats.kernel.rx_ring_full,
            s.stats.kernel.rx_fill_ring_empty,
            s.stats.kernel.rx_dropped,
            s.stats.rx_wakeups,
            s.stats.tx_wakeups,
            s.stats.polls
        );
    }
    let sel: Vec<String> = r.selector.iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k} {n}")).collect();
    println!("  selector: {}", if sel.is_empty() { "nothing".into() } else { sel.join(", ") });
    let (u, balanced) = (&r.umem.accounting, r.umem.balanced);
    println!(
        "  UMEM: {} frames = free {} + fill {} + rx {} + tx {} + completion {} + kernel pool after drops {}: {}",
        u.total,
        u.free,
        u.fill,
        u.rx,
        u.tx,
        u.completion,
        u.kernel_pool,
        if balanced { "balanced" } else { "LEAKED" }
    );
}
