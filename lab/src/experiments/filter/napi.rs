//! Where dut's ingress is served: a NIC's receive queue has its interrupt
//! on one core, but a veth's NAPI loop runs on whichever CPU found its ring
//! empty and scheduled it — under a sustained flood it stays there, so the
//! flood's processing lands on the generator's CPU in one run and on the
//! victim's in the next (measured: 20 % vs 90 % busy on the victim's CPU at
//! the same rate). Threaded NAPI makes the loop a kernel thread, which is
//! pinned to one CPU and given real-time priority, so it preempts everything
//! else there as a softirq would: the seed's single receive queue on one core.

use anyhow::{bail, ensure, Context, Result};
use xnf_netns::Netns;

/// Priority of the NAPI thread (SCHED_FIFO): above every normal thread.
const PRIORITY: i32 = 50;

/// Makes `dev`'s NAPI threaded (sysfs of its namespace: `ip netns exec`
/// mounts it). A veth has NAPI only with an XDP program (the kernel
/// answers EIO before), and its thread is made again whenever the program
/// changes: call this and [`pin`] after every set-up.
pub fn threaded(ns: &Netns, dev: &str) -> Result<()> {
    let out = ns.command("sh").args(["-c", &format!("echo 1 > /sys/class/net/{dev}/threaded")]).output().context("running sh in dut's namespace")?;
    ensure!(out.status.success(), "threaded NAPI on {dev}: {}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(())
}

/// The NAPI threads of interfaces named `dev` (`napi/DEV-ID`): the lab's
/// names are unique to its namespaces' interfaces, and only this
/// experiment makes their NAPI threaded.
fn threads_of(dev: &str) -> Result<Vec<i32>> {
    let prefix = format!("napi/{dev}-");
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").context("reading /proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end().starts_with(&prefix)) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// Pins `dev`'s NAPI threads to `cpu` at real-time priority.
pub fn pin(dev: &str, cpu: usize) -> Result<()> {
    let pids = threads_of(dev)?;
    if pids.is_empty() {
        bail!("no NAPI thread of {dev}: threaded NAPI needs an XDP program on the veth");
    }
    for pid in pids {
        crate::engine::cpu::pin(pid, cpu).with_context(|| format!("{dev}'s NAPI thread {pid}"))?;
        let param = libc::sched_param { sched_priority: PRIORITY };
        // SAFETY: plain syscall on a pid with a valid parameter struct.
        if unsafe { libc::sched_setscheduler(pid, libc::SCHED_FIFO, &param) } != 0 {
            bail!("real-time priority for {dev}'s NAPI thread {pid}: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}
