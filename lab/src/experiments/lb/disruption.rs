//! `xnf lab lb`'s disruption part: F established flows through a service of N backends, one backend removed; which
//! flows change backend, with the connection table and without it, against what `xnf lb plan` expects.
//!
//! No timing, no sampling: the real `xnf lb` program, attached in a dut namespace with its maps, decides every
//! flow. One TCP segment per flow is run through an instance of `lb.bpf.c` loaded on the applied configuration's
//! pinned maps (the ones the attached data plane uses), with `BPF_PROG_TEST_RUN` on dut's ingress, and the backend
//! is read from the outer destination of the IP-in-IP packet that comes out:
//!
//! 1. a SYN per flow under the first file: every flow gets its connection-table entry (and its backend);
//! 2. the second file, without one backend, is applied with `xnf lb apply` as an operator would;
//! 3. *with the connection table*: an ACK per flow — an established connection's next segment;
//! 4. *without it*: a SYN per flow — the lb consults the Maglev table afresh on every SYN, so this is where every
//!    flow would go if no entry existed (a restarted balancer, another instance behind ECMP, entries aged out).
//!
//! A flow *moved* if its backend differs from step 1's. The removed backend's flows must all move; the others
//! that move are the collateral. The thread is pinned to one CPU: the connection table keeps an LRU list per CPU,
//! and all flows must fit one CPU's share of it, or evictions would count as disruption.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use libbpf_rs::ProgramInput;
use serde::{Deserialize, Serialize};
use xnf_core::xdp::XdpContext;
use xnf_lb::flow::Flow;
use xnf_lb::plan::Table;
use xnf_lb::program::{Counter, LbProgram};
use xnf_packet::{MacAddr, PacketBuilder, TcpFlags};

use super::setup::{self, LbGuard, Mode, Proto, VIP};
use crate::engine::topology::{BuiltTopology, TopologySpec};

/// Its own small topology: dut with an ingress (gen's end runs XDP_PASS) and one lb port behind which every backend
/// address is routed (the backends need not exist: nothing is sent, each frame is only run through the program).
const TOPOLOGY: &str = r#"
description = "gen -> dut -> backends: the lb's disruption experiment"
[[namespace]]
name = "gen"
[[namespace]]
name = "dut"
forwarding = true
[[namespace]]
name = "be"
[[link]]
a = "gen:gen"
b = "dut:in"
a_addr = ["198.18.0.1/24"]
b_addr = ["198.18.0.2/24"]
[[link]]
a = "dut:be"
b = "be:be"
a_addr = ["198.18.10.1/24"]
b_addr = ["198.18.10.2/24"]
[[route]]
ns = "dut"
to = "198.19.128.0/20"
via = "198.18.10.2"
[[neighbour]]
ns = "dut"
ip = "198.18.10.2"
dev = "be"
mac = "be:be"
[[function]]
ns = "gen"
kind = "pass"
interfaces = ["gen"]
[[function]]
ns = "be"
kind = "sink"
interfaces = ["be"]
"#;

/// Most backends: addresses in 198.19.128.0/20.
pub const MAX_BACKENDS: u32 = 4000;
/// Client addresses (198.19.16.0/20); more flows by source ports.
const CLIENTS: u32 = 4096;
/// The service's port.
const PORT: u16 = 80;

/// `xnf lab lb`'s disruption options.
#[derive(Args, Clone, Debug, Serialize)]
pub struct DisruptionArgs {
    /// Established flows (TCP connections) of the disruption part.
    #[arg(long, default_value_t = 100_000)]
    pub established: u32,
    /// Backends of the disruption part's service; one of them is removed.
    #[arg(long = "disruption-backends", default_value_t = 10)]
    pub disruption_backends: u32,
    /// The backend removed: its place in the service file (1 = the first).
    #[arg(long, default_value_t = 1)]
    pub remove: u32,
}

impl DisruptionArgs {
    /// Checks the options, naming the flag at fault, before anything is built.
    pub fn check(&self) -> Result<()> {
        let n = self.disruption_backends;
        ensure!((2..=MAX_BACKENDS).contains(&n), "--disruption-backends {n}: 2..={MAX_BACKENDS} (one is removed, one at least must stay)");
        ensure!((1..=n).contains(&self.remove), "--remove {}: a backend's place in the file, 1..={n}", self.remove);
        ensure!(self.established >= 1, "--established 0: give the number of established flows, e.g. 100000");
        let room = ct_room_per_cpu()?;
        ensure!(
            u64::from(self.established) <= room,
            "--established {}: more flows than the lb's connection table keeps on one CPU ({room}); evictions would look like disruption",
            self.established
        );
        Ok(())
    }
}

