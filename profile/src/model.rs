//! What a profile holds, as `xnf profile --json` writes it and `xnf lab
//! --profile` keeps next to each variant's rate.

use serde::{Deserialize, Serialize};

use crate::progstats::ProgStat;
use crate::sample::Stacks;

/// The stages of the NET_RX softirq, in the order of `enum prof_stage`,
/// each with the pair of tracepoints that bound it.
pub const STAGES: [(&str, &str); 7] = [
    ("driver", "softirq entry, GRO exit or a packet's end .. next event: NAPI poll, XDP, skb build"),
    ("gro", "napi_gro_receive_entry .. next event"),
    ("ip-rcv", "netif_receive_skb .. route lookup: taps, tc, netfilter ingress, ip_rcv, PREROUTING"),
    ("route", "route lookup .. next route lookup of a batch"),
    ("local", "route lookup .. socket queue (sk_data_ready) or a free: INPUT, UDP/TCP, socket"),
    ("forward", "route lookup .. net_dev_queue: ip_forward, FORWARD, neighbour, output"),
    ("xmit", "net_dev_queue .. net_dev_xmit: qdisc, driver transmit"),
];

/// Ends of a packet's life, in the order of `enum prof_outcome`.
pub const OUTCOMES: [&str; 4] = ["forwarded", "delivered", "dropped", "consumed"];

/// Boundary and counted events, in the order of `enum prof_event`.
pub const EVENTS: [&str; 14] = [
    "irq:softirq_entry",
    "net:napi_gro_receive_entry",
    "net:napi_gro_receive_exit",
    "net:netif_receive_skb",
    "fib:fib_table_lookup",
    "net:net_dev_queue",
    "net:net_dev_xmit",
    "sock:sk_data_ready",
    "skb:kfree_skb/consume_skb",
    "irq:softirq_exit",
    "net:netif_rx",
    "napi:napi_poll",
    "skb:skb_copy_datagram_iovec",
    "sched:sched_switch",
];

/// A log2 histogram of nanoseconds: bucket i holds [2^i, 2^(i+1)).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Hist {
    pub buckets: Vec<u64>,
}

impl Hist {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The upper bound of the bucket holding quantile `q` (0..=1), in ns.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let want = ((n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b;
            if seen >= want {
                return Some(2u64.saturating_pow(i as u32 + 1));
            }
        }
        None
    }

    pub fn add(&mut self, other: &Hist) {
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
    }
}

/// One stage's CPU time over the watched CPUs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Stage {
    pub name: String,
    pub ns: u64,
    pub intervals: u64,
}

/// One CPU's share.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Cpu {
    pub cpu: usize,
    pub softirqs: u64,
    pub softirq_ns: u64,
    /// Per stage, in the order of [`STAGES`].
    pub stage_ns: Vec<u64>,
    pub tx_softirqs: u64,
    pub tx_softirq_ns: u64,
    pub switches: u64,
    pub ksoftirqd_ns: u64,
}

/// Packets from netif_receive_skb to one end of life.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    pub name: String,
    pub count: u64,
    pub latency: Hist,
}

/// NAPI and XDP on one device.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Device {
    pub name: String,
    /// Inode of its namespace (0: the backlog of netif_rx, no device).
    pub netns: u32,
    /// The namespace's name (`ip netns`), `host`, or its inode.
    pub namespace: String,
    pub ifindex: u32,
    pub polls: u64,
    /// Frames the polls handled (NAPI work).
    pub work: u64,
    /// Polls that used their whole budget (the softirq comes back for more).
    pub full_budget: u64,
    /// Polls by frames handled: 0, 1, 2-3, 4-7, ..., 64+.
    pub work_hist: Vec<u64>,
    /// Handed to the stack by the driver (napi_gro_receive, netif_rx).
    pub to_stack: u64,
    /// Entered __netif_receive_skb_core (after GRO).
    pub received: u64,
    pub xdp_redirect: u64,
    pub xdp_redirect_err: u64,
    pub xdp_tx: u64,
    pub xdp_tx_drops: u64,
    pub xdp_exception: u64,
    pub xmit: u64,
}

impl Device {
    /// Frames the driver polled that went nowhere the tracepoints see: on a
    /// device with an XDP program, XDP_DROP (there is no tracepoint per
    /// verdict; this is polled - passed - TX - redirected - aborted).
    /// Counting only, `to_stack` is not counted: XDP_PASS is in here too.
    pub fn xdp_dropped(&self) -> u64 {
        self.work.saturating_sub(self.to_stack + self.xdp_tx + self.xdp_tx_drops + self.xdp_redirect + self.xdp_redirect_err + self.xdp_exception)
    }
}

