//! The kernel's half of the `syn-cookie` action: an nftables table that
//! hands the ACKs the filter let through to the kernel's SYNPROXY.
//!
//! The filter answers SYNs with cookies itself (`syncookie.h`) and lets an
//! ACK through only with a valid cookie or a connection conntrack knows.
//! The kernel then has to complete the handshake it never saw: SYNPROXY
//! checks the cookie once more, opens the connection to the server, and
//! translates sequence numbers between the two handshakes for the life of
//! the connection. For that, per syn-cookie rule and with its addresses and
//! ports:
//!
//! - prerouting (priority raw): SYNs that reach the kernel anyway (an
//!   interface without the filter) are not tracked, so SYNPROXY answers
//!   them the same way;
//! - input and forward: packets conntrack finds invalid (an ACK of no
//!   connection it knows) or untracked go to `synproxy`, and what SYNPROXY
//!   leaves invalid is dropped;
//! - `net.netfilter.nf_conntrack_tcp_loose = 0`, or conntrack would take the
//!   lone ACK as a connection picked up midway and the server's stack would
//!   answer it with a reset. It is a setting of the network namespace: the
//!   value before is kept in the run folder and put back when the last
//!   syn-cookie rule goes.
//!
//! The table is replaced in one nft transaction, installed before a rule
//! set with syn-cookie rules goes live and removed after one without them
//! has, so no cookie ACK ever meets a kernel that does not expect it.
//! Prefix lists (`@name`) and VLAN or length fields do not translate: the
//! table then covers the rule's other fields, which is wider, never
//! narrower.

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use ipnet::IpNet;

use crate::rules::{Action, Addr, Rule, RuleSet};

/// The table's name (family inet).
pub const TABLE: &str = "xnf_filter_synproxy";
const LOOSE: &str = "/proc/sys/net/netfilter/nf_conntrack_tcp_loose";
/// The run file holding nf_conntrack_tcp_loose from before the table.
/// The setting's value before, kept in the namespace's run folder (not the
/// filter's, which goes with the filter's state: the setting is put back
/// after that).
const SAVED: &str = "filter-synproxy-loose";

/// Whether `rs` has syn-cookie rules (and so needs the table).
pub fn wanted(rs: &RuleSet) -> bool {
    rs.rules.iter().any(|r| matches!(r.action, Action::SynCookie { .. }))
}

/// A port range as nft writes it.
fn ports(field: &str, r: Option<(u16, u16)>) -> Option<String> {
    r.map(|(lo, hi)| if lo == hi { format!("tcp {field} {lo}") } else { format!("tcp {field} {lo}-{hi}") })
}

fn prefix(field: &str, a: &Option<Addr>) -> Option<(String, bool)> {
    match a {
        Some(Addr::Prefix(p)) => {
            let v6 = matches!(p, IpNet::V6(_));
            Some((format!("{} {field} {p}", if v6 { "ip6" } else { "ip" }), v6))
        }
        _ => None,
    }
}

/// The match of one rule, per family it covers: (match, MSS to offer).
fn matches(r: &Rule, mss: u16) -> Vec<(String, u16)> {
    let addrs: Vec<(String, bool)> = [prefix("saddr", &r.src), prefix("daddr", &r.dst)].into_iter().flatten().collect();
    let family = r.ipv6.or(addrs.first().map(|a| a.1));
    let tail: Vec<String> = [Some("meta l4proto tcp".to_string()), ports("sport", r.sport), ports("dport", r.dport)].into_iter().flatten().collect();
    let fams: Vec<bool> = match family {
        Some(v6) => vec![v6],
        None => vec![false, true],
    };
    fams.into_iter()
        .map(|v6| {
            let mut m = vec![format!("meta nfproto {}", if v6 { "ipv6" } else { "ipv4" })];
            m.extend(addrs.iter().map(|a| a.0.clone()));
            m.extend(tail.iter().cloned());
            (m.join(" "), if v6 { mss - 20 } else { mss })
        })
        .collect()
}

/// The nft script that replaces the table with what `rs` needs.
pub fn script(rs: &RuleSet) -> String {
    let mut pre = String::new();
    let mut check = String::new();
    for r in &rs.rules {
        let Action::SynCookie { mss } = r.action else { continue };
        for (m, mss) in matches(r, mss) {
            pre += &format!("\t\t{m} tcp flags & (fin | syn | rst | ack) == syn notrack\n");
            check += &format!("\t\t{m} ct state invalid,untracked synproxy mss {mss}\n\t\t{m} ct state invalid drop\n");
        }
    }
    let chain = |name: &str, hook: &str, prio: &str, body: &str| {
        format!("\tchain {name} {{\n\t\ttype filter hook {hook} priority {prio}; policy accept;\n{body}\t}}\n")
    };
    format!(
        "table inet {TABLE}\ndelete table inet {TABLE}\ntable inet {TABLE} {{\n{}{}{}}}\n",
        chain("prerouting", "prerouting", "raw", &pre),
        chain("input", "input", "filter - 1", &check),
        chain("forward", "forward", "filter - 1", &check)
    )
}

