//! Sampled stacks (`bpf/sample.bpf.c`): a software cpu-clock perf event
//! per CPU (this machine has no PMU, and software events work everywhere)
//! runs the sampling program, which copies each sample's kernel and user
//! stacks into a ring buffer; a thread of the [`Sampler`] drains it while
//! sampling runs and counts identical samples; at the end the stacks are
//! symbolised into [`Stacks`], the input of the flame graph and the
//! top-functions table.

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, RingBufferBuilder};
use serde::{Deserialize, Serialize};

use crate::skel::sample::{SampleSkel, SampleSkelBuilder};
use crate::symbols::{KernelSymbols, UserSymbols};

pub struct SampleOptions {
    /// The CPUs to sample (each once); none: every online CPU.
    pub cpus: Vec<usize>,
    /// Samples per second per CPU.
    pub frequency: u64,
}

/// What sampling lost. (Results written before the ring buffer, with a
/// stack map's `counts`, still read: missing fields are 0.)
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SampleLost {
    /// Samples not recorded at all: the ring buffer was full (the reader
    /// fell behind). They are in no stack.
    pub ring_full: u64,
    /// Samples recorded without their kernel stack: the kernel failed to
    /// copy one that was there (they count under [`LOST_KERNEL`]).
    pub kernel_stacks: u64,
    /// The same for user stacks ([`LOST_USER`]).
    pub user_stacks: u64,
}

impl SampleLost {
    /// Samples lost whole or in part (a sample missing both stacks, which
    /// one failure rarely causes, counts twice).
    pub fn total(&self) -> u64 {
        self.ring_full + self.kernel_stacks + self.user_stacks
    }
}

/// One distinct stack and how often it was sampled.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Stack {
    pub cpu: usize,
    /// Root first: the command, user frames (outermost first), kernel frames.
    pub frames: Vec<String>,
    /// Index of the first kernel frame (`frames.len()` if none).
    pub kernel_from: usize,
    pub count: u64,
}

/// The sampled stacks of a profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Stacks {
    pub frequency: u64,
    pub seconds: f64,
    pub samples: u64,
    pub lost: SampleLost,
    pub stacks: Vec<Stack>,
}

/// A function's share of the samples.
#[derive(Clone, Debug, PartialEq)]
pub struct TopFunction {
    pub name: String,
    /// Samples with it as the leaf.
    pub self_samples: u64,
    /// Samples with it anywhere (once per stack).
    pub total_samples: u64,
    pub self_pct: f64,
    pub total_pct: f64,
}

impl Stacks {
    /// Samples the CPUs took: those recorded and those the ring buffer had
    /// no room for. (`lost` is the whole profile's, also after [`Stacks::busy`]
    /// and [`Stacks::on_cpus`].)
    pub fn taken(&self) -> u64 {
        self.samples + self.lost.ring_full
    }

    /// Lost samples (whole or a stack) in percent of those taken.
    pub fn lost_pct(&self) -> f64 {
        100.0 * self.lost.total() as f64 / self.taken().max(1) as f64
    }

    /// Brendan Gregg's folded format (`root;...;leaf COUNT` per line), the
    /// input of flamegraph.pl and most other flame graph tools: merged over
    /// CPUs, sorted. A `;` in a name (a command may hold one) becomes `:`,
    /// a line break a space, so that every line still parses.
    pub fn folded(&self) -> String {
        let mut m: std::collections::BTreeMap<String, u64> = Default::default();
        for s in &self.stacks {
            let frames: Vec<String> = s.frames.iter().map(|f| f.replace(';', ":").replace(['\n', '\r'], " ")).collect();
            *m.entry(frames.join(";")).or_default() += s.count;
        }
        m.into_iter().map(|(k, v)| format!("{k} {v}\n")).collect()
    }

