//! A device's ethtool settings as `ethtool -l/-g/-c/-k/-x` show them —
//! channels, ring sizes, interrupt coalescing, offload features, the RSS
//! indirection table — read
//! whole and written back whole, through the `SIOCETHTOOL` ioctl in the
//! calling thread's network namespace: what the lab needs to leave an
//! interface it borrowed exactly as it found it. A setting the driver does
//! not have (`EOPNOTSUPP`: a veth has no rings or coalescing) is `None`
//! and left alone.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::addr::check_ifname;
use crate::ethtool::{self, bytes_of, ethtool_buf, get_u32, ioctl_socket, put_u32};

const ETHTOOL_GCOALESCE: u32 = 0x0e;
const ETHTOOL_SCOALESCE: u32 = 0x0f;
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_SRINGPARAM: u32 = 0x11;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_SCHANNELS: u32 = 0x3d;
const ETHTOOL_GRXRINGS: u32 = 0x2d;
const ETHTOOL_GRXFHINDIR: u32 = 0x38;
const ETHTOOL_SRXFHINDIR: u32 = 0x39;
/// u64 words of `struct ethtool_rxnfc`, which GRXRINGS copies whole.
const RXNFC_WORDS: usize = 64;

/// u32 words after `cmd` in `struct ethtool_channels`, `ethtool_ringparam`
/// and `ethtool_coalesce`.
const CHANNELS: usize = 8;
const RINGS: usize = 8;
const COALESCE: usize = 22;

/// Every setting a snapshot holds; `None`: the driver has no such setting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevSettings {
    /// `struct ethtool_channels` after cmd: 4 maxima, then rx, tx, other, combined.
    pub channels: Option<Vec<u32>>,
    /// `struct ethtool_ringparam` after cmd: 4 maxima, then rx, mini, jumbo, tx.
    pub rings: Option<Vec<u32>>,
    /// `struct ethtool_coalesce` after cmd.
    pub coalesce: Option<Vec<u32>>,
    /// Per 32 features: (available, requested) of `struct ethtool_get_features_block`.
    pub features: Option<Vec<(u32, u32)>>,
    /// The RSS indirection table: the RX queue of each hash bucket.
    #[serde(default)]
    pub rss: Option<Vec<u32>>,
}

/// The RSS indirection table (`ETHTOOL_GRXFHINDIR`); None if the driver
/// has none (a veth).
fn read_rss(sock: &std::os::fd::OwnedFd, ifname: &str) -> Result<Option<Vec<u32>>> {
    // struct ethtool_rxfh_indir: cmd, size, ring_index[size]; size 0 asks the size.
    let mut buf = vec![0u64; 1];
    put_u32(bytes_of(&mut buf), 0, ETHTOOL_GRXFHINDIR);
    match ethtool_buf(sock, ifname, &mut buf) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(None),
        r => r.map_err(|e| ethtool::explain(e, ifname, "reading the RSS indirection table"))?,
    }
    let size = get_u32(bytes_of(&mut buf), 4) as usize;
    if size == 0 {
        return Ok(None);
    }
    let mut buf = vec![0u64; (2 + size).div_ceil(2)];
    put_u32(bytes_of(&mut buf), 0, ETHTOOL_GRXFHINDIR);
    put_u32(bytes_of(&mut buf), 4, size as u32);
    ethtool_buf(sock, ifname, &mut buf).map_err(|e| ethtool::explain(e, ifname, "reading the RSS indirection table"))?;
    Ok(Some((0..size).map(|i| get_u32(bytes_of(&mut buf), 8 + 4 * i)).collect()))
}

/// Writes the RSS indirection table; an empty one is the driver's default
/// (which the kernel then marks as not configured, as it found it).
fn write_rss(sock: &std::os::fd::OwnedFd, ifname: &str, table: &[u32]) -> Result<()> {
    let mut buf = vec![0u64; (2 + table.len()).div_ceil(2)];
    let b = bytes_of(&mut buf);
    put_u32(b, 0, ETHTOOL_SRXFHINDIR);
    put_u32(b, 4, table.len() as u32);
    for (i, q) in table.iter().enumerate() {
        put_u32(b, 8 + 4 * i, *q);
    }
    ethtool_buf(sock, ifname, &mut buf).map_err(|e| ethtool::explain(e, ifname, "writing the RSS indirection table"))
}

