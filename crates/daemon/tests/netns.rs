//! `xnf daemon` on real veths (gen -> dut -> sink), through the real
//! binary: it adopts what runs without a frame lost or slow-pathed, serves
//! metrics that `promtool` accepts and that move by what was sent,
//! reloads on a changed file and on SIGHUP, keeps the running
//! configuration and the traffic when the new file is bad, and once
//! killed with -9 the data plane forwards on.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use xnf_netns::Netns;
use xnf_testrun::cli::{wait_for, xnf_bin, xnf_ok, ChildGuard, RoutedLine, TempFiles};

/// A port of its own per test (tests of one binary run in parallel, each
/// in its own namespaces, so one port would do; this names them apart).
fn box_file(r: &RoutedLine, drop_port: u16, listen_port: u16) -> String {
    let (g, s) = (&r.line.dut_gen_if, &r.line.dut_sink_if);
    format!(
        "[daemon]\nlisten = \"127.0.0.1:{listen_port}\"\n\n[router]\ninterfaces = [\"{g}\", \"{s}\"]\nfib = \"cache\"\n\n\
         [filter]\ninterfaces = [\"{g}\"]\n[filter.rules]\n[[filter.rules.rule]]\nname = \"no-{drop_port}\"\nproto = \"udp\"\n\
         dport = {drop_port}\naction = \"drop\"\n\n[lb]\ninterfaces = [\"{g}\"]\n[[lb.services.service]]\nname = \"web\"\n\
         vip = \"198.18.100.1\"\nproto = \"tcp\"\nport = 80\n[[lb.services.service.backend]]\naddress = \"198.18.0.11\"\n"
    )
}

/// `xnf --netns dut daemon`, its log in a file; killed when dropped.
struct Daemon {
    child: ChildGuard,
    log: std::path::PathBuf,
}

impl Daemon {
    /// Each daemon its own log (a second one in a test must not truncate
    /// a file an adopted child of the first still writes to).
    fn start(ns: &Netns, file: &str, files: &TempFiles) -> Daemon {
        Self::start_bin(&xnf_bin(), ns, file, files)
    }

