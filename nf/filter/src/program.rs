//! The filter program (`filter.bpf.c`): loading it, and reading and writing
//! the maps all its instances share.

use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramMut};

use xnf_core::lifecycle::{pin_maps, PinnedMaps};
use xnf_core::maps::{as_bytes, from_bytes, object_storage};

use crate::skel::filter::{types, FilterSkel, FilterSkelBuilder};

pub use types::xnf_filter_header as RawHeader;
pub use types::xnf_filter_record as RawRecord;
pub use types::xnf_filter_rule as RawRule;

pub const MAX_RULES: u32 = types::xnf_filter_limits::XNF_FILTER_MAX_RULES.0;
/// Bytes of each record of a compiled rule set (filter.h).
pub const RECORD: usize = types::xnf_filter_limits::XNF_FILTER_RECORD.0 as usize;
/// Records of a compiled set (the inner array's entries).
pub const RECORDS: u32 = types::xnf_filter_region::XNF_FR_COUNT.0;
pub const MAX_LISTS: u32 = types::xnf_filter_limits::XNF_FILTER_MAX_LISTS.0;
/// Bytes of a dropped frame a capture keeps.
pub const SNAPLEN: u32 = types::xnf_filter_limits::XNF_FILTER_SNAPLEN.0;
const TOP_SLOTS: u32 = 1 << types::xnf_filter_limits::XNF_FILTER_TOP_BITS.0;
/// The per-rule counter slot of the default policy.
pub const RULE_DEFAULT: u32 = MAX_RULES;
/// The rule a capture record names for a malformed frame.
pub const RULE_MALFORMED: u32 = MAX_RULES + 1;
/// A capture of every rule's drops.
pub const RULE_ANY: u32 = u32::MAX;

const _: () = assert!(MAX_RULES as usize == crate::rules::MAX_RULES);
const _: () = assert!(MAX_LISTS as usize == 2 * crate::rules::MAX_LISTS);

xnf_core::c_enum! {
    /// The filter's counters (`enum xnf_filter_counter`).
    pub enum Counter: types::xnf_filter_counter, max XNF_FC_MAX {
        Rx = XNF_FC_RX => "rx",
        Pass = XNF_FC_PASS => "pass",
        Drop = XNF_FC_DROP => "drop",
        RulePass = XNF_FC_RULE_PASS => "rule-pass",
        RuleDrop = XNF_FC_RULE_DROP => "rule-drop",
        Counted = XNF_FC_COUNTED => "counted",
        RatePass = XNF_FC_RATE_PASS => "rate-pass",
        RateDrop = XNF_FC_RATE_DROP => "rate-drop",
        DefaultPass = XNF_FC_DEFAULT_PASS => "default-pass",
        DefaultDrop = XNF_FC_DEFAULT_DROP => "default-drop",
        Unsure = XNF_FC_UNSURE => "unsure",
        NonIp = XNF_FC_NON_IP => "non-ip",
        Malformed = XNF_FC_MALFORMED => "malformed",
        Qinq = XNF_FC_QINQ => "qinq",
        Captured = XNF_FC_CAPTURED => "captured",
        CaptureLost = XNF_FC_CAPTURE_LOST => "capture-lost",
        Tx = XNF_FC_TX => "tx",
        CookieOk = XNF_FC_COOKIE_OK => "cookie-ok",
        CookieConn = XNF_FC_COOKIE_CONN => "cookie-conn",
        CookieDrop = XNF_FC_COOKIE_DROP => "cookie-drop",
        CookieUnchecked = XNF_FC_COOKIE_UNCHECKED => "cookie-unchecked",
    }
}

/// The filter's counters summed over CPUs, indexed by [`Counter`].
pub type Counters = [u64; Counter::ALL.len()];
const _: () = assert!(std::mem::size_of::<types::xnf_filter_stats>() == 8 * Counter::ALL.len());

/// A rule's counters summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RuleCounters {
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
}

/// One loaded filter instance (one per interface: its "continue" reaches
/// that interface's later stages).
pub struct FilterProgram {
    skel: FilterSkel<'static>,
}

