//! `xnf nf`, `xnf chain` and `xnf apply`: the commands, their arguments and
//! their output.

use anyhow::Result;
use clap::Subcommand;
use xnf_core::runtime::{warn, watch_period};

use crate::model::{ChainSpec, Function, MatchSpec, NfSpec, Origin, UnknownL4};

#[derive(Subcommand)]
pub enum NfCmd {
    /// Join a network namespace to the host as an NF: creates the veth pair
    /// (host end xnf-NAME), sets queues and offloads for XDP, and attaches
    /// the NF's function to its end.
    Create {
        /// NF name: 1-11 characters from a-z, 0-9, -, _.
        name: String,
        /// Its network namespace: a name from `ip netns` or a path such as /proc/PID/ns/net.
        #[arg(long, value_name = "NAME|PATH", required_unless_present = "container")]
        netns: Option<String>,
        /// A Docker or Podman container: its network namespace.
        #[arg(long, value_name = "NAME", conflicts_with = "netns")]
        container: Option<String>,
        /// Name of the NF's end of the veth, inside its namespace.
        #[arg(long, default_value = "xnf0")]
        ifname: String,
        /// RX/TX queues of the veth [default: one per CPU].
        #[arg(long)]
        queues: Option<u32>,
        /// What xnf attaches to the NF's end: pass (its Linux stack or your
        /// program handles frames), reflect (XDP_TX every frame back), none
        /// (your own XDP program is attached there).
        #[arg(long, value_enum, default_value = "pass")]
        function: Function,
        /// Make the NF's Linux stack forward frames back to the host:
        /// forwarding on, default routes through the host end.
        #[arg(long)]
        forward: bool,
        /// Use the veth IFNAME that already exists in the namespace (made by
        /// a container runtime, say) instead of creating one.
        #[arg(long)]
        existing: bool,
    },
    /// Remove an NF: its veth (if xnf made it) and what xnf attached.
    Delete {
        name: String,
        /// Even while chains use it: they then drop their traffic until an
        /// NF of that name exists again.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
pub enum ChainCmd {
    /// Steer traffic matching --match on --ingress through the NFs, in order.
    ///
    /// Example: xnf chain create web --ingress eth0 --egress eth1
    ///   --match dst=198.18.16.0/24,proto=udp --nf fw --nf nat
    Create {
        name: String,
        /// Where the traffic arrives.
        #[arg(long)]
        ingress: String,
        /// An interface the chain may route out of in XDP (repeat); other
        /// egresses work through the kernel.
        #[arg(long)]
        egress: Vec<String>,
        /// A traffic class (repeat for several): key=value pairs from src,
        /// dst (prefixes), proto (udp, tcp, icmp, icmpv6, number), sport,
        /// dport (N or LO-HI), vlan (ID), family (ipv4, ipv6); or `all`.
        #[arg(long = "match", required = true, value_name = "K=V,...")]
        matches: Vec<String>,
        /// The NFs in order (repeat).
        #[arg(long = "nf", required = true, value_name = "NF")]
        nfs: Vec<String>,
        /// Lower wins where classes of chains on one ingress overlap.
        #[arg(long, default_value_t = 100)]
        priority: u32,
        /// Frames that may be in a class but whose protocol or ports cannot
        /// be read (later fragments, truncated L4 headers, long IPv6
        /// extension header chains): into the NFs, or dropped. Never around
        /// them.
        #[arg(long, value_enum, default_value = "nf")]
        unknown_l4: UnknownL4,
    },
    /// Remove a chain; its traffic takes the kernel path again.
    Delete { name: String },
    /// Converge the NFs and chains alone to a file of [[nf]] and [[chain]]
    /// tables (idempotent; what it no longer has is removed). `xnf apply`
    /// takes the same tables as part of the whole box's file.
    Apply { file: std::path::PathBuf },
    /// NFs and chains, with their state.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Per chain and hop: packets in, out, dropped by the NF, and how they left.
    Stats {
        #[arg(long)]
        json: bool,
        /// Show rates, refreshed every SECS seconds (default 1).
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "1")]
        watch: Option<f64>,
    },
}

pub fn nf(cmd: NfCmd) -> Result<()> {
    match cmd {
        NfCmd::Create { name, netns, container, ifname, queues, function, forward, existing } => {
            let spec = NfSpec { name: name.clone(), netns, container, ifname, queues, function, forward, existing };
            warn(&crate::nf_create(spec, Origin::Cli)?);
            println!("created NF {name} (port {})", crate::host_ifname(&name));
            Ok(())
        }
        NfCmd::Delete { name, force } => {
            warn(&crate::nf_delete(&name, force)?);
            println!("deleted NF {name}");
            Ok(())
        }
    }
}

pub fn chain(cmd: ChainCmd) -> Result<()> {
    match cmd {
        ChainCmd::Create { name, ingress, egress, matches, nfs, priority, unknown_l4 } => {
            let matches = matches.iter().map(|m| MatchSpec::parse(m)).collect::<Result<Vec<_>>>()?;
            let spec = ChainSpec { name: name.clone(), ingress, egress, matches, nfs, priority, unknown_l4 };
            warn(&crate::chain_create(spec, Origin::Cli)?);
            println!("created chain {name}");
            Ok(())
        }
        ChainCmd::Apply { file } => apply(&file),
        ChainCmd::Delete { name } => {
            warn(&crate::chain_delete(&name)?);
            println!("deleted chain {name}");
            Ok(())
        }
        ChainCmd::List { json } => crate::report::list(json),
        ChainCmd::Stats { json, watch } => crate::report::stats(json, watch_period(watch)?),
    }
}

/// `xnf apply FILE`.
pub fn apply(file: &std::path::Path) -> Result<()> {
    let (changes, warnings) = crate::apply::apply(file)?;
    warn(&warnings);
    changes.iter().for_each(|c| println!("{c}"));
    Ok(())
}
