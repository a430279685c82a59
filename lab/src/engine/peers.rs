//! Peers: forwarders from outside xnf (xdp-tools' xdp-forward, or anything
//! a user can attach and detach with two commands) measured as variants of
//! an experiment, on the same topology and in the same run as xnf.
//!
//! A peer is a name and two shell commands with placeholders — `{ns}`
//! (dut's namespace), `{in}` and `{out}` (dut's ingress and egress). Both
//! run in dut's network namespace with nothing else switched ([`run_in_net`]),
//! the attach command when the variant's run begins, the detach command
//! when it ends: through [`PeerGuard`], also when the run fails, and through
//! [`detach_pending`] when the lab is interrupted.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use xnf_core::xdp::XdpMode;
use xnf_netns::Netns;

/// Runs `program args` in the network namespace at `ns` (a /run/netns
/// file) with only the network namespace switched (`nsenter --net`): tools
/// that keep maps pinned in bpffs between commands (xdp-filter, libxdp's
/// dispatcher) need the host's /sys, and under `ip netns exec` every
/// command gets a private one whose pins vanish with it. The exit status is
/// the caller's to check ([`last_line`] for the message).
pub fn run_in_net<S: AsRef<OsStr>>(ns: &Path, program: impl AsRef<OsStr>, args: &[S]) -> Result<Output> {
    Command::new("nsenter").arg(format!("--net={}", ns.display())).arg(program).args(args).output().context("running nsenter (util-linux)")
}

/// The last non-empty line a command wrote to stderr (its error, as a rule).
pub fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines().rev().map(str::trim).find(|l| !l.is_empty()).unwrap_or("no message on stderr").to_string()
}

/// The placeholders a peer's commands may use.
pub const PLACEHOLDERS: [&str; 4] = ["ns", "in", "out", "mode"];

/// The built-in peers: xdp-tools' xdp-forward in its two FIB modes. The
/// binary comes from scripts/peers.sh (or `--xdp-forward PATH`).
pub const BUILT_IN: [(&str, &str); 2] = [("xdp-forward", "full"), ("xdp-forward-direct", "direct")];

/// The variable naming the folder the peer tools are built into, for
/// scripts/peers.sh (its PREFIX) and the lab alike.
pub const PEERS_VAR: &str = "XNF_PEERS";

/// Where scripts/peers.sh builds the peer tools when `XNF_PEERS` is unset.
pub const DEFAULT_PEERS: &str = "/opt/xnf/peers";

/// The peers' folder: `$XNF_PEERS`, else [`DEFAULT_PEERS`], as
/// scripts/peers.sh decides it.
pub fn folder() -> PathBuf {
    std::env::var_os(PEERS_VAR).filter(|v| !v.is_empty()).map_or_else(|| PathBuf::from(DEFAULT_PEERS), PathBuf::from)
}

/// Peer tool `name`'s binary: `given` (its `flag` on the command line),
/// else the one scripts/peers.sh built in [`folder`]; one line saying how
/// to get it when it is not there.
pub fn binary(name: &str, flag: &str, given: Option<&Path>) -> Result<PathBuf> {
    let path = given.map_or_else(|| folder().join("sbin").join(name), Path::to_path_buf);
    ensure!(
        path.is_file(),
        "{name}: {} not found: run scripts/peers.sh (it builds into ${PEERS_VAR}, default {DEFAULT_PEERS}) or give {flag} PATH",
        path.display()
    );
    Ok(path)
}

/// A forwarder from outside xnf: a variant name and its two commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Peer {
    pub name: String,
    pub attach: String,
    pub detach: String,
}

