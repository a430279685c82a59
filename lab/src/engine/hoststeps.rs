//! `xnf lab host`: a host's steps for a lab run on another host
//! ([`super::hosts`]), read as JSON lines on standard input and answered
//! one line each on standard output. It holds that host's part of the
//! topology and its generator; when its input ends it drops both, which
//! stops the generator, detaches the programs, gives back the borrowed
//! interfaces and removes its namespaces.

use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::generator::Generator;
use super::results::Nic;
use super::topology::{BuiltTopology, FunctionKind, TopologySpec};
use crate::programs::gen::GenConfig;

/// One step, as the lab asks it.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Answers xnf's version.
    Hello,
    /// Checks that this host's existing interfaces of `spec` can be borrowed.
    Check {
        spec: TopologySpec,
    },
    /// Builds this host's part of `spec`: its namespaces, its ends of the links.
    Build {
        spec: TopologySpec,
    },
    /// Adds a neighbour whose MAC is on another host.
    Neighbour {
        ns: String,
        ip: String,
        dev: String,
        mac: String,
    },
    /// The MAC of an endpoint.
    Mac {
        ep: String,
    },
    /// Starts the generator on an endpoint.
    Generate {
        ep: String,
        cfg: GenConfig,
        cpus: Vec<usize>,
        rate: u64,
    },
    /// Sets the generator's rate; answers when, on this host's clock (s).
    Rate {
        pps: u64,
    },
    Burst {
        frames: u64,
    },
    /// Frames sent so far, by CPU.
    Sent,
    /// Whether every generator thread has ended.
    Done,
    /// Stops the generator; answers the frames each CPU sent.
    Stop,
    /// Replaces the function on an endpoint (sink or pass).
    Function {
        ep: String,
        kind: FunctionKind,
    },
    /// The frames the sink or pass function on an endpoint counted.
    Packets {
        ep: String,
    },
    /// An endpoint's driver counters.
    EthtoolStats {
        ep: String,
    },
    /// An endpoint's driver, firmware, bus and NUMA node.
    Nic {
        role: String,
        ep: String,
    },
    /// Removes everything built (the session may go on).
    Teardown,
}

/// The answer to a step.
#[derive(Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Ok(Value),
    Error(String),
}

/// What this host holds for the lab.
#[derive(Default)]
struct Here {
    // The generator is dropped (stopped) before the topology it sends into.
    gens: Option<Generator>,
    topology: Option<BuiltTopology>,
}

/// Runs the steps on standard input until it ends.
pub fn serve() -> Result<()> {
    // Only answers go to the lab: anything else this process would print
    // on standard output goes to standard error, which ssh shows there.
    // SAFETY: dup and dup2 on descriptors 1 and 2, which live as long as
    // the process; `answers` is a new descriptor of our own, owned by `out`.
    let answers = unsafe { libc::dup(std::io::stdout().as_raw_fd()) };
    anyhow::ensure!(answers >= 0 && unsafe { libc::dup2(2, 1) } == 1, "redirecting standard output: {}", std::io::Error::last_os_error());
    let mut out = unsafe { std::fs::File::from_raw_fd(answers) };
    super::remove_stale(&mut |l| eprintln!("xnf lab host: {l}"))?;
    let clock = Instant::now();
    let mut here = Here::default();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading the lab's steps")?;
        let reply = match serde_json::from_str::<Step>(&line).context("not a step of this xnf version") {
            Ok(step) => match here.step(step, clock) {
                Ok(v) => Reply::Ok(v),
                Err(e) => Reply::Error(format!("{e:#}")),
            },
            Err(e) => Reply::Error(format!("{e:#}")),
        };
        writeln!(out, "{}", serde_json::to_string(&reply)?).and_then(|()| out.flush()).context("answering the lab")?;
    }
    Ok(())
}

impl Here {
    fn topology(&self) -> Result<&BuiltTopology> {
        self.topology.as_ref().context("nothing is built on this host yet")
    }

    fn gens(&self) -> Result<&Generator> {
        self.gens.as_ref().context("no generator runs on this host")
    }

    fn step(&mut self, step: Step, clock: Instant) -> Result<Value> {
        let v = match step {
            Step::Hello => serde_json::json!(env!("CARGO_PKG_VERSION")),
            Step::Check { spec } => {
                BuiltTopology::check_existing(&spec)?;
                Value::Null
            }
            Step::Build { spec } => {
                self.gens = None;
                self.topology = None;
                self.topology = Some(BuiltTopology::build(&spec, &mut |m| eprintln!("xnf lab host: {m}"))?);
                Value::Null
            }
            Step::Neighbour { ns, ip, dev, mac } => {
                self.topology()?.ns(&ns)?.neigh_add(&ip, mac.parse()?, &super::topology::ifname(&dev))?;
                Value::Null
            }
            Step::Mac { ep } => serde_json::to_value(self.topology()?.mac(&ep)?.to_string())?,
            Step::Generate { ep, cfg, cpus, rate } => {
                self.gens = None;
                let (ns, dev) = self.topology()?.endpoint(&ep)?;
                self.gens = Some(super::measure::start_generators(ns, &dev, &cfg, &cpus, rate)?);
                Value::Null
            }
            Step::Rate { pps } => {
                self.gens()?.set_rate(pps)?;
                serde_json::json!(clock.elapsed().as_secs_f64())
            }
            Step::Burst { frames } => {
                self.gens()?.set_burst(frames)?;
                Value::Null
            }
            Step::Sent => serde_json::to_value(self.gens()?.sent_per_cpu()?)?,
            Step::Done => serde_json::json!(self.gens()?.done()),
            Step::Stop => serde_json::to_value(self.gens.take().context("no generator runs on this host")?.finish()?)?,
            Step::Function { ep, kind } => {
                let t = self.topology.as_mut().context("nothing is built on this host yet")?;
                t.replace_function(&ep, |ns, dev| super::LabAttachment::of_kind(kind, ns, dev))?;
                Value::Null
            }
            Step::Packets { ep } => serde_json::json!(self.topology()?.attachment(&ep)?.packets()?),
            Step::EthtoolStats { ep } => {
                let (ns, dev) = self.topology()?.endpoint(&ep)?;
                serde_json::to_value(ns.ethtool_stats(&dev)?)?
            }
            Step::Nic { role, ep } => {
                let (ns, dev) = self.topology()?.endpoint(&ep)?;
                serde_json::to_value(nic_of(&role, ns, &dev)?)?
            }
            Step::Teardown => {
                self.gens = None;
                self.topology = None;
                Value::Null
            }
        };
        Ok(v)
    }
}

/// What an interface is: driver, firmware, bus, NUMA node.
pub fn nic_of(role: &str, ns: &xnf_netns::Netns, dev: &str) -> Result<Nic> {
    let d = dev.to_string();
    let info = ns.run(move || xnf_netns::ethtool::driver_info(&d))??;
    let numa = ns.exec(&["cat", &format!("/sys/class/net/{dev}/device/numa_node")]).ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok());
    Ok(Nic { role: role.into(), ifname: dev.into(), driver: info.driver, version: info.version, firmware: info.firmware, bus: info.bus, numa_node: numa })
}