    /// The `n` functions with the most samples as the leaf (the command at
    /// the root is not a function and is left out).
    pub fn top(&self, n: usize) -> Vec<TopFunction> {
        let mut own: HashMap<&str, (u64, u64)> = HashMap::new();
        for s in &self.stacks {
            let funcs = &s.frames[1.min(s.frames.len())..];
            let mut seen: Vec<&str> = Vec::new();
            for f in funcs {
                if !seen.contains(&f.as_str()) {
                    seen.push(f);
                    own.entry(f).or_default().1 += s.count;
                }
            }
            if let Some(leaf) = funcs.last() {
                own.entry(leaf).or_default().0 += s.count;
            }
        }
        let total = self.samples.max(1) as f64;
        let mut v: Vec<TopFunction> = own
            .into_iter()
            .map(|(name, (a, b))| TopFunction {
                name: name.to_string(),
                self_samples: a,
                total_samples: b,
                self_pct: 100.0 * a as f64 / total,
                total_pct: 100.0 * b as f64 / total,
            })
            .collect();
        v.sort_by(|a, b| b.self_samples.cmp(&a.self_samples).then(b.total_samples.cmp(&a.total_samples)).then(a.name.cmp(&b.name)));
        v.truncate(n);
        v
    }

    /// Without the idle task's samples (`swapper/N`, pid 0): a CPU waiting
    /// for work is not where the network's time went.
    pub fn busy(&self) -> Stacks {
        let stacks: Vec<Stack> = self.stacks.iter().filter(|s| !s.frames.first().is_some_and(|c| c.starts_with("swapper"))).cloned().collect();
        Stacks { samples: stacks.iter().map(|s| s.count).sum(), stacks, lost: self.lost.clone(), ..*self }
    }

    /// Only the samples of `cpus`.
    pub fn on_cpus(&self, cpus: &[usize]) -> Stacks {
        let stacks: Vec<Stack> = self.stacks.iter().filter(|s| cpus.contains(&s.cpu)).cloned().collect();
        Stacks { samples: stacks.iter().map(|s| s.count).sum(), stacks, lost: self.lost.clone(), ..*self }
    }
}

/// The sampling program attached to one perf event per CPU, and the
/// thread draining its ring buffer.
pub struct Sampler {
    skel: SampleSkel<'static>,
    /// One per CPU; each owns its perf event.
    links: Vec<Link>,
    drain: Option<Drain>,
    frequency: u64,
    started: Instant,
}

impl Drop for Sampler {
    /// Dropped without [`Sampler::stop`] (an error on the way): the
    /// drainer ends on its own.
    fn drop(&mut self) {
        if let Some(d) = &self.drain {
            d.stop.store(true, Ordering::Release);
        }
    }
}

/// A sysctl's value as text, `?` when unreadable.
fn sysctl(name: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{}", name.replace('.', "/"))).map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into())
}

/// A CPU list of /sys/devices/system/cpu (`0-3,6`) expanded.
fn cpu_list(name: &str) -> Vec<usize> {
    let text = std::fs::read_to_string(format!("/sys/devices/system/cpu/{name}")).unwrap_or_default();
    text.trim()
        .split(',')
        .filter_map(|r| match r.split_once('-') {
            Some((a, b)) => Some(a.parse().ok()?..=b.parse().ok()?),
            None => r.parse().ok().map(|c| c..=c),
        })
        .flatten()
        .collect()
}

