//! The profiler on known traffic through a namespace pair (a -> b over a
//! veth, IPv6 off and static neighbours, so nothing but the test's
//! datagrams crosses): N datagrams to a socket give N packet records and N
//! frames polled; a closed port shows NO_SOCKET by name; frames dropped by
//! XDP show in the device's XDP drops and never in the stack; a packet
//! table too small for the traffic reports the rest as lost; counting only,
//! drops and polls stay exact and the softirq runs are the kernel's.
//!
//! The tracepoints are global: the tests take turns (one lock) and the
//! profiles are limited to b's namespace.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xnf_core::xdp::{XdpLink, XdpMode};
use xnf_netns::{ifname, packet_socket, send_frame, veth, Netns};
use xnf_packet::PacketBuilder;
use xnf_profile::{Options, Profile, Session, Watch};

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 2);
const OPEN: u16 = 5000;
const CLOSED: u16 = 5001;

static TURN: Mutex<()> = Mutex::new(());

struct Pair {
    a: Netns,
    b: Netns,
    a_if: String,
    b_if: String,
}

fn pair(tag: &str) -> Pair {
    let a = Netns::new(&format!("prof-{tag}-a")).unwrap();
    let b = Netns::new(&format!("prof-{tag}-b")).unwrap();
    // No IPv6 on the link: no router or neighbour solicitations, no MLD.
    for ns in [&a, &b] {
        ns.sysctl_set("net.ipv6.conf.all.disable_ipv6", "1").unwrap();
        ns.sysctl_set("net.ipv6.conf.default.disable_ipv6", "1").unwrap();
    }
    let (a_if, b_if) = (ifname("pa"), ifname("pb"));
    veth(&a, &a_if, &b, &b_if, None).unwrap();
    a.addr_add(&a_if, "198.18.7.1/24").unwrap();
    b.addr_add(&b_if, "198.18.7.2/24").unwrap();
    a.link_up(&a_if).unwrap();
    b.link_up(&b_if).unwrap();
    // Carrier on both ends (wait_links_ready waits for IPv6, off here).
    for (ns, dev) in [(&a, &a_if), (&b, &b_if)] {
        until("carrier", || ns.ip(&["link", "show", dev]).is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("LOWER_UP")));
    }
    // Static neighbours: no ARP in the counts.
    a.neigh_add("198.18.7.2", b.mac(&b_if).unwrap(), &a_if).unwrap();
    b.neigh_add("198.18.7.1", a.mac(&a_if).unwrap(), &b_if).unwrap();
    Pair { a, b, a_if, b_if }
}

/// A two-instruction XDP program returning `verdict` (1 drop, 2 pass).
fn xdp_program(verdict: i32) -> OwnedFd {
    let mut insns = [0u8; 16];
    insns[0] = 0xb7; // r0 = imm
    insns[4..8].copy_from_slice(&verdict.to_le_bytes());
    insns[8] = 0x95; // exit
    let name = c"xnf_test_xdp";
    let license = c"GPL";
    // SAFETY: 2 valid instructions, NUL-terminated strings, no options.
    let fd =
        unsafe { libbpf_sys::bpf_prog_load(libbpf_sys::BPF_PROG_TYPE_XDP, name.as_ptr(), license.as_ptr(), insns.as_ptr().cast(), 2, std::ptr::null_mut()) };
    assert!(fd >= 0, "loading a test XDP program: {}", std::io::Error::from_raw_os_error(-fd));
    // SAFETY: a new descriptor we own.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

impl Pair {
    /// Attaches an XDP program returning `verdict` to b's end (held by the link).
    fn xdp(&self, verdict: i32) -> XdpLink {
        let prog = xdp_program(verdict);
        let ifindex = self.b.ifindex(&self.b_if).unwrap();
        let dev = self.b_if.clone();
        self.b.run(move || XdpLink::create(&prog, ifindex, &dev, XdpMode::Native)).unwrap().unwrap()
    }

    fn watch(&self, in_flight: u32) -> Options {
        let ino = std::fs::metadata(self.b.path()).unwrap().ino() as u32;
        let watch = Watch { cpus: Vec::new(), netns: Some((self.b.name().to_string(), ino)), in_flight, counts_only: false, follow_every: 1, device_slots: 0 };
        Options { watch, stack_hz: None, prog_stats: true }
    }

    /// A UDP socket in b.
    /// A socket in b with an 8 MiB receive buffer: in an emulated guest
    /// the reader falls behind a burst that a default buffer (a few dozen
    /// datagrams of page-sized skbs after veth's XDP) cannot hold.
    fn socket(&self, port: u16) -> UdpSocket {
        xnf_testrun::cli::udp_receiver(&self.b, SocketAddr::from((B, port)))
    }

    /// Sends `n` datagrams from a to b's `port`, `burst` at a time, calling
    /// `between` after each burst.
    fn send(&self, port: u16, n: usize, burst: usize, between: &dyn Fn(usize)) {
        let s = self.a.run(|| UdpSocket::bind(SocketAddr::from((A, 0)))).unwrap().unwrap();
        let mut sent = 0;
        while sent < n {
            for _ in 0..burst.min(n - sent) {
                s.send_to(b"xnf profile test", SocketAddr::from((B, port))).unwrap();
                sent += 1;
            }
            between(sent);
        }
    }
}

/// Polls `f` until true or 30 s pass (a limit for failures only: the
/// kernel matrix's emulated guests are ten times slower than the host).
fn until(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn device<'a>(p: &'a Profile, name: &str) -> &'a xnf_profile::model::Device {
    p.device(name).unwrap_or_else(|| panic!("no device {name} in {:?}", p.devices))
}

