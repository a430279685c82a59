//! One (variant, event) set up for one repeat: the variant on dut, the
//! connections and lb flows through it, the counters read around the
//! event, and its row.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use xnf_netns::Netns;

use super::peers::{self, PeerOn};
use super::results::EventRow;
use super::tcp::Clients;
use super::xnf::{self, XnfBox};
use super::{counters, Case, Disrupt, Line, Variant, SPARE};
use crate::engine::driver::{variant_name, Measuring, Running};
use crate::engine::measure::Measured;
use crate::engine::results::{Loss, Sample, SampleKind};
use crate::engine::{cpu, peers as peer_tools};

/// A variant on dut.
pub(super) enum On<'a> {
    Xnf(XnfBox<'a>),
    Peer(PeerOn<'a>),
}

/// The sink's second address, its second backend: the next one up.
pub(super) fn second_backend(sink: IpAddr) -> Result<IpAddr> {
    let IpAddr::V4(a) = sink else { bail!("disrupt needs the sink's IPv4 address, not {sink}") };
    Ok(IpAddr::V4(std::net::Ipv4Addr::from(u32::from(a) + 1)))
}

/// The lb flows whose backend changed or whose entry went between two
/// snapshots (None: the variant has no lb).
fn moved(before: &Snapshot, after: &Snapshot) -> Option<u64> {
    let (b, a) = (before.backends.as_ref()?, after.backends.as_ref()?);
    Some(b.iter().filter(|(k, id)| a.get(*k) != Some(id)).count() as u64)
}

impl Disrupt {
    /// Opens the lb flows and waits until the lb holds every one of them
    /// and of the connections.
    pub(super) fn open_flows(&self, l: &Line<'_>) -> Result<Vec<std::net::UdpSocket>> {
        let flows = xnf::open_flows(l.gen, l.gen_ip, self.lb_flows)?;
        let t0 = Instant::now();
        // The TCP connections, opened before, are in its table too.
        let want = self.lb_flows + self.connections;
        while (xnf::lb_backends(l.dut)?.len() as u32) < want {
            ensure!(t0.elapsed() < Duration::from_secs(10), "the lb did not record the {want} connections and flows to {} within 10 s", xnf::FLOWS_VIP);
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(flows)
    }

    pub(super) fn attach<'a>(&self, l: &Line<'a>, v: Variant) -> Result<On<'a>> {
        Ok(match v {
            Variant::Xnf => {
                let backends = [l.sink_ip.to_string(), second_backend(l.sink_ip)?.to_string()];
                On::Xnf(XnfBox::up(l.dut, [&l.din, &l.dout, SPARE[0]], &backends, self.upgrade_to.clone())?)
            }
            Variant::Kernel => On::Peer(PeerOn::kernel(l.dut, &l.sink_ip.to_string(), &l.dout)?),
            Variant::Nft => On::Peer(PeerOn::nft(l.dut)?),
            Variant::XdpForward => {
                let bin = peer_tools::xdp_forward_binary(self.xdp_forward.as_deref())?;
                let peer = peer_tools::Peer::built_in("xdp-forward", &bin).expect("a built-in peer");
                On::Peer(PeerOn::tool(l.dut, peer, &l.din, &l.dout)?)
            }
            Variant::XdpFilter => {
                let bin = peer_tools::binary("xdp-filter", "--xdp-filter", self.xdp_filter.as_deref())?;
                On::Peer(PeerOn::tool(l.dut, peers::xdp_filter_peer(&bin), &l.din, &l.dout)?)
            }
        })
    }
}

/// One case set up for one repeat. The connections close before the
/// variant goes (fields drop in order).
pub(super) struct Set<'a> {
    pub(super) exp: &'a Disrupt,
    pub(super) case: Case,
    pub(super) gen: &'a Netns,
    pub(super) dut: &'a Netns,
    pub(super) sink: &'a Netns,
    pub(super) clients: Clients,
    /// xnf: the lb flows' sockets, kept open (their ports not reused).
    #[allow(dead_code)]
    pub(super) flows: Vec<std::net::UdpSocket>,
    pub(super) on: On<'a>,
}

/// Counters read before and after an event.
struct Snapshot {
    forwarded: u64,
    /// Datagrams the sink's UDP sockets had no room for.
    sink_drops: u64,
    /// Frames gen's and dut's interfaces dropped (a veth peer's full ring).
    link_drops: u64,
    xnf: BTreeMap<String, u64>,
    /// xnf: the lb's flows and their backends.
    backends: Option<BTreeMap<Vec<u8>, u32>>,
    cpu: Vec<cpu::CpuTimes>,
}

