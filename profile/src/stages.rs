//! The tracepoint program (`bpf/stages.bpf.c`): loaded with the CPUs and
//! namespace to watch, attached tracepoint by tracepoint (a missing one is
//! named), and its maps read into a [`Profile`].

use std::collections::HashMap;

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags};

use xnf_core::procstat::{self, CpuTimes};

use crate::model::{Cpu, Device, Drop, Hist, Lost, Outcome, Profile, Stage, EVENTS, OUTCOMES, STAGES};
use crate::reasons::Reasons;
use crate::skel::stages::{StagesSkel, StagesSkelBuilder};
use crate::symbols::KernelSymbols;

/// `PROF_DEV_SLOTS` in bpf/stages.h.
const PROF_DEV_SLOTS: u32 = 64;

/// Each program's tracepoint (system/event in tracefs); optional ones are
/// left unloaded on kernels without them.
const TRACEPOINTS: [(&str, &str, bool); 21] = [
    ("prof_softirq_entry", "irq/softirq_entry", false),
    ("prof_softirq_exit", "irq/softirq_exit", false),
    ("prof_gro_entry", "net/napi_gro_receive_entry", false),
    ("prof_gro_exit", "net/napi_gro_receive_exit", false),
    ("prof_netif_rx", "net/netif_rx", false),
    ("prof_receive", "net/netif_receive_skb", false),
    ("prof_fib", "fib/fib_table_lookup", false),
    ("prof_fib6", "fib6/fib6_table_lookup", true),
    ("prof_queue", "net/net_dev_queue", false),
    ("prof_xmit", "net/net_dev_xmit", false),
    ("prof_socket", "sock/sk_data_ready", true),
    ("prof_copy", "skb/skb_copy_datagram_iovec", false),
    ("prof_kfree", "skb/kfree_skb", false),
    ("prof_consume", "skb/consume_skb", false),
    ("prof_napi_poll", "napi/napi_poll", false),
    ("prof_xdp_devmap_xmit", "xdp/xdp_devmap_xmit", false),
    ("prof_xdp_redirect_err", "xdp/xdp_redirect_err", false),
    ("prof_xdp_exception", "xdp/xdp_exception", false),
    ("prof_xdp_bulk_tx", "xdp/xdp_bulk_tx", false),
    ("prof_switch", "sched/sched_switch", false),
    ("prof_wakeup", "sched/sched_wakeup", false),
];

/// What to watch.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    /// CPUs (empty: all).
    pub cpus: Vec<usize>,
    /// The namespace's name and inode: packets, devices and drops outside
    /// it are not counted.
    pub netns: Option<(String, u32)>,
    /// Packets followed at once (the in-flight table's size).
    pub in_flight: u32,
    /// Counts only: no tracepoint that fires per packet (no stages, no
    /// packet records), for the least overhead.
    pub counts_only: bool,
    /// Follow one packet in N to its end of life (0 or 1: every packet):
    /// the table's updates are the costliest part of a packet's probes.
    pub follow_every: u32,
    /// Slots of the direct-mapped device table (a power of two up to 64;
    /// 0: 64). Devices whose slot is taken are counted in the hash: tests
    /// use one slot to send all but one there.
    pub device_slots: u32,
}

/// The programs left out with [`Watch::counts_only`]: those that run once
/// per packet (or more), and the softirq's entry and exit, whose runs and
/// time the kernel counts itself (/proc/softirqs, /proc/stat).
const NOT_COUNTING: [&str; 13] = [
    "prof_gro_entry",
    "prof_gro_exit",
    "prof_netif_rx",
    "prof_receive",
    "prof_fib",
    "prof_fib6",
    "prof_queue",
    "prof_xmit",
    "prof_socket",
    "prof_copy",
    "prof_consume",
    "prof_softirq_entry",
    "prof_softirq_exit",
];

/// The kernel's own softirq accounting at the start, for counting only.
struct KernelSoftirqs {
    rx: Vec<u64>,
    tx: Vec<u64>,
    cpu: Vec<CpuTimes>,
}