/// linux/perf_event.h: close the event's descriptor on exec.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// A software cpu-clock event sampling `cpu` at `frequency` Hz, all processes.
fn cpu_clock(cpu: usize, frequency: u64) -> Result<OwnedFd> {
    // SAFETY: a zeroed perf_event_attr is valid; the fields set are plain data.
    let mut attr: libbpf_sys::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = libbpf_sys::PERF_TYPE_SOFTWARE;
    attr.size = std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32;
    attr.config = libbpf_sys::PERF_COUNT_SW_CPU_CLOCK as u64;
    attr.__bindgen_anon_1.sample_freq = frequency;
    attr.set_freq(1);
    // SAFETY: a valid attr; pid -1 with a CPU samples every process there.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const _, -1i32, cpu as i32, -1i32, PERF_FLAG_FD_CLOEXEC) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        let max_rate = sysctl("kernel.perf_event_max_sample_rate");
        match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => {
                bail!(
                    "perf events on CPU {cpu} refused ({e}; kernel.perf_event_paranoid = {}): run as root (CAP_PERFMON)",
                    sysctl("kernel.perf_event_paranoid")
                )
            }
            Some(libc::EINVAL) if max_rate.parse::<u64>().is_ok_and(|m| frequency > m) => {
                bail!("{frequency} Hz is above kernel.perf_event_max_sample_rate ({max_rate}): sample less often, or raise it with sysctl")
            }
            _ => bail!("opening a cpu-clock perf event on CPU {cpu}: {e}"),
        }
    }
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

impl Sampler {
    /// Opens a cpu-clock event per CPU (`perf_event_open(PERF_TYPE_SOFTWARE,
    /// PERF_COUNT_SW_CPU_CLOCK)` in frequency mode, every process) and
    /// attaches the sampling program to each. The events are opened before
    /// the program is loaded so that a refusal names what decides it
    /// (kernel.perf_event_paranoid) rather than a BPF load error. Every
    /// error is one line that says what to do.
    pub fn start(o: &SampleOptions) -> Result<Sampler> {
        anyhow::ensure!(o.frequency > 0, "a sampling frequency of 0 Hz samples nothing: give at least 1 Hz");
        // Without sysfs (an unusual container) perf_event_open judges alone.
        let online = cpu_list("online");
        let mut cpus = match (o.cpus.is_empty(), online.is_empty()) {
            (false, _) => o.cpus.clone(),
            (true, false) => online.clone(),
            // SAFETY: sysconf reads a value.
            (true, true) => (0..unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize).collect(),
        };
        // A CPU listed twice would get two events: its samples counted twice.
        cpus.sort_unstable();
        cpus.dedup();
        for &cpu in &cpus {
            if !online.is_empty() && !online.contains(&cpu) {
                let possible = cpu_list("possible");
                let have = compact_cpus(&online);
                if possible.contains(&cpu) {
                    bail!("CPU {cpu} is offline: bring it online (echo 1 > /sys/devices/system/cpu/cpu{cpu}/online) or sample CPUs {have}");
                }
                bail!("CPU {cpu} does not exist: this machine has CPUs {have}");
            }
        }
        let events = cpus.iter().map(|&cpu| Ok((cpu, cpu_clock(cpu, o.frequency)?))).collect::<Result<Vec<_>>>()?;
        let mut open = SampleSkelBuilder::default().open(xnf_core::maps::object_storage()).context("opening the sampling BPF object")?;
        open.maps.samples.set_max_entries(ring_bytes(cpus.len(), o.frequency)).context("sizing the sample ring buffer")?;
        let skel = open.load().context("loading the sampling program (needs root: CAP_BPF and CAP_PERFMON)")?;
        // Draining starts before the first sample.
        let drain = Drain::start(MapHandle::try_from(&skel.maps.samples).context("opening the sample ring buffer")?)?;
        let mut sampler = Sampler { skel, links: Vec::new(), drain: Some(drain), frequency: o.frequency, started: Instant::now() };
        for (cpu, fd) in events {
            use std::os::fd::{AsRawFd, IntoRawFd};
            let link = sampler.skel.progs.prof_sample.attach_perf_event(fd.as_raw_fd()).with_context(|| format!("attaching the sampler on CPU {cpu}"))?;
            // The link owns the event now: libbpf closes it on detach.
            let _ = fd.into_raw_fd();
            sampler.links.push(link);
        }
        sampler.started = Instant::now();
        Ok(sampler)
    }

