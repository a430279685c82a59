//! A profile on the terminal: the stage table first, then per CPU, packets
//! by end of life, devices, drops, XDP programs, scheduling, stacks, what
//! was lost and what the profiler cost.

use std::fmt::Write;

use crate::model::{Hist, Profile, STAGES};
use crate::sample::Stacks;

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn bound(ns: Option<u64>) -> String {
    match ns {
        None => "-".into(),
        Some(n) if n < 1_000 => format!("<{n} ns"),
        Some(n) if n < 1_000_000 => format!("<{:.0} us", n as f64 / 1e3),
        Some(n) => format!("<{:.1} ms", n as f64 / 1e6),
    }
}

fn quantiles(h: &Hist) -> String {
    format!("median {}, p99 {}", bound(h.quantile(0.5)), bound(h.quantile(0.99)))
}

/// CPUs as a compact list: 0-3,6.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// The softirq's stages, per CPU, and the packets by end of life.
fn stages(s: &mut String, p: &Profile, polled: u64, cpu_ns: f64) {
    let _ = writeln!(
        s,
        "NET_RX softirq: {} runs, {:.1} ms ({:.1} % of the CPUs' time); per run {}",
        p.softirqs,
        ms(p.softirq_ns),
        100.0 * p.softirq_ns as f64 / cpu_ns,
        quantiles(&p.softirq_hist)
    );
    let _ = writeln!(s, "{:<8} {:>10} {:>7} {:>10}  measured between", "stage", "time ms", "share", "ns/frame");
    for (st, (_, between)) in p.stages.iter().zip(STAGES.iter()) {
        let share = 100.0 * st.ns as f64 / p.softirq_ns.max(1) as f64;
        let _ = writeln!(s, "{:<8} {:>10.2} {:>6.1}% {:>10.1}  {between}", st.name, ms(st.ns), share, st.ns as f64 / polled.max(1) as f64);
    }
    let _ = writeln!(s, "{:<8} {:>10.2} {:>6.1}% {:>10.1}", "total", ms(p.softirq_ns), 100.0, p.softirq_ns as f64 / polled.max(1) as f64);
    let _ = writeln!(s, "\n{:<4} {:>9} {:>9} {}  {:>8} {:>9} {:>10}", "cpu", "softirqs", "ms", stage_heads(), "NET_TX", "switches", "ksoftirqd");
    for c in &p.per_cpu {
        let stages: String = c.stage_ns.iter().map(|&n| format!(" {:>7.1}", ms(n))).collect();
        let _ = writeln!(
            s,
            "{:<4} {:>9} {:>9.1}{stages}  {:>8} {:>9} {:>8.1}ms",
            c.cpu,
            c.softirqs,
            ms(c.softirq_ns),
            c.tx_softirqs,
            c.switches,
            ms(c.ksoftirqd_ns)
        );
    }
    let followed = if p.follow_every > 1 { format!(" (1 in {} followed)", p.follow_every) } else { String::new() };
    let _ = writeln!(s, "\npackets from netif_receive_skb to their end{followed}:");
    for o in &p.outcomes {
        let _ = writeln!(s, "  {:<10} {:>10}  {}", o.name, o.count, quantiles(&o.latency));
    }
}

/// The whole profile as text.
pub fn render(p: &Profile) -> String {
    let mut s = String::new();
    let polled: u64 = p.devices.iter().map(|d| d.work).sum();
    let cpu_ns = p.seconds * 1e9 * p.cpus.len().max(1) as f64;
    let scope = p.netns.as_ref().map_or("all namespaces".to_string(), |n| format!("namespace {n} (packets, devices, drops; stages are per CPU)"));
    let _ = writeln!(s, "xnf profile: {:.2} s on CPUs {}, {scope}", p.seconds, cpu_list(&p.cpus));
    let _ = writeln!(s, "{polled} frames polled by NAPI, {} packets into the stack (netif_receive_skb)\n", p.packets);
    if p.counts_only {
        // Counting only: the kernel's accounting, no stages, no packets.
        let _ = writeln!(
            s,
            "NET_RX softirq: {} runs (/proc/softirqs); softirq time {:.1} ms ({:.1} % of the CPUs' time, /proc/stat); stages and packets not measured (counts only)",
            p.softirqs,
            ms(p.softirq_ns),
            100.0 * p.softirq_ns as f64 / cpu_ns
        );
        let _ = writeln!(s, "\n{:<4} {:>9} {:>9}  {:>8} {:>9} {:>10}", "cpu", "softirqs", "ms", "NET_TX", "switches", "ksoftirqd");
        for c in &p.per_cpu {
            let _ =
                writeln!(s, "{:<4} {:>9} {:>9.1}  {:>8} {:>9} {:>8.1}ms", c.cpu, c.softirqs, ms(c.softirq_ns), c.tx_softirqs, c.switches, ms(c.ksoftirqd_ns));
        }
    } else {
        stages(&mut s, p, polled, cpu_ns);
    }
    devices(&mut s, p);
    if !p.drops.is_empty() {
        let _ = writeln!(s, "\ndrops (skb:kfree_skb, reasons from the kernel's BTF):\n  {:<24} {:<32} {:>10}", "reason", "where", "count");
        for d in &p.drops {
            let _ = writeln!(s, "  {:<24} {:<32} {:>10}", d.reason, d.location, d.count);
        }
    }
    if !p.xdp_programs.is_empty() {
        let _ = writeln!(s, "\nXDP programs (BPF run-time stats):\n  {:>6} {:<16} {:>12} {:>8}", "id", "name", "runs", "ns/run");
        for x in &p.xdp_programs {
            let _ = writeln!(s, "  {:>6} {:<16} {:>12} {:>8.1}", x.id, x.name, x.runs, x.ns_per_run());
        }
    }
    let _ = writeln!(s, "\nrun-queue delay (wakeup to on CPU): {} wakeups, {}", p.runq.count(), quantiles(&p.runq));
    if let Some(all) = &p.stacks {
        let _ = writeln!(s, "\n{}", stacks_line(all));
        let st = all.busy();
        let _ = writeln!(
            s,
            "top functions ({} samples at {} Hz; {} idle left out):\n  {:>7} {:>7}  function",
            st.samples,
            st.frequency,
            all.samples - st.samples,
            "self %",
            "total %"
        );
        for f in st.top(15) {
            let _ = writeln!(s, "  {:>6.1}% {:>6.1}%  {}", f.self_pct, f.total_pct, f.name);
        }
    }
    let l = &p.lost;
    let _ = writeln!(
        s,
        "\nlost: {} packets not followed (table full), {} ended untraced, {} still in flight, {} devices, {} drop entries, {} wakeups, {} stacks{}",
        l.packets,
        l.restarted,
        l.in_flight,
        l.devices,
        l.drops,
        l.wakeups,
        l.stacks,
        if l.any() { "  <- incomplete: see README" } else { "" }
    );
    if p.cost.runs > 0 {
        let _ = writeln!(
            s,
            "profiler cost (with --prog-stats): {} program runs, {:.0} ns each, {:.2} % of the watched CPUs",
            p.cost.runs,
            p.cost.ns as f64 / p.cost.runs.max(1) as f64,
            p.cost.cpu_pct
        );
    }
    let _ = writeln!(s, "measured with:");
    for m in &p.measured_with {
        let _ = writeln!(s, "  {m}");
    }
    s
}

