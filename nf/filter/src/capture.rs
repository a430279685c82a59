//! `xnf filter capture -w FILE.pcap`: sampled dropped frames as pcap.
//!
//! The data plane writes a dropped frame's first 256 bytes to a ring buffer
//! only while a capture runs, only for the rule asked for, and at most
//! `--max-pps` frames a second (a token bucket in the program): a flood
//! cannot flood the capture, and without a capture the drop path costs one
//! map lookup more. The pcap writer is ours: the format is a 24-byte file
//! header and a 16-byte header per record (no crate needed for that).

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::attach::open_maps;
use crate::program::{RawRecord, RULE_ANY, SNAPLEN};

const LINKTYPE_ETHERNET: u32 = 1;

/// The pcap file header (microsecond timestamps, native byte order).
pub fn pcap_header(snaplen: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(24);
    h.extend(0xa1b2_c3d4u32.to_ne_bytes());
    h.extend(2u16.to_ne_bytes());
    h.extend(4u16.to_ne_bytes());
    h.extend(0i32.to_ne_bytes());
    h.extend(0u32.to_ne_bytes());
    h.extend(snaplen.to_ne_bytes());
    h.extend(LINKTYPE_ETHERNET.to_ne_bytes());
    h
}

/// One pcap record: `ts` since the epoch, the captured bytes, the frame's length.
pub fn pcap_record(ts: Duration, data: &[u8], orig_len: u32) -> Vec<u8> {
    let mut r = Vec::with_capacity(16 + data.len());
    r.extend((ts.as_secs() as u32).to_ne_bytes());
    r.extend(ts.subsec_micros().to_ne_bytes());
    r.extend((data.len() as u32).to_ne_bytes());
    r.extend(orig_len.to_ne_bytes());
    r.extend(data);
    r
}

/// Monotonic nanoseconds (the program's clock) to time since the epoch.
fn wall_offset() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let mono = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().saturating_sub(mono)
}

/// What to capture and when to stop.
pub struct CaptureOptions {
    pub rule: Option<u32>,
    pub max_pps: u64,
    pub count: Option<u64>,
    pub seconds: Option<f64>,
}

/// Captures into what `open` opens (refused, before opening, while
/// another capture runs) until the count or time is reached or `stop` is
/// set; returns the frames written. The capture is switched off on return.
pub fn capture<W: Write>(open: impl FnOnce() -> Result<W>, o: &CaptureOptions, stop: Arc<AtomicBool>) -> Result<u64> {
    anyhow::ensure!(o.max_pps > 0, "--max-pps must be at least 1");
    let maps = open_maps()?;
    // One capture at a time: two would share the ring's one reader and
    // the program's one setting, and the first to stop would stop both.
    let Some(_lock) = xnf_core::state::StateLock::try_acquire("filter-capture")? else {
        anyhow::bail!("another `xnf filter capture` is running in this network namespace; stop it first");
    };
    let mut out = open()?;
    out.write_all(&pcap_header(SNAPLEN))?;
    let offset = wall_offset();
    let written = Rc::new(RefCell::new((0u64, None::<std::io::Error>)));
    let mut builder = libbpf_rs::RingBufferBuilder::new();
    let w = written.clone();
    let out = Rc::new(RefCell::new(out));
    let o2 = out.clone();
    let limit = o.count;
    builder.add(&maps.capture_ring, move |bytes: &[u8]| {
        let rec: RawRecord = xnf_core::maps::from_bytes(bytes);
        let n = (rec.caplen as usize).min(rec.data.len());
        let r = pcap_record(offset + Duration::from_nanos(rec.ts_ns), &rec.data[..n], rec.len);
        let mut st = w.borrow_mut();
        if limit.is_some_and(|c| st.0 >= c) {
            return 0; // beyond --count: read and let go
        }
        match o2.borrow_mut().write_all(&r) {
            Ok(()) => st.0 += 1,
            Err(e) => st.1 = Some(e),
        }
        0
    })?;
    let ring = builder.build()?;
    maps.set_capture(o.rule.unwrap_or(RULE_ANY), o.max_pps)?;
    let t0 = Instant::now();
    let result = loop {
        if let Err(e) = ring.poll(Duration::from_millis(100)) {
            break Err(anyhow::Error::from(e).context("reading the capture ring"));
        }
        let st = written.borrow();
        if let Some(e) = &st.1 {
            break Err(anyhow::anyhow!("writing the capture: {e}"));
        }
        let done = o.count.is_some_and(|c| st.0 >= c) || o.seconds.is_some_and(|s| t0.elapsed().as_secs_f64() >= s) || stop.load(Ordering::Relaxed);
        if done {
            break Ok(st.0);
        }
    };
    maps.set_capture(RULE_ANY, 0)?;
    // Records already in the ring are drained, not lost.
    let _ = ring.consume();
    out.borrow_mut().flush().context("writing the capture")?;
    let n = written.borrow().0;
    result.map(|_| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_layout_is_the_classic_one() {
        let h = pcap_header(256);
        assert_eq!(h.len(), 24);
        assert_eq!(u32::from_ne_bytes(h[0..4].try_into().unwrap()), 0xa1b2c3d4);
        assert_eq!(u32::from_ne_bytes(h[20..24].try_into().unwrap()), 1);
        let r = pcap_record(Duration::new(5, 7_000), &[1, 2, 3], 60);
        assert_eq!(r.len(), 19);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 5);
        assert_eq!(u32::from_ne_bytes(r[4..8].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(r[8..12].try_into().unwrap()), 3);
        assert_eq!(u32::from_ne_bytes(r[12..16].try_into().unwrap()), 60);
    }
}
