//! Other hosts over SSH: a hosts file (`--hosts FILE`) puts some of a
//! topology's namespaces on other machines — the generator and the sink
//! on a tester, as in the seeds' testbeds — while the lab runs on dut's
//! host, where every experiment's set-up, placement, knobs and profiles
//! stay as they are on one host.
//!
//! Each host is reached with the operator's own OpenSSH: their keys,
//! known_hosts and `~/.ssh/config`, in batch mode (a key that is not
//! accepted fails in one line, before anything changes), over one
//! multiplexed connection per host (`ControlMaster`). On it runs the same
//! `xnf` binary, `xnf lab host`, which does that host's steps: build its
//! part of the topology, run the generator, read counters, tear down. Its
//! steps are JSON lines on the session's standard input, answered on its
//! output ([`super::hoststeps`]); when the input ends — the lab done,
//! killed, or the connection broken — it removes everything it built and
//! gives back what it borrowed.
//!
//! Clocks are never compared across hosts. Rates are frames counted at
//! the generator and the sink (one host) over the time the generator sent,
//! stamped by that host's own clock when it was resumed and paused;
//! counters everywhere are read while the generator is paused and the
//! path has drained, so where they are read in time does not matter; dut's
//! CPU per packet is its own run time over the frames it received, both
//! read on dut's host.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

use anyhow::{bail, ensure, Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::hoststeps::{Reply, Step};
use super::topology::{split_endpoint, TopologySpec};

/// Where the multiplexed connections' sockets are (one per host and lab
/// run: OpenSSH's `%C` hash of the destination, and the lab's PID).
const CONTROL_DIR: &str = "/run/xnf/lab-ssh";

/// A hosts file: the hosts and the namespaces of the topology each runs.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HostsFile {
    #[serde(rename = "host")]
    pub hosts: Vec<HostSpec>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// A name for messages and results.
    pub name: String,
    /// The `ssh` destination: `user@host`, or a `Host` of `~/.ssh/config`.
    pub ssh: String,
    /// More `ssh` arguments, e.g. `["-p", "2222", "-i", "/root/.ssh/lab"]`.
    #[serde(default)]
    pub ssh_options: Vec<String>,
    /// The `xnf` binary there (default: `xnf` on its PATH).
    #[serde(default = "default_xnf")]
    pub xnf: String,
    /// The topology's namespaces that run there.
    pub namespaces: Vec<String>,
}

fn default_xnf() -> String {
    "xnf".into()
}

impl HostsFile {
    pub fn load(path: &Path) -> Result<HostsFile> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading the hosts file {}", path.display()))?;
        let origin = path.display().to_string();
        let file: HostsFile = toml::from_str(&text).map_err(|e| xnf_core::files::toml_error(&origin, &text, &e))?;
        ensure!(!file.hosts.is_empty(), "{origin}: name at least one [[host]]");
        let mut names = std::collections::HashSet::new();
        for h in &file.hosts {
            ensure!(!h.name.is_empty() && names.insert(&h.name), "{origin}: host names must be given and distinct (`{}`)", h.name);
            ensure!(!h.ssh.is_empty() && !h.ssh.starts_with('-'), "{origin}: host `{}`: `ssh` is a destination such as root@192.0.2.1", h.name);
            ensure!(!h.namespaces.is_empty(), "{origin}: host `{}`: list the topology's namespaces it runs", h.name);
        }
        Ok(file)
    }

    /// The host running namespace `ns` (None: the lab's own host).
    pub fn host_of(&self, ns: &str) -> Option<&HostSpec> {
        self.hosts.iter().find(|h| h.namespaces.iter().any(|n| n == ns))
    }

    /// Checks the file against the topology: every namespace named exists
    /// and runs on one host; dut runs here; a link between two hosts joins
    /// existing interfaces (a veth pair cannot span machines).
    pub fn check(&self, spec: &TopologySpec) -> Result<()> {
        for h in &self.hosts {
            for n in &h.namespaces {
                ensure!(spec.namespaces.iter().any(|s| &s.name == n), "host `{}`: the topology has no namespace `{n}`", h.name);
                let on = self.hosts.iter().filter(|o| o.namespaces.contains(n)).count();
                ensure!(on == 1, "namespace `{n}` is listed under {on} hosts: give it one");
            }
        }
        if let Some(r) = &spec.roles {
            for ep in [&r.dut_in, &r.dut_out] {
                let (ns, _) = split_endpoint(ep)?;
                if let Some(h) = self.host_of(ns) {
                    bail!("dut's namespace `{ns}` is listed under host `{}`: the lab runs on dut's host; run it there and list the other hosts", h.name);
                }
            }
        }
        for (i, l) in spec.links.iter().enumerate() {
            let (a, b) = (split_endpoint(&l.a)?.0, split_endpoint(&l.b)?.0);
            let (ha, hb) = (self.host_of(a).map(|h| &h.name), self.host_of(b).map(|h| &h.name));
            let here = "this host".to_string();
            if ha != hb && l.a_existing.is_none() {
                bail!(
                    "link {} ({} <-> {}) joins {} and {}: name the cabled interfaces with a_existing and b_existing",
                    i + 1,
                    l.a,
                    l.b,
                    ha.map_or(here.clone(), |h| format!("host `{h}`")),
                    hb.map_or(here, |h| format!("host `{h}`"))
                );
            }
        }
        Ok(())
    }
}

