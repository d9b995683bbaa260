//! The backup manifest (`manifest.json`) and the file-level helpers every
//! backup step shares: a copy that hashes as it writes, a safe reading of
//! the relative paths a manifest names, and the walk of a directory tree.
//!
//! `manifest.json` lists every file of the backup with its size, mode and
//! SHA-256, the repositories with their ref counts, and the census of the
//! database copy. `manifest.sha256` holds the SHA-256 of `manifest.json`
//! itself, so a damaged byte anywhere in a backup is found by `--verify`.
//! A checksum proves nothing against whoever can write the backup (they
//! re-seal it), so `manifest.sig` holds the server's Ed25519 signature of
//! `manifest.json` and the public key that made it; `--verify` and
//! `restore` check it against a key the operator names (`--key`), never
//! against the key the backup carries. See docs/security.md, "Backups'
//! trust model (round two)".
//!
//! Everything read from a backup is opened without following symbolic
//! links (`open_in`): a backup is untrusted input until its signature is
//! checked, and a link inside it would otherwise read (and restore) any
//! file the operator can read.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use collab_record::sign::{self, SigningKey};

use collab_store::snapshot::Census;

/// `format` of every manifest.
pub const FORMAT: &str = "git-collab-backup";
/// The manifest layout this server writes and reads.
pub const VERSION: u32 = 1;
/// The manifest's file name in a backup directory.
pub const MANIFEST: &str = "manifest.json";
/// The manifest's own checksum.
pub const MANIFEST_SUM: &str = "manifest.sha256";
/// The manifest's signature: the signer's public key line, then the
/// base64 Ed25519 signature of `SIG_CONTEXT` followed by `manifest.json`.
pub const MANIFEST_SIG: &str = "manifest.sig";
/// What the signature covers before the manifest's bytes: the server key
/// also signs webhook deliveries, and a signature of one must never pass
/// for the other.
pub const SIG_CONTEXT: &[u8] = b"git-collab backup manifest v1\n";
/// Mode of every file a backup writes (the manifest keeps the original
/// mode, which a restore puts back).
pub const FILE_MODE: u32 = 0o600;
/// Mode of every directory a backup creates.
pub const DIR_MODE: u32 = 0o700;

/// Where each part lives inside a backup directory.
pub mod layout {
    /// The database copy.
    pub const DATABASE: &str = "collab.db";
    /// The PostgreSQL database, as a `pg_dump` archive.
    pub const PG_DUMP: &str = "collab.pgdump";
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
    /// The database copy's census; `None` when the server had no database
    /// yet, or its database is elsewhere ([`Manifest::database_elsewhere`]).
    pub database: Option<Census>,
    /// How the database is in the backup when it is not the SQLite file
    /// `collab.db`: `pg_dump-custom` (a PostgreSQL archive at
    /// `collab.pgdump`, with [`Manifest::database`] its census).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_dump: Option<String>,
    /// Where the collab database was when it is not in the backup (backups
    /// written before PostgreSQL databases were dumped): the PostgreSQL URL
    /// (without its password). A SQLite file left beside the server from
    /// before `db migrate` is stale and never taken in its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_elsewhere: Option<String>,
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
    copy_hashed_from(File::open(src)?, dest, mode)
}

/// `copy_hashed` from an open file.
pub fn copy_hashed_from(mut input: File, dest: &Path, mode: u32) -> io::Result<(u64, String)> {
    if let Some(parent) = dest.parent() {
        create_private_dirs(parent)?;
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

/// Create `dir` and its missing parents with `DIR_MODE`.
pub fn create_private_dirs(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}

/// Size and SHA-256 of a file.
pub fn hash_file(path: &Path) -> io::Result<(u64, String)> {
    hash_open(File::open(path)?)
}

/// Size and SHA-256 of an open file.
pub fn hash_open(mut input: File) -> io::Result<(u64, String)> {
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

/// Write a new file of the backup with `FILE_MODE`.
fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)?;
    file.write_all(bytes)?;
    file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
}

/// Write `manifest.json`, its checksum and its signature by `key` into `dir`.
pub fn write_manifest(dir: &Path, manifest: &Manifest, key: &SigningKey) -> anyhow::Result<()> {
    let mut json = serde_json::to_vec_pretty(manifest)?;
    json.push(b'\n');
    let sum = format!("{}  {MANIFEST}\n", sha256_hex(&json));
    let mut signed = SIG_CONTEXT.to_vec();
    signed.extend_from_slice(&json);
    let sig = format!(
        "{}\n{}",
        key.public_key_line(),
        sign::encode_signature(&key.sign(&signed))
    );
    write_private(&dir.join(MANIFEST), &json).context("writing manifest.json")?;
    write_private(&dir.join(MANIFEST_SUM), sum.as_bytes()).context("writing manifest.sha256")?;
    write_private(&dir.join(MANIFEST_SIG), sig.as_bytes()).context("writing manifest.sig")?;
    Ok(())
}

/// Whose signature a backup must carry to be read.
#[derive(Debug, Clone)]
pub enum Trust {
    /// A key the operator named: its public key line, or its `SHA256:`
    /// fingerprint.
    Key(ExpectedKey),
    /// `--trust-unsigned`: the checksum only, for a backup with no
    /// signature (written before backups were signed); proves nothing
    /// against whoever could write it. A signed backup is refused with it.
    Unsigned,
}

/// The key a backup's signature must come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectedKey {
    Line(String),
    Fingerprint(String),
}

