//! Where dut's ingress is served. A NIC's receive queue has its interrupt
//! on one core, but a veth's NAPI loop runs on whichever CPU found its ring
//! empty and scheduled it: the sending CPU, which in the lab is the
//! generator's. Generator, dut and sink then share one CPU, the zero-loss
//! rate equals the maximum (nothing is ever lost in front of dut: the
//! sender does dut's work before it can send again) and dut's CPU cannot
//! be told from the chain's.
//!
//! Threaded NAPI makes each of a veth's NAPI loops a kernel thread, which
//! is pinned here: dut's ingress on CPUs of its own (the seeds' device
//! under test on its own cores), the sink's on the generator's CPU. dut's
//! ring (256 frames) then fills when dut falls behind and the generator's
//! frames are dropped in front of dut, as on a NIC, and the time dut's
//! threads ran is dut's CPU per packet, apart from the generator's.

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use xnf_netns::{ethtool::Offload, Netns};

use super::topology::BuiltTopology;

/// Priority (SCHED_FIFO) of a NAPI thread sharing a CPU with a busy
/// thread: above every normal thread, as a softirq would be. dut's own
/// threads stay SCHED_OTHER: alone on their CPU they need no priority, and
/// a real-time thread that runs flat out is throttled by the kernel for
/// 50 ms of every second (`sched_rt_runtime_us`), which would read as loss.
pub const PRIORITY: i32 = 50;

/// Where a point's threads run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "placement", rename_all = "kebab-case")]
pub enum Placement {
    /// The kernel's choice: dut and the sink receive on the sending CPU.
    Shared { gen: Vec<usize> },
    /// dut's NAPI threads on `dut` (queue i on `dut[i % len]`), the sink's on `sink`.
    Own { gen: Vec<usize>, dut: Vec<usize>, sink: usize },
}

/// `--dut-cpu`: where dut's ingress is served.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DutCpu {
    /// CPUs the generators do not use, when the machine has one (the default).
    Auto,
    /// On the sending CPU, as the kernel schedules it.
    Shared,
    /// These CPUs.
    Cpus(Vec<usize>),
}

impl DutCpu {
    /// `auto`, `shared` or a list of CPUs.
    pub fn parse(s: &str) -> Result<DutCpu, String> {
        match s.trim() {
            "auto" => Ok(DutCpu::Auto),
            "shared" => Ok(DutCpu::Shared),
            list => list
                .split(',')
                .map(|c| c.trim().parse::<usize>().map_err(|e| format!("`{c}`: {e} (give auto, shared or CPU numbers, e.g. 0 or 2,3)")))
                .collect::<Result<Vec<_>, _>>()
                .map(DutCpu::Cpus),
        }
    }

    /// The placement with generators on `gen` on a machine of `ncpu`
    /// CPUs: auto gives dut the CPUs the generators leave (shared when
    /// they leave none); the sink receives on the first generator's CPU.
    pub fn place(&self, gen: &[usize], ncpu: usize) -> Result<Placement> {
        let dut: Vec<usize> = match self {
            DutCpu::Shared => Vec::new(),
            DutCpu::Auto => (0..ncpu).filter(|c| !gen.contains(c)).take(gen.len()).collect(),
            DutCpu::Cpus(cpus) => {
                for c in cpus {
                    ensure!(*c < ncpu, "--dut-cpu {c} does not exist (this machine has {ncpu})");
                    ensure!(!gen.contains(c), "--dut-cpu {c}: a generator runs there (CPUs {gen:?}); give dut other CPUs or --dut-cpu shared");
                }
                cpus.clone()
            }
        };
        Ok(match dut.is_empty() {
            true => Placement::Shared { gen: gen.to_vec() },
            false => Placement::Own { gen: gen.to_vec(), sink: gen[0], dut },
        })
    }
}