/// Entries of the lb's connection table one CPU's LRU list holds (the map's size over the possible CPUs).
fn ct_room_per_cpu() -> Result<u64> {
    let cpus = libbpf_rs::num_possible_cpus().context("counting the possible CPUs")?;
    Ok(u64::from(xnf_lb::program::CT_ENTRIES) / cpus.max(1) as u64)
}

/// Backend `i` (1-based) of the disruption part's service.
fn backend(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 128, 0)) + i)
}

/// Flow `i`: client 198.19.16.0 + i mod 4096, source port 1024 + i / 4096, to VIP:80 over TCP.
fn flow(i: u32) -> Flow {
    let src = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 16, 0)) + i % CLIENTS);
    Flow { src: IpAddr::V4(src), dst: IpAddr::V4(VIP), proto: xnf_lb::Proto::Tcp, sport: (1024 + i / CLIENTS) as u16, dport: PORT }
}

/// What one step did to the flows, against their backends after the first SYNs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// Flows on another backend than before.
    pub moved: u64,
    /// Flows that were on the removed backend, and how many of them moved (all must).
    pub removed_flows: u64,
    pub removed_moved: u64,
    /// Flows whose backend stays, and how many of them moved anyway: the collateral.
    pub kept_flows: u64,
    pub collateral: u64,
    /// Flows per backend, in the file's order (the removed one's 0 after the change).
    pub per_backend: Vec<u64>,
    /// The busiest backend's flows over the mean of the backends serving.
    pub max_over_mean: f64,
    /// Flows whose backend is the one the control plane's model (`xnf_lb::flow`) gives for the file applied.
    pub model_agrees: u64,
    /// The lb's connection-table counters of the step: hits, misses, SYNs decided afresh, stale entries.
    pub ct_hit: u64,
    pub ct_miss: u64,
    pub ct_syn: u64,
    pub ct_stale: u64,
}

impl Outcome {
    pub fn moved_share(&self) -> f64 {
        self.moved as f64 / (self.removed_flows + self.kept_flows).max(1) as f64
    }

    /// Collateral over the flows whose backend stays: the figure the Maglev paper and the issue quote.
    pub fn collateral_share(&self) -> f64 {
        self.collateral as f64 / self.kept_flows.max(1) as f64
    }
}

/// What `xnf lb plan` expects of the change: shares of the hash space.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Planned {
    pub moved: f64,
    /// The removed backend's share (must move).
    pub removed: f64,
    /// Collateral over the kept share.
    pub collateral_of_kept: f64,
    /// The new table: the largest backend share over its ideal.
    pub balance_max: f64,
}

/// The disruption part's result (the results' `details.disruption`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Disruption {
    pub flows: u32,
    pub backends: u32,
    pub table_size: u32,
    pub removed: IpAddr,
    /// After the first SYNs, under the first file (`moved`, `collateral` are 0).
    pub before: Outcome,
    pub with_table: Outcome,
    pub without_table: Outcome,
    pub plan: Planned,
}

