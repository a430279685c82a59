//! `xnf lab ARGS...` runs the `xnf-lab` binary (beside xnf, else on PATH)
//! in place of itself, and says in one line when there is none; `xnf-lab`
//! starts xnf commands with the `xnf` beside it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use xnf_testrun::cli::{namespaces_of, TempFiles};

const NOT_INSTALLED: &str = "xnf: error: xnf lab is not installed: build it with `cargo build -p xnf-lab` or install the xnf-lab package\n";

fn xnf_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_xnf"))
}

/// The `xnf-lab` of this build, beside `xnf`.
fn lab_bin() -> PathBuf {
    let lab = xnf_bin().with_file_name("xnf-lab");
    assert!(lab.exists(), "{} is missing: build it with `cargo build -p xnf-lab` (`cargo build --workspace` does)", lab.display());
    lab
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `binary` copied alone into a fresh folder.
fn alone(binary: &Path) -> (TempFiles, PathBuf) {
    let dir = TempFiles::new("alone");
    let copy = dir.dir().join(binary.file_name().unwrap());
    std::fs::copy(binary, &copy).unwrap();
    (dir, copy)
}

fn run(bin: &Path, args: &[&str], path: &str) -> Output {
    Command::new(bin).args(args).env("PATH", path).output().unwrap()
}

#[test]
fn lab_help_is_xnf_labs() {
    lab_bin();
    let out = Command::new(xnf_bin()).args(["lab", "--help"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let help = text(&out.stdout);
    assert!(help.contains("Usage: xnf lab [OPTIONS] <COMMAND>"), "{help}");
    for experiment in ["router", "fib-change", "bgp", "chain", "filter", "lb", "gen", "up", "report"] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(&format!("{experiment} "))), "{experiment} is not listed:\n{help}");
    }
    // And `xnf --help` lists lab in one line.
    let top = text(&Command::new(xnf_bin()).arg("--help").output().unwrap().stdout);
    let line: Vec<&str> = top.lines().filter(|l| l.trim_start().starts_with("lab ")).collect();
    assert_eq!(line.len(), 1, "{top}");
    assert!(line[0].contains("generate traffic and measure"), "{}", line[0]);
}

#[test]
fn the_labs_errors_and_exit_statuses_reach_the_caller() {
    lab_bin();
    for (args, status, want) in [
        (&["lab", "router", "--size", "10"][..], 1, "xnf lab: error: --size 10: sizes must be 64..=1518"),
        (&["lab", "router", "--frobnicate"][..], 2, "'--frobnicate'"),
        (&["lab", "no-such-experiment"][..], 2, "no-such-experiment"),
        // --netns before `lab` is passed on: the lab enters it, or says why not.
        (&["--netns", "xnf-test-no-such-ns", "lab", "router"][..], 1, "xnf lab: error: no network namespace \"xnf-test-no-such-ns\""),
    ] {
        let child = Command::new(xnf_bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(namespaces_of(pid).is_empty(), "{args:?} left namespaces");
    }
}

/// The state of process `pid` from /proc: its binary, command line and
/// whether its main thread blocks SIGINT (the lab's handler is set).
fn proc_of(pid: u32) -> (String, String, bool) {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.display().to_string()).unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).map(|c| text(&c).replace('\0', " ")).unwrap_or_default();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGINT - 1)) != 0);
    (exe, cmdline, blocked)
}

#[test]
fn xnf_lab_replaces_the_process_so_ctrl_c_is_the_labs() {
    let lab = lab_bin();
    let dir = TempFiles::new("lab-exec");
    // `xnf lab report FIFO` waits in open(2) until someone writes.
    let fifo = dir.dir().join("results.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let mut child = Command::new(xnf_bin()).arg("lab").arg("report").arg(&fifo).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    let (exe, cmdline) = loop {
        let (exe, cmdline, blocked) = proc_of(pid);
        if exe.starts_with(&lab.display().to_string()) && blocked {
            break (exe, cmdline);
        }
        assert!(child.try_wait().unwrap().is_none(), "xnf lab report ended early: {}", text(&child.wait_with_output().unwrap().stderr));
        assert!(t0.elapsed() < Duration::from_secs(20), "process {pid} is still {exe:?} ({cmdline}), not xnf-lab with its handler set");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(cmdline.starts_with("xnf lab report "), "argv of the lab: {cmdline:?} ({exe})");
    // SAFETY: plain syscall on our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "exit status after SIGINT: {err}");
    assert!(err.contains("xnf lab: SIGINT received"), "{err}");
}

#[test]
fn without_xnf_lab_xnf_lab_says_how_to_get_it_in_one_line() {
    let (dir, xnf) = alone(xnf_bin());
    for args in [&["lab", "router"][..], &["lab", "--help"], &["lab"]] {
        let out = run(&xnf, args, &dir.dir().display().to_string());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out.stderr));
        assert_eq!(text(&out.stderr), NOT_INSTALLED, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
    // Not beside it but on PATH: found there.
    let target = lab_bin().parent().unwrap().display().to_string();
    let out = run(&xnf, &["lab", "--help"], &format!("{}:{target}", dir.dir().display()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("fib-change"), "{}", text(&out.stdout));
    // Man pages without the lab: xnf's own, and a note.
    let man = dir.dir().join("man");
    let out = Command::new(&xnf).arg("man").arg("--out").arg(&man).env("PATH", dir.dir()).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(man.join("xnf-router-attach.1").exists() && man.join("xnf-lab.1").exists() && !man.join("xnf-lab-router.1").exists());
    assert!(text(&out.stderr).contains("xnf lab is not installed"), "{}", text(&out.stderr));
}

#[test]
fn xnf_lab_without_xnf_beside_it_fails_in_one_line_where_it_would_start_xnf() {
    let (dir, lab) = alone(&lab_bin());
    // The router variant attaches the router, which starts `xnf router follow`.
    let child = Command::new(&lab)
        .args(["router", "--runs", "1", "--seconds", "1", "--warmup", "0", "--variants", "xnf"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let want = format!(
        "xnf lab: error: cannot start `xnf router follow`: the xnf binary is not beside this one ({} not found); build it with `cargo build -p xnf`",
        dir.dir().join("xnf").display()
    );
    assert_eq!(err.trim().lines().last(), Some(want.as_str()), "{err}");
    assert!(namespaces_of(pid).is_empty(), "left {:?}", namespaces_of(pid));
}
