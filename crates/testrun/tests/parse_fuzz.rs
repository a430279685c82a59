//! Differential fuzzing of the one BPF parser (`bpf/include/xnf/parse.h`):
//! a million frames, valid and mutated, each parsed by the program and read
//! by the kernel's rules (`xnf_testrun::kernel`), field by field.

use xnf_testrun::frames::{frame, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::kernel::view;
use xnf_testrun::parse_probe::{expected, ParseProbe};

#[test]
fn the_parser_reads_every_frame_as_the_kernel_does() {
    let probe = ParseProbe::load().expect("loading the parse probe (run as root)");
    let w = World {
        macs: vec![xnf_packet::MacAddr([2, 0, 0, 0, 0, 2])],
        addrs: ["198.18.0.1", "198.18.16.5", "2001:db8::1", "2001:db8:16::5"].iter().map(|a| a.parse().unwrap()).collect(),
        vids: vec![0, 100, 200],
        ports: vec![53, 5000, 5001],
    };
    Fuzz::from_env("parser", DEFAULT_FRAMES).run(|rng| {
        let f = frame(rng, &w);
        let got = probe.parse(&f);
        let want = expected(&f, &view(&f));
        let verdict = match got {
            Err(e) => Err(format!("{e:#}")),
            Ok(got) if got != want => Err(format!("parser found {got:?}\n    kernel rules say {want:?}")),
            Ok(_) => Ok(()),
        };
        (f, verdict)
    });
}
