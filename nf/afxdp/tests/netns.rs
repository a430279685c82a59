//! `xnf afxdp run` in namespaces: namespace `a` (a plain Linux host, with
//! an AF_PACKET socket and kernel UDP sockets) and namespace `b` (the NF on
//! AF_XDP sockets) joined by a veth pair. The NF runs as the `xnf` binary
//! with `--json` until the test has its answers and stops it with SIGINT
//! (Ctrl-C), never at a deadline: a loaded machine must not fail a test;
//! its report must balance the UMEM.

use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use xnf_netns::{ifname, veth, Netns};
use xnf_packet::{MacAddr, PacketBuilder};
use xnf_testrun::cli::xnf_err;

struct Pair {
    a: Netns,
    b: Netns,
    a_if: String,
    b_if: String,
    a_mac: MacAddr,
    b_mac: MacAddr,
}

fn pair(queues: u32) -> Pair {
    let a = Netns::new("axa").expect("namespace (run as root)");
    let b = Netns::new("axb").unwrap();
    let (a_if, b_if) = (ifname("a"), ifname("b"));
    veth(&a, &a_if, &b, &b_if, Some(queues)).unwrap();
    a.ip_batch(&[format!("addr add 198.18.0.1/24 dev {a_if}"), format!("link set {a_if} up")]).unwrap();
    b.ip_batch(&[format!("addr add 198.18.0.2/24 dev {b_if}"), format!("link set {b_if} up")]).unwrap();
    // a's kernel fills in its UDP checksums (a veth would hand them on unfinished).
    a.set_offload(&a_if, xnf_netns::Offload::TxChecksum, false).unwrap();
    let (a_mac, b_mac) = (a.mac(&a_if).unwrap(), b.mac(&b_if).unwrap());
    Pair { a, b, a_if, b_if, a_mac, b_mac }
}

