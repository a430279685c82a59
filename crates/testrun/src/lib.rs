//! The test harness every xnf crate shares.
//!
//! This module's root runs an XDP program once over a frame through
//! `BPF_PROG_TEST_RUN` and returns its verdict and the frame as the program
//! left it; [`cli`] drives the `xnf` binary in namespaces.
//!
//! Helpers that look at the network (`bpf_fib_lookup`, devmaps) see the
//! network namespace of the calling thread: run this inside the namespace
//! that holds `ingress_ifindex`.

pub mod cli;
pub mod forward;
pub mod frames;
pub mod fuzz;
pub mod kernel;
pub mod layout;
pub mod parse_probe;
pub mod table;

use anyhow::{bail, Context, Result};
use libbpf_rs::{ProgramInput, ProgramMut};
pub use xnf_core::xdp::{Verdict, XdpContext};

/// What one run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub verdict: Verdict,
    /// The frame after the program (it may have grown or shrunk).
    pub frame: Vec<u8>,
}

/// Room in the output buffer for frames that grow (a pushed VLAN tag, a
/// generator frame given its size class's length): up to a page.
const OUT_SLACK: usize = 4096;

/// Runs `prog` once over `frame`.
pub fn run_xdp(prog: &ProgramMut<'_>, frame: &[u8], ctx: XdpContext) -> Result<RunResult> {
    let mut ctx_in = ctx.to_bytes(frame.len());
    let mut out = vec![0u8; frame.len() + OUT_SLACK];
    let input = ProgramInput { context_in: Some(&mut ctx_in), data_in: Some(frame), data_out: Some(&mut out), repeat: 1, ..Default::default() };
    let output = prog.test_run(input).context("BPF_PROG_TEST_RUN failed (is the ingress ifindex in this thread's network namespace?)")?;
    let Some(verdict) = Verdict::from_u32(output.return_value) else {
        bail!("program returned {} which is not an XDP action", output.return_value);
    };
    let len = output.data.map(|d| d.len()).unwrap_or(0);
    out.truncate(len);
    Ok(RunResult { verdict, frame: out })
}

/// Pins the calling thread to the CPU it runs on and returns that CPU:
/// for tests of programs that keep state per CPU (the generator's sequence,
/// the sink's counters), whose every run must land on the same one.
pub fn pin_to_current_cpu() -> u32 {
    // SAFETY: plain syscalls on this thread with a valid cpu_set_t.
    unsafe {
        let cpu = libc::sched_getcpu().max(0) as usize;
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0, "pinning the test thread to CPU {cpu}");
        cpu as u32
    }
}
