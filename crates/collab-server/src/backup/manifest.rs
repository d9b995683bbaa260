//! The backup manifest (`manifest.json`) and the file-level helpers every
//! backup step shares: a copy that hashes as it writes, a safe reading of
//! the relative paths a manifest names, and the walk of a directory tree.
//!
//! `manifest.json` lists every file of the backup with its size, mode and
//! SHA-256, the repositories with their ref counts, and the census of the
//! database copy. `manifest.sha256` holds the SHA-256 of `manifest.json`
//! itself, so a changed byte anywhere in a backup is found by `--verify`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::db::snapshot::Census;

/// `format` of every manifest.
pub const FORMAT: &str = "git-collab-backup";
/// The manifest layout this server writes and reads.
pub const VERSION: u32 = 1;
/// The manifest's file name in a backup directory.
pub const MANIFEST: &str = "manifest.json";
/// The manifest's own checksum.
pub const MANIFEST_SUM: &str = "manifest.sha256";

/// Where each part lives inside a backup directory.
pub mod layout {
    /// The database copy.
    pub const DATABASE: &str = "collab.db";
    /// `ssh.host_key`.
    pub const HOST_KEY: &str = "keys/ssh_host_key";
    /// `ssh.authorized_keys`.
    pub const AUTHORIZED_KEYS: &str = "keys/authorized_keys";
    /// Other files of the state directory, by their path inside it.
    pub const STATE: &str = "state";
    /// `repos_dir`: every repository and any other file kept there.
    pub const REPOS: &str = "repos";
    /// `{state_dir}/releases`.
    pub const RELEASES: &str = "releases";
}

/// The whole manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// RFC 3339, when the backup started.
    pub started_at: String,
    /// The `git-collab-server` version that wrote it.
    pub server_version: String,
    pub counts: Counts,
    /// The database copy's census; `None` when the server had no database yet.
    pub database: Option<Census>,
    pub repos: Vec<RepoRecord>,
    pub files: Vec<FileRecord>,
}

/// The headline numbers (also printed by `backup --json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub repos: u64,
    pub refs: u64,
    /// Rows of these tables in the database copy; `None` if the table does
    /// not exist (yet).
    pub leases: Option<i64>,
    pub issues: Option<i64>,
    pub events: Option<i64>,
    /// Highest fencing token handed out, and how many issues have one.
    pub max_token: Option<i64>,
    pub token_pairs: Option<i64>,
    pub release_files: u64,
    pub files: u64,
    pub bytes: u64,
}

/// One repository: its name under `repos_dir`, what `HEAD` held and how
/// many refs the snapshot took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoRecord {
    pub name: String,
    pub refs: u64,
    pub head: String,
}

/// One file of the backup, by its path relative to the backup directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub path: String,
    pub size: u64,
    /// Permission bits (`0o600` for keys).
    pub mode: u32,
    pub sha256: String,
}

/// SHA-256 of some bytes, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Copy `src` to the new file `dest` (never overwriting), creating its
/// parent directories, with `mode`; returns the size and SHA-256 of what was
/// written. The data is not fsynced here: callers sync the whole tree once.
pub fn copy_hashed(src: &Path, dest: &Path, mode: u32) -> io::Result<(u64, String)> {
    let mut input = File::open(src)?;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut output = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(dest)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        output.write_all(&buf[..n])?;
        size += n as u64;
    }
    // create_new's mode is filtered by the umask; set it exactly.
    output.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok((size, hex::encode(hasher.finalize())))
}

/// Size and SHA-256 of a file.
pub fn hash_file(path: &Path) -> io::Result<(u64, String)> {
    let mut input = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// Permission bits of a file.
pub fn mode_of(path: &Path) -> io::Result<u32> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o7777)
}

/// A manifest path as a relative path that cannot leave the directory it
/// is joined to: plain components only, no `..`, no root, not empty.
pub fn safe_relative(path: &str) -> anyhow::Result<PathBuf> {
    let rel = Path::new(path);
    if path.is_empty() || path.contains('\0') {
        bail!("bad path {path:?} in the manifest");
    }
    for component in rel.components() {
        if !matches!(component, Component::Normal(_)) {
            bail!("bad path {path:?} in the manifest");
        }
    }
    Ok(rel.to_path_buf())
}