    /// Started from binary `bin` (another build, for upgrades).
    fn start_bin(bin: &std::path::Path, ns: &Netns, file: &str, files: &TempFiles) -> Daemon {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = files.dir().join(format!("daemon-{n}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child =
            Command::new(bin).args(["--netns", ns.name(), "daemon", "--config", file]).stdout(Stdio::null()).stderr(out).spawn().expect("starting xnf daemon");
        Daemon { child: ChildGuard(child), log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `cond` for up to 300 s: the daemon's applies load programs
    /// through the verifier, which a software-emulated guest of the kernel
    /// matrix runs ten times slower than the host. Fails at once, with the
    /// daemon's log, if the daemon exits.
    fn wait(&mut self, what: &str, mut cond: impl FnMut() -> bool) {
        let t0 = std::time::Instant::now();
        while !cond() {
            if let Ok(Some(status)) = self.child.0.try_wait() {
                panic!("the daemon exited ({status}) while waiting for {what}:\n{}", self.log());
            }
            assert!(t0.elapsed().as_secs() < 300, "timed out waiting for {what}; the daemon's log:\n{}", self.log());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc_kill(self.child.0.id() as i32, sig) }, 0);
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// GET `path` from 127.0.0.1:`port` in `ns`: (status, body).
fn get(ns: &Netns, port: u16, path: &str) -> Option<(u16, String)> {
    let path = path.to_string();
    ns.run(move || -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, text.split_once("\r\n\r\n")?.1.to_string()))
    })
    .ok()
    .flatten()
}

/// The samples of a Prometheus text page: `name{labels}` -> value.
fn samples(page: &str) -> BTreeMap<String, f64> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

fn metric(page: &str, key: &str) -> f64 {
    *samples(page).get(key).unwrap_or_else(|| panic!("no sample {key} in:\n{page}"))
}

#[test]
fn metrics_move_by_what_was_sent_and_promtool_accepts_them() {
    let r = RoutedLine::new(&[]);
    let files = TempFiles::new("daemon");
    let (port, drop_port) = (9461, 9999);
    let f = files.write("xnf.toml", &box_file(&r, drop_port, port));
    let mut d = Daemon::start(r.dut(), &f, &files);
    d.wait("the daemon to be ready", || get(r.dut(), port, "/readyz").is_some_and(|(c, _)| c == 200));
    assert_eq!(get(r.dut(), port, "/healthz").map(|(c, _)| c), Some(200));
    r.resolve_sink();
    let g = &r.line.dut_gen_if;
    let redirect = format!("xnf_router_packets_total{{interface=\"{g}\",verdict=\"redirect\"}}");
    let dropped = format!("xnf_filter_rule_dropped_packets_total{{rule=\"no-{drop_port}\"}}");
    let (_, before) = get(r.dut(), port, "/metrics").unwrap();
    assert_eq!(r.send_udp(false, 100), 100);
    let rx = r.sink_socket(false, drop_port);
    let tx = r.gen_socket(false);
    xnf_testrun::cli::send_paced(&tx, r.sink_addr(false, drop_port), 50);
    assert_eq!(xnf_testrun::cli::count_received(&rx, 0), 0, "the filter let its port through");
    let (code, after) = get(r.dut(), port, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert_eq!(metric(&after, &redirect) - metric(&before, &redirect), 100.0, "redirects counted");
    assert_eq!(metric(&after, &dropped) - metric(&before, &dropped), 50.0, "the rule's drops counted");
    assert_eq!(metric(&after, "xnf_build_info{version=\"0.1.0\"}"), 1.0);
    assert!(after.contains("xnf_lb_service_packets_total{service=\"web\"}") && after.contains("xnf_lb_conntrack_entries"), "{after}");
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package: make test installs it)");
    promtool.stdin.take().unwrap().write_all(after.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(out.status.success(), "promtool check metrics: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    drop(d);
    xnf_ok(r.dut(), &["apply", &files.write("empty.toml", "")]);
}

#[test]
fn reloads_keep_traffic_and_a_bad_file_keeps_the_running_configuration() {
    let r = RoutedLine::new(&[]);
    let files = TempFiles::new("daemon");
    let port = 9462;
    let f = files.write("xnf.toml", &box_file(&r, 9999, port));
    let mut d = Daemon::start(r.dut(), &f, &files);
    d.wait("the daemon to be ready", || get(r.dut(), port, "/readyz").is_some_and(|(c, _)| c == 200));
    r.resolve_sink();
    // A changed file is applied by itself.
    std::fs::write(&f, box_file(&r, 7777, port)).unwrap();
    d.wait("the changed file to be applied", || xnf_ok(r.dut(), &["show"]).contains("dport = 7777"));
    // SIGHUP with a file that does not check: logged, nothing changes.
    std::fs::write(&f, box_file(&r, 7777, port).replace("fib = \"cache\"", "fib = \"fast\"")).unwrap();
    d.signal(1);
    let log = d.log.clone();
    let logged = move || std::fs::read_to_string(&log).unwrap_or_default();
    d.wait("the bad file to be refused", || logged().contains("event=check result=error") && logged().contains("fast"));
    let shown = xnf_ok(r.dut(), &["show"]);
    assert!(shown.contains("dport = 7777") && shown.contains("fib = \"cache\""), "{shown}");
    assert_eq!(r.send_udp(false, 100), 100, "traffic after the refused reload");
    assert_eq!(get(r.dut(), port, "/readyz").map(|(c, _)| c), Some(200));
    // Killed with -9: the data plane forwards on, in XDP.
    d.signal(9);
    wait_for("the daemon to die", || get(r.dut(), port, "/healthz").is_none());
    let redir = r.redirected();
    assert_eq!(r.send_udp(false, 100), 100, "traffic without the daemon");
    assert_eq!(r.redirected() - redir, 100, "forwarded in XDP without the daemon");
    drop(d);
    xnf_ok(r.dut(), &["apply", &files.write("empty.toml", "")]);
}

#[test]
fn starting_on_what_runs_adopts_it_without_a_frame_lost_or_slow_pathed() {
    let r = RoutedLine::new(&[]);
    let files = TempFiles::new("daemon");
    let port = 9463;
    let f = files.write("xnf.toml", &box_file(&r, 9999, port));
    xnf_ok(r.dut(), &["apply", &f]);
    r.resolve_sink();
    let (redir, fw) = (r.redirected(), r.forw_v4());
    const N: usize = 20_000;
    let d = std::thread::scope(|s| {
        let traffic = s.spawn(|| r.send_udp(false, N));
        // Start it while the traffic flows.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut d = Daemon::start(r.dut(), &f, &files);
        d.wait("the daemon to be ready", || get(r.dut(), port, "/readyz").is_some_and(|(c, _)| c == 200));
        assert_eq!(traffic.join().unwrap(), N, "frames lost while the daemon started");
        d
    });
    assert!(d.log().contains("event=apply result=ok changes=0"), "the daemon changed something:\n{}", d.log());
    assert_eq!(r.redirected() - redir, N as u64, "every frame forwarded in XDP");
    // Not one of them took the kernel's path (the router's own `pass`
    // also counts the namespace's IPv6 neighbour discovery, which has
    // nothing to do with this traffic).
    assert_eq!(r.forw_v4(), fw, "the kernel forwarded some");
    drop(d);
    xnf_ok(r.dut(), &["apply", &files.write("empty.toml", "")]);
}

#[test]
fn an_interface_named_in_the_file_gets_its_functions_when_it_appears() {
    let r = RoutedLine::new(&[]);
    let files = TempFiles::new("daemon");
    let port = 9464;
    let text = box_file(&r, 9999, port).replace(&format!("\"{}\"]\nfib", r.line.dut_sink_if), &format!("\"{}\", \"xnfdlate0\"]\nfib", r.line.dut_sink_if));
    let f = files.write("xnf.toml", &text);
    let mut d = Daemon::start(r.dut(), &f, &files);
    d.wait("the daemon to be ready", || get(r.dut(), port, "/readyz").is_some_and(|(c, _)| c == 200));
    assert!(d.log().contains("xnfdlate0 does not exist (yet)"), "{}", d.log());
    assert!(!xnf_ok(r.dut(), &["show"]).contains("xnfdlate0"));
    r.dut().ip(&["link", "add", "xnfdlate0", "type", "veth", "peer", "name", "xnfdlate1"]).unwrap();
    r.dut().ip(&["link", "set", "xnfdlate0", "up"]).unwrap();
    d.wait("the router on the new interface", || xnf_ok(r.dut(), &["show"]).contains("xnfdlate0"));
    assert!(d.log().contains("cause=interfaces-changed"), "{}", d.log());
    drop(d);
    xnf_ok(r.dut(), &["apply", &files.write("empty.toml", "")]);
}

#[test]
fn decap_follows_the_namespaces_addresses() {
    let r = RoutedLine::new(&[]);
    let files = TempFiles::new("daemon");
    let port = 9465;
    let text = box_file(&r, 9999, port) + &format!("\n[decap]\ninterfaces = [\"{}\"]\n", r.line.dut_sink_if);
    let f = files.write("xnf.toml", &text);
    let mut d = Daemon::start(r.dut(), &f, &files);
    d.wait("the daemon to be ready", || get(r.dut(), port, "/readyz").is_some_and(|(c, _)| c == 200));
    let locals = || {
        let status: serde_json::Value = serde_json::from_str(&xnf_ok(r.dut(), &["lb", "decap", "status", "--json"])).unwrap();
        status["locals"].to_string()
    };
    assert!(!locals().contains("198.18.77.1"));
    r.dut().addr_add(&r.line.dut_sink_if, "198.18.77.1/24").unwrap();
    d.wait("decap to take the new address", || locals().contains("198.18.77.1"));
    assert!(d.log().contains("event=decap-locals added=1"), "{}", d.log());
    drop(d);
    xnf_ok(r.dut(), &["apply", &files.write("empty.toml", "")]);
}

/// The lb sends to its backends past the kernel's output path, so nothing
/// but the daemon moves a STALE neighbour it sends to towards a probe
/// (neigh_use.h): a backend that changes its MAC without telling anyone
/// is learnt again while the lb keeps sending to it, as the router's
/// follower does for the router (nf/router/tests/neigh.rs says how the
/// entry is made STALE and why the probe timers are shortened). Without
/// the daemon's part the entry stays STALE with the old MAC for ever.
#[test]
fn the_lb_keeps_the_backends_it_sends_to_confirmed() {
    let r = RoutedLine::new(&[]);
    let files = TempFiles::new("daemon");
    let port = 9466;
    let (g, s) = (&r.line.dut_gen_if, &r.line.dut_sink_if);
    for (key, value) in [("delay_first_probe_time", "1"), ("retrans_time_ms", "200")] {
        r.dut().sysctl_set(&format!("net.ipv4.neigh.{s}.{key}"), value).unwrap();
    }
    // The outer sources are not dut's own: frames the lb leaves to the
    // kernel while the neighbour is unresolved (FAILED after the probes
    // to the old MAC) are forwarded and resolve it; from one of dut's
    // addresses the kernel would drop them as martians.
    let (vip, backend) = ("198.18.100.1", r.line.sink_v4);
    r.line.gen().ip(&["route", "add", &format!("{vip}/32"), "via", &r.line.dut_gen_v4.to_string()]).unwrap();
    let text = format!(
        "[daemon]\nlisten = \"127.0.0.1:{port}\"\n\n[lb]\ninterfaces = [\"{g}\", \"{s}\"]\n[lb.services.encap]\nsource_v4 = \"198.18.255.0/24\"\n\
         [[lb.services.service]]\nname = \"udp\"\nvip = \"{vip}\"\nproto = \"udp\"\nmode = \"ipip\"\n[[lb.services.service.backend]]\naddress = \"{backend}\"\n"
    );
    let f = files.write("xnf.toml", &text);
    let mut d = Daemon::start(r.dut(), &f, &files);
    d.wait("the daemon to be ready", || get(r.dut(), port, "/readyz").is_some_and(|(c, _)| c == 200));
    let log = d.log.clone();
    d.wait("the lb's neighbour refresher", || std::fs::read_to_string(&log).unwrap_or_default().contains("event=neighbours nf=lb state=started"));
    r.resolve_sink();
    let tx = r.gen_socket(false);
    let to: std::net::SocketAddr = format!("{vip}:7").parse().unwrap();
    let redirected = || -> u64 {
        let c: serde_json::Value = serde_json::from_str(&xnf_ok(r.dut(), &["lb", "stats", "--json"])).unwrap();
        c["counters"]["redirect"].as_u64().unwrap_or_else(|| panic!("no redirect counter in {c}"))
    };
    let before = redirected();
    xnf_testrun::cli::send_paced(&tx, to, 20);
    assert_eq!(redirected() - before, 20, "the lb did not send the VIP's datagrams to the backend in XDP");
    // The daemon keeps the lb's route cache, and the lb sends through it:
    // what follows (the backend's MAC changing) must reach it at once.
    d.wait("the lb's route cache keeper", || std::fs::read_to_string(&log).unwrap_or_default().contains("event=lb-route-cache state=started"));
    d.wait("the route to the backend in the lb's route cache", || {
        xnf_testrun::cli::send_paced(&tx, to, 2);
        lb_cache_filled(r.dut()) > 0
    });

    // The backend takes another MAC and says nothing; dut's entry keeps
    // the old one, STALE, as its reachable timer would leave it.
    const NEW_MAC: &str = "02:00:00:00:5e:12";
    r.line.sink().ip(&["link", "set", "dev", &r.line.sink_if, "address", NEW_MAC]).unwrap();
    r.dut().ip(&["neigh", "replace", &backend.to_string(), "dev", s, "lladdr", &r.line.sink_mac.to_string(), "nud", "stale"]).unwrap();
    let entry = || String::from_utf8_lossy(&r.dut().ip(&["neigh", "show", &backend.to_string(), "dev", s]).unwrap().stdout).to_string();
    assert!(entry().contains("STALE"), "{}", entry());
    d.wait("dut to learn the backend's new MAC while the lb sends to it", || {
        xnf_testrun::cli::send_paced(&tx, to, 5);
        entry().contains(NEW_MAC)
    });
    let before = redirected();
    xnf_testrun::cli::send_paced(&tx, to, 20);
    assert_eq!(redirected() - before, 20, "after the new MAC was learnt, the lb's datagrams went through the kernel");
    drop(d);
    xnf_ok(r.dut(), &["apply", &files.write("empty.toml", "")]);
}

/// Filled slots of the lb's route cache in `ns` (its pinned `fib_cache`:
/// a slot's first word, its sequence, is 0 until filled).
fn lb_cache_filled(ns: &Netns) -> usize {
    ns.run(|| {
        use libbpf_rs::MapCore;
        use std::os::unix::fs::MetadataExt;
        let key = format!("net-{}", std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino());
        let m = libbpf_rs::MapHandle::from_pinned_path(std::path::Path::new("/sys/fs/bpf/xnf").join(key).join("lb/fib_cache"))
            .expect("the lb's route cache is pinned");
        (0..m.max_entries()).filter(|i| m.lookup(&i.to_ne_bytes(), libbpf_rs::MapFlags::ANY).ok().flatten().is_some_and(|v| v[..4] != [0; 4])).count()
    })
    .unwrap()
}

/// The pids of the `xnf afxdp run` processes in `ns` (a zombie's command
/// line is empty: not counted).
fn afxdp_pids(ns: &Netns) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let ino = |p: String| std::fs::metadata(p).map(|m| m.ino()).ok();
    let target = ino(ns.path().display().to_string());
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .filter(|pid: &u32| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmd.starts_with(b"xnf\0afxdp\0run\0") && ino(format!("/proc/{pid}/ns/net")) == target
        })
        .collect();
    pids.sort();
    pids
}

/// Kills the `xnf afxdp run` processes left in a namespace when dropped:
/// they outlive the daemon by design, and a failed test must not leave one.
struct AfxdpReaper<'a>(&'a Netns);

impl Drop for AfxdpReaper<'_> {
    fn drop(&mut self) {
        for pid in afxdp_pids(self.0) {
            // SAFETY: kill(2) of an `xnf afxdp run` of this test's namespace.
            unsafe { libc_kill(pid as i32, 9) };
        }
    }
}