impl KernelSoftirqs {
    fn now() -> Result<KernelSoftirqs> {
        Ok(KernelSoftirqs { rx: procstat::softirq_runs("NET_RX")?, tx: procstat::softirq_runs("NET_TX")?, cpu: procstat::sample()? })
    }
}

/// The attached tracepoint program.
pub struct Tracer {
    skel: StagesSkel<'static>,
    _links: Vec<Link>,
    missing: Vec<&'static str>,
    reasons: Reasons,
    /// Counting only: the kernel's softirq accounting at the start.
    kernel: Option<KernelSoftirqs>,
    follow_every: u32,
}

fn tracepoint_exists(tracefs: &str, event: &str) -> bool {
    std::path::Path::new(&format!("{tracefs}/events/{event}/id")).exists()
}

impl Tracer {
    pub fn start(w: &Watch) -> Result<Tracer> {
        let tracefs = xnf_core::features::tracefs().map_err(|e| anyhow::anyhow!("{e}"))?;
        let reasons = Reasons::load()?;
        let missing: Vec<&str> = TRACEPOINTS.iter().filter(|t| !tracepoint_exists(tracefs, t.1)).map(|t| t.1).collect();
        if let Some((_, tp, _)) = TRACEPOINTS.iter().find(|t| !t.2 && missing.contains(&t.1)) {
            bail!("this kernel has no tracepoint {} ({tracefs}/events/{tp}): xnf profile needs it", tp.replace('/', ":"));
        }
        let mut open = StagesSkelBuilder::default().open(xnf_core::maps::object_storage()).context("opening the profiler's BPF object")?;
        let ro = open.maps.rodata_data.as_deref_mut().context("the profiler has no rodata")?;
        ro.cpu_mask = w.cpus.iter().fold(0u64, |m, &c| m | 1 << c);
        ro.netns_filter = w.netns.as_ref().map_or(0, |n| n.1);
        ro.reason_consumed = reasons.value("SKB_CONSUMED").unwrap_or(u32::MAX);
        ro.follow_every = w.follow_every.max(1);
        ro.counts_only = w.counts_only as u32;
        if w.device_slots != 0 {
            ensure!(w.device_slots.is_power_of_two() && w.device_slots <= PROF_DEV_SLOTS, "device slots: a power of two up to {PROF_DEV_SLOTS}");
            ro.dev_slot_mask = w.device_slots - 1;
        }
        open.maps.inflight.set_max_entries(w.in_flight.max(1))?;
        for mut p in open.open_object_mut().progs_mut() {
            let name = p.name().to_string_lossy().into_owned();
            if TRACEPOINTS.iter().any(|t| t.0 == name && missing.contains(&t.1)) || (w.counts_only && NOT_COUNTING.contains(&name.as_str())) {
                p.set_autoload(false);
            }
        }
        let skel = open.load().context("loading the profiler's tracepoint programs (tp_btf needs BTF and Linux 5.5+)")?;
        let mut links = Vec::new();
        for p in skel.object().progs_mut() {
            let name = p.name().to_string_lossy().into_owned();
            let tp = TRACEPOINTS.iter().find(|t| t.0 == name).map_or("?", |t| t.1);
            if missing.contains(&tp) || (w.counts_only && NOT_COUNTING.contains(&name.as_str())) {
                continue;
            }
            links.push(p.attach().with_context(|| format!("attaching to tracepoint {}", tp.replace('/', ":")))?);
        }
        let kernel = if w.counts_only { Some(KernelSoftirqs::now()?) } else { None };
        Ok(Tracer { skel, _links: links, missing, reasons, kernel, follow_every: w.follow_every.max(1) })
    }