impl Peer {
    /// A `--peer` definition: `NAME=ATTACH;DETACH`. The name is a variant
    /// name (lower-case letters, digits and dashes); each command is checked
    /// for placeholders now, so a typo fails before anything is built.
    pub fn parse(def: &str) -> Result<Peer, String> {
        let usage = "(--peer 'NAME=ATTACH;DETACH', e.g. 'fwd=my-fwd load {in} {out};my-fwd unload {in} {out}')";
        let (name, cmds) = def.split_once('=').ok_or_else(|| format!("`{def}`: no `=` after the name {usage}"))?;
        let name = name.trim();
        let mut parts = cmds.split(';');
        let (attach, detach) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(d), None) => (a.trim(), d.trim()),
            (_, None, _) => return Err(format!("peer `{name}`: no `;` between the attach and the detach command {usage}")),
            _ => return Err(format!("peer `{name}`: more than one `;` (join commands with && inside one command, or put them in a script)")),
        };
        let valid = !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid {
            return Err(format!("peer name `{name}`: use lower-case letters, digits and dashes, starting with a letter {usage}"));
        }
        for (what, cmd) in [("attach", attach), ("detach", detach)] {
            if cmd.is_empty() {
                return Err(format!("peer `{name}`: the {what} command is empty {usage}"));
            }
            fill(cmd, &|_| String::new()).map_err(|e| format!("peer `{name}`: {what} command: {e}"))?;
        }
        Ok(Peer { name: name.to_string(), attach: attach.to_string(), detach: detach.to_string() })
    }

    /// The built-in peer `name` ([`BUILT_IN`]) with xdp-forward at `bin`,
    /// or None if there is no such built-in.
    pub fn built_in(name: &str, bin: &Path) -> Option<Peer> {
        Self::built_in_on(name, bin, &[])
    }

    /// The same, loaded on `more` of dut's interfaces besides ingress and
    /// egress (xdp-forward redirects only to interfaces it is loaded on).
    pub fn built_in_on(name: &str, bin: &Path, more: &[&str]) -> Option<Peer> {
        let (_, fib) = BUILT_IN.iter().find(|(n, _)| *n == name)?;
        // Braces in a path or a name are theirs, not placeholders.
        let literal = |s: &str| quote(s).replace('{', "{{").replace('}', "}}");
        let bin = literal(&bin.to_string_lossy());
        let ifaces: String = ["{in}".to_string(), "{out}".to_string()].into_iter().chain(more.iter().map(|m| literal(m))).collect::<Vec<_>>().join(" ");
        Some(Peer {
            name: name.to_string(),
            attach: format!("{bin} load --fwd-mode fib --fib-mode {fib} --xdp-mode {{mode}} {ifaces}"),
            detach: format!("{bin} unload {ifaces}"),
        })
    }

    /// Its commands for dut `ns` with ingress `din` and egress `dout`.
    fn commands(&self, ns: &str, din: &str, dout: &str, mode: XdpMode) -> Result<(String, String)> {
        let value = |p: &str| {
            quote(match p {
                "ns" => ns,
                "in" => din,
                "mode" => mode.name(),
                _ => dout,
            })
        };
        let attach = fill(&self.attach, &value).map_err(anyhow::Error::msg)?;
        Ok((attach, fill(&self.detach, &value).map_err(anyhow::Error::msg)?))
    }
}

/// xdp-forward's binary ([`binary`]).
pub fn xdp_forward_binary(given: Option<&Path>) -> Result<PathBuf> {
    binary("xdp-forward", "--xdp-forward", given)
}

/// `template` with each `{name}` replaced by `value(name)`; `{{` and `}}`
/// stand for braces (a shell's `${VAR}` is written `${{VAR}}`).
fn fill(template: &str, value: &dyn Fn(&str) -> String) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        if tail.starts_with('}') {
            return Err("a `}` without its `{` (write `}}` for a brace)".into());
        }
        let end = tail.find('}').ok_or("a `{` without its `}` (write `{{` for a brace)")?;
        let name = &tail[1..end];
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!("unknown placeholder {{{name}}} (there are {{ns}}, {{in}}, {{out}} and {{mode}}; write {{{{ and }}}} for braces)"));
        }
        out.push_str(&value(name));
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `s` as one shell word.
fn quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A detach command not yet run: the interrupt handler runs what is left.
struct Pending {
    id: u64,
    peer: String,
    ns: PathBuf,
    command: String,
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn pending() -> std::sync::MutexGuard<'static, Vec<Pending>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `command` with `sh -c` in the namespace at `ns`; an error quoting
/// it and the last line of its stderr if it fails.
fn shell(ns: &Path, peer: &str, what: &str, command: &str) -> Result<()> {
    let out = run_in_net(ns, "sh", &["-c", command])?;
    if !out.status.success() {
        bail!("peer {peer}: {what} command `{command}` failed ({}): {}", out.status, last_line(&out.stderr));
    }
    Ok(())
}

/// A peer attached on dut; its detach command runs when dropped (or by
/// [`PeerGuard::detach`], which reports a failure).
pub struct PeerGuard {
    id: u64,
}

impl PeerGuard {
    /// Runs `peer`'s attach command in `ns` for ingress `din` and egress
    /// `dout`. If it fails, the detach command runs too (what the attach
    /// did half-way is undone; its own failure is expected then and not
    /// reported) and the error quotes the attach command.
    pub fn attach(peer: &Peer, ns: &Netns, din: &str, dout: &str) -> Result<PeerGuard> {
        Self::attach_in(peer, ns, din, dout, XdpMode::Native)
    }

    /// [`attach`](Self::attach) with `{mode}` standing for `mode`'s name
    /// (`native`, `skb`: xdp-forward's and ip's words for them).
    pub fn attach_in(peer: &Peer, ns: &Netns, din: &str, dout: &str, mode: XdpMode) -> Result<PeerGuard> {
        let (attach, detach) = peer.commands(ns.name(), din, dout, mode)?;
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Registered first: an interrupt during the attach detaches too.
        pending().push(Pending { id, peer: peer.name.clone(), ns: ns.path(), command: detach });
        let guard = PeerGuard { id };
        if let Err(e) = shell(&ns.path(), &peer.name, "attach", &attach) {
            let _ = guard.take().map(|p| shell(&p.ns, &p.peer, "detach", &p.command));
            return Err(e);
        }
        Ok(guard)
    }

