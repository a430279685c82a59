//! `xnf filter` on real veths (gen -> dut -> sink), with real traffic,
//! counted on both sides: at the filter's counters on dut and at sockets in
//! sink. The filter sits on dut's gen-facing interface, in front of the
//! router where a test attaches it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use xnf_testrun::cli::{count_received, send_paced, udp_receiver, wait_for, xnf, xnf_err, xnf_ip_netns_exec_ok, xnf_ok, RoutedLine, TempFiles};

/// The line with the filter on dut's ingress; detached on drop.
struct Filtered {
    r: RoutedLine,
}

impl Filtered {
    fn new(router: bool) -> Filtered {
        let mut r = RoutedLine::new(&[]);
        if router {
            r.attach(&[]);
        }
        r.resolve_sink();
        xnf_ok(r.dut(), &["filter", "attach", &r.line.dut_gen_if]);
        Filtered { r }
    }
    fn filter(&self, args: &[&str]) -> String {
        let mut a = vec!["filter"];
        a.extend(args);
        xnf_ok(self.r.dut(), &a)
    }
    fn stats(&self) -> Value {
        serde_json::from_str(&self.filter(&["stats", "--json"])).unwrap()
    }
    fn status(&self) -> Value {
        serde_json::from_str(&self.filter(&["status", "--json"])).unwrap()
    }
    fn counter(&self, name: &str) -> u64 {
        self.stats()["counters"][name].as_u64().unwrap()
    }
    /// `(packets, dropped)` of the rule named `name`.
    fn rule(&self, name: &str) -> (u64, u64) {
        let s = self.stats();
        let r = s["rules"].as_array().unwrap().iter().find(|r| r["name"] == name).cloned().unwrap_or_else(|| panic!("rule {name} in {s}"));
        (r["packets"].as_u64().unwrap(), r["dropped"].as_u64().unwrap())
    }
    /// Sends `n` datagrams from gen to sink's `port` and counts arrivals.
    fn send(&self, v6: bool, port: u16, n: usize) -> usize {
        let rx = self.r.sink_socket(v6, port);
        let tx = self.r.gen_socket(v6);
        let to = self.r.sink_addr(v6, port);
        std::thread::scope(|s| {
            let receiver = s.spawn(|| count_received(&rx, n));
            send_paced(&tx, to, n);
            receiver.join().unwrap()
        })
    }
}

impl Drop for Filtered {
    fn drop(&mut self) {
        let _ = xnf(self.r.dut(), &["filter", "detach", &self.r.line.dut_gen_if]);
    }
}

const PORT_RULES: &str = "default = \"pass\"\n\n[[rule]]\nname = \"udp-9100\"\nproto = \"udp\"\ndport = 9100\naction = \"drop\"\n";

#[test]
fn a_rule_drops_exactly_its_traffic_and_the_router_forwards_the_rest_in_the_same_xdp_run() {
    let f = Filtered::new(true);
    let files = TempFiles::new("filter-exact");
    f.filter(&["apply", &files.write("rules.toml", PORT_RULES)]);
    let redirected = f.r.redirected();
    let fw4 = f.r.forw_v4();

    assert_eq!(f.send(false, 9100, 300), 0, "datagrams to the dropped port arrived");
    assert_eq!(f.send(false, 9101, 300), 300, "datagrams to another port were lost");
    // A rule without a family or prefix holds for both.
    assert_eq!(f.send(true, 9100, 300), 0, "IPv6 datagrams to the dropped port arrived");
    let (packets, dropped) = f.rule("udp-9100");
    assert_eq!((packets, dropped), (600, 600), "the rule took other traffic, or missed some");
    let top = f.stats()["top_sources"].clone();
    for (src, n) in [(f.r.line.gen_v4.to_string(), 300), (f.r.line.gen_v6.to_string(), 300)] {
        let row =
            top.as_array().unwrap().iter().find(|t| t["source"] == src.as_str()).unwrap_or_else(|| panic!("{src} not among the top dropped sources: {top}"));
        assert_eq!(row["drops"], n, "drops counted against {src}");
    }
    assert_eq!(f.r.redirected() - redirected, 300, "what the filter passed did not continue to the router in XDP");
    assert_eq!(f.r.forw_v4(), fw4, "the kernel forwarded what XDP should have");
}