impl Placement {
    /// In words, for the results' notes; `tester` names the host of the
    /// generator and the sink when it is not this one.
    pub fn describe(&self, tester: Option<&str>) -> String {
        match (self, tester) {
            (Placement::Shared { gen }, None) => format!("generator on CPU {}; dut and the sink receive on the sending CPU (shared)", list(gen)),
            (Placement::Own { gen, dut, sink }, None) => {
                format!("generator on CPU {}; dut's ingress served on CPU {} (threaded NAPI, pinned); the sink's on CPU {sink}", list(gen), list(dut))
            }
            (Placement::Shared { gen }, Some(h)) => format!("generator on CPU {} of host `{h}`; dut receives where this host's kernel says", list(gen)),
            (Placement::Own { gen, dut, .. }, Some(h)) => format!(
                "generator on CPU {} of host `{h}`, the sink's receive where its kernel says; dut's ingress served on CPU {} of this host (threaded NAPI, pinned); CPU figures are this host's",
                list(gen),
                list(dut)
            ),
        }
    }

    /// Serves dut's and the sink's ingress where this placement says; to
    /// be called after every variant's set-up: a veth has NAPI only while
    /// it has an XDP program or GRO, and the kernel makes its threads again
    /// whenever that changes. Shared: nothing to do, and no thread to read.
    pub fn apply(&self, t: &BuiltTopology) -> Result<Placed> {
        let Placement::Own { dut, sink, .. } = self else { return Ok(Placed::default()) };
        let roles = t.roles()?;
        let (dns, din) = t.endpoint(&roles.dut_in)?;
        let mut placed = Placed { gro_for_napi: serve_threaded(dns, &din)?, ..Placed::default() };
        let threads = threads_of(&din)?;
        for (i, pid) in threads.iter().enumerate() {
            pin(*pid, dut[i % dut.len()], None).with_context(|| format!("dut's NAPI thread of {din}"))?;
        }
        placed.dut_threads = threads;
        if t.host_of(&roles.sink)?.is_some() {
            return Ok(placed); // its own host's kernel places the sink's receive
        }
        let (sns, sdev) = t.endpoint(&roles.sink)?;
        if sdev != din {
            serve_threaded(sns, &sdev)?;
            for pid in threads_of(&sdev)? {
                pin(pid, *sink, Some(PRIORITY)).with_context(|| format!("the sink's NAPI thread of {sdev}"))?;
            }
        }
        Ok(placed)
    }
}