impl ExpectedKey {
    /// `--key` for the backup in `backup`: as `parse`, and a key file must
    /// lie outside that backup. Whoever can change a backup can change any
    /// file in it, so a key read from it (its own `manifest.sig`, an
    /// `authorized_keys` of the snapshot) would let it vouch for itself.
    pub fn for_backup(arg: &str, backup: &Path) -> anyhow::Result<ExpectedKey> {
        let trimmed = arg.trim();
        if !trimmed.starts_with("SHA256:") && !trimmed.starts_with("ssh-") {
            // Both canonical: `..`, a relative path or a symbolic link to the
            // backup reach the same place. A path that does not resolve is
            // left to `parse` (no key file) or to the check (no backup).
            if let (Ok(file), Ok(backup)) = (
                std::fs::canonicalize(trimmed),
                std::fs::canonicalize(backup),
            ) {
                if file.starts_with(&backup) {
                    bail!(
                        "--key {trimmed}: the key file is inside the backup {} it is to vouch \
                         for; give the server key kept apart from the backups",
                        backup.display()
                    );
                }
            }
        }
        ExpectedKey::parse(arg)
    }

    /// `--key`: an `ssh-ed25519 AAAA…` line, a `SHA256:…` fingerprint, or a
    /// file holding the line (`collab_signing_key.pub`).
    pub fn parse(arg: &str) -> anyhow::Result<ExpectedKey> {
        let arg = arg.trim();
        if arg.starts_with("SHA256:") {
            return Ok(ExpectedKey::Fingerprint(arg.to_string()));
        }
        let line = if arg.starts_with("ssh-") {
            arg.to_string()
        } else {
            let text = std::fs::read_to_string(arg).with_context(|| {
                format!("--key {arg}: not a key line, a SHA256: fingerprint or a readable file")
            })?;
            text.lines().next().unwrap_or("").trim().to_string()
        };
        let key = sign::parse_public_key(&line)
            .map_err(|e| anyhow::anyhow!("--key: not an OpenSSH public key ({e})"))?;
        if key.algorithm() != ssh_key::Algorithm::Ed25519 {
            bail!("--key: the server signs backups with an ssh-ed25519 key");
        }
        Ok(ExpectedKey::Line(canonical_key_line(&key)))
    }

    fn matches(&self, key: &ssh_key::PublicKey) -> bool {
        match self {
            ExpectedKey::Line(line) => *line == canonical_key_line(key),
            ExpectedKey::Fingerprint(fp) => *fp == sign::fingerprint(key),
        }
    }

    fn describe(&self) -> &str {
        match self {
            ExpectedKey::Line(line) | ExpectedKey::Fingerprint(line) => line,
        }
    }
}

/// A public key as `ssh-ed25519 AAAA…`, without its comment.
fn canonical_key_line(key: &ssh_key::PublicKey) -> String {
    let mut key = key.clone();
    key.set_comment("");
    key.to_openssh().unwrap_or_default()
}

/// Who signed a manifest that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// The key `--key` named, by its fingerprint.
    Verified(String),
    /// Read with `Trust::Unsigned`: nobody vouches for it.
    Unchecked,
}

