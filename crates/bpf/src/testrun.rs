//! Runs an XDP program once over a frame through `BPF_PROG_TEST_RUN` and
//! returns its verdict and the frame as the program left it.
//!
//! Helpers that look at the network (`bpf_fib_lookup`, devmaps) see the
//! network namespace of the calling thread: run this inside the namespace
//! that holds `ingress_ifindex`.

use anyhow::{bail, Context, Result};
use libbpf_rs::{ProgramInput, ProgramMut};

/// XDP verdicts, as the program returns them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Verdict {
    Aborted = 0,
    Drop = 1,
    Pass = 2,
    Tx = 3,
    Redirect = 4,
}

impl Verdict {
    /// All verdicts, indexed by their value.
    pub const ALL: [Verdict; 5] = [Self::Aborted, Self::Drop, Self::Pass, Self::Tx, Self::Redirect];

    pub fn from_u32(v: u32) -> Option<Self> {
        Self::ALL.get(v as usize).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Aborted => "aborted",
            Self::Drop => "drop",
            Self::Pass => "pass",
            Self::Tx => "tx",
            Self::Redirect => "redirect",
        }
    }
}

/// What one run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub verdict: Verdict,
    /// The frame after the program (it may have grown or shrunk).
    pub frame: Vec<u8>,
}

/// The `struct xdp_md` handed to the program as its context.
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpContext {
    pub ingress_ifindex: u32,
    pub rx_queue_index: u32,
}

impl XdpContext {
    /// The context as the kernel reads it, for a frame of `data_len` bytes.
    pub(crate) fn to_bytes(self, data_len: usize) -> [u8; 24] {
        // data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex
        let fields = [0, data_len as u32, 0, self.ingress_ifindex, self.rx_queue_index, 0];
        let mut out = [0u8; 24];
        for (chunk, v) in out.chunks_exact_mut(4).zip(fields) {
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
        out
    }
}

/// Room in the output buffer for frames that grow (a pushed VLAN tag, a
/// generator frame given its size class's length): up to a page.
const OUT_SLACK: usize = 4096;

/// Runs `prog` once over `frame`.
pub fn run_xdp(prog: &ProgramMut<'_>, frame: &[u8], ctx: XdpContext) -> Result<RunResult> {
    let mut ctx_in = ctx.to_bytes(frame.len());
    let mut out = vec![0u8; frame.len() + OUT_SLACK];
    let input = ProgramInput {
        context_in: Some(&mut ctx_in),
        data_in: Some(frame),
        data_out: Some(&mut out),
        repeat: 1,
        ..Default::default()
    };
    let output = prog
        .test_run(input)
        .context("BPF_PROG_TEST_RUN failed (is the ingress ifindex in this thread's network namespace?)")?;
    let Some(verdict) = Verdict::from_u32(output.return_value) else {
        bail!("program returned {} which is not an XDP action", output.return_value);
    };
    let len = output.data.map(|d| d.len()).unwrap_or(0);
    out.truncate(len);
    Ok(RunResult { verdict, frame: out })
}
