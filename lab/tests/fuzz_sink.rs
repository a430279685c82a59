//! Differential fuzzing of the sink (`bpf/sink.bpf.c`) against its
//! reference model: a million frames of every kind and length (up to
//! beyond the capture's snap length and the histogram's last slot) into
//! five sinks — plain, counting sizes, capturing into a roomy ring with
//! sizes, capturing into a ring that fills up, reflecting probes to a port
//! the frames often carry. For every frame: the verdict (drop; XDP_TX for
//! a probe, which the kernel's reading of the frame decides: untagged,
//! unfragmented IPv4 UDP without options, both ports inside the packet),
//! the frame unchanged (a probe's MACs, addresses and ports swapped), the
//! whole change of the counters
//! on every CPU (packets, bytes, capture_lost: only on the CPU the frame
//! arrived at), its size slot; now and then the whole histogram; and every
//! record the capture ring hands over: which frames, in order, their
//! length, CPU and first bytes.
//!
//! The model is the sink's contract (`programs/sink.rs`) and the kernel's
//! BPF ring buffer rule: a record takes 8 bytes of header plus its own
//! (8 + the bytes kept), rounded up to 8, and is refused when the ring
//! would then hold more than its size minus one (`__bpf_ringbuf_reserve`).

use std::collections::BTreeMap;

