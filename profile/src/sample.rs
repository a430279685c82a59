//! Sampled stacks (`bpf/sample.bpf.c`): a software cpu-clock perf event
//! per CPU (this machine has no PMU, and software events work everywhere)
//! runs the sampling program, which counts (pid, command, kernel stack,
//! user stack); at the end the stacks are symbolised into [`Stacks`], the
//! input of the flame graph and the top-functions table.

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags};
use serde::{Deserialize, Serialize};

use crate::skel::sample::{SampleSkel, SampleSkelBuilder};
use crate::symbols::{KernelSymbols, UserSymbols};

pub struct SampleOptions {
    pub cpus: Vec<usize>,
    /// Samples per second per CPU.
    pub frequency: u64,
}

/// What the stack map or the count table could not hold.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SampleLost {
    pub kernel_stacks: u64,
    pub user_stacks: u64,
    pub counts: u64,
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
    /// Brendan Gregg's folded format, merged over CPUs, sorted.
    pub fn folded(&self) -> String {
        let mut m: std::collections::BTreeMap<String, u64> = Default::default();
        for s in &self.stacks {
            *m.entry(s.frames.join(";")).or_default() += s.count;
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
            .map(|(name, (a, b))| TopFunction { name: name.to_string(), self_samples: a, total_samples: b, self_pct: 100.0 * a as f64 / total, total_pct: 100.0 * b as f64 / total })
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

/// The sampling program attached to one perf event per CPU.
pub struct Sampler {
    skel: SampleSkel<'static>,
    /// One per CPU; each owns its perf event.
    _links: Vec<Link>,
    frequency: u64,
    started: Instant,
}

fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into())
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
        match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => bail!("perf events refused ({e}; kernel.perf_event_paranoid = {}): run as root (CAP_PERFMON)", paranoid()),
            Some(libc::ENODEV) | Some(libc::EINVAL) if !std::path::Path::new(&format!("/sys/devices/system/cpu/cpu{cpu}")).exists() => bail!("CPU {cpu} does not exist"),
            _ => bail!("opening a cpu-clock perf event on CPU {cpu}: {e}"),
        }
    }
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

impl Sampler {
    pub fn start(o: &SampleOptions) -> Result<Sampler> {
        let open = SampleSkelBuilder::default().open(xnf_core::maps::object_storage()).context("opening the sampling BPF object")?;
        let skel = open.load().context("loading the sampling program")?;
        let mut links = Vec::new();
        for &cpu in &o.cpus {
            use std::os::fd::{AsRawFd, IntoRawFd};
            let fd = cpu_clock(cpu, o.frequency)?;
            let link = skel.progs.prof_sample.attach_perf_event(fd.as_raw_fd()).with_context(|| format!("attaching the sampler on CPU {cpu}"))?;
            // The link owns the event now: libbpf closes it on detach.
            let _ = fd.into_raw_fd();
            links.push(link);
        }
        Ok(Sampler { skel, _links: links, frequency: o.frequency, started: Instant::now() })
    }

    /// Detaches, reads and symbolises.
    pub fn stop(self) -> Result<Stacks> {
        let seconds = self.started.elapsed().as_secs_f64();
        let Sampler { skel, _links, frequency, .. } = self;
        drop(_links);
        let m = &skel.maps;
        let kernel = KernelSymbols::load().ok();
        let mut user = UserSymbols::default();
        let mut stacks: HashMap<(usize, Vec<String>, usize), u64> = HashMap::new();
        let mut samples = 0;
        for k in m.counts.keys() {
            let Some(v) = m.counts.lookup(&k, MapFlags::ANY)? else { continue };
            let count = u64::from_ne_bytes(v[..8].try_into()?);
            let word = |i: usize| u32::from_ne_bytes(k[i..i + 4].try_into().expect("4 bytes"));
            let (pid, kstack, ustack, cpu) = (word(0), word(4) as i32, word(8) as i32, word(12) as usize);
            let comm = String::from_utf8_lossy(k[16..32].split(|&c| c == 0).next().unwrap_or_default()).into_owned();
            let mut frames = vec![comm];
            for ip in ips(&m.stacks, ustack)?.iter().rev() {
                frames.push(user.resolve(pid, *ip));
            }
            let kernel_from = frames.len();
            for ip in ips(&m.stacks, kstack)?.iter().rev() {
                frames.push(kernel.as_ref().and_then(|s| s.resolve(*ip)).map_or_else(|| format!("{ip:#x}"), str::to_string));
            }
            *stacks.entry((cpu, frames, kernel_from)).or_default() += count;
            samples += count;
        }
        let lost_word = |i: u32| -> Result<u64> { Ok(m.sample_lost.lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default().iter().map(|b| u64::from_ne_bytes(b[..8].try_into().expect("8 bytes"))).sum()) };
        let lost = SampleLost { kernel_stacks: lost_word(0)?, user_stacks: lost_word(1)?, counts: lost_word(2)? };
        let mut stacks: Vec<Stack> = stacks.into_iter().map(|((cpu, frames, kernel_from), count)| Stack { cpu, frames, kernel_from, count }).collect();
        stacks.sort_by(|a, b| b.count.cmp(&a.count).then(a.frames.cmp(&b.frames)));
        Ok(Stacks { frequency, seconds, samples, lost, stacks })
    }
}

/// The instruction pointers of stack `id` (leaf first); none for a negative id.
fn ips(map: &impl MapCore, id: i32) -> Result<Vec<u64>> {
    if id < 0 {
        return Ok(Vec::new());
    }
    let Some(v) = map.lookup(&(id as u32).to_ne_bytes(), MapFlags::ANY)? else { return Ok(Vec::new()) };
    Ok(v.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes"))).take_while(|&ip| ip != 0).collect())
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
    }

    #[test]
    fn busy_leaves_the_idle_task_out() {
        let mut s = stacks();
        s.stacks[2].frames[0] = "swapper/1".into();
        let b = s.busy();
        assert_eq!((b.samples, b.stacks.len()), (7, 2));
    }

    #[test]
    fn on_cpus_keeps_only_theirs() {
        let s = stacks().on_cpus(&[1]);
        assert_eq!((s.samples, s.stacks.len()), (6, 2));
    }
}