/// "0" or "0,1".
fn list(cpus: &[usize]) -> String {
    cpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// What [`Placement::apply`] found: dut's NAPI threads, read as dut's CPU time.
#[derive(Debug, Default)]
pub struct Placed {
    pub dut_threads: Vec<i32>,
    /// GRO was turned on at dut's ingress to give it NAPI (no XDP program).
    pub gro_for_napi: bool,
}

impl Placed {
    /// Nanoseconds dut's NAPI threads have run (None: not placed).
    pub fn dut_runtime_ns(&self) -> Result<Option<u64>> {
        if self.dut_threads.is_empty() {
            return Ok(None);
        }
        // A thread that is gone counts nothing: only another lab run's
        // can go while measured (interface names repeat across runs, see
        // threads_of), and its time was never dut's.
        Ok(Some(self.dut_threads.iter().filter_map(|pid| runtime_ns(*pid).ok()).sum()))
    }
}

/// A thread's run time: the first field of /proc/PID/schedstat, in ns.
fn runtime_ns(pid: i32) -> Result<u64> {
    let path = format!("/proc/{pid}/schedstat");
    let s = std::fs::read_to_string(&path).with_context(|| format!("reading {path}: dut's NAPI thread is gone (its program changed while measured?)"))?;
    s.split_whitespace().next().and_then(|f| f.parse().ok()).with_context(|| format!("{path}: no run time in `{}`", s.trim()))
}

/// Makes `dev`'s NAPI threaded (its namespace's sysfs). A veth has NAPI
/// only with an XDP program or GRO on (the kernel answers EIO before):
/// without a program, GRO is turned on, which is what gives a veth NAPI
/// since Linux 5.13. Returns whether it had to.
pub fn serve_threaded(ns: &Netns, dev: &str) -> Result<bool> {
    if set_threaded(ns, dev).is_ok() {
        return Ok(false);
    }
    ns.set_offload(dev, Offload::Gro, true).with_context(|| format!("turning GRO on at {dev} to give it NAPI"))?;
    set_threaded(ns, dev)?;
    Ok(true)
}

fn set_threaded(ns: &Netns, dev: &str) -> Result<()> {
    let out = ns.command("sh").args(["-c", &format!("echo 1 > /sys/class/net/{dev}/threaded")]).output().context("running sh in dut's namespace")?;
    ensure!(out.status.success(), "threaded NAPI on {dev}: {}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(())
}

/// The NAPI threads of interfaces named `dev` (`napi/DEV-ID`). The lab's
/// interface names are its own, but two lab runs at once (tests in
/// parallel) have the same ones: the kernel names no thread's device
/// otherwise before Linux 6.9's netdev family, so such runs share each
/// other's threads here — measured by one, pinned by both.
pub fn threads_of(dev: &str) -> Result<Vec<i32>> {
    let prefix = format!("napi/{dev}-");
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").context("reading /proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end().starts_with(&prefix)) {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    if pids.is_empty() {
        bail!("no NAPI thread of {dev}: threaded NAPI needs an XDP program or GRO on the veth");
    }
    Ok(pids)
}

/// Pins thread `pid` to `cpu`, at real-time `priority` if given (else the
/// normal policy, set back in case an earlier run made it real-time).
pub fn pin(pid: i32, cpu: usize, priority: Option<i32>) -> Result<()> {
    super::cpu::pin(pid, cpu)?;
    let (policy, prio) = priority.map_or((libc::SCHED_OTHER, 0), |p| (libc::SCHED_FIFO, p));
    let param = libc::sched_param { sched_priority: prio };
    // SAFETY: plain syscall on a pid with a valid parameter struct.
    if unsafe { libc::sched_setscheduler(pid, policy, &param) } != 0 {
        bail!("scheduling policy of thread {pid}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_gives_dut_the_cpus_the_generators_leave() {
        let own = |gen: Vec<usize>, dut: Vec<usize>| Placement::Own { sink: gen[0], gen, dut };
        assert_eq!(DutCpu::Auto.place(&[1], 2).unwrap(), own(vec![1], vec![0]));
        assert_eq!(DutCpu::Auto.place(&[0, 1], 2).unwrap(), Placement::Shared { gen: vec![0, 1] }, "no CPU left: shared");
        assert_eq!(DutCpu::Auto.place(&[0, 1], 8).unwrap(), own(vec![0, 1], vec![2, 3]), "a CPU per queue");
        assert_eq!(DutCpu::Auto.place(&[0], 1).unwrap(), Placement::Shared { gen: vec![0] });
        assert_eq!(DutCpu::Shared.place(&[1], 2).unwrap(), Placement::Shared { gen: vec![1] });
        assert_eq!(DutCpu::parse("2, 3").unwrap().place(&[0, 1], 4).unwrap(), own(vec![0, 1], vec![2, 3]));
    }

    #[test]
    fn a_dut_cpu_that_is_busy_or_missing_is_refused_in_one_line() {
        let e = DutCpu::Cpus(vec![1]).place(&[1], 2).unwrap_err().to_string();
        assert!(e.starts_with("--dut-cpu 1: a generator runs there") && !e.contains('\n'), "{e}");
        assert!(DutCpu::Cpus(vec![4]).place(&[1], 2).unwrap_err().to_string().contains("--dut-cpu 4 does not exist"));
        assert!(DutCpu::parse("x").unwrap_err().contains("auto, shared or CPU numbers"));
    }

    #[test]
    fn a_thread_run_time_is_read_from_schedstat() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        // Spun by this thread's own CPU clock, not the wall's: on a busy
        // machine 20 ms of wall time may be much less of run time.
        let cpu_ns = || {
            let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime fills a timespec we own.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        let (a, c0) = (runtime_ns(me).unwrap(), cpu_ns());
        while cpu_ns() < c0 + 20_000_000 {
            std::hint::black_box(0);
        }
        let ran = runtime_ns(me).unwrap() - a;
        assert!((15_000_000..1_000_000_000).contains(&ran), "20 ms of this thread's CPU read as {ran} ns of run time");
    }
}