/// Starts `xnf afxdp run NF --iface <b_if> ARGS --json` in b; waits until
/// it is attached. `--seconds` is only a backstop for a test that panics
/// before it stops the NF ([`report`]).
fn start(p: &Pair, nf: &str, args: &[&str]) -> Child {
    let child = Command::new(xnf_testrun::cli::xnf_bin())
        .args(["--netns", p.b.name(), "afxdp", "run", nf, "--iface", &p.b_if, "--json", "--interval", "0", "--seconds", "300"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running xnf afxdp run");
    let t0 = Instant::now();
    while !xdp_attached(&p.b, &p.b_if) {
        // Generous: loading is slow in the kernel matrix's emulated guests.
        assert!(t0.elapsed() < Duration::from_secs(60), "xnf afxdp run never attached its program");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Stops the NF as Ctrl-C does and returns its JSON report.
fn report(child: Child) -> Value {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xnf afxdp run failed: {stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("report is not JSON ({e}): {stderr}"));
    let u = &r["umem"];
    assert_eq!(u["balanced"], true, "UMEM frames leaked: {u}");
    let sum: u64 = ["free", "fill", "rx", "tx", "completion"].iter().map(|k| u[k].as_u64().unwrap()).sum();
    assert_eq!(sum, u["frames"].as_u64().unwrap(), "accounting: {u}");
    assert_eq!(u["kernel_pool"], 0, "no receive drops at these rates, so no frame in the kernel's pool: {u}");
    r
}

fn xdp_attached(ns: &Netns, dev: &str) -> bool {
    let out = ns.ip(&["-j", "link", "show", "dev", dev]).unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["xdp"].is_object()
}

/// A raw AF_PACKET socket on `dev` in `ns` (opened from a thread there).
struct Raw {
    fd: std::os::fd::OwnedFd,
}

impl Raw {
    fn open(ns: &Netns, dev: &str) -> Raw {
        let dev = dev.to_string();
        let fd = ns.run(move || xnf_netns::packet_socket(&dev)).unwrap().unwrap();
        use std::os::fd::AsRawFd;
        // Room for every frame a test sends back to back (the default
        // buffer holds a few hundred small skbs).
        let rcvbuf: libc::c_int = 32 << 20;
        // SAFETY: valid int option.
        unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf as *const _ as *const libc::c_void, 4) };
        let timeout = nix::sys::time::TimeVal::new(0, 200_000);
        nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &timeout).expect("SO_RCVTIMEO on a socket of ours");
        Raw { fd }
    }

    fn send(&self, frame: &[u8]) {
        xnf_netns::send_frame(&self.fd, frame).unwrap();
    }

    /// Frames received (not our own outgoing ones) whose bytes contain
    /// `marker`, until `want` arrived or nothing came for `idle`.
    fn recv_marked(&self, marker: &[u8], want: usize, idle: Duration) -> Vec<Vec<u8>> {
        use std::os::fd::AsRawFd;
        let mut got = Vec::new();
        let mut last = Instant::now();
        let mut buf = vec![0u8; 4096];
        while got.len() < want && last.elapsed() < idle {
            // SAFETY: zeroed sockaddr_ll filled by recvfrom.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: buf and sa are valid for the sizes passed.
            let n = unsafe {
                libc::recvfrom(self.fd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0, &mut sa as *mut _ as *mut libc::sockaddr, &mut len)
            };
            if n < 0 || sa.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let f = &buf[..n as usize];
            if f.windows(marker.len()).any(|w| w == marker) {
                got.push(f.to_vec());
                last = Instant::now();
            }
        }
        got
    }
}

/// A UDP frame from a to b (to an address nobody owns, so a's kernel,
/// seeing the answer, drops it quietly) of `len` bytes with a marker and
/// its sequence number in the payload.
fn marked_frame(p: &Pair, marker: &[u8], seq: u32, len: usize) -> Vec<u8> {
    let mut payload = marker.to_vec();
    payload.extend(seq.to_be_bytes());
    PacketBuilder::ethernet(p.a_mac, p.b_mac)
        .ipv4("198.18.0.1".parse().unwrap(), "198.18.0.99".parse().unwrap())
        .udp(4000, 4001)
        .payload(&payload)
        .frame_len(len)
        .build()
}

#[test]
fn l2fwd_returns_every_byte_for_every_size() {
    let p = pair(1);
    let raw = Raw::open(&p.a, &p.a_if);
    let nf = start(&p, "l2fwd", &["--copy"]);
    let marker = b"xnf-l2fwd-test";
    // Wire sizes 64..=1518 (FCS included): the frames are 4 bytes shorter.
    let sizes: Vec<usize> = [64, 65, 66, 100, 127, 128, 255, 256, 511, 512, 1000, 1023, 1024, 1280, 1500, 1517, 1518].to_vec();
    let (mut sent, mut got, mut short) = (Vec::new(), Vec::new(), Vec::new());
    // Twenty frames of a size at a time, each burst answered before the
    // next: 340 frames back to back can overflow the copy-mode socket's
    // rings on a busy machine (CI lost 7), and this test is about bytes.
    for (seq, &size) in sizes.iter().enumerate() {
        for k in 0..20 {
            let f = marked_frame(&p, marker, (seq * 100 + k) as u32, size - 4);
            raw.send(&f);
            sent.push(f);
        }
        let back = raw.recv_marked(marker, 20, Duration::from_secs(2));
        if back.len() < 20 {
            short.push((size, back.len()));
        }
        got.extend(back);
    }
    let r = report(nf);
    assert_eq!(got.len(), sent.len(), "frames back through l2fwd; (size, frames back) of the short bursts: {short:?}; {}", r["sockets"]);
    let (bytes_sent, bytes_got): (usize, usize) = (sent.iter().map(Vec::len).sum(), got.iter().map(Vec::len).sum());
    assert_eq!(bytes_got, bytes_sent, "bytes back through l2fwd");
    // Content: each answer is its frame with the MAC addresses swapped (order kept on one queue).
    for (i, (s, g)) in sent.iter().zip(&got).enumerate() {
        let mut want = s.clone();
        xnf_afxdp::nfs::swap_macs(&mut want);
        assert_eq!(g, &want, "frame {i} ({} bytes) came back changed", s.len());
    }
    let s = &r["sockets"][0];
    assert!(s["rx_packets"].as_u64().unwrap() >= sent.len() as u64, "{s}");
    assert_eq!(s["rx_packets"], s["tx_packets"], "l2fwd sends what it receives: {s}");
    assert_eq!(s["zero_copy"], false, "veth is copy mode");
}

#[test]
fn txonly_sends_exactly_count_frames_in_order() {
    let p = pair(1);
    let raw = Raw::open(&p.a, &p.a_if);
    let nf = start(&p, "txonly", &["--count", "1000", "--size", "128", "--dst-mac", &p.a_mac.to_string()]);
    // UDP 1024 -> 9, as txonly sends (b's kernel sends IPv6 ND frames too).
    let got = raw.recv_marked(&[0x04, 0x00, 0x00, 0x09], 1000, Duration::from_secs(1));
    let r = report(nf);
    assert_eq!(got.len(), 1000, "txonly frames at a");
    for (i, f) in got.iter().enumerate() {
        assert_eq!(f.len(), 124, "frame {i}: 128 bytes on the wire");
        assert_eq!(&f[42..46], &(i as u32).to_be_bytes(), "frame {i}: sequence number");
        let parsed = xnf_packet::parse(f).unwrap();
        assert_eq!(parsed.dst_port(), Some(9));
    }
    assert_eq!(r["sockets"][0]["tx_packets"], 1000);
}

#[test]
fn only_the_selected_traffic_leaves_the_kernel() {
    let p = pair(1);
    // b's kernel keeps a UDP socket on port 6000 and answers ARP itself.
    let b_sock = xnf_testrun::cli::udp_receiver(&p.b, "198.18.0.2:6000".parse().unwrap());
    b_sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let nf = start(&p, "rxdrop", &["--match", "proto=udp,dport=5000"]);
    let a_sock = p.a.run(|| UdpSocket::bind("198.18.0.1:0")).unwrap().unwrap();
    let to = |port: u16| SocketAddr::from(([198, 18, 0, 2], port));
    for i in 0..200u32 {
        a_sock.send_to(&i.to_be_bytes(), to(5000)).unwrap();
        if i % 4 == 0 {
            a_sock.send_to(&i.to_be_bytes(), to(6000)).unwrap();
        }
    }
    // A fence: one queue takes the frames in order, so when the kernel's
    // socket has it, every datagram to 5000 is in the AF_XDP socket's ring
    // (processed when the NF stops, if not before).
    a_sock.send_to(b"fence", to(6000)).unwrap();
    let mut kernel_got = 0;
    let mut buf = [0u8; 64];
    while let Ok(n) = b_sock.recv_from(&mut buf).map(|(n, _)| n) {
        if &buf[..n] == b"fence" {
            break;
        }
        kernel_got += 1;
    }
    let r = report(nf);
    assert_eq!(kernel_got, 50, "b's kernel socket on 6000 gets its datagrams, then the fence");
    assert_eq!(r["sockets"][0]["rx_packets"], 200, "exactly the UDP to 5000 went to user space: {r}");
    let sel: std::collections::HashMap<String, u64> =
        r["selector"].as_array().unwrap().iter().map(|x| (x[0].as_str().unwrap().to_string(), x[1].as_u64().unwrap())).collect();
    assert_eq!(sel["to-user"], 200);
    assert!(sel["no-match"] >= 50, "the rest was the kernel's: {sel:?}");
    assert!(sel["non-ip"] >= 1, "ARP was the kernel's (a resolved b): {sel:?}");
    assert!(!xdp_attached(&p.b, &p.b_if), "the program is detached when the NF stops");
}

#[test]
fn echo_answers_a_kernel_udp_socket() {
    let p = pair(1);
    let nf = start(&p, "echo", &["--match", "proto=udp,dport=7"]);
    let a_sock = p.a.run(|| UdpSocket::bind("198.18.0.1:0")).unwrap().unwrap();
    a_sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 2048];
    for i in 0..100u32 {
        let msg = format!("ping {i} {}", "x".repeat(i as usize * 10));
        a_sock.send_to(msg.as_bytes(), SocketAddr::from(([198, 18, 0, 2], 7))).unwrap();
        let (n, from) = a_sock.recv_from(&mut buf).expect("an answer from echo");
        assert_eq!((&buf[..n], from), (msg.as_bytes(), SocketAddr::from(([198, 18, 0, 2], 7))), "answer {i}");
    }
    let r = report(nf);
    assert_eq!(r["sockets"][0]["tx_packets"], 100);
}

