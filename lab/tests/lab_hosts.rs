//! Two hosts over SSH, stood in for by two namespaces that each run
//! Debian's `openssh-server` on a management veth, with keys this test
//! makes: the tester (gen and sink) and dut's host, cabled by two veth
//! pairs made beforehand. The operator, in a third namespace, logs in to
//! dut's host and runs `xnf lab router --hosts`, which reaches the tester
//! over SSH. Checked: it forwards at the single-host result's rate (within
//! this noisy machine's noise), gives the tester's cables back, and a key
//! the tester does not accept fails in one line before anything changes.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xnf_netns::Netns;
use xnf_testrun::cli::{xnf_bin, TempFiles};

const SSHD: &str = "/usr/sbin/sshd";

/// A namespace running sshd on `addr` (killed when dropped).
struct Host {
    ns: Netns,
    addr: String,
    sshd: Child,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
    }
}

fn run(c: &mut Command) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(out.status.success(), "{c:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn keygen(files: &TempFiles, name: &str) -> String {
    let key = files.dir().join(name);
    run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"]).arg(&key));
    key.display().to_string()
}

/// sshd in `ns` on `addr`, accepting `authorized`; its host key is
/// added to `known`.
fn sshd(files: &TempFiles, ns: Netns, addr: &str, authorized: &str, known: &mut String) -> Host {
    assert!(Path::new(SSHD).exists(), "{SSHD} is missing: the hosts test needs Debian's openssh-server (scripts/deps.sh test installs it)");
    std::fs::create_dir_all("/run/sshd").unwrap(); // its privilege separation directory
    let hostkey = keygen(files, &format!("hostkey-{addr}"));
    *known += &format!("{addr} {}", std::fs::read_to_string(format!("{hostkey}.pub")).unwrap());
    let config = files.write(
        &format!("sshd-{addr}.conf"),
        &format!(
            "ListenAddress {addr}\nHostKey {hostkey}\nPidFile none\nAuthorizedKeysFile {authorized}\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        ),
    );
    let sshd = ns.command(SSHD).args(["-D", "-e", "-f", &config]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    while !String::from_utf8_lossy(&ns.exec(&["ss", "-ltn"]).unwrap().stdout).contains(&format!("{addr}:22")) {
        assert!(t0.elapsed() < Duration::from_secs(10), "sshd did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Host { ns, addr: addr.into(), sshd }
}

/// The testbed: the operator, dut's host and the tester, each pair of
/// neighbours on a management veth, and the two cables.
struct Bed {
    files: TempFiles,
    key: String,
    known: String,
    _op: Netns,
    dut: Host,
    tester: Host,
}

fn bed(name: &str) -> Bed {
    let files = TempFiles::new(name);
    let key = keygen(&files, "operator");
    let authorized = files.write("authorized_keys", &std::fs::read_to_string(format!("{key}.pub")).unwrap());
    let (op, d, t) = (Netns::new("op").unwrap(), Netns::new("hostd").unwrap(), Netns::new("hostt").unwrap());
    xnf_netns::veth(&op, "xnfm0", &d, "xnfm1", None).unwrap();
    xnf_netns::veth(&d, "xnfm2", &t, "xnfm3", None).unwrap();
    xnf_netns::veth(&t, "xnfc0", &d, "xnfc1", None).unwrap();
    xnf_netns::veth(&d, "xnfc2", &t, "xnfc3", None).unwrap();
    for (ns, dev, addr) in
        [(&op, "xnfm0", "198.18.201.1/24"), (&d, "xnfm1", "198.18.201.2/24"), (&d, "xnfm2", "198.18.200.2/24"), (&t, "xnfm3", "198.18.200.1/24")]
    {
        ns.ip(&["addr", "add", addr, "dev", dev]).unwrap();
        ns.ip(&["link", "set", dev, "up"]).unwrap();
    }
    for (ns, dev) in [(&t, "xnfc0"), (&d, "xnfc1"), (&d, "xnfc2"), (&t, "xnfc3")] {
        ns.ip(&["link", "set", dev, "up"]).unwrap();
    }
    let mut known = String::new();
    let dut = sshd(&files, d, "198.18.201.2", &authorized, &mut known);
    let tester = sshd(&files, t, "198.18.200.1", &authorized, &mut known);
    Bed { files, key, known, _op: op, dut, tester }
}

impl Bed {
    /// The line topology over the cables, and a hosts file putting gen
    /// and the sink on the tester, reached with `key`.
    fn files(&self, key: &str) -> (String, String) {
        let known = self.files.write("known_hosts", &self.known);
        let line = run(Command::new(xnf_bin()).args(["lab", "up", "--print", "line"]));
        let cabled = line.replacen("b = \"dut:in\"\n", "b = \"dut:in\"\na_existing = \"xnfc0\"\nb_existing = \"xnfc1\"\n", 1).replacen(
            "b = \"sink:sink\"\n",
            "b = \"sink:sink\"\na_existing = \"xnfc2\"\nb_existing = \"xnfc3\"\n",
            1,
        );
        let topo = self.files.write("cabled.toml", &cabled);
        let hosts = self.files.write(
            "hosts.toml",
            &format!(
                "[[host]]\nname = \"tester\"\nssh = \"root@{}\"\nssh_options = [\"-i\", \"{key}\", \"-o\", \"UserKnownHostsFile={known}\"]\n\
                 xnf = \"{}\"\nnamespaces = [\"gen\", \"sink\"]\n",
                self.tester.addr,
                self.xnf_with_a_space()
            ),
        );
        (topo, hosts)
    }

    /// The xnf binary under a path with a space, as the hosts file names
    /// it: the remote shell must get it as one word.
    fn xnf_with_a_space(&self) -> String {
        let dir = self.files.dir().join("my lab");
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("xnf");
        if !link.exists() {
            std::os::unix::fs::symlink(xnf_bin(), &link).unwrap();
        }
        link.display().to_string()
    }

    /// The operator logs in to dut's host and runs `xnf lab ARGS` there.
    fn lab_on_dut(&self, args: &str) -> std::process::Output {
        let known = self.files.write("known_hosts", &self.known);
        let remote = format!("{} lab {args}", xnf_bin().display());
        self._op
            .command("ssh")
            .args(["-o", "BatchMode=yes", "-i", &self.key, "-o", &format!("UserKnownHostsFile={known}"), &format!("root@{}", self.dut.addr), &remote])
            .output()
            .unwrap()
    }

    /// The cables' ends on the tester, as `ip` shows them.
    fn tester_cables(&self) -> String {
        cables(&self.tester.ns, &["xnfc0", "xnfc3"])
    }

    /// The cables' ends on dut's host.
    fn dut_cables(&self) -> String {
        cables(&self.dut.ns, &["xnfc1", "xnfc2"])
    }
}

/// `devs` in `ns` as `ip -d -j addr` shows them (missing: an error text).
fn cables(ns: &Netns, devs: &[&str]) -> String {
    devs.iter()
        .map(|d| match ns.ip(&["-d", "-j", "addr", "show", "dev", d]) {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => format!("{d}: {e:#}\n"),
        })
        .collect()
}

/// xnf's median Mpps received at the sink, from the summary table.
fn xnf_mpps(stdout: &str) -> f64 {
    let summary = stdout.split_once("median Mpps").unwrap_or_else(|| panic!("no summary: {stdout}")).1;
    let row = summary.lines().find(|l| l.starts_with("xnf ")).unwrap_or_else(|| panic!("no xnf summary: {stdout}"));
    row.split_whitespace().nth(6).unwrap().parse().unwrap()
}

#[test]
fn router_across_two_hosts_matches_one_host_and_gives_the_cables_back() {
    let bed = bed("hosts");
    let (topo, hosts) = bed.files(&bed.key);
    let (before, dut_before) = (bed.tester_cables(), bed.dut_cables());
    let args = "router --variants kernel,xnf --runs 2 --seconds 1 --warmup 0.3";
    let out = bed.lab_on_dut(&format!("{args} --topology {topo} --hosts {hosts}"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "xnf lab router across hosts: {said}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(" of host `tester`"), "the placement note names the tester: {stdout}");
    let across = xnf_mpps(&stdout);
    let one = run(Command::new(xnf_bin()).args(["lab"]).args(args.split(' ')));
    let single = xnf_mpps(&one);
    eprintln!("xnf: {across:.3} Mpps across hosts, {single:.3} on one host");
    assert!(across > 0.5 * single && across < 2.0 * single, "across hosts {across} Mpps, on one host {single}: not within noise");
    // The raw verdicts: xdp-tx's frames come back to gen's sink, xdp-redirect's reach the sink, both on the tester.
    let json = bed.files.dir().join("actions.json");
    let out = bed.lab_on_dut(&format!(
        "actions --variants xdp-tx,xdp-redirect --runs 1 --seconds 0.5 --warmup 0.2 --topology {topo} --hosts {hosts} --json {}",
        json.display()
    ));
    assert!(out.status.success(), "xnf lab actions across hosts: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for variant in ["xdp-tx", "xdp-redirect"] {
        let s = v["summary"].as_array().unwrap().iter().find(|s| s["variant"] == variant).unwrap_or_else(|| panic!("no {variant} summary: {v}"));
        assert!(s["median_mpps"].as_f64().unwrap() > 0.05, "{variant}: counted on the tester: {s}");
    }
    // Both hosts gave their cables back (the tester's session ended with the lab).
    let t0 = Instant::now();
    while bed.tester_cables() != before || bed.dut_cables() != dut_before {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the cables were not given back:\n{}{}\nbefore:\n{before}{dut_before}",
            bed.tester_cables(),
            bed.dut_cables()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_key_the_tester_refuses_fails_in_one_line_before_anything_changes() {
    let bed = bed("hosts-badkey");
    let stranger = keygen(&bed.files, "stranger");
    let (topo, hosts) = bed.files(&stranger);
    let (tester, dut) = (bed.tester_cables(), bed.dut_cables());
    let out = bed.lab_on_dut(&format!("router --runs 1 --seconds 0.5 --topology {topo} --hosts {hosts}"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a refused key must fail: {said}");
    let errors: Vec<&str> = said.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "one line: {said}");
    assert!(errors[0].contains("host `tester`") && errors[0].contains("Permission denied") && errors[0].contains("nothing was changed"), "{said}");
    assert_eq!(bed.tester_cables(), tester, "the tester's cables changed");
    assert_eq!(bed.dut_cables(), dut, "dut's host's cables changed");
}

/// The lab's process on dut's host (its command line names `hosts`).
fn lab_pid(hosts: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        let cmdline = std::fs::read_to_string(e.path().join("cmdline")).ok()?;
        (comm.trim() == "xnf-lab" && cmdline.contains(hosts)).then_some(pid)
    })
}

impl Bed {
    /// Starts a long `xnf lab router --hosts` on dut's host, as the
    /// operator does over ssh, and waits until it has the tester's cables;
    /// returns the operator's ssh and the lab's PID.
    fn long_run(&self, topo: &str, hosts: &str) -> (Child, i32) {
        self.lab_until_taken(&format!("router --runs 1 --seconds 30 --topology {topo} --hosts {hosts}"), hosts)
    }

    /// Starts `xnf lab ARGS` (naming the `hosts` file) on dut's host over
    /// ssh and waits until it has the tester's cables.
    fn lab_until_taken(&self, args: &str, hosts: &str) -> (Child, i32) {
        let known = self.files.write("known_hosts", &self.known);
        let remote = format!("{} lab {args}", xnf_bin().display());
        let ssh = self
            ._op
            .command("ssh")
            .args(["-o", "BatchMode=yes", "-i", &self.key, "-o", &format!("UserKnownHostsFile={known}"), &format!("root@{}", self.dut.addr), &remote])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while self.tester.ns.ip(&["link", "show", "dev", "xnfc0"]).is_ok() || lab_pid(hosts).is_none() {
            assert!(t0.elapsed() < Duration::from_secs(30), "the lab never took the tester's cables");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(1500));
        (ssh, lab_pid(hosts).expect("the lab runs"))
    }

    /// Polls (10 s) until both hosts' cables are as `before`.
    fn assert_given_back(&self, before: &(String, String), when: &str, said: &str) {
        let t0 = Instant::now();
        while (self.tester_cables(), self.dut_cables()) != *before {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "not given back {when}:\ntester {}\nwas    {}\ndut {}\nwas {}\nthe lab said:\n{said}",
                self.tester_cables(),
                before.0,
                self.dut_cables(),
                before.1
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn ctrl_c_and_kill_9_on_dut_s_host_leave_both_hosts_as_they_were() {
    let bed = bed("hosts-int");
    let (topo, hosts) = bed.files(&bed.key);
    let before = (bed.tester_cables(), bed.dut_cables());
    let (ssh, pid) = bed.long_run(&topo, &hosts);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = ssh.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "exit status after Ctrl-C: {said}");
    bed.assert_given_back(&before, "after Ctrl-C", &said);

    // kill -9: the tester's session ends with the lab's ssh, so the tester
    // gives its cables back at once; dut's host's stay in the dead lab's
    // namespaces until the next run there gives them back first.
    let (ssh, pid) = bed.long_run(&topo, &hosts);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    drop(ssh.wait_with_output().unwrap());
    // Back in the tester's namespace (compared whole below: until dut's
    // ends come back too, `ip` shows their peer's namespace differently).
    let t0 = Instant::now();
    while ["xnfc0", "xnfc3"].iter().any(|d| bed.tester.ns.ip(&["link", "show", "dev", d]).is_err()) {
        assert!(t0.elapsed() < Duration::from_secs(10), "the tester kept its cables after the lab was killed:\n{}", bed.tester_cables());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_ne!(bed.dut_cables(), before.1, "dut's host's cables are still in the killed lab's namespaces");
    let out = bed.lab_on_dut(&format!("router --variants kernel --runs 1 --seconds 0.3 --warmup 0.1 --topology {topo} --hosts {hosts}"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains("gave back xnfc1, borrowed by a lab run that was killed"), "the next run: {said}");
    bed.assert_given_back(&before, "after kill -9 and the next run", &said);
}

#[test]
fn lab_up_builds_across_hosts_until_ctrl_c() {
    let bed = bed("hosts-up");
    let (topo, hosts) = bed.files(&bed.key);
    let before = (bed.tester_cables(), bed.dut_cables());
    let (ssh, pid) = bed.lab_until_taken(&format!("up {topo} --hosts {hosts}"), &hosts);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = ssh.wait_with_output().unwrap();
    let (said, listed) = (String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    assert_eq!(out.status.code(), Some(130), "exit status after Ctrl-C: {said}");
    for ns in ["gen", "sink"] {
        assert!(listed.lines().any(|l| l.starts_with(ns) && l.contains("on host `tester`")), "{ns} listed on the tester: {listed}");
    }
    assert!(listed.lines().any(|l| l.starts_with("dut") && l.contains("xnfin xnfout")), "dut listed here: {listed}");
    bed.assert_given_back(&before, "after lab up's Ctrl-C", &said);
}
