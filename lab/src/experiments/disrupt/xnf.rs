//! The xnf variant of `xnf lab disrupt`: dut runs a box file (filter, lb,
//! router) under `xnf daemon`, the real binary beside `xnf-lab`, started
//! and stopped by the lab; its events are what an operator does to it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use xnf_netns::Netns;

use super::Event;
use crate::engine::peers::{self, Peer, PeerGuard};

/// Where the daemon serves /readyz, in dut.
const LISTEN: &str = "127.0.0.1:9460";
/// How long a daemon may take to be ready: its apply loads programs
/// through the verifier.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// The `xnf` binary beside the running `xnf-lab` (as `xnf lab` finds the
/// lab), or beside the `deps/` folder a unit test runs from.
pub fn xnf_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the running binary")?;
    let dir = exe.parent().map(|d| if d.ends_with("deps") { d.parent().unwrap_or(d) } else { d }).context("the running binary's folder")?;
    let bin = dir.join("xnf");
    ensure!(bin.is_file(), "the xnf variant runs {}, which is missing: build it with `cargo build -p xnf`", bin.display());
    Ok(bin)
}

/// The lb's VIP: its TCP service (the connections) and its UDP one (the
/// flows whose backends the experiment follows).
pub const FLOWS_VIP: &str = "198.18.100.1";
/// The TCP service's port, the sink's server's.
pub const TCP_PORT: u16 = 8080;
pub const FLOWS_PORT: u16 = 53;

/// The lb's connection table in `dut`: flow -> backend id, read raw (the
/// first 4 bytes of each value: the id, in every build's layout, so that
/// an upgrade to another layout is read alike on both sides).
pub fn lb_backends(dut: &Netns) -> Result<BTreeMap<Vec<u8>, u32>> {
    dut.run(|| -> Result<BTreeMap<Vec<u8>, u32>> {
        use libbpf_rs::{MapCore, MapFlags, MapHandle};
        let path = xnf_core::state::pin_dir("lb")?.join("conntrack");
        let m = MapHandle::from_pinned_path(&path).with_context(|| format!("opening {}", path.display()))?;
        let mut out = BTreeMap::new();
        for k in m.keys() {
            if let Some(v) = m.lookup(&k, MapFlags::ANY)? {
                out.insert(k, u32::from_ne_bytes(v[..4].try_into()?));
            }
        }
        Ok(out)
    })?
}

/// Opens `n` lb flows from `gen` (address `from`): one socket, and so one
/// source port, each, kept open.
pub fn open_flows(gen: &Netns, from: std::net::IpAddr, n: u32) -> Result<Vec<std::net::UdpSocket>> {
    (0..n)
        .map(|_| {
            let s = gen.run(move || std::net::UdpSocket::bind((from, 0)))??;
            s.send_to(b"flow", (FLOWS_VIP, FLOWS_PORT))?;
            Ok(s)
        })
        .collect()
}

/// The sink as the lb's two backends (its own address and `second`): the
/// VIP on its loopback, `xnf lb decap` on its interface stripping what the
/// lb encapsulates (and passing the rest: it is also the XDP program a
/// veth needs to receive redirected frames), replies leaving from the VIP
/// straight to gen (direct server return, through dut's router); gen and
/// dut route the VIP (dut towards the sink, for its source check of the
/// replies). The decap is removed by the guard (and by an interrupt).
pub fn backends_up(l: (&Netns, &Netns, &Netns), sink_if: &str, (sink_ip, second, dut_in): (&str, &str, &str)) -> Result<PeerGuard> {
    let (gen, dut, sink) = l;
    sink.ip(&["addr", "replace", &format!("{FLOWS_VIP}/32"), "dev", "lo"])?;
    sink.ip(&["addr", "replace", &format!("{second}/32"), "dev", sink_if])?;
    for c in ["all", "default", "lo", sink_if] {
        sink.sysctl_set(&format!("net.ipv4.conf.{c}.rp_filter"), "0")?;
    }
    gen.ip(&["route", "replace", &format!("{FLOWS_VIP}/32"), "via", dut_in])?;
    dut.ip(&["route", "replace", &format!("{FLOWS_VIP}/32"), "via", sink_ip])?;
    let bin = xnf_binary()?.to_string_lossy().replace('\'', r"'\''").replace('{', "{{").replace('}', "}}");
    let decap = Peer {
        name: "xnf-decap".into(),
        attach: format!("'{bin}' lb decap attach {{in}} >/dev/null"),
        detach: format!("'{bin}' lb decap detach {{in}} >/dev/null"),
    };
    PeerGuard::attach(&decap, sink, sink_if, sink_if)
}

