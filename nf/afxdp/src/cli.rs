//! `xnf afxdp`: the commands.

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum AfxdpCmd {
    /// Run a bundled NF (rxdrop, txonly, l2fwd, echo) on AF_XDP sockets of
    /// IFACE's queues, with live statistics, until Ctrl-C or --seconds.
    ///
    /// Example: xnf afxdp run echo --iface eth1 --match proto=udp,dport=7
    Run(Box<crate::run::RunArgs>),
}

pub fn run(cmd: AfxdpCmd) -> Result<()> {
    match cmd {
        AfxdpCmd::Run(a) => crate::run::run(*a),
    }
}
