//! Differential fuzzing of the raw-verdict program (`bpf/actions.bpf.c`)
//! against its contract (programs/actions.rs): whatever the frame (valid,
//! mutated, cut short, random bytes), every configured action gives its
//! verdict — drop, pass, TX with the MAC addresses swapped and nothing else
//! changed, redirect to a port or to a CPU with the frame unchanged — and
//! counts the frame once; the remote CPU's counter stays still (test runs
//! do not carry out redirects). A million frames over all actions.

use xnf_lab::programs::actions::{Action, ActionCounters, ActionsProgram};
use xnf_testrun::frames::{frame, hex, World};
use xnf_testrun::fuzz::{Fuzz, DEFAULT_FRAMES};
use xnf_testrun::{run_xdp, Verdict, XdpContext};

/// The program uses no device but the redirect's, found by its map.
const NO_DEV: XdpContext = XdpContext { ingress_ifindex: 0, rx_queue_index: 0 };

/// What the model says: the verdict and the frame sent.
fn model(action: Action, input: &[u8]) -> (Verdict, Vec<u8>) {
    match action {
        Action::Drop => (Verdict::Drop, input.to_vec()),
        Action::Pass => (Verdict::Pass, input.to_vec()),
        Action::Tx => {
            let mut f = input.to_vec();
            f[..6].copy_from_slice(&input[6..12]);
            f[6..12].copy_from_slice(&input[..6]);
            (Verdict::Tx, f)
        }
        Action::Redirect { .. } | Action::Cpumap { .. } => (Verdict::Redirect, input.to_vec()),
    }
}

struct Loaded {
    action: Action,
    prog: ActionsProgram,
    counters: ActionCounters,
    /// (acted, remote) after the last frame: only this test runs the program.
    last: (u64, u64),
}

#[test]
fn every_action_gives_its_verdict_and_bytes_and_counts_once() {
    let lo: u32 = std::fs::read_to_string("/sys/class/net/lo/ifindex").unwrap().trim().parse().unwrap();
    let last_cpu = std::thread::available_parallelism().map_or(1, |n| n.get() as u32) - 1;
    let actions = [Action::Drop, Action::Pass, Action::Tx, Action::Redirect { ifindex: lo }, Action::Cpumap { cpu: 0 }, Action::Cpumap { cpu: last_cpu }];
    let mut loaded: Vec<Loaded> = actions
        .iter()
        .map(|&action| {
            let prog = ActionsProgram::load(action).unwrap_or_else(|e| panic!("loading {action:?} (run as root): {e:#}"));
            let counters = prog.counters().unwrap();
            Loaded { action, prog, counters, last: (0, 0) }
        })
        .collect();
    let world = World::default();
    Fuzz::from_env("lab actions", DEFAULT_FRAMES).run(|rng| {
        let l = &mut loaded[rng.usize(..actions.len())];
        let input = frame(rng, &world);
        let (want, want_frame) = model(l.action, &input);
        let got = match run_xdp(l.prog.prog(), &input, NO_DEV) {
            Ok(r) => r,
            Err(e) => return (input, Err(format!("{:?}: test run failed: {e:#}", l.action))),
        };
        let now = (l.counters.acted().unwrap(), l.counters.remote().unwrap());
        let delta = (now.0 - l.last.0, now.1 - l.last.1);
        l.last = now;
        let mut problems = Vec::new();
        if got.verdict != want {
            problems.push(format!("{} instead of {}", got.verdict.name(), want.name()));
        }
        if delta != (1, 0) {
            problems.push(format!("counted {} here and {} remotely, not once here", delta.0, delta.1));
        }
        if got.frame != want_frame {
            problems.push(format!("sent {}\n    model {}", hex(&got.frame), hex(&want_frame)));
        }
        (input, if problems.is_empty() { Ok(()) } else { Err(format!("{:?}: {}", l.action, problems.join("; "))) })
    });
}