#[test]
fn rate_limit_admits_the_configured_rate_within_ten_percent_over_two_seconds() {
    const PPS: u64 = 500;
    const BURST: u64 = 50;
    let f = Filtered::new(true);
    let files = TempFiles::new("filter-rate");
    let rules = format!("[[rule]]\nname = \"limited\"\nproto = \"udp\"\ndport = 9200\naction = \"rate-limit\"\npps = {PPS}\nburst = {BURST}\n");
    f.filter(&["apply", &files.write("rules.toml", &rules)]);
    let tx = f.r.gen_socket(false);
    let to = f.r.sink_addr(false, 9200);
    // Offer well above the rate for two seconds (paced so the veth ring
    // never overflows: the filter must see every frame).
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < Duration::from_secs(2) {
        send_paced(&tx, to, 8);
        sent += 8;
    }
    let secs = t0.elapsed().as_secs_f64();
    wait_for("the filter to count every datagram", || f.rule("limited").0 == sent);
    let (packets, dropped) = f.rule("limited");
    let admitted = (packets - dropped) as f64;
    let want = BURST as f64 + PPS as f64 * secs;
    assert!(packets as f64 > 1.5 * want, "offered only {packets} datagrams in {secs:.2} s: too few to test a {PPS} pps limit");
    assert!((admitted - want).abs() <= 0.1 * want, "admitted {admitted} of {packets} in {secs:.2} s; want {want:.0} ± 10 %");
}

/// Adds `n` more IPv4 addresses to gen's interface (198.18.0.100 + i).
fn gen_sources(f: &Filtered, n: u8) -> Vec<Ipv4Addr> {
    (0..n)
        .map(|i| {
            let a = Ipv4Addr::new(198, 18, 0, 100 + i);
            f.r.line.gen().addr_add(&f.r.line.gen_if, &format!("{a}/24")).unwrap();
            a
        })
        .collect()
}

#[test]
fn a_blocklist_reload_under_traffic_never_admits_a_listed_source_nor_drops_an_unlisted_one() {
    let f = Filtered::new(true);
    let [listed, unlisted]: [Ipv4Addr; 2] = gen_sources(&f, 2).try_into().unwrap();
    let files = TempFiles::new("filter-reload");
    // Two lists that differ (so each reload fills a new trie) but both
    // hold `listed` and neither `unlisted`; padding makes a reload take time.
    let pad = |third: u8| (0..=255u8).map(|i| format!("203.0.{third}.{i}\n")).collect::<String>();
    let list_a = format!("{listed}\n{}", pad(113));
    let list_b = format!("{listed}/32\n{}", pad(114));
    let rules = "[lists]\nbad = \"list.txt\"\n[[rule]]\nname = \"listed\"\nsrc = \"@bad\"\naction = \"drop\"\n";
    files.write("list.txt", &list_a);
    let path = files.write("rules.toml", rules);
    f.filter(&["apply", &path]);

    let rx = udp_receiver(f.r.line.sink(), f.r.sink_addr(false, 9300));
    let socket = |src: Ipv4Addr| f.r.line.gen().run(move || UdpSocket::bind(SocketAddr::new(src.into(), 0))).unwrap().unwrap();
    let (tx_listed, tx_unlisted) = (socket(listed), socket(unlisted));
    let (full_buffer, before_dut) = (socket_buffer_drops(&f), f.r.dropped_before_dut());
    // Reload, alternating the lists, while the traffic flows.
    let (sent, got) = stream_while(&rx, &[&tx_listed, &tx_unlisted], f.r.sink_addr(false, 9300), 6, |i| {
        files.write("list.txt", if i % 2 == 0 { &list_b } else { &list_a });
        f.filter(&["apply", &path]);
    });
    // The filter's own count first: it dropped exactly the listed
    // source's datagrams; then what arrived.
    assert_eq!(
        f.rule("listed"),
        (sent as u64, sent as u64),
        "the list rule dropped other traffic or missed some ({} dropped on gen's veth before dut)",
        f.r.dropped_before_dut() - before_dut
    );
    let dropped = (socket_buffer_drops(&f) - full_buffer) as usize;
    assert_eq!(
        got[1] + dropped,
        sent,
        "an unlisted source's datagrams were lost after the filter passed them ({dropped} dropped by the receiving socket's full buffer)"
    );
    assert_eq!(got[0], 0, "a listed source got through during a reload");
}

/// Datagrams the sink's kernel dropped because a socket's buffer was full.
fn socket_buffer_drops(f: &Filtered) -> u64 {
    f.r.line.sink().snmp().unwrap().value("Udp", "RcvbufErrors").unwrap()
}