/// Read `manifest.json`, check it against its checksum, its signature
/// (`trust`) and its format.
pub fn read_manifest(dir: &Path, trust: &Trust) -> anyhow::Result<(Manifest, Signer)> {
    let json = read_in(dir, Path::new(MANIFEST))
        .with_context(|| format!("{}: no readable {MANIFEST}", dir.display()))?;
    let sum = read_in(dir, Path::new(MANIFEST_SUM))
        .with_context(|| format!("{}: no readable {MANIFEST_SUM}", dir.display()))?;
    let sum = String::from_utf8_lossy(&sum);
    let expected = sum.split_whitespace().next().unwrap_or("");
    if expected != sha256_hex(&json) {
        bail!("{MANIFEST} does not match {MANIFEST_SUM}: the manifest was changed or damaged");
    }
    let signer = match trust {
        Trust::Unsigned => {
            refuse_any_signature(dir, &json)?;
            Signer::Unchecked
        }
        Trust::Key(want) => Signer::Verified(check_signature(dir, &json, want)?),
    };
    Ok((parse_manifest(&json)?, signer))
}

/// The manifest of `dir` as it stands, checked for nothing but its format
/// (`--keep` reads the start times of the backups beside a new one).
pub fn read_manifest_unchecked(dir: &Path) -> anyhow::Result<Manifest> {
    parse_manifest(&read_in(dir, Path::new(MANIFEST))?)
}

/// `manifest.sig` holds a signature of `json` by the key `want` names.
/// Returns the signer's fingerprint.
fn check_signature(dir: &Path, json: &[u8], want: &ExpectedKey) -> anyhow::Result<String> {
    let Some((key, sig)) = read_signature(dir)? else {
        bail!(
            "{}: the backup is not signed (no {MANIFEST_SIG}: written before backups were \
             signed, or the signature was removed); use --trust-unsigned only for a backup \
             you know nobody could change",
            dir.display()
        );
    };
    let fingerprint = sign::fingerprint(&key);
    if !want.matches(&key) {
        bail!(
            "{MANIFEST} is signed by {fingerprint}, not by the key given with --key ({}): \
             refusing a backup this server did not sign",
            want.describe()
        );
    }
    verify_signature(&key, &sig, json)?;
    Ok(fingerprint)
}

/// `--trust-unsigned` accepts a backup with no signature, never one whose
/// signature is bad or ignored: a signed backup is read only with `--key`.
/// A bad signature is named as such; a sound one still needs the key, and
/// the error does not name the signer (it may be a forger's key).
fn refuse_any_signature(dir: &Path, json: &[u8]) -> anyhow::Result<()> {
    let Some((key, sig)) = read_signature(dir)? else {
        return Ok(());
    };
    verify_signature(&key, &sig, json)?;
    bail!(
        "{}: the backup is signed: verify it with --key and the server key `backup` printed \
         (--trust-unsigned is only for a backup with no {MANIFEST_SIG})",
        dir.display()
    )
}

/// The public key and signature in `manifest.sig`, `None` without one.
fn read_signature(dir: &Path) -> anyhow::Result<Option<(ssh_key::PublicKey, String)>> {
    let text = match read_in(dir, Path::new(MANIFEST_SIG)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!("{}: {MANIFEST_SIG}: {e}", dir.display()),
    };
    let text = String::from_utf8_lossy(&text);
    let mut lines = text.lines();
    let (Some(key_line), Some(sig)) = (lines.next(), lines.next()) else {
        bail!("{MANIFEST_SIG} is malformed: the manifest was changed or damaged");
    };
    let key = sign::parse_public_key(key_line)
        .map_err(|_| anyhow::anyhow!("{MANIFEST_SIG} is malformed: no public key line"))?;
    Ok(Some((key, sig.to_string())))
}

/// `sig` is `key`'s signature of `json`.
fn verify_signature(key: &ssh_key::PublicKey, sig: &str, json: &[u8]) -> anyhow::Result<()> {
    let verifying = sign::verifying_key(&canonical_key_line(key))
        .map_err(|e| anyhow::anyhow!("{MANIFEST_SIG}: {e}"))?;
    let mut signed = SIG_CONTEXT.to_vec();
    signed.extend_from_slice(json);
    sign::verify_with(&verifying, &signed, sig.as_bytes()).map_err(|_| {
        anyhow::anyhow!(
            "{MANIFEST_SIG} does not match {MANIFEST}: the manifest was changed after it was signed"
        )
    })
}