/// The stage times are cut from the softirq's own time: they add up to it.
fn stages_add_up(p: &Profile) {
    let sum: u64 = p.stages.iter().map(|s| s.ns).sum();
    assert_eq!(sum, p.softirq_ns, "stages {:?} vs softirq {}", p.stages, p.softirq_ns);
    for c in &p.per_cpu {
        assert_eq!(c.stage_ns.iter().sum::<u64>(), c.softirq_ns, "CPU {}", c.cpu);
    }
}

#[test]
fn n_datagrams_to_a_socket_give_n_packet_records_and_n_polled_frames() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 2000;
    let p = pair("sock");
    let _xdp = p.xdp(2);
    let rx = p.socket(OPEN);
    rx.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let reader = {
        let got = got.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while got.load(Ordering::SeqCst) < N as u64 {
                rx.recv(&mut buf).unwrap();
                got.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let session = Session::start(&p.watch(65536)).unwrap();
    // Bursts the reader can keep up with: nothing overflows the socket.
    p.send(OPEN, N, 100, &|sent| until("the reader", || got.load(Ordering::SeqCst) == sent as u64));
    reader.join().unwrap();
    let prof = session.stop().unwrap();
    let dev = device(&prof, &p.b_if);
    if std::path::Path::new("/sys/kernel/tracing/events/sock/sk_data_ready").exists() {
        assert_eq!(prof.outcome("delivered"), N as u64, "{:?}", prof.outcomes);
        assert_eq!(prof.outcomes.iter().map(|o| o.count).sum::<u64>(), N as u64, "one end of life per packet: {:?}", prof.outcomes);
    } else {
        // Before 6.4 a datagram queued to a socket has no tracepoint: its
        // record stays in flight or ends as "restarted" when the skb is reused.
        eprintln!("no sock:sk_data_ready on this kernel: delivered datagrams are reported in flight or ended untraced");
        let ended = prof.outcomes.iter().map(|o| o.count).sum::<u64>();
        assert_eq!(ended + prof.lost.in_flight + prof.lost.restarted, N as u64, "{:?} {:?}", prof.outcomes, prof.lost);
    }
    assert_eq!(dev.work, N as u64, "frames polled by b's NAPI: {dev:?}");
    assert_eq!((dev.to_stack, dev.received, prof.packets), (N as u64, N as u64, N as u64), "{dev:?}");
    assert!(dev.polls >= 1 && dev.polls <= N as u64);
    assert_eq!(dev.xdp_dropped(), 0);
    assert!(prof.drops.is_empty(), "{:?}", prof.drops);
    assert_eq!(prof.lost.packets, 0, "{:?}", prof.lost);
    assert!(prof.stage_ns("ip-rcv") > 0 && prof.stage_ns("local") > 0, "{:?}", prof.stages);
    assert!(prof.softirqs > 0 && prof.cost.runs > 0);
    stages_add_up(&prof);
}

#[test]
fn a_datagram_to_a_closed_port_is_dropped_with_no_socket_by_name() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 100;
    let p = pair("closed");
    let _xdp = p.xdp(2);
    // Two profiles at once (two operators, or a lab run beside a manual
    // one): each has its own programs and maps and sees every drop.
    let session = Session::start(&p.watch(65536)).unwrap();
    let other = Session::start(&p.watch(65536)).unwrap();
    p.send(CLOSED, N, 10, &|_| ());
    until("the drops", || session.peek().unwrap().drops_named("NO_SOCKET") >= N as u64);
    until("the other's drops", || other.peek().unwrap().drops_named("NO_SOCKET") >= N as u64);
    assert_eq!(other.stop().unwrap().drops_named("NO_SOCKET"), N as u64);
    let prof = session.stop().unwrap();
    assert_eq!(prof.drops_named("NO_SOCKET"), N as u64, "{:?}", prof.drops);
    assert!(prof.drops.iter().any(|d| d.reason == "NO_SOCKET" && d.location.contains("udp")), "dropped in UDP: {:?}", prof.drops);
    assert_eq!(prof.outcome("dropped"), N as u64, "{:?}", prof.outcomes);
    assert_eq!(prof.outcome("delivered"), 0);
    stages_add_up(&prof);
}