#[test]
fn two_queues_share_one_umem() {
    let p = pair(2);
    // a transmits on the queue of its CPU (XPS), so b receives on both.
    p.a.exec(&["sh", "-c", &format!("echo 1 > /sys/class/net/{0}/queues/tx-0/xps_cpus && echo 2 > /sys/class/net/{0}/queues/tx-1/xps_cpus", p.a_if)]).unwrap();
    let raw = Raw::open(&p.a, &p.a_if);
    let nf = start(&p, "l2fwd", &["--queue", "0,1", "--copy"]);
    let marker = b"xnf-2q";
    // Sent from both CPUs, so both of b's queues receive.
    let ncpu = std::thread::available_parallelism().unwrap().get();
    for cpu in 0..ncpu.min(2) {
        let f = |seq| marked_frame(&p, marker, seq, 100);
        let frames: Vec<Vec<u8>> = (0..200).map(|k| f((cpu * 1000 + k) as u32)).collect();
        let raw_fd = &raw;
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut set = nix::sched::CpuSet::new();
                set.set(cpu).unwrap();
                nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
                for fr in &frames {
                    raw_fd.send(fr);
                }
            });
        });
    }
    let got = raw.recv_marked(marker, 400.min(200 * ncpu), Duration::from_secs(2));
    let r = report(nf);
    assert_eq!(got.len(), 200 * ncpu.min(2));
    let socks = r["sockets"].as_array().unwrap();
    assert_eq!(socks.len(), 2);
    let total: u64 = socks.iter().map(|s| s["rx_packets"].as_u64().unwrap()).sum();
    assert!(total >= 200 * ncpu.min(2) as u64, "{r}");
    if ncpu >= 2 {
        assert!(socks.iter().all(|s| s["rx_packets"].as_u64().unwrap() >= 200), "each queue received its CPU's frames: {r}");
    }
}