    /// Detaches, drains what is left in the ring, and symbolises the
    /// stacks: kernel frames from /proc/kallsyms, user frames through each
    /// process's /proc/PID/maps (read now: a process gone by then gives
    /// `[unknown]`).
    pub fn stop(mut self) -> Result<Stacks> {
        let seconds = self.started.elapsed().as_secs_f64();
        // No sample comes after the events are closed: the drainer's last
        // read gets them all.
        self.links.clear();
        let counts = self.drain.take().expect("drained once").finish()?;
        let m = &self.skel.maps;
        let kernel = KernelSymbols::load().ok();
        let mut user = UserSymbols::default();
        let mut stacks: HashMap<(usize, Vec<String>, usize), u64> = HashMap::new();
        let mut samples = 0;
        for (r, count) in counts {
            let mut frames = vec![String::from_utf8_lossy(r.comm.split(|&c| c == 0).next().unwrap_or_default()).into_owned()];
            match r.user {
                None => frames.push(LOST_USER.into()),
                Some(ips) => frames.extend(lookup_addresses(ips).rev().map(|ip| user.resolve(r.pid, ip))),
            }
            let kernel_from = frames.len();
            match r.kernel {
                None => frames.push(LOST_KERNEL.into()),
                Some(ips) => frames.extend(
                    lookup_addresses(ips).rev().map(|ip| kernel.as_ref().and_then(|s| s.resolve(ip)).map_or_else(|| format!("{ip:#x}"), str::to_string)),
                ),
            }
            *stacks.entry((r.cpu as usize, frames, kernel_from)).or_default() += count;
            samples += count;
        }
        let lost_word = |i: u32| -> Result<u64> {
            Ok(m.sample_lost
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)?
                .unwrap_or_default()
                .iter()
                .map(|b| u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")))
                .sum())
        };
        let lost = SampleLost { ring_full: lost_word(0)?, kernel_stacks: lost_word(1)?, user_stacks: lost_word(2)? };
        let mut stacks: Vec<Stack> = stacks.into_iter().map(|((cpu, frames, kernel_from), count)| Stack { cpu, frames, kernel_from, count }).collect();
        stacks.sort_by(|a, b| b.count.cmp(&a.count).then(a.frames.cmp(&b.frames)));
        Ok(Stacks { frequency: self.frequency, seconds, samples, lost, stacks })
    }
}

/// The frame in place of a stack the kernel failed to copy (counted in
/// [`SampleLost`]): the sample still counts, under its command.
pub const LOST_USER: &str = "[lost user stack]";
/// The same for a kernel stack.
pub const LOST_KERNEL: &str = "[lost kernel stack]";

/// Frames per stack in a record (`SAMPLE_DEPTH`): kernel.perf_event_max_stack's
/// default, the deepest the kernel copies unless raised.
const DEPTH: usize = 127;
/// `struct sample_rec`: pid, cpu, comm\[16\], kbytes, ubytes, kips, uips.
const RECORD: usize = 32 + 2 * DEPTH * 8;
/// The ring buffer's header in front of every record (BPF_RINGBUF_HDR_SZ).
const RING_HDR: usize = 8;
/// How often the drainer reads the ring; the program wakes it sooner when
/// the ring is half full.
const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// The ring buffer's size: about a second of samples on every CPU, so the
/// drainer may be kept off a busy CPU for a long while before a sample is
/// lost (4 MiB for 2 CPUs at 999 Hz). A power of two, as the kernel
/// requires, from 256 KiB to 16 MiB.
fn ring_bytes(cpus: usize, frequency: u64) -> u32 {
    let second = (cpus.max(1) as u64).saturating_mul(frequency).saturating_mul((RECORD + RING_HDR) as u64);
    second.checked_next_power_of_two().unwrap_or(u64::MAX).clamp(256 << 10, 16 << 20) as u32
}

/// One sample as the program recorded it; what the drainer counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Sample {
    cpu: u32,
    pid: u32,
    comm: [u8; 16],
    /// Instruction pointers, leaf first; `None`: the kernel failed to copy
    /// the stack (empty: there was none).
    kernel: Option<Vec<u64>>,
    user: Option<Vec<u64>>,
}

