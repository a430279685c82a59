//! `/metrics`: every network function's counters, read from its per-CPU
//! maps at scrape time (nothing is sampled in between, so a scrape is the
//! kernel's count at that moment), named as Prometheus names things:
//! `xnf_` prefix, base units, `_total` on counters, labels that are
//! configuration (interface, rule, service, backend, chain, NF, reason),
//! never a flow.

use anyhow::Result;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use xnf_core::lifecycle::{Lifecycle, StageNf};
use xnf_core::xdp::Verdict;

type Labels = Vec<(String, String)>;

/// One metric family as read at a scrape.
pub struct Family {
    /// Without the `xnf_` prefix, and for counters without `_total`
    /// (the encoder adds both).
    pub name: &'static str,
    pub help: &'static str,
    pub counter: bool,
    pub samples: Vec<(Labels, f64)>,
}

impl Family {
    fn counter(name: &'static str, help: &'static str) -> Family {
        Family { name, help, counter: true, samples: Vec::new() }
    }

    fn gauge(name: &'static str, help: &'static str) -> Family {
        Family { name, help, counter: false, samples: Vec::new() }
    }

    fn add(&mut self, labels: &[(&str, &str)], v: impl Into<f64>) {
        self.samples.push((labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), v.into()));
    }
}

fn u(v: u64) -> f64 {
    v as f64
}

/// Every family, read now. A function with no state here adds no samples.
pub fn gather() -> Result<Vec<Family>> {
    let mut out = vec![build_info()];
    out.extend(nf_counters()?);
    out.extend(router()?);
    out.extend(filter()?);
    out.extend(lb()?);
    out.extend(chains()?);
    out.extend(programs()?);
    out.extend(afxdp()?);
    Ok(out)
}

fn build_info() -> Family {
    let mut f = Family::gauge("build_info", "The running xnf's version (always 1).");
    f.add(&[("version", env!("CARGO_PKG_VERSION"))], 1.0);
    f
}

/// Each stage function's own counters (the names its `stats` prints), in
/// one family per function, labelled by counter.
fn nf_counters() -> Result<Vec<Family>> {
    fn of<N: StageNf>(name: &'static str, help: &'static str) -> Result<Family> {
        let mut f = Family::counter(name, help);
        for (counter, v) in Lifecycle::<N>::stats()? {
            f.add(&[("counter", counter)], u(v));
        }
        Ok(f)
    }
    Ok(vec![
        of::<xnf_filter::Filter>("filter_packets", "Frames the filter counted, by counter (rx, pass, drop, and why), over all its interfaces.")?,
        of::<xnf_lb::Lb>("lb_packets", "Frames the lb counted, by counter (rx, tx, redirect, pass and why), over all its interfaces.")?,
        of::<xnf_lb::Decap>("decap_packets", "Frames decap counted, by counter, over all its interfaces.")?,
    ])
}

fn router() -> Result<Vec<Family>> {
    let mut packets = Family::counter("router_packets", "Frames the router handled, by interface and verdict.");
    let mut bytes = Family::counter("router_bytes", "Bytes of the frames the router handled, by interface and verdict.");
    let mut reasons = Family::counter("router_reason_packets", "Frames the router left to the kernel or dropped, by interface and reason.");
    let mut cache = Family::counter("router_route_cache_lookups", "Route lookups through the route cache, by interface and outcome (hit, miss, bypass).");
    if Lifecycle::<xnf_router::Router>::maps()?.is_some() {
        for (iface, s) in xnf_router::interface_stats()? {
            for v in Verdict::ALL {
                packets.add(&[("interface", &iface), ("verdict", v.name())], u(s.packets(v)));
                bytes.add(&[("interface", &iface), ("verdict", v.name())], u(s.bytes(v)));
            }
            for r in xnf_router::program::Reason::ALL {
                reasons.add(&[("interface", &iface), ("reason", r.name())], u(s.reason(r)));
            }
            for o in xnf_router::program::CacheOutcome::ALL {
                cache.add(&[("interface", &iface), ("outcome", o.name())], u(s.cache(o)));
            }
        }
    }
    Ok(vec![packets, bytes, reasons, cache])
}

