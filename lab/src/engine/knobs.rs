//! The NIC and host knobs the seeds turn, as sweep dimensions of every
//! experiment on the driver (`--nic KNOB=V[,V...]`): ring sizes, channels
//! and interrupt coalescing through the kernel's ethtool netlink interface
//! ([`xnf_netns::ethnl`]), offload features through the ethtool ioctl (by
//! the names `ethtool -k` prints), the per-device busy-poll settings in
//! sysfs, the interrupts' CPUs (`/proc/irq/N/smp_affinity_list`), the
//! RSS indirection table (the ethtool ioctl), the CPUs' frequency
//! governor and C-state limit (`/dev/cpu_dma_latency`), both held while
//! the point is measured and put back after it. Interface knobs are set on both of dut's
//! interfaces at every point. A knob the driver (or the machine) lacks is
//! reported in one line and its points skipped; any other refusal fails
//! the run.

use std::io::Write;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use xnf_netns::ethnl::{Ethnl, Refusal, Setting};
use xnf_netns::Netns;

use super::params::{Param, Point, Value};
use super::Unavailable;

/// One knob and the values swept.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Knob {
    pub name: String,
    pub values: Vec<Value>,
}

/// What a knob is.
enum Kind {
    /// Through ethtool netlink.
    Netlink(Setting),
    /// An offload feature by ethtool's name (values 0 / 1).
    Feature(&'static str),
    /// A file under /sys/class/net/DEV/.
    Sysfs(&'static str),
    /// /dev/cpu_dma_latency, in µs.
    DmaLatency,
    /// The device's interrupts, queue i's on CPU (N + i) mod CPUs.
    IrqCpu,
    /// RSS over the first N RX queues (`ethtool -X DEV equal N`).
    Rss,
    /// Every CPU's cpufreq governor, by name.
    Governor,
}

/// What a knob's values are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Values {
    Numbers,
    OnOff,
    Names,
}

/// A knob's name on the command line, what it is, what its values are.
type KnobDef = (&'static str, fn() -> Kind, Values);

/// Every knob.
const KNOBS: &[KnobDef] = &[
    ("rx-ring", || Kind::Netlink(Setting::RxRing), Values::Numbers),
    ("tx-ring", || Kind::Netlink(Setting::TxRing), Values::Numbers),
    ("rx-channels", || Kind::Netlink(Setting::RxChannels), Values::Numbers),
    ("tx-channels", || Kind::Netlink(Setting::TxChannels), Values::Numbers),
    ("combined-channels", || Kind::Netlink(Setting::CombinedChannels), Values::Numbers),
    ("rx-usecs", || Kind::Netlink(Setting::RxUsecs), Values::Numbers),
    ("rx-frames", || Kind::Netlink(Setting::RxFrames), Values::Numbers),
    ("tx-usecs", || Kind::Netlink(Setting::TxUsecs), Values::Numbers),
    ("adaptive-rx", || Kind::Netlink(Setting::AdaptiveRx), Values::OnOff),
    ("gro", || Kind::Feature("rx-gro"), Values::OnOff),
    ("lro", || Kind::Feature("rx-lro"), Values::OnOff),
    ("rxvlan", || Kind::Feature("rx-vlan-hw-parse"), Values::OnOff),
    ("txvlan", || Kind::Feature("tx-vlan-hw-insert"), Values::OnOff),
    ("tso", || Kind::Feature("tx-tcp-segmentation"), Values::OnOff),
    ("gso", || Kind::Feature("tx-generic-segmentation"), Values::OnOff),
    ("defer-hard-irqs", || Kind::Sysfs("napi_defer_hard_irqs"), Values::Numbers),
    ("gro-flush-timeout", || Kind::Sysfs("gro_flush_timeout"), Values::Numbers),
    ("cpu-dma-latency", || Kind::DmaLatency, Values::Numbers),
    ("irq-cpu", || Kind::IrqCpu, Values::Numbers),
    ("rss-queues", || Kind::Rss, Values::Numbers),
    ("governor", || Kind::Governor, Values::Names),
];

fn lookup(name: &str) -> Option<(Kind, Values)> {
    KNOBS.iter().find(|(n, _, _)| *n == name).map(|(_, k, v)| (k(), *v))
}

impl Knob {
    /// `NAME=V[,V...]`: numbers, on/off for a feature, names for the governor.
    pub fn parse(s: &str) -> Result<Knob, String> {
        let names = || KNOBS.iter().map(|(n, _, _)| *n).collect::<Vec<_>>().join(", ");
        let (name, values) = s.split_once('=').ok_or_else(|| format!("`{s}`: write KNOB=V[,V...], e.g. rx-ring=256,1024 (knobs: {})", names()))?;
        let (_, kind) = lookup(name.trim()).ok_or_else(|| format!("`{name}`: no such knob (knobs: {})", names()))?;
        let values = values
            .split(',')
            .map(|v| match (v.trim(), kind) {
                ("on", Values::OnOff) => Ok(Value::Bool(true)),
                ("off", Values::OnOff) => Ok(Value::Bool(false)),
                (v, Values::OnOff) => Err(format!("{name}={v}: give on or off")),
                (v, Values::Numbers) => v.parse::<u32>().map(|n| Value::Int(n.into())).map_err(|e| format!("{name}={v}: {e}")),
                (v, Values::Names) if !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => Ok(Value::Text(v.into())),
                (v, Values::Names) => Err(format!("{name}={v}: give a name such as performance")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Knob { name: name.trim().into(), values })
    }

    /// Its parameter: labelled `name=value`.
    pub fn param(&self) -> Param {
        Param::plain(&self.name, self.values.first().unwrap_or(&Value::Int(0)))
    }
}

/// Checks the knobs: each once.
pub fn check(knobs: &[Knob]) -> Result<()> {
    for (i, k) in knobs.iter().enumerate() {
        ensure!(!knobs[..i].iter().any(|o| o.name == k.name), "--nic {}: given twice (give its values as one list)", k.name);
    }
    Ok(())
}

/// Held while a point is measured: the C-state limit lives as long as the
/// file is open; the governors are put back when it is dropped.
#[derive(Default)]
pub struct Applied {
    _dma_latency: Option<std::fs::File>,
    _governors: Option<Governors>,
}

/// Sets the knobs of point `p` on dut's interfaces `devs` in `ns`. Err
/// with [`Unavailable`] inside when a knob is missing on this driver or machine.
pub fn apply(knobs: &[Knob], p: &Point, ns: &Netns, devs: &[String]) -> Result<Applied> {
    let mut applied = Applied::default();
    for k in knobs {
        let v = match p.get(&k.name) {
            Some(Value::Int(n)) => *n,
            Some(Value::Bool(b)) => i64::from(*b),
            Some(Value::Text(name)) => {
                applied._governors = Some(Governors::set(name)?);
                continue;
            }
            None => continue,
        };
        let (kind, _) = lookup(&k.name).context("a checked knob")?;
        match kind {
            Kind::DmaLatency => applied._dma_latency = Some(dma_latency(v)?),
            kind => {
                for dev in devs {
                    set_on(ns, dev, &k.name, &kind, v)?;
                }
            }
        }
    }
    Ok(applied)
}

fn set_on(ns: &Netns, dev: &str, name: &str, kind: &Kind, v: i64) -> Result<()> {
    let dev = dev.to_string();
    match kind {
        Kind::Netlink(s) => {
            let s = *s;
            let r = ns.run(move || Ethnl::open().map(|mut nl| nl.set(&dev.clone(), s, v as u32).map_err(|e| (dev, e))))??;
            match r {
                Ok(()) => Ok(()),
                Err((dev, Refusal::Unsupported(why))) => Err(Unavailable(format!("{name}: {dev}'s driver does not have it (`{}`: {why})", s.ethtool())).into()),
                Err((dev, Refusal::Other(e))) => bail!("{name}={v} on {dev}: {e:#}"),
            }
        }
        Kind::Feature(feature) => {
            let feature = *feature;
            let changed = ns.run(move || xnf_netns::ethtool::set_feature(&dev, feature, v != 0))??;
            ensure!(changed, Unavailable(format!("{name}: the driver cannot change `{feature}` ([fixed] in ethtool -k)")));
            Ok(())
        }
        Kind::Sysfs(file) => {
            let out = ns.command("sh").args(["-c", &format!("echo {v} > /sys/class/net/{dev}/{file}")]).output()?;
            if !out.status.success() {
                let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
                if why.contains("No such file") {
                    bail!(Unavailable(format!("{name}: this kernel has no /sys/class/net/DEV/{file}")));
                }
                bail!("{name}={v} on {dev}: {why}");
            }
            Ok(())
        }
        Kind::IrqCpu => set_irqs(ns, &dev, v),
        Kind::Rss => {
            let spread = ns.run(move || xnf_netns::devsettings::DevSettings::spread_rss(&dev, v as u32))?.with_context(|| format!("rss-queues={v}"))?;
            ensure!(spread, Unavailable(format!("{name}: the driver has no RSS indirection table (ethtool -X DEV equal N: Operation not supported)")));
            Ok(())
        }
        Kind::DmaLatency | Kind::Governor => unreachable!("a host knob"),
    }
}

/// Every CPU's cpufreq governor as it was, put back when dropped.
struct Governors(Vec<(String, String)>);

const CPUFREQ: &str = "/sys/devices/system/cpu";

impl Governors {
    /// Sets `name` as every CPU's governor.
    fn set(name: &str) -> Result<Governors> {
        let files = governor_files()?;
        ensure!(!files.is_empty(), Unavailable("governor: this machine has no cpufreq (/sys/devices/system/cpu/cpu*/cpufreq)".into()));
        let available = std::fs::read_to_string(files[0].replace("scaling_governor", "scaling_available_governors")).unwrap_or_default();
        ensure!(available.split_whitespace().any(|g| g == name), "governor={name}: this machine's governors are {}", available.trim());
        let mut me = Governors(Vec::new());
        for f in files {
            let was = std::fs::read_to_string(&f).with_context(|| format!("reading {f}"))?.trim().to_string();
            std::fs::write(&f, name).with_context(|| format!("governor={name}: writing {f}"))?;
            me.0.push((f, was));
        }
        Ok(me)
    }
}

impl Drop for Governors {
    fn drop(&mut self) {
        for (f, was) in &self.0 {
            if let Err(e) = std::fs::write(f, was) {
                eprintln!("xnf lab: putting back the governor {was} in {f}: {e}");
            }
        }
    }
}

/// `/sys/devices/system/cpu/cpuN/cpufreq/scaling_governor` of every CPU that has one.
fn governor_files() -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(CPUFREQ).with_context(|| format!("listing {CPUFREQ}"))?.flatten() {
        let f = e.path().join("cpufreq/scaling_governor");
        let is_cpu = e.file_name().to_str().is_some_and(|n| n.strip_prefix("cpu").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())));
        if is_cpu && f.exists() {
            out.push(f.display().to_string());
        }
    }
    out.sort();
    Ok(out)
}

/// A device's interrupts (MSI vectors, in the order of its queues).
/// `netns` is an `ip netns` name (None: this namespace): sysfs shows a
/// namespace's devices only where it is mounted in it, as `ip netns exec` does.
pub fn irqs_of(netns: Option<&str>, dev: &str) -> Result<Vec<u32>> {
    let path = format!("/sys/class/net/{dev}/device/msi_irqs");
    // No such folder (a veth): no interrupts, an empty listing.
    let out = match netns {
        Some(n) => std::process::Command::new("ip").args(["netns", "exec", n, "ls", &path]).output(),
        None => std::process::Command::new("ls").arg(&path).output(),
    }
    .context("listing the interface's interrupts")?;
    let mut irqs: Vec<u32> = String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|n| n.parse().ok()).collect();
    irqs.sort_unstable();
    Ok(irqs)
}