impl Sample {
    /// A record of `struct sample_rec`; `None` if it is not one (the BPF
    /// object and this file disagree).
    fn parse(r: &[u8]) -> Option<Sample> {
        if r.len() < RECORD {
            return None;
        }
        let word = |i: usize| u32::from_ne_bytes(r[i..i + 4].try_into().expect("4 bytes"));
        // bpf_get_stack's result: bytes copied; 0 is no stack (user mode
        // has no kernel stack, a kernel thread no user stack); negative,
        // one it failed to copy.
        let ips = |bytes: u32, at: usize| -> Option<Vec<u64>> {
            let n = usize::try_from(bytes as i32).ok()? / 8;
            Some(r[at..at + 8 * n.min(DEPTH)].chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes"))).collect())
        };
        Some(Sample {
            pid: word(0),
            cpu: word(4),
            comm: r[8..24].try_into().expect("16 bytes"),
            kernel: ips(word(24), 32),
            user: ips(word(28), 32 + 8 * DEPTH),
        })
    }
}

/// The thread that drains the ring buffer while sampling runs: the ring
/// holds about a second of samples, a profile many.
struct Drain {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<HashMap<Sample, u64>>>,
}

impl Drain {
    fn start(ring: MapHandle) -> Result<Drain> {
        use nix::sys::signal::{SigSet, SigmaskHow};
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        // `xnf profile` waits for Ctrl-C with sigtimedwait in its main
        // thread, which works only if every thread blocks the signal (the
        // kernel hands a process's signal to any thread that does not): the
        // drainer blocks all, from birth, as it inherits the mask.
        let old = SigSet::all().thread_swap_mask(SigmaskHow::SIG_BLOCK).context("blocking signals for the sample drainer")?;
        let thread = std::thread::Builder::new().name("xnf-prof-drain".into()).spawn(move || drain(&ring, &s));
        old.thread_set_mask().context("restoring the signal mask")?;
        Ok(Drain { stop, thread: thread.context("starting the sample drainer")? })
    }

    /// Stops the thread (after the events are closed) and returns its counts.
    fn finish(self) -> Result<HashMap<Sample, u64>> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().map_err(|_| anyhow::anyhow!("the sample drainer panicked"))?
    }
}

/// Reads `ring` every [`DRAIN_EVERY`] (or when the program wakes it) until
/// `stop`, then once more, counting identical samples.
fn drain(ring: &MapHandle, stop: &AtomicBool) -> Result<HashMap<Sample, u64>> {
    let mut counts: HashMap<Sample, u64> = HashMap::new();
    let mut bad = None;
    {
        let mut b = RingBufferBuilder::new();
        b.add(ring, |r: &[u8]| {
            match Sample::parse(r) {
                Some(s) => *counts.entry(s).or_default() += 1,
                None => bad = Some(r.len()),
            }
            0
        })?;
        let rb = b.build().context("reading the sample ring buffer")?;
        loop {
            let last = stop.load(Ordering::Acquire);
            // The program submits without waking the reader (see
            // sample.bpf.c), so the poll mostly times out having read
            // nothing: the consume after it reads the ring.
            let n = if last { 0 } else { rb.poll_raw(DRAIN_EVERY) };
            let n = if n < 0 { n } else { rb.consume_raw() };
            if n < 0 && n != -libc::EINTR {
                bail!("reading the sample ring buffer: {}", std::io::Error::from_raw_os_error(-n));
            }
            if last {
                break;
            }
        }
    }
    if let Some(len) = bad {
        bail!("a sample record of {len} bytes, not {RECORD}: the sampling BPF object does not match xnf");
    }
    Ok(counts)
}

/// `cpus` as a compact list (`0-3,6`).
fn compact_cpus(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    if out.is_empty() {
        "(none online)".into()
    } else {
        out.join(",")
    }
}

