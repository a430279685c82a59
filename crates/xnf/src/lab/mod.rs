//! `xnf lab`: topologies in namespaces, an in-kernel generator, an XDP
//! sink, and experiments that compare xnf with the kernel doing the same job.

pub mod cpu;
pub mod results;
pub mod routes;
pub mod topology;
pub mod router;
pub mod search;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use xnf_bpf::gen::{GenConfig, GenControl, GenProgram};
use xnf_bpf::pass::PassProgram;
use xnf_bpf::sink::{SinkCounter, SinkProgram};
use xnf_netns::Netns;

use crate::xdp_link::{XdpLink, XdpMode};

/// Makes Ctrl-C (SIGINT) and SIGTERM remove everything the lab built:
/// the signals are blocked in every thread and a dedicated thread waits for
/// them, deletes the lab's namespaces, collects the pins they leave and exits
/// with status 130. Call before starting any other thread.
pub fn remove_everything_on_interrupt() -> Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().context("blocking SIGINT/SIGTERM")?;
    std::thread::spawn(move || {
        let sig = set.wait();
        eprintln!("\nxnf lab: {} received: removing the lab's namespaces", sig.map(|s| s.as_str()).unwrap_or("signal"));
        if let Err(e) = xnf_netns::cleanup_all() {
            eprintln!("xnf lab: {e:#}");
        }
        crate::state::gc_dead_namespaces();
        std::process::exit(130);
    });
    Ok(())
}

/// An XDP program attached by the lab to one interface in a namespace;
/// detached when dropped (the link is not pinned).
pub struct LabAttachment {
    _link: XdpLink,
    counter: Option<SinkCounter>,
}

impl LabAttachment {
    /// Attaches the counting, dropping sink program to `dev` in `ns`.
    pub fn sink(ns: &Netns, dev: &str) -> Result<Self> {
        Self::attach(ns, dev, true)
    }

    /// Attaches the XDP_PASS program to `dev` in `ns` (a veth end that must
    /// receive XDP_TX/redirected frames but otherwise use the kernel path).
    pub fn pass(ns: &Netns, dev: &str) -> Result<Self> {
        Self::attach(ns, dev, false)
    }

    fn attach(ns: &Netns, dev: &str, sink: bool) -> Result<Self> {
        let dev = dev.to_string();
        // Programs cannot leave the thread that loaded them; the link and
        // the counter handle (plain fds) can.
        ns.run(move || -> Result<Self> {
            let ifindex = crate::netlink::link_by_name(&dev)?.ifindex;
            if sink {
                let prog = SinkProgram::load()?;
                let link = XdpLink::create(prog.prog(), ifindex, &dev, XdpMode::Native)?;
                Ok(LabAttachment { _link: link, counter: Some(prog.counter()?) })
            } else {
                let prog = PassProgram::load()?;
                let link = XdpLink::create(prog.prog(), ifindex, &dev, XdpMode::Native)?;
                Ok(LabAttachment { _link: link, counter: None })
            }
        })?
    }

    /// Packets counted by a sink attachment.
    pub fn packets(&self) -> Result<u64> {
        self.counter.as_ref().context("not a sink attachment")?.packets()
    }
}