/// Runs the disruption part; `lines` gets progress.
pub fn run(a: &DisruptionArgs, table_size: u32, lines: &mut dyn FnMut(&str)) -> Result<Disruption> {
    crate::engine::remove_stale(lines)?;
    let n = a.disruption_backends;
    let all: Vec<IpAddr> = (1..=n).map(|i| IpAddr::V4(backend(i))).collect();
    let removed = all[a.remove as usize - 1];
    let kept: Vec<IpAddr> = all.iter().copied().filter(|b| *b != removed).collect();
    let first = setup::service_file(IpAddr::V4(VIP), Proto::Tcp, PORT, Mode::Ipip, table_size, &all);
    let second = setup::service_file(IpAddr::V4(VIP), Proto::Tcp, PORT, Mode::Ipip, table_size, &kept);
    let (c1, _) = xnf_lb::Config::parse(&first, "lab-before.toml")?;
    let (c2, _) = xnf_lb::Config::parse(&second, "lab-after.toml")?;
    let plan = xnf_lb::plan(&c1, &c2)?.into_iter().next().context("the plan has no service")?;
    let d = plan.disruption.context("the plan has no disruption for the changed service")?;
    let planned =
        Planned { moved: d.moved, removed: 1.0 - d.kept, collateral_of_kept: d.collateral_of_kept(), balance_max: plan.balance.map_or(f64::NAN, |b| b.max) };
    let models = [(Table::of(&c1.services[0])?, c1.services[0].clone()), (Table::of(&c2.services[0])?, c2.services[0].clone())];

    lines(&format!("disruption: building its topology, {} flows over {n} backends, then backend {removed} removed", a.established));
    let spec = TopologySpec::parse(TOPOLOGY, "the lb's disruption topology")?;
    let t = BuiltTopology::build(&spec, &mut |m| lines(m))?;
    let (dut, din) = t.endpoint("dut:in")?;
    let (_, dbe) = t.endpoint("dut:be")?;
    let (gen_mac, din_mac) = (t.mac("gen:gen")?, t.mac("dut:in")?);
    let (_guard, _) = LbGuard::new(dut, &[din.clone(), dbe], &first)?;
    let flows = a.established;
    let index: HashMap<IpAddr, usize> = all.iter().enumerate().map(|(i, b)| (*b, i)).collect();
    let steps = dut.run(|| -> Result<[(Vec<usize>, [u64; 4]); 3]> {
        pin_to_current_cpu()?;
        let prog = xnf_lb::pinned_program()?;
        let ifindex = xnf_netns::netlink::link_by_name(&din)?.ifindex;
        let step = |syn: bool| -> Result<(Vec<usize>, [u64; 4])> {
            let c0 = xnf_lb::counters()?;
            let picked = (0..flows).map(|i| decide(&prog, ifindex, gen_mac, din_mac, &flow(i), syn, &index)).collect::<Result<Vec<_>>>()?;
            let c1 = xnf_lb::counters()?;
            let ct = [Counter::CtHit, Counter::CtMiss, Counter::CtSyn, Counter::CtStale].map(|k| c1[k as usize] - c0[k as usize]);
            Ok((picked, ct))
        };
        let before = step(true)?;
        xnf_lb::apply_text(&second, "lab-after.toml").context("applying the service file without the removed backend")?;
        let with = step(false)?;
        let without = step(true)?;
        Ok([before, with, without])
    })??;
    let [(b0, ct0), (b1, ct1), (b2, ct2)] = steps;
    let removed_at = a.remove as usize - 1;
    let outcome = |after: &[usize], ct: [u64; 4], model: &(Table, xnf_lb::Service)| -> Outcome {
        let mut o = Outcome { per_backend: vec![0; all.len()], ..Default::default() };
        for (i, (&was, &is)) in b0.iter().zip(after).enumerate() {
            let moved = was != is;
            o.moved += moved as u64;
            if was == removed_at {
                o.removed_flows += 1;
                o.removed_moved += moved as u64;
            } else {
                o.kept_flows += 1;
                o.collateral += moved as u64;
            }
            o.per_backend[is] += 1;
            o.model_agrees += (flow(i as u32).backend(&model.1, &model.0) == Some(all[is])) as u64;
        }
        let serving: Vec<u64> = o.per_backend.iter().enumerate().filter(|(i, _)| model.0.backends().iter().any(|b| b.0 == all[*i])).map(|(_, &c)| c).collect();
        let mean = serving.iter().sum::<u64>() as f64 / serving.len().max(1) as f64;
        o.max_over_mean = serving.iter().copied().max().unwrap_or(0) as f64 / mean.max(1.0);
        [o.ct_hit, o.ct_miss, o.ct_syn, o.ct_stale] = ct;
        o
    };
    Ok(Disruption {
        flows,
        backends: n,
        table_size,
        removed,
        before: outcome(&b0, ct0, &models[0]),
        with_table: outcome(&b1, ct1, &models[1]),
        without_table: outcome(&b2, ct2, &models[1]),
        plan: planned,
    })
}

/// Runs one TCP segment of `f` (a SYN, or an ACK of an established connection) through the lb on dut's ingress and
/// returns the backend it went to (an index into `index`'s backends), read from the outer IPv4 destination.
fn decide(prog: &LbProgram, ifindex: u32, src: MacAddr, dst: MacAddr, f: &Flow, syn: bool, index: &HashMap<IpAddr, usize>) -> Result<usize> {
    let flags = if syn { TcpFlags::SYN } else { TcpFlags::ACK };
    let frame = PacketBuilder::ethernet(src, dst).ip(f.src, f.dst).tcp(f.sport, f.dport, flags).seq(1).ack(u32::from(!syn)).frame_len(60).try_build()?;
    let mut ctx = XdpContext { ingress_ifindex: ifindex, rx_queue_index: 0 }.to_bytes(frame.len());
    let mut out = vec![0u8; frame.len() + 256];
    let input = ProgramInput { context_in: Some(&mut ctx), data_in: Some(&frame), data_out: Some(&mut out), repeat: 1, ..Default::default() };
    let res = prog.prog().test_run(input).context("BPF_PROG_TEST_RUN of the lb program")?;
    let len = res.data.map(|d| d.len()).unwrap_or(0);
    let verdict = res.return_value;
    // XDP_TX (3) or XDP_REDIRECT (4): sent to a backend in XDP.
    if verdict != 3 && verdict != 4 {
        let c = xnf_lb::counters()?;
        bail!(
            "the lb returned XDP verdict {verdict} for {}:{} -> {}:{} instead of sending it to a backend ({})",
            f.src,
            f.sport,
            f.dst,
            f.dport,
            setup::passed_reasons(&c)
        );
    }
    ensure!(len >= 34 && out[12..14] == [0x08, 0x00] && out[23] == 4, "the lb's output for {}:{} is no IPv4-in-IPv4 packet", f.src, f.sport);
    let outer = IpAddr::V4(Ipv4Addr::new(out[30], out[31], out[32], out[33]));
    index.get(&outer).copied().with_context(|| format!("the lb sent {}:{} to {outer}, which is no backend of the service", f.src, f.sport))
}

