//! `xnf lab stack`'s iperf3 baseline: the `socket` variant's path (gen ->
//! XDP_PASS on the sink's interface -> the sink's socket, RPS to the stack
//! CPU, the co-runner spinning there) fed by a user-space sender instead
//! of the lab's in-kernel generator. At each
//! offered rate of the run, `iperf3 -s -1` in the sink's namespace on the
//! stack CPU receives from `iperf3 -c -u` in gen's on the generator's CPU,
//! datagrams sized so that the frames on the wire are the point's size;
//! twice, like the driver's load steps: unprofiled, then with `xnf
//! profile` attached. Sent is the client's count, received the server's
//! (its datagrams less those it saw lost), CPU time from /proc/stat over
//! the client's run, the co-runner's progress over the same window.

use std::io::Read;
use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use xnf_netns::Netns;

use crate::engine::cpu;
use crate::engine::driver::Common;
use crate::engine::profiling::ProfiledRun;
use crate::engine::progress::Progress;
use crate::engine::results::{Labels, Loss, Point, Results, Sample, SampleKind};
use crate::engine::{ActionKind, LabAttachment};

/// The baseline's variant name in the results.
pub const VARIANT: &str = "iperf3";
/// iperf3's control and data port.
const PORT: u16 = 5201;
/// A frame's bytes besides the UDP payload: Ethernet, IPv4, UDP, FCS.
const HEADERS: u32 = 14 + 20 + 8 + 4;
/// What `iperf3 -l` accepts at least (its own header in every datagram).
const MIN_PAYLOAD: u32 = 16;
/// Said once, on stderr and in the results, when iperf3 is missing.
pub const MISSING: &str = "iperf3 not installed: no iperf3 baseline (apt install iperf3)";

/// The baseline's plan, its samples and profiles until they move into the
/// results, and notes on the whole run.
#[derive(Debug, Default)]
pub struct Baseline {
    /// None: not measured (`--no-iperf3`, a load curve, iperf3 missing).
    plan: Option<Plan>,
    samples: Vec<Sample>,
    profiles: Vec<ProfiledRun>,
    notes: Vec<String>,
}

/// What is measured at each point.
#[derive(Clone, Debug)]
struct Plan {
    /// The run's offered rates (frames per second).
    rates: Vec<f64>,
    /// Seconds per interval (iperf3 counts in whole seconds).
    seconds: u64,
    /// The profiler's options for the twin intervals (None: no twins).
    profile: Option<xnf_profile::Options>,
    /// Flame graphs of the twins go here.
    flame: Option<PathBuf>,
}

/// Where the baseline runs at one point.
pub struct Path<'a> {
    pub gen: &'a Netns,
    pub gen_cpu: usize,
    pub sink: &'a Netns,
    /// The sink's interface: XDP_PASS goes there, as in `socket`.
    pub sink_dev: &'a str,
    pub sink_addr: IpAddr,
    pub stack_cpu: usize,
    /// The co-runner's work units done.
    pub corunner: Arc<AtomicU64>,
}

impl Baseline {
    /// The plan from the command line: the run's offered rates, each as
    /// long as the driver's load steps, profiled as the driver profiles.
    pub fn new(off: bool, c: &Common) -> Baseline {
        let mut b = Baseline::default();
        if off {
            return b;
        }
        if c.load_rates.is_empty() {
            b.notes.push("no iperf3 baseline with --load-curve: its rates follow each variant's full speed (give --load-rates)".into());
            return b;
        }
        let seconds = c.trial_seconds.ceil().max(1.0) as u64;
        b.plan = Some(Plan { rates: c.load_rates.clone(), seconds, profile: c.profiling.options(), flame: c.profiling.flame.clone() });
        b
    }

    /// Whether iperf3 runs here; when it does not, says so once and
    /// measures nothing.
    pub fn check(&mut self) {
        if self.plan.is_some() && !installed() {
            eprintln!("xnf lab: {MISSING}");
            self.notes.push(MISSING.into());
            self.plan = None;
        }
    }