fn parse_manifest(json: &[u8]) -> anyhow::Result<Manifest> {
    let manifest: Manifest =
        serde_json::from_slice(json).with_context(|| format!("{MANIFEST} does not parse"))?;
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

/// Open the regular file `rel` inside `root` for reading, following no
/// symbolic link on the way (`openat` with `O_NOFOLLOW` per component) and
/// refusing anything but a regular file: a FIFO, device or socket is never
/// opened, so reading a backup never blocks on one or touches a device.
pub fn open_in(root: &Path, rel: &Path) -> io::Result<File> {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd as _, FromRawFd as _};
    use std::os::unix::ffi::OsStrExt as _;

    let refuse = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what}, not a regular file: refused, not followed"),
        )
    };
    let parts: Vec<_> = rel.components().collect();
    if parts.is_empty() || parts.iter().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad path"));
    }
    let mut dir = File::open(root)?;
    for (i, part) in parts.iter().enumerate() {
        let name = CString::new(part.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
        let last = i + 1 == parts.len();
        // Look before opening: lstat-like, so nothing but a directory or a
        // regular file is ever opened.
        // SAFETY: fstatat on a descriptor we own, a valid C string and a
        // zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let kind = st.st_mode & libc::S_IFMT;
        let want = if last { libc::S_IFREG } else { libc::S_IFDIR };
        if kind != want {
            return Err(refuse(match kind {
                libc::S_IFLNK => "a symbolic link",
                libc::S_IFIFO => "a FIFO",
                libc::S_IFCHR | libc::S_IFBLK => "a device",
                libc::S_IFSOCK => "a socket",
                libc::S_IFDIR => "a directory",
                _ => "a special file",
            }));
        }
        let flags = libc::O_RDONLY
            | libc::O_NOFOLLOW
            | libc::O_CLOEXEC
            | libc::O_NONBLOCK
            | if last { 0 } else { libc::O_DIRECTORY };
        // SAFETY: openat on a descriptor we own and a valid C string; the
        // returned descriptor is owned by the File made from it.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            return Err(if err.raw_os_error() == Some(libc::ELOOP) {
                refuse("a symbolic link")
            } else {
                err
            });
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        // Swapped between the look and the open: check what was opened.
        let meta = file.metadata()?;
        if (last && !meta.file_type().is_file()) || (!last && !meta.is_dir()) {
            return Err(refuse("a file that changed kind"));
        }
        dir = file;
    }
    Ok(dir)
}