/// A relative path as the manifest spells it (`/`-separated UTF-8).
pub fn manifest_path(rel: &Path) -> anyhow::Result<String> {
    rel.to_str()
        .map(str::to_string)
        .with_context(|| format!("{} is not a UTF-8 path", rel.display()))
}

/// Every regular file under `root` (symbolic links are not followed or
/// listed), as paths relative to `root`, sorted. `skip` sees each relative
/// path (directories too) and prunes what it returns true for.
pub fn walk_files(root: &Path, skip: &dyn Fn(&Path, bool) -> bool) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel_dir) = stack.pop() {
        let entries = match std::fs::read_dir(root.join(&rel_dir)) {
            Ok(entries) => entries,
            // A directory removed while we walk (a finished quarantine).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let rel = rel_dir.join(entry.file_name());
            let kind = match entry.file_type() {
                Ok(kind) => kind,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if kind.is_dir() {
                if !skip(&rel, true) {
                    stack.push(rel);
                }
            } else if kind.is_file() && !skip(&rel, false) {
                files.push(rel);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Write `manifest.json` and its checksum into `dir`.
pub fn write_manifest(dir: &Path, manifest: &Manifest) -> anyhow::Result<()> {
    let mut json = serde_json::to_vec_pretty(manifest)?;
    json.push(b'\n');
    let sum = format!("{}  {MANIFEST}\n", sha256_hex(&json));
    std::fs::write(dir.join(MANIFEST), &json).context("writing manifest.json")?;
    std::fs::write(dir.join(MANIFEST_SUM), sum).context("writing manifest.sha256")?;
    Ok(())
}

/// Read and check `manifest.json` against its checksum and format.
pub fn read_manifest(dir: &Path) -> anyhow::Result<Manifest> {
    let json = std::fs::read(dir.join(MANIFEST))
        .with_context(|| format!("{}: no readable {MANIFEST}", dir.display()))?;
    let sum = std::fs::read_to_string(dir.join(MANIFEST_SUM))
        .with_context(|| format!("{}: no readable {MANIFEST_SUM}", dir.display()))?;
    let expected = sum.split_whitespace().next().unwrap_or("");
    if expected != sha256_hex(&json) {
        bail!("{MANIFEST} does not match {MANIFEST_SUM}: the manifest was changed or damaged");
    }
    let manifest: Manifest =
        serde_json::from_slice(&json).with_context(|| format!("{MANIFEST} does not parse"))?;
    if manifest.format != FORMAT {
        bail!(
            "{MANIFEST}: not a git-collab backup (format {:?})",
            manifest.format
        );
    }
    if manifest.version != VERSION {
        bail!(
            "{MANIFEST}: backup layout version {} is not supported (this server reads {VERSION})",
            manifest.version
        );
    }
    Ok(manifest)
}

/// Flush everything written to the filesystem holding `dir` to disk.
pub fn sync_filesystem(dir: &Path) -> io::Result<()> {
    let f = File::open(dir)?;
    // SAFETY: syncfs on a descriptor we own for the call's duration.
    let rc = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_paths_cannot_escape() {
        assert!(safe_relative("repos/a.git/HEAD").is_ok());
        for bad in ["", "/etc/passwd", "../x", "repos/../../x", "a/./b"] {
            // `a/./b` normalizes to plain components; the rest must fail.
            if bad == "a/./b" {
                continue;
            }
            assert!(safe_relative(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn copy_hashes_what_it_writes_and_keeps_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, b"hello").unwrap();
        let dest = dir.path().join("a/b/dest");
        let (size, sum) = copy_hashed(&src, &dest, 0o600).unwrap();
        assert_eq!(size, 5);
        assert_eq!(sum, sha256_hex(b"hello"));
        assert_eq!(hash_file(&dest).unwrap(), (5, sum));
        assert_eq!(mode_of(&dest).unwrap(), 0o600);
        assert!(copy_hashed(&src, &dest, 0o600).is_err(), "never overwrites");
    }
}
