//! Shared pieces of the namespace integration tests: running the `xnf`
//! binary as a user would, a guard that detaches what a test attached, and
//! UDP traffic.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::Output;
use std::time::{Duration, Instant};

use xnf_netns::{LineConfig, LineTopology, Netns, Offload};

/// The namespaces a lab process with `pid` has made (`xnf-PID-…`).
pub fn namespaces_of(pid: u32) -> Vec<String> {
    let out = std::process::Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("xnf-{pid}-")))
        .map(String::from)
        .collect()
}

/// The `xnf` binary of this build: `target/<profile>/xnf`, next to the
/// `deps/` folder the test executable runs from. Tests of the NF and lab
/// crates drive it as a user would; `make test` builds it first.
pub fn xnf_bin() -> std::path::PathBuf {
    sibling_bin("xnf")
}

/// The `xnf-cni` plugin binary of this build.
pub fn xnf_cni_bin() -> std::path::PathBuf {
    sibling_bin("xnf-cni")
}

fn sibling_bin(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe.parent().and_then(|d| if d.ends_with("deps") { d.parent() } else { Some(d) }).expect("target folder");
    let bin = dir.join(name);
    assert!(bin.exists(), "{} is missing: build it first with `cargo build -p xnf -p xnf-lab` (`make test` does)", bin.display());
    bin
}

/// Runs `xnf --netns NS args...`.
pub fn xnf(ns: &Netns, args: &[&str]) -> Output {
    std::process::Command::new(xnf_bin()).arg("--netns").arg(ns.name()).args(args).output().expect("running the xnf binary")
}

