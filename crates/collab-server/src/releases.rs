//! Release files on disk: `{releases_dir}/<repo>/<tag>/<file>`, each with a
//! metadata file (size, SHA-256, upload time, uploader) beside it. This
//! module owns the layout, the name rules and crash safety; it decides
//! nothing about access (that is `authz`) and does not look into git (the
//! verb checks that the tag exists).
//!
//! Layout, inside the directory of one release:
//! - `<file>`: the bytes, exactly as uploaded;
//! - `.<file>.meta`: a JSON [`ReleaseFile`], the record that the file exists
//!   (`.#<sha256 of the name>.meta` for names too long for that, see
//!   [`meta_name`]);
//! - `.tmp-<random>`: an upload (or a metadata file) being written.
//!
//! File names never start with `.`, so dotfiles are always ours. The tag
//! becomes one path segment: bytes outside `[A-Za-z0-9._-]` (and `%`) are
//! written `%XX`, so `release/1.0` is the directory `release%2F1.0`.
//!
//! Crash safety: an upload streams into a temporary file in the release's
//! own directory, which is fsynced, then the metadata is written (temporary
//! file, fsync, rename) and the data renamed into place, then the directory
//! is fsynced. A file is listed only when both it and its metadata exist, so
//! a crash at any point shows either the complete file or nothing. An
//! [`Upload`] that is dropped before [`Upload::finish`] (a dropped
//! connection, an oversized upload, a panic) removes its temporary file and
//! any directory it leaves empty. Temporary files left by a crashed server
//! are removed by the next upload into the same release. Every step that
//! looks at or changes a release directory runs under one process-wide lock;
//! the long part, streaming the bytes, does not.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// Longest encoded tag, in bytes (one path segment).
const MAX_SEGMENT: usize = 255;

/// Prefix of temporary files (data being uploaded, metadata being written).
const TMP_PREFIX: &str = ".tmp-";

/// Temporary files that an upload in this process is writing right now; the
/// lock around it serializes every change to a release directory.
static ACTIVE_UPLOADS: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<HashSet<PathBuf>>> {
    // A panic while holding the lock leaves nothing half-done that the next
    // holder could not cope with (every step is a single rename or remove).
    ACTIVE_UPLOADS.lock().unwrap_or_else(|e| e.into_inner())
}

/// One stored file of a release, as recorded in its metadata file and
/// listed to clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseFile {
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    pub uploaded_at: DateTime<Utc>,
    /// The principal that uploaded it.
    pub uploader: String,
}

/// A release: the files attached to one tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Release {
    pub tag: String,
    /// Sorted by name.
    pub files: Vec<ReleaseFile>,
}

impl Release {
    /// When the release was first uploaded to: its oldest file.
    pub fn created_at(&self) -> Option<DateTime<Utc>> {
        self.files.iter().map(|f| f.uploaded_at).min()
    }