fn filter() -> Result<Vec<Family>> {
    let mut packets = Family::counter("filter_rule_packets", "Frames each filter rule matched ((default): none did).");
    let mut bytes = Family::counter("filter_rule_bytes", "Bytes of the frames each filter rule matched.");
    let mut dropped = Family::counter("filter_rule_dropped_packets", "Frames each filter rule dropped.");
    for r in xnf_filter::rule_stats()? {
        packets.add(&[("rule", &r.name)], u(r.counters.packets));
        bytes.add(&[("rule", &r.name)], u(r.counters.bytes));
        dropped.add(&[("rule", &r.name)], u(r.counters.dropped));
    }
    Ok(vec![packets, bytes, dropped])
}

fn lb() -> Result<Vec<Family>> {
    let mut svc = Family::counter("lb_service_packets", "Frames each lb service took.");
    let mut svc_bytes = Family::counter("lb_service_bytes", "Bytes of the frames each lb service took.");
    let mut flows = Family::counter("lb_service_flows", "Flows each service's table decided (new flows, SYNs, stale entries).");
    let mut backend = Family::counter("lb_backend_packets", "Frames sent to each backend.");
    let mut backend_bytes = Family::counter("lb_backend_bytes", "Bytes sent to each backend.");
    let mut ct = Family::gauge("lb_conntrack_entries", "Entries in the lb's connection table.");
    let mut ct_fill = Family::gauge("lb_conntrack_fill_ratio", "The lb's connection table's entries over its capacity.");
    let (services, entries) = xnf_lb::service_stats()?;
    for s in &services {
        svc.add(&[("service", &s.name)], u(s.counters.packets));
        svc_bytes.add(&[("service", &s.name)], u(s.counters.bytes));
        flows.add(&[("service", &s.name)], u(s.counters.flows));
        for (addr, b) in &s.backends {
            let a = addr.to_string();
            backend.add(&[("service", &s.name), ("backend", &a)], u(b.packets));
            backend_bytes.add(&[("service", &s.name), ("backend", &a)], u(b.bytes));
        }
    }
    if Lifecycle::<xnf_lb::Lb>::maps()?.is_some() {
        ct.add(&[], u(entries));
        ct_fill.add(&[], u(entries) / f64::from(xnf_lb::program::CT_ENTRIES));
    }
    Ok(vec![svc, svc_bytes, flows, backend, backend_bytes, ct, ct_fill])
}

fn chains() -> Result<Vec<Family>> {
    let mut matched = Family::counter("chain_matched_packets", "Frames each chain's classes matched at its ingress.");
    let mut hop_in = Family::counter("chain_hop_in_packets", "Frames each chain sent into each of its NFs.");
    let mut hop_out = Family::counter("chain_hop_out_packets", "Frames that came back out of each NF of each chain.");
    let mut routed = Family::counter("chain_routed_packets", "Frames routed in XDP after each chain's last NF.");
    let mut dropped = Family::counter("chain_exit_dropped_packets", "Frames dropped after each chain's last NF (a blackhole route).");
    let mut to_kernel = Family::counter("chain_exit_kernel_packets", "Frames handed to the kernel after each chain's last NF, by reason.");
    for c in xnf_chain::counters()?.chains {
        matched.add(&[("chain", &c.name)], u(c.matched));
        for h in &c.hops {
            hop_in.add(&[("chain", &c.name), ("nf", &h.nf)], u(h.in_packets));
            hop_out.add(&[("chain", &c.name), ("nf", &h.nf)], u(h.out_packets));
        }
        routed.add(&[("chain", &c.name)], u(c.routed));
        dropped.add(&[("chain", &c.name)], u(c.dropped_at_exit));
        for (reason, v) in &c.to_kernel {
            to_kernel.add(&[("chain", &c.name), ("reason", reason)], u(*v));
        }
    }
    Ok(vec![matched, hop_in, hop_out, routed, dropped, to_kernel])
}