/// Pins `dev`'s interrupt i to CPU (`first` + i) mod CPUs.
fn set_irqs(ns: &Netns, dev: &str, first: i64) -> Result<()> {
    let irqs = irqs_of(Some(ns.name()), dev)?;
    ensure!(!irqs.is_empty(), Unavailable(format!("irq-cpu: {dev} has no interrupts of its own (a veth runs its NAPI where --dut-cpu puts it)")));
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
    for (i, irq) in irqs.iter().enumerate() {
        let cpu = (first + i as i64) % ncpu;
        std::fs::write(format!("/proc/irq/{irq}/smp_affinity_list"), cpu.to_string()).with_context(|| format!("irq-cpu: IRQ {irq} of {dev} to CPU {cpu}"))?;
    }
    Ok(())
}

/// Limits C-states to exit latencies under `us` µs while the file is open
/// (PM QoS: the kernel's `cpuidle` governor reads it).
fn dma_latency(us: i64) -> Result<std::fs::File> {
    let mut f = match std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency") {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(Unavailable("cpu-dma-latency: this machine has no /dev/cpu_dma_latency".into())),
        Err(e) => return Err(e).context("opening /dev/cpu_dma_latency"),
    };
    f.write_all(&(us as i32).to_ne_bytes()).context("writing /dev/cpu_dma_latency")?;
    Ok(f)
}