/// The addresses to look up for a stack's instruction pointers (leaf
/// first): the leaf is where the CPU was; every other frame is a return
/// address, the instruction after a call, which at the end of a function
/// (a call to something that does not return) already belongs to the next
/// one: one byte back is still the call.
fn lookup_addresses(ips: Vec<u64>) -> impl DoubleEndedIterator<Item = u64> {
    ips.into_iter().enumerate().map(|(i, ip)| if i == 0 { ip } else { ip.saturating_sub(1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stacks() -> Stacks {
        let st = |cpu, f: &[&str], k, count| Stack { cpu, frames: f.iter().map(|s| s.to_string()).collect(), kernel_from: k, count };
        Stacks {
            frequency: 99,
            seconds: 1.0,
            samples: 10,
            lost: SampleLost::default(),
            stacks: vec![
                st(0, &["gen", "main", "do_syscall_64", "veth_xmit"], 2, 4),
                st(1, &["gen", "main", "do_syscall_64"], 2, 3),
                st(1, &["swapper", "cpu_idle", "cpu_idle"], 1, 3),
            ],
        }
    }

    #[test]
    fn folded_merges_and_sorts() {
        assert_eq!(stacks().folded(), "gen;main;do_syscall_64 3\ngen;main;do_syscall_64;veth_xmit 4\nswapper;cpu_idle;cpu_idle 3\n");
    }

    #[test]
    fn top_counts_leaves_and_each_function_once_per_stack() {
        let t = stacks().top(10);
        assert_eq!((t[0].name.as_str(), t[0].self_samples, t[0].total_samples), ("veth_xmit", 4, 4));
        let syscall = t.iter().find(|f| f.name == "do_syscall_64").unwrap();
        assert_eq!((syscall.self_samples, syscall.total_samples, syscall.total_pct), (3, 7, 70.0));
        let idle = t.iter().find(|f| f.name == "cpu_idle").unwrap();
        assert_eq!((idle.self_samples, idle.total_samples), (3, 3), "recursion counted once");
        assert!(t.iter().all(|f| f.name != "gen" && f.name != "swapper"), "commands are not functions");
        assert_eq!(t[0].self_pct, 40.0);
        assert_eq!(syscall.self_pct, 30.0);
        let main = t.iter().find(|f| f.name == "main").unwrap();
        assert_eq!((main.self_samples, main.self_pct, main.total_pct), (0, 0.0, 70.0));
        // Ties on self samples go to more total samples, then by name.
        let names: Vec<&str> = t.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["veth_xmit", "do_syscall_64", "cpu_idle", "main"]);
        assert_eq!(stacks().top(2).len(), 2);
    }

    #[test]
    fn busy_leaves_the_idle_task_out() {
        let mut s = stacks();
        s.stacks[2].frames[0] = "swapper/1".into();
        let b = s.busy();
        assert_eq!((b.samples, b.stacks.len()), (7, 2));
    }

    #[test]
    fn folded_lines_parse_whatever_the_names() {
        let mut s = stacks();
        s.stacks[2].frames[0] = "a;b\nc".into();
        let f = s.folded();
        assert!(f.contains("a:b c;cpu_idle;cpu_idle 3\n"), "{f}");
        assert_eq!(f.lines().count(), 3);
    }

    #[test]
    fn return_addresses_are_looked_up_one_byte_back() {
        assert_eq!(lookup_addresses(vec![0x100, 0x200, 0x300]).collect::<Vec<_>>(), [0x100, 0x1ff, 0x2ff]);
        assert_eq!(lookup_addresses(vec![]).count(), 0);
    }

    /// A `struct sample_rec` as the program writes it.
    fn record(pid: u32, kbytes: i32, ubytes: i32, kips: &[u64], uips: &[u64]) -> Vec<u8> {
        let mut r = vec![0u8; RECORD];
        r[0..4].copy_from_slice(&pid.to_ne_bytes());
        r[4..8].copy_from_slice(&1u32.to_ne_bytes());
        r[8..12].copy_from_slice(b"spin");
        r[24..28].copy_from_slice(&kbytes.to_ne_bytes());
        r[28..32].copy_from_slice(&ubytes.to_ne_bytes());
        for (i, ip) in kips.iter().enumerate() {
            r[32 + 8 * i..40 + 8 * i].copy_from_slice(&ip.to_ne_bytes());
        }
        for (i, ip) in uips.iter().enumerate() {
            r[32 + 8 * DEPTH + 8 * i..40 + 8 * DEPTH + 8 * i].copy_from_slice(&ip.to_ne_bytes());
        }
        r
    }

    #[test]
    fn only_stacks_the_kernel_failed_to_copy_are_lost() {
        let s = Sample::parse(&record(7, 16, 8, &[0xa, 0xb], &[0xc])).unwrap();
        assert_eq!((s.pid, s.cpu, &s.comm[..5]), (7, 1, &b"spin\0"[..]));
        assert_eq!((s.kernel, s.user), (Some(vec![0xa, 0xb]), Some(vec![0xc])));
        // No stack (0 bytes: user mode, a kernel thread) is not a loss.
        let s = Sample::parse(&record(0, 8, 0, &[0xa], &[])).unwrap();
        assert_eq!((s.kernel, s.user), (Some(vec![0xa]), Some(vec![])));
        let s = Sample::parse(&record(7, -libc::EFAULT, 8, &[], &[0xc])).unwrap();
        assert_eq!((s.kernel, s.user), (None, Some(vec![0xc])));
        assert_eq!(Sample::parse(&record(7, 8, -libc::EFAULT, &[0xa], &[])).unwrap().user, None);
        // A full stack, and a count beyond the record, stop at its depth.
        assert_eq!(Sample::parse(&record(7, 8 * DEPTH as i32 + 64, 0, &[1; DEPTH], &[])).unwrap().kernel.unwrap().len(), DEPTH);
        assert_eq!(Sample::parse(&record(7, 8, 8, &[1], &[2])[..RECORD - 1]), None, "not a record");
    }

    #[test]
    fn the_ring_holds_about_a_second_within_bounds() {
        assert_eq!(ring_bytes(2, 999), 4 << 20, "2 CPUs at 999 Hz");
        assert!(ring_bytes(2, 999) as usize >= 2 * 999 * (RECORD + RING_HDR));
        assert_eq!(ring_bytes(1, 1), 256 << 10);
        assert_eq!(ring_bytes(256, 100_000), 16 << 20);
        assert_eq!(ring_bytes(usize::MAX, u64::MAX), 16 << 20);
    }

    #[test]
    fn results_of_the_stack_map_still_read() {
        let l: SampleLost = serde_json::from_str(r#"{"kernel_stacks": 3, "user_stacks": 4, "counts": 0}"#).unwrap();
        assert_eq!(l, SampleLost { ring_full: 0, kernel_stacks: 3, user_stacks: 4 });
    }

    #[test]
    fn lost_samples_are_counted_against_those_taken() {
        let mut s = stacks();
        assert_eq!((s.taken(), s.lost_pct()), (10, 0.0));
        s.lost = SampleLost { ring_full: 10, kernel_stacks: 1, user_stacks: 1 };
        assert_eq!((s.taken(), s.lost.total(), s.lost_pct()), (20, 12, 60.0));
    }

    #[test]
    fn cpu_lists_compact() {
        assert_eq!(compact_cpus(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(compact_cpus(&[]), "(none online)");
        assert!(cpu_list("online").contains(&0), "CPU 0 is online");
    }

    #[test]
    fn on_cpus_keeps_only_theirs() {
        let s = stacks().on_cpus(&[1]);
        assert_eq!((s.samples, s.stacks.len()), (6, 2));
    }
}
