//! Differential fuzzing of the two trivial programs against their
//! contracts: `pass.bpf.c` hands every frame to the kernel (XDP_PASS) and
//! `reflect.bpf.c` sends every frame back out (XDP_TX), both unchanged, a
//! million frames of every kind between them (valid, mutated, cut short,
//! with trailers, random bytes).

use xnf_pass::{PassProgram, ReflectProgram};
use xnf_testrun::frames::{frame, hex, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

/// Neither program looks at a device: the test runs without one.
const NO_DEV: XdpContext = XdpContext { ingress_ifindex: 0, rx_queue_index: 0 };

#[test]
fn pass_and_reflect_leave_every_frame_unchanged_with_their_verdict() {
    let pass = PassProgram::load().expect("loading pass (run as root)");
    let reflect = ReflectProgram::load().expect("loading reflect");
    let world = World::default();
    Fuzz::from_env("pass and reflect", DEFAULT_FRAMES).run(|rng| {
        let (name, prog, want) = if rng.bool() { ("pass", pass.prog(), Verdict::Pass) } else { ("reflect", reflect.prog(), Verdict::Tx) };
        let input = frame(rng, &world);
        let verdict = match run_xdp(prog, &input, NO_DEV) {
            Err(e) => Err(format!("{name}: test run failed: {e:#}")),
            Ok(r) if r.verdict != want => Err(format!("{name}: {} instead of {}", r.verdict.name(), want.name())),
            Ok(r) if r.frame != input => Err(format!("{name}: changed the frame to {}", hex(&r.frame))),
            Ok(_) => Ok(()),
        };
        (input, verdict)
    });
}