/// The knobs' values as extra sweep dimensions of `points`: their product.
pub fn sweep(points: Vec<Point>, knobs: &[Knob]) -> Vec<Point> {
    knobs.iter().fold(points, |ps, k| ps.into_iter().flat_map(|p| k.values.iter().map(move |v| p.clone().with(&k.name, v.clone()))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_governor_is_skipped_without_cpufreq_and_checked_with_it() {
        let e = Governors::set("xnf-no-such-governor").err().expect("not a governor");
        match governor_files().unwrap().is_empty() {
            true => assert!(e.downcast_ref::<Unavailable>().is_some_and(|s| s.0.contains("no cpufreq")), "{e:#}"),
            false => assert!(e.to_string().contains("this machine's governors are"), "{e:#}"),
        }
    }

    #[test]
    fn knobs_parse_and_sweep_as_dimensions() {
        let ring = Knob::parse("rx-ring=256,1024").unwrap();
        let gro = Knob::parse("gro=off,on").unwrap();
        assert_eq!(gro.values, [Value::Bool(false), Value::Bool(true)]);
        assert_eq!(Knob::parse("governor=performance,powersave").unwrap().values, [Value::Text("performance".into()), Value::Text("powersave".into())]);
        assert!(Knob::parse("governor=a b").unwrap_err().contains("give a name"));
        assert_eq!(Knob::parse("rss-queues=1,2").unwrap().values, [Value::Int(1), Value::Int(2)]);
        let p = sweep(vec![Point::default().with("size", 64u32)], &[ring, gro]);
        assert_eq!(p.len(), 4);
        assert_eq!(serde_json::to_string(&p[3]).unwrap(), r#"{"size":64,"rx-ring":1024,"gro":true}"#);
        for (bad, want) in [("rx-ring", "write KNOB=V"), ("frobs=1", "no such knob"), ("gro=maybe", "give on or off"), ("rx-ring=x", "rx-ring=x")] {
            assert!(Knob::parse(bad).unwrap_err().contains(want), "{bad}");
        }
        assert!(check(&[Knob::parse("tso=on").unwrap(), Knob::parse("tso=off").unwrap()]).unwrap_err().to_string().contains("given twice"));
    }
}