#[test]
fn settings_the_kernel_refuses_are_named() {
    let p = pair(1);
    for (args, want) in [
        (vec!["--zero-copy"], "zero-copy"),
        (vec!["--queue", "3"], "queue 3"),
        (vec!["--rx-ring", "1000"], "--rx-ring 1000"),
        (vec!["--frame-size", "1000"], "--frame-size 1000"),
        (vec!["--headroom", "4000"], "--headroom 4000"),
        (vec!["--batch", "0"], "--batch 0"),
        (vec!["--match", "colour=red"], "--match colour=red"),
        (vec!["--size", "2000"], "--size 2000"),
    ] {
        let mut a = vec!["afxdp", "run", "rxdrop", "--iface", p.b_if.as_str(), "--seconds", "1"];
        a.extend(&args);
        let e = xnf_err(&p.b, &a);
        assert!(e.contains(want), "{args:?}: {e}");
        assert!(!xdp_attached(&p.b, &p.b_if), "{args:?} left a program attached");
    }
    let e = xnf_err(&p.b, &["afxdp", "run", "rxdrop", "--iface", "xnf-nonexistent", "--seconds", "1"]);
    assert!(e.contains("no interface"), "{e}");
}

#[test]
fn live_statistics_show_rates_ring_events_and_wakeups() {
    let p = pair(1);
    let out = Command::new(xnf_testrun::cli::xnf_bin())
        .args(["--netns", p.b.name(), "afxdp", "run", "rxdrop", "--iface", &p.b_if, "--seconds", "1.2", "--interval", "0.25"])
        .output()
        .expect("running xnf afxdp run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("q0:")).collect();
    assert!(lines.len() >= 3, "a line per interval: {err}");
    for l in &lines {
        for want in ["pps", "ring-full", "fill-empty", "wakeups rx", "polls"] {
            assert!(l.contains(want), "{want} missing: {l}");
        }
    }
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("UMEM: 8192 frames") && report.contains("balanced"), "{report}");
}