/// Sends datagrams to `to` from each of `senders` (eight at a time from
/// each, paced) while `change` runs `rounds` times (a round may take long
/// in the kernel matrix's emulated guests: the traffic lasts as long as
/// they do). Returns how many each sent, and how many arrived at `rx`
/// from each sender's address: until each one's all came, or nothing did
/// for two seconds.
fn stream_while(rx: &UdpSocket, senders: &[&UdpSocket], to: SocketAddr, rounds: usize, mut change: impl FnMut(usize)) -> (usize, Vec<usize>) {
    let done = AtomicUsize::new(0);
    let total = AtomicUsize::new(usize::MAX);
    let addrs: Vec<IpAddr> = senders.iter().map(|s| s.local_addr().unwrap().ip()).collect();
    std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            let mut got = vec![0; addrs.len()];
            let mut buf = [0u8; 64];
            rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            while got.iter().any(|&g| g < total.load(Ordering::SeqCst)) {
                let Ok((_, from)) = rx.recv_from(&mut buf) else { break };
                if let Some(i) = addrs.iter().position(|a| *a == from.ip()) {
                    got[i] += 1;
                }
            }
            got
        });
        let sender = s.spawn(|| {
            let mut sent = 0;
            while done.load(Ordering::SeqCst) < rounds {
                for tx in senders {
                    send_paced(tx, to, 8);
                }
                sent += 8;
            }
            total.store(sent, Ordering::SeqCst);
            sent
        });
        for i in 0..rounds {
            change(i);
            done.fetch_add(1, Ordering::SeqCst);
        }
        (sender.join().unwrap(), receiver.join().unwrap())
    })
}

#[test]
fn attaching_and_detaching_the_filter_under_traffic_keeps_every_frame_in_xdp() {
    let f = Filtered::new(true);
    let files = TempFiles::new("filter-stage");
    f.filter(&["apply", &files.write("rules.toml", PORT_RULES)]);
    let dut_gen = f.r.line.dut_gen_if.clone();
    let (redirected, fw4) = (f.r.redirected(), f.r.forw_v4());
    // The traffic flows until the filter has come and gone four times.
    let (rx, tx) = (f.r.sink_socket(false, 9101), f.r.gen_socket(false));
    let (full_buffer, before_dut) = (socket_buffer_drops(&f), f.r.dropped_before_dut());
    let (sent, got) = stream_while(&rx, &[&tx], f.r.sink_addr(false, 9101), 4, |_| {
        xnf_ok(f.r.dut(), &["filter", "detach", &dut_gen]);
        xnf_ok(f.r.dut(), &["filter", "attach", &dut_gen]);
    });
    let arrived = got[0];
    assert!(sent > 0);
    // What gen's veth dropped never reached dut (its ring full while a
    // loaded machine left dut's receive waiting): nothing to judge there.
    let before_dut = (f.r.dropped_before_dut() - before_dut) as usize;
    assert!(before_dut * 100 < sent, "{before_dut} of {sent} datagrams dropped on gen's veth before dut: too few reached it");
    let reached = sent - before_dut;
    assert_eq!(f.r.redirected() - redirected, reached as u64, "frames left XDP while the filter came and went ({before_dut} dropped before dut)");
    // On a busy machine the receiving thread can fall behind: what its
    // full socket buffer dropped (counted by the sink's kernel) arrived too.
    let dropped = (socket_buffer_drops(&f) - full_buffer) as usize;
    assert_eq!(
        arrived + dropped,
        reached,
        "datagrams were lost while the filter came and went ({dropped} dropped by the receiving socket's full buffer, {before_dut} before dut)"
    );
    assert_eq!(f.r.forw_v4(), fw4, "the kernel forwarded frames: a moment without the router");
}

