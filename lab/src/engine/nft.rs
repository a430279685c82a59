//! nftables in a lab namespace: the router experiment's ruleset and the
//! actions experiment's Linux-stack drop rule are loaded and read with the
//! `nft` command (no maintained Rust crate speaks nftables netlink).

use std::io::Write;
use std::process::Stdio;

use anyhow::{bail, ensure, Context, Result};
use xnf_netns::Netns;

/// Fails, saying how to install it, when `nft` is not on this machine.
pub fn require(what: &str) -> Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).chain(["/usr/sbin".into(), "/sbin".into()]).any(|d| d.join("nft").is_file());
    ensure!(found, "{what} needs nft (apt-get install nftables; `make deps` installs it)");
    Ok(())
}

/// Runs `nft ARGS` in `ns`, feeding it `stdin`; returns its output.
pub fn nft(ns: &Netns, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let mut child = ns.command("nft").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("running nft")?;
    if let Some(text) = stdin {
        child.stdin.take().context("nft stdin")?.write_all(text.as_bytes())?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "nft {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Packets of `counter NAME { packets N bytes M }` in `nft list counter` output.
pub fn counter_packets(text: &str) -> Result<u64> {
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "packets" {
            return words.next().and_then(|n| n.parse().ok()).context("nft counter: no number after `packets`");
        }
    }
    bail!("nft counter output has no packet count: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_counter() {
        let text = "table inet xnfraw {\n\tcounter dropped {\n\t\tpackets 1234 bytes 5678\n\t}\n}\n";
        assert_eq!(counter_packets(text).unwrap(), 1234);
        assert!(counter_packets("table inet x {}").is_err());
        assert!(counter_packets("counter c { packets many }").is_err());
    }
}
