//! `xnf lab` leaves nothing behind, also when interrupted.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("xnf-{pid}-")))
        .map(String::from)
        .collect()
}

#[test]
fn ctrl_c_removes_the_lab_topology() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xnf"))
        .args(["lab", "router", "--runs", "1", "--seconds", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting xnf lab router");
    let pid = child.id();
    let t0 = Instant::now();
    while namespaces_of(pid).len() < 3 {
        assert!(t0.elapsed() < Duration::from_secs(20), "the lab never built its namespaces");
        assert!(child.try_wait().unwrap().is_none(), "the lab exited early");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2)); // traffic is flowing
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "exit status after Ctrl-C");
    assert!(namespaces_of(pid).is_empty(), "namespaces left: {:?}", namespaces_of(pid));
}

#[test]
fn bad_lab_options_fail_at_once_with_one_line() {
    for (args, want) in [
        (&["--size", "10"][..], "--size must be"),
        (&["--size", "2000"][..], "--size must be"),
        (&["--ipv6", "--size", "64"][..], "at least 66"),
        (&["--flows", "70000"][..], "--flows must be"),
        (&["--flows", "0"][..], "--flows must be"),
        (&["--runs", "0"][..], "--runs must be"),
        (&["--seconds", "0"][..], "--seconds must be"),
        (&["--cpu", "999"][..], "does not exist"),
        (&["--zero-loss", "100"][..], "tolerance"),
        (&["--size", "-5"][..], "-5"),
        (&["--frobnicate"][..], "--frobnicate"),
    ] {
        let child = Command::new(env!("CARGO_BIN_EXE_xnf"))
            .args(["lab", "router"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(namespaces_of(pid).is_empty(), "{args:?} left namespaces");
    }
}
