//! The sink's program (`bpf/sink.bpf.c`): count per CPU, drop; optionally
//! count per frame length and capture frames for user space to check.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, ProgramMut, RingBuffer, RingBufferBuilder};

use crate::skel::sink::types::sink_limits;
use crate::skel::sink::{SinkSkel, SinkSkelBuilder};
use xnf_core::maps::{object_storage, sum_percpu};

/// Bytes of a frame a capture keeps at most (`SINK_SNAP`).
pub const SNAP_LEN: usize = sink_limits::SINK_SNAP.0 as usize;
/// Frame lengths counted one by one (`SINK_SIZES`); longer count as the last.
pub const SIZE_SLOTS: u32 = sink_limits::SINK_SIZES.0;

/// What the sink does besides counting and dropping. The default is the
/// plain counting sink, as cheap as it gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkOptions {
    /// Copy every frame (up to [`SNAP_LEN`] bytes) into a ring buffer of
    /// this many bytes (a power of two, at least a page); frames that do not
    /// fit are counted as lost. Each takes 16 bytes + its length (rounded up
    /// to 8), so the ring should hold what arrives while user space reads.
    pub capture_ring: Option<u32>,
    /// Count frames per length.
    pub count_sizes: bool,
    /// Count the frames with an 802.1Q tag outermost, and of those the ones
    /// of this VLAN ([`SinkCounter::tags`]).
    pub count_tags: Option<u16>,
    /// Send IPv4 UDP to this port back where it came from (XDP_TX, MACs,
    /// addresses and ports swapped), counted apart from the frames it drops
    /// ([`SinkCounts::reflected`]): the echo of `xnf lab fwd-latency`'s probes.
    pub reflect_port: Option<u16>,
}

pub struct SinkProgram {
    skel: SinkSkel<'static>,
}

impl SinkProgram {
    pub fn load() -> Result<Self> {
        Self::load_with(SinkOptions::default())
    }

    pub fn load_with(opts: SinkOptions) -> Result<Self> {
        let mut open = SinkSkelBuilder::default().open(object_storage()).context("opening the sink BPF object")?;
        if let Some(bytes) = opts.capture_ring {
            ensure!(bytes.is_power_of_two() && bytes >= 4096, "capture ring of {bytes} bytes: a power of two, at least 4096");
            open.maps.ring.set_max_entries(bytes)?;
        }
        let ro = open.maps.rodata_data.as_deref_mut().context("sink has no rodata")?;
        ro.capture = opts.capture_ring.is_some() as u8;
        ro.count_sizes = opts.count_sizes as u8;
        ro.count_tags = opts.count_tags.is_some() as u8;
        ro.tag_vid = opts.count_tags.unwrap_or(0);
        ro.reflect_port = opts.reflect_port.unwrap_or(0);
        Ok(Self { skel: open.load().context("loading the sink program")? })
    }

    pub fn prog(&self) -> &ProgramMut<'static> {
        &self.skel.progs.xnf_sink
    }

    /// (packets, bytes) counted so far, summed over CPUs.
    pub fn counts(&self) -> Result<(u64, u64)> {
        let [packets, bytes] = sum_percpu::<2>(&self.skel.maps.counts, 0)?;
        Ok((packets, bytes))
    }

    /// A handle on the counters and the capture that outlives this object
    /// and may move to another thread (the program itself may not).
    pub fn counter(&self) -> Result<SinkCounter> {
        Ok(SinkCounter {
            counts: MapHandle::try_from(&self.skel.maps.counts)?,
            sizes: MapHandle::try_from(&self.skel.maps.sizes)?,
            ring: MapHandle::try_from(&self.skel.maps.ring)?,
        })
    }
}

/// One sink's counters on one CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkCounts {
    pub packets: u64,
    pub bytes: u64,
    /// Frames the capture could not keep (ring buffer full).
    pub capture_lost: u64,
    /// Probes turned around (`reflect_port`); not in `packets` or `bytes`.
    pub reflected: u64,
}

/// A frame copied by a capturing sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// The frame's length on arrival (`data` may be shorter: [`SNAP_LEN`]).
    pub len: u32,
    /// The CPU that received it (on a veth: the sender's CPU).
    pub cpu: u32,
    pub data: Vec<u8>,
}

/// Reads a sink's counters (and capture) from any thread.
pub struct SinkCounter {
    counts: MapHandle,
    sizes: MapHandle,
    ring: MapHandle,
}

impl SinkCounter {
    /// Packets counted so far, summed over CPUs.
    pub fn packets(&self) -> Result<u64> {
        Ok(sum_percpu::<1>(&self.counts, 0)?[0])
    }