/// The RX queues RSS spreads over (`ETHTOOL_GRXRINGS`).
fn rx_rings(sock: &std::os::fd::OwnedFd, ifname: &str) -> Result<u32> {
    let mut buf = vec![0u64; RXNFC_WORDS];
    put_u32(bytes_of(&mut buf), 0, ETHTOOL_GRXRINGS);
    ethtool_buf(sock, ifname, &mut buf).map_err(|e| ethtool::explain(e, ifname, "reading the RX queue count"))?;
    // struct ethtool_rxnfc: cmd, flow_type, then the u64 data at offset 8.
    Ok(u64::from_ne_bytes(bytes_of(&mut buf)[8..16].try_into().expect("8 bytes")) as u32)
}

/// The table that spreads hash buckets evenly over `queues` RX queues
/// (`ethtool -X DEV equal N`), the kernel's default when `queues` is the
/// device's RX queue count.
fn spread(size: usize, queues: u32) -> Vec<u32> {
    (0..size as u32).map(|i| i % queues.max(1)).collect()
}

/// Reads the words after `cmd` of a fixed-size ethtool struct; None if the
/// driver does not implement the command.
fn read_words(sock: &std::os::fd::OwnedFd, ifname: &str, cmd: u32, words: usize) -> Result<Option<Vec<u32>>> {
    let mut buf = vec![0u64; (1 + words).div_ceil(2)];
    put_u32(bytes_of(&mut buf), 0, cmd);
    match ethtool_buf(sock, ifname, &mut buf) {
        Ok(()) => Ok(Some((0..words).map(|i| get_u32(bytes_of(&mut buf), 4 + 4 * i)).collect())),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(ethtool::explain(e, ifname, "reading ethtool settings")),
    }
}

fn write_words(sock: &std::os::fd::OwnedFd, ifname: &str, cmd: u32, words: &[u32], what: &str) -> Result<()> {
    let mut buf = vec![0u64; (1 + words.len()).div_ceil(2)];
    let b = bytes_of(&mut buf);
    put_u32(b, 0, cmd);
    for (i, w) in words.iter().enumerate() {
        put_u32(b, 4 + 4 * i, *w);
    }
    ethtool_buf(sock, ifname, &mut buf).map_err(|e| ethtool::explain(e, ifname, what))
}

/// Requests `features` (the changeable ones: those available).
fn write_features(sock: &std::os::fd::OwnedFd, ifname: &str, features: &[(u32, u32)]) -> Result<()> {
    // struct ethtool_sfeatures: cmd, size, then size × {valid, requested}.
    let mut buf = vec![0u64; (2 + 2 * features.len()).div_ceil(2)];
    let b = bytes_of(&mut buf);
    put_u32(b, 0, ETHTOOL_SFEATURES);
    put_u32(b, 4, features.len() as u32);
    for (i, (available, requested)) in features.iter().enumerate() {
        put_u32(b, 8 + 8 * i, *available);
        put_u32(b, 12 + 8 * i, *requested);
    }
    ethtool_buf(sock, ifname, &mut buf).map_err(|e| ethtool::explain(e, ifname, "restoring offload features"))
}

impl DevSettings {
    /// Every setting of `ifname` its driver has.
    pub fn read(ifname: &str) -> Result<DevSettings> {
        check_ifname(ifname)?;
        let sock = ioctl_socket()?;
        Ok(DevSettings {
            channels: read_words(&sock, ifname, ETHTOOL_GCHANNELS, CHANNELS)?,
            rings: read_words(&sock, ifname, ETHTOOL_GRINGPARAM, RINGS)?,
            coalesce: read_words(&sock, ifname, ETHTOOL_GCOALESCE, COALESCE)?,
            features: ethtool::feature_blocks(&sock, ifname)?,
            rss: read_rss(&sock, ifname)?,
        })
    }

    /// Spreads `ifname`'s RSS over its first `queues` RX queues; false if
    /// the driver has no indirection table (a veth).
    pub fn spread_rss(ifname: &str, queues: u32) -> Result<bool> {
        check_ifname(ifname)?;
        let sock = ioctl_socket()?;
        let Some(table) = read_rss(&sock, ifname)? else { return Ok(false) };
        write_rss(&sock, ifname, &spread(table.len(), queues))?;
        Ok(true)
    }