/// How many stack samples were taken and lost, always (0 lost included):
/// a flame graph is only as good as what it was drawn from.
pub fn stacks_line(st: &Stacks) -> String {
    let l = &st.lost;
    format!(
        "stacks: {} samples, {} lost ({:.1} %): {} not recorded (ring buffer full), {} kernel and {} user stacks not copied",
        st.taken(),
        l.total(),
        st.lost_pct(),
        l.ring_full,
        l.kernel_stacks,
        l.user_stacks
    )
}

fn stage_heads() -> String {
    STAGES.iter().map(|(n, _)| format!(" {n:>7}")).collect()
}

fn devices(s: &mut String, p: &Profile) {
    if p.devices.is_empty() {
        return;
    }
    // Counting only, frames into the stack are not counted: what the
    // tracepoints do not see is XDP_DROP and XDP_PASS together.
    let rest_head = if p.counts_only { "drop+pass*" } else { "xdp-drop*" };
    let _ = writeln!(
        s,
        "\ndevices:\n  {:<16} {:<12} {:>8} {:>9} {:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>7} {:>10}",
        "namespace", "device", "polls", "frames", "/poll", "full%", "to-stack", "xdp-tx", "redirect", "rd-err", "aborted", rest_head
    );
    for d in &p.devices {
        let to_stack = if p.counts_only { "-".to_string() } else { d.to_stack.to_string() };
        let _ = writeln!(
            s,
            "  {:<16} {:<12} {:>8} {:>9} {:>6.1} {:>5.1}% {:>9} {:>9} {:>9} {:>7} {:>7} {:>10}",
            d.namespace,
            d.name,
            d.polls,
            d.work,
            d.work as f64 / d.polls.max(1) as f64,
            100.0 * d.full_budget as f64 / d.polls.max(1) as f64,
            to_stack,
            d.xdp_tx,
            d.xdp_redirect,
            d.xdp_redirect_err,
            d.xdp_exception,
            d.xdp_dropped()
        );
    }
    let _ = writeln!(
        s,
        "  * frames polled that went to no traced place: {}",
        if p.counts_only {
            "XDP_DROP or XDP_PASS (counting only: frames into the stack are not counted)"
        } else {
            "XDP_DROP (there is no tracepoint per XDP verdict)"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_compact() {
        assert_eq!(cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpu_list(&[3]), "3");
    }

    #[test]
    fn lost_stack_samples_are_said_even_when_none() {
        let mut st = Stacks { frequency: 999, samples: 990, ..Default::default() };
        let p = Profile { seconds: 1.0, cpus: vec![0], stacks: Some(st.clone()), ..Default::default() };
        assert!(
            render(&p).contains("stacks: 990 samples, 0 lost (0.0 %): 0 not recorded (ring buffer full), 0 kernel and 0 user stacks not copied"),
            "{}",
            render(&p)
        );
        st.lost = crate::sample::SampleLost { ring_full: 10, kernel_stacks: 2, user_stacks: 3 };
        assert_eq!(stacks_line(&st), "stacks: 1000 samples, 15 lost (1.5 %): 10 not recorded (ring buffer full), 2 kernel and 3 user stacks not copied");
    }

    #[test]
    fn an_empty_profile_renders() {
        let t = render(&Profile { seconds: 1.0, cpus: vec![0], ..Default::default() });
        assert!(t.contains("NET_RX softirq: 0 runs"), "{t}");
    }
}