    /// Total size of its files, in bytes.
    pub fn size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Why a release operation failed. Every variant but `Io` is the caller's
/// mistake and its message is safe to show; `Io` is logged, not shown.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("invalid file name '{0}': {rule}", rule = collab_proto::limits::FILE_NAME_RULE)]
    FileName(String),
    #[error("invalid tag name '{}'", .0.escape_default())]
    TagName(String),
    #[error("release {tag} already has a file {file}; delete it first")]
    Exists { tag: String, file: String },
    #[error("no release {0}")]
    NoRelease(String),
    #[error("release {tag} has no file {file}")]
    NoFile { tag: String, file: String },
    #[error("upload is larger than max_release_size ({limit} bytes); nothing was stored")]
    TooLarge { limit: u64 },
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// The file name rule is the client's too: one place decides it.
pub use collab_proto::limits::valid_file_name;

/// Whether `tag` is a name git accepts under `refs/tags/`, free of
/// invisible and text-direction characters (`collab_record::text`).
pub fn valid_tag_name(tag: &str) -> bool {
    !tag.is_empty()
        && !tag.chars().any(collab_record::text::is_hidden)
        && git2::Reference::is_valid_name(&collab_record::refs::tag_ref(tag))
        && encode_tag(tag).len() <= MAX_SEGMENT
}

/// The directory name for a tag: one segment, injective, never `.`-led.
fn encode_tag(tag: &str) -> String {
    let mut out = String::with_capacity(tag.len());
    for (i, b) in tag.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-') || (b == b'.' && i > 0);
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The tag a directory name stands for; `None` for anything `encode_tag`
/// would not have written.
fn decode_tag(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let tag = String::from_utf8(out).ok()?;
    (encode_tag(&tag) == segment).then_some(tag)
}

/// The name of `file`'s record: `.<file>.meta`, or, when that would pass
/// the 255-byte limit on a file name (a `file` of 250 bytes or more),
/// `.#<sha256 of file>.meta`. `#` never occurs in a file name, so the two
/// forms cannot collide; the record names its file, so it is still checked.
fn meta_name(file: &str) -> String {
    let plain = format!(".{file}.meta");
    if plain.len() <= MAX_SEGMENT {
        plain
    } else {
        format!(".#{}.meta", hex::encode(Sha256::digest(file.as_bytes())))
    }
}

/// fsync a directory, so that renames and removals in it are durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Write `bytes` to `dir/name` atomically: temporary file, fsync, rename.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{TMP_PREFIX}{:016x}", rand::random::<u64>()));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(name))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The release files of a server, under `releases_dir`.
#[derive(Debug, Clone)]
pub struct ReleaseStore {
    root: PathBuf,
}

impl ReleaseStore {
    pub fn new(releases_dir: impl Into<PathBuf>) -> Self {
        ReleaseStore {
            root: releases_dir.into(),
        }
    }

    /// The directory of one repository's releases. `repo` is the canonical
    /// repository name (`team/app.git`), already validated by `repos`.
    fn repo_dir(&self, repo: &str) -> io::Result<PathBuf> {
        if crate::repos::normalize_repo_name(repo).as_deref() != Ok(repo) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a canonical repository name: {repo}"),
            ));
        }
        Ok(self.root.join(repo))
    }

    fn release_dir(&self, repo: &str, tag: &str) -> Result<PathBuf, ReleaseError> {
        if !valid_tag_name(tag) {
            return Err(ReleaseError::TagName(tag.to_string()));
        }
        Ok(self.repo_dir(repo)?.join(encode_tag(tag)))
    }

    /// Every release of `repo`, newest first (by first upload), with its
    /// files. A repository with none has an empty list.
    pub fn list(&self, repo: &str) -> Result<Vec<Release>, ReleaseError> {
        let dir = self.repo_dir(repo)?;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut releases = Vec::new();
        for entry in entries {
            let entry = entry?;
            let Some(tag) = entry.file_name().to_str().and_then(decode_tag) else {
                continue;
            };
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let files = read_release_dir(&entry.path())?;
            if !files.is_empty() {
                releases.push(Release { tag, files });
            }
        }
        releases.sort_by(|a, b| {
            b.created_at()
                .cmp(&a.created_at())
                .then_with(|| a.tag.cmp(&b.tag))
        });
        Ok(releases)
    }

    /// Open a stored file for reading, with its record. The open handle
    /// stays valid if the file is deleted while it is being read.
    pub fn open(
        &self,
        repo: &str,
        tag: &str,
        file: &str,
    ) -> Result<(File, ReleaseFile), ReleaseError> {
        if !valid_file_name(file) {
            return Err(ReleaseError::FileName(file.to_string()));
        }
        let dir = self.release_dir(repo, tag)?;
        let no_file = || ReleaseError::NoFile {
            tag: tag.to_string(),
            file: file.to_string(),
        };
        let record = match read_meta(&dir, file) {
            Ok(Some(r)) => r,
            Ok(None) => return Err(no_file()),
            Err(e) => return Err(e.into()),
        };
        match File::open(dir.join(file)) {
            Ok(f) => Ok((f, record)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(no_file()),
            Err(e) => Err(e.into()),
        }
    }

    /// Start storing `file` in release `tag` of `repo`: at most `limit`
    /// bytes, refused if the release already has a file of that name. The
    /// caller writes the bytes with [`Upload::write`] and ends with
    /// [`Upload::finish`]; dropping the upload instead leaves nothing.
    pub fn begin_upload(
        &self,
        repo: &str,
        tag: &str,
        file: &str,
        limit: u64,
    ) -> Result<Upload, ReleaseError> {
        if !valid_file_name(file) {
            return Err(ReleaseError::FileName(file.to_string()));
        }
        let dir = self.release_dir(repo, tag)?;
        let mut active = lock();
        let active = active.get_or_insert_with(HashSet::new);
        if dir.join(file).symlink_metadata().is_ok() {
            return Err(ReleaseError::Exists {
                tag: tag.to_string(),
                file: file.to_string(),
            });
        }
        fs::create_dir_all(&dir)?;
        remove_stale_temporaries(&dir, active);
        let tmp = dir.join(format!("{TMP_PREFIX}{:016x}", rand::random::<u64>()));
        let out = match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => f,
            Err(e) => {
                remove_empty_dirs(&self.root, &dir);
                return Err(e.into());
            }
        };
        active.insert(tmp.clone());
        Ok(Upload {
            root: self.root.clone(),
            dir,
            tmp,
            out: Some(out),
            tag: tag.to_string(),
            file: file.to_string(),
            hasher: Sha256::new(),
            size: 0,
            limit,
            finished: false,
        })
    }

    /// Delete one file of a release, or (with `file` = None) the whole
    /// release. Returns the names of the deleted files.
    pub fn delete(
        &self,
        repo: &str,
        tag: &str,
        file: Option<&str>,
    ) -> Result<Vec<String>, ReleaseError> {
        if let Some(name) = file {
            if !valid_file_name(name) {
                return Err(ReleaseError::FileName(name.to_string()));
            }
        }
        let dir = self.release_dir(repo, tag)?;
        let _guard = lock();
        let present = match read_release_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            other => other?,
        };
        if present.is_empty() {
            return Err(ReleaseError::NoRelease(tag.to_string()));
        }
        let doomed: Vec<String> = match file {
            Some(name) => {
                if !present.iter().any(|f| f.name == name) {
                    return Err(ReleaseError::NoFile {
                        tag: tag.to_string(),
                        file: name.to_string(),
                    });
                }
                vec![name.to_string()]
            }
            None => present.into_iter().map(|f| f.name).collect(),
        };
        for name in &doomed {
            // Data first: a crash in between leaves a record without data,
            // which is never listed.
            fs::remove_file(dir.join(name))?;
            match fs::remove_file(dir.join(meta_name(name))) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        sync_dir(&dir)?;
        if file.is_none() {
            // Records whose data is gone (left by a crash) go too.
            for entry in fs::read_dir(&dir)?.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(".meta") && name.starts_with('.') {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        remove_empty_dirs(&self.root, &dir);
        Ok(doomed)
    }
}

/// The listed files of one release directory, sorted by name: those with
/// both data and a readable record whose size matches.
fn read_release_dir(dir: &Path) -> io::Result<Vec<ReleaseFile>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !valid_file_name(&name) || !entry.file_type()?.is_file() {
            continue;
        }
        match read_meta(dir, &name)? {
            Some(record) if record.size == entry.metadata()?.len() => files.push(record),
            Some(_) => tracing::warn!(
                "release file {}: size differs from its record",
                entry.path().display()
            ),
            None => {}
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// The record of `file` in `dir`; `None` if there is none or it is not ours.
fn read_meta(dir: &Path, file: &str) -> io::Result<Option<ReleaseFile>> {
    let bytes = match fs::read(dir.join(meta_name(file))) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match serde_json::from_slice::<ReleaseFile>(&bytes) {
        Ok(record) if record.name == file => Ok(Some(record)),
        _ => {
            tracing::warn!(
                "release record {}: unreadable",
                dir.join(meta_name(file)).display()
            );
            Ok(None)
        }
    }
}

/// Remove temporary files in `dir` that no upload in this process owns:
/// leftovers of a server that stopped mid-upload.
fn remove_stale_temporaries(dir: &Path, active: &HashSet<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) && !active.contains(&path) {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Remove `dir` and its parents up to (not including) `root` while they are
/// empty. Call with the lock held.
fn remove_empty_dirs(root: &Path, dir: &Path) {
    let mut current = Some(dir);
    while let Some(d) = current {
        if d == root || !d.starts_with(root) || fs::remove_dir(d).is_err() {
            break;
        }
        current = d.parent();
    }
}

/// A file being uploaded. Dropping it without `finish` removes everything
/// it wrote.
#[derive(Debug)]
pub struct Upload {
    root: PathBuf,
    dir: PathBuf,
    tmp: PathBuf,
    out: Option<File>,
    tag: String,
    file: String,
    hasher: Sha256,
    size: u64,
    limit: u64,
    finished: bool,
}

impl Upload {
    /// Append bytes. Fails with `TooLarge` once the total would pass the
    /// limit (then drop the upload).
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), ReleaseError> {
        let size = self.size + chunk.len() as u64;
        if size > self.limit {
            return Err(ReleaseError::TooLarge { limit: self.limit });
        }
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| io::Error::other("upload already closed"))?;
        out.write_all(chunk)?;
        self.hasher.update(chunk);
        self.size = size;
        Ok(())
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Make the upload durable and visible: fsync the data, write the
    /// record, rename the data into place, fsync the directory.
    pub fn finish(
        mut self,
        uploader: &str,
        now: DateTime<Utc>,
    ) -> Result<ReleaseFile, ReleaseError> {
        let out = self
            .out
            .take()
            .ok_or_else(|| io::Error::other("upload already closed"))?;
        out.sync_all()?;
        drop(out);
        let record = ReleaseFile {
            name: self.file.clone(),
            size: self.size,
            sha256: hex::encode(self.hasher.clone().finalize()),
            uploaded_at: now,
            uploader: uploader.to_string(),
        };
        let target = self.dir.join(&self.file);
        let _guard = lock();
        // Another upload of the same name may have finished first.
        if target.symlink_metadata().is_ok() {
            return Err(ReleaseError::Exists {
                tag: self.tag.clone(),
                file: self.file.clone(),
            });
        }
        let json = serde_json::to_vec(&record).map_err(io::Error::other)?;
        write_atomic(&self.dir, &meta_name(&self.file), &json)?;
        fs::rename(&self.tmp, &target)?;
        self.finished = true;
        sync_dir(&self.dir)?;
        Ok(record)
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.out = None;
        let mut active = lock();
        if let Some(set) = active.as_mut() {
            set.remove(&self.tmp);
        }
        if !self.finished {
            let _ = fs::remove_file(&self.tmp);
            remove_empty_dirs(&self.root, &self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn store() -> (tempfile::TempDir, ReleaseStore) {
        let tmp = tempfile::tempdir().unwrap();
        let store = ReleaseStore::new(tmp.path().join("releases"));
        (tmp, store)
    }

    fn upload(store: &ReleaseStore, tag: &str, file: &str, bytes: &[u8]) -> ReleaseFile {
        let mut up = store.begin_upload("r.git", tag, file, 1 << 20).unwrap();
        up.write(bytes).unwrap();
        up.finish("alice", now()).unwrap()
    }

    /// Every file under `dir`, relative, sorted (directories excluded).
    fn files_under(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                } else {
                    out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn upload_list_open_delete() {
        let (_t, store) = store();
        let rec = upload(&store, "v1.0", "app.tar.gz", b"hello");
        assert_eq!(rec.size, 5);
        assert_eq!(
            rec.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        upload(&store, "v1.0", "app.sha256", b"x");
        let list = store.list("r.git").unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].tag, "v1.0");
        let names: Vec<_> = list[0].files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["app.sha256", "app.tar.gz"]);
        let (mut f, meta) = store.open("r.git", "v1.0", "app.tar.gz").unwrap();
        let mut body = String::new();
        io::Read::read_to_string(&mut f, &mut body).unwrap();
        assert_eq!((body.as_str(), meta), ("hello", rec));

        assert_eq!(
            store.delete("r.git", "v1.0", Some("app.sha256")).unwrap(),
            ["app.sha256"]
        );
        assert!(matches!(
            store.open("r.git", "v1.0", "app.sha256"),
            Err(ReleaseError::NoFile { .. })
        ));
        assert_eq!(store.delete("r.git", "v1.0", None).unwrap(), ["app.tar.gz"]);
        assert!(store.list("r.git").unwrap().is_empty());
        assert!(matches!(
            store.delete("r.git", "v1.0", None),
            Err(ReleaseError::NoRelease(_))
        ));
        // Nothing left, not even the empty directories.
        assert!(!store.root.join("r.git").exists());
    }

    #[test]
    fn an_existing_file_is_not_replaced() {
        let (_t, store) = store();
        upload(&store, "v1", "a.bin", b"first");
        assert!(matches!(
            store.begin_upload("r.git", "v1", "a.bin", 100),
            Err(ReleaseError::Exists { .. })
        ));
        // Two uploads racing for one name: the second to finish loses and
        // leaves nothing behind.
        let mut one = store.begin_upload("r.git", "v2", "b.bin", 100).unwrap();
        let mut two = store.begin_upload("r.git", "v2", "b.bin", 100).unwrap();
        one.write(b"one").unwrap();
        two.write(b"two").unwrap();
        one.finish("alice", now()).unwrap();
        assert!(matches!(
            two.finish("bob", now()),
            Err(ReleaseError::Exists { .. })
        ));
        let (_, meta) = store.open("r.git", "v2", "b.bin").unwrap();
        assert_eq!(meta.uploader, "alice");
        assert_eq!(
            files_under(&store.root),
            [
                "r.git/v1/.a.bin.meta",
                "r.git/v1/a.bin",
                "r.git/v2/.b.bin.meta",
                "r.git/v2/b.bin"
            ]
        );
    }

    #[test]
    fn a_dropped_or_oversized_upload_leaves_nothing() {
        let (_t, store) = store();
        let mut up = store
            .begin_upload("team/app.git", "v1", "a.bin", 10)
            .unwrap();
        up.write(b"0123456789").unwrap();
        assert!(!files_under(&store.root).is_empty());
        assert!(matches!(
            up.write(b"x"),
            Err(ReleaseError::TooLarge { limit: 10 })
        ));
        drop(up);
        assert!(files_under(&store.root).is_empty());
        assert!(!store.root.join("team").exists());

        // A dropped upload next to a finished file removes only itself.
        let mut kept = store.begin_upload("r.git", "v1", "kept", 10).unwrap();
        kept.write(b"k").unwrap();
        kept.finish("alice", now()).unwrap();
        let mut gone = store.begin_upload("r.git", "v1", "gone", 10).unwrap();
        gone.write(b"g").unwrap();
        drop(gone);
        assert_eq!(
            files_under(&store.root),
            ["r.git/v1/.kept.meta", "r.git/v1/kept"]
        );
    }

    #[test]
    fn crash_leftovers_are_never_listed_and_are_cleaned_up() {
        let (_t, store) = store();
        upload(&store, "v1", "a", b"a");
        let dir = store.root.join("r.git").join("v1");
        // A crash after the record was written, before the rename.
        fs::write(dir.join(meta_name("b")), br#"{"name":"b"}"#).unwrap();
        fs::write(dir.join(".tmp-0000000000000001"), b"partial").unwrap();
        let names: Vec<_> = store.list("r.git").unwrap()[0]
            .files
            .iter()
            .map(|f| f.name.clone())
            .collect();
        assert_eq!(names, ["a"]);
        // The next upload into the release sweeps the stale temporary file.
        upload(&store, "v1", "c", b"c");
        assert!(!dir.join(".tmp-0000000000000001").exists());
        store.delete("r.git", "v1", None).unwrap();
        assert!(files_under(&store.root).is_empty());
    }

    #[test]
    fn names_are_checked() {
        for bad in ["", ".", "..", ".hidden", "-rf", "a/b", "a b", "a\0b", "é"] {
            assert!(!valid_file_name(bad), "{bad:?}");
        }
        for good in ["app.tar.gz", "x", "v1.0+build_2-linux", "SHA256SUMS"] {
            assert!(valid_file_name(good), "{good:?}");
        }
        for bad in ["", "a..b", "a b", ".v1", "v1.lock", "a/", "a\nb"] {
            assert!(!valid_tag_name(bad), "{bad:?}");
        }
        assert!(valid_tag_name("release/1.0"));
        let (_t, store) = store();
        assert!(matches!(
            store.begin_upload("r.git", "a..b", "f", 1),
            Err(ReleaseError::TagName(_))
        ));
        assert!(matches!(
            store.begin_upload("../x", "v1", "f", 1),
            Err(ReleaseError::Io(_))
        ));
        assert!(matches!(
            store.begin_upload("r.git", "v1", "../f", 1),
            Err(ReleaseError::FileName(_))
        ));
        assert!(files_under(&store.root).is_empty());
    }

    #[test]
    fn names_up_to_255_bytes_are_stored_listed_and_deleted() {
        let (_t, store) = store();
        let names: Vec<String> = [1, 248, 249, 250, 254, 255]
            .iter()
            .map(|&n| format!("{n}{}", "x".repeat(n - n.to_string().len())))
            .collect();
        for name in &names {
            assert_eq!(name.len().to_string(), name.trim_end_matches('x'));
            upload(&store, "v1", name, name.as_bytes());
        }
        let listed: Vec<String> = store.list("r.git").unwrap()[0]
            .files
            .iter()
            .map(|f| f.name.clone())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(listed, sorted);
        for entry in files_under(&store.root) {
            let last = entry.rsplit('/').next().unwrap();
            assert!(last.len() <= 255, "{entry}");
        }
        let (mut reader, _) = store.open("r.git", "v1", &names[5]).unwrap();
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut reader, &mut bytes).unwrap();
        assert_eq!(bytes, names[5].as_bytes());
        store.delete("r.git", "v1", Some(&names[5])).unwrap();
        store.delete("r.git", "v1", None).unwrap();
        assert!(files_under(&store.root).is_empty());
    }

    #[test]
    fn tags_with_slashes_get_one_directory() {
        let (_t, store) = store();
        upload(&store, "release/1.0", "a", b"a");
        assert!(store
            .root
            .join("r.git")
            .join("release%2F1.0")
            .join("a")
            .is_file());
        assert_eq!(store.list("r.git").unwrap()[0].tag, "release/1.0");
    }

    proptest! {
        #[test]
        fn tag_encoding_round_trips(tag in "\\PC{1,40}") {
            let encoded = encode_tag(&tag);
            prop_assert!(!encoded.starts_with('.'));
            prop_assert!(!encoded.contains('/'));
            prop_assert_eq!(decode_tag(&encoded), Some(tag));
        }
    }
}
