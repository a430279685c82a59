//! `--verify`: what the sink captured, parsed and counted per size and
//! flow, against what the generator threads must have sent.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use serde::Serialize;
use xnf_packet::parse;

use crate::programs::gen::{Flow, GenConfig};
use crate::programs::sink::{Captured, SinkCounts};

/// Most flows whose counts `--verify` checks one by one.
const VERIFY_MAX_FLOWS: u64 = 1 << 22;

/// What the sink saw of the generated frames, from the capture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Frames per length (without FCS).
    pub sizes: BTreeMap<u16, u64>,
    pub flows: HashMap<Flow, u64>,
    /// Frames of the generator's protocol with a wrong checksum.
    pub bad_checksums: u64,
    /// Frames that are not the generator's (other protocols, unparsable).
    pub other: u64,
    /// Captured frames per receiving CPU.
    pub per_cpu: BTreeMap<u32, u64>,
}

impl Tally {
    pub fn add(&mut self, c: &Captured, ipv6: bool, tcp: bool) {
        *self.per_cpu.entry(c.cpu).or_default() += 1;
        let Ok(p) = parse(&c.data) else {
            self.other += 1;
            return;
        };
        let proto = if tcp { 6 } else { 17 };
        let (Some(src), Some(dst), Some(sport), Some(dport)) = (p.src_ip(), p.dst_ip(), p.src_port(), p.dst_port()) else {
            self.other += 1;
            return;
        };
        if src.is_ipv6() != ipv6 || p.ip_protocol().map(|x| x.0) != Some(proto) || c.len as usize != c.data.len() {
            self.other += 1;
            return;
        }
        if !p.checksums_ok() {
            self.bad_checksums += 1;
        }
        *self.sizes.entry(c.len as u16).or_default() += 1;
        *self.flows.entry(Flow { src, dst, sport, dport }).or_default() += 1;
    }

    pub fn frames(&self) -> u64 {
        self.sizes.values().sum()
    }
}

/// Frames per length, and per flow (when there are not too many flows).
pub type Counts = (BTreeMap<u16, u64>, Option<HashMap<Flow, u64>>);

/// What generator threads that sent `per_thread` frames of `cfg` sent of
/// each size and flow (flows only up to VERIFY_MAX_FLOWS of them).
pub fn expected(cfg: &GenConfig, per_thread: &[u64]) -> Result<Counts> {
    let seq = cfg.size_sequence();
    let mut sizes = BTreeMap::new();
    let nflows = cfg.flow_count();
    let mut flows = (nflows <= VERIFY_MAX_FLOWS).then(HashMap::new);
    for &n in per_thread {
        let l = seq.len() as u64;
        for (i, &len) in seq.iter().enumerate() {
            *sizes.entry(len).or_default() += n / l + u64::from((i as u64) < n % l);
        }
        if let Some(flows) = &mut flows {
            for f in 0..nflows.min(n) {
                *flows.entry(cfg.flow(f)?).or_default() += n / nflows + u64::from(f < n % nflows);
            }
        }
    }
    sizes.retain(|_, n| *n > 0);
    Ok((sizes, flows))
}

/// The outcome of `--verify`.
#[derive(Clone, Debug, Serialize)]
pub struct Verification {
    pub captured: u64,
    pub capture_lost: u64,
    pub bad_checksums: u64,
    pub other_frames: u64,
    /// Frames per length: (length with FCS, received, expected).
    pub sizes: Vec<(u16, u64, u64)>,
    pub flows_seen: usize,
    pub flows_expected: Option<usize>,
    /// Flows whose count differs from what was sent.
    pub flows_wrong: Option<usize>,
    /// Frames captured per receiving CPU.
    pub per_cpu: BTreeMap<u32, u64>,
    /// Everything sent arrived, parsed, with valid checksums, in the
    /// expected sizes and flows.
    pub exact: bool,
}

pub fn verify(cfg: &GenConfig, per_thread: &[u64], t: &Tally, total: SinkCounts, sent: u64) -> Result<Verification> {
    let (want_sizes, want_flows) = expected(cfg, per_thread)?;
    let mut lens: Vec<u16> = want_sizes.keys().chain(t.sizes.keys()).copied().collect();
    lens.sort_unstable();
    lens.dedup();
    let sizes = lens.iter().map(|l| (l + 4, t.sizes.get(l).copied().unwrap_or(0), want_sizes.get(l).copied().unwrap_or(0))).collect::<Vec<_>>();
    let flows_wrong = want_flows.as_ref().map(|w| {
        let mut wrong = w.iter().filter(|(f, n)| t.flows.get(f).copied().unwrap_or(0) != **n).count();
        wrong += t.flows.keys().filter(|f| !w.contains_key(f)).count();
        wrong
    });
    // Frames that are not the generator's (a dut's own IPv6 chatter) are
    // reported, not held against it: a generated frame that arrived
    // mangled would be missing from the counts.
    let exact = total.capture_lost == 0 && t.bad_checksums == 0 && t.frames() == sent && sizes.iter().all(|s| s.1 == s.2) && flows_wrong == Some(0);
    Ok(Verification {
        captured: t.frames() + t.other,
        capture_lost: total.capture_lost,
        bad_checksums: t.bad_checksums,
        other_frames: t.other,
        sizes,
        flows_seen: t.flows.len(),
        flows_expected: want_flows.as_ref().map(|w| w.len()),
        flows_wrong,
        per_cpu: t.per_cpu.clone(),
        exact,
    })
}