    /// Of the packets counted so far (summed over CPUs), those with an
    /// 802.1Q tag outermost, and of those the ones of the VLAN given
    /// `count_tags` (0 and 0 without it).
    pub fn tags(&self) -> Result<(u64, u64)> {
        let c = sum_percpu::<6>(&self.counts, 0)?;
        Ok((c[4], c[5]))
    }

    /// Counters per CPU, indexed by CPU number.
    pub fn per_cpu(&self) -> Result<Vec<SinkCounts>> {
        let per_cpu = self.counts.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
        per_cpu
            .iter()
            .map(|v| {
                let w = |i: usize| -> Result<u64> { Ok(u64::from_ne_bytes(v[i * 8..i * 8 + 8].try_into()?)) };
                Ok(SinkCounts { packets: w(0)?, bytes: w(1)?, capture_lost: w(2)?, reflected: w(3)? })
            })
            .collect()
    }

    /// Counters summed over CPUs.
    pub fn total(&self) -> Result<SinkCounts> {
        let [packets, bytes, capture_lost, reflected] = sum_percpu::<4>(&self.counts, 0)?;
        Ok(SinkCounts { packets, bytes, capture_lost, reflected })
    }

    /// Frames per length (summed over CPUs), with `count_sizes`; lengths of
    /// [`SIZE_SLOTS`] - 1 and more are counted together under the last.
    pub fn sizes(&self) -> Result<BTreeMap<u32, u64>> {
        let mut out = BTreeMap::new();
        for len in 0..SIZE_SLOTS {
            let n = self.size_slot(len)?;
            if n > 0 {
                out.insert(len, n);
            }
        }
        Ok(out)
    }

    /// Frames counted under length `slot` (summed over CPUs), with
    /// `count_sizes`: frames of that length, or for the last slot
    /// (`SIZE_SLOTS - 1`) of that length and more.
    pub fn size_slot(&self, slot: u32) -> Result<u64> {
        Ok(sum_percpu::<1>(&self.sizes, slot)?[0])
    }

    /// Hands every captured frame to `f` as it arrives, until `done()`
    /// returns true; then reads what is left in the ring and returns.
    /// Polls every few milliseconds, so `done` is checked that often.
    pub fn read_capture(&self, done: &dyn Fn() -> bool, f: &mut dyn FnMut(Captured)) -> Result<()> {
        let reader = self.capture_reader()?;
        loop {
            let finished = done();
            reader.poll(Duration::from_millis(20))?.into_iter().for_each(&mut *f);
            if finished {
                reader.take()?.into_iter().for_each(&mut *f);
                return Ok(());
            }
        }
    }

    /// The capture, read as it comes: the ring stays open between reads.
    pub fn capture_reader(&self) -> Result<CaptureReader> {
        let got: Arc<Mutex<Records>> = Arc::default();
        let sink = got.clone();
        let on_record = move |r: &[u8]| -> i32 {
            let mut g = sink.lock().unwrap_or_else(|e| e.into_inner());
            if r.len() < 8 {
                g.bad += 1;
                return 0;
            }
            let len = u32::from_ne_bytes([r[0], r[1], r[2], r[3]]);
            let cpu = u32::from_ne_bytes([r[4], r[5], r[6], r[7]]);
            g.records.push(Captured { len, cpu, data: r[8..].to_vec() });
            0
        };
        let mut b = RingBufferBuilder::new();
        b.add(&self.ring, on_record)?;
        Ok(CaptureReader { rb: b.build().context("opening the sink's capture ring")?, got })
    }
}

#[derive(Default)]
struct Records {
    records: Vec<Captured>,
    /// Records too short to be one.
    bad: u64,
}

/// Reads a capturing sink's ring ([`SinkCounter::capture_reader`]).
pub struct CaptureReader {
    rb: RingBuffer<'static>,
    got: Arc<Mutex<Records>>,
}

impl CaptureReader {
    fn drain(&self) -> Result<Vec<Captured>> {
        let mut g = self.got.lock().unwrap_or_else(|e| e.into_inner());
        ensure!(g.bad == 0, "{} malformed capture records", g.bad);
        Ok(std::mem::take(&mut g.records))
    }

    /// The frames captured since the last read, in order, waiting up to
    /// `timeout` for the first.
    pub fn poll(&self, timeout: Duration) -> Result<Vec<Captured>> {
        self.rb.poll(timeout).context("reading the sink's capture ring")?;
        self.drain()
    }

    /// The frames captured since the last read, in order, without waiting.
    pub fn take(&self) -> Result<Vec<Captured>> {
        self.rb.consume().context("reading the sink's capture ring")?;
        self.drain()
    }
}
