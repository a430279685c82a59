//! The results of one lab experiment, as written to JSON and CSV and read
//! back by `xnf lab report`: every sample, summaries per variant and point,
//! ratios, and the machine they were measured on.
//!
//! Every measurement is a [`Sample`] of one variant (kernel, xnf, an XDP
//! action...) at one [`Point`] of the sweep (packet size, flows, route-table
//! size, queues, chain length...: named values, described by the
//! [`Param`]s the results carry). A sample is either the variant at full
//! speed ([`SampleKind::Max`]), at one step of offered load for the
//! CPU-vs-load and loss-vs-rate curves ([`SampleKind::Load`]), or one trial
//! of the zero-loss search ([`SampleKind::Search`]).

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::cpu::{self, CpuTimes};
pub use super::params::{Param, Point, Value};

/// Where the numbers were measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub kernel: String,
    pub cpu_model: String,
    pub cores: usize,
    pub xnf_version: String,
    /// Whether SMT (hyper-threading) is on (None: the kernel does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smt: Option<bool>,
    /// CPU 0's frequency governor (None: no cpufreq, as in most VMs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governor: Option<String>,
    /// The path's interfaces as their drivers describe them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<Nic>,
}

/// One interface of the path: role, name, and what `ethtool -i` and sysfs say.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    pub role: String,
    pub ifname: String,
    pub driver: String,
    pub version: String,
    pub firmware: String,
    pub bus: String,
    /// The device's NUMA node (None: not on a bus, or one node).
    pub numa_node: Option<i64>,
}