    /// Measures every offered rate at point `p` (frames of `size` bytes,
    /// 0: IMIX); returns notes on the point. Failures become notes too:
    /// the baseline never fails the run.
    pub fn at(&mut self, path: &Path, p: &Point, label: &str, size: u32, pg: &Progress) -> Vec<String> {
        let Some(plan) = self.plan.clone() else { return Vec::new() };
        if size == 0 {
            return vec!["no iperf3 baseline with IMIX (iperf3 sends one datagram size)".into()];
        }
        let payload = size.saturating_sub(HEADERS).max(MIN_PAYLOAD);
        // veth takes its NAPI path (XDP, GRO) only with a program attached.
        let _pass = match LabAttachment::action(path.sink, path.sink_dev, ActionKind::Pass, path.sink_dev, 0) {
            Ok(a) => a,
            Err(e) => return vec![format!("no iperf3 baseline: attaching XDP_PASS to the sink: {e:#}")],
        };
        let mut notes = vec![format!(
            "iperf3 baseline: one flow, {payload}-byte datagrams ({} B frames), XDP_PASS on the sink as in `socket`, the client on CPU {}, the server on CPU {} ({} s per interval)",
            payload + HEADERS,
            path.gen_cpu,
            path.stack_cpu,
            plan.seconds
        )];
        for (i, &rate) in plan.rates.iter().enumerate() {
            let l = Labels { variant: VARIANT.into(), point: p.clone(), run: 0 };
            let kind = SampleKind::Load { offered_pps: rate, step: i as u32 + 1 };
            let r = (|| -> Result<()> {
                pg.message(&format!("iperf3 baseline at {:.3} Mpps", rate / 1e6));
                let plain = interval(path, &l, kind, payload, plan.seconds, None)?.0;
                if plain.sent_mpps * 1e6 < 0.9 * rate {
                    notes.push(format!("iperf3 sent {:.3} of {:.3} Mpps offered (a user-space sender's limit)", plain.sent_mpps, rate / 1e6));
                }
                if let Some(o) = &plan.profile {
                    pg.message(&format!("iperf3 baseline at {:.3} Mpps, profiling", rate / 1e6));
                    let (twin, prof) = interval(path, &l, kind, payload, plan.seconds, Some(o))?;
                    let prof = prof.context("no profile")?;
                    self.profiles.push(ProfiledRun::new("stack", label, &plain, &twin, prof, plan.flame.as_deref())?);
                }
                self.samples.push(plain);
                Ok(())
            })();
            if let Err(e) = r {
                let msg = format!("iperf3 baseline at {:.3} Mpps failed: {e:#}", rate / 1e6);
                pg.println(&format!("xnf lab: {msg}"));
                notes.push(msg);
            }
        }
        notes
    }

    /// Moves the samples, profiles and notes into the results.
    pub fn finish(&mut self, res: &mut Results) {
        res.samples.append(&mut self.samples);
        res.profiles.append(&mut self.profiles);
        res.notes.append(&mut self.notes);
    }
}