/// The bytes of the regular file `rel` inside `root` (see `open_in`).
pub fn read_in(root: &Path, rel: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_in(root, rel)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Everything under `root` that is neither a directory nor a regular file
/// (symbolic links, FIFOs, devices, sockets), relative to `root`. None of
/// them is followed.
pub fn walk_special(root: &Path) -> io::Result<Vec<(PathBuf, &'static str)>> {
    let mut found = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel_dir) = stack.pop() {
        for entry in std::fs::read_dir(root.join(&rel_dir))? {
            let entry = entry?;
            let rel = rel_dir.join(entry.file_name());
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(rel);
            } else if !kind.is_file() {
                use std::os::unix::fs::FileTypeExt as _;
                let what = if kind.is_symlink() {
                    "a symbolic link"
                } else if kind.is_fifo() {
                    "a FIFO"
                } else if kind.is_block_device() || kind.is_char_device() {
                    "a device"
                } else if kind.is_socket() {
                    "a socket"
                } else {
                    "a special file"
                };
                found.push((rel, what));
            }
        }
    }
    found.sort();
    Ok(found)
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
    fn open_in_follows_no_link_and_opens_no_special_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/file"), b"data").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("a/link")).unwrap();
        std::os::unix::fs::symlink(root.join("a/b"), root.join("a/dirlink")).unwrap();
        let fifo = std::ffi::CString::new(root.join("a/fifo").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(read_in(root, Path::new("a/b/file")).unwrap(), b"data");
        for bad in ["a/link", "a/dirlink/file", "a/fifo", "a/b"] {
            let err = open_in(root, Path::new(bad)).unwrap_err();
            assert!(
                err.to_string().contains("refused, not followed"),
                "{bad}: {err}"
            );
        }
        assert!(open_in(root, Path::new("../x")).is_err());
        let found = walk_special(root).unwrap();
        let names: Vec<_> = found.iter().map(|(p, _)| p.to_str().unwrap()).collect();
        assert_eq!(names, ["a/dirlink", "a/fifo", "a/link"]);
    }

    fn manifest_in(dir: &Path, key: &SigningKey) {
        let manifest = Manifest {
            format: FORMAT.into(),
            version: VERSION,
            started_at: "2026-12-05T00:00:00Z".into(),
            server_version: "test".into(),
            counts: Counts::default(),
            database: None,
            database_dump: None,
            database_elsewhere: None,
            repos: Vec::new(),
            files: Vec::new(),
        };
        write_manifest(dir, &manifest, key).unwrap();
    }

    #[test]
    fn a_manifest_reads_only_with_the_key_that_signed_it() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::generate(&dir.path().join("k"), "server", false).unwrap();
        let other = SigningKey::generate(&dir.path().join("o"), "other", false).unwrap();
        let backup = dir.path().join("b");
        std::fs::create_dir(&backup).unwrap();
        manifest_in(&backup, &key);
        for file in [MANIFEST, MANIFEST_SUM, MANIFEST_SIG] {
            assert_eq!(mode_of(&backup.join(file)).unwrap(), FILE_MODE, "{file}");
        }
        let by_line = Trust::Key(ExpectedKey::parse(&key.public_key_line()).unwrap());
        let by_fp = Trust::Key(ExpectedKey::parse(&key.fingerprint()).unwrap());
        for trust in [&by_line, &by_fp] {
            let (_, signer) = read_manifest(&backup, trust).unwrap();
            assert_eq!(signer, Signer::Verified(key.fingerprint()));
        }
        let wrong = Trust::Key(ExpectedKey::parse(&other.public_key_line()).unwrap());
        let err = read_manifest(&backup, &wrong).unwrap_err().to_string();
        assert!(err.contains("not by the key given with --key"), "{err}");
        // A signed backup is never read as unsigned, sound signature or not.
        let err = read_manifest(&backup, &Trust::Unsigned)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the backup is signed: verify it with --key"),
            "{err}"
        );

        // Re-sealed after a change: the checksum passes, the signature not.
        let mut json = std::fs::read(backup.join(MANIFEST)).unwrap();
        json.extend_from_slice(b" ");
        std::fs::write(backup.join(MANIFEST), &json).unwrap();
        std::fs::write(
            backup.join(MANIFEST_SUM),
            format!("{}  {MANIFEST}\n", sha256_hex(&json)),
        )
        .unwrap();
        for trust in [&by_fp, &Trust::Unsigned] {
            let err = read_manifest(&backup, trust).unwrap_err().to_string();
            assert!(err.contains("changed after it was signed"), "{err}");
        }

        // No signature: refused unless trusted unsigned.
        std::fs::remove_file(backup.join(MANIFEST_SIG)).unwrap();
        let err = read_manifest(&backup, &by_fp).unwrap_err().to_string();
        assert!(err.contains("not signed"), "{err}");
        assert!(read_manifest(&backup, &Trust::Unsigned).is_ok());
        assert!(ExpectedKey::parse("ssh-rsa AAAA").is_err());
    }

    #[test]
    fn a_key_file_inside_the_backup_is_refused_however_it_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::generate(&dir.path().join("k"), "server", false).unwrap();
        let backup = dir.path().join("b");
        std::fs::create_dir(&backup).unwrap();
        manifest_in(&backup, &key);
        let outside = dir.path().join("server.pub");
        std::fs::write(&outside, format!("{}\n", key.public_key_line())).unwrap();
        let link = dir.path().join("link.pub");
        std::os::unix::fs::symlink(backup.join(MANIFEST_SIG), &link).unwrap();
        let backup_link = dir.path().join("b-link");
        std::os::unix::fs::symlink(&backup, &backup_link).unwrap();
        let dotted = backup.join("sub/../").join(MANIFEST_SIG);
        std::fs::create_dir(backup.join("sub")).unwrap();
        for inside in [backup.join(MANIFEST_SIG), link, dotted] {
            for named in [&backup, &backup_link] {
                let err = ExpectedKey::for_backup(inside.to_str().unwrap(), named)
                    .unwrap_err()
                    .to_string();
                assert!(err.contains("is inside the backup"), "{inside:?}: {err}");
            }
        }
        let want = ExpectedKey::for_backup(outside.to_str().unwrap(), &backup).unwrap();
        assert_eq!(
            read_manifest(&backup, &Trust::Key(want)).unwrap().1,
            Signer::Verified(key.fingerprint())
        );
        assert!(ExpectedKey::for_backup(&key.fingerprint(), &backup).is_ok());
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
