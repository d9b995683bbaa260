//! What identifies one version of a file on disk (mtime, size, inode):
//! `ssh.authorized_keys` and the certificate files (`certs`) are re-read
//! when it changes.

use std::path::Path;
use std::time::SystemTime;

/// What identifies one version of the file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

pub fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode: meta.ino(),
    })
}
