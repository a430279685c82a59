//! The terminal tables of an experiment's results: every sample, the
//! summary per variant and point, and the ratios.

use super::results::{Results, SampleKind};

/// Prints the per-sample table, the summary and the ratios.
pub fn print(r: &Results) {
    let m = &r.machine;
    let (w, v) = (point_width(r), variant_width(r, 12));
    println!("\nxnf lab {} — kernel {}, {} × {}, xnf {}", r.experiment, m.kernel, m.cores, m.cpu_model, m.xnf_version);
    if !m.nics.is_empty() {
        let nic = |n: &super::results::Nic| {
            let extra: Vec<&str> = [n.bus.as_str(), n.firmware.as_str()].into_iter().filter(|s| !s.is_empty()).collect();
            let numa = n.numa_node.filter(|&x| x >= 0).map(|x| format!(", NUMA node {x}")).unwrap_or_default();
            format!("{} {} ({}{}{numa})", n.role, n.ifname, n.driver, if extra.is_empty() { String::new() } else { format!(" {}", extra.join(" ")) })
        };
        let smt = m.smt.map(|s| format!("; SMT {}", if s { "on" } else { "off" })).unwrap_or_default();
        println!("{}; governor {}{smt}", m.nics.iter().map(nic).collect::<Vec<_>>().join(", "), m.governor.as_deref().unwrap_or("none (no cpufreq)"));
    }
    println!(
        "\n{:<v$} {:<w$} {:>3} {:>12} {:>9} {:>9} {:>7} {:>12} {:>7} {:>7}  CPU busy% (softirq/sys/user) per CPU",
        "variant", "point", "run", "kind", "sent Mpps", "recv Mpps", "loss%", "lost where", "ns/pkt", "softirq"
    );
    for s in &r.samples {
        let cpus: Vec<String> = s.cpus.iter().map(|c| format!("{:.0} ({:.0}/{:.0}/{:.0})", c.busy_pct, c.softirq_pct, c.system_pct, c.user_pct)).collect();
        let kind = match s.kind {
            SampleKind::Max => "max".to_string(),
            SampleKind::Load { offered_pps, step } => format!("load{step} {:.2}", offered_pps / 1e6),
            SampleKind::Search { offered_pps } => format!("search {:.2}", offered_pps / 1e6),
        };
        let l = &s.loss;
        let lost = if l.gen_to_dut.abs() + l.in_dut.abs() + l.dut_to_sink.abs() == 0 {
            "-".into()
        } else {
            format!("{}/{}/{}", l.gen_to_dut, l.in_dut, l.dut_to_sink)
        };
        println!(
            "{:<v$} {:<w$} {:>3} {:>12} {:>9.3} {:>9.3} {:>7.2} {:>12} {:>7.0} {:>7.0}  {}",
            s.variant,
            r.label(&s.point),
            s.run + 1,
            kind,
            s.sent_mpps,
            s.mpps,
            s.loss_pct,
            lost,
            s.ns_per_packet,
            s.softirq_ns_per_packet,
            cpus.join("  ")
        );
    }
    println!("(lost where = before dut / inside dut / after dut; ns/pkt = all CPU time per received packet, softirq = the receive side's share: dut + sink)");
    // Where the drivers saw the loss: a NIC's misses, a veth's full rings.
    let with_drops: Vec<_> = r.samples.iter().filter(|s| !s.nic_drops.is_empty() && matches!(s.kind, SampleKind::Max)).collect();
    if !with_drops.is_empty() {
        println!("\nNIC counters of loss that rose in the full-speed intervals (ethtool -S, role:interface:counter):");
        for s in with_drops {
            let c: Vec<String> = s.nic_drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!("  {} run {}: {}", s.variant, s.run + 1, c.join(", "));
        }
    }
    print_summary(r);
}

/// The summary and ratio tables (shared by the experiments).
pub fn print_summary(r: &Results) {
    let (w, v) = (point_width(r), variant_width(r, 13));
    // dut's own CPU per packet: a column when dut had CPUs of its own.
    let placed = r.summary.iter().any(|s| s.median_dut_ns_per_packet.is_some());
    let dut_col = |d: &str| if placed { format!(" {d:>10}") } else { String::new() };
    let head = format!(
        "{:<v$} {:<w$} {:>11} {:>8} {:>8} {:>7} {:>7} {:>7} {:>8}",
        "variant", "point", "median Mpps", "min", "max", "sd", "Gbit/s", "ns/pkt", "softirq"
    );
    println!("\n{head}{} {:>15}", dut_col("dut ns/pkt"), "zero-loss Mpps");
    for s in &r.summary {
        let zl = s.zero_loss_mpps.map(|z| format!("{z:.3}")).unwrap_or("-".into());
        let dut = s.median_dut_ns_per_packet.map(|d| format!("{d:.0}")).unwrap_or("-".into());
        let opt = |v: Option<f64>, digits: usize| v.map_or("-".into(), |x| format!("{x:.digits$}"));
        println!(
            "{:<v$} {:<w$} {:>11.3} {:>8.3} {:>8.3} {:>7} {:>7} {:>7.0} {:>8.0}{} {:>15}",
            s.variant,
            r.label(&s.point),
            s.median_mpps,
            s.min_mpps,
            s.max_mpps,
            opt(s.stddev_mpps, 3),
            opt(s.median_gbps, 2),
            s.median_ns_per_packet,
            s.median_softirq_ns_per_packet,
            dut_col(&dut),
            zl
        );
    }
    if placed {
        println!("(dut ns/pkt = the run time of dut's NAPI threads, on CPUs of their own, per frame dut received: dut's CPU alone)");
    }
    for ratio in &r.ratios {
        let ns = |v: &str| r.summary_of(v, &ratio.point).map(|s| 1e3 / s.median_mpps);
        print!("\n{} / {} = {:.2}x at {}", ratio.numerator, ratio.denominator, ratio.ratio, r.label(&ratio.point));
        let dut = |v: &str| r.summary_of(v, &ratio.point).and_then(|s| s.median_dut_ns_per_packet);
        if let (Some(n), Some(d)) = (dut(&ratio.numerator), dut(&ratio.denominator)) {
            print!(
                "\n  dut's CPU per packet: {} {d:.0} ns, {} {n:.0} ns ({} / {} = {:.2})",
                ratio.denominator,
                ratio.numerator,
                ratio.denominator,
                ratio.numerator,
                d / n
            );
        }
        let placed = dut(&ratio.numerator).is_some();
        if let (Some(k), Some(x), Some(d), false) = (ns(&ratio.denominator), ns(&ratio.numerator), ns("dut-drop"), placed) {
            print!(
                "\n  time per packet: {} {k:.0} ns, {} {x:.0} ns, generating + receiving {d:.0} ns; forwarding + sink receive: {:.0} vs {:.0} ns = {:.2}x",
                ratio.denominator,
                ratio.numerator,
                k - d,
                x - d,
                (k - d) / (x - d)
            );
        }
    }
    println!();
    for n in &r.notes {
        println!("note: {n}");
    }
}

/// Width of the variant column: the longest name (peers can be long), at
/// least `min`.
fn variant_width(r: &Results, min: usize) -> usize {
    r.summary.iter().map(|s| s.variant.chars().count()).chain(r.samples.iter().map(|s| s.variant.chars().count())).max().unwrap_or(0).max(min)
}

/// Width of the point column: the longest label.
fn point_width(r: &Results) -> usize {
    r.summary.iter().map(|s| r.label(&s.point).chars().count()).chain(r.samples.iter().map(|s| r.label(&s.point).chars().count())).max().unwrap_or(0).max(5)
}