/// The hosts of a run, connected; cheap to clone (each built topology
/// holds them). Empty: everything on this host.
#[derive(Clone, Default)]
pub struct Hosts {
    hosts: Vec<Arc<RemoteHost>>,
    of_ns: HashMap<String, usize>,
}

impl Hosts {
    /// Connects to every host of `file` (checking keys in batch mode and
    /// that the same xnf runs there) before anything changes, here or there.
    pub fn connect(file: &HostsFile, lines: &mut dyn FnMut(&str)) -> Result<Hosts> {
        let mut me = Hosts::default();
        for (i, h) in file.hosts.iter().enumerate() {
            lines(&format!("connecting to host `{}` ({})", h.name, h.ssh));
            me.hosts.push(Arc::new(RemoteHost::connect(h)?));
            me.of_ns.extend(h.namespaces.iter().map(|n| (n.clone(), i)));
        }
        Ok(me)
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The host running namespace `ns`, if not this one.
    pub fn of(&self, ns: &str) -> Option<&Arc<RemoteHost>> {
        self.of_ns.get(ns).map(|&i| &self.hosts[i])
    }

    pub fn all(&self) -> &[Arc<RemoteHost>] {
        &self.hosts
    }

    /// The names of the namespaces on `host`.
    pub fn namespaces_of(&self, host: &RemoteHost) -> Vec<String> {
        self.of_ns.iter().filter(|(_, &i)| std::ptr::eq(&*self.hosts[i], host)).map(|(n, _)| n.clone()).collect()
    }
}

/// One host's `xnf lab host` session.
pub struct RemoteHost {
    pub name: String,
    spec: HostSpec,
    session: Mutex<Session>,
}

struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl RemoteHost {
    /// `ssh` to this host through its multiplexed connection.
    fn ssh(spec: &HostSpec) -> Command {
        let mut c = Command::new("ssh");
        c.args(["-o", "BatchMode=yes", "-o", "ControlMaster=auto", "-o", "ControlPersist=60"])
            .arg("-o")
            // One per lab run: two runs' hosts may share an address yet
            // be different machines (behind NAT; the test's namespaces).
            .arg(format!("ControlPath={CONTROL_DIR}/%C-{}", std::process::id()))
            .args(&spec.ssh_options)
            .arg(&spec.ssh);
        c
    }

    /// Opens the connection (`true` there, in batch mode: a refused key
    /// or an unknown host key fails here, in one line), then the session.
    fn connect(spec: &HostSpec) -> Result<RemoteHost> {
        std::fs::create_dir_all(CONTROL_DIR).with_context(|| format!("creating {CONTROL_DIR}"))?;
        let check = Self::ssh(spec).arg("true").stdin(Stdio::null()).stderr(Stdio::piped()).stdout(Stdio::null()).output();
        let check = check.context("running ssh (OpenSSH's client: apt install openssh-client)")?;
        if !check.status.success() {
            let why = String::from_utf8_lossy(&check.stderr).lines().rfind(|l| !l.trim().is_empty()).unwrap_or("no message").trim().to_string();
            bail!(
                "host `{}`: ssh {} failed: {why} (the lab uses your OpenSSH in batch mode: put your key in its authorized_keys and its host key in your known_hosts); nothing was changed",
                spec.name,
                spec.ssh
            );
        }
        // ssh hands the command to the remote shell as one line: the path is quoted.
        let command = format!("{} lab host", shell_quoted(&spec.xnf));
        let mut child = Self::ssh(spec).args(["--", &command]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().context("starting ssh")?;
        let session = Session { stdin: child.stdin.take(), stdout: BufReader::new(child.stdout.take().expect("piped")), child };
        let me = RemoteHost { name: spec.name.clone(), spec: spec.clone(), session: Mutex::new(session) };
        let theirs: String = me.call(&Step::Hello).with_context(|| format!("host `{}`: starting `{} lab host` there", spec.name, spec.xnf))?;
        let ours = env!("CARGO_PKG_VERSION");
        ensure!(
            theirs == ours,
            "host `{}` runs xnf {theirs} and this one {ours}: install the same version there (or name its binary with xnf = \"PATH\")",
            spec.name
        );
        Ok(me)
    }

    /// Does one step there and returns its answer.
    pub fn call<T: DeserializeOwned>(&self, step: &Step) -> Result<T> {
        let mut s = self.session.lock().map_err(|_| anyhow::anyhow!("host `{}`: session poisoned", self.name))?;
        let gone = || format!("host `{}` ({}): its `xnf lab host` ended (its messages are above)", self.name, self.spec.ssh);
        let stdin = s.stdin.as_mut().with_context(gone)?;
        let mut line = serde_json::to_string(step)?;
        line.push('\n');
        stdin.write_all(line.as_bytes()).and_then(|()| stdin.flush()).with_context(gone)?;
        let mut answer = String::new();
        ensure!(s.stdout.read_line(&mut answer).with_context(gone)? > 0, gone());
        match serde_json::from_str::<Reply>(&answer).with_context(|| format!("host `{}`: not an answer: {}", self.name, answer.trim()))? {
            Reply::Ok(v) => serde_json::from_value(v).with_context(|| format!("host `{}`: the answer to {step:?}", self.name)),
            Reply::Error(e) => bail!("host `{}`: {e}", self.name),
        }
    }
}

/// `s` as one word of a POSIX shell: as it is when plain, else in single
/// quotes (a `'` in it closed, escaped and reopened).
fn shell_quoted(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:@".contains(c)) {
        return s.into();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Drop for RemoteHost {
    /// Ends the session: the input closed, `xnf lab host` there removes
    /// what it built and exits; then the connection is closed.
    fn drop(&mut self) {
        if let Ok(s) = self.session.get_mut() {
            drop(s.stdin.take());
            let _ = s.child.wait();
        }
        let _ = Self::ssh(&self.spec).args(["-O", "exit"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Result<HostsFile> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xnf-hosts-{}-{n}.toml", std::process::id()));
        std::fs::write(&dir, text)?;
        let r = HostsFile::load(&dir);
        let _ = std::fs::remove_file(&dir);
        r
    }

    const TESTER: &str = "[[host]]\nname = \"tester\"\nssh = \"root@192.0.2.1\"\nnamespaces = [\"gen\", \"sink\"]\n";

    #[test]
    fn the_remote_binary_is_one_word_of_the_remote_shell() {
        assert_eq!(shell_quoted("/usr/sbin/xnf"), "/usr/sbin/xnf");
        assert_eq!(shell_quoted("/opt/my lab/xnf"), "'/opt/my lab/xnf'");
        assert_eq!(shell_quoted("/tmp/x;rm -rf /"), "'/tmp/x;rm -rf /'");
        assert_eq!(shell_quoted("it's"), "'it'\\''s'");
        assert_eq!(shell_quoted(""), "''");
    }

    #[test]
    fn the_file_names_its_faults() {
        let e = format!("{:#}", file(&TESTER.replace("namespaces", "namespace")).unwrap_err());
        assert!(e.contains("line") && e.contains("namespace"), "{e}");
        let h = file(TESTER).unwrap();
        assert_eq!(h.hosts[0].xnf, "xnf");
        assert_eq!(h.host_of("gen").map(|h| h.name.as_str()), Some("tester"));
        assert!(h.host_of("dut").is_none());
    }

    #[test]
    fn links_across_hosts_need_existing_interfaces_and_dut_stays_here() {
        let line = TopologySpec::load("line").unwrap();
        let e = format!("{:#}", file(TESTER).unwrap().check(&line).unwrap_err());
        assert!(e.contains("link 1") && e.contains("a_existing"), "{e}");
        let e = format!("{:#}", file(&TESTER.replace("\"sink\"", "\"dut\"")).unwrap().check(&line).unwrap_err());
        assert!(e.contains("dut's namespace `dut`"), "{e}");
        let e = format!("{:#}", file(&TESTER.replace("\"sink\"", "\"nowhere\"")).unwrap().check(&line).unwrap_err());
        assert!(e.contains("no namespace `nowhere`"), "{e}");
        let mut cabled = line.clone();
        for l in &mut cabled.links {
            (l.a_existing, l.b_existing) = (Some("xnfp0".into()), Some("xnfp1".into()));
        }
        file(TESTER).unwrap().check(&cabled).unwrap();
    }
}