impl Set<'_> {
    fn snapshot(&self) -> Result<Snapshot> {
        let forwarded = self.dut.snmp()?.value("Ip", "ForwDatagrams")?;
        let (xnf, backends) = match &self.on {
            On::Xnf(b) => (counters::to_kernel(&b.metrics().context("reading xnf's counters in dut")?), Some(xnf::lb_backends(self.dut)?)),
            On::Peer(_) => (BTreeMap::new(), None),
        };
        let sink_drops = self.sink.snmp()?.value("Udp", "RcvbufErrors")?;
        let mut link_drops = 0;
        for ns in [self.gen, self.dut] {
            link_drops += ns.all_link_stats()?.values().map(|l| l.tx_dropped + l.rx_dropped).sum::<u64>();
        }
        Ok(Snapshot { forwarded, sink_drops, link_drops, xnf, backends, cpu: cpu::sample()? })
    }

    fn event(&self) -> Result<String> {
        match &self.on {
            On::Xnf(b) => b.event(self.case.event),
            On::Peer(p) => p.event(self.case.event),
        }
    }
}

impl Running for Set<'_> {
    /// One event under the point's traffic: its row kept for
    /// [`Experiment::finish`], its stream window as the sample.
    fn measure(&self, m: Measuring) -> Result<Measured> {
        let traffic = self.exp.traffic.borrow();
        let stream = &traffic.as_ref().context("the point's traffic is not running")?.stream;
        ensure!(stream.wait_for(stream.sent(), Duration::from_secs(10)), "the stream does not get through dut");
        self.clients.wait_replies(u64::from(self.clients.connections))?;
        let (before, broken0) = (self.snapshot()?, self.clients.broken());
        let (s0, t0) = (stream.sent(), Instant::now());
        m.pg.message(&format!("{}: {}", variant_name(&self.case.variant), self.case.event.name()));
        let outcome = self.event()?;
        let event_ms = t0.elapsed().as_secs_f64() * 1e3;
        // A measured window, not a wait for a state: what the event leaves
        // behind (a lease lapsing, a retransmission) shows within it.
        std::thread::sleep(Duration::from_millis(self.exp.settle_ms));
        let s1 = stream.sent();
        // Datagrams still on their way are not lost.
        stream.wait_for(s1, Duration::from_secs(1));
        let (w, secs) = (stream.window(s0, s1), t0.elapsed().as_secs_f64());
        let after = self.snapshot()?;
        stream.forget_before(s1);
        let delta: BTreeMap<String, u64> =
            after.xnf.iter().map(|(k, v)| (k.clone(), v.saturating_sub(before.xnf.get(k).copied().unwrap_or(0)))).filter(|(_, v)| *v > 0).collect();
        self.record(EventRow {
            sent: vec![w.sent],
            lost: vec![w.lost()],
            sink_drops: vec![after.sink_drops.saturating_sub(before.sink_drops)],
            link_drops: vec![after.link_drops.saturating_sub(before.link_drops)],
            gap_ms: vec![w.longest_gap_ns as f64 / 1e6],
            broken: vec![self.clients.broken() - broken0],
            moved: moved(&before, &after).into_iter().collect(),
            kernel_forwarded: vec![after.forwarded.saturating_sub(before.forwarded)],
            to_kernel: vec![delta],
            event_ms: vec![event_ms],
            outcome: vec![outcome],
            ..Default::default()
        });
        let loss = Loss { in_dut: w.lost() as i64, ..Default::default() };
        let sample = Sample::of(m.labels, SampleKind::Max, secs, (w.sent, w.received), loss, &cpu::delta(&after.cpu, &before.cpu));
        Ok(Measured { samples: vec![sample], zero_loss: None, profiled: Vec::new() })
    }
}

impl Set<'_> {
    /// Appends one repeat to its (variant, event)'s row.
    fn record(&self, one: EventRow) {
        let (variant, event) = (variant_name(&self.case.variant), self.case.event.name());
        let mut rows = self.exp.rows.borrow_mut();
        let i = rows.iter().position(|r| r.variant == variant && r.event == event).unwrap_or_else(|| {
            rows.push(EventRow { variant, event, connections: self.clients.connections, ..Default::default() });
            rows.len() - 1
        });
        let r = &mut rows[i];
        r.sent.extend(one.sent);
        r.lost.extend(one.lost);
        r.sink_drops.extend(one.sink_drops);
        r.link_drops.extend(one.link_drops);
        r.gap_ms.extend(one.gap_ms);
        r.moved.extend(one.moved);
        if matches!(self.on, On::Xnf(_)) {
            r.lb_flows = self.exp.lb_flows + self.exp.connections;
        }
        r.broken.extend(one.broken);
        r.kernel_forwarded.extend(one.kernel_forwarded);
        r.to_kernel.extend(one.to_kernel);
        r.event_ms.extend(one.event_ms);
        r.outcome.extend(one.outcome);
    }
}