fn nft(script: &str) -> Result<()> {
    let mut child = match Command::new("nft").arg("-f").arg("-").stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("syn-cookie rules need nft, the kernel's SYNPROXY completes the handshake (apt install nftables)")
        }
        Err(e) => return Err(e).context("running nft"),
    };
    child.stdin.take().context("nft's input")?.write_all(script.as_bytes()).context("writing to nft")?;
    let out = child.wait_with_output().context("running nft")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!("nft refused the SYNPROXY table: {}", err.lines().find(|l| l.starts_with("Error")).unwrap_or(err.trim()));
    }
    Ok(())
}

/// Whether the table is there (false too when nft is not installed).
pub fn present() -> bool {
    Command::new("nft").args(["list", "table", "inet", TABLE]).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Makes the kernel's side what `rs` needs: the table and the setting with
/// syn-cookie rules, neither without.
pub fn converge(rs: &RuleSet) -> Result<()> {
    let saved = xnf_core::state::run_dir()?.join(SAVED);
    if wanted(rs) {
        nft(&script(rs))?;
        // The table's ct expressions have started conntrack in this
        // namespace: its settings exist now.
        let before = std::fs::read_to_string(LOOSE).with_context(|| format!("reading {LOOSE} (conntrack is needed for syn-cookie rules)"))?;
        if !saved.exists() {
            std::fs::create_dir_all(saved.parent().unwrap_or(&saved)).ok();
            std::fs::write(&saved, before.trim()).with_context(|| format!("writing {}", saved.display()))?;
        }
        std::fs::write(LOOSE, "0").with_context(|| format!("writing {LOOSE}"))?;
        return Ok(());
    }
    remove()
}

/// Removes the kernel's side (nothing to do when it is not there).
pub fn remove() -> Result<()> {
    let saved = xnf_core::state::run_dir()?.join(SAVED);
    if present() {
        nft(&format!("delete table inet {TABLE}\n"))?;
    }
    if let Ok(before) = std::fs::read_to_string(&saved) {
        std::fs::write(LOOSE, before.trim()).with_context(|| format!("writing {LOOSE}"))?;
        std::fs::remove_file(&saved).with_context(|| format!("removing {}", saved.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(text: &str) -> RuleSet {
        RuleSet::parse(text, "t.toml").unwrap()
    }

    #[test]
    fn a_rule_per_family_with_its_mss() {
        let s = script(&rs("[[rule]]\nproto = \"tcp\"\ndport = \"80-81\"\naction = \"syn-cookie\"\n"));
        assert!(s.contains("meta nfproto ipv4 meta l4proto tcp tcp dport 80-81 ct state invalid,untracked synproxy mss 1460\n"), "{s}");
        assert!(s.contains("meta nfproto ipv6 meta l4proto tcp tcp dport 80-81 ct state invalid,untracked synproxy mss 1440\n"), "{s}");
        assert!(s.contains("tcp dport 80-81 tcp flags & (fin | syn | rst | ack) == syn notrack"), "{s}");
        assert!(s.starts_with(&format!("table inet {TABLE}\ndelete table inet {TABLE}\n")), "one transaction replaces the table: {s}");
    }

    #[test]
    fn addresses_set_the_family_and_lists_widen() {
        let text = "[lists]\nl = \"x\"\n[[rule]]\nsrc = \"@l\"\ndst = \"2001:db8::1\"\nproto = \"tcp\"\ndport = 443\naction = \"syn-cookie\"\nmss = 1400\n\
                    [[rule]]\nname = \"other\"\nproto = \"tcp\"\naction = \"drop\"\n";
        let s = script(&rs(text));
        assert!(s.contains("meta nfproto ipv6 ip6 daddr 2001:db8::1/128 meta l4proto tcp tcp dport 443 ct state invalid drop\n"), "{s}");
        assert!(s.contains("synproxy mss 1380"), "{s}");
        assert!(!s.contains("ipv4"), "an IPv6 rule stays IPv6: {s}");
    }

    #[test]
    fn only_syn_cookie_rules_need_it() {
        assert!(!wanted(&rs("[[rule]]\nproto = \"tcp\"\naction = \"drop\"\n")));
        assert!(wanted(&rs("[[rule]]\nproto = \"tcp\"\naction = \"syn-cookie\"\n")));
    }
}
