//! `xnf profile`: watch the CPUs for a while (Ctrl-C ends early), then
//! print where the network path spent their time.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;

use crate::{Options, Session, Watch};

/// Where the kernel's network path spends its time, stage by stage.
///
/// Attaches to tracepoints only (no kprobes): NET_RX softirq time cut into
/// stages (driver/XDP, GRO, ip-rcv, route, local delivery, forward, xmit),
/// packets from netif_receive_skb to their end (forwarded, delivered,
/// dropped with the kernel's reason, consumed), NAPI polls and XDP per
/// device, context switches and run-queue delay. `--stack` adds sampled
/// stacks: a top-functions table and a flame graph (--flame FILE).
#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// Seconds to watch (Ctrl-C ends early and prints what was gathered).
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Count packets, devices and drops of this network namespace only (a
    /// name from `ip netns`, or a path such as /proc/PID/ns/net).
    #[arg(long, value_name = "NAME|PATH")]
    pub netns: Option<String>,
    /// CPUs to watch, e.g. 0,2-3 [default: all].
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Also sample kernel and user stacks: top functions, and a flame
    /// graph with --flame.
    #[arg(long)]
    pub stack: bool,
    /// Samples per second per CPU with --stack.
    #[arg(long, default_value_t = 999, value_name = "HZ")]
    pub frequency: u64,
    /// Write the flame graph (SVG) here (needs --stack).
    #[arg(long, value_name = "FILE")]
    pub flame: Option<PathBuf>,
    /// Write the profile as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also count BPF programs' run time: XDP programs' ns per run and the
    /// profiler's own cost (two clock reads per run of every BPF program:
    /// a fast XDP path slows down by a fifth while it is on).
    #[arg(long)]
    pub prog_stats: bool,
    /// Counts only: softirq time, NAPI polls, XDP per device, drops by
    /// reason, scheduling; no per-packet tracepoint (no stages), for the
    /// least overhead on a busy path.
    #[arg(long)]
    pub counts_only: bool,
    /// Follow one packet in N to its end of life (the per-packet table is
    /// the costliest probe); stages and counts still see every packet.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub follow_every: u32,
    /// Packets followed at once (the rest are counted as lost).
    #[arg(long, default_value_t = 65536, value_name = "N")]
    pub in_flight: u32,
}

/// Parses a CPU list: `0,2-3`.
pub fn parse_cpus(s: &str, ncpu: usize) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (
            a.parse().with_context(|| format!("--cpus {s}: `{part}` is not a CPU or range"))?,
            b.parse().with_context(|| format!("--cpus {s}: `{part}` is not a CPU or range"))?,
        );
        ensure!(a <= b, "--cpus {s}: range {part} runs backwards");
        v.extend(a..=b);
    }
    v.sort_unstable();
    v.dedup();
    ensure!(!v.is_empty(), "--cpus {s}: name at least one CPU");
    if let Some(c) = v.iter().find(|&&c| c >= ncpu) {
        bail!("--cpus {s}: CPU {c} out of range (this machine has CPUs 0-{})", ncpu - 1);
    }
    ensure!(v.iter().all(|&c| c < 64), "--cpus {s}: only CPUs 0-63 can be chosen (leave --cpus out to watch all)");
    Ok(v)
}

/// The inode of a network namespace given by name or path.
pub fn netns_inode(ns: &str) -> Result<u32> {
    let path = if ns.contains('/') { PathBuf::from(ns) } else { PathBuf::from("/run/netns").join(ns) };
    let md = std::fs::metadata(&path).map_err(|_| anyhow::anyhow!("--netns {ns}: no such network namespace (`ip netns list` shows the names)"))?;
    Ok(md.ino() as u32)
}

/// Waits `seconds`, or until SIGINT/SIGTERM: true if interrupted.
fn wait(seconds: f64) -> Result<bool> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().context("blocking SIGINT/SIGTERM")?;
    let d = Duration::from_secs_f64(seconds);
    let ts = libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long };
    // SAFETY: valid set and timeout; no info wanted.
    let r = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
    Ok(r > 0)
}

pub fn run(a: ProfileArgs) -> Result<()> {
    ensure!(a.seconds > 0.0 && a.seconds <= 86_400.0, "--seconds {}: use more than 0 and at most 86400", a.seconds);
    ensure!(a.flame.is_none() || a.stack, "--flame needs --stack (the flame graph is drawn from sampled stacks)");
    ensure!((1..=100_000).contains(&a.frequency), "--frequency {}: use 1..=100000 Hz", a.frequency);
    ensure!(a.in_flight >= 1, "--in-flight must be at least 1");
    let cpus = match &a.cpus {
        Some(s) => parse_cpus(s, crate::cpu_count())?,
        None => Vec::new(),
    };
    let netns = a.netns.as_ref().map(|n| Ok::<_, anyhow::Error>((n.clone(), netns_inode(n)?))).transpose()?;
    let o = Options {
        watch: Watch { cpus, netns, in_flight: a.in_flight, counts_only: a.counts_only, follow_every: a.follow_every, device_slots: 0 },
        stack_hz: a.stack.then_some(a.frequency),
        prog_stats: a.prog_stats,
    };
    let session = Session::start(&o)?;
    eprintln!("xnf profile: watching for {} s (Ctrl-C to stop early)", a.seconds);
    if wait(a.seconds)? {
        eprintln!("xnf profile: interrupted, printing what was gathered");
    }
    let p = session.stop()?;
    print!("{}", crate::table::render(&p));
    if let (Some(path), Some(st)) = (&a.flame, &p.stacks) {
        let title = format!("xnf profile: {:.1} s, CPUs {}", p.seconds, crate::table::cpu_list(&p.cpus));
        std::fs::write(path, crate::flame::svg(&st.busy(), &title)).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("xnf profile: wrote {}", path.display());
    }
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&p)?).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("xnf profile: wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_bad_ones_say_why() {
        assert_eq!(parse_cpus("1,0-1", 4).unwrap(), vec![0, 1]);
        assert_eq!(parse_cpus("2-3", 4).unwrap(), vec![2, 3]);
        assert_eq!(parse_cpus("7", 2).unwrap_err().to_string(), "--cpus 7: CPU 7 out of range (this machine has CPUs 0-1)");
        assert!(parse_cpus("x", 2).unwrap_err().to_string().contains("not a CPU"));
        assert!(parse_cpus("3-1", 4).unwrap_err().to_string().contains("backwards"));
    }

    #[test]
    fn an_unknown_namespace_is_one_line() {
        assert_eq!(
            netns_inode("xnf-no-such-ns").unwrap_err().to_string(),
            "--netns xnf-no-such-ns: no such network namespace (`ip netns list` shows the names)"
        );
    }
}