use xnf_lab::programs::sink::{CaptureReader, Captured, SinkCounter, SinkCounts, SinkOptions, SinkProgram, SIZE_SLOTS, SNAP_LEN};
use xnf_testrun::frames::{frame, hex, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::kernel::{view, Frag, Ports, L2, L3};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

const NO_DEV: XdpContext = XdpContext { ingress_ifindex: 0, rx_queue_index: 0 };
/// The BPF ring buffer's record header (BPF_RINGBUF_HDR_SZ).
const RINGBUF_HDR: u32 = 8;
/// The sink's record header: length and CPU.
const RECORD_HDR: u32 = 8;
/// Every ring is emptied before frames whose index is a multiple of this:
/// what a frame finds in the ring depends on the frames since, and a
/// failure says where to start to reproduce it.
const RING_BLOCK: u64 = 64;
/// The whole histogram is compared this often (2048 lookups).
const HISTOGRAM_EVERY: u64 = 4096;
/// Longest frame BPF_PROG_TEST_RUN takes without fragments (a page minus
/// XDP headroom and skb_shared_info), rounded down.
const MAX_TEST_FRAME: usize = 3500;

/// The port the reflecting sink turns around; the world's frames carry it often.
const PROBE_PORT: u16 = 7;

/// The reflecting sink's model: the frame it sends back, if `input` is a
/// probe as the kernel reads it.
fn reflected(input: &[u8]) -> Option<Vec<u8>> {
    let v = view(input);
    let L3::Ip(ip) = &v.l3 else { return None };
    let probe = v.l2 == L2::Untagged
        && !ip.v6
        && !ip.options
        && ip.frag == Frag::None
        && ip.proto == Some(17)
        && matches!(ip.ports, Ports::Known(_, d) if d == PROBE_PORT)
        && input.len() >= 42;
    probe.then(|| {
        let mut f = input.to_vec();
        for (a, b, n) in [(0, 6, 6), (26, 30, 4), (34, 36, 2)] {
            let (x, y) = f.split_at_mut(b);
            x[a..a + n].swap_with_slice(&mut y[..n]);
        }
        f
    })
}

/// Bytes a captured frame of `len` bytes takes in the ring.
fn ring_room(len: usize) -> u32 {
    (RINGBUF_HDR + RECORD_HDR + len.min(SNAP_LEN) as u32).div_ceil(8) * 8
}

/// The histogram slot of a frame of `len` bytes.
fn size_slot(len: usize) -> u32 {
    (len as u32).min(SIZE_SLOTS - 1)
}

struct Sink {
    name: &'static str,
    opts: SinkOptions,
    prog: SinkProgram,
    counter: SinkCounter,
    reader: Option<CaptureReader>,
    /// Reads the ring after one frame in this many (besides every block).
    read_one_in: u32,
    /// Counters per CPU after the last frame (only this test runs it).
    last: Vec<SinkCounts>,
    /// The model: histogram, records in the ring and the room they take.
    sizes: BTreeMap<u32, u64>,
    pending: Vec<Captured>,
    used: u32,
}

impl Sink {
    fn new(name: &'static str, opts: SinkOptions, read_one_in: u32) -> Sink {
        let prog = SinkProgram::load_with(opts).unwrap_or_else(|e| panic!("loading the sink {name} (run as root): {e:#}"));
        let counter = prog.counter().unwrap();
        let reader = opts.capture_ring.map(|_| counter.capture_reader().unwrap());
        let last = counter.per_cpu().unwrap();
        Sink { name, opts, prog, counter, reader, read_one_in, last, sizes: BTreeMap::new(), pending: Vec::new(), used: 0 }
    }

    /// Reads the ring and compares every record with the model's.
    fn read_ring(&mut self) -> Result<(), String> {
        let Some(reader) = &self.reader else { return Ok(()) };
        let got = reader.take().map_err(|e| format!("reading the ring: {e:#}"))?;
        let want = std::mem::take(&mut self.pending);
        self.used = 0;
        if got == want {
            return Ok(());
        }
        let show = |v: &[Captured]| {
            v.iter().map(|c| format!("{} B on CPU {}: {}", c.len, c.cpu, hex(&c.data[..c.data.len().min(32)]))).collect::<Vec<_>>().join("\n      ")
        };
        Err(format!("the ring held {} record(s):\n      {}\n    the model says {}:\n      {}", got.len(), show(&got), want.len(), show(&want)))
    }
}

/// A frame of the fuzzer's, or one longer than the capture keeps or the
/// histogram counts one by one.
fn input(rng: &mut fastrand::Rng, world: &World) -> Vec<u8> {
    if rng.u8(..100) < 90 {
        return frame(rng, world);
    }
    let len = match rng.u8(..4) {
        0 => rng.usize(SNAP_LEN - 2..SNAP_LEN + 3),
        1 => rng.usize(SIZE_SLOTS as usize - 2..SIZE_SLOTS as usize + 3),
        _ => rng.usize(1400..=MAX_TEST_FRAME),
    };
    let mut f = frame(rng, world);
    let old = f.len().min(len);
    f.resize(len, 0);
    rng.fill(&mut f[old..]);
    f
}

#[test]
fn the_sink_counts_sizes_and_captures_every_frame_as_the_model_says() {
    let cpu = xnf_testrun::pin_to_current_cpu();
    let mut sinks = [
        Sink::new("plain", SinkOptions::default(), 1),
        Sink::new("sizes", SinkOptions { count_sizes: true, ..Default::default() }, 1),
        Sink::new("capture 64 KiB + sizes", SinkOptions { capture_ring: Some(1 << 16), count_sizes: true, ..Default::default() }, 8),
        Sink::new("capture 4 KiB", SinkOptions { capture_ring: Some(4096), ..Default::default() }, 4),
        Sink::new("reflect", SinkOptions { reflect_port: Some(PROBE_PORT), ..Default::default() }, 1),
    ];
    let world = World { ports: vec![PROBE_PORT, 9], ..World::default() };
    let mut probes = 0u64;
    let fuzz = Fuzz::from_env("lab sink", DEFAULT_FRAMES);
    let mut index = fuzz.first;
    let (mut captured, mut lost) = (0u64, 0u64);
    fuzz.run(|rng| {
        let i = index;
        index += 1;
        let input = input(rng, &world);
        if i.is_multiple_of(RING_BLOCK) {
            for s in sinks.iter_mut() {
                if let Err(e) = s.read_ring() {
                    let from = i.saturating_sub(RING_BLOCK);
                    return (
                        input,
                        Err(format!(
                            "{} before this frame (the records of frames {from} on: XNF_FUZZ_FIRST={from} XNF_FUZZ_FRAMES={}): {e}",
                            s.name,
                            i - from + 1
                        )),
                    );
                }
            }
        }
        let s = &mut sinks[rng.usize(..5)];
        let got = match run_xdp(s.prog.prog(), &input, NO_DEV) {
            Ok(r) => r,
            Err(e) => return (input, Err(format!("{}: test run failed: {e:#}", s.name))),
        };
        let mut problems = Vec::new();
        let echo = s.opts.reflect_port.and_then(|_| reflected(&input));
        probes += echo.is_some() as u64;
        let (verdict, frame) = match &echo {
            Some(f) => (Verdict::Tx, f),
            None => (Verdict::Drop, &input),
        };
        if got.verdict != verdict {
            problems.push(format!("{} instead of {}", got.verdict.name(), verdict.name()));
        }
        if got.frame != *frame {
            problems.push(format!("the frame became {}; the model says {}", hex(&got.frame), hex(frame)));
        }
        // The model: the capture, if any, and whether the ring has room.
        let mut lost_here = 0;
        if let Some(ring) = s.opts.capture_ring {
            let room = ring_room(input.len());
            if s.used + room < ring {
                s.used += room;
                s.pending.push(Captured { len: input.len() as u32, cpu, data: input[..input.len().min(SNAP_LEN)].to_vec() });
                captured += 1;
            } else {
                lost_here = 1;
                lost += 1;
            }
        }
        let now = s.counter.per_cpu().unwrap();
        for (c, (after, before)) in now.iter().zip(&s.last).enumerate() {
            let delta = SinkCounts {
                packets: after.packets - before.packets,
                bytes: after.bytes - before.bytes,
                capture_lost: after.capture_lost - before.capture_lost,
                reflected: after.reflected - before.reflected,
            };
            let want = match (c as u32 == cpu, echo.is_some()) {
                (true, false) => SinkCounts { packets: 1, bytes: input.len() as u64, capture_lost: lost_here, reflected: 0 },
                (true, true) => SinkCounts { reflected: 1, ..SinkCounts::default() },
                (false, _) => SinkCounts::default(),
            };
            if delta != want {
                problems.push(format!("CPU {c}'s counters moved by {delta:?}; the model says {want:?}"));
            }
        }
        s.last = now;
        let slot = size_slot(input.len());
        if s.opts.count_sizes {
            *s.sizes.entry(slot).or_default() += 1;
        }
        let want = s.sizes.get(&slot).copied().unwrap_or(0);
        match s.counter.size_slot(slot) {
            Ok(n) if n != want => problems.push(format!("size slot {slot} holds {n}; the model says {want}")),
            Ok(_) => {}
            Err(e) => problems.push(format!("reading size slot {slot}: {e:#}")),
        }
        if i % HISTOGRAM_EVERY == HISTOGRAM_EVERY - 1 || fuzz.frames <= 64 {
            match s.counter.sizes() {
                Ok(h) if h != s.sizes => {
                    let diff: Vec<_> =
                        (0..SIZE_SLOTS).filter(|k| h.get(k) != s.sizes.get(k)).map(|k| format!("{k}: {:?} (model {:?})", h.get(&k), s.sizes.get(&k))).collect();
                    problems.push(format!("the histogram differs since frame {} at {}", i + 1 - HISTOGRAM_EVERY.min(i + 1), diff.join(", ")));
                }
                Ok(_) => {}
                Err(e) => problems.push(format!("reading the histogram: {e:#}")),
            }
        }
        if s.reader.is_some() && (rng.u32(..s.read_one_in) == 0 || fuzz.frames <= 64) {
            if let Err(e) = s.read_ring() {
                problems.push(e);
            }
        }
        let verdict = if problems.is_empty() {
            Ok(())
        } else {
            let from = i - i % RING_BLOCK;
            Err(format!("{} (the ring's state from frame {from} on: XNF_FUZZ_FIRST={from} XNF_FUZZ_FRAMES={}): {}", s.name, i - from + 1, problems.join("; ")))
        };
        (input, verdict)
    });
    for s in sinks.iter_mut() {
        s.read_ring().unwrap_or_else(|e| panic!("{} at the end: {e}", s.name));
    }
    eprintln!("fuzz lab sink: {captured} frames captured, {lost} lost to a full ring, {probes} probes turned around");
    if fuzz.frames >= DEFAULT_FRAMES {
        assert!(captured > 1000 && lost > 1000, "the capture and its losses must both be tested");
        assert!(probes > 1000, "the reflecting sink must meet probes, not only other frames");
    }
}
