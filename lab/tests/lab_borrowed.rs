//! A topology over interfaces that exist before the lab (a veth pair made
//! beforehand, standing in for two NIC ports): `xnf lab router` runs over
//! them and gives them back bit for bit — `ip -d -j link/addr/route`,
//! `ethtool -l/-k/-g/-c` and their sysctls as before — after a run, after
//! Ctrl-C, and after kill -9 (the next run gives them back).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xnf_netns::{ethtool::Offload, Netns};
use xnf_testrun::cli::{namespaces_of, xnf_bin, TempFiles};

const A: &str = "xnfpa";
const B: &str = "xnfpb";

/// The pair, configured as an operator might have left it: queues, MTU,
/// addresses, a route, an offload changed, a sysctl changed.
fn made_beforehand() -> Netns {
    let ns = Netns::new("pre").unwrap();
    xnf_netns::veth(&ns, A, &ns, B, Some(2)).unwrap();
    for cmd in [
        "link set dev xnfpa mtu 1400 up",
        "link set dev xnfpb up",
        "addr add 198.18.50.1/24 dev xnfpa",
        "addr add 2001:db8:50::1/64 dev xnfpa nodad",
        "addr add 198.18.51.1/24 dev xnfpb",
        "route add 198.18.60.0/24 via 198.18.50.2 dev xnfpa metric 7",
    ] {
        ns.ip(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
    ns.run(|| {
        xnf_netns::devsettings::DevSettings::set_queues(A, 1).unwrap();
        xnf_netns::ethtool::set_offload(B, Offload::Gro, true).unwrap();
        xnf_netns::ethtool::set_offload(A, Offload::TxChecksum, false).unwrap();
    })
    .unwrap();
    ns.sysctl_set("net.ipv4.conf.xnfpa.rp_filter", "2").unwrap();
    ns
}

/// Everything compared, as the tools print it.
fn state(ns: &Netns) -> String {
    let mut out = String::new();
    for dev in [A, B] {
        for args in [
            vec!["-d", "-j", "link", "show", "dev", dev],
            vec!["-j", "addr", "show", "dev", dev],
            vec!["-4", "-j", "route", "show", "table", "all", "dev", dev],
            vec!["-6", "-j", "route", "show", "table", "all", "dev", dev],
        ] {
            out += &String::from_utf8_lossy(&ns.ip(&args).unwrap().stdout);
        }
        for flag in ["-l", "-k", "-g", "-c"] {
            let o = ns.command("ethtool").args([flag, dev]).output().expect("running ethtool (scripts/deps.sh test installs it)");
            out += &format!("ethtool {flag}: {}{}", String::from_utf8_lossy(&o.stdout), o.status);
        }
        let sysctl =
            ns.command("sh").args(["-c", &format!("grep -r . /proc/sys/net/ipv4/conf/{dev} /proc/sys/net/ipv6/conf/{dev} 2>/dev/null")]).output().unwrap();
        out += &String::from_utf8_lossy(&sysctl.stdout);
    }
    out
}

/// Polls (5 s) until the pair is as it was: DAD and the link state take a
/// moment after the move back.
fn assert_given_back(ns: &Netns, before: &str, when: &str, said: &str) {
    let t0 = Instant::now();
    let mut now = state(ns);
    while now != before && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
        now = state(ns);
    }
    if now != before {
        let diff: Vec<String> = before.lines().zip(now.lines()).filter(|(a, b)| a != b).map(|(a, b)| format!("before: {a}\n after: {b}")).collect();
        panic!("{when}: the interfaces differ from before the lab:\n{}\nthe lab said:\n{said}", diff.join("\n"));
    }
}

/// The built-in line, its first link over the pair in `ns`.
fn topology(files: &TempFiles, ns: &Netns) -> String {
    let out = Command::new(xnf_bin()).args(["lab", "up", "--print", "line"]).output().unwrap();
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    let borrowed = line.replacen("b = \"dut:in\"\n", &format!("b = \"dut:in\"\na_existing = \"{0}:{A}\"\nb_existing = \"{0}:{B}\"\n", ns.name()), 1);
    assert_ne!(borrowed, line, "the line topology's first link");
    files.write("borrowed.toml", &borrowed)
}

fn lab(args: &[&str], topo: &str) -> Command {
    let mut c = Command::new(xnf_bin());
    c.args(["lab", "router", "--topology", topo, "--warmup", "0.2"]).args(args);
    c
}

/// Waits until the pair has left `ns` for the lab's namespaces and traffic flows.
fn wait_borrowed(ns: &Netns, child: &mut std::process::Child) {
    let t0 = Instant::now();
    while ns.ip(&["link", "show", "dev", A]).is_ok() || namespaces_of(child.id()).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(20), "the lab never took the pair");
        assert!(child.try_wait().unwrap().is_none(), "the lab exited before taking the pair");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
}