/// Starts `xnf --netns NS router follow` in the background; the child is
/// killed and reaped when the guard drops (it also exits by itself once
/// the router is detached).
pub fn spawn_follower(ns: &Netns) -> ChildGuard {
    let child = std::process::Command::new(xnf_bin())
        .args(["--netns", ns.name(), "router", "follow"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting xnf router follow");
    ChildGuard(child)
}

/// A child process, killed and reaped on drop.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `ip netns exec NS xnf args...`: the way users often run tools, in a
/// private mount namespace whose /sys hides the host's bpffs.
pub fn xnf_ip_netns_exec(ns: &Netns, args: &[&str]) -> Output {
    std::process::Command::new("ip").args(["netns", "exec", ns.name()]).arg(xnf_bin()).args(args).output().expect("running ip netns exec xnf")
}

/// Runs `ip netns exec NS xnf args...` and insists it succeeds.
pub fn xnf_ip_netns_exec_ok(ns: &Netns, args: &[&str]) -> String {
    let out = xnf_ip_netns_exec(ns, args);
    assert!(out.status.success(), "ip netns exec xnf {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs xnf and insists it succeeds.
pub fn xnf_ok(ns: &Netns, args: &[&str]) -> String {
    let out = xnf(ns, args);
    assert!(out.status.success(), "xnf {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs xnf and insists it fails naming each fault on a line of its own
/// (`xnf: error: ...`); returns those lines.
pub fn xnf_errs(ns: &Netns, args: &[&str]) -> Vec<String> {
    let out = xnf(ns, args);
    assert!(!out.status.success(), "xnf {args:?} should have failed");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let errors: Vec<String> = err.lines().filter(|l| !l.starts_with("xnf: warning") && !l.starts_with("xnf: removed ")).map(String::from).collect();
    assert!(!errors.is_empty() && errors.iter().all(|l| l.starts_with("xnf: error: ")), "xnf {args:?}: want one `xnf: error:` line per fault, got {err:?}");
    errors
}

/// Runs xnf and insists it fails with a one-line error; returns the line.
pub fn xnf_err(ns: &Netns, args: &[&str]) -> String {
    let out = xnf(ns, args);
    assert!(!out.status.success(), "xnf {args:?} should have failed");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    // Warnings and housekeeping notes (state of a namespace gone before
    // this one reused its inode, removed) may come first.
    let errors: Vec<&str> = err.lines().filter(|l| !l.starts_with("xnf: warning") && !l.starts_with("xnf: removed ")).collect();
    assert_eq!(errors.len(), 1, "xnf {args:?}: want one error line, got {err:?}");
    errors[0].to_string()
}

/// The line topology with the router attached on dut and everything the
/// veths need: TX checksum offload off on the senders (a veth hands partial
/// checksums to XDP, which cannot finish them) and an XDP program on the
/// sink end so redirected frames are received. Detaches on drop, before the
/// namespaces go.
pub struct RoutedLine {
    pub line: LineTopology,
    attached: bool,
}

impl RoutedLine {
    pub fn new(attach_args: &[&str]) -> Self {
        let line = LineTopology::new(&LineConfig::default()).expect("line topology (run as root)");
        line.gen().set_offload(&line.gen_if, Offload::TxChecksum, false).expect("TX checksum offload off");
        line.sink().set_offload(&line.sink_if, Offload::TxChecksum, false).expect("TX checksum offload off");
        xnf_ok(line.sink(), &["pass", "attach", &line.sink_if]);
        xnf_ok(line.gen(), &["pass", "attach", &line.gen_if]);
        let mut me = RoutedLine { line, attached: false };
        if !attach_args.is_empty() {
            me.attach(attach_args);
        }
        me
    }

    pub fn attach(&mut self, extra: &[&str]) {
        let (g, s) = (self.line.dut_gen_if.clone(), self.line.dut_sink_if.clone());
        let mut args = vec!["router", "attach", g.as_str(), s.as_str()];
        args.extend(extra);
        xnf_ok(self.dut(), &args);
        self.attached = true;
    }

    pub fn detach(&mut self) {
        let (g, s) = (self.line.dut_gen_if.clone(), self.line.dut_sink_if.clone());
        xnf_ok(self.dut(), &["router", "detach", &g, &s]);
        self.attached = false;
    }

    pub fn dut(&self) -> &Netns {
        self.line.dut()
    }

    /// Router counters of dut's gen-facing interface (its ingress).
    pub fn ingress_stats(&self) -> serde_json::Value {
        let out = xnf_ok(self.dut(), &["router", "stats", "--json"]);
        let all: serde_json::Value = serde_json::from_str(&out).expect("stats JSON");
        all.as_array().unwrap().iter().find(|s| s["interface"] == self.line.dut_gen_if.as_str()).cloned().expect("ingress interface in stats")
    }

    /// Frames gen's veth dropped on transmit: dut's receive ring was full
    /// (a loaded machine), so they never reached dut, though the sender's
    /// kernel counts them as sent.
    pub fn dropped_before_dut(&self) -> u64 {
        self.line.gen().link_stats(&self.line.gen_if).expect("gen's link counters").tx_dropped
    }

    /// Frames dut's egress could not hand to the sink: its ring was full
    /// (a loaded machine) after the router had redirected them (veth's
    /// `tx_queue_N_xdp_xmit_errors`).
    pub fn dropped_after_dut(&self) -> u64 {
        let out = self.dut().ethtool_stats(&self.line.dut_sink_if).expect("dut's egress driver counters");
        out.iter().filter(|(n, _)| n.contains("xdp_xmit_err")).map(|(_, v)| v).sum()
    }

    pub fn redirected(&self) -> u64 {
        self.ingress_stats()["packets"]["redirect"].as_u64().unwrap()
    }

    pub fn reason(&self, r: &str) -> u64 {
        self.ingress_stats()["reasons"][r].as_u64().unwrap()
    }

    /// Route cache lookups of dut's ingress with `outcome` (hit, miss, bypass).
    pub fn cache(&self, outcome: &str) -> u64 {
        self.ingress_stats()["route_cache"][outcome].as_u64().unwrap()
    }

    /// The route cache's state from `xnf router status --json`.
    pub fn cache_status(&self) -> serde_json::Value {
        let out = xnf_ok(self.dut(), &["router", "status", "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).expect("status JSON")["route_cache"].clone()
    }

    pub fn forw_v4(&self) -> u64 {
        self.dut().snmp().unwrap().value("Ip", "ForwDatagrams").unwrap()
    }

    pub fn forw_v6(&self) -> u64 {
        self.dut().snmp().unwrap().value("Ip6", "OutForwDatagrams").unwrap()
    }

    /// A UDP socket in sink listening on `port` (v4 or v6) ([`udp_receiver`]).
    pub fn sink_socket(&self, v6: bool, port: u16) -> UdpSocket {
        let addr: IpAddr = if v6 { self.line.sink_v6.into() } else { self.line.sink_v4.into() };
        udp_receiver(self.line.sink(), SocketAddr::new(addr, port))
    }

    /// A UDP socket in gen.
    pub fn gen_socket(&self, v6: bool) -> UdpSocket {
        let addr: IpAddr = if v6 { self.line.gen_v6.into() } else { self.line.gen_v4.into() };
        self.line.gen().run(move || UdpSocket::bind(SocketAddr::new(addr, 0))).unwrap().unwrap()
    }

    pub fn sink_addr(&self, v6: bool, port: u16) -> SocketAddr {
        if v6 {
            SocketAddr::new(self.line.sink_v6.into(), port)
        } else {
            SocketAddr::new(self.line.sink_v4.into(), port)
        }
    }

    /// Sends `n` datagrams gen -> sink and returns how many arrived.
    pub fn send_udp(&self, v6: bool, n: usize) -> usize {
        let port = 9000 + v6 as u16;
        let rx = self.sink_socket(v6, port);
        let tx = self.gen_socket(v6);
        let to = self.sink_addr(v6, port);
        // Receive while sending, so the socket buffer never overflows.
        std::thread::scope(|s| {
            let receiver = s.spawn(|| count_received(&rx, n));
            send_paced(&tx, to, n);
            receiver.join().unwrap()
        })
    }

    /// Waits until dut has a usable neighbour entry for sink (v4 and v6),
    /// sending a datagram of each family every second until then: one
    /// alone can be lost (an IPv6 address still tentative, a resolution
    /// that fails once on a loaded emulated guest), and then nothing would
    /// ask again.
    pub fn resolve_sink(&self) {
        let (t0, mut polls) = (Instant::now(), 0u32);
        let ip = |ns: &Netns, args: &[&str]| String::from_utf8_lossy(&ns.ip(args).unwrap().stdout).trim().to_string();
        loop {
            if polls.is_multiple_of(20) {
                for v6 in [false, true] {
                    let _ = self.send_udp(v6, 1);
                }
            }
            polls += 1;
            let neigh = ip(self.dut(), &["neigh", "show", "dev", &self.line.dut_sink_if]);
            // An entry for each of the sink's addresses (another entry, say
            // for its link-local address, does not route a datagram).
            let usable = |a: String| {
                neigh.lines().any(|l| l.split_whitespace().next() == Some(a.as_str()) && ["REACHABLE", "STALE", "DELAY"].iter().any(|s| l.contains(s)))
            };
            if usable(self.line.sink_v4.to_string()) && usable(self.line.sink_v6.to_string()) {
                return;
            }
            // What the failure looked like, for a failure seen only in
            // loaded emulated guests.
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "timed out waiting for dut's neighbour entries for sink: dut's neighbours [{neigh}]; dut's addresses [{}]; sink's addresses [{}]; dut's router counters [{}]",
                ip(self.dut(), &["-br", "addr", "show", "dev", &self.line.dut_sink_if]),
                ip(self.line.sink(), &["-br", "addr", "show", "dev", &self.line.sink_if]),
                String::from_utf8_lossy(&xnf(self.dut(), &["router", "stats"]).stdout).split_whitespace().collect::<Vec<_>>().join(" ")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RoutedLine {
    fn drop(&mut self) {
        if self.attached {
            let (g, s) = (self.line.dut_gen_if.clone(), self.line.dut_sink_if.clone());
            let _ = xnf(self.dut(), &["router", "detach", &g, &s]);
        }
        let _ = xnf(self.line.sink(), &["pass", "detach", &self.line.sink_if]);
        let _ = xnf(self.line.gen(), &["pass", "detach", &self.line.gen_if]);
    }
}

/// A UDP socket bound to `addr` in `ns` that tests count datagrams on,
/// with an 8 MiB receive buffer (SO_RCVBUFFORCE: root may exceed
/// net.core.rmem_max), so that a receiving thread starved for a few
/// milliseconds on a busy machine loses none.
pub fn udp_receiver(ns: &Netns, addr: SocketAddr) -> UdpSocket {
    use std::os::fd::AsRawFd;
    let s = ns.bind(move || UdpSocket::bind(addr)).unwrap_or_else(|e| panic!("binding {addr}: {e:#}"));
    let size: libc::c_int = 8 << 20;
    // SAFETY: setsockopt on an open socket with a c_int of the right size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
    s
}

/// Sends `n` small datagrams, pausing 1 ms every 64 so that a veth ring
/// (256 frames) never overflows: the tests check forwarding, not capacity.
/// In the kernel matrix's emulated guests (XNF_GUEST), where the receiving
/// side runs ten times slower, every 8. A shorter last batch pauses in
/// proportion, so a caller sending a few at a time in a loop is paced too
/// (it was not: a stream of eights ran unpaced and overflowed the ring).
pub fn send_paced(tx: &UdpSocket, to: SocketAddr, n: usize) {
    let every = if std::env::var_os("XNF_GUEST").is_some() { 8 } else { 64 };
    for start in (0..n).step_by(every) {
        let batch = every.min(n - start);
        for i in start..start + batch {
            tx.send_to(&(i as u32).to_be_bytes(), to).unwrap();
        }
        std::thread::sleep(Duration::from_micros(1000 * batch as u64 / every as u64));
    }
}

/// Counts the datagrams arriving on `rx` while a test expects `expected`:
/// until that many have come (and then any extra already on their way),
/// or until none has come for two seconds. A test where all arrive never
/// waits on the clock; one where some are lost shows a smaller count. With
/// `expected` 0 it waits one second for datagrams that should not come:
/// tests sync on a counter first where they can.
pub fn count_received(rx: &UdpSocket, expected: usize) -> usize {
    let mut buf = [0u8; 2048];
    let mut n = 0;
    loop {
        let wait = match n.cmp(&expected) {
            std::cmp::Ordering::Less => Duration::from_secs(2),
            _ if expected == 0 => Duration::from_secs(1),
            _ => Duration::from_millis(50),
        };
        rx.set_read_timeout(Some(wait)).unwrap();
        if rx.recv(&mut buf).is_err() {
            return n;
        }
        n += 1;
    }
}

/// Whether an `xnf router follow` process runs in `ns`.
pub fn follower_running(ns: &Netns) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = |p: String| std::fs::metadata(p).map(|m| m.ino()).ok();
    let target = ino(ns.path().display().to_string());
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let pid = e.file_name().to_string_lossy().to_string();
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmd).contains("router\0follow") && ino(format!("/proc/{pid}/ns/net")) == target
    })
}

/// Polls `cond` for up to 30 s (a limit for failures only: software-emulated
/// guests of the kernel matrix are ten times slower than the host).
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `xnf lab EXPERIMENT args...` to the end: its output and its pid
/// (the lab's namespaces are named after it). The peer tools are where
/// this test's environment says (`XNF_PEERS`, else the lab's default).
pub fn lab(experiment: &str, args: &[&str]) -> (Output, u32) {
    run_lab(experiment, args, None)
}

/// [`lab`] with the lab told that the peer tools are in `peers`
/// (`XNF_PEERS`): a folder the test made, with or without them.
pub fn lab_with_peers(peers: &std::path::Path, experiment: &str, args: &[&str]) -> (Output, u32) {
    run_lab(experiment, args, Some(peers))
}

fn run_lab(experiment: &str, args: &[&str], peers: Option<&std::path::Path>) -> (Output, u32) {
    let mut cmd = std::process::Command::new(xnf_bin());
    cmd.args(["lab", experiment]).args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    if let Some(p) = peers {
        cmd.env("XNF_PEERS", p);
    }
    let child = cmd.spawn().unwrap_or_else(|e| panic!("running xnf lab {experiment}: {e}"));
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

/// Each case — (arguments, what the one-line message must say, exit
/// status: 2 = usage, 1 = refused) — is refused before anything is built.
/// The lab is told of an empty peers folder, so what it says does not
/// depend on what this machine has built.
pub fn assert_lab_refuses(experiment: &str, cases: &[(&[&str], &str, i32)]) {
    let peers = TempFiles::new("no-peers");
    for (args, want, status) in cases {
        let (out, pid) = lab_with_peers(peers.dir(), experiment, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*status), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(namespaces_of(pid).is_empty(), "{args:?} left namespaces");
    }
}

/// Starts `xnf lab ARGS`, waits (at most 20 s) until `ready` holds for the
/// namespaces it has made — the state the test wants to interrupt it in,
/// `what` — then sends SIGINT and checks that it exits with status 130
/// leaving no namespace behind.
pub fn interrupt_lab_when(args: &[&str], what: &str, ready: impl Fn(&[String]) -> bool) {
    let mut child = std::process::Command::new(xnf_bin())
        .arg("lab")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running xnf lab {args:?}: {e}"));
    let pid = child.id();
    let t0 = Instant::now();
    while !ready(&namespaces_of(pid)) {
        assert!(t0.elapsed() < Duration::from_secs(20), "xnf lab {args:?}: timed out waiting for {what}");
        assert!(child.try_wait().unwrap().is_none(), "xnf lab {args:?} exited before {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "xnf lab {args:?}: exit status after Ctrl-C; it said:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(namespaces_of(pid).is_empty(), "xnf lab {args:?} left {:?}", namespaces_of(pid));
}

/// The lab namespace of `names` (`xnf-PID-N-ROLE`) for `role`.
pub fn lab_namespace<'a>(names: &'a [String], role: &str) -> Option<&'a str> {
    names.iter().map(String::as_str).find(|n| n.ends_with(&format!("-{role}")))
}

/// Packets the interface of namespace `ns` whose name ends with `dev` has
/// received (lab interfaces carry a prefix: `xnf1sink`); None while there
/// is none.
pub fn rx_packets(ns: &str, dev: &str) -> Option<u64> {
    let out = std::process::Command::new("ip").args(["-n", ns, "-j", "-s", "link", "show"]).output().expect("running ip");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let link = v.as_array()?.iter().find(|l| l["ifname"].as_str().is_some_and(|n| n.ends_with(dev)))?;
    link["stats64"]["rx"]["packets"].as_u64()
}

/// Files a test writes (service files, rule files) in a folder of its own
/// under the temporary directory, removed when dropped, pass or fail.
pub struct TempFiles {
    dir: std::path::PathBuf,
}

impl TempFiles {
    /// A fresh folder named after `tag`, this process and a count (tests
    /// of one binary run in threads of one process).
    pub fn new(tag: &str) -> TempFiles {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xnf-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating a temporary folder");
        TempFiles { dir }
    }

    /// Writes `text` to `name` in the folder and returns its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).expect("writing a temporary file");
        p.display().to_string()
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for TempFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