impl Machine {
    pub fn this() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_string()))
            .unwrap_or_else(|| "unknown".into());
        Machine {
            kernel: nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default(),
            cpu_model,
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            xnf_version: env!("CARGO_PKG_VERSION").to_string(),
            smt: std::fs::read_to_string("/sys/devices/system/cpu/smt/active").ok().map(|s| s.trim() == "1"),
            governor: std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").ok().map(|s| s.trim().to_string()),
            nics: Vec::new(),
        }
    }

    /// A note when the CPU is emulated in software (QEMU's TCG, as in
    /// `scripts/kernels.sh lab`): such numbers are not a machine's, and
    /// emulation slows paths by different factors.
    pub fn emulation_note(&self) -> Option<String> {
        self.cpu_model.contains("TCG").then(|| {
            format!(
                "{}: a CPU emulated in software; rates are a small fraction of a real CPU's and the paths are slowed by different factors (xnf / kernel, IPv4 64 B: 6.4x in the 6.1 guest, 2.6x on its host; XDP against XDP within 15 %): compare points and variants of this run, not with hardware",
                self.cpu_model
            )
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum SampleKind {
    /// As fast as the generator goes.
    Max,
    /// At an offered rate (frames per second, all generator CPUs together):
    /// step `step` of the load curve (1..=steps), so that the samples of
    /// different runs at the same step go together. Files written before
    /// steps were recorded read as 0, filled in by [`Results::read`].
    Load {
        offered_pps: f64,
        #[serde(default)]
        step: u32,
    },
    /// A trial of the zero-loss search at this rate.
    Search { offered_pps: f64 },
}

/// One CPU's share of an interval, in percent of that CPU's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuShare {
    pub cpu: usize,
    pub user_pct: f64,
    pub system_pct: f64,
    pub softirq_pct: f64,
    /// Everything but idle (user + system + softirq + irq + steal).
    pub busy_pct: f64,
}

/// Where frames were lost in an interval, from the counters along the path.
/// Each field is the difference between two adjacent counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Loss {
    /// Sent by the generator but not received by dut's ingress interface.
    pub gen_to_dut: i64,
    /// Received by dut but not transmitted towards the sink (dropped or
    /// passed up in dut: no route, queue full, netfilter...).
    pub in_dut: i64,
    /// Transmitted by dut but not counted by the sink.
    pub dut_to_sink: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub variant: String,
    pub point: Point,
    pub run: u32,
    #[serde(flatten)]
    pub kind: SampleKind,
    pub seconds: f64,
    pub sent: u64,
    pub received: u64,
    pub sent_mpps: f64,
    pub mpps: f64,
    pub loss_pct: f64,
    pub loss: Loss,
    pub cpus: Vec<CpuShare>,
    /// All CPUs' busy time divided by the frames received (NaN, written
    /// as null, when none were: an interval without background traffic).
    #[serde(deserialize_with = "nan_if_null")]
    pub ns_per_packet: f64,
    /// All CPUs' softirq time divided by the frames received: on veth the
    /// receive side's cost (dut + sink), without the generator (system time).
    #[serde(default, deserialize_with = "nan_if_null")]
    pub softirq_ns_per_packet: f64,
    /// dut's own CPU time divided by the frames dut received, when its
    /// ingress is served on CPUs of its own ([`super::placement`]): the
    /// run time of its NAPI threads, apart from the generator's and the
    /// sink's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dut_ns_per_packet: Option<f64>,
    /// The interval's rise of the path's NIC counters that count loss
    /// (`ethtool -S`: drops, misses, errors), by `role:dev:counter`; only
    /// those that rose.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub nic_drops: std::collections::BTreeMap<String, u64>,
    /// Request/response transactions per second of an application running
    /// beside the traffic during the interval (`xnf lab filter`'s victim);
    /// absent in the other experiments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions_per_s: Option<f64>,
    /// Work units per second a CPU-bound co-runner got during the interval
    /// (`xnf lab stack`); absent in the other experiments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corunner_per_s: Option<f64>,
}

/// What a sample is of.
#[derive(Clone, Debug)]
pub struct Labels {
    pub variant: String,
    pub point: Point,
    pub run: u32,
}

/// A number JSON could not hold (NaN is written as null) read back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl Sample {
    /// The sample of an interval: the generator sent `sent` frames for
    /// `secs`, `received` arrived, lost where `loss` says; `cpus` is the CPU
    /// time of the interval (the difference of two readings).
    pub fn of(l: &Labels, kind: SampleKind, secs: f64, (sent, received): (u64, u64), loss: Loss, cpus: &[CpuTimes]) -> Sample {
        let per_packet = |ns: f64| if received > 0 { ns / received as f64 } else { f64::NAN };
        Sample {
            variant: l.variant.clone(),
            point: l.point.clone(),
            run: l.run,
            kind,
            seconds: secs,
            sent,
            received,
            sent_mpps: sent as f64 / secs / 1e6,
            mpps: received as f64 / secs / 1e6,
            loss_pct: super::search::loss_pct(sent, received),
            loss,
            cpus: cpu::shares(cpus),
            ns_per_packet: per_packet(cpu::busy_ns(cpus)),
            softirq_ns_per_packet: per_packet(cpu::softirq_ns(cpus)),
            dut_ns_per_packet: None,
            nic_drops: Default::default(),
            transactions_per_s: None,
            corunner_per_s: None,
        }
    }

    /// Busy share summed over CPUs, in percent of one CPU (200 = 2 CPUs busy).
    pub fn cpu_busy_pct(&self) -> f64 {
        self.cpus.iter().map(|c| c.busy_pct).sum()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub variant: String,
    pub point: Point,
    pub runs: usize,
    pub median_mpps: f64,
    pub min_mpps: f64,
    pub max_mpps: f64,
    pub median_ns_per_packet: f64,
    #[serde(default)]
    pub median_softirq_ns_per_packet: f64,
    /// Sample standard deviation of the runs' rates (None with one run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stddev_mpps: Option<f64>,
    /// The median rate in Gbit/s on the wire (frame, FCS, preamble and
    /// inter-frame gap: 20 bytes more than the size), at points with a size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_gbps: Option<f64>,
    /// Median of the samples' dut CPU per packet, when dut had CPUs of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_dut_ns_per_packet: Option<f64>,
    /// Median of the zero-loss searches' answers, when searched.
    pub zero_loss_mpps: Option<f64>,
}

/// `numerator`'s median rate over `denominator`'s at one point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    pub point: Point,
    pub numerator: String,
    pub denominator: String,
    pub ratio: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// "router", "actions", "chain", "afxdp", "gen".
    pub experiment: String,
    /// What the points' parameters are (files without them: the router's).
    #[serde(default = "super::params::legacy")]
    pub params: Vec<Param>,
    pub machine: Machine,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix: u64,
    /// The experiment's options as given.
    pub options: serde_json::Value,
    /// Free-form notes the experiment wants shown (what limited the numbers).
    #[serde(default)]
    pub notes: Vec<String>,
    pub samples: Vec<Sample>,
    pub summary: Vec<Summary>,
    pub ratios: Vec<Ratio>,
    /// What an experiment measured besides the samples, by name (the
    /// chain's losses hop by hop, the generator's verification).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub details: serde_json::Map<String, serde_json::Value>,
    /// With --profile: where each variant's CPU time went, per profiled interval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<super::profiling::ProfiledRun>,
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The sample standard deviation (n - 1), None below two values.
pub fn stddev(v: &[f64]) -> Option<f64> {
    let n = v.len() as f64;
    if v.len() < 2 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / n;
    Some((v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt())
}

/// Bytes a frame of point `p` takes on an Ethernet wire: its size (FCS
/// included) and 20 of preamble, start delimiter and inter-frame gap; IMIX
/// (size 0) at its mean of 781 B (the xdp-forward thesis §5.3.7). None
/// without a size.
pub fn wire_bytes(p: &Point) -> Option<f64> {
    let size = p.int("size").ok()?;
    Some(if size == 0 { 781.0 } else { size as f64 } + 20.0)
}

pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl Results {
    pub fn new(experiment: &str, options: &impl Serialize, params: Vec<Param>) -> Results {
        let machine = Machine::this();
        Results {
            experiment: experiment.into(),
            params,
            started_unix: now_unix(),
            options: serde_json::to_value(options).unwrap_or(serde_json::Value::Null),
            notes: machine.emulation_note().into_iter().collect(),
            machine,
            samples: Vec::new(),
            summary: Vec::new(),
            ratios: Vec::new(),
            details: serde_json::Map::new(),
            profiles: Vec::new(),
        }
    }

    /// A point's label, e.g. "64 B, 4 flows, IPv4".
    pub fn label(&self, p: &Point) -> String {
        super::params::label(&self.params, p)
    }

    /// The descriptor of parameter `name`.
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Gives load samples of older files their step: the rank of their
    /// offered rate among the load samples of the same variant, point and run.
    fn fill_steps(&mut self) {
        let mut groups: BTreeMap<(String, String, u32), Vec<(f64, usize)>> = BTreeMap::new();
        for (i, s) in self.samples.iter().enumerate() {
            if let SampleKind::Load { offered_pps, step: 0 } = s.kind {
                let point = serde_json::to_string(&s.point).unwrap_or_default();
                groups.entry((s.variant.clone(), point, s.run)).or_default().push((offered_pps, i));
            }
        }
        for mut g in groups.into_values() {
            g.sort_by(|a, b| a.0.total_cmp(&b.0));
            for (rank, (_, i)) in g.into_iter().enumerate() {
                if let SampleKind::Load { step, .. } = &mut self.samples[i].kind {
                    *step = rank as u32 + 1;
                }
            }
        }
    }

    /// Fills `summary` from the `Max` samples (and the search answers in
    /// `zero_loss`, keyed by variant and point), in the order variants and
    /// points first appear.
    pub fn summarize(&mut self, zero_loss: &[(String, Point, f64)]) {
        let mut order: Vec<(String, Point)> = Vec::new();
        for s in &self.samples {
            let key = (s.variant.clone(), s.point.clone());
            if matches!(s.kind, SampleKind::Max) && !order.contains(&key) {
                order.push(key);
            }
        }
        self.summary = order
            .into_iter()
            .map(|(variant, point)| {
                let of: Vec<&Sample> = self.samples.iter().filter(|s| matches!(s.kind, SampleKind::Max) && s.variant == variant && s.point == point).collect();
                let mut mpps: Vec<f64> = of.iter().map(|s| s.mpps).collect();
                let mut ns: Vec<f64> = of.iter().map(|s| s.ns_per_packet).collect();
                let mut si: Vec<f64> = of.iter().map(|s| s.softirq_ns_per_packet).collect();
                let mut dut: Vec<f64> = of.iter().filter_map(|s| s.dut_ns_per_packet).collect();
                let mut zl: Vec<f64> = zero_loss.iter().filter(|(v, p, _)| *v == variant && *p == point).map(|z| z.2 / 1e6).collect();
                Summary {
                    stddev_mpps: stddev(&mpps),
                    median_gbps: wire_bytes(&point).map(|b| median(&mut mpps.clone()) * b * 8.0 / 1e3),
                    runs: of.len(),
                    min_mpps: mpps.iter().cloned().fold(f64::INFINITY, f64::min),
                    max_mpps: mpps.iter().cloned().fold(0.0, f64::max),
                    median_mpps: median(&mut mpps),
                    median_ns_per_packet: median(&mut ns),
                    median_softirq_ns_per_packet: median(&mut si),
                    median_dut_ns_per_packet: (!dut.is_empty()).then(|| median(&mut dut)),
                    zero_loss_mpps: (!zl.is_empty()).then(|| median(&mut zl)),
                    variant,
                    point,
                }
            })
            .collect();
    }

    /// Adds `numerator / denominator` at every point both were measured.
    pub fn add_ratios(&mut self, numerator: &str, denominator: &str) {
        for n in self.summary.iter().filter(|s| s.variant == numerator) {
            if let Some(d) = self.summary.iter().find(|s| s.variant == denominator && s.point == n.point) {
                self.ratios.push(Ratio {
                    point: n.point.clone(),
                    numerator: numerator.into(),
                    denominator: denominator.into(),
                    ratio: n.median_mpps / d.median_mpps,
                });
            }
        }
    }

    pub fn summary_of(&self, variant: &str, point: &Point) -> Option<&Summary> {
        self.summary.iter().find(|s| s.variant == variant && &s.point == point)
    }

    pub fn read(path: &std::path::Path) -> Result<Results> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut r: Results = serde_json::from_str(&text).with_context(|| format!("{} is not an `xnf lab ... --json` results file", path.display()))?;
        r.fill_steps();
        Ok(r)
    }

    pub fn write_json(&self, path: &std::path::Path) -> Result<()> {
        write_json_file(path, self)
    }

    /// The parameters of the points, one CSV column each: the descriptors'
    /// in their order, then any other a point has (the union over the file).
    fn columns(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let described = self.params.iter().map(|p| p.name.as_str()).filter(|n| self.samples.iter().any(|s| s.point.get(n).is_some()));
        for n in described.chain(self.samples.iter().flat_map(|s| s.point.iter().map(|(n, _)| n))) {
            if !names.iter().any(|x| x == n) {
                names.push(n.into());
            }
        }
        names
    }

    /// One CSV row per sample; the machine is repeated on every row so each
    /// row stands alone in a spreadsheet.
    pub fn write_csv(&self, out: &mut dyn Write) -> Result<()> {
        let ncpu = self.samples.iter().map(|s| s.cpus.len()).max().unwrap_or(0);
        let params = self.columns();
        let mut head: Vec<String> = ["experiment", "kernel", "cpu_model", "cores", "xnf_version", "variant"].map(String::from).to_vec();
        head.extend(params.iter().cloned());
        head.extend(
            [
                "run",
                "kind",
                "step",
                "offered_pps",
                "seconds",
                "sent",
                "received",
                "sent_mpps",
                "mpps",
                "loss_pct",
                "loss_gen_to_dut",
                "loss_in_dut",
                "loss_dut_to_sink",
                "ns_per_packet",
                "softirq_ns_per_packet",
                "transactions_per_s",
                "dut_ns_per_packet",
                "nic_drops",
            ]
            .map(String::from),
        );
        for c in 0..ncpu {
            for f in ["user", "system", "softirq", "busy"] {
                head.push(format!("cpu{c}_{f}_pct"));
            }
        }
        writeln!(out, "{}", head.join(","))?;
        let m = &self.machine;
        for s in &self.samples {
            let (kind, step, offered) = match s.kind {
                SampleKind::Max => ("max", String::new(), String::new()),
                SampleKind::Load { offered_pps, step } => ("load", step.to_string(), format!("{offered_pps:.0}")),
                SampleKind::Search { offered_pps } => ("search", String::new(), format!("{offered_pps:.0}")),
            };
            let mut row = vec![
                csv_field(&self.experiment),
                csv_field(&m.kernel),
                csv_field(&m.cpu_model),
                m.cores.to_string(),
                csv_field(&m.xnf_version),
                csv_field(&s.variant),
            ];
            row.extend(params.iter().map(|n| s.point.get(n).map_or(String::new(), |v| csv_field(&v.to_string()))));
            row.extend([
                s.run.to_string(),
                kind.into(),
                step,
                offered,
                format!("{:.3}", s.seconds),
                s.sent.to_string(),
                s.received.to_string(),
                format!("{:.4}", s.sent_mpps),
                format!("{:.4}", s.mpps),
                format!("{:.4}", s.loss_pct),
                s.loss.gen_to_dut.to_string(),
                s.loss.in_dut.to_string(),
                s.loss.dut_to_sink.to_string(),
                format!("{:.1}", s.ns_per_packet),
                format!("{:.1}", s.softirq_ns_per_packet),
                s.transactions_per_s.map_or(String::new(), |t| format!("{t:.0}")),
                s.dut_ns_per_packet.map_or(String::new(), |d| format!("{d:.1}")),
                csv_field(&s.nic_drops.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")),
            ]);
            for c in 0..ncpu {
                let share = s.cpus.get(c).copied().unwrap_or_default();
                for v in [share.user_pct, share.system_pct, share.softirq_pct, share.busy_pct] {
                    row.push(format!("{v:.1}"));
                }
            }
            writeln!(out, "{}", row.join(","))?;
        }
        Ok(())
    }
}

/// Writes `v` as pretty JSON to `path`.
pub fn write_json_file(path: &std::path::Path, v: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Says that results went to `path`, and how to draw them.
pub fn wrote(path: &std::path::Path) {
    eprintln!("xnf lab: wrote {} (draw it with `xnf lab report {}`)", path.display(), path.display());
}

/// Quotes a CSV field when it holds a comma, quote or newline (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(size: u32) -> Point {
        Point::default().with("size", size).with("flows", 1u32).with("queues", 1u32)
    }

    fn sample(variant: &str, size: u32, run: u32, mpps: f64) -> Sample {
        Sample {
            variant: variant.into(),
            point: point(size),
            run,
            kind: SampleKind::Max,
            seconds: 1.0,
            sent: (mpps * 1e6) as u64,
            received: (mpps * 1e6) as u64,
            sent_mpps: mpps,
            mpps,
            loss_pct: 0.0,
            loss: Loss::default(),
            cpus: vec![CpuShare { cpu: 0, user_pct: 1.0, system_pct: 2.0, softirq_pct: 50.0, busy_pct: 53.0 }],
            ns_per_packet: 100.0,
            softirq_ns_per_packet: 90.0,
            dut_ns_per_packet: None,
            nic_drops: Default::default(),
            transactions_per_s: None,
            corunner_per_s: None,
        }
    }

    fn results() -> Results {
        let mut r = Results::new("router", &serde_json::json!({"runs": 3}), super::super::params::legacy());
        for (run, (k, x)) in [(1.0, 2.0), (1.2, 2.6), (0.8, 2.2)].into_iter().enumerate() {
            r.samples.push(sample("kernel", 64, run as u32, k));
            r.samples.push(sample("xnf", 64, run as u32, x));
        }
        r.samples.push(sample("kernel", 1518, 0, 0.5));
        r
    }

    #[test]
    fn summary_takes_median_min_max_per_variant_and_point() {
        let mut r = results();
        r.summarize(&[("xnf".into(), r.samples[1].point.clone(), 2.0e6)]);
        assert_eq!(r.summary.len(), 3);
        let k = &r.summary[0];
        assert_eq!((k.variant.as_str(), k.point.int("size").unwrap(), k.runs), ("kernel", 64, 3));
        assert_eq!((k.median_mpps, k.min_mpps, k.max_mpps), (1.0, 0.8, 1.2));
        // Over the runs 0.8, 1.0, 1.2; on the wire 1 Mpps of 64 + 20 bytes.
        assert!((k.stddev_mpps.unwrap() - 0.2).abs() < 1e-9, "{:?}", k.stddev_mpps);
        assert!((k.median_gbps.unwrap() - 0.672).abs() < 1e-9, "{:?}", k.median_gbps);
        assert_eq!(r.summary[2].stddev_mpps, None, "one run: no deviation");
        assert_eq!(wire_bytes(&Point::default().with("size", 0u32)), Some(801.0), "IMIX at its mean");
        assert_eq!(wire_bytes(&Point::default()), None);
        assert_eq!(r.summary[1].zero_loss_mpps, Some(2.0));
        assert_eq!(r.summary[0].zero_loss_mpps, None);
        r.add_ratios("xnf", "kernel");
        assert_eq!(r.ratios.len(), 1, "no xnf sample at 1518 B");
        assert!((r.ratios[0].ratio - 2.2).abs() < 1e-9);
    }

    #[test]
    fn json_round_trips() {
        let mut r = results();
        r.samples.push(Sample { kind: SampleKind::Load { offered_pps: 5e5, step: 2 }, ..sample("xnf", 64, 0, 0.5) });
        r.summarize(&[]);
        r.details.insert("hops".into(), serde_json::json!([1, 2]));
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""kind":"load","offered_pps":500000.0,"step":2"#), "{text}");
        assert!(text.contains(r#""point":{"size":64,"flows":1,"queues":1}"#), "{text}");
        assert_eq!(serde_json::from_str::<Results>(&text).unwrap(), r);
        // Nothing received (an interval without background traffic): NaN per packet, null in JSON.
        r.samples.push(Sample { ns_per_packet: f64::NAN, softirq_ns_per_packet: f64::NAN, ..sample("xnf", 64, 1, 0.0) });
        let back = serde_json::from_str::<Results>(&serde_json::to_string(&r).unwrap()).unwrap();
        let last = back.samples.last().unwrap();
        assert!(last.ns_per_packet.is_nan() && last.softirq_ns_per_packet.is_nan());
    }

    #[test]
    fn old_files_get_the_routers_parameters_and_their_load_steps() {
        let dir = std::env::temp_dir().join(format!("xnf-results-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("old.json");
        let mut v = serde_json::to_value(results()).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("params");
        o.remove("details");
        let load = |run: u32, pps: f64| {
            let mut s = serde_json::to_value(sample("xnf", 64, run, 0.5)).unwrap();
            let m = s.as_object_mut().unwrap();
            m.insert("kind".into(), "load".into());
            m.insert("offered_pps".into(), pps.into());
            s
        };
        let samples = o["samples"].as_array_mut().unwrap();
        samples.extend([load(0, 2e5), load(0, 1e5), load(1, 3e5), load(1, 1e5)]);
        std::fs::write(&path, v.to_string()).unwrap();
        let r = Results::read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(r.params, super::super::params::legacy());
        let steps: Vec<(u32, u32)> = r
            .samples
            .iter()
            .filter_map(|s| match s.kind {
                SampleKind::Load { step, .. } => Some((s.run, step)),
                _ => None,
            })
            .collect();
        assert_eq!(steps, [(0, 2), (0, 1), (1, 2), (1, 1)], "ranked by offered rate within each run");
    }

    #[test]
    fn csv_has_a_row_per_sample_with_the_machine_and_quotes_commas() {
        let mut r = results();
        r.machine.cpu_model = "Xeon, 2 GHz".into();
        let mut out = Vec::new();
        r.write_csv(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + r.samples.len());
        let cols = lines[0].split(',').count();
        assert!(lines[0].ends_with("cpu0_busy_pct"));
        assert!(lines[1].contains("\"Xeon, 2 GHz\""));
        // The quoted comma is the only extra split.
        assert_eq!(lines[1].split(',').count(), cols + 1);
    }

    #[test]
    fn csv_has_a_column_per_parameter_of_the_file() {
        let mut r = results();
        r.samples[0].point.set("pattern", Value::Text("a,b".into()));
        let mut out = Vec::new();
        r.write_csv(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let head: Vec<&str> = text.lines().next().unwrap().split(',').collect();
        assert_eq!(&head[5..10], ["variant", "size", "flows", "queues", "pattern"]);
        assert!(text.lines().nth(1).unwrap().contains(",64,1,1,\"a,b\",0,max,"), "{text}");
        assert!(text.lines().nth(2).unwrap().contains(",64,1,1,,0,max,"), "a point without it leaves it empty: {text}");
    }

    #[test]
    fn machine_is_read_from_this_host() {
        let m = Machine::this();
        assert!(m.cores >= 1 && !m.kernel.is_empty() && !m.xnf_version.is_empty());
    }

    #[test]
    fn an_emulated_cpu_is_noted() {
        let m = |model: &str| Machine { cpu_model: model.into(), ..Machine::default() };
        let note = m("QEMU TCG CPU version 2.5+").emulation_note().expect("TCG is software emulation");
        assert!(note.starts_with("QEMU TCG CPU version 2.5+: a CPU emulated in software") && note.contains("not with hardware"), "{note}");
        // KVM guests show the host's model (or QEMU's names without TCG).
        assert_eq!(m("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz").emulation_note(), None);
        assert_eq!(m("QEMU Virtual CPU version 2.5+").emulation_note(), None);
    }
}
