//! What identifies one version of a file that `wid serve` and `wid
//! k8s-signer` watch (the keystore, the TLS certificate and key).

use std::time::SystemTime;

/// What identifies one version of a file: saves replace it by
/// rename, so the inode changes even when the time and size do not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

pub(crate) fn stamp(path: &std::path::Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        inode,
    })
}