/// Drops by reason and place.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Drop {
    pub reason: String,
    /// The function that dropped (kallsyms), or its address.
    pub location: String,
    pub count: u64,
}

/// What the profiler could not record.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Lost {
    /// Packets not followed: the in-flight table was full.
    pub packets: u64,
    /// Packets seen entering the stack again before an end of life was
    /// traced (freed by a path without a tracepoint).
    pub restarted: u64,
    /// Packets still in the stack when the profile ended (queued in a socket).
    pub in_flight: u64,
    pub devices: u64,
    pub drops: u64,
    pub wakeups: u64,
    /// Stack samples lost: not recorded (ring buffer full) or a stack the
    /// kernel failed to copy ([`crate::sample::SampleLost::total`]).
    pub stacks: u64,
}

impl Lost {
    pub fn any(&self) -> bool {
        self.packets + self.devices + self.drops + self.wakeups + self.stacks > 0
    }
}

/// The profiler's own cost, from the kernel's run-time stats of its programs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Cost {
    pub runs: u64,
    pub ns: u64,
    /// Share of the watched CPUs' time, in percent.
    pub cpu_pct: f64,
}

/// A profile of the watched CPUs over `seconds`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    pub seconds: f64,
    pub cpus: Vec<usize>,
    /// The namespace the packet, device and drop views were limited to.
    pub netns: Option<String>,
    /// What each view is measured with on this kernel.
    pub measured_with: Vec<String>,
    pub stages: Vec<Stage>,
    pub per_cpu: Vec<Cpu>,
    pub softirqs: u64,
    pub softirq_ns: u64,
    pub softirq_hist: Hist,
    /// Counting only: no stages, no packet records, no softirq durations;
    /// softirq runs and time are the kernel's own accounting.
    #[serde(default)]
    pub counts_only: bool,
    /// Packets into the stack (netif_receive_skb) in the namespace.
    pub packets: u64,
    /// One packet in this many was followed to its end of life.
    #[serde(default)]
    pub follow_every: u32,
    pub outcomes: Vec<Outcome>,
    pub devices: Vec<Device>,
    pub drops: Vec<Drop>,
    pub runq: Hist,
    pub events: Vec<(String, u64)>,
    pub xdp_programs: Vec<ProgStat>,
    pub lost: Lost,
    pub cost: Cost,
    pub stacks: Option<Stacks>,
}

impl Profile {
    /// Each stage's nanoseconds per packet, over `packets` (say, those the
    /// sink counted), then the total.
    pub fn per_packet(&self, packets: u64) -> Vec<(String, f64)> {
        let per = |ns: u64| ns as f64 / packets.max(1) as f64;
        let mut v: Vec<(String, f64)> = self.stages.iter().map(|s| (s.name.clone(), per(s.ns))).collect();
        v.push(("softirq".into(), per(self.softirq_ns)));
        v
    }

    pub fn outcome(&self, name: &str) -> u64 {
        self.outcomes.iter().find(|o| o.name == name).map_or(0, |o| o.count)
    }

    pub fn drops_named(&self, reason: &str) -> u64 {
        self.drops.iter().filter(|d| d.reason == reason).map(|d| d.count).sum()
    }

    pub fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name)
    }

    pub fn stage_ns(&self, name: &str) -> u64 {
        self.stages.iter().find(|s| s.name == name).map_or(0, |s| s.ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_bucket_upper_bounds() {
        let h = Hist { buckets: vec![0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 1] };
        assert_eq!(h.quantile(0.5), Some(16));
        assert_eq!(h.quantile(0.99), Some(2048));
        assert_eq!(Hist::default().quantile(0.5), None);
    }

    #[test]
    fn xdp_drops_are_what_polls_handled_and_nothing_else_took() {
        let d = Device { work: 100, to_stack: 10, xdp_tx: 20, xdp_redirect: 30, xdp_redirect_err: 5, xdp_exception: 1, ..Default::default() };
        assert_eq!(d.xdp_dropped(), 34);
    }

    #[test]
    fn the_tables_match_the_bpf_enums() {
        let h = include_str!("../bpf/stages.h");
        assert!(h.contains("PROF_STAGES,") && h.matches("\tST_").count() == STAGES.len());
        assert_eq!(h.matches("\tOUT_").count(), OUTCOMES.len());
        assert_eq!(h.matches("\tEV_").count(), EVENTS.len());
    }
}
