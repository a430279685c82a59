//! A program's own cost per frame, as the kernel measures it: the XDP
//! program attached to an interface is found by asking the kernel
//! (`bpf_xdp_query`, whatever attached it: xnf, a peer tool, the lab),
//! opened by its id and run by `BPF_PROG_TEST_RUN` over one frame `repeat`
//! times. The kernel reports the mean time per run in whole nanoseconds
//! (`duration`): its own loop included, the time it gives up to the
//! scheduler between runs left out. No driver, no NAPI, no real traffic:
//! the program alone, on one CPU, over the same frame every time.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
pub use xnf_core::xdp::{Verdict, XdpContext};

/// The id of the XDP program attached to `ifindex` (in the calling
/// thread's network namespace), in whichever mode it is attached.
pub fn attached(ifindex: u32) -> Result<u32> {
    let mut id = 0u32;
    // SAFETY: a query that writes one u32 we own.
    let rc = unsafe { libbpf_sys::bpf_xdp_query_id(ifindex as i32, 0, &mut id) };
    ensure!(rc == 0, "asking the kernel for the XDP program of interface {ifindex}: {}", std::io::Error::from_raw_os_error(-rc));
    ensure!(id != 0, "interface {ifindex} has no XDP program attached");
    Ok(id)
}

/// A program opened by its id.
pub struct Program {
    fd: OwnedFd,
    pub id: u32,
    /// The name the kernel gives it (its C function's, cut to 15 bytes).
    pub name: String,
}

/// One `BPF_PROG_TEST_RUN` call.
#[derive(Clone, Copy, Debug)]
pub struct TestRun {
    pub verdict: Verdict,
    /// The kernel's mean time per run, whole nanoseconds.
    pub ns: u32,
    pub repeat: u32,
    /// The call's own duration, syscall and scheduling included.
    pub wall: Duration,
}

impl Program {
    pub fn open(id: u32) -> Result<Program> {
        // SAFETY: a new fd is ours to own.
        let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
        ensure!(fd >= 0, "opening BPF program {id} by its id: {}", std::io::Error::last_os_error());
        // SAFETY: just returned to us, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut info = libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of_val(&info) as u32;
        // SAFETY: a valid fd; info is plain data of the size given.
        let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
        ensure!(rc == 0, "reading BPF program {id}'s info: {}", std::io::Error::from_raw_os_error(-rc));
        let name = info.name.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect();
        Ok(Program { fd, id, name })
    }

    /// Runs the program `repeat` times over `frame`, received as `ctx`
    /// says (its interface must be in the calling thread's namespace).
    pub fn run(&self, frame: &[u8], ctx: XdpContext, repeat: u32) -> Result<TestRun> {
        ensure!((1..=i32::MAX as u32).contains(&repeat), "a test run repeats 1..={} times, not {repeat}", i32::MAX);
        let ctx_in = ctx.to_bytes(frame.len());
        let mut opts = libbpf_sys::bpf_test_run_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
            data_in: frame.as_ptr().cast(),
            data_size_in: frame.len() as u32,
            ctx_in: ctx_in.as_ptr().cast(),
            ctx_size_in: ctx_in.len() as u32,
            repeat: repeat as i32,
            ..Default::default()
        };
        let t0 = Instant::now();
        // SAFETY: opts points at `frame` and `ctx_in`, both alive and of
        // the sizes given; no output buffers (the kernel skips them).
        let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(self.fd.as_raw_fd(), &mut opts) };
        let wall = t0.elapsed();
        ensure!(rc == 0, "BPF_PROG_TEST_RUN of program {} ({}): {}", self.id, self.name, std::io::Error::from_raw_os_error(-rc));
        let verdict =
            Verdict::from_u32(opts.retval).with_context(|| format!("program {} ({}) returned {}, not an XDP action", self.id, self.name, opts.retval))?;
        Ok(TestRun { verdict, ns: opts.duration, repeat, wall })
    }
}

/// Runs per call for a call of about `target`, from `ns` per run measured
/// before; at least `floor` (a call of a few runs would be all overhead).
pub fn sized(ns: u32, target: Duration, floor: u32) -> u32 {
    let n = target.as_nanos() / u128::from(ns.max(1));
    n.clamp(u128::from(floor), i32::MAX as u128) as u32
}

/// Pins the calling thread to `cpu`: every call of a comparison on the
/// same CPU (a test run stays on one CPU for its whole call).
pub fn pin_thread(cpu: usize) -> Result<()> {
    // SAFETY: plain syscalls on this thread with a valid cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        ensure!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0, "pinning to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_sized_to_the_target_within_bounds() {
        assert_eq!(sized(20, Duration::from_millis(500), 1000), 25_000_000);
        assert_eq!(sized(0, Duration::from_millis(1), 1000), 1_000_000, "0 ns counts as 1");
        assert_eq!(sized(1_000_000, Duration::from_millis(1), 1000), 1000, "at least the floor");
        assert_eq!(sized(1, Duration::from_secs(100), 1), i32::MAX as u32, "at most what the kernel takes");
    }
}