/// Pins the calling thread to the CPU it is on: every segment then meets the same per-CPU LRU list.
fn pin_to_current_cpu() -> Result<()> {
    // SAFETY: plain syscalls on this thread with a zeroed, then filled cpu_set_t.
    unsafe {
        let cpu = libc::sched_getcpu();
        ensure!(cpu >= 0, "sched_getcpu: {}", std::io::Error::last_os_error());
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        ensure!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0, "pinning to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Prints the disruption table.
pub fn print(d: &Disruption) {
    println!(
        "\ndisruption: {} established TCP flows, {} backends, backend {} removed, Maglev table of {} entries (xnf lb, ipip, BPF_PROG_TEST_RUN)",
        d.flows, d.backends, d.removed, d.table_size
    );
    println!("{:<34} {:>8} {:>19} {:>19} {:>16} {:>13}", "", "moved", "removed's flows", "collateral / kept", "balance max/mean", "model agrees");
    let pct = |x: u64, of: u64| 100.0 * x as f64 / of.max(1) as f64;
    let row = |what: &str, o: &Outcome, model: bool| {
        let agrees = if model { format!("{:.2} %", pct(o.model_agrees, u64::from(d.flows))) } else { "-".into() };
        println!(
            "{what:<34} {:>7.3}% {:>9} ({:>5.1} %) {:>9} ({:.3} %) {:>16.3} {:>13}",
            100.0 * o.moved_share(),
            o.removed_moved,
            pct(o.removed_moved, o.removed_flows),
            o.collateral,
            100.0 * o.collateral_share(),
            o.max_over_mean,
            agrees
        );
    };
    let b = &d.before;
    println!(
        "{:<34} {:>8} {:>9} ({:>5.1} %) {:>19} {:>16.3} {:>13}",
        "before (SYN per flow)",
        "-",
        b.removed_flows,
        pct(b.removed_flows, u64::from(d.flows)),
        "-",
        b.max_over_mean,
        format!("{:.2} %", pct(b.model_agrees, u64::from(d.flows)))
    );
    row("with the connection table (ACK)", &d.with_table, false);
    row("without it (SYN: the table afresh)", &d.without_table, true);
    let p = &d.plan;
    println!(
        "{:<34} {:>7.3}% {:>9} ({:>5.1} %) {:>9} ({:.3} %) {:>16.3} {:>13}",
        "xnf lb plan (share of hash space)",
        100.0 * p.moved,
        "",
        100.0 * p.removed,
        "",
        100.0 * p.collateral_of_kept,
        p.balance_max,
        "-"
    );
    let (w, wo) = (&d.with_table, &d.without_table);
    println!(
        "(removed's flows: moved of those on the removed backend, and their share of all flows for `before` and the plan; the plan's balance is the largest share over its ideal; connection table with: {} hits, {} stale; without: {} SYNs decided afresh)",
        w.ct_hit, w.ct_stale, wo.ct_syn
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_are_distinct_and_backends_in_their_prefix() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..20_000 {
            assert!(seen.insert(flow(i)), "flow {i} repeats");
        }
        assert_eq!(flow(4096).sport, 1025);
        assert_eq!((backend(1).to_string(), backend(4000).to_string()), ("198.19.128.1".into(), "198.19.143.160".into()));
    }

    #[test]
    fn options_are_checked_naming_the_flag() {
        let a = |e, n, r| DisruptionArgs { established: e, disruption_backends: n, remove: r };
        for (args, want) in [
            (a(10, 1, 1), "--disruption-backends 1"),
            (a(10, 4, 5), "--remove 5"),
            (a(0, 4, 1), "--established 0"),
            (a(10_000_000, 4, 1), "--established 10000000"),
        ] {
            let e = format!("{:#}", args.check().unwrap_err());
            assert!(e.contains(want), "{e} lacks {want}");
        }
        assert!(a(100_000, 10, 1).check().is_ok());
    }
}