    /// What each view is measured with on this kernel.
    pub fn measured_with(&self) -> Vec<String> {
        let mut v = vec![
            "stages: tp_btf on irq:softirq_entry/exit (NET_RX), net:napi_gro_receive_entry/exit, net:netif_receive_skb, fib:fib_table_lookup, fib6:fib6_table_lookup, net:net_dev_queue, net:net_dev_xmit, sock:sk_data_ready, skb:kfree_skb, skb:consume_skb".to_string(),
            "packets: netif_receive_skb .. net_dev_xmit (forwarded), sk_data_ready (delivered: the CPU's oldest packet in flight), kfree_skb (dropped), consume_skb (consumed)".into(),
            "devices: napi:napi_poll, net:napi_gro_receive_entry, net:netif_rx, xdp:xdp_devmap_xmit (redirects, per bulk), xdp:xdp_redirect_err, xdp:xdp_bulk_tx (XDP_TX), xdp:xdp_exception".into(),
            "drop reasons: skb:kfree_skb, named from the kernel's BTF (enum skb_drop_reason)".into(),
            "scheduling: sched:sched_switch, sched:sched_wakeup; XDP programs: BPF_ENABLE_STATS run time".into(),
            "kprobes/fentry: not used (tracepoints cover every stage boundary; this kernel refuses both)".into(),
        ];
        if self.kernel.is_some() {
            v[0] = "stages: not measured (counts only: no tracepoint that fires per packet, no packet records)".into();
            v[1] = "softirq: NET_RX and NET_TX runs from /proc/softirqs, time from /proc/stat (every softirq vector; tick-sampled without CONFIG_IRQ_TIME_ACCOUNTING)".into();
            v[2] = "devices: napi:napi_poll, xdp:xdp_devmap_xmit (redirects, per bulk), xdp:xdp_redirect_err, xdp:xdp_bulk_tx (XDP_TX), xdp:xdp_exception; frames into the stack not counted".into();
        }
        for m in &self.missing {
            v.push(format!("{}: not in this kernel, its boundary is merged into the neighbouring stage", m.replace('/', ":")));
        }
        v
    }