#[test]
fn existing_interfaces_carry_the_run_and_are_given_back_bit_for_bit() {
    let ns = made_beforehand();
    let files = TempFiles::new("borrowed");
    let topo = topology(&files, &ns);
    let before = state(&ns);
    let out = lab(&["--runs", "1", "--seconds", "0.5", "--variants", "kernel,xnf"], &topo).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xnf lab router over the pair: {said}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let xnf = stdout.lines().find(|l| l.starts_with("xnf ") && l.contains(" max ")).unwrap_or_else(|| panic!("no xnf sample: {stdout}"));
    let mpps: f64 = xnf.split_whitespace().nth(8).unwrap().parse().unwrap();
    assert!(mpps > 0.01, "xnf forwarded nothing over the pair: {xnf}");
    assert_given_back(&ns, &before, "after a run", &said);
}

#[test]
fn ctrl_c_and_kill_9_give_the_interfaces_back() {
    let ns = made_beforehand();
    let files = TempFiles::new("borrowed-int");
    let topo = topology(&files, &ns);
    let before = state(&ns);
    let mut child = lab(&["--runs", "1", "--seconds", "30"], &topo).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    wait_borrowed(&ns, &mut child);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "exit status after Ctrl-C: {said}");
    assert_given_back(&ns, &before, "after Ctrl-C", &said);

    // kill -9: the namespaces and the records stay; the next run gives the
    // pair back before it removes them (and then borrows it itself).
    let mut child = lab(&["--runs", "1", "--seconds", "30"], &topo).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_borrowed(&ns, &mut child);
    let killed = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(ns.ip(&["link", "show", "dev", A]).is_err(), "killed: the pair is still in the lab's namespace");
    let out = lab(&["--runs", "1", "--seconds", "0.3", "--variants", "kernel"], &topo).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains(&format!("gave back {}:{A}, borrowed by a lab run that was killed", ns.name())), "{said}");
    assert_given_back(&ns, &before, "after kill -9 and the next run", &said);
    for dev in ["xnfgen", "xnfin"] {
        let record = format!("/run/xnf/lab-borrowed/{killed}-{dev}.json");
        assert!(!std::path::Path::new(&record).exists(), "{record}: given back, yet still recorded");
    }
}

#[test]
fn an_interface_with_an_xdp_program_is_refused_before_anything_changes() {
    let ns = made_beforehand();
    let files = TempFiles::new("borrowed-xdp");
    let topo = topology(&files, &ns);
    let _pass = xnf_lab::engine::LabAttachment::pass(&ns, B).unwrap();
    let before = state(&ns);
    let out = lab(&["--runs", "1", "--seconds", "0.3"], &topo).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    let error: Vec<&str> = said.lines().filter(|l| l.contains("error")).collect();
    assert!(!out.status.success() && error.len() == 1, "{said}");
    assert!(error[0].contains(&format!("{}:{B} has an XDP program attached (\"xnf_pass\" id ", ns.name())) && error[0].contains("xdp off"), "{said}");
    assert_eq!(state(&ns), before, "refused, yet changed");
}

#[test]
fn an_interface_named_by_two_links_is_refused_before_anything_changes() {
    let ns = made_beforehand();
    let files = TempFiles::new("borrowed-twice");
    let topo = topology(&files, &ns);
    let text = std::fs::read_to_string(&topo).unwrap();
    let twice = text.replacen("b = \"sink:sink\"\n", &format!("b = \"sink:sink\"\na_existing = \"{0}:{A}\"\nb_existing = \"xnfnothere\"\n", ns.name()), 1);
    assert_ne!(twice, text, "the line's second link");
    let topo = files.write("twice.toml", &twice);
    let before = state(&ns);
    let out = lab(&["--runs", "1", "--seconds", "0.3"], &topo).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    let error: Vec<&str> = said.lines().filter(|l| l.contains("error")).collect();
    assert!(!out.status.success() && error.len() == 1, "{said}");
    assert!(error[0].contains(&format!("existing interface {}:{A} is named by two links' ends", ns.name())), "{said}");
    assert_eq!(state(&ns), before, "refused, yet changed");
}