/// What a box file holds: the first (`changed` false) or the one the
/// whole-box change applies.
pub fn box_file(din: &str, dout: &str, spare: &str, backends: &[String; 2], changed: bool) -> String {
    let [b1, b2] = backends;
    let (drop_port, extra_if) = if changed { (7, format!(", \"{spare}\"")) } else { (9, String::new()) };
    let mut t = format!(
        "[daemon]\nlisten = \"{LISTEN}\"\n\n[router]\ninterfaces = [\"{din}\", \"{dout}\"{extra_if}]\nfib = \"cache\"\n\n\
         [filter]\ninterfaces = [\"{din}\"]\n[filter.rules]\ndefault = \"pass\"\n[[filter.rules.rule]]\nname = \"no-{drop_port}\"\n\
         proto = \"udp\"\ndport = {drop_port}\naction = \"drop\"\n"
    );
    if changed {
        t.push_str("[[filter.rules.rule]]\nname = \"no-telnet\"\nproto = \"tcp\"\ndport = 23\naction = \"drop\"\n");
    }
    t.push_str(&format!(
        "\n[lb]\ninterfaces = [\"{din}\", \"{dout}\"]\n[lb.services.encap]\nsource_v4 = \"198.18.200.0/24\"\n\
         [[lb.services.service]]\nname = \"web\"\nvip = \"{FLOWS_VIP}\"\nproto = \"tcp\"\nport = {TCP_PORT}\n\
         [[lb.services.service.backend]]\naddress = \"{b1}\"\n[[lb.services.service.backend]]\naddress = \"{b2}\"\n"
    ));
    // The flows whose backends the experiment follows: the same in both files.
    t.push_str(&format!(
        "[[lb.services.service]]\nname = \"flows\"\nvip = \"{FLOWS_VIP}\"\nproto = \"udp\"\nport = {FLOWS_PORT}\n\
         [[lb.services.service.backend]]\naddress = \"{b1}\"\n[[lb.services.service.backend]]\naddress = \"{b2}\"\n"
    ));
    if changed {
        t.push_str(&format!("[[lb.services.service]]\nname = \"dns\"\nvip = \"198.18.100.2\"\nproto = \"udp\"\nport = 53\n[[lb.services.service.backend]]\naddress = \"{b1}\"\n"));
    }
    t
}

/// The first box file with one bad line (a port out of range): an apply
/// must refuse it whole.
pub fn bad_file(din: &str, dout: &str, spare: &str, backends: &[String; 2]) -> String {
    box_file(din, dout, spare, backends, false).replace("dport = 9\n", "dport = 70000\n")
}

