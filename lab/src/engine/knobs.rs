//! The NIC and host knobs the seeds turn, as sweep dimensions of every
//! experiment on the driver (`--nic KNOB=V[,V...]`): ring sizes, channels
//! and interrupt coalescing through the kernel's ethtool netlink interface
//! ([`xnf_netns::ethnl`]), offload features through the ethtool ioctl (by
//! the names `ethtool -k` prints), the per-device busy-poll settings in
//! sysfs, the interrupts' CPUs (`/proc/irq/N/smp_affinity_list`), and
//! the CPU's C-state limit (`/dev/cpu_dma_latency`, held open while the
//! point is measured). Interface knobs are set on both of dut's
//! interfaces at every point. A knob the driver (or the machine) lacks is
//! reported in one line and its points skipped; any other refusal fails
//! the run.

use std::io::Write;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use xnf_netns::ethnl::{Ethnl, Refusal, Setting};
use xnf_netns::Netns;

use super::params::{Param, Point, Value};

/// One knob and the values swept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Knob {
    pub name: String,
    pub values: Vec<i64>,
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
}

/// A knob's name on the command line, what it is, whether its values are on/off.
type KnobDef = (&'static str, fn() -> Kind, bool);

/// Every knob.
const KNOBS: &[KnobDef] = &[
    ("rx-ring", || Kind::Netlink(Setting::RxRing), false),
    ("tx-ring", || Kind::Netlink(Setting::TxRing), false),
    ("rx-channels", || Kind::Netlink(Setting::RxChannels), false),
    ("tx-channels", || Kind::Netlink(Setting::TxChannels), false),
    ("combined-channels", || Kind::Netlink(Setting::CombinedChannels), false),
    ("rx-usecs", || Kind::Netlink(Setting::RxUsecs), false),
    ("rx-frames", || Kind::Netlink(Setting::RxFrames), false),
    ("tx-usecs", || Kind::Netlink(Setting::TxUsecs), false),
    ("adaptive-rx", || Kind::Netlink(Setting::AdaptiveRx), true),
    ("gro", || Kind::Feature("rx-gro"), true),
    ("lro", || Kind::Feature("rx-lro"), true),
    ("rxvlan", || Kind::Feature("rx-vlan-hw-parse"), true),
    ("txvlan", || Kind::Feature("tx-vlan-hw-insert"), true),
    ("tso", || Kind::Feature("tx-tcp-segmentation"), true),
    ("gso", || Kind::Feature("tx-generic-segmentation"), true),
    ("defer-hard-irqs", || Kind::Sysfs("napi_defer_hard_irqs"), false),
    ("gro-flush-timeout", || Kind::Sysfs("gro_flush_timeout"), false),
    ("cpu-dma-latency", || Kind::DmaLatency, false),
    ("irq-cpu", || Kind::IrqCpu, false),
];

fn lookup(name: &str) -> Option<(Kind, bool)> {
    KNOBS.iter().find(|(n, _, _)| *n == name).map(|(_, k, b)| (k(), *b))
}

impl Knob {
    /// `NAME=V[,V...]`: numbers, or on/off for a feature.
    pub fn parse(s: &str) -> Result<Knob, String> {
        let names = || KNOBS.iter().map(|(n, _, _)| *n).collect::<Vec<_>>().join(", ");
        let (name, values) = s.split_once('=').ok_or_else(|| format!("`{s}`: write KNOB=V[,V...], e.g. rx-ring=256,1024 (knobs: {})", names()))?;
        let (_, on_off) = lookup(name.trim()).ok_or_else(|| format!("`{name}`: no such knob (knobs: {})", names()))?;
        let values = values
            .split(',')
            .map(|v| match (v.trim(), on_off) {
                ("on", true) => Ok(1),
                ("off", true) => Ok(0),
                (v, false) => v.parse::<u32>().map(i64::from).map_err(|e| format!("{name}={v}: {e}")),
                (v, true) => Err(format!("{name}={v}: give on or off")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Knob { name: name.trim().into(), values })
    }

    /// Its parameter: labelled `name=value`, on/off where it is a feature.
    pub fn param(&self) -> Param {
        let on_off = lookup(&self.name).is_some_and(|(_, b)| b);
        Param::plain(&self.name, &if on_off { Value::Bool(false) } else { Value::Int(0) })
    }

    pub fn value(&self, v: i64) -> Value {
        match lookup(&self.name) {
            Some((_, true)) => Value::Bool(v != 0),
            _ => Value::Int(v),
        }
    }
}

/// Checks the knobs: each once.
pub fn check(knobs: &[Knob]) -> Result<()> {
    for (i, k) in knobs.iter().enumerate() {
        ensure!(!knobs[..i].iter().any(|o| o.name == k.name), "--nic {}: given twice (give its values as one list)", k.name);
    }
    Ok(())
}

/// Held while a point is measured: the C-state limit lives as long as the file is open.
#[derive(Default)]
pub struct Applied {
    _dma_latency: Option<std::fs::File>,
}

/// Sets the knobs of point `p` on dut's interfaces `devs` in `ns`. Err
/// with [`Skip`] inside when a knob is missing on this driver or machine.
pub fn apply(knobs: &[Knob], p: &Point, ns: &Netns, devs: &[String]) -> Result<Applied> {
    let mut applied = Applied::default();
    for k in knobs {
        let v = match p.get(&k.name) {
            Some(Value::Int(n)) => *n,
            Some(Value::Bool(b)) => i64::from(*b),
            _ => continue,
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

/// A knob the driver or machine lacks: its points are skipped.
#[derive(Debug)]
pub struct Skip(pub String);

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Skip {}

fn set_on(ns: &Netns, dev: &str, name: &str, kind: &Kind, v: i64) -> Result<()> {
    let dev = dev.to_string();
    match kind {
        Kind::Netlink(s) => {
            let s = *s;
            let r = ns.run(move || Ethnl::open().map(|mut nl| nl.set(&dev.clone(), s, v as u32).map_err(|e| (dev, e))))??;
            match r {
                Ok(()) => Ok(()),
                Err((dev, Refusal::Unsupported(why))) => Err(Skip(format!("{name}: {dev}'s driver does not have it (`{}`: {why})", s.ethtool())).into()),
                Err((dev, Refusal::Other(e))) => bail!("{name}={v} on {dev}: {e:#}"),
            }
        }
        Kind::Feature(feature) => {
            let feature = *feature;
            let changed = ns.run(move || xnf_netns::ethtool::set_feature(&dev, feature, v != 0))??;
            ensure!(changed, Skip(format!("{name}: the driver cannot change `{feature}` ([fixed] in ethtool -k)")));
            Ok(())
        }
        Kind::Sysfs(file) => {
            let out = ns.command("sh").args(["-c", &format!("echo {v} > /sys/class/net/{dev}/{file}")]).output()?;
            if !out.status.success() {
                let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
                if why.contains("No such file") {
                    bail!(Skip(format!("{name}: this kernel has no /sys/class/net/DEV/{file}")));
                }
                bail!("{name}={v} on {dev}: {why}");
            }
            Ok(())
        }
        Kind::IrqCpu => set_irqs(ns, &dev, v),
        Kind::DmaLatency => unreachable!("a host knob"),
    }
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
    ensure!(!irqs.is_empty(), Skip(format!("irq-cpu: {dev} has no interrupts of its own (a veth runs its NAPI where --dut-cpu puts it)")));
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
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(Skip("cpu-dma-latency: this machine has no /dev/cpu_dma_latency".into())),
        Err(e) => return Err(e).context("opening /dev/cpu_dma_latency"),
    };
    f.write_all(&(us as i32).to_ne_bytes()).context("writing /dev/cpu_dma_latency")?;
    Ok(f)
}

/// The knobs' values as extra sweep dimensions of `points`: their product.
pub fn sweep(points: Vec<Point>, knobs: &[Knob]) -> Vec<Point> {
    knobs.iter().fold(points, |ps, k| ps.into_iter().flat_map(|p| k.values.iter().map(move |v| p.clone().with(&k.name, k.value(*v)))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_parse_and_sweep_as_dimensions() {
        let ring = Knob::parse("rx-ring=256,1024").unwrap();
        let gro = Knob::parse("gro=off,on").unwrap();
        assert_eq!(gro.values, [0, 1]);
        let p = sweep(vec![Point::default().with("size", 64u32)], &[ring, gro]);
        assert_eq!(p.len(), 4);
        assert_eq!(serde_json::to_string(&p[3]).unwrap(), r#"{"size":64,"rx-ring":1024,"gro":true}"#);
        for (bad, want) in [("rx-ring", "write KNOB=V"), ("frobs=1", "no such knob"), ("gro=maybe", "give on or off"), ("rx-ring=x", "rx-ring=x")] {
            assert!(Knob::parse(bad).unwrap_err().contains(want), "{bad}");
        }
        assert!(check(&[Knob::parse("tso=on").unwrap(), Knob::parse("tso=off").unwrap()]).unwrap_err().to_string().contains("given twice"));
    }
}
