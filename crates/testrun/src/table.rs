//! The packet-table runner every program's tests share. A table is a list
//! of cases (description, input frame, expected verdict, expected bytes,
//! expected counter delta); each program's test runs its cases through
//! [`run_xdp`](crate::run_xdp) and its own counters, and this module checks
//! what all of them check the same way: the verdict, the exact bytes, and
//! that a frame the program wrote carries checksums that verify on their own.

use crate::{RunResult, Verdict};

/// What a case expects the frame to look like after the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    /// Handed to the kernel or dropped untouched.
    Unchanged,
    /// Sent as these bytes (built from scratch by the test).
    Frame(Vec<u8>),
}

/// The problems of one run against its case (none: it passed). A frame the
/// program wrote must parse with valid IPv4 header and L4 checksums
/// (`xnf_packet::parse`), unless `checksummed` is false (ARP has none).
pub fn check_run(res: &RunResult, verdict: Verdict, input: &[u8], out: &Out, checksummed: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if res.verdict != verdict {
        problems.push(format!("verdict {}, want {}", res.verdict.name(), verdict.name()));
    }
    let want = match out {
        Out::Unchanged => input,
        Out::Frame(b) => b,
    };
    if res.frame != want {
        problems.push(format!("output differs:\n     got  {}\n     want {}", crate::frames::hex(&res.frame), crate::frames::hex(want)));
    }
    if matches!(out, Out::Frame(_)) && checksummed {
        match xnf_packet::parse(&res.frame) {
            Ok(p) if p.checksums_ok() => {}
            other => problems.push(format!("output checksums do not verify: {other:?}")),
        }
    }
    problems
}

/// Fails a table with one line per failed case (`failures`), or when it
/// has fewer than `min` cases: a table that shrinks tests less.
pub fn assert_table(name: &str, cases: usize, min: usize, failures: &[String]) {
    assert!(cases >= min, "the {name} table shrank to {cases} cases (at least {min})");
    assert!(failures.is_empty(), "{} of {cases} {name} cases failed:\n{}", failures.len(), failures.join("\n"));
}