    /// Runs the detach command now; its failure is the error.
    pub fn detach(self) -> Result<()> {
        match self.take() {
            Some(p) => shell(&p.ns, &p.peer, "detach", &p.command),
            None => Ok(()),
        }
    }

    /// Its pending detach, unless already taken (run, or by the interrupt).
    fn take(&self) -> Option<Pending> {
        let mut all = pending();
        let i = all.iter().position(|p| p.id == self.id)?;
        Some(all.remove(i))
    }
}

impl Drop for PeerGuard {
    fn drop(&mut self) {
        if let Some(p) = self.take() {
            if let Err(e) = shell(&p.ns, &p.peer, "detach", &p.command) {
                eprintln!("xnf lab: {e:#}");
            }
        }
    }
}

/// Runs every detach command still pending: on Ctrl-C / SIGTERM, before the
/// namespaces go — whatever a peer keeps outside them (pins in bpffs, a
/// daemon) would otherwise outlive the lab.
pub fn detach_pending() {
    let all = std::mem::take(&mut *pending());
    for p in all {
        if let Err(e) = shell(&p.ns, &p.peer, "detach", &p.command) {
            eprintln!("xnf lab: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_parse_into_a_name_and_two_commands() {
        let p = Peer::parse("my-fwd = fwd load {in} {out} && echo ${{HOME}} ; fwd unload {in} {out}").unwrap();
        assert_eq!((p.name.as_str(), p.attach.as_str(), p.detach.as_str()), ("my-fwd", "fwd load {in} {out} && echo ${{HOME}}", "fwd unload {in} {out}"));
        let (a, d) = p.commands("xnf-1-0-dut", "xnfin", "xnf out", XdpMode::Native).unwrap();
        assert_eq!(a, "fwd load xnfin 'xnf out' && echo ${HOME}");
        assert_eq!(d, "fwd unload xnfin 'xnf out'");
        let (a, _) = Peer::parse("n=echo {ns};true").unwrap().commands("xnf-1-0-dut", "i", "o", XdpMode::Native).unwrap();
        assert_eq!(a, "echo xnf-1-0-dut");
    }

    #[test]
    fn bad_definitions_are_refused_with_one_line() {
        for (def, want) in [
            ("fwd load {in};unload", "no `=`"),
            ("fwd=load {in}", "no `;`"),
            ("fwd=a;b;c", "more than one `;`"),
            ("=a;b", "peer name ``"),
            ("Fwd=a;b", "peer name `Fwd`"),
            ("f,w=a;b", "peer name `f,w`"),
            ("9f=a;b", "peer name `9f`"),
            ("fwd= ;b", "attach command is empty"),
            ("fwd=a;  ", "detach command is empty"),
            ("fwd=load {dev};b", "unknown placeholder {dev}"),
            ("fwd=a;unload {IN}", "detach command: unknown placeholder {IN}"),
            ("fwd=echo ${HOME};b", "unknown placeholder {HOME}"),
            ("fwd=load {in;b", "without its `}`"),
            ("fwd=a } b;b", "without its `{`"),
        ] {
            let e = Peer::parse(def).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{def}: {e}");
        }
    }

    #[test]
    fn built_in_peers_are_xdp_forward_in_both_fib_modes() {
        let p = Peer::built_in("xdp-forward-direct", Path::new("/opt/x {y}/xdp-forward")).unwrap();
        let (a, d) = p.commands("ns", "xnfin", "xnfout", XdpMode::Native).unwrap();
        assert!(p.commands("ns", "xnfin", "xnfout", XdpMode::Skb).unwrap().0.contains("--xdp-mode skb "));
        assert_eq!(a, "'/opt/x {y}/xdp-forward' load --fwd-mode fib --fib-mode direct --xdp-mode native xnfin xnfout");
        assert_eq!(d, "'/opt/x {y}/xdp-forward' unload xnfin xnfout");
        assert!(Peer::built_in("xdp-forward", Path::new("/x")).unwrap().attach.contains("--fib-mode full"));
        assert!(Peer::built_in("xdp-filter", Path::new("/x")).is_none());
        let p = Peer::built_in_on("xdp-forward", Path::new("/x"), &["dut-peer"]).unwrap();
        assert!(p.attach.ends_with(" {in} {out} dut-peer") && p.detach.ends_with("unload {in} {out} dut-peer"), "{p:?}");
        let e = xdp_forward_binary(Some(Path::new("/nonexistent/xdp-forward"))).unwrap_err().to_string();
        assert!(e.contains("scripts/peers.sh") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn words_are_quoted_for_the_shell_only_when_needed() {
        assert_eq!(quote("xnfin"), "xnfin");
        assert_eq!(quote("/opt/xnf/peers/sbin/xdp-forward"), "/opt/xnf/peers/sbin/xdp-forward");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }
}