/// Whether `iperf3 --version` runs.
pub fn installed() -> bool {
    std::process::Command::new("iperf3").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// One iperf3 test at `rate`: a server started, the client run to its
/// end, both JSON reports read; with `profile`, `xnf profile` attached from
/// before the client starts until it has ended.
fn interval(
    path: &Path,
    l: &Labels,
    kind: SampleKind,
    payload: u32,
    seconds: u64,
    profile: Option<&xnf_profile::Options>,
) -> Result<(Sample, Option<xnf_profile::Profile>)> {
    let SampleKind::Load { offered_pps, .. } = kind else { bail!("the iperf3 baseline runs at offered rates") };
    let addr = path.sink_addr.to_string();
    let port = PORT.to_string();
    let mut server = Iperf3::spawn(path.sink, path.stack_cpu, &["-s", "-1", "--json", "-B", &addr, "-p", &port], "server")?;
    server.until_listening(path.sink, PORT, Duration::from_secs(5))?;
    let session = profile.map(xnf_profile::Session::start).transpose()?;
    let bps = (offered_pps * payload as f64 * 8.0).round().max(1.0) as u64;
    let (c0, co0, t0) = (cpu::sample()?, path.corunner.load(Ordering::Relaxed), Instant::now());
    let client_args = ["-c", &addr, "-p", &port, "-u", "-b", &bps.to_string(), "-l", &payload.to_string(), "-t", &seconds.to_string(), "-i", "0", "--json"];
    let client = Iperf3::spawn(path.gen, path.gen_cpu, &client_args, "client")?.report(Duration::from_secs(seconds + 10))?;
    let server = server.report(Duration::from_secs(5))?;
    let (c1, co1, wall) = (cpu::sample()?, path.corunner.load(Ordering::Relaxed), t0.elapsed().as_secs_f64());
    let prof = session.map(xnf_profile::Session::stop).transpose()?;
    let (sent, secs) = (count(&client, "sum_sent", "packets")?, sum(&client, "sum_sent", "seconds")?);
    let received = count(&server, "sum_received", "packets")?.saturating_sub(count(&server, "sum_received", "lost_packets")?);
    ensure!(secs > 0.0, "iperf3's client reports no time sending");
    let loss = Loss { in_dut: sent as i64 - received as i64, ..Loss::default() };
    let mut s = Sample::of(l, kind, secs, (sent, received), loss, &cpu::delta(&c1, &c0));
    s.corunner_per_s = Some(co1.saturating_sub(co0) as f64 / wall);
    Ok((s, prof))
}

/// `end.<sum>.<field>` of an iperf3 JSON report (`end.sum` in versions
/// without the split).
fn sum(v: &Value, sum: &str, field: &str) -> Result<f64> {
    let end = &v["end"];
    end[sum][field].as_f64().or_else(|| end["sum"][field].as_f64()).with_context(|| format!("no end.{sum}.{field} in iperf3's report"))
}

fn count(v: &Value, s: &str, field: &str) -> Result<u64> {
    Ok(sum(v, s, field)? as u64)
}

/// A running iperf3 in a namespace, pinned to a CPU; killed when dropped
/// (errors), and by the kernel when the lab dies (interrupted).
struct Iperf3 {
    child: Child,
    /// Reads its output while it runs: (stdout, stderr).
    output: Option<JoinHandle<(String, String)>>,
    what: &'static str,
}

impl Iperf3 {
    fn spawn(ns: &Netns, cpu: usize, args: &[&str], what: &'static str) -> Result<Iperf3> {
        let mut cmd = ns.command("taskset");
        cmd.args(["-c", &cpu.to_string(), "iperf3"]).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // SAFETY: prctl and sigprocmask are async-signal-safe. `ip netns
        // exec` and taskset exec the next program, so this is iperf3:
        // killed when the thread that started it ends (the lab's interrupt
        // handler exits without dropping anything), and with the signals
        // the lab's threads block unblocked.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                Ok(())
            });
        }
        let mut child = cmd.spawn().with_context(|| format!("starting iperf3's {what} in {}", ns.name()))?;
        let (mut out, mut err) = (child.stdout.take().context("stdout")?, child.stderr.take().context("stderr")?);
        let output = std::thread::spawn(move || {
            let (mut o, mut e) = (String::new(), String::new());
            let _ = out.read_to_string(&mut o);
            let _ = err.read_to_string(&mut e);
            (o, e)
        });
        Ok(Iperf3 { child, output: Some(output), what })
    }

    /// Waits until something listens on TCP `port` in `ns` (the server is
    /// ready), at most `max`.
    fn until_listening(&mut self, ns: &Netns, port: u16, max: Duration) -> Result<()> {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                let out = self.output();
                bail!("iperf3's {} ended before listening ({status}): {}", self.what, out.trim());
            }
            let tables = ns.run(|| ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"].map(|f| std::fs::read_to_string(f).unwrap_or_default()))?;
            if tables.iter().any(|t| listens(t, port)) {
                return Ok(());
            }
            ensure!(t0.elapsed() < max, "iperf3's {} did not listen on port {port} within {max:?}", self.what);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for it to end (at most `max`, then kills it) and returns its
    /// JSON report.
    fn report(mut self, max: Duration) -> Result<Value> {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            ensure!(t0.elapsed() < max, "iperf3's {} did not end within {max:?}", self.what);
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = self.output();
        let v: Value = serde_json::from_str(&out).with_context(|| format!("iperf3's {} ({status}) wrote no JSON report: {}", self.what, out.trim()))?;
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            bail!("iperf3's {}: {e}", self.what);
        }
        ensure!(status.success(), "iperf3's {} failed ({status})", self.what);
        Ok(v)
    }

    /// What it wrote (once it has ended): stdout, else stderr.
    fn output(&mut self) -> String {
        match self.output.take().map(JoinHandle::join) {
            Some(Ok((o, e))) if o.trim().is_empty() => e,
            Some(Ok((o, _))) => o,
            _ => String::new(),
        }
    }
}

impl Drop for Iperf3 {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Whether a `/proc/net/tcp{,6}` table has a socket listening on `port`.
fn listens(table: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_socket_is_found_by_its_port() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                 0: 0200090A:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n   \
                 1: 0200090A:1452 0100090A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        assert!(listens(t, 5201));
        assert!(!listens(t, 5202), "established, not listening");
        assert!(!listens(t, 80));
    }

    #[test]
    fn reports_are_read_from_the_split_sums_or_the_old_sum() {
        let new = serde_json::json!({"end": {"sum_sent": {"packets": 10, "seconds": 1.5}, "sum": {"packets": 3}}});
        assert_eq!((count(&new, "sum_sent", "packets").unwrap(), sum(&new, "sum_sent", "seconds").unwrap()), (10, 1.5));
        let old = serde_json::json!({"end": {"sum": {"packets": 7, "lost_packets": 2}}});
        assert_eq!(count(&old, "sum_received", "lost_packets").unwrap(), 2);
        assert!(count(&serde_json::json!({"error": "x"}), "sum_sent", "packets").is_err());
    }

    #[test]
    fn the_plan_follows_the_offered_rates_and_is_skipped_otherwise() {
        let c: Common = crate::engine::driver::parse_options(&["--load-rates", "1000,2000", "--trial-seconds", "1.5"]).unwrap();
        let b = Baseline::new(false, &c);
        let p = b.plan.as_ref().unwrap();
        assert_eq!((p.rates.as_slice(), p.seconds), (&[1000.0, 2000.0][..], 2));
        assert!(Baseline::new(true, &c).plan.is_none() && Baseline::new(true, &c).notes.is_empty());
        let curve = Baseline::new(false, &crate::engine::driver::parse_options(&["--load-curve", "3"]).unwrap());
        assert!(curve.plan.is_none() && curve.notes[0].contains("--load-curve"), "{:?}", curve.notes);
    }
}