/// Runs this `xnf` binary in network namespace `ns`, as a user would.
pub fn xnf_cmd(ns: &str, args: &[&str]) -> Result<()> {
    let out = std::process::Command::new(std::env::current_exe()?).arg("--netns").arg(ns).args(args).output()?;
    anyhow::ensure!(out.status.success(), "xnf {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    Ok(())
}

/// `xnf router` attached to interfaces in a lab namespace (through the
/// CLI, as a user would, without the follower); detached when dropped.
pub struct RouterGuard {
    ns: String,
    ifaces: Vec<String>,
}

impl RouterGuard {
    pub fn attach(ns: &Netns, ifaces: &[String]) -> Result<Self> {
        let mut args = vec!["router", "attach"];
        args.extend(ifaces.iter().map(String::as_str));
        args.push("--no-follow");
        xnf_cmd(ns.name(), &args)?;
        Ok(RouterGuard { ns: ns.name().to_string(), ifaces: ifaces.to_vec() })
    }
}

impl Drop for RouterGuard {
    fn drop(&mut self) {
        let mut args = vec!["router", "detach"];
        args.extend(self.ifaces.iter().map(String::as_str));
        let _ = xnf_cmd(&self.ns, &args);
    }
}

/// Seconds one BPF_PROG_TEST_RUN call should last. Every live-frame run
/// ends with a teardown that waits (an RCU grace period, measured at ~30%
/// of the time with 40 ms calls): long calls amortise it; the stop flag is
/// checked between calls, so this is also how long stopping may take.
const GEN_CALL_SECS: f64 = 0.5;

/// The live-frame generator running on one pinned CPU until stopped.
pub struct Generator {
    stop: Arc<AtomicBool>,
    control: GenControl,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Generator {
    /// Starts sending `cfg` out of `dev` in `ns`, from CPU `cpu`, at `rate`
    /// frames per second (0: as fast as possible).
    pub fn start(ns: &Netns, dev: &str, cfg: GenConfig, cpu: usize, rate: u64) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let path = ns.path();
        let dev = dev.to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || -> Result<()> {
            let setup = || -> Result<(GenProgram, u32)> {
                let f = std::fs::File::open(&path)?;
                nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).context("entering the generator's namespace")?;
                let mut set = nix::sched::CpuSet::new();
                set.set(cpu)?;
                nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).context("pinning the generator")?;
                let ifindex = crate::netlink::link_by_name(&dev)?.ifindex;
                Ok((GenProgram::load(&cfg)?, ifindex))
            };
            let (prog, ifindex) = match setup().and_then(|(p, i)| Ok((p.control()?, p, i))) {
                Ok((control, prog, ifindex)) => {
                    let _ = tx.send(Ok(control));
                    (prog, ifindex)
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return Ok(());
                }
            };
            let mut chunk: u32 = 1 << 14;
            while !stop2.load(Ordering::Relaxed) {
                let t0 = std::time::Instant::now();
                prog.send(ifindex, chunk)?;
                // Size the next call to last about GEN_CALL_SECS.
                let secs = t0.elapsed().as_secs_f64().max(1e-4);
                chunk = ((chunk as f64 * GEN_CALL_SECS / secs) as u32).clamp(1 << 14, 1 << 26);
            }
            Ok(())
        });
        let control = rx.recv().context("the generator thread died while starting")??;
        control.set_rate(rate)?;
        Ok(Generator { stop, control, thread: Some(thread) })
    }

    /// Frames sent so far (exact: counted by the program).
    pub fn sent(&self) -> Result<u64> {
        self.control.sent()
    }

    /// Changes the rate (frames per second; 0: as fast as possible).
    pub fn set_rate(&self, pps: u64) -> Result<()> {
        self.control.set_rate(pps)
    }

    /// Stops; reports whether the generator failed, else the frames sent.
    pub fn stop(mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let res = self.thread.take().unwrap().join().map_err(|_| anyhow::anyhow!("generator thread panicked"))?;
        res?;
        self.sent()
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xnf_netns::{LineConfig, LineTopology};
    use xnf_packet::PacketBuilder;

    fn template(line: &LineTopology) -> GenConfig {
        let frame = PacketBuilder::ethernet(line.gen_mac, line.dut_gen_mac)
            .ipv4(line.gen_v4, line.sink_v4)
            .udp(1024, 9)
            .frame_len(60)
            .build();
        GenConfig { template: frame, ipv6: false, flows: 8, base_sport: 1024 }
    }

    /// gen's own kernel also talks on the link (IPv6 ND, MLD): a few extra
    /// frames at the sink are not the generator's.
    fn assert_all_arrived(sent: u64, received: u64) {
        assert!(received >= sent && received <= sent + 8, "sent {sent}, sink counted {received}");
    }

    /// Runs the generator in gen once per `(rate, tries)` step, in order;
    /// returns (frames sent by each step, total received at dut).
    fn bursts(line: &LineTopology, steps: &[(u64, u32)]) -> (Vec<u64>, u64) {
        let sink = LabAttachment::sink(line.dut(), &line.dut_gen_if).unwrap();
        let cfg = template(line);
        let dev = line.gen_if.clone();
        let steps = steps.to_vec();
        let sent = line
            .gen()
            .run(move || -> Result<Vec<u64>> {
                let prog = GenProgram::load(&cfg)?;
                let ctl = prog.control()?;
                let ifindex = crate::netlink::link_by_name(&dev)?.ifindex;
                let mut out = Vec::new();
                for (rate, tries) in steps {
                    let before = ctl.sent()?;
                    ctl.set_rate(rate)?;
                    prog.send(ifindex, tries)?;
                    out.push(ctl.sent()? - before);
                }
                Ok(out)
            })
            .unwrap()
            .unwrap();
        (sent, sink.packets().unwrap())
    }

    fn burst(line: &LineTopology, rate: u64, count: u32) -> (u64, u64) {
        let (sent, received) = bursts(line, &[(rate, count)]);
        (sent[0], received)
    }

    #[test]
    fn generator_sends_exactly_what_it_counts_and_the_sink_gets_it() {
        let line = LineTopology::new(&LineConfig::default()).unwrap();
        let (sent, received) = burst(&line, 0, 100_000);
        assert_eq!(sent, 100_000, "without a rate every frame is sent");
        assert_all_arrived(sent, received);
    }

    #[test]
    fn generator_holds_back_frames_that_are_not_due() {
        let line = LineTopology::new(&LineConfig::default()).unwrap();
        // 1 frame per second: a run of 10,000 tries lasts milliseconds, so
        // only the catch-up burst (32) and one more may go.
        let (sent, received) = burst(&line, 1, 10_000);
        assert!((1..=33).contains(&sent), "sent {sent}");
        assert_all_arrived(sent, received);
    }

    #[test]
    fn a_faster_rate_applies_at_once_after_a_slow_one() {
        let line = LineTopology::new(&LineConfig::default()).unwrap();
        // 1 pps schedules the next frame a second ahead; 1e9 pps must not wait for it.
        let (sent, received) = bursts(&line, &[(1, 10_000), (1_000_000_000, 10_000)]);
        assert!(sent[0] <= 33, "slow step sent {}", sent[0]);
        assert!(sent[1] >= 9_000, "fast step sent only {} of 10,000", sent[1]);
        assert_all_arrived(sent.iter().sum(), received);
    }
}
