//! The traffic generator's program (`bpf/gen.bpf.c`), run with
//! `BPF_PROG_TEST_RUN` in live-frame mode: the kernel sends the frames the
//! program returns `XDP_TX` for out of the ingress interface.

use std::os::fd::{AsFd, AsRawFd};

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramMut};

use crate::pod::{object_storage, sum_percpu};
use crate::skel::gen::{GenSkel, GenSkelBuilder};
use crate::testrun::XdpContext;

/// `BPF_F_TEST_XDP_LIVE_FRAMES` (Linux 5.18).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// What to generate: a template frame, varied over `flows` source ports.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// A complete Ethernet/IP/UDP frame; its UDP source port is `base_sport`.
    pub template: Vec<u8>,
    pub ipv6: bool,
    pub flows: u32,
    pub base_sport: u16,
}

pub struct GenProgram {
    skel: GenSkel<'static>,
    frame: Vec<u8>,
}

impl GenProgram {
    pub fn load(cfg: &GenConfig) -> Result<Self> {
        let hdr_len = if cfg.ipv6 { 14 + 40 + 8 } else { 14 + 20 + 8 };
        ensure!(cfg.template.len() >= hdr_len, "template frame shorter than its headers");
        ensure!(cfg.flows >= 1 && cfg.base_sport as u32 + cfg.flows <= 65536, "flows do not fit the port range above {}", cfg.base_sport);
        let mut open = GenSkelBuilder::default().open(object_storage()).context("opening the generator BPF object")?;
        let ro = open.maps.rodata_data.as_deref_mut().context("generator has no rodata")?;
        ro.flows = cfg.flows;
        ro.base_sport = cfg.base_sport;
        ro.ipv6 = cfg.ipv6 as u8;
        let bss = open.maps.bss_data.as_deref_mut().context("generator has no bss")?;
        bss.hdr[..hdr_len].copy_from_slice(&cfg.template[..hdr_len]);
        let skel = open.load().context("loading the generator program")?;
        Ok(Self { skel, frame: cfg.template.clone() })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_gen
    }

    /// Handles on the counters and the rate, usable from other threads.
    pub fn control(&self) -> Result<GenControl> {
        Ok(GenControl {
            state: MapHandle::try_from(&self.skel.maps.state)?,
            ctl: MapHandle::try_from(&self.skel.maps.ctl)?,
        })
    }

    /// Runs the program over `count` frames for `ifindex` (in the calling
    /// thread's network namespace), on the calling CPU; the ones it passes
    /// (all, without a rate) are sent. Blocks until done.
    pub fn send(&self, ifindex: u32, count: u32) -> Result<()> {
        let ctx = XdpContext { ingress_ifindex: ifindex, rx_queue_index: 0 }.to_bytes(self.frame.len());
        // SAFETY: zeroed opts with sz set is the libbpf idiom; buffers outlive the call.
        let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
        opts.data_in = self.frame.as_ptr().cast();
        opts.data_size_in = self.frame.len() as u32;
        opts.ctx_in = ctx.as_ptr().cast();
        opts.ctx_size_in = ctx.len() as u32;
        opts.repeat = count as i32;
        opts.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
        // SAFETY: valid program fd and opts.
        let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(self.prog().as_fd().as_raw_fd(), &mut opts) };
        if rc < 0 {
            let err = std::io::Error::from_raw_os_error(-rc);
            if -rc == libc::EINVAL {
                bail!("live-frame BPF_PROG_TEST_RUN refused ({err}): the kernel needs BPF_F_TEST_XDP_LIVE_FRAMES (Linux 5.18+)");
            }
            bail!("live-frame BPF_PROG_TEST_RUN failed: {err}");
        }
        Ok(())
    }
}

/// Reads and steers a running generator from any thread.
pub struct GenControl {
    state: MapHandle,
    ctl: MapHandle,
}

impl GenControl {
    /// Frames sent (returned `XDP_TX`) so far, summed over CPUs.
    pub fn sent(&self) -> Result<u64> {
        Ok(sum_percpu::<1>(&self.state, 0)?[0])
    }

    /// Sets the rate per generating CPU (0: as fast as possible); the
    /// running program sees it on its next frame.
    pub fn set_rate(&self, pps: u64) -> Result<()> {
        self.ctl.update(&0u32.to_ne_bytes(), &pps.to_ne_bytes(), MapFlags::ANY).context("setting the generator's rate")
    }
}