#[test]
fn frames_dropped_by_xdp_show_in_the_devices_xdp_drops_and_not_in_the_stack() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 300;
    let p = pair("xdpdrop");
    let _xdp = p.xdp(1);
    let session = Session::start(&p.watch(65536)).unwrap();
    p.send(OPEN, N, 50, &|_| ());
    until("b's polls", || session.peek().unwrap().device(&p.b_if).is_some_and(|d| d.work >= N as u64));
    let prof = session.stop().unwrap();
    let dev = device(&prof, &p.b_if);
    assert_eq!((dev.work, dev.xdp_dropped()), (N as u64, N as u64), "{dev:?}");
    assert_eq!((dev.to_stack, dev.received, prof.packets), (0, 0, 0), "{dev:?}");
    assert_eq!(prof.outcomes.iter().map(|o| o.count).sum::<u64>(), 0, "{:?}", prof.outcomes);
    // A socket's datagram reaches b's XDP as an skb, which the driver frees
    // (veth_xdp_rcv_skb): a drop outside the stack, not a stack stage.
    assert!(prof.drops.iter().all(|d| d.location.contains("veth")), "{:?}", prof.drops);
    assert!(
        prof.xdp_programs.iter().any(|x| x.name == "xnf_test_xdp" && x.runs == N as u64),
        "the XDP program's runs from the kernel's stats: {:?}",
        prof.xdp_programs
    );
}

#[test]
fn a_full_packet_table_is_reported_as_lost_not_silently_missing() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 50;
    const TABLE: u32 = 8;
    let p = pair("lost");
    let _xdp = p.xdp(2);
    // First fragments, each of its own datagram: they wait for the rest in
    // the reassembly queue (30 s), so every one stays in flight.
    let (a_mac, b_mac) = (p.a.mac(&p.a_if).unwrap(), p.b.mac(&p.b_if).unwrap());
    let frames: Vec<Vec<u8>> = (0..N as u32)
        .map(|i| PacketBuilder::ethernet(a_mac, b_mac).ipv4(A, B).ident(1000 + i).fragment(0, true).udp(1024, OPEN).payload(&[0u8; 64]).build())
        .collect();
    let session = Session::start(&p.watch(TABLE)).unwrap();
    let dev = p.a_if.clone();
    p.a.run(move || {
        let s = packet_socket(&dev).unwrap();
        for f in &frames {
            send_frame(&s, f).unwrap();
        }
    })
    .unwrap();
    until("b's stack", || session.peek().unwrap().packets >= N as u64);
    let prof = session.stop().unwrap();
    assert_eq!(prof.packets, N as u64);
    assert_eq!(prof.lost.in_flight, TABLE as u64, "{:?}", prof.lost);
    assert_eq!(prof.lost.packets, N as u64 - TABLE as u64, "{:?}", prof.lost);
    assert!(prof.lost.any());
    assert!(xnf_profile::table::render(&prof).contains(&format!("{} packets not followed (table full)", N - TABLE as usize)));
}

#[test]
fn counting_only_keeps_drops_and_polls_exact_and_takes_the_softirqs_from_the_kernel() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 400;
    let p = pair("counts");
    let _xdp = p.xdp(2);
    let mut o = p.watch(65536);
    o.watch.counts_only = true;
    // One device slot: of a's and b's devices (a's polls the ICMP errors
    // b sends back) one is counted in the slot, the other in the hash.
    o.watch.device_slots = 1;
    let session = Session::start(&o).unwrap();
    // Bursts of 4, each waited for: at least N / 4 NET_RX runs.
    p.send(CLOSED, N, 4, &|sent| until("the drops", || session.peek().unwrap().drops_named("NO_SOCKET") >= sent as u64));
    let prof = session.stop().unwrap();
    // Each CPU's run of equal drops is pending until a different one: the
    // reader adds it, so the count is exact.
    assert_eq!(prof.drops_named("NO_SOCKET"), N as u64, "{:?}", prof.drops);
    assert_eq!(device(&prof, &p.b_if).work, N as u64, "{:?}", prof.devices);
    // No per-packet tracepoint: no packet records, no stage boundaries.
    assert!(prof.counts_only);
    assert_eq!(prof.outcomes.iter().map(|o| o.count).sum::<u64>(), 0, "{:?}", prof.outcomes);
    assert_eq!(prof.packets, 0);
    assert!(prof.events.iter().any(|(e, n)| e == "net:netif_receive_skb" && *n == 0), "{:?}", prof.events);
    assert!(prof.stages.iter().all(|s| s.ns == 0) && prof.softirq_hist.buckets.iter().all(|&b| b == 0), "{:?}", prof.stages);
    // The softirq runs are the kernel's (/proc/softirqs), per CPU.
    assert!(prof.softirqs >= (N / 4) as u64, "{} NET_RX runs", prof.softirqs);
    assert_eq!(prof.per_cpu.iter().map(|c| c.softirqs).sum::<u64>(), prof.softirqs);
    assert!(prof.measured_with.iter().any(|m| m.contains("/proc/softirqs")), "{:?}", prof.measured_with);
    assert!(xnf_profile::table::render(&prof).contains("stages and packets not measured (counts only)"));
}