/// The stage programs' run time and runs, per interface and stage, where
/// the kernel counts them (`sysctl kernel.bpf_stats_enabled=1`; else zero).
fn programs() -> Result<Vec<Family>> {
    let mut time = Family::counter("program_run_time_seconds", "Time the kernel spent in each interface's stage programs (kernel.bpf_stats_enabled=1).");
    let mut runs = Family::counter("program_runs", "Runs of each interface's stage programs (kernel.bpf_stats_enabled=1).");
    for l in xnf_netns::netlink::links()? {
        let Some(info) = xnf_core::entry::info(l.ifindex) else { continue };
        for (stage, id, name) in &info.stages {
            if let Some((ns, n)) = prog_stats(*id) {
                let labels = [("interface", l.name.as_str()), ("stage", stage.name()), ("program", name.as_str())];
                time.add(&labels, ns as f64 / 1e9);
                runs.add(&labels, u(n));
            }
        }
    }
    Ok(vec![time, runs])
}

/// The `[[afxdp]]` applications the daemon supervises, as it records
/// them: whether each one's process runs, and how often it was restarted.
fn afxdp() -> Result<Vec<Family>> {
    let mut up = Family::gauge("afxdp_up", "Whether each AF_XDP application's process runs (1) or not (0).");
    let mut restarts = Family::counter("afxdp_restarts", "Times the daemon started each AF_XDP application again after it exited.");
    for r in xnf_config::afxdp::records()? {
        up.add(&[("name", &r.app.name)], if r.up() { 1.0 } else { 0.0 });
        restarts.add(&[("name", &r.app.name)], u(r.restarts));
    }
    Ok(vec![up, restarts])
}

/// (run time in ns, runs) of program `id`.
fn prog_stats(id: u32) -> Option<(u64, u64)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: a plain syscall; a new fd is ours to own.
    let fd = unsafe {
        let fd = libbpf_sys_prog_fd(id);
        if fd < 0 {
            return None;
        }
        OwnedFd::from_raw_fd(fd)
    };
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: a valid fd; info is plain data of the size given.
    if unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) } != 0 {
        return None;
    }
    Some((info.run_time_ns, info.run_cnt))
}

fn libbpf_sys_prog_fd(id: u32) -> i32 {
    // SAFETY: a plain syscall wrapper.
    unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) }
}

/// The families as prometheus-client encodes them, at scrape time.
#[derive(Debug)]
struct Scrape;

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let families = match gather() {
            Ok(f) => f,
            Err(e) => {
                eprintln!("xnf daemon: event=scrape result=error error=\"{e:#}\"");
                vec![build_info()]
            }
        };
        for f in families.iter().filter(|f| !f.samples.is_empty()) {
            let kind = if f.counter { MetricType::Counter } else { MetricType::Gauge };
            let mut m = encoder.encode_descriptor(f.name, f.help, None, kind)?;
            for (labels, v) in &f.samples {
                let fam = m.encode_family(labels)?;
                if f.counter {
                    ConstCounter::new(*v).encode(fam)?;
                } else {
                    ConstGauge::new(*v).encode(fam)?;
                }
            }
        }
        Ok(())
    }
}

/// The registry every scrape encodes: names prefixed `xnf_`.
pub fn registry() -> Registry {
    let mut r = Registry::with_prefix("xnf");
    r.register_collector(Box::new(Scrape));
    r
}

/// The Prometheus text format (what `promtool check metrics` reads), or
/// OpenMetrics when `openmetrics`.
pub fn render(r: &Registry, openmetrics: bool) -> Result<String> {
    let mut out = String::new();
    if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, r)?;
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, r)?;
    }
    Ok(out)
}
