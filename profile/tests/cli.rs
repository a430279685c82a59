//! `xnf profile` as a user runs it: bad input is one line naming what is
//! wrong (an unknown namespace, a CPU out of range, no permission); a
//! short watch prints the stage table and writes JSON that reads back.

use std::process::{Command, Output};

use xnf_testrun::cli::xnf_bin;

fn profile(args: &[&str]) -> Output {
    Command::new(xnf_bin()).arg("profile").args(args).output().expect("running xnf")
}

fn one_line_error(out: &Output, want: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(want), "{err}");
}

#[test]
fn bad_input_is_one_line() {
    one_line_error(&profile(&["--netns", "xnf-no-such-namespace"]), "--netns xnf-no-such-namespace: no such network namespace");
    one_line_error(&profile(&["--cpus", "64"]), "--cpus 64: CPU 64 out of range");
    one_line_error(&profile(&["--cpus", "a-b"]), "not a CPU or range");
    one_line_error(&profile(&["--flame", "/tmp/x.svg"]), "--flame needs --stack");
    one_line_error(&profile(&["--seconds", "0"]), "--seconds 0");
}

#[test]
fn without_privileges_it_says_to_run_as_root() {
    // nobody, no capabilities: BPF and perf events are refused.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(xnf_bin())
        .args(["profile", "--seconds", "1", "--stack"])
        .output()
        .expect("running setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("root"), "{err}");
}

#[test]
fn a_short_watch_prints_the_table_and_writes_json() {
    let json = std::env::temp_dir().join(format!("xnf-profile-{}.json", std::process::id()));
    let out = profile(&["--seconds", "0.5", "--json", json.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for want in ["NET_RX softirq", "ip-rcv", "packets from netif_receive_skb", "lost:", "measured with:"] {
        assert!(stdout.contains(want), "{want}: {stdout}");
    }
    let p: xnf_profile::Profile = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert!(p.seconds >= 0.5 && !p.cpus.is_empty() && p.stages.len() == 7, "{p:?}");
}