/// UDP datagrams to dut's gen-side address, port 7, from gen: how many of
/// `n` came back, each from there and with its own payload.
fn echoes(r: &RoutedLine, n: usize) -> usize {
    let s = r.gen_socket(false);
    s.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
    let to = std::net::SocketAddr::new(r.line.dut_gen_v4.into(), 7);
    let mut buf = [0u8; 256];
    let mut answered = 0;
    for i in 0..n {
        let msg = format!("xnf-echo {i}");
        s.send_to(msg.as_bytes(), to).unwrap();
        while let Ok((len, from)) = s.recv_from(&mut buf) {
            if from == to && &buf[..len] == msg.as_bytes() {
                answered += 1;
                break;
            }
        }
    }
    answered
}

fn xdp_attached(ns: &Netns, dev: &str) -> bool {
    let out = ns.ip(&["-j", "link", "show", "dev", dev]).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["xdp"].is_object()
}

/// `[[afxdp]]`: the daemon runs an `echo` application on dut's gen-side
/// interface (UDP port 7 to user space, the rest to the kernel), starts it
/// again after a kill -9 of its process, leaves it running when killed
/// with -9 itself (a daemon started again adopts it: same pid, no second
/// one), and stops it when the file drops it.
#[test]
fn the_daemon_supervises_an_afxdp_application() {
    let r = RoutedLine::new(&[]);
    let files = TempFiles::new("daemon");
    let port = 9467;
    let g = &r.line.dut_gen_if;
    let listen = format!("[daemon]\nlisten = \"127.0.0.1:{port}\"\n");
    let app = format!("\n[[afxdp]]\nname = \"xnf-echo7\"\nnf = \"echo\"\ninterface = \"{g}\"\nmatch = [\"proto=udp,dport=7\"]\n");
    let f = files.write("xnf.toml", &(listen.clone() + &app));
    let _reaper = AfxdpReaper(r.dut());
    let mut d = Daemon::start(r.dut(), &f, &files);
    d.wait("the daemon to be ready", || get(r.dut(), port, "/readyz").is_some_and(|(c, _)| c == 200));
    d.wait("one echo application that answers", || afxdp_pids(r.dut()).len() == 1 && echoes(&r, 5) == 5);
    let first = afxdp_pids(r.dut())[0];
    assert!(d.log().contains(&format!("event=afxdp name=xnf-echo7 state=started pid={first}")), "{}", d.log());
    let up = "xnf_afxdp_up{name=\"xnf-echo7\"}";
    let restarts = "xnf_afxdp_restarts_total{name=\"xnf-echo7\"}";
    let page = || get(r.dut(), port, "/metrics").unwrap().1;
    assert_eq!((metric(&page(), up), metric(&page(), restarts)), (1.0, 0.0));
    let status = xnf_ok(r.dut(), &["status", &f]);
    assert!(status.contains(&format!("afxdp: xnf-echo7 (echo on {g}, up, pid {first}, 0 restarts)")) && status.contains("the box runs it"), "{status}");
    assert!(xnf_ok(r.dut(), &["show"]).contains("[[afxdp]]\nname = \"xnf-echo7\""));

    // Its process killed: started again, after the backoff's first second.
    // SAFETY: kill(2) of the application's process.
    assert_eq!(unsafe { libc_kill(first as i32, 9) }, 0);
    d.wait("a new process that answers", || afxdp_pids(r.dut()).first().is_some_and(|p| *p != first) && echoes(&r, 5) == 5);
    let second = afxdp_pids(r.dut());
    assert_eq!(second.len(), 1, "one process: {second:?}");
    let log = d.log();
    assert!(log.contains(&format!("state=exited pid={first}")) && log.contains(&format!("state=restarting pid={first} delay=1s restarts=1")), "{log}");
    assert_eq!((metric(&page(), up), metric(&page(), restarts)), (1.0, 1.0));

    // The daemon killed with -9: the application runs on, and the next
    // daemon adopts it rather than starting a second one.
    d.signal(9);
    wait_for("the daemon to die", || get(r.dut(), port, "/healthz").is_none());
    drop(d);
    assert_eq!(echoes(&r, 5), 5, "the application answers without the daemon");
    let mut d = Daemon::start(r.dut(), &f, &files);
    d.wait("the daemon to be ready again", || get(r.dut(), port, "/readyz").is_some_and(|(c, _)| c == 200));
    assert!(d.log().contains(&format!("state=started pid={} adopted=yes", second[0])), "{}", d.log());
    assert_eq!(afxdp_pids(r.dut()), second, "adopted, not started again");
    assert_eq!(metric(&page(), restarts), 1.0, "the record's count");

    // Dropped from the file: stopped (SIGINT), its selector detached.
    std::fs::write(&f, &listen).unwrap();
    let log = d.log.clone();
    let stopped = format!("state=stopped pid={} by=SIGINT", second[0]);
    d.wait("the application to stop", || std::fs::read_to_string(&log).unwrap_or_default().contains(&stopped));
    assert_eq!(afxdp_pids(r.dut()), Vec::<u32>::new(), "its process is gone");
    assert!(!xdp_attached(r.dut(), g), "the selector left with its process");
    assert!(!page().contains("xnf_afxdp_up"), "no record, no sample");
    assert_eq!(echoes(&r, 1), 0, "nobody answers port 7 now");
    drop(d);
    xnf_ok(r.dut(), &["apply", &files.write("empty.toml", "")]);
}