    /// Everything counted so far, over the CPUs in `cpus`.
    pub fn read(&self, cpus: &[usize], ksyms: Option<&KernelSymbols>) -> Result<Profile> {
        let m = &self.skel.maps;
        let want = |c: usize| cpus.is_empty() || cpus.contains(&c);
        let mut p = Profile::default();
        // Stages, per CPU and summed.
        let stage_rows: Vec<Vec<Vec<u64>>> = (0..STAGES.len() as u32).map(|i| percpu(&m.stages, &i.to_ne_bytes())).collect::<Result<_>>()?;
        let soft = percpu(&m.softirq, &0u32.to_ne_bytes())?;
        if let Some(k) = &self.kernel {
            self.kernel_softirqs(k, &mut p, cpus)?;
        } else {
            for (cpu, s) in soft.iter().enumerate().filter(|(c, _)| want(*c)) {
                let stage_ns = stage_rows.iter().map(|r| r.get(cpu).map_or(0, |v| v[0])).collect();
                p.per_cpu.push(Cpu {
                    cpu,
                    softirqs: s[0],
                    softirq_ns: s[1],
                    stage_ns,
                    tx_softirqs: s[34],
                    tx_softirq_ns: s[35],
                    switches: s[36],
                    ksoftirqd_ns: s[37],
                });
                p.softirqs += s[0];
                p.softirq_ns += s[1];
                p.softirq_hist.add(&Hist { buckets: s[2..34].to_vec() });
            }
            for (i, (name, _)) in STAGES.iter().enumerate() {
                let rows = stage_rows[i].iter().enumerate().filter(|(c, _)| want(*c));
                let (ns, intervals) = rows.fold((0, 0), |a, (_, v)| (a.0 + v[0], a.1 + v[1]));
                p.stages.push(Stage { name: name.to_string(), ns, intervals });
            }
        }
        // Packets by end of life, run-queue delay.
        let o = sum_percpu(&percpu(&m.outcomes, &0u32.to_ne_bytes())?, cpus);
        for (i, name) in OUTCOMES.iter().enumerate() {
            let h = 4 + i * 32;
            p.outcomes.push(Outcome { name: name.to_string(), count: o[i], latency: Hist { buckets: o[h..h + 32].to_vec() } });
        }
        p.runq = Hist { buckets: o[132..164].to_vec() };
        p.events = EVENTS
            .iter()
            .enumerate()
            .map(|(i, e)| Ok((e.to_string(), sum_percpu(&percpu(&m.events, &(i as u32).to_ne_bytes())?, cpus)[0])))
            .collect::<Result<_>>()?;
        let lost: Vec<u64> = (0..5u32).map(|i| Ok(sum_percpu(&percpu(&m.lost, &i.to_ne_bytes())?, cpus)[0])).collect::<Result<_>>()?;
        p.lost = Lost {
            packets: lost[0],
            restarted: lost[1],
            devices: lost[2],
            drops: lost[3],
            wakeups: lost[4],
            in_flight: m.inflight.keys().count() as u64,
            stacks: 0,
        };
        // Devices (direct-mapped slots and the hash, merged by address) and drops.
        let mut copies: HashMap<u64, Vec<Vec<u8>>> = HashMap::new();
        for slot in 0..PROF_DEV_SLOTS {
            for (cpu, b) in m.devslots.lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default().into_iter().enumerate() {
                let key = u64::from_ne_bytes(b[0..8].try_into()?);
                if key != 0 && want(cpu) {
                    copies.entry(key).or_default().push(b[8..].to_vec());
                }
            }
        }
        for k in m.devices.keys() {
            let key = u64::from_ne_bytes(k[0..8].try_into()?);
            let raw = m.devices.lookup_percpu(&k, MapFlags::ANY)?.unwrap_or_default();
            copies.entry(key).or_default().extend(raw.into_iter().enumerate().filter(|(c, _)| want(*c)).map(|(_, b)| b));
        }
        let names = namespaces();
        for raw in copies.values() {
            if let Some(d) = device(raw, &names) {
                p.devices.push(d);
            }
        }
        p.devices.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        p.packets = p.devices.iter().map(|d| d.received).sum();
        // Each CPU's run of drops not yet in the table is added to it.
        let mut counted: HashMap<(u32, u64), u64> = HashMap::new();
        for k in m.drops.keys() {
            let n = sum_percpu(&percpu(&m.drops, &k)?, cpus)[0];
            *counted.entry((u32::from_ne_bytes(k[0..4].try_into()?), u64::from_ne_bytes(k[8..16].try_into()?))).or_default() += n;
        }
        for w in percpu(&m.cpu_state, &0u32.to_ne_bytes())?.iter().enumerate().filter(|(c, _)| want(*c)).map(|(_, w)| w) {
            // struct cpu_state: 6 words, then the drop run: location, pending, reason.
            if w.len() >= 9 && w[7] > 0 {
                *counted.entry((w[8] as u32, w[6])).or_default() += w[7];
            }
        }
        let mut drops: HashMap<(String, String), u64> = HashMap::new();
        for ((reason, addr), n) in counted {
            if n == 0 {
                continue;
            }
            let reason = self.reasons.name(reason);
            let location = ksyms.and_then(|s| s.resolve(addr)).map(str::to_string).unwrap_or_else(|| format!("{addr:#x}"));
            *drops.entry((reason, location)).or_default() += n;
        }
        p.drops = drops.into_iter().map(|((reason, location), count)| Drop { reason, location, count }).collect();
        p.drops.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
        p.measured_with = self.measured_with();
        p.follow_every = self.follow_every;
        Ok(p)
    }
}