    /// Writes back every setting that differs from `ifname`'s now: channels
    /// first (a driver may reset rings and coalescing with them), then
    /// rings, coalescing and features.
    pub fn restore(&self, ifname: &str) -> Result<()> {
        let now = DevSettings::read(ifname)?;
        let sock = ioctl_socket()?;
        // The maxima are the driver's; only the counts are written.
        if let (Some(want), Some(have)) = (&self.channels, &now.channels) {
            if want[4..] != have[4..] {
                write_words(&sock, ifname, ETHTOOL_SCHANNELS, want, "restoring channels")?;
            }
        }
        if let (Some(want), Some(have)) = (&self.rings, &now.rings) {
            if want[4..] != have[4..] {
                write_words(&sock, ifname, ETHTOOL_SRINGPARAM, want, "restoring ring sizes")?;
            }
        }
        if let (Some(want), Some(have)) = (&self.coalesce, &now.coalesce) {
            if want != have {
                write_words(&sock, ifname, ETHTOOL_SCOALESCE, want, "restoring interrupt coalescing")?;
            }
        }
        if let (Some(want), Some(have)) = (&self.features, &now.features) {
            if want.iter().map(|f| f.1).ne(have.iter().map(|f| f.1)) {
                write_features(&sock, ifname, want)?;
            }
        }
        // After the channels: a change of RX queues resets a default table.
        if let (Some(want), Some(have)) = (&self.rss, &DevSettings::read(ifname)?.rss) {
            if want != have {
                let default = *want == spread(want.len(), rx_rings(&sock, ifname)?);
                write_rss(&sock, ifname, if default { &[] } else { want })?;
            }
        }
        let after = DevSettings::read(ifname)?;
        let requested = |s: &DevSettings| s.features.as_ref().map(|f| f.iter().map(|x| x.1).collect::<Vec<_>>());
        anyhow::ensure!(
            after.channels == self.channels
                && after.rings == self.rings
                && after.coalesce == self.coalesce
                && requested(&after) == requested(self)
                && after.rss == self.rss,
            "{ifname}: the driver did not take back its ethtool settings (channels, rings, coalescing, features or the RSS table differ after restoring)"
        );
        Ok(())
    }

    /// Sets `ifname`'s queue count: combined channels where the driver has
    /// them (a NIC), else RX and TX (a veth).
    pub fn set_queues(ifname: &str, queues: u32) -> Result<()> {
        let sock = ioctl_socket()?;
        let mut c = read_words(&sock, ifname, ETHTOOL_GCHANNELS, CHANNELS)?
            .with_context(|| format!("{ifname}: its driver has no channels to set queues with (ethtool -L)"))?;
        if c[3] > 0 {
            c[7] = queues;
        } else {
            (c[4], c[5]) = (queues, queues);
        }
        write_words(&sock, ifname, ETHTOOL_SCHANNELS, &c, &format!("setting {queues} queue(s)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethtool::{set_offload, Offload};

    #[test]
    fn an_even_spread_is_the_kernels_default_table() {
        assert_eq!(spread(8, 3), [0, 1, 2, 0, 1, 2, 0, 1]);
        assert_eq!(spread(4, 0), [0, 0, 0, 0]);
    }
    use crate::{ifname, veth, Netns};

    #[test]
    fn settings_changed_are_restored_whole() {
        let ns = Netns::new("devset").unwrap();
        let (a, b) = (ifname("a"), ifname("b"));
        veth(&ns, &a, &ns, &b, Some(4)).unwrap();
        ns.run(|| {
            let before = DevSettings::read(&a).unwrap();
            assert!(before.channels.is_some() && before.features.is_some(), "a veth has channels and features: {before:?}");
            DevSettings::set_queues(&a, 2).unwrap();
            set_offload(&a, Offload::Gro, true).unwrap();
            set_offload(&a, Offload::TxChecksum, false).unwrap();
            let changed = DevSettings::read(&a).unwrap();
            assert_ne!(changed, before);
            assert_eq!(changed.channels.as_ref().unwrap()[4..6], [2, 2]);
            before.restore(&a).unwrap();
            assert_eq!(DevSettings::read(&a).unwrap(), before);
            assert_eq!(before.rss, None, "a veth has no RSS table");
            assert!(!DevSettings::spread_rss(&a, 1).unwrap(), "nor spreads one");
        })
        .unwrap();
    }
}
