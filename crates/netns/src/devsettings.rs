//! A device's ethtool settings as `ethtool -l/-g/-c/-k` show them —
//! channels, ring sizes, interrupt coalescing, offload features — read
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
        })
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
        let after = DevSettings::read(ifname)?;
        let requested = |s: &DevSettings| s.features.as_ref().map(|f| f.iter().map(|x| x.1).collect::<Vec<_>>());
        anyhow::ensure!(
            after.channels == self.channels && after.rings == self.rings && after.coalesce == self.coalesce && requested(&after) == requested(self),
            "{ifname}: the driver did not take back its ethtool settings (channels, rings, coalescing or features differ after restoring)"
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
        })
        .unwrap();
    }
}
