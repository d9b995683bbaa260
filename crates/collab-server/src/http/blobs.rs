//! Reading file contents without holding a big blob in memory. libgit2
//! only hands out whole objects, so a blob larger than
//! `http.max_file_shown` is read through `git cat-file blob` instead: a
//! prefix of it (for the blob page and binary detection), or all of it as
//! a stream with backpressure (the raw download). Sizes come from the
//! object header, which costs nothing like the object itself.

use std::io::Read as _;
use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll};

use git2::{Oid, Repository};
use tokio::io::{AsyncRead, AsyncReadExt as _, ReadBuf};

use crate::limits::ProcessPermit;

/// Bytes git looks at to decide binary vs text (`buffer_is_binary`).
pub const SNIFF: usize = 8000;

/// A blob's size from its object header, without inflating it.
pub fn size(git: &Repository, oid: Oid) -> anyhow::Result<u64> {
    let (size, _) = git.odb()?.read_header(oid)?;
    Ok(size as u64)
}

/// libgit2's rule (`git_blob_is_binary`) on the first 8000 bytes: a NUL
/// byte, or more than one control character per 128 printable ones.
pub fn looks_binary(prefix: &[u8]) -> bool {
    let sample = &prefix[..prefix.len().min(SNIFF)];
    let (mut printable, mut control) = (0usize, 0usize);
    for &c in sample {
        if (c > 0x1f && c != 0x7f) || matches!(c, 0x08 | 0x1b | 0x0c) {
            printable += 1;
        } else if c == 0 {
            return true;
        } else if !c.is_ascii_whitespace() && c != 0x0b {
            control += 1;
        }
    }
    (printable >> 7) < control
}

/// `git --git-dir <repo> cat-file blob <oid>`, with a clean environment.
fn cat_file(repo: &Path, oid: Oid) -> std::process::Command {
    let mut cmd = crate::maintenance::git::clean();
    cmd.arg("--git-dir")
        .arg(repo)
        .args(["cat-file", "blob", "--end-of-options"])
        .arg(oid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    cmd
}

/// The first `limit` bytes of a blob (blocking; call it from a blocking
/// thread). git is stopped once they are read.
pub fn prefix(repo: &Path, oid: Oid, limit: u64) -> anyhow::Result<Vec<u8>> {
    let mut child = cat_file(repo, oid).spawn()?;
    let mut out = Vec::new();
    let read = match child.stdout.take() {
        Some(stdout) => stdout.take(limit).read_to_end(&mut out),
        None => Ok(0),
    };
    let _ = child.kill();
    let _ = child.wait();
    read?;
    Ok(out)
}

/// A blob being streamed out of a `git cat-file` child. Dropping it (the
/// client went away) kills git and frees the process slot.
pub struct BlobStream {
    stdout: tokio::process::ChildStdout,
    _child: tokio::process::Child,
    _slot: ProcessPermit,
}

impl BlobStream {
    /// Start git and read the first bytes (up to `SNIFF`) for binary
    /// detection; they are returned, and the stream continues after them.
    pub async fn open(
        repo: &Path,
        oid: Oid,
        slot: ProcessPermit,
    ) -> anyhow::Result<(Vec<u8>, BlobStream)> {
        let mut child = tokio::process::Command::from(cat_file(repo, oid))
            .kill_on_drop(true)
            .spawn()?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("git cat-file: no stdout"))?;
        let mut head = Vec::with_capacity(SNIFF);
        (&mut stdout)
            .take(SNIFF as u64)
            .read_to_end(&mut head)
            .await?;
        Ok((
            head,
            BlobStream {
                stdout,
                _child: child,
                _slot: slot,
            },
        ))
    }
}

impl AsyncRead for BlobStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_and_size_without_loading() {
        let tmp = tempfile::tempdir().unwrap();
        let git = Repository::init_bare(tmp.path()).unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let oid = git.blob(&data).unwrap();
        assert_eq!(size(&git, oid).unwrap(), 100_000);
        let head = prefix(tmp.path(), oid, 1000).unwrap();
        assert_eq!(head, &data[..1000]);
        assert!(!looks_binary(&head));
        assert!(looks_binary(b"PNG\0\x01"));
        let all = prefix(tmp.path(), oid, 1 << 20).unwrap();
        assert_eq!(all.len(), 100_000);
    }
}