/// The daemon killed with -9 and started again, then stopped (SIGTERM)
/// and started again, under traffic through the filter, the lb and the
/// router (route cache): not a frame lost, none slow-pathed, and each new
/// daemon adopts what runs without changing it. Between the two, the
/// route cache's lease may lapse (no follower): the router then looks
/// routes up in the kernel's FIB from XDP, slower but still in XDP.
#[test]
fn a_daemon_killed_or_restarted_under_traffic_loses_no_frame() {
    let r = RoutedLine::new(&[]);
    let files = TempFiles::new("daemon");
    let port = 9468;
    let f = files.write("xnf.toml", &box_file(&r, 9999, port));
    let ready = |d: &mut Daemon| d.wait("the daemon to be ready", || get(r.dut(), port, "/readyz").is_some_and(|(c, _)| c == 200));
    let mut d = Daemon::start(r.dut(), &f, &files);
    ready(&mut d);
    r.resolve_sink();
    let (redir, forwarded, ring) = (r.redirected(), r.forw_v4(), (r.dropped_before_dut(), r.dropped_after_dut()));
    // The package's upgrade: a restart into another build (one more field
    // in the lb's connection value), and back.
    let bumped = xnf_bin().with_file_name("xnf-layout-bump");
    assert!(bumped.exists(), "{} is missing: this test restarts into it; build it with `make layout-bump` (make test does)", bumped.display());
    let events = [(9, xnf_bin()), (15, xnf_bin()), (15, bumped), (15, xnf_bin())];
    // About 10 s of traffic (paced): the restarts end well inside it.
    const N: usize = 600_000;
    let (received, logs) = std::thread::scope(|s| {
        let traffic = s.spawn(|| r.send_udp(false, N));
        wait_for("the traffic to flow", || r.redirected() > redir + 1000);
        let mut logs = Vec::new();
        for (sig, bin) in &events {
            d.signal(*sig);
            wait_for("the daemon to exit", || d.child.0.try_wait().ok().flatten().is_some());
            d = Daemon::start_bin(bin, r.dut(), &f, &files);
            ready(&mut d);
            logs.push(d.log());
        }
        assert!(!traffic.is_finished(), "the traffic ended before the restarts did: the test saw nothing");
        (traffic.join().unwrap(), logs)
    });
    // Every frame arrived, or was dropped at a full veth ring because a
    // receiving CPU was starved on a busy machine (seen: 71 of 600,000
    // during `make test`) — the kernel counts those; anything else is a
    // frame the restarts lost.
    let (front, after) = (r.dropped_before_dut() - ring.0, r.dropped_after_dut() - ring.1);
    assert_eq!(received as u64 + front + after, N as u64, "frames lost ({front} and {after} at full veth rings before and after dut)");
    assert!((front + after) * 1000 <= N as u64, "{front} + {after} frames dropped at full veth rings: more than 0.1 %");
    assert_eq!(r.redirected() - redir, N as u64 - front, "frames that reached dut not forwarded in XDP");
    assert_eq!(r.forw_v4(), forwarded, "the kernel forwarded some");
    for (i, log) in logs.iter().enumerate() {
        assert!(log.contains("event=apply result=ok changes=0"), "a new daemon changed something:\n{log}");
        // Restarts into the same build reload nothing; into another, the
        // lb's connection table moves to its layout (and back).
        let upgraded = log.contains("event=upgrade result=ok nf=lb swapped=1 migrated=\"conntrack:");
        assert_eq!(upgraded, i >= 2, "daemon {i} {} the lb:\n{log}", if upgraded { "upgraded" } else { "did not upgrade" });
    }
    drop(d);
    xnf_ok(r.dut(), &["apply", &files.write("empty.toml", "")]);
}