impl FilterProgram {
    /// Loads an instance. With `pin_dir`, its maps are shared with every
    /// other instance through pins there; with `stages`, it continues to
    /// that interface's later stages (else it passes to the kernel).
    pub fn load(pin_dir: Option<&Path>, stages: Option<&MapHandle>) -> Result<Self> {
        let mut open = FilterSkelBuilder::default().open(object_storage()).context("opening the filter BPF object")?;
        // Conntrack's lookup for syn-cookie rules, where the kernel has it.
        let ro = open.maps.rodata_data.as_deref_mut().context("the filter has no rodata")?;
        ro.have_conntrack = conntrack_lookup() as u8;
        if let Some(dir) = pin_dir {
            pin_maps::<FilterMaps>(open.open_object_mut(), dir)?;
        }
        if let Some(s) = stages {
            xnf_core::entry::reuse_stages(&mut open.maps.xnf_stages, s)?;
        }
        let skel =
            open.load().context("loading the filter into the kernel failed (verifier or missing BPF support: bpf_loop needs Linux 5.17; see `dmesg`)")?;
        Ok(Self { skel })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_filter
    }

    /// Whether this instance checks segments against conntrack: what the
    /// kernel offered when it was loaded (read from its frozen rodata, not
    /// probed again: a module loaded since does not change a loaded program).
    pub fn conntrack(&self) -> bool {
        self.skel.maps.rodata_data.is_some_and(|ro| ro.have_conntrack != 0)
    }

    pub fn maps(&self) -> Result<FilterMaps> {
        FilterMaps::of_object(self.skel.object())
    }
}

xnf_core::pinned_maps! {
    /// The maps shared by every filter instance, as pinned.
    pub struct FilterMaps in FilterSkelBuilder {
        rule_sets,
        pub(crate) lists,
        pub(crate) list_bits,
        pub(crate) list_leaves,
        stats,
        rule_counters,
        buckets,
        top_sources,
        capture_cfg,
        capture_state,
        pub capture_ring,
    }
}

/// Whether the kernel offers conntrack's lookup to XDP now (built in, or
/// its module loaded): a filter loaded then checks segments of syn-cookie
/// rules against known connections (syncookie.h).
pub fn conntrack_lookup() -> bool {
    std::fs::read_to_string("/proc/kallsyms").is_ok_and(|s| s.lines().any(|l| l.split_whitespace().nth(2) == Some("bpf_xdp_ct_lookup")))
}

impl FilterMaps {
    /// The outer map of the live compiled set (compile.rs reads and swaps it).
    pub(crate) fn rule_sets(&self) -> &MapHandle {
        &self.rule_sets
    }

    /// Removes the rule set: every frame meets the default, pass.
    pub fn clear_rules(&self) -> Result<()> {
        xnf_core::maps::swap::clear(&self.rule_sets)
    }

    pub fn counters(&self) -> Result<Counters> {
        xnf_core::maps::sum_percpu(&self.stats, 0)
    }

    pub fn rule_counters(&self, rule: u32) -> Result<RuleCounters> {
        let [packets, bytes, dropped] = xnf_core::maps::sum_percpu::<3>(&self.rule_counters, rule)?;
        Ok(RuleCounters { packets, bytes, dropped })
    }

    /// Zeroes the counters of `rules` (indexes, [`RULE_DEFAULT`] for the default).
    pub fn reset_rule_counters(&self, rules: impl IntoIterator<Item = u32>) -> Result<()> {
        for r in rules {
            xnf_core::maps::zero_percpu::<types::xnf_filter_rule_stats>(&self.rule_counters, r)?;
        }
        Ok(())
    }

    /// Drops per source, largest first: each CPU's table read and summed
    /// by address (the counts are lower bounds; see `sample_source`).
    pub fn top_sources(&self, n: usize) -> Result<Vec<(std::net::IpAddr, u64)>> {
        let mut sums: std::collections::HashMap<std::net::IpAddr, u64> = std::collections::HashMap::new();
        for slot in 0..TOP_SLOTS {
            let per_cpu = self.top_sources.lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
            for t in per_cpu.iter().map(|v| from_bytes::<types::xnf_filter_top>(v)).filter(|t| t.count > 0 && t.family != 0) {
                let mut b = [0u8; 16];
                for (i, w) in t.addr.iter().enumerate() {
                    b[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
                }
                let ip = if t.family == 2 { std::net::IpAddr::from([b[0], b[1], b[2], b[3]]) } else { std::net::IpAddr::from(b) };
                *sums.entry(ip).or_default() += t.count;
            }
        }
        let mut v: Vec<_> = sums.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(n);
        Ok(v)
    }

    /// Starts capturing the drops of `rule` ([`RULE_ANY`]: all), at most
    /// `max_pps` frames per second; `max_pps == 0` stops.
    pub fn set_capture(&self, rule: u32, max_pps: u64) -> Result<()> {
        let cfg = types::xnf_filter_capture { enabled: (max_pps > 0) as u32, rule, max_pps };
        self.capture_cfg.update(&0u32.to_ne_bytes(), as_bytes(&cfg), MapFlags::ANY).context("configuring the capture")
    }
}
