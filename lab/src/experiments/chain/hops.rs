//! Where `xnf lab chain` lost frames inside dut, hop by hop: dut's
//! counters read at the probe's readings — every interface's packets, `Ip
//! ForwDatagrams`, and for the xnf variants the chain's own counters (per
//! hop, into and out of each NF) — and the differences over a full-speed
//! interval. NF i's port is its veth end in dut: to NF i = its tx, back
//! from NF i = its rx, the same for every variant.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;
use xnf_netns::Netns;

use super::CHAIN;

/// Counters in dut at one instant.
#[derive(Clone, Debug, Default)]
pub(super) struct Reading {
    devs: BTreeMap<String, (u64, u64)>,
    forwarded: u64,
    chain: Option<ChainCounts>,
}

/// The xnf chain's counters; `hops` are (into, out of) each NF in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(super) struct ChainCounts {
    pub matched: u64,
    pub routed: u64,
    pub to_kernel: u64,
    pub hops: Vec<(u64, u64)>,
}

impl ChainCounts {
    fn minus(&self, o: &ChainCounts) -> ChainCounts {
        let hops = self.hops.iter().zip(o.hops.iter().chain(std::iter::repeat(&(0, 0)))).map(|(a, b)| (a.0 - b.0, a.1 - b.1)).collect();
        ChainCounts { matched: self.matched - o.matched, routed: self.routed - o.routed, to_kernel: self.to_kernel - o.to_kernel, hops }
    }

    fn plus(&mut self, o: &ChainCounts) {
        (self.matched, self.routed, self.to_kernel) = (self.matched + o.matched, self.routed + o.routed, self.to_kernel + o.to_kernel);
        for (a, b) in self.hops.iter_mut().zip(&o.hops) {
            (a.0, a.1) = (a.0 + b.0, a.1 + b.1);
        }
    }
}

/// dut's counters now; the chain's when `chain`.
pub(super) fn read_dut(dut: &Netns, chain: bool) -> Result<Reading> {
    let devs = dut.all_link_stats()?.into_iter().map(|(name, l)| (name, (l.rx_packets, l.tx_packets))).collect();
    let forwarded = dut.snmp()?.value("Ip", "ForwDatagrams")?;
    let chain = if chain {
        dut.run(|| -> Result<Option<ChainCounts>> {
            Ok(xnf_chain::counters()?.chains.iter().find(|c| c.name == CHAIN).map(|c| ChainCounts {
                matched: c.matched,
                routed: c.routed,
                to_kernel: c.to_kernel.values().sum(),
                hops: c.hops.iter().map(|h| (h.in_packets, h.out_packets)).collect(),
            }))
        })??
    } else {
        None
    };
    Ok(Reading { devs, forwarded, chain })
}

/// Where the frames that entered dut but did not leave it were lost, hop by
/// hop, in full-speed intervals; the segments add up to the samples' `in_dut`.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct HopLoss {
    /// Full-speed intervals added up.
    pub runs: u32,
    /// (where, frames): "into NF1", "in NF1", "into NF2", ..., "NFn -> egress".
    pub segments: Vec<(String, i64)>,
    /// Frames dut's kernel forwarded.
    pub forwarded: i64,
    /// What the xnf chain counted (xnf variants).
    pub chain: Option<ChainCounts>,
    /// Frames that completed the path.
    pub received: u64,
}

/// The losses between readings `a` and `b`; `ports` are the NFs' ends in
/// dut in chain order.
pub(super) fn hop_loss(a: &Reading, b: &Reading, din: &str, dout: &str, ports: &[String], received: u64) -> HopLoss {
    let d = |dev: &str, tx: bool| -> i64 {
        let get = |r: &Reading| r.devs.get(dev).map(|c| if tx { c.1 } else { c.0 }).unwrap_or(0) as i64;
        get(b) - get(a)
    };
    let mut segments = Vec::new();
    let mut back = d(din, false);
    for (i, port) in ports.iter().enumerate() {
        let to = d(port, true);
        segments.push((format!("into NF{}", i + 1), back - to));
        back = d(port, false);
        segments.push((format!("in NF{}", i + 1), to - back));
    }
    segments.push((format!("NF{} -> egress", ports.len()), back - d(dout, true)));
    let chain = match (&a.chain, &b.chain) {
        (Some(x), Some(y)) => Some(y.minus(x)),
        _ => None,
    };
    HopLoss { runs: 1, segments, forwarded: b.forwarded as i64 - a.forwarded as i64, chain, received }
}

impl HopLoss {
    pub(super) fn add(&mut self, o: &HopLoss) {
        if self.segments.is_empty() {
            *self = o.clone();
            return;
        }
        for (s, x) in self.segments.iter_mut().zip(&o.segments) {
            s.1 += x.1;
        }
        self.runs += o.runs;
        self.forwarded += o.forwarded;
        self.received += o.received;
        if let (Some(s), Some(x)) = (&mut self.chain, &o.chain) {
            s.plus(x);
        }
    }

    pub(super) fn note(&self, variant: &str, point: &str) -> String {
        let segs: Vec<String> = self.segments.iter().map(|(w, x)| format!("{w} {x}")).collect();
        let total: i64 = self.segments.iter().map(|s| s.1).sum();
        let per = self.forwarded as f64 / self.received.max(1) as f64;
        let mut s = format!(
            "{variant}, {point}: lost inside dut in {} full-speed interval(s): {total} ({}); dut's kernel forwarded {} ({per:.2} per received packet)",
            self.runs,
            segs.join(", "),
            self.forwarded
        );
        if let Some(c) = &self.chain {
            let hops: Vec<String> = c.hops.iter().enumerate().map(|(i, h)| format!("NF{} in {} out {}", i + 1, h.0, h.1)).collect();
            s += &format!("; chain: matched {}, {}, routed in XDP {}, to dut's kernel {}", c.matched, hops.join(", "), c.routed, c.to_kernel);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_losses_add_up() {
        // (Parsing /proc/net/dev and snmp is xnf-netns's, tested there.)
        let a = Reading { chain: Some(ChainCounts { matched: 1, routed: 1, to_kernel: 0, hops: vec![(1, 1), (1, 1)] }), ..Default::default() };
        let mut b = Reading::default();
        b.devs.insert("xnfin".into(), (100, 0));
        b.devs.insert("veth1234".into(), (95, 97));
        b.devs.insert("xnf-nf2".into(), (90, 94));
        b.devs.insert("xnfout".into(), (0, 88));
        b.chain = Some(ChainCounts { matched: 101, routed: 89, to_kernel: 0, hops: vec![(98, 96), (95, 91)] });
        let mut h = hop_loss(&a, &b, "xnfin", "xnfout", &["veth1234".into(), "xnf-nf2".into()], 88);
        let segs: Vec<i64> = h.segments.iter().map(|s| s.1).collect();
        assert_eq!(segs, vec![3, 2, 1, 4, 2]);
        assert_eq!(segs.iter().sum::<i64>(), 100 - 88);
        assert_eq!(h.chain, Some(ChainCounts { matched: 100, routed: 88, to_kernel: 0, hops: vec![(97, 95), (94, 90)] }));
        h.add(&h.clone());
        assert_eq!((h.runs, h.received, h.segments[0].1), (2, 176, 6));
        assert_eq!(h.chain.as_ref().unwrap().hops, vec![(194, 190), (188, 180)]);
        let note = h.note("xnf", "64 B");
        assert!(note.contains("NF1 in 194 out 190, NF2 in 188 out 180"), "{note}");
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!((json["runs"].as_u64(), json["segments"][0][0].as_str()), (Some(2), Some("into NF1")));
    }
}
