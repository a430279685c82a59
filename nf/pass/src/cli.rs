//! `xnf pass attach|detach`.

use anyhow::Result;
use clap::Subcommand;
use xnf_core::xdp::XdpMode;

#[derive(Subcommand)]
pub enum PassCmd {
    /// Attach xnf's XDP_PASS program to IFACE.
    Attach {
        iface: String,
        #[arg(long, value_enum, default_value = "native")]
        mode: XdpMode,
    },
    /// Detach it.
    Detach { iface: String },
}

pub fn run(cmd: PassCmd) -> Result<()> {
    match cmd {
        PassCmd::Attach { iface, mode } => crate::attach::attach(&iface, mode),
        PassCmd::Detach { iface } => crate::attach::detach(&iface),
    }
}