#[test]
fn confirm_within_rolls_back_unless_confirmed() {
    let f = Filtered::new(false);
    let files = TempFiles::new("filter-confirm");
    let strict = files.write("strict.toml", PORT_RULES);
    let open = files.write("open.toml", "default = \"pass\"\n");
    f.filter(&["apply", &strict]);
    assert_eq!(f.send(false, 9100, 50), 0);

    let out = f.filter(&["apply", &open, "--confirm-within", "1"]);
    assert!(out.contains("unless `xnf filter confirm`"), "{out}");
    assert!(f.status()["pending_rollback_s"].is_u64(), "no pending change in status");
    wait_for("the unconfirmed change to be rolled back", || f.status()["rules_from"] == strict.as_str());
    assert!(f.status()["pending_rollback_s"].is_null());
    assert_eq!(f.send(false, 9100, 50), 0, "the rolled-back rule does not drop again");

    f.filter(&["apply", &open, "--confirm-within", "60"]);
    let err = xnf_err(f.r.dut(), &["filter", "apply", &strict]);
    assert!(err.contains("awaits confirmation"), "{err}");
    f.filter(&["confirm"]);
    assert!(f.status()["pending_rollback_s"].is_null());
    assert_eq!(f.status()["rules_from"], open.as_str());
    assert_eq!(f.send(false, 9100, 50), 50, "the confirmed rules are not live");
    let err = xnf_err(f.r.dut(), &["filter", "confirm"]);
    assert!(err.contains("no change awaits confirmation"), "{err}");
}

#[test]
fn bad_rule_files_give_one_clear_error_and_change_nothing() {
    let f = Filtered::new(false);
    let files = TempFiles::new("filter-bad");
    let good = files.write("good.toml", PORT_RULES);
    f.filter(&["apply", &good]);
    files.write("list.txt", "192.0.2.0/24\n198.51.100.300\n");
    let cases: &[(&str, &str, &str)] = &[
        (
            "field.toml",
            "[[rule]]\nproto = \"udp\"\ndport = 9100\naction = \"drop\"\n\n[[rule]]\nname = \"x\"\ndport = 7\naction = \"drop\"\n",
            "line 6: x: dport: ports need proto",
        ),
        ("action.toml", "[[rule]]\naction = \"reject\"\n", "line 1: rule 1: action: \"reject\" is not"),
        ("list.toml", "[lists]\nl = \"list.txt\"\n[[rule]]\nsrc = \"@l\"\naction = \"drop\"\n", "list.txt: line 2"),
        ("missing.toml", "[lists]\nl = \"nope.txt\"\n[[rule]]\nsrc = \"@l\"\naction = \"drop\"\n", "nope.txt"),
        ("syntax.toml", "[[rule]\naction = \"drop\"\n", "syntax.toml"),
        ("unknown.toml", "[[rule]]\nport = 1\naction = \"drop\"\n", "unknown field"),
    ];
    let before = f.status();
    for (name, text, want) in cases {
        let path = files.write(name, text);
        let err = xnf_err(f.r.dut(), &["filter", "apply", &path]);
        assert!(err.contains(want), "{name}: {err:?} does not say {want:?}");
        assert!(err.contains(name) || err.contains("list.txt") || err.contains("nope.txt"), "{name}: the error names no file: {err}");
        assert_eq!(f.status().to_string(), before.to_string(), "{name} changed the filter's state");
    }
    assert_eq!(f.send(false, 9100, 50), 0, "the good rules stopped dropping after a bad file");
}

#[test]
fn capture_writes_sampled_drops_as_pcap_and_status_works_under_ip_netns_exec() {
    let f = Filtered::new(false);
    let files = TempFiles::new("filter-capture");
    f.filter(&["apply", &files.write("rules.toml", PORT_RULES)]);
    let pcap = files.dir().join("drops.pcap").display().to_string();
    let dut = f.r.dut();
    let other = files.dir().join("other.pcap");
    std::thread::scope(|s| {
        let c = s.spawn(|| xnf_ok(dut, &["filter", "capture", "-w", &pcap, "--rule", "1", "--count", "5", "--max-pps", "1000"]));
        // The capture creates its file once it holds the capture: a
        // second one now is refused before it creates anything.
        wait_for("the capture to start", || std::path::Path::new(&pcap).exists());
        let err = xnf_err(dut, &["filter", "capture", "-w", &other.display().to_string(), "--seconds", "1"]);
        assert!(err.contains("another `xnf filter capture` is running"), "{err}");
        assert!(!other.exists(), "the refused capture created its file");
        let err = xnf_err(dut, &["filter", "capture", "-w", &other.display().to_string(), "--rule", "2"]);
        assert!(err.contains("--rule 2: the applied rules are numbered 1 to 1"), "{err}");
        // Sends until the capture has its five frames.
        while !c.is_finished() {
            f.send(false, 9100, 8);
        }
        c.join().unwrap()
    });
    let data = std::fs::read(&pcap).unwrap();
    assert_eq!(u32::from_ne_bytes(data[0..4].try_into().unwrap()), 0xa1b2c3d4, "not a pcap file");
    let mut off = 24;
    let mut records = 0;
    while off + 16 <= data.len() {
        let caplen = u32::from_ne_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
        let frame = &data[off + 16..off + 16 + caplen];
        // Ethernet + IPv4 (no options) + UDP: destination port at 36.
        assert_eq!(u16::from_be_bytes([frame[36], frame[37]]), 9100, "a captured frame is not a dropped one");
        off += 16 + caplen;
        records += 1;
    }
    assert_eq!(records, 5);
    assert!(f.counter("captured") >= 5);
    let status = xnf_ip_netns_exec_ok(dut, &["filter", "status", "--json"]);
    assert!(status.contains(&f.r.line.dut_gen_if), "status under ip netns exec does not see the filter: {status}");
}