/// A running `xnf daemon`; killed when dropped.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(bin: &Path, dut: &Netns, config: &Path, log: PathBuf) -> Result<Daemon> {
        let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(bin);
        cmd.args(["--netns", dut.name(), "daemon", "--config"]).arg(config).stdin(Stdio::null()).stdout(Stdio::null()).stderr(out);
        // The lab blocks SIGTERM in every thread (its interrupt handler
        // waits for it) and exec keeps the mask: unblocked there, the
        // daemon stops on SIGTERM as under systemd.
        xnf_core::runtime::in_own_session(&mut cmd);
        // SAFETY: prctl only, between fork and exec. Killed with the lab,
        // even by a signal: the lab's interrupt handler exits at once.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            })
        };
        let child = cmd.spawn().with_context(|| format!("starting {} daemon", bin.display()))?;
        Ok(Daemon { child, log })
    }

    /// The last lines of its log, for an error.
    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// Polls /readyz until it answers 200; fails if the daemon exits.
    fn wait_ready(&mut self, dut: &Netns) -> Result<()> {
        let t0 = Instant::now();
        while !ready(dut) {
            if let Some(status) = self.child.try_wait()? {
                bail!("xnf daemon exited ({status}) before it was ready: {}", self.tail());
            }
            ensure!(t0.elapsed() < READY_WITHIN, "xnf daemon not ready within {} s: {}", READY_WITHIN.as_secs(), self.tail());
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Sends `sig` and waits for the exit (SIGKILL after 10 s).
    fn stop(mut self, sig: i32) -> Result<()> {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, sig) };
        let t0 = Instant::now();
        while self.child.try_wait()?.is_none() {
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                bail!("xnf daemon did not exit within 10 s of signal {sig}: killed");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET /readyz in `ns`: whether it answered 200.
fn ready(ns: &Netns) -> bool {
    get(ns, "/readyz").is_some_and(|(status, _)| status == "200")
}

/// GET `path` from the daemon in `ns`: its status and body.
fn get(ns: &Netns, path: &str) -> Option<(String, String)> {
    let path = path.to_string();
    ns.run(move || -> Option<(String, String)> {
        let mut s = TcpStream::connect_timeout(&LISTEN.parse().ok()?, Duration::from_millis(200)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.to_string();
        Some((status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
    })
    .ok()
    .flatten()
}

/// What removes the box, as a peer's detach command (run in dut's network
/// namespace by [`PeerGuard`]: when the box is dropped, and by the lab's
/// interrupt handler before the namespaces go): every process in dut
/// but this shell, its nsenter and the lab killed (the daemon, whatever
/// an upgrade started), an empty box applied,
/// the files removed. A daemon left running would keep dut's namespace,
/// and so its pins, alive after the lab.
fn remover(bin: &Path, dir: &Path) -> Peer {
    let literal = |p: &Path| format!("'{}'", p.to_string_lossy().replace('\'', r"'\''")).replace('{', "{{").replace('}', "}}");
    let (bin, dir, me) = (literal(bin), literal(dir), std::process::id());
    // `upgrade` first: after an upgrade event the pins have the other
    // build's layouts, which this build's apply would refuse.
    let detach = format!(
        "for p in $(ip netns pids {{ns}}); do case \"$p\" in $$|$PPID|{me}) ;; *) kill -KILL \"$p\";; esac; done; {bin} upgrade >/dev/null; {bin} apply {dir}/empty.toml; rc=$?; rm -rf {dir}; exit $rc"
    );
    Peer { name: "xnf-box".into(), attach: "true".into(), detach }
}

/// The box on dut: its files, the daemon keeping it.
pub struct XnfBox<'a> {
    dut: &'a Netns,
    bin: PathBuf,
    dir: PathBuf,
    /// The daemon's box file.
    config: PathBuf,
    files: [String; 3],
    daemon: RefCell<Option<Daemon>>,
    started: Cell<u32>,
    upgrade_to: Option<PathBuf>,
    /// The build the daemon and the commands run: `bin`, or `upgrade_to`
    /// after an odd number of upgrades.
    current: RefCell<PathBuf>,
    /// Removes the box (the daemon stopped first, gracefully).
    remove: Option<PeerGuard>,
}

impl<'a> XnfBox<'a> {
    /// Writes the box file into a folder of its own, starts the daemon on
    /// it and waits until it is ready.
    pub fn up(dut: &'a Netns, ifs: [&str; 3], backends: &[String; 2], upgrade_to: Option<PathBuf>) -> Result<XnfBox<'a>> {
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xnf-lab-disrupt-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let bin = xnf_binary()?;
        let [din, dout, spare] = ifs;
        let remove = PeerGuard::attach(&remover(&bin, &dir), dut, din, dout)?;
        let files = [box_file(din, dout, spare, backends, false), box_file(din, dout, spare, backends, true), bad_file(din, dout, spare, backends)];
        let config = dir.join("xnf.toml");
        let current = RefCell::new(bin.clone());
        let b = XnfBox { dut, bin, dir, config, files, daemon: RefCell::new(None), started: Cell::new(0), upgrade_to, current, remove: Some(remove) };
        b.write("empty.toml", "")?;
        b.write("xnf.toml", &b.files[0])?;
        b.start()?;
        Ok(b)
    }

    fn start(&self) -> Result<()> {
        let n = self.started.get();
        self.started.set(n + 1);
        let bin = self.current.borrow().clone();
        let mut d = Daemon::start(&bin, self.dut, &self.config, self.dir.join(format!("daemon-{n}.log")))?;
        d.wait_ready(self.dut)?;
        *self.daemon.borrow_mut() = Some(d);
        Ok(())
    }

    /// `xnf --netns dut ARGS`.
    fn xnf(&self, args: &[&str]) -> Result<Output> {
        Command::new(&*self.current.borrow()).args(["--netns", self.dut.name()]).args(args).output().with_context(|| format!("running xnf {}", args.join(" ")))
    }

    fn write(&self, name: &str, text: &str) -> Result<PathBuf> {
        let p = self.dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    }

    /// The running daemon's metrics page: read by the build that runs,
    /// whichever layouts an upgrade left (the lab's own build could not
    /// read the other's).
    pub fn metrics(&self) -> Result<String> {
        match get(self.dut, "/metrics") {
            Some((status, body)) if status == "200" => Ok(body),
            other => bail!("xnf daemon's /metrics in dut answered {:?}", other.map(|(s, _)| s)),
        }
    }

    /// Runs `e`; what it said, in a few words.
    pub fn event(&self, e: Event) -> Result<String> {
        match e {
            Event::DaemonKill => self.restart(libc::SIGKILL),
            Event::DaemonRestart => self.restart(libc::SIGTERM),
            Event::WholeBoxChange => self.change(),
            Event::BadConfig => self.bad(),
            Event::Upgrade => self.upgrade(),
            _ => bail!("{} is no event of the xnf variant", e.name()),
        }
    }

    /// The daemon stopped by `sig` and started again, ready.
    fn restart(&self, sig: i32) -> Result<String> {
        let d = self.daemon.borrow_mut().take().context("no daemon runs")?;
        d.stop(sig)?;
        let t0 = Instant::now();
        self.start()?;
        Ok(format!("ready {} ms after the start", t0.elapsed().as_millis()))
    }

    /// `xnf apply` of the changed file; the daemon's file then becomes it
    /// (renamed in whole), so that its own reload changes nothing.
    fn change(&self) -> Result<String> {
        let f = self.write("changed.toml", &self.files[1])?;
        let out = self.xnf(&["apply", &f.to_string_lossy()])?;
        ensure!(out.status.success(), "xnf apply of the changed box failed: {}", peers::last_line(&out.stderr));
        let next = self.write("xnf.toml.next", &self.files[1])?;
        std::fs::rename(&next, &self.config)?;
        let changes = String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count();
        Ok(format!("applied, {changes} changes"))
    }

    /// `xnf apply` of a file with one bad line: refused, and `xnf show`
    /// the same before and after.
    fn bad(&self) -> Result<String> {
        let f = self.write("bad.toml", &self.files[2])?;
        let before = self.xnf(&["show"])?;
        let out = self.xnf(&["apply", &f.to_string_lossy()])?;
        let after = self.xnf(&["show"])?;
        let same = before.stdout == after.stdout && before.status.success();
        Ok(match (out.status.success(), same) {
            (false, true) => "refused, nothing changed".into(),
            (false, false) => "refused, but the box changed".into(),
            (true, _) => "ACCEPTED (must be refused)".into(),
        })
    }

    /// The package's upgrade: the daemon stopped as systemd would and
    /// started from the other build (`--upgrade-to`; back to this one if
    /// the box were upgraded twice), which moves the state to its layouts
    /// before it applies; what its log says it moved.
    fn upgrade(&self) -> Result<String> {
        let to = self.upgrade_to.clone().context("upgrade needs --upgrade-to PATH")?;
        let next = if *self.current.borrow() == self.bin { to } else { self.bin.clone() };
        *self.current.borrow_mut() = next.clone();
        let ready = self.restart(libc::SIGTERM)?;
        let log = self.daemon.borrow().as_ref().map(|d| std::fs::read_to_string(&d.log).unwrap_or_default()).unwrap_or_default();
        let moved: Vec<&str> = log.lines().filter(|l| l.contains("event=upgrade result=ok")).filter_map(|l| l.split(" nf=").nth(1)).collect();
        ensure!(!moved.is_empty(), "the daemon of {} upgraded nothing: is it another build?", next.display());
        Ok(format!("to {}: {ready}; {}", next.file_name().unwrap_or_default().to_string_lossy(), moved.join("; ")))
    }
}

impl Drop for XnfBox<'_> {
    /// The daemon stopped as systemd would, then an empty box applied:
    /// the next variant starts from a dut without xnf.
    fn drop(&mut self) {
        if let Some(d) = self.daemon.borrow_mut().take() {
            if let Err(e) = d.stop(libc::SIGTERM) {
                eprintln!("xnf lab: {e:#}");
            }
        }
        if let Some(Err(e)) = self.remove.take().map(PeerGuard::detach) {
            eprintln!("xnf lab: removing the box: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_check_and_the_bad_one_has_one_bad_line() {
        let be = ["198.18.1.2".to_string(), "198.18.1.3".to_string()];
        let (a, b, bad) = (
            box_file("xnfin", "xnfout", "xnfspare0", &be, false),
            box_file("xnfin", "xnfout", "xnfspare0", &be, true),
            bad_file("xnfin", "xnfout", "xnfspare0", &be),
        );
        for (text, name) in [(&a, "a"), (&b, "b")] {
            if let Err(e) = xnf_config::parse(text, name, Path::new("/")) {
                panic!("{name}: {e:?}\n{text}");
            }
        }
        assert!(b.contains("xnfspare0") && b.contains("no-telnet") && b.contains("198.18.100.2"));
        let Err(errs) = xnf_config::parse(&bad, "bad", Path::new("/")) else { panic!("the bad file was accepted") };
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(a.lines().zip(bad.lines()).filter(|(x, y)| x != y).count(), 1);
    }
}