impl Tracer {
    /// Counting only: softirq runs and time since the start from the
    /// kernel's accounting; context switches and ksoftirqd from the program.
    fn kernel_softirqs(&self, k: &KernelSoftirqs, p: &mut Profile, cpus: &[usize]) -> Result<()> {
        let now = KernelSoftirqs::now()?;
        let soft = percpu(&self.skel.maps.softirq, &0u32.to_ne_bytes())?;
        let time = procstat::delta(&now.cpu, &k.cpu);
        p.counts_only = true;
        for (cpu, t) in time.iter().enumerate().filter(|(c, _)| cpus.is_empty() || cpus.contains(c)) {
            let runs = |now: &[u64], then: &[u64]| now.get(cpu).unwrap_or(&0).saturating_sub(*then.get(cpu).unwrap_or(&0));
            let ns = (t.softirq as f64 * 1e9 / procstat::clk_tck()) as u64;
            let s = soft.get(cpu).cloned().unwrap_or_default();
            let word = |i: usize| s.get(i).copied().unwrap_or(0);
            let c = Cpu {
                cpu,
                softirqs: runs(&now.rx, &k.rx),
                softirq_ns: ns,
                stage_ns: vec![0; STAGES.len()],
                tx_softirqs: runs(&now.tx, &k.tx),
                tx_softirq_ns: 0,
                switches: word(36),
                ksoftirqd_ns: word(37),
            };
            p.softirqs += c.softirqs;
            p.softirq_ns += c.softirq_ns;
            p.per_cpu.push(c);
        }
        p.stages = STAGES.iter().map(|(name, _)| Stage { name: name.to_string(), ns: 0, intervals: 0 }).collect();
        Ok(())
    }
}

/// A device from its per-CPU copies of `struct prof_dev`, or None when it
/// is outside the namespace watched or did nothing.
fn device(copies: &[Vec<u8>], names: &HashMap<u32, String>) -> Option<Device> {
    // Name, namespace and index are in the copies of the CPUs that used it.
    let b = copies.iter().find(|b| b.len() >= 184 && b[180..184] != [0; 4])?;
    let word = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    if word(176) == 0 {
        return None; // outside the namespace watched
    }
    let mut v = [0u64; 19];
    for c in copies {
        for (a, w) in v.iter_mut().zip(c.chunks_exact(8)) {
            *a = a.wrapping_add(u64::from_ne_bytes(w.try_into().expect("8 bytes")));
        }
    }
    let netns = word(168);
    let d = Device {
        name: cstr(&b[152..168]),
        netns,
        namespace: names.get(&netns).cloned().unwrap_or_else(|| if netns == 0 { "-".into() } else { format!("net:[{netns}]") }),
        ifindex: word(172),
        polls: v[0],
        work: v[1],
        full_budget: v[2],
        work_hist: v[3..11].to_vec(),
        to_stack: v[11],
        received: v[12],
        xdp_redirect: v[13],
        xdp_redirect_err: v[14],
        xdp_tx: v[15],
        xdp_tx_drops: v[16],
        xdp_exception: v[17],
        xmit: v[18],
    };
    (d.polls + d.to_stack + d.received + d.xmit + d.xdp_redirect + d.xdp_redirect_err + d.xdp_tx + d.xdp_exception > 0).then_some(d)
}

/// Per-CPU values of `key` as u64 words.
fn percpu(map: &impl MapCore, key: &[u8]) -> Result<Vec<Vec<u64>>> {
    let v = map.lookup_percpu(key, MapFlags::ANY)?.unwrap_or_default();
    Ok(v.iter().map(|b| b.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes"))).collect()).collect())
}

/// Word-wise sum over the CPUs in `cpus` (empty: all).
fn sum_percpu(rows: &[Vec<u64>], cpus: &[usize]) -> Vec<u64> {
    let mut sum = vec![0u64; rows.first().map_or(0, Vec::len)];
    for (_, r) in rows.iter().enumerate().filter(|(c, _)| cpus.is_empty() || cpus.contains(c)) {
        for (a, b) in sum.iter_mut().zip(r) {
            *a = a.wrapping_add(*b);
        }
    }
    if sum.is_empty() {
        sum.push(0);
    }
    sum
}

fn cstr(b: &[u8]) -> String {
    String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or_default()).into_owned()
}

/// Namespace inodes by name: `ip netns` names, and "host" for this
/// process's own namespace.
pub fn namespaces() -> HashMap<u32, String> {
    use std::os::unix::fs::MetadataExt;
    let mut m = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/run/netns") {
        for e in dir.flatten() {
            if let Ok(md) = std::fs::metadata(e.path()) {
                m.insert(md.ino() as u32, e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    if let Ok(md) = std::fs::metadata("/proc/1/ns/net") {
        m.entry(md.ino() as u32).or_insert_with(|| "host".into());
    }
    m
}