#[test]
fn concurrent_applies_each_apply_whole_and_the_last_one_is_live() {
    let f = Filtered::new(false);
    let files = TempFiles::new("filter-concurrent");
    files.write("list.txt", "203.0.113.0/24\n");
    let a = files.write("a.toml", PORT_RULES);
    let b = files.write("b.toml", "[lists]\nl = \"list.txt\"\n[[rule]]\nname = \"udp-9101\"\nproto = \"udp\"\ndport = 9101\naction = \"drop\"\n[[rule]]\nname = \"listed\"\nsrc = \"@l\"\naction = \"drop\"\n");
    let dut = f.r.dut();
    std::thread::scope(|s| {
        for i in 0..6 {
            let file = if i % 2 == 0 { &a } else { &b };
            s.spawn(move || xnf_ok(dut, &["filter", "apply", file]));
        }
    });
    // Whichever came last is live, whole: its rules, its drops.
    let live = f.status()["rules_from"].as_str().unwrap().to_string();
    let (dropped, passed) = if live == a { (9100, 9101) } else { (9101, 9100) };
    assert!(live == a || live == b, "{live}");
    assert_eq!(f.send(false, dropped, 50), 0, "{live} is live but its port is not dropped");
    assert_eq!(f.send(false, passed, 50), 50, "{live} is live but the other file's port is dropped");
    let names: Vec<String> = f.stats()["rules"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap().to_string()).collect();
    let want: &[&str] = if live == a { &["udp-9100", "(default)"] } else { &["udp-9101", "listed", "(default)"] };
    assert_eq!(names, want);
}

/// Connects from gen to an echo server in sink `n` times, each connection
/// sending a line and reading it back; returns how many came back whole.
fn echo_connections(f: &Filtered, v6: bool, port: u16, n: usize) -> usize {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let at = f.r.sink_addr(v6, port);
    let listener = f.r.line.sink().bind(move || TcpListener::bind(at)).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for conn in listener.incoming().take(n) {
                let Ok(mut c) = conn else { continue };
                let mut line = [0u8; 16];
                if let Ok(k) = c.read(&mut line) {
                    let _ = c.write_all(&line[..k]);
                }
            }
        });
        let mut ok = 0;
        for i in 0..n {
            let conn = f.r.line.gen().run(move || TcpStream::connect_timeout(&at, Duration::from_secs(10))).unwrap();
            let Ok(mut c) = conn else { break };
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let msg = format!("hello {i:>9}\n");
            let mut back = [0u8; 16];
            if !(c.write_all(msg.as_bytes()).is_ok() && c.read_exact(&mut back).is_ok() && back == msg.as_bytes()) {
                break; // the rest would fail the same way, slowly
            }
            ok += 1;
        }
        // Unblock the server if a connection failed.
        for _ in ok..n {
            let _ = f.r.line.sink().run(move || TcpStream::connect_timeout(&at, Duration::from_millis(100)));
        }
        ok
    })
}

/// dut's SYNPROXY counters, summed over CPUs: (SYNs it received, cookies
/// it found valid), from /proc/net/stat/synproxy.
fn synproxy_stats(f: &Filtered) -> (u64, u64) {
    let text = f.r.dut().run(|| std::fs::read_to_string("/proc/thread-self/net/stat/synproxy")).unwrap().unwrap();
    let head = text.lines().next().unwrap_or_default().split_whitespace();
    let col = |name: &str| head.clone().position(|h| h == name).unwrap_or_else(|| panic!("no {name} in {text}"));
    let (syn, valid) = (col("syn_received"), col("cookie_valid"));
    let sum = |c: usize| text.lines().skip(1).map(|l| u64::from_str_radix(l.split_whitespace().nth(c).unwrap_or("0"), 16).unwrap()).sum();
    (sum(syn), sum(valid))
}

#[test]
fn syn_cookies_answer_syns_in_xdp_and_the_kernels_synproxy_completes_the_connections() {
    const N: usize = 20;
    let f = Filtered::new(false);
    f.r.dut().enable_forwarding().unwrap();
    let files = TempFiles::new("filter-cookies");
    let (s4, s6) = (f.r.line.sink_v4, f.r.line.sink_v6);
    let rules = format!(
        "[[rule]]\nname = \"web4\"\ndst = \"{s4}\"\nproto = \"tcp\"\ndport = 8080\naction = \"syn-cookie\"\n\
         [[rule]]\nname = \"web6\"\ndst = \"{s6}\"\nproto = \"tcp\"\ndport = 8080\naction = \"syn-cookie\"\nmss = 1400\n"
    );
    let loose_before = f.r.dut().sysctl_get("net.netfilter.nf_conntrack_tcp_loose").ok();
    f.filter(&["apply", &files.write("rules.toml", &rules)]);
    let table = f.r.dut().command("nft").args(["list", "table", "inet", "xnf_filter_synproxy"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(table.contains("synproxy mss 1460") && table.contains("synproxy mss 1380"), "the SYNPROXY table:\n{table}");
    assert_eq!(f.r.dut().sysctl_get("net.netfilter.nf_conntrack_tcp_loose").unwrap().trim(), "0");

    let (syns0, valid0) = synproxy_stats(&f);
    for v6 in [false, true] {
        if v6 {
            // The kernel's nft synproxy checks every segment's checksum
            // with its IPv4 function, IPv6 ones too (nft_synproxy.c:
            // nf_ip_checksum): an IPv6 ACK whose checksum is not yet
            // verified (CHECKSUM_NONE, as gen's full checksums arrive
            // through a veth) is dropped. Partial checksums, like a local
            // sender's or a NIC's verified ones, are not checked again.
            f.r.line.gen().set_offload(&f.r.line.gen_if, xnf_netns::Offload::TxChecksum, true).unwrap();
        }
        let let_through = || f.counter("cookie-ok") + f.counter("cookie-conn") + f.counter("cookie-unchecked");
        let (tx, ok, through) = (f.counter("tx"), f.counter("cookie-ok"), let_through());
        assert_eq!(echo_connections(&f, v6, 8080, N), N, "connections through the cookies failed (v6 {v6}): {}", f.stats());
        // Every SYN was answered from XDP (a retransmitted one again), and
        // every handshake completed with a valid cookie; the data and the
        // FINs then went to the kernel too: as segments of connections
        // conntrack knows, or (without its lookup) unchecked or, while the
        // bytes each way are equal, still carrying a valid cookie.
        assert!(f.counter("tx") - tx >= N as u64, "SYN-ACKs sent from XDP: {}", f.stats());
        assert!(f.counter("cookie-ok") - ok >= N as u64, "valid cookies: {}", f.stats());
        assert!(let_through() - through >= 3 * N as u64, "later segments: {}", f.stats());
    }
    assert_eq!(f.counter("cookie-drop"), 0, "a segment of these connections was dropped: {}", f.stats());
    // The kernel's SYNPROXY on dut never saw a SYN (it would have answered
    // one itself), and it found each handshake's cookie valid.
    let (syns, valid) = synproxy_stats(&f);
    assert_eq!(syns - syns0, 0, "SYNs reached dut's kernel");
    assert!(valid - valid0 >= 2 * N as u64, "cookies the kernel's SYNPROXY found valid: {}", valid - valid0);

    // Without syn-cookie rules, the kernel's side goes, and the setting is back.
    f.filter(&["apply", &files.write("none.toml", PORT_RULES)]);
    let gone = f.r.dut().command("nft").args(["list", "table", "inet", "xnf_filter_synproxy"]).output().unwrap();
    assert!(!gone.status.success(), "the SYNPROXY table outlived its rules");
    let loose = f.r.dut().sysctl_get("net.netfilter.nf_conntrack_tcp_loose").unwrap();
    assert_eq!(Some(loose.trim()), loose_before.as_deref().map(str::trim).or(Some("1")), "nf_conntrack_tcp_loose was not put back");
}
